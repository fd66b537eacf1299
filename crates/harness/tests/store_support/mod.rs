//! Fixtures shared by the store test files (`store_kit`, `store_drops`,
//! `store_faults`, `crash`): ids, headers and events, and the answers a test
//! expects from a store.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{self, BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use dsh_core::session::{EventPayload, SessionEvent, SessionHeader, TurnStart};
use dsh_core::{LoadedSession, SessionLog, StoreError};

pub use dsh_test_support::sid;

/// A group-commit window no test could wait out: a call held for it fails
/// `bounded`.
pub const FOREVER: Duration = Duration::from_secs(3_600);

/// A JSONL store over `dir` with `durability` and a group-commit `window`.
pub fn windowed(
    dir: &Path,
    durability: dsh_core::Durability,
    window: Duration,
) -> dsh_harness::store::JsonlStore {
    dsh_harness::store::JsonlStore::with_group_window(dir, durability, window).unwrap()
}

/// Run the test `name` of this test binary as a child process, with the
/// environment variable `var` naming `dir`; its stdout, line by line.
pub fn spawn_self(name: &str, var: &str, dir: &Path) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .args(["--test-threads", "1"])
        .env(var, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, lines)
}

pub fn header(id: &str) -> SessionHeader {
    SessionHeader::new(sid(id), "/work/project")
}

/// A small event carrying `seq`.
pub fn turn(seq: u64) -> SessionEvent {
    SessionEvent {
        seq,
        time: seq,
        payload: EventPayload::TurnStart(TurnStart { turn: seq }),
    }
}

/// The OS error inside a [`StoreError::Io`].
pub fn io_source(err: &StoreError) -> &io::Error {
    match err {
        StoreError::Io { source, .. } => source,
        other => panic!("expected an I/O error, got {other:?}"),
    }
}

/// Assert that an open was refused as held in this process.
pub fn expect_busy(opened: Result<(LoadedSession, Arc<dyn SessionLog>), StoreError>, when: &str) {
    match opened {
        Err(StoreError::Busy(_)) => {}
        Err(err) => panic!("expected Busy {when}, got {err}"),
        Ok(_) => panic!("expected Busy {when}, got an open log"),
    }
}

/// The pid of a process that has exited (and been reaped).
pub fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}
