//! What the runtime keeps per child, counted: the live activations, the
//! names reserved and not yet cataloged, the deliveries and resumes in
//! flight, the parents whose starts wait to publish and the live external
//! run ids. Every count but the cached catalogs
//! and name hints (one per live parent) goes back to zero once the children settle, so a
//! long-lived runtime does not grow with the number of children it ran.
//! Read-only; for hosts' diagnostics and the tests that hold it to that.

use crate::runtime::SubagentRuntime;

/// How much per-child state a runtime holds at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeFootprint {
    /// Live activations.
    pub activations: usize,
    /// Child names reserved by starts whose catalog entry is not written yet.
    pub reserved_names: usize,
    /// User requests and lost notices being delivered.
    pub requests: usize,
    /// Children being resumed.
    pub resuming: usize,
    /// Parents whose starts hold a place in their catalog order now.
    pub publishing: usize,
    /// Ids of external runs this runtime started.
    pub external_runs: usize,
    /// Catalog folds cached for live parents.
    pub cached_catalogs: usize,
    /// Parents whose next default name (`agent-N`) is remembered: at most
    /// those with a cached catalog.
    pub name_hints: usize,
}

impl SubagentRuntime {
    /// The per-child state this runtime holds now.
    pub fn footprint(&self) -> RuntimeFootprint {
        RuntimeFootprint {
            activations: self.activations().len(),
            reserved_names: self.catalogs().reserved_names(),
            requests: self.requests().len() + self.notices().len(),
            resuming: self.resume_gates().len(),
            publishing: self.publications().len(),
            external_runs: self.run_ids().len(),
            cached_catalogs: self.catalogs().len(),
            name_hints: self.catalogs().name_hints(),
        }
    }
}
