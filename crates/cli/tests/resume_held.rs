//! `dsh resume` on a tree another process holds (another `dsh` working in
//! it: the store locks every live log), as `dsh send` (`held.rs`): with
//! `--wait 0` it refuses at once in one line naming the holder's pid; with
//! a wait it says, in one line, that it waits and for whom, and resumes
//! the tree once the holder lets go. The holder here is this test process,
//! which locks the tree's root log as a running `dsh` would.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{Scratch, text};

#[test]
fn a_resume_of_a_held_tree_names_the_holder_or_waits_for_it() {
    let scratch = Scratch::new();
    scratch.demo();
    let root = scratch.root_id();
    let held = scratch.hold_root();
    let pid = std::process::id();

    let err = scratch.refused(&["resume", "--wait", "0"], &[], 1);
    assert_eq!(
        err,
        format!(
            "dsh: `{root}` is held by another process (pid {pid}); try again when it is done\n"
        )
    );

    let (line, output, rest) = scratch.first_line_then(&["resume", "--wait", "600", &root], || {
        held.unlock().unwrap();
    });
    assert_eq!(
        line,
        format!(
            "dsh: `{root}` is held by another process (pid {pid}); waiting up to 600 s for it\n"
        )
    );
    assert!(output.status.success(), "{rest}");
    assert_eq!(rest, "");
    let out = text(&output.stdout);
    assert!(
        out.lines()
            .any(|line| line.ends_with(": idle: nothing to do")),
        "{out}"
    );
}
