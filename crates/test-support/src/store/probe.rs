//! [`ProbeStore`]: a store that records which of its own methods a call
//! reached, defaulted ones included, and [`call_every_method`], which calls
//! each method of the trait once. Together they check that a wrapper
//! forwards every method to the store it wraps, so that no override (a
//! batched read, say) is lost behind the trait's default.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dsh_core::{
    KindEvents, LoadedSession, SessionEvent, SessionHeader, SessionId, SessionLog, SessionStore,
    StoreError,
};

use super::lock;

/// A store holding nothing whose every method notes its name and fails
/// (or returns nothing). Clones share what was noted.
#[derive(Debug, Clone, Default)]
pub struct ProbeStore {
    reached: Arc<Mutex<BTreeSet<&'static str>>>,
}

impl ProbeStore {
    /// Every method of [`SessionStore`], by name.
    pub const METHODS: [&'static str; 12] = [
        "create",
        "open",
        "load",
        "load_many",
        "load_kind_many",
        "header",
        "header_many",
        "exists",
        "list",
        "flush",
        "remove",
        "remove_torn",
    ];

    /// A probe that has noted nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The methods of this probe that a call reached so far.
    pub fn reached(&self) -> BTreeSet<&'static str> {
        lock(&self.reached).clone()
    }

    /// The methods of [`ProbeStore::METHODS`] no call reached.
    pub fn missed(&self) -> Vec<&'static str> {
        let reached = self.reached();
        Self::METHODS
            .into_iter()
            .filter(|method| !reached.contains(method))
            .collect()
    }

    fn note(&self, method: &'static str, id: &SessionId) -> StoreError {
        lock(&self.reached).insert(method);
        StoreError::NotFound(id.clone())
    }

    fn note_many<T>(&self, method: &'static str, ids: &[SessionId]) -> Vec<Result<T, StoreError>> {
        lock(&self.reached).insert(method);
        ids.iter()
            .map(|id| Err(StoreError::NotFound(id.clone())))
            .collect()
    }
}

#[async_trait]
impl SessionStore for ProbeStore {
    async fn create(
        &self,
        header: &SessionHeader,
        _: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        Err(self.note("create", &header.id))
    }

    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        Err(self.note("open", id))
    }

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        Err(self.note("load", id))
    }

    async fn load_many(&self, ids: &[SessionId]) -> Vec<Result<LoadedSession, StoreError>> {
        self.note_many("load_many", ids)
    }

    async fn load_kind_many(
        &self,
        ids: &[SessionId],
        _: &[&str],
    ) -> Vec<Result<KindEvents, StoreError>> {
        self.note_many("load_kind_many", ids)
    }

    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        Err(self.note("header", id))
    }

    async fn header_many(&self, ids: &[SessionId]) -> Vec<Result<SessionHeader, StoreError>> {
        self.note_many("header_many", ids)
    }

    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.note("exists", id);
        Ok(false)
    }

    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        lock(&self.reached).insert("list");
        Ok(Vec::new())
    }

    async fn flush(&self) -> Result<(), StoreError> {
        lock(&self.reached).insert("flush");
        Ok(())
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        Err(self.note("remove", id))
    }

    async fn remove_torn(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.note("remove_torn", id);
        Ok(false)
    }
}

/// Call every method of `store` once, on one made-up id, ignoring the
/// results (a probe underneath fails them all).
///
/// # Cancel safety
/// Not cancel safe: a drop between two calls leaves the later methods
/// uncalled, and the wrapper's own state as those calls left it.
pub async fn call_every_method(store: &dyn SessionStore) {
    let id = SessionId::new("probe").unwrap_or_else(|_| SessionId::generate());
    let ids = std::slice::from_ref(&id);
    let header = SessionHeader::new(id.clone(), "/");
    let _ = store.create(&header, &[]).await;
    let _ = store.open(&id).await;
    let _ = store.load(&id).await;
    let _ = store.load_many(ids).await;
    let _ = store.load_kind_many(ids, &["x/y"]).await;
    let _ = store.header(&id).await;
    let _ = store.header_many(ids).await;
    let _ = store.exists(&id).await;
    let _ = store.list().await;
    let _ = store.flush().await;
    let _ = store.remove(&id).await;
    let _ = store.remove_torn(&id).await;
}

#[cfg(test)]
mod tests {
    use super::super::{FaultStore, GatedStore, RecordingStore, SharedStore};
    use super::*;

    /// Every wrapper of this crate reaches every method of the store it
    /// wraps, its defaulted ones included.
    #[tokio::test]
    async fn every_wrapper_forwards_every_method() {
        let bare = ProbeStore::new();
        call_every_method(&bare).await;
        assert!(bare.missed().is_empty(), "{:?}", bare.missed());
        let wrappers: Vec<(&str, ProbeStore, Box<dyn SessionStore>)> = {
            let [fault, gated, recording, shared] = std::array::from_fn(|_| ProbeStore::new());
            vec![
                (
                    "FaultStore",
                    fault.clone(),
                    Box::new(FaultStore::new(fault)),
                ),
                (
                    "GatedStore",
                    gated.clone(),
                    Box::new(GatedStore::new(gated)),
                ),
                (
                    "RecordingStore",
                    recording.clone(),
                    Box::new(RecordingStore::new(recording, |id| {
                        std::path::PathBuf::from(id.as_str())
                    })),
                ),
                (
                    "SharedStore",
                    shared.clone(),
                    Box::new(SharedStore(Arc::new(shared))),
                ),
            ]
        };
        for (name, probe, wrapper) in wrappers {
            call_every_method(&*wrapper).await;
            assert!(
                probe.missed().is_empty(),
                "{name} missed {:?}",
                probe.missed()
            );
        }
    }
}
