//! `dsh resume [tree]` (issue 19): the real binary over the offline demo.
//! After a whole run, every member had nothing left to do: each is listed
//! as idle, nothing runs, and no log gains a turn. After a run SIGKILLed
//! half-way, `dsh resume` brings the tree back and runs what it had left
//! until the whole tree is done, and exits cleanly. Every wait is bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::{BOUND, Scratch, dir_bytes, text, wait_bounded};

#[test]
fn after_a_whole_run_every_member_is_idle_and_nothing_runs() {
    let scratch = Scratch::new();
    scratch.demo();
    let before = scratch.listing();
    let resumed = scratch.dsh(&["resume"], &[]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    let out = text(&resumed.stdout);
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("resume: ")).collect();
    assert!(!lines.is_empty(), "{out}");
    assert!(
        lines.iter().all(|l| l.ends_with(": idle: nothing to do")),
        "{out}"
    );
    // Nothing ran: no log grew by a turn (a resume may only add its own
    // bookkeeping, never a model request).
    let after = scratch.listing();
    for (path, bytes) in &before {
        let now = &after[path];
        let turns = |b: &[u8]| text(b).matches("\"turn/start\"").count();
        assert_eq!(turns(bytes), turns(now), "{}", path.display());
    }
}

#[test]
fn a_tree_killed_half_way_is_resumed_and_finishes() {
    let whole = {
        let scratch = Scratch::new();
        scratch.demo();
        dir_bytes(&scratch.sessions())
    };
    let scratch = Scratch::new();
    let dir = scratch.sessions();
    let mut child = scratch.spawn(&["run"], &[]);
    let deadline = Instant::now() + BOUND;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if dir_bytes(&dir) >= whole / 2 {
            child.kill().unwrap();
            break;
        }
        assert!(Instant::now() < deadline, "the run did not reach half-way");
        std::thread::sleep(Duration::from_micros(50));
    }
    let _ = wait_bounded(child, BOUND, "the killed dsh run");
    let resumed = scratch.dsh(&["resume"], &[]);
    assert!(
        resumed.status.success(),
        "{}\n{}",
        text(&resumed.stdout),
        text(&resumed.stderr)
    );
    // A second resume finds the tree done.
    let again = scratch.dsh(&["resume"], &[]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    let out = text(&again.stdout);
    assert!(
        out.lines()
            .filter(|l| l.starts_with("resume: ") && !l.starts_with("resume: lead"))
            .all(|l| l.ends_with(": idle: nothing to do")),
        "{out}"
    );
}
