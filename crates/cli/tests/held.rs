//! `dsh send` to a tree another process holds (another `dsh` working in
//! it: the store locks every live log): with `--wait 0` it refuses at
//! once in one line naming the holder's pid; with a wait it says, in one
//! line, that it waits and for whom, and delivers once the holder lets go.
//! `dsh send lead` waits the same way before it resumes the lead.
//! The holder here is this test process, which locks the tree's root log
//! as a running `dsh` would.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::time::Duration;

use support::{Scratch, text};

/// The most recent tree's root session id, as `dsh agents` lists it.
fn root(scratch: &Scratch) -> String {
    let agents = text(&scratch.dsh(&["agents"], &[]).stdout);
    agents
        .lines()
        .find_map(|line| line.strip_prefix("tree "))
        .and_then(|line| line.split_whitespace().next())
        .unwrap_or_else(|| panic!("no tree in {agents}"))
        .to_owned()
}

#[test]
fn a_send_to_a_held_tree_names_the_holder_or_waits_for_it() {
    let scratch = Scratch::new();
    scratch.demo();
    let log = scratch.sessions().join(format!("{}.jsonl", root(&scratch)));
    let held = std::fs::OpenOptions::new().read(true).open(&log).unwrap();
    held.try_lock().unwrap();
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

    let mut send = scratch.spawn(&["send", "--wait", "600", "researcher", "hi"], &[]);
    let mut stderr = BufReader::new(send.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert_eq!(
        line,
        format!(
            "dsh: `researcher` is held by another process (pid {pid}); waiting up to 600 s for it\n"
        )
    );
    held.unlock().unwrap();
    drop(held);
    let output = support::wait_bounded(send, Duration::from_secs(120), "dsh send");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(output.status.success(), "{rest}");
    assert_eq!(rest, "");
    assert!(
        text(&output.stdout).starts_with("researcher: "),
        "{}",
        text(&output.stdout)
    );
}
