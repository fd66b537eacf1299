//! The append handle of a held log, [`JsonlLog`]: one `write` of whole
//! lines per append, the fsyncs its store's durability asks of it, and
//! the poisoning that a failed write or sync leaves. A failed append cuts
//! the file back to where its batch began. This module must never write
//! to a file it does not hold the lock for.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use dsh_core::{SessionEvent, SessionId, SessionLog, StoreError};
use tokio::sync::watch;

use super::committer::Committer;
use super::fsync;
use super::slot::Held;
use super::{blocking, io_error};
use crate::store::check_contiguous;

/// A write buffer larger than this is released after use rather than kept.
const KEEP_BUFFER: usize = 1 << 20;

thread_local! {
    /// The buffer an append serialises its batch into, one per thread
    /// rather than one per log: an idle log (a parked child's, of which a
    /// process may hold thousands) keeps none, and a batch is serialised
    /// and written with no await in between, so no two appends on a
    /// thread ever share it.
    static LINES: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The append handle of one log in a [`super::JsonlStore`]. It shares the
/// log's one owner (file, OS lock, registry claim) with any blocking
/// operation still in flight; [`SessionLog::close`] lets go of its share
/// and waits until every other share is gone, so that "closed" means
/// "openable now". Dropping the handle lets go without waiting.
///
/// Each append is one `write` of whole lines. A failed write or fsync
/// poisons the handle: that call and every later append or checkpoint return
/// the same error, and the log must be reopened. A failed append first cuts
/// the file back to where its batch began, so nothing of it stays on disk.
/// Under [`Durability::Batched`](dsh_core::Durability::Batched) a failed background sync of the log
/// poisons it the same way (its next append, checkpoint and sync return
/// that error), and [`SessionLog::close`] returns without waiting for the
/// committer, which holds the log until its round has run.
#[derive(Debug)]
pub struct JsonlLog {
    log: Arc<LogState>,
    /// Turns true once the registry claim has been released.
    released: watch::Receiver<bool>,
}

/// What the handle and its blocking operations share.
#[derive(Debug)]
struct LogState {
    path: PathBuf,
    id: SessionId,
    state: Mutex<WriterState>,
}

/// What an append needs under the handle's mutex.
#[derive(Debug)]
struct WriterState {
    /// The handle's share of the owner; `None` once closed.
    held: Option<Arc<Held>>,
    /// The seq the next appended event must carry.
    next_seq: u64,
    /// The length of the file: where the next batch begins.
    len: u64,
    /// The failure that made the handle unusable, if any.
    poisoned: Option<StoreError>,
}

impl JsonlLog {
    /// A handle over `held`, whose file is `len` bytes long and whose next
    /// event is `next_seq`.
    pub(super) fn new(held: Arc<Held>, path: PathBuf, next_seq: u64, len: u64) -> Self {
        let released = held.slot.released.subscribe();
        let id = held.slot.id.clone();
        Self {
            log: Arc::new(LogState {
                path,
                id,
                state: Mutex::new(WriterState {
                    held: Some(held),
                    next_seq,
                    len,
                    poisoned: None,
                }),
            }),
            released,
        }
    }

    /// The file this handle appends to.
    pub fn path(&self) -> &Path {
        &self.log.path
    }

    /// The session whose log this is.
    pub fn id(&self) -> &SessionId {
        &self.log.id
    }

    /// Fsync on the blocking pool, the closure owning a share of the log.
    /// `batch` is the byte range of an append whose durability this sync
    /// decides: on failure it is cut from the file.
    async fn sync(&self, held: Arc<Held>, batch: Option<(u64, u64)>) -> Result<(), StoreError> {
        let log = Arc::clone(&self.log);
        let result = blocking(&self.log.path, move || log.sync(&held, batch)).await;
        if let Err(err) = &result {
            // Also when the closure never ran (the runtime shut down).
            self.log.state().poisoned.get_or_insert_with(|| err.clone());
        }
        result
    }
}

impl LogState {
    fn state(&self) -> MutexGuard<'_, WriterState> {
        // Every critical section leaves the state consistent (a failed write
        // poisons it explicitly), so a panic elsewhere does not invalidate it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A share of the owner of a log that is open and not poisoned (by a
    /// write of its own or by a background sync).
    fn live(&self) -> Result<Arc<Held>, StoreError> {
        let mut state = self.state();
        if let Some(err) = &state.poisoned {
            return Err(err.clone());
        }
        let Some(held) = &state.held else {
            return Err(StoreError::Closed(self.id.clone()));
        };
        let held = Arc::clone(held);
        if let Some(err) = held.mark.failed() {
            state.poisoned = Some(err.clone());
            return Err(err.clone());
        }
        Ok(held)
    }

    /// The blocking half of [`JsonlLog::sync`].
    fn sync(&self, held: &Held, batch: Option<(u64, u64)>) -> Result<(), StoreError> {
        let synced = held.sync_data(&self.path);
        let mut state = self.state();
        match synced {
            Ok(()) => match batch {
                // A concurrent append's failed sync cut this batch too.
                Some((_, end)) if state.len < end => Err(state
                    .poisoned
                    .clone()
                    .unwrap_or_else(|| StoreError::Closed(self.id.clone()))),
                _ => Ok(()),
            },
            Err(source) => {
                let mut err = io_error(&self.path, source);
                if let Some((start, _)) = batch
                    && state.len > start
                {
                    err = cut(&held.file, &self.path, start, err);
                    state.len = start;
                }
                state.poisoned.get_or_insert_with(|| err.clone());
                Err(err)
            }
        }
    }
}

/// Cut `file` back to `len` after `err`; if that fails too, say so in the
/// error, whose kind stays the original one.
fn cut(file: &File, path: &Path, len: u64, err: StoreError) -> StoreError {
    match file.set_len(len) {
        Ok(()) => err,
        Err(undo) => {
            let (kind, first) = match &err {
                StoreError::Io { source, .. } => (source.kind(), source.to_string()),
                other => (io::ErrorKind::Other, other.to_string()),
            };
            let message =
                format!("{first}; cutting the failed batch off again also failed: {undo}");
            io_error(path, io::Error::new(kind, message))
        }
    }
}

#[async_trait]
impl SessionLog for JsonlLog {
    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError> {
        let to_sync = {
            let mut state = self.log.state();
            let WriterState {
                held,
                next_seq,
                len,
                poisoned,
            } = &mut *state;
            if let Some(err) = poisoned {
                return Err(err.clone());
            }
            let Some(held) = held else {
                return Err(StoreError::Closed(self.log.id.clone()));
            };
            if let Some(err) = held.mark.failed() {
                // A background sync of this log failed.
                *poisoned = Some(err.clone());
                return Err(err.clone());
            }
            if events.is_empty() {
                return Ok(());
            }
            check_contiguous(&self.log.id, *next_seq, events)?;
            let start = *len;
            let written = LINES.with_borrow_mut(|buf| {
                buf.clear();
                for event in events {
                    serde_json::to_writer(&mut *buf, event).map_err(|err| {
                        io_error(
                            &self.log.path,
                            io::Error::new(io::ErrorKind::InvalidData, err),
                        )
                    })?;
                    buf.push(b'\n');
                }
                // One write of whole lines: a crash can tear only the last one.
                let wrote = (&*held.file).write_all(buf).map(|()| buf.len() as u64);
                if buf.capacity() > KEEP_BUFFER {
                    *buf = Vec::new();
                }
                Ok(wrote)
            })?;
            match written {
                Ok(bytes) => *len += bytes,
                Err(source) => {
                    // Nothing of a failed batch may stay: cut what reached the file.
                    let err = cut(
                        &held.file,
                        &self.log.path,
                        start,
                        io_error(&self.log.path, source),
                    );
                    *poisoned = Some(err.clone());
                    return Err(err);
                }
            }
            *next_seq += events.len() as u64;
            let end = *len;
            let committer = held.committer();
            if let Some(batched) = committer.batched() {
                batched.wrote(held, &self.log.path);
            }
            committer
                .forces_each_append()
                .then(|| (Arc::clone(held), start, end))
        };
        if let Some((held, start, end)) = to_sync {
            self.sync(held, Some((start, end))).await?;
        }
        Ok(())
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        let held = {
            let held = self.log.live()?;
            // Else nothing is forced, every append already forced itself,
            // or the committer forces it within its window.
            if !held.committer().checkpoint_forces() {
                return Ok(());
            }
            held
        };
        self.force(held).await
    }

    async fn sync(&self) -> Result<(), StoreError> {
        let held = self.log.live()?;
        match held.committer() {
            Committer::Batched(batched) => {
                let result = batched.sync_log(&held.mark).await;
                if let Err(err) = &result {
                    self.log.state().poisoned.get_or_insert_with(|| err.clone());
                }
                result
            }
            Committer::Inline { .. } | Committer::Grouped(_) => self.force(held).await,
            // Nothing was forced, the directory entry of a create neither.
            Committer::Never => {
                self.sync(held, None).await?;
                let dir = self.log.path.parent().map(Path::to_path_buf);
                match dir {
                    Some(dir) => blocking(&dir.clone(), move || fsync::dir(&dir)).await,
                    None => Ok(()),
                }
            }
        }
    }

    async fn close(&self) {
        let share = self.log.state().held.take();
        let detached = share
            .as_ref()
            .is_some_and(|held| held.committer().batched().is_some() && !held.mark.is_synced());
        drop(share);
        if detached {
            // Under `Batched` the committer holds the log until its round;
            // an open meanwhile asks for that round at once.
            return;
        }
        let mut released = self.released.clone();
        // The claim is released once the last share (a detached fsync,
        // say) is gone; a closed channel means the same.
        let _ = released.wait_for(|released| *released).await;
    }
}

impl JsonlLog {
    /// Force the log as a checkpoint does: by the store's committer under
    /// [`Durability::Grouped`](dsh_core::Durability::Grouped), else on the blocking pool.
    ///
    /// # Cancel safety
    /// Cancel safe: a sync already started finishes detached, holding the
    /// log until then.
    async fn force(&self, held: Arc<Held>) -> Result<(), StoreError> {
        if let Some(group) = held.committer().group() {
            let log = Arc::clone(&self.log);
            // Poisoned on the committer, whether or not this future is
            // still there to hear the failure.
            return group
                .sync(Arc::clone(&held), &self.log.path, false, move |result| {
                    if let Err(err) = result {
                        log.state().poisoned.get_or_insert_with(|| err.clone());
                    }
                })
                .await;
        }
        self.sync(held, None).await
    }
}

/// The committer of the store a held log belongs to.
impl Held {
    /// The store's committer.
    pub(super) fn committer(&self) -> &Committer {
        &self.slot.shared.committer
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::fs::OpenOptions;

    use std::time::Duration;

    use dsh_core::Durability;
    use dsh_core::session::{EventPayload, TurnStart};

    use super::super::Shared;
    use super::super::slot::{LockedFile, WriterSlot};
    use super::*;

    fn shared(dir: &Path) -> Arc<Shared> {
        Arc::new(Shared {
            dir: dir.to_path_buf(),
            writers: Mutex::new(HashSet::new()),
            sweep_failures: Vec::new(),
            committer: Committer::start(dir, Durability::EveryEvent, Duration::ZERO).unwrap(),
        })
    }

    fn log_over(file: File, shared: &Arc<Shared>, path: &Path, len: u64) -> JsonlLog {
        let id = SessionId::new("a").unwrap();
        let slot = WriterSlot::claim(shared, &id).unwrap();
        let held = Arc::new(Held::new(LockedFile::try_new(file).unwrap(), slot));
        JsonlLog::new(held, path.to_path_buf(), 0, len)
    }

    fn turn(seq: u64) -> SessionEvent {
        SessionEvent {
            seq,
            time: seq,
            payload: EventPayload::TurnStart(TurnStart { turn: seq }),
        }
    }

    #[tokio::test]
    async fn a_failed_fsync_poisons_the_handle_and_says_the_cut_failed_too() {
        let dir = tempfile::tempdir().unwrap();
        let shared = shared(dir.path());
        // fsync and truncate both fail on /dev/null (EINVAL).
        let file = OpenOptions::new().write(true).open("/dev/null").unwrap();
        let log = log_over(file, &shared, Path::new("/dev/null"), 0);
        let err = log.append(&[turn(0)]).await.unwrap_err();
        let StoreError::Io { source, .. } = &err else {
            panic!("expected an I/O error, got {err:?}");
        };
        assert_eq!(source.kind(), io::ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains("also failed"), "{err}");
        // Poisoned: the same error, and nothing more is written.
        assert_eq!(
            log.append(&[turn(0)]).await.unwrap_err().to_string(),
            err.to_string()
        );
        assert_eq!(
            log.checkpoint().await.unwrap_err().to_string(),
            err.to_string()
        );
        log.close().await;
        assert!(shared.writers().is_empty());
    }

    #[test]
    fn a_sync_whose_batch_a_concurrent_failure_cut_fails_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let file = OpenOptions::new()
            .create_new(true)
            .read(true)
            .append(true)
            .open(&path)
            .unwrap();
        let shared = shared(dir.path());
        let log = log_over(file, &shared, &path, 0);
        let held = log.log.state().held.clone().unwrap();
        // Another append's failed sync cut the file back to 10 bytes and
        // poisoned the handle; this batch, bytes 10..20, is gone with it.
        {
            let mut state = log.log.state();
            state.len = 10;
            state.poisoned = Some(StoreError::Closed(SessionId::new("a").unwrap()));
        }
        assert!(log.log.sync(&held, Some((10, 20))).is_err());
        // A batch that ended before the cut is intact.
        assert!(log.log.sync(&held, Some((0, 10))).is_ok());
    }
}
