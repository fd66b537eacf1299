//! What the runtime keeps per child, counted: the live activations, the
//! names reserved and not yet cataloged, the deliveries and resumes in
//! flight and the external run ids. Every count but two goes back to zero
//! once the children settle: the cached catalogs (one per live parent) and
//! the external run ids, which are kept for the runtime's life so that a
//! run id is never reused (one per external start, never pruned).
//! Read-only; for hosts' diagnostics and the tests that hold it to that.

use crate::runtime::{SubagentRuntime, lock};

/// How much per-child state a runtime holds at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeFootprint {
    /// Live activations.
    pub activations: usize,
    /// Child names reserved by starts whose catalog entry is not written yet.
    pub reserved_names: usize,
    /// User requests being delivered.
    pub requests: usize,
    /// Children being resumed.
    pub resuming: usize,
    /// Ids of external runs this runtime started.
    pub external_runs: usize,
    /// Catalog folds cached for live parents.
    pub cached_catalogs: usize,
}

impl SubagentRuntime {
    /// The per-child state this runtime holds now.
    pub fn footprint(&self) -> RuntimeFootprint {
        let inner = &self.inner;
        RuntimeFootprint {
            activations: inner.activations.len(),
            reserved_names: inner.names.len(),
            requests: lock(&inner.requests).len(),
            resuming: lock(&inner.resuming).len(),
            external_runs: lock(&inner.run_ids).len(),
            cached_catalogs: lock(&inner.catalogs).len(),
        }
    }
}
