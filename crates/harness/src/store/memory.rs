//! The in-memory session store: the [`SessionStore`] contract without a disk,
//! for tests, benchmarks and ephemeral hosts. Each log is a header and its
//! events (in chunks, so an append never copies the log) behind a mutex of
//! its own, in a map behind one shared
//! mutex; a log's writer holds its entry, so an append takes only that
//! log's lock and finds it without a lookup. It never touches the file
//! system and never hands out a second writer for a log.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use dsh_core::{
    LoadedSession, SessionEvent, SessionHeader, SessionId, SessionLog, SessionStore, StoreError,
};

use super::check_contiguous;
use crate::chunked::Chunked;

/// One log held in memory.
#[derive(Debug)]
struct Entry {
    header: SessionHeader,
    events: Chunked<SessionEvent>,
    /// Whether a [`MemoryLog`] currently holds the log.
    writer: bool,
}

/// One log, shared by the store's map and its writer.
type Held = Arc<Mutex<Entry>>;

/// Every log by id. Lock order: the map, then an entry.
type Logs = Arc<Mutex<BTreeMap<SessionId, Held>>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the map and its entries consistent, so
    // a panic elsewhere while holding a lock does not invalidate them.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A [`SessionStore`] that keeps every log in memory. Clones share the same
/// logs; nothing survives the last clone.
///
/// # Cancel safety
/// Every method of the store and of its [`MemoryLog`] does all its work in
/// its first poll and never awaits: a future dropped before that poll did
/// nothing, one polled once has finished.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    logs: Logs,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

/// The append handle of one log in a [`MemoryStore`]; dropping or closing
/// it releases the log.
#[derive(Debug)]
pub struct MemoryLog {
    id: SessionId,
    /// The log it writes (which the store's map holds too).
    entry: Held,
    /// Set once the handle has let go of the log (closed).
    released: AtomicBool,
}

impl MemoryLog {
    fn new(id: SessionId, entry: Held) -> Self {
        Self {
            id,
            entry,
            released: AtomicBool::new(false),
        }
    }

    /// Let go of the log, once: a later writer's claim is never undone.
    fn release(&self) {
        if !self.released.swap(true, Ordering::SeqCst) {
            lock(&self.entry).writer = false;
        }
    }
}

impl Drop for MemoryLog {
    fn drop(&mut self) {
        self.release();
    }
}

#[async_trait]
impl SessionLog for MemoryLog {
    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError> {
        // The entry cannot leave the store while this handle holds it
        // (remove refuses a held log).
        let mut entry = lock(&self.entry);
        if self.released.load(Ordering::SeqCst) {
            return Err(StoreError::Closed(self.id.clone()));
        }
        check_contiguous(&self.id, entry.events.len() as u64, events)?;
        entry.events.extend_from_slice(events);
        Ok(())
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        if self.released.load(Ordering::SeqCst) {
            return Err(StoreError::Closed(self.id.clone()));
        }
        Ok(())
    }

    async fn close(&self) {
        self.release();
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        let id = header.id.clone();
        check_contiguous(&id, 0, seed)?;
        let mut logs = lock(&self.logs);
        // One walk down the map to find the id's place and fill it.
        let std::collections::btree_map::Entry::Vacant(place) = logs.entry(id.clone()) else {
            return Err(StoreError::Exists(id));
        };
        let entry = Arc::new(Mutex::new(Entry {
            header: header.clone(),
            events: Chunked::from(seed.to_vec()),
            writer: true,
        }));
        place.insert(Arc::clone(&entry));
        Ok(Arc::new(MemoryLog::new(id, entry)))
    }

    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        let logs = lock(&self.logs);
        let held = logs
            .get(id)
            .ok_or_else(|| StoreError::NotFound(id.clone()))?;
        let mut entry = lock(held);
        if entry.writer {
            return Err(StoreError::Busy(id.clone()));
        }
        entry.writer = true;
        let loaded = LoadedSession {
            header: entry.header.clone(),
            events: entry.events.to_vec(),
            torn_tail: None,
        };
        drop(entry);
        let log = MemoryLog::new(id.clone(), Arc::clone(held));
        Ok((loaded, Arc::new(log)))
    }

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        let logs = lock(&self.logs);
        let entry = lock(
            logs.get(id)
                .ok_or_else(|| StoreError::NotFound(id.clone()))?,
        );
        Ok(LoadedSession {
            header: entry.header.clone(),
            events: entry.events.to_vec(),
            torn_tail: None,
        })
    }

    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        lock(&self.logs)
            .get(id)
            .map(|entry| lock(entry).header.clone())
            .ok_or_else(|| StoreError::NotFound(id.clone()))
    }

    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        Ok(lock(&self.logs).contains_key(id))
    }

    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        Ok(lock(&self.logs).keys().cloned().collect())
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        let mut logs = lock(&self.logs);
        match logs.get(id) {
            None => Err(StoreError::NotFound(id.clone())),
            Some(entry) if lock(entry).writer => Err(StoreError::Busy(id.clone())),
            Some(_) => {
                logs.remove(id);
                Ok(())
            }
        }
    }
}
