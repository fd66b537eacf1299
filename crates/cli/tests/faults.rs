//! A disk that fills while `dsh` works (B56): the real binary over a real
//! tiny tmpfs (tests run as root here; where a tmpfs cannot be mounted the
//! test fails under CI and elsewhere says why on stderr and returns). Whatever write the disk refuses, `dsh run`
//! and `dsh send` exit non-zero with one line naming the OS error, never
//! hang (every process is bounded, a hang fails the test), and `dsh send`
//! never prints an answer that is not the reply to its own message (it
//! prints that reply, or nothing, and the error).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_test_support::skip_or_fail;
use support::{Scratch, Tmpfs, text};

const ENOSPC: &str = "No space left on device";

/// A scratch whose session directory is a tmpfs of `size`, or `None` (and
/// the reason given to [`skip_or_fail`]) where none can be mounted.
fn on_tmpfs(size: &str) -> Option<(Scratch, Tmpfs)> {
    let scratch = Scratch::new();
    match Tmpfs::mount(&scratch.sessions(), size) {
        Ok(tmpfs) => Some((scratch, tmpfs)),
        Err(reason) => {
            skip_or_fail(&format!("cannot mount a tmpfs here: {reason}"));
            None
        }
    }
}

/// The output failed cleanly: exit 1, one line on stderr naming ENOSPC.
fn failed_on_full_disk(output: &std::process::Output, what: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{what}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{what}: {stderr:?}");
    assert!(
        stderr.starts_with("dsh: ") && stderr.contains(ENOSPC),
        "{what}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
}

#[test]
fn a_run_on_a_disk_that_fills_exits_non_zero_naming_the_os_error_at_every_size() {
    // From a disk too small for the lead's first turn up to one that holds
    // the whole demo: the refused write falls at a different place each time.
    let mut failed = 0;
    let mut succeeded = 0;
    for pages in 1..=12 {
        let size = format!("{}k", pages * 4);
        let Some((scratch, _tmpfs)) = on_tmpfs(&size) else {
            return;
        };
        let run = scratch.dsh(&["run"], &[]);
        if run.status.success() {
            assert_eq!(text(&run.stderr), "", "{size}");
            assert!(text(&run.stdout).contains("\nlead: Summary:"), "{size}");
            succeeded += 1;
        } else {
            failed_on_full_disk(&run, &format!("dsh run on {size}"));
            assert!(!text(&run.stdout).contains("lead: Summary:"), "{size}");
            failed += 1;
            // What was written still lists.
            let agents = scratch.dsh(&["agents"], &[]);
            assert!(
                agents.status.success() || agents.status.code() == Some(3),
                "{size}: {}",
                text(&agents.stderr)
            );
        }
    }
    println!("{failed} runs failed on a full disk, {succeeded} fit");
    assert!(failed >= 2, "the smallest disks must refuse a write");
}

#[test]
fn a_send_on_a_full_disk_fails_and_never_prints_an_old_answer() {
    let Some((scratch, tmpfs)) = on_tmpfs("256k") else {
        return;
    };
    scratch.demo();
    let previous = text(
        &scratch
            .dsh(&["send", "researcher", "First question?"], &[])
            .stdout,
    );
    assert!(previous.contains("First question?"), "{previous}");
    tmpfs.fill();
    // A short message may fit in the slack of a log's last page, a long one
    // cannot; either way the reply printed is to this message or nothing.
    for (round, message) in ["Second question?".to_owned(), "Long question? ".repeat(600)]
        .iter()
        .enumerate()
    {
        let send = scratch.dsh(&["send", "researcher", message], &[]);
        let stdout = text(&send.stdout);
        println!(
            "round {round}: {:?} {}",
            send.status.code(),
            text(&send.stderr).trim()
        );
        if send.status.success() {
            assert!(stdout.contains(message.trim()), "round {round}: {stdout}");
        } else {
            failed_on_full_disk(&send, &format!("send round {round}"));
            // Nothing, or the reply to this message (its turn was recorded;
            // a later write, stopping the tree, failed).
            assert!(
                stdout.is_empty() || stdout.contains(message.trim()),
                "round {round}: printed {stdout:?}"
            );
        }
        assert!(
            !stdout.contains("First question?"),
            "round {round} printed the old answer"
        );
        if round == 1 {
            assert!(!send.status.success(), "a 9 KB message fit on a full disk");
        }
    }
}

#[test]
fn with_v_the_agents_diagnostics_reach_stderr_before_the_one_line() {
    let Some((scratch, _tmpfs)) = on_tmpfs("12k") else {
        return;
    };
    let run = scratch.dsh(&["run", "-v"], &[]);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines.len() > 1, "-v printed no diagnostics: {stderr}");
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| l.contains("WARN") || l.contains("ERROR")),
        "{stderr}"
    );
    assert!(
        lines[lines.len() - 1].starts_with("dsh: ") && stderr.contains(ENOSPC),
        "{stderr}"
    );
}
