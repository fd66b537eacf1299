//! The directory syncer of a store whose creates force their log before
//! they return ([`Durability::TurnBoundary`], [`Durability::EveryEvent`]):
//! one dedicated thread that forces the store's directory while the
//! creating thread forces the new file, so that both wait for the same
//! journal commit instead of one after the other (forced in sequence, the
//! directory's `fsync` finds its change already committed and still sends
//! the device a cache flush of its own). Requests that arrive while a
//! directory sync runs are covered by the next one, which answers them
//! all. It is a thread of its own, not the blocking pool, because the
//! create waiting for it runs on the blocking pool: with one blocking
//! thread, a directory sync queued behind its own waiter would never run.
//! This module must never answer a request with a sync that started
//! before the request was made.
//!
//! [`Durability::TurnBoundary`]: dsh_core::Durability::TurnBoundary
//! [`Durability::EveryEvent`]: dsh_core::Durability::EveryEvent

use std::path::PathBuf;
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use dsh_core::StoreError;

use super::fsync;
use super::io_error;

/// What requesters and the syncer thread share.
#[derive(Default)]
struct Queue {
    /// Who waits for a directory sync that starts after they asked.
    waiting: Vec<SyncSender<Result<(), StoreError>>>,
    /// The store is gone: answer what is left and end.
    stop: bool,
}

struct Inner {
    dir: PathBuf,
    queue: Mutex<Queue>,
    wake: Condvar,
}

impl Inner {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // Every critical section leaves the queue consistent.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The directory syncer of one store.
pub(super) struct DirSyncer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DirSyncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirSyncer")
            .field("dir", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

impl DirSyncer {
    /// Start the syncer of `dir`.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub(super) fn start(dir: PathBuf) -> Result<Self, StoreError> {
        let inner = Arc::new(Inner {
            dir,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        });
        let syncer = Arc::clone(&inner);
        std::thread::Builder::new()
            .name("dsh-dir-sync".into())
            .spawn(move || run(&syncer))
            .map_err(|source| io_error(&inner.dir, source))?;
        Ok(Self { inner })
    }

    /// Force the directory (on the syncer thread) and, meanwhile, run
    /// `sync_file` here; return once both have. Blocking: call it where a
    /// create forces its file, on the blocking pool.
    ///
    /// # Errors
    /// The file's failure if it failed, else the directory's; or that the
    /// syncer is gone.
    pub(super) fn sync_with(
        &self,
        sync_file: impl FnOnce() -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let (tell, hear) = mpsc::sync_channel(1);
        {
            let mut queue = self.inner.queue();
            queue.waiting.push(tell);
        }
        self.inner.wake.notify_one();
        let file = sync_file();
        let dir = hear.recv().unwrap_or_else(|_| Err(self.gone()));
        file.and(dir)
    }

    fn gone(&self) -> StoreError {
        io_error(
            &self.inner.dir,
            std::io::Error::other("the directory syncer ended before syncing"),
        )
    }
}

impl Drop for DirSyncer {
    fn drop(&mut self) {
        self.inner.queue().stop = true;
        self.inner.wake.notify_one();
    }
}

/// The syncer loop: take everyone waiting, force the directory once,
/// answer them all; end once the store is gone and nobody waits.
fn run(inner: &Inner) {
    loop {
        let waiting = {
            let mut queue = inner.queue();
            while queue.waiting.is_empty() && !queue.stop {
                queue = inner
                    .wake
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if queue.waiting.is_empty() {
                return;
            }
            std::mem::take(&mut queue.waiting)
        };
        let result = fsync::dir(&inner.dir);
        for tell in waiting {
            // A waiter that is gone asked for nothing more.
            let _ = tell.send(result.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_hears_the_file_and_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let syncer = DirSyncer::start(dir.path().to_path_buf()).unwrap();
        assert!(syncer.sync_with(|| Ok(())).is_ok());
        // The file's failure wins.
        let failed = io_error(dir.path(), std::io::Error::other("file"));
        let err = syncer.sync_with(|| Err(failed.clone())).unwrap_err();
        assert_eq!(err.to_string(), failed.to_string());
        // Many at once, each answered.
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| assert!(syncer.sync_with(|| Ok(())).is_ok()));
            }
        });
    }

    #[test]
    fn a_directory_that_cannot_be_forced_fails_its_requests() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("gone");
        let syncer = DirSyncer::start(missing.clone()).unwrap();
        let err = syncer.sync_with(|| Ok(())).unwrap_err();
        let StoreError::Io { path, .. } = &err else {
            panic!("expected an I/O error, got {err:?}");
        };
        assert_eq!(path, &missing);
    }
}
