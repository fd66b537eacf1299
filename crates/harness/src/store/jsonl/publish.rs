//! Publication of a new log: the hidden temporary files a seeded create
//! writes before it links them into place, and [`Published`], a log on
//! disk not yet handed to its caller, which withdraws it if the create is
//! dropped. This module must never leave a published log that nobody owns.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dsh_core::{SessionId, StoreError};

use super::fsync;
use super::io_error;
use super::slot::{Held, LockedFile, WriterSlot};

/// A freshly published log not yet handed to its caller. If it is dropped
/// instead (the create's future was dropped), it withdraws the log while
/// still holding it: a cancelled create leaves no log behind.
pub(super) struct Published {
    // Declared first: the log is withdrawn while `held` still locks it.
    withdraw: Withdraw,
    pub(super) held: Arc<Held>,
    /// Whether the log still has to be forced to stable storage (under
    /// [`Durability::Grouped`](dsh_core::Durability::Grouped), by the store's committer) before it counts.
    unsynced: bool,
}

impl Published {
    /// The just-published log of `file` at `path` in `dir`, claimed by
    /// `slot`; `unsynced` when a committer still has to force it.
    pub(super) fn new(
        file: LockedFile,
        slot: WriterSlot,
        dir: &Path,
        path: &Path,
        unsynced: bool,
    ) -> Self {
        let sync_dir = slot.shared.committer.syncs_withdrawal();
        Self {
            withdraw: Withdraw {
                armed: true,
                path: path.to_path_buf(),
                dir: dir.to_path_buf(),
                sync_dir,
            },
            held: Arc::new(Held::new(file, slot)),
            unsynced,
        }
    }

    /// Hand the log to its caller once it is durable: under
    /// [`Durability::Grouped`](dsh_core::Durability::Grouped) this waits for the committer round that
    /// forces the file and its directory entry. A failed sync withdraws the
    /// log and is returned.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped while waiting, the log is withdrawn (the
    /// committer's sync of the removed file still runs, holding the id).
    pub(super) async fn keep(self, path: &Path) -> Result<Arc<Held>, StoreError> {
        if self.unsynced
            && let Some(group) = self.held.committer().group()
        {
            // On failure, `self` is dropped here and withdraws the log.
            group
                .sync(Arc::clone(&self.held), path, true, |_| {})
                .await?;
        }
        let Self {
            mut withdraw, held, ..
        } = self;
        withdraw.armed = false;
        Ok(held)
    }
}

/// Removes a published log on drop unless disarmed.
struct Withdraw {
    armed: bool,
    path: PathBuf,
    dir: PathBuf,
    /// Whether the store's committer forces a withdrawal.
    sync_dir: bool,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Nobody will ever learn of this log, and the `Held` dropped right
        // after this still locks and claims it, so nobody else touched it.
        // No caller is left to tell of a failure: the future was dropped.
        match fs::remove_file(&self.path) {
            Ok(()) => {
                // See `Committer::syncs_withdrawal`.
                if self.sync_dir
                    && let Err(err) = fsync::dir(&self.dir)
                {
                    tracing::warn!(dir = %self.dir.display(), error = %err, "could not sync the withdrawal of an abandoned session log");
                }
            }
            Err(err) => {
                tracing::warn!(path = %self.path.display(), error = %err, "could not withdraw a session log whose create was abandoned");
            }
        }
    }
}

/// A temporary file removed when dropped.
pub(super) struct TempFile {
    pub(super) path: PathBuf,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Err(err) = fs::remove_file(&self.path)
            && err.kind() != io::ErrorKind::NotFound
        {
            // Left behind, it is swept when a store next opens the directory.
            tracing::warn!(path = %self.path.display(), error = %err, "could not remove a temporary session file");
        }
    }
}

/// The suffix of every temporary file: `.<id>.<pid>-<nanos>-<n>.tmp`.
pub(super) const TEMP_SUFFIX: &str = ".tmp";

/// A fresh name for a hidden temporary file next to the log of `id`,
/// `.<id>.<pid>-<nanos>-<n>.tmp`, so that a sweep can tell which process
/// wrote it; every temporary file of the store is named
/// here.
pub(super) fn next_temp_path(dir: &Path, id: &SessionId) -> std::path::PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{id}.{pid}-{nanos}-{n}{TEMP_SUFFIX}"))
}

/// Create a fresh hidden temporary file next to the log of `id`, named so
/// that a sweep can tell which process wrote it.
pub(super) fn create_temp(dir: &Path, id: &SessionId) -> Result<(TempFile, File), StoreError> {
    let mut attempts = 0;
    loop {
        let path = next_temp_path(dir, id);
        match OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => return Ok((TempFile { path }, file)),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists && attempts < 16 => {
                attempts += 1;
            }
            Err(source) => return Err(io_error(&path, source)),
        }
    }
}
