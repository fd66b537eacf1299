//! Session stores: where an agent's durable log lives. [`JsonlStore`] is the
//! embedded default, one append-only JSON-lines file per session;
//! [`MemoryStore`] keeps logs in memory for tests and benchmarks. Both
//! implement [`dsh_core::SessionStore`] with the same contract (one writer per
//! log, contiguous seqs, all-or-nothing create); no store here may ever
//! reorder, skip, rewrite or invent an event.

pub mod jsonl;
pub mod memory;

pub use jsonl::{JsonlLog, JsonlStore};
pub use memory::{MemoryLog, MemoryStore};

use dsh_core::{SessionEvent, SessionId, StoreError};

/// Check that `events` carry the seqs `next, next + 1, ...`.
pub(crate) fn check_contiguous(
    id: &SessionId,
    next: u64,
    events: &[SessionEvent],
) -> Result<(), StoreError> {
    for (expected, event) in (next..).zip(events) {
        if event.seq != expected {
            return Err(StoreError::OutOfSequence {
                id: id.clone(),
                expected,
                got: event.seq,
            });
        }
    }
    Ok(())
}
