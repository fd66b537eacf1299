//! `dsh resume [tree]` (issue 19): the real binary over the offline demo.
//! After a whole run, every member had nothing left to do: each is listed
//! as idle, nothing runs, and no log gains a turn. After a run SIGKILLed
//! half-way (the test fails if no attempt's kill lands inside the run),
//! `dsh resume` brings the tree back and runs what it had left until the
//! whole tree is done, and exits cleanly, keeping every line the logs held
//! when the run died, once (`dsh_test_support::acknowledged`). Every wait
//! is bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_test_support::acknowledged::OnDisk;
use support::{Scratch, dir_bytes, kill_once_written, text};

/// Runs started before one is killed half-way; the test fails if every
/// one finished first.
const ATTEMPTS: usize = 3;

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
    let scratch = (0..ATTEMPTS)
        .find_map(|_| {
            let scratch = Scratch::new();
            kill_once_written(&scratch, &["run"], whole / 2).then_some(scratch)
        })
        .unwrap_or_else(|| panic!("none of {ATTEMPTS} kills landed inside a run"));
    let acked = OnDisk::read(&scratch.sessions());
    assert!(
        acked.held().accepted > 0,
        "the kill left no accepted message"
    );
    let resumed = scratch.dsh(&["resume"], &[]);
    assert!(
        resumed.status.success(),
        "{}\n{}",
        text(&resumed.stdout),
        text(&resumed.stderr)
    );
    let lost = acked.lost_in(&OnDisk::read(&scratch.sessions()));
    assert!(lost.is_empty(), "{}", lost.join("\n"));
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
