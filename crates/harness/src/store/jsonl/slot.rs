//! Who holds a log: the in-process writer claim ([`WriterSlot`]), the
//! exclusive OS file lock ([`LockedFile`]) and their one owner, [`Held`].
//! Every blocking closure that touches a held file owns a share of its
//! `Held`, so the claim lives exactly as long as the last descriptor,
//! whoever dropped which future. This module must never hand out a file
//! whose lock it does not hold.

use std::fs::{self, File, TryLockError};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use dsh_core::{SessionId, StoreError};
use tokio::sync::watch;

use super::fsync;
use super::{Shared, io_error, open_error};

/// A reservation in the in-process writer registry. Dropping it releases the
/// id and then tells the log's [`JsonlLog::close`](super::JsonlLog::close) that the log is free.
#[derive(Debug)]
pub(super) struct WriterSlot {
    pub(super) shared: Arc<Shared>,
    pub(super) id: SessionId,
    pub(super) released: watch::Sender<bool>,
}

impl WriterSlot {
    /// Reserve `id`, or `None` when a writer in this process holds it (or is
    /// creating, opening or removing it).
    pub(super) fn claim(shared: &Arc<Shared>, id: &SessionId) -> Option<Self> {
        shared.writers().insert(id.clone()).then(|| Self {
            shared: Arc::clone(shared),
            id: id.clone(),
            released: watch::Sender::new(false),
        })
    }
}

impl Drop for WriterSlot {
    fn drop(&mut self) {
        self.shared.writers().remove(&self.id);
        self.released.send_replace(true);
    }
}

/// The one owner of a held log: its locked file and its registry claim.
/// Shared (in an `Arc`) by the handle and every blocking operation in
/// flight; the last share to go closes the file (releasing the OS lock) and
/// then the claim.
#[derive(Debug)]
pub(super) struct Held {
    // Declared first: the file is unlocked and closed before the claim is
    // released, so an in-process opener never meets a lock still held.
    pub(super) file: LockedFile,
    pub(super) slot: WriterSlot,
    /// What the write-behind committer knows of it (under
    /// [`Durability::Batched`](dsh_core::Durability::Batched); idle otherwise).
    pub(super) mark: Arc<Mark>,
}

impl Held {
    /// The owner of `file`, claimed by `slot`.
    pub(super) fn new(file: LockedFile, slot: WriterSlot) -> Self {
        Self {
            file,
            slot,
            mark: Arc::default(),
        }
    }

    /// Force the file's data (and the metadata needed to read it back);
    /// `path` names it.
    pub(super) fn sync_data(&self, path: &Path) -> io::Result<()> {
        fsync::data(&self.file, path)
    }

    /// What the write-behind committer knows of this log.
    pub(super) fn mark(&self) -> &Arc<Mark> {
        &self.mark
    }
}

/// A file whose exclusive advisory lock (`flock`) this process holds.
/// Dropping it unlocks the file explicitly before closing it: closing alone
/// releases the lock only when no other descriptor shares the open file,
/// and a child process forked by any thread (a `Command` spawn, say) shares
/// every descriptor until it execs, so a plain close could leave the lock
/// held after the store has released the log.
#[derive(Debug)]
pub(super) struct LockedFile(File);

impl LockedFile {
    /// Take the exclusive lock on `file`, or report the log locked.
    pub(super) fn lock(file: File, id: &SessionId, path: &Path) -> Result<Self, StoreError> {
        match file.try_lock() {
            Ok(()) => Ok(Self(file)),
            Err(TryLockError::WouldBlock) => Err(StoreError::Locked(id.clone())),
            Err(TryLockError::Error(source)) => Err(io_error(path, source)),
        }
    }

    /// Try to lock `file` for a sweep: `None` when someone else holds it.
    pub(super) fn try_new(file: File) -> Option<Self> {
        file.try_lock().ok().map(|()| Self(file))
    }
}

impl std::ops::Deref for LockedFile {
    type Target = File;

    fn deref(&self) -> &File {
        &self.0
    }
}

impl Drop for LockedFile {
    fn drop(&mut self) {
        // If this fails the close that follows still releases the lock once
        // no forked child shares the file; there is nobody to tell.
        let _ = self.0.unlock();
    }
}

/// After locking an open `file`, make sure `path` still names it: a log
/// removed (or removed and re-created) between open and lock is not the log.
pub(super) fn still_linked(file: &File, id: &SessionId, path: &Path) -> Result<(), StoreError> {
    let held = file.metadata().map_err(|source| io_error(path, source))?;
    let named = fs::metadata(path).map_err(|source| open_error(id, path, source))?;
    if same_file(&held, &named) {
        Ok(())
    } else {
        Err(StoreError::NotFound(id.clone()))
    }
}

#[cfg(unix)]
fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_: &fs::Metadata, _: &fs::Metadata) -> bool {
    true
}

/// What the write-behind committer
/// ([`Durability::Batched`](dsh_core::Durability::Batched)) knows of one log: whether it is marked dirty, how
/// many writes it has had and how many of them are on stable storage, and
/// the failure of a sync of it, if any.
#[derive(Debug, Default)]
pub(super) struct Mark {
    /// In the committer's next round already (so a write need not queue it).
    pub(super) queued: AtomicBool,
    /// Writes handed to the OS so far (a create counts as one).
    pub(super) written: AtomicU64,
    /// Of those, how many a finished round forced.
    pub(super) synced: AtomicU64,
    /// The failure of a sync of this log: it poisons the log.
    pub(super) failed: OnceLock<StoreError>,
}

impl Mark {
    /// The failure of a background sync of this log, if one failed.
    pub(super) fn failed(&self) -> Option<&StoreError> {
        self.failed.get()
    }

    /// Whether every write so far is on stable storage.
    pub(super) fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst) >= self.written.load(Ordering::SeqCst)
    }
}
