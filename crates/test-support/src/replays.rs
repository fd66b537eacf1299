//! The replay check every suite that leaves sessions behind ends with
//! (B59): each session, driven again from its own log through the turn
//! machine, writes the same events. One call at the end of a test: over a
//! log in memory ([`assert_replays`]), a store ([`assert_store_replays`])
//! or a `dsh` process's JSONL session directory ([`assert_dir_replays`]).
//! Each panics with the first divergence (session, seq, expected, got).

#![allow(clippy::expect_used, reason = "a test helper: a failure panics")]

use std::path::Path;

use dsh_core::{Durability, SessionEvent, SessionHeader, SessionStore};
use dsh_harness::JsonlStore;
use dsh_harness::replay::{Verdict, replay_session, replay_tree};

/// `events`, the log of the session `header` heads, replays identical.
pub fn assert_replays(header: &SessionHeader, events: &[SessionEvent]) {
    if let Verdict::Diverged(divergence) = replay_session(header, events) {
        panic!("replay: {divergence}");
    }
}

/// Every session in `store` replays identical.
///
/// # Cancel safety
/// Reads only.
pub async fn assert_store_replays(store: &dyn SessionStore) {
    let replays = replay_tree(store, None)
        .await
        .expect("the store's sessions load");
    for replay in replays {
        if let Verdict::Diverged(divergence) = replay.verdict {
            panic!("replay: {divergence}");
        }
    }
}

/// Every session in the JSONL session directory `dir` (a `dsh` process
/// test's) replays identical; nothing when `dir` does not exist.
pub fn assert_dir_replays(dir: &Path) {
    if !dir.is_dir() {
        return;
    }
    let store = JsonlStore::new(dir, Durability::None).expect("the session directory opens");
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(assert_store_replays(&store));
}
