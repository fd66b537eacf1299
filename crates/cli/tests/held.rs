//! `dsh send` to a tree another process holds (another `dsh` working in
//! it: the store locks every live log): with `--wait 0` it refuses at
//! once in one line naming the holder's pid; with a wait it says, in one
//! line, that it waits and for whom, and delivers once the holder lets go.
//! `dsh send lead` waits the same way before it resumes the lead.
//! The holder here is this test process, which locks the tree's root log
//! as a running `dsh` would.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{Scratch, text};

#[test]
fn a_send_to_a_held_tree_names_the_holder_or_waits_for_it() {
    let scratch = Scratch::new();
    scratch.demo();
    let held = scratch.hold_root();
    let pid = std::process::id();

    let err = scratch.refused(&["send", "--wait", "0", "researcher", "hi"], &[], 1);
    assert_eq!(
        err,
        format!(
            "dsh: `researcher` is held by another process (pid {pid}); try again when it is done\n"
        )
    );

    // The lead's conversation waits for it too.
    let err = scratch.refused(&["send", "--wait", "0", "lead", "hi"], &[], 1);
    assert_eq!(
        err,
        format!("dsh: `lead` is held by another process (pid {pid}); try again when it is done\n")
    );

    let (line, output, rest) =
        scratch.first_line_then(&["send", "--wait", "600", "researcher", "hi"], || {
            held.unlock().unwrap();
        });
    assert_eq!(
        line,
        format!(
            "dsh: `researcher` is held by another process (pid {pid}); waiting up to 600 s for it\n"
        )
    );
    assert!(output.status.success(), "{rest}");
    assert_eq!(rest, "");
    assert!(
        text(&output.stdout).starts_with("researcher: "),
        "{}",
        text(&output.stdout)
    );
}
