//! Fixtures shared by the store test files (`store_kit`, `store_drops`,
//! `store_faults`, `crash`): ids, headers and events, and the answers a test
//! expects from a store.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::sync::Arc;

use dsh_core::session::{EventPayload, SessionEvent, SessionHeader, TurnStart};
use dsh_core::{LoadedSession, SessionLog, StoreError};

pub use dsh_test_support::sid;

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
