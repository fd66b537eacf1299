//! [`SharedStore`]: a shared `Arc<dyn SessionStore>` as a store value, so
//! the other wrappers can wrap a store chosen at run time.

use std::fmt;
use std::sync::Arc;

use dsh_core::{SessionStore, StoreLayer};

/// A shared store as a store value: every call goes to the `Arc` it holds,
/// so [`FaultStore`](super::FaultStore), [`GatedStore`](super::GatedStore) and [`RecordingStore`](super::RecordingStore) can wrap a store
/// whose type is only known at run time.
#[derive(Clone)]
pub struct SharedStore(pub Arc<dyn SessionStore>);

impl fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedStore").finish_non_exhaustive()
    }
}

impl StoreLayer for SharedStore {
    fn wrapped(&self) -> &dyn SessionStore {
        &*self.0
    }
}
