//! No orphans when the parent dies (issue 16, field run item 6): a parent
//! process (this test binary re-executed, with a runtime and an ACP child
//! whose agent ignores EOF and SIGTERM) is SIGKILLed mid-turn, and the
//! agent must be gone from the process table within a bound. Without
//! `PR_SET_PDEATHSIG` the agent lives on under init, since nothing of the
//! parent is left to stop it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// Set in the re-executed parent: it starts the child, prints its mark and
/// waits to be killed.
const PARENT_VAR: &str = "DSH_ACP_ORPHAN_PARENT";

/// The re-executed parent's body; a no-op in a normal test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_parent() {
    if std::env::var_os(PARENT_VAR).is_none() {
        return;
    }
    let peers = peers();
    let world = world(vec![quick(peers.rogue(&["--ignore-eof", "--ignore-term"]))]).await;
    let _activation = world.start(world.spec("acp", "say started; hang")).await;
    let running = world.processes_once(1).await;
    assert_eq!(running.len(), 1, "{running:?}");
    println!("ORPHAN_MARK={}", world.mark);
    // Keep the world (and its tempdir) alive until this process is killed.
    tokio::time::sleep(BOUND).await;
    panic!("the orphan parent was not killed");
}

#[test]
fn a_sigkilled_parent_leaves_no_agent_behind() {
    let mut parent = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "orphan_parent",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PARENT_VAR, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = parent.stdout.take().unwrap();
    let mark = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        // libtest may print the test's name on the same line first.
        .find_map(|line| {
            line.split_once("ORPHAN_MARK=")
                .map(|(_, mark)| mark.trim().to_owned())
        });
    let Some(mark) = mark else {
        let _ = parent.kill();
        panic!(
            "the parent ended without starting its child: {:?}",
            parent.wait()
        );
    };
    assert_eq!(marked_processes(&mark).len(), 1, "the agent is running");

    parent.kill().unwrap();
    parent.wait().unwrap();
    let started = Instant::now();
    let mut left = marked_processes(&mark);
    while !left.is_empty() && started.elapsed() < BOUND {
        std::thread::sleep(Duration::from_millis(20));
        left = marked_processes(&mark);
    }
    eprintln!(
        "agent gone {:?} after its parent's SIGKILL",
        started.elapsed()
    );
    // Never leave a stray agent, even when the test fails.
    for process in &left {
        if let Some(pid) = rustix::process::Pid::from_raw(process.pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    assert!(left.is_empty(), "the agent outlived its parent: {left:?}");
}
