//! Session-store wrappers for fault, drop and crash tests, one per file.
//! Each wraps any [`SessionStore`](dsh_core::SessionStore) as a
//! [`StoreLayer`](dsh_core::StoreLayer), so every method it does not change
//! reaches the store it wraps, and they stack
//! (`FaultStore::new(GatedStore::new(JsonlStore::new(..)?))`):
//!
//! - [`FaultStore`] fails the k-th call of an operation with a chosen OS
//!   error (`ENOSPC`, `EIO`, `EACCES`, ...) wrapped as [`StoreError::Io`](dsh_core::StoreError::Io),
//!   counted per store or per log, and can stop the world after the k-th
//!   write, as if the process had died there.
//! - [`GatedStore`] holds a call at a named point (before or after the inner
//!   call) until the test releases it, and tells the test that the call got
//!   there, so a test can poll a future to that await and drop it.
//! - [`RecordingStore`] records every write with the file lengths around
//!   it, so a crash test can rebuild the directory as a crash at any byte of
//!   any write would have left it, and check that it reopens.
//!
//! - [`SharedStore`] turns a shared `Arc<dyn SessionStore>` back into a
//!   store value, so the wrappers above can wrap a store chosen at run time
//!   (what a test world does).
//!
//! - [`ProbeStore`] records which of its own methods a call reached, so a
//!   test can check that a wrapper forwards every method of the trait.
//!
//! Neither ever changes what the inner store writes: an injected failure
//! happens *instead of* the inner call, never after it, so whatever the
//! inner store holds is exactly what it acknowledged.

mod fault;
mod gated;
mod probe;
mod recording;
mod shared;

use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

pub use fault::{Fault, FaultStore};
pub use gated::{Gate, GatedStore, Point};
pub use probe::{ProbeStore, call_every_method};
pub use recording::{CrashPoint, Finals, RecordingStore, Write};
pub use shared::SharedStore;

/// A store operation, as the wrappers count and gate it. `Load` covers
/// [`SessionStore::load`](dsh_core::SessionStore::load), `header`, and each id of `load_many`,
/// `load_kind_many` and `header_many`; `list`, `exists` and `flush` are
/// never counted, failed or gated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`SessionStore::create`](dsh_core::SessionStore::create). A write.
    Create,
    /// [`SessionStore::open`](dsh_core::SessionStore::open).
    Open,
    /// [`SessionStore::load`](dsh_core::SessionStore::load), `header`, and each id of the `_many` reads.
    Load,
    /// [`SessionLog::append`](dsh_core::SessionLog::append). A write.
    Append,
    /// [`SessionLog::checkpoint`](dsh_core::SessionLog::checkpoint).
    Checkpoint,
    /// [`SessionStore::remove`](dsh_core::SessionStore::remove). A write.
    Remove,
    /// [`SessionLog::close`](dsh_core::SessionLog::close): it returns nothing, so it can be gated and is
    /// counted, but a [`FaultStore`] rule on it is refused.
    Close,
}

impl Op {
    /// Whether the operation changes what the store holds.
    pub fn is_write(self) -> bool {
        matches!(self, Self::Create | Self::Append | Self::Remove)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::Create => "create",
            Self::Open => "open",
            Self::Load => "load",
            Self::Append => "append",
            Self::Checkpoint => "checkpoint",
            Self::Remove => "remove",
            Self::Close => "close",
        };
        f.write_str(name)
    }
}

const OPS: usize = 7;

/// Lock `mutex`, whatever panicked while holding it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the state consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
