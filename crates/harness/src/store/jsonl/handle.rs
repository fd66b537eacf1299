//! The writer side of a JSON-lines log: who holds it, how it is published,
//! appended to, synced and released. One owner, [`Held`], carries both the
//! open file (with its exclusive OS lock) and the in-process writer claim;
//! every blocking closure that touches the file (an fsync, the create or
//! open that builds it) owns a share of it, so the claim lives exactly as
//! long as the last descriptor, whoever dropped which future. A failed
//! append cuts the file back to where its batch began. This module must
//! never write to a file it does not hold the lock for, and never leave a
//! log published that nobody owns.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use dsh_core::{Durability, LoadedSession, SessionEvent, SessionId, SessionLog, StoreError};
use tokio::sync::watch;

use super::batched::{Creating, Mark, WriteBehind};
use super::fsync;
use super::group::GroupCommit;
use super::parse::torn_header;
use super::stream::read_log;
use super::{Shared, blocking, io_error, open_error};
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

/// A reservation in the in-process writer registry. Dropping it releases the
/// id and then tells the log's [`JsonlLog::close`] that the log is free.
#[derive(Debug)]
pub(super) struct WriterSlot {
    shared: Arc<Shared>,
    id: SessionId,
    released: watch::Sender<bool>,
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
    file: LockedFile,
    slot: WriterSlot,
    /// What the write-behind committer knows of it (under
    /// [`Durability::Batched`]; idle otherwise).
    mark: Arc<Mark>,
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

    /// The store's committer, under [`Durability::Grouped`].
    fn group(&self) -> Option<&GroupCommit> {
        self.slot.shared.group.as_ref()
    }

    /// The store's write-behind committer, under [`Durability::Batched`].
    fn batched(&self) -> Option<&WriteBehind> {
        self.slot.shared.batched.as_ref()
    }
}

/// A freshly published log not yet handed to its caller. If it is dropped
/// instead (the create's future was dropped), it withdraws the log while
/// still holding it: a cancelled create leaves no log behind.
pub(super) struct Published {
    // Declared first: the log is withdrawn while `held` still locks it.
    withdraw: Withdraw,
    held: Arc<Held>,
    /// Whether the log still has to be forced to stable storage (under
    /// [`Durability::Grouped`], by the store's committer) before it counts.
    unsynced: bool,
}

impl Published {
    /// Hand the log to its caller once it is durable: under
    /// [`Durability::Grouped`] this waits for the committer round that
    /// forces the file and its directory entry. A failed sync withdraws the
    /// log and is returned.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped while waiting, the log is withdrawn (the
    /// committer's sync of the removed file still runs, holding the id).
    pub(super) async fn keep(self, path: &Path) -> Result<Arc<Held>, StoreError> {
        if self.unsynced
            && let Some(group) = self.held.group()
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
    durability: Durability,
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
                // Under `Batched` the committer never heard of this log:
                // a power loss may bring back its torn header, which the
                // next create of the id replaces, as after a crash.
                if self.durability.syncs()
                    && self.durability != Durability::Batched
                    && let Err(err) = sync_dir(&self.dir)
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
/// Under [`Durability::Batched`] a failed background sync of the log
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
    durability: Durability,
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
    pub(super) fn new(
        held: Arc<Held>,
        path: PathBuf,
        durability: Durability,
        next_seq: u64,
        len: u64,
    ) -> Self {
        let released = held.slot.released.subscribe();
        let id = held.slot.id.clone();
        Self {
            log: Arc::new(LogState {
                path,
                id,
                durability,
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
            if let Some(batched) = held.batched() {
                batched.wrote(held, &self.log.path);
            }
            (self.log.durability == Durability::EveryEvent).then(|| (Arc::clone(held), start, end))
        };
        if let Some((held, start, end)) = to_sync {
            self.sync(held, Some((start, end))).await?;
        }
        Ok(())
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        let held = {
            let held = self.log.live()?;
            match self.log.durability {
                Durability::TurnBoundary | Durability::Grouped => held,
                // Nothing to force, every append already forced itself, or
                // the committer forces it within its window.
                Durability::None | Durability::EveryEvent | Durability::Batched => return Ok(()),
            }
        };
        self.force(held).await
    }

    async fn sync(&self) -> Result<(), StoreError> {
        let held = self.log.live()?;
        match self.log.durability {
            Durability::Batched => match held.batched() {
                Some(batched) => {
                    let result = batched.sync_log(&held.mark).await;
                    if let Err(err) = &result {
                        self.log.state().poisoned.get_or_insert_with(|| err.clone());
                    }
                    result
                }
                None => self.sync(held, None).await,
            },
            Durability::TurnBoundary | Durability::Grouped | Durability::EveryEvent => {
                self.force(held).await
            }
            // Nothing was forced, the directory entry of a create neither.
            Durability::None => {
                self.sync(held, None).await?;
                let dir = self.log.path.parent().map(Path::to_path_buf);
                match dir {
                    Some(dir) => blocking(&dir.clone(), move || sync_dir(&dir)).await,
                    None => Ok(()),
                }
            }
        }
    }

    async fn close(&self) {
        let share = self.log.state().held.take();
        let detached = share
            .as_ref()
            .is_some_and(|held| held.batched().is_some() && !held.mark.is_synced());
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
    /// [`Durability::Grouped`], else on the blocking pool.
    ///
    /// # Cancel safety
    /// Cancel safe: a sync already started finishes detached, holding the
    /// log until then.
    async fn force(&self, held: Arc<Held>) -> Result<(), StoreError> {
        if let Some(group) = held.group() {
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

/// Fsync a directory so that a link or unlink in it survives a power failure.
pub(super) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    fsync::dir(dir)
}

/// A temporary file removed when dropped.
struct TempFile {
    path: PathBuf,
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
fn create_temp(dir: &Path, id: &SessionId) -> Result<(TempFile, File), StoreError> {
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

/// Whether creating a log forces anything to stable storage before it
/// returns (on the creating thread): under [`Durability::TurnBoundary`]
/// and [`Durability::EveryEvent`] always; under [`Durability::Grouped`]
/// only a seeded create (its temporary file is forced before its link; a
/// header-only one is forced by the committer, waited for afterwards);
/// never under [`Durability::None`] and [`Durability::Batched`]. A create
/// that forces nothing runs inline on the calling task, one that does on
/// the blocking pool (see [`create_file`]).
pub(super) fn create_forces(durability: Durability, in_place: bool) -> bool {
    match durability {
        Durability::TurnBoundary | Durability::EveryEvent => true,
        Durability::Grouped => !in_place,
        Durability::None | Durability::Batched => false,
    }
}

/// Create the log of `path` with `contents` (a header-only one in place,
/// a seeded one through a temporary file and a link), owning `slot`.
///
/// When [`create_forces`] says so it forces the file and directory: call
/// it on the blocking pool (no such mode has a write-behind committer, so
/// `creating` is `None`). Otherwise call it right here, on the calling
/// task; under [`Durability::Batched`] `creating` holds off the
/// committer's rounds until the log is marked (see
/// [`WriteBehind::creating_soon`], which awaits a running round rather
/// than block for it).
///
/// What then runs inline is one exclusive `openat`, a non-blocking
/// `flock`, one `fstat` and one `write` of the header into the page cache
/// (for a seeded log: a temporary file, its write, a `link` and an
/// `unlink`), the kind of work an append already does inline. None of it
/// waits for the disk in the common case; what can make it wait is
/// bounded by the kernel's own work, never by another writer of the
/// store: a cold directory or inode-table block read once, the journal
/// making room for a transaction handle (at worst one journal commit),
/// dirty-page throttling when writeback lags far behind
/// (`balance_dirty_pages`, paced by the device), and a full disk, which
/// returns `ENOSPC` as an error rather than blocking. Fsyncs, reads of
/// whole logs and directory listings stay on the blocking pool.
pub(super) fn create_file(
    dir: &Path,
    slot: WriterSlot,
    path: &Path,
    contents: &[u8],
    durability: Durability,
    in_place: bool,
    creating: Option<Creating<'_>>,
) -> Result<Published, StoreError> {
    if in_place {
        create_in_place(dir, slot, path, contents, durability, creating)
    } else {
        create_log(dir, slot, path, contents, durability, creating)
    }
}

/// After locking the file a create made at `path`, whether it is still
/// linked: between the exclusive create and the lock, another process's
/// create may have taken the empty file for a crashed create and removed
/// it (see [`reclaim_torn`]). The store never renames a log away and never
/// links a second name to one created in place, so a file with a link is
/// still `path`'s; one `fstat` answers, where [`still_linked`] needs a
/// second `stat` of the path.
#[cfg(unix)]
fn still_created(file: &File, path: &Path) -> Result<bool, StoreError> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().map_err(|source| io_error(path, source))?;
    Ok(meta.nlink() > 0)
}

#[cfg(not(unix))]
fn still_created(file: &File, path: &Path) -> Result<bool, StoreError> {
    let held = file.metadata().map_err(|source| io_error(path, source))?;
    match fs::metadata(path) {
        Ok(named) => Ok(same_file(&held, &named)),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(io_error(path, source)),
    }
}

/// Write `contents` to a temporary file, lock it, and publish it as `path`
/// without clobbering. Runs where [`create_file`]
/// decided and owns `slot`, so the id stays claimed until the result is
/// dropped or handed on.
///
/// Under [`Durability::None`] nothing is fsynced, before or after the link:
/// a power loss can leave the published log empty (or its header unwritten),
/// which loading then reports as [`StoreError::TornCreate`].
fn create_log(
    dir: &Path,
    slot: WriterSlot,
    path: &Path,
    contents: &[u8],
    durability: Durability,
    _creating: Option<Creating<'_>>,
) -> Result<Published, StoreError> {
    let id = slot.id.clone();
    // Under `Batched` the committer forces the new log (file, then
    // directory) in its next round; no round runs until it is marked
    // (`_creating` holds them off).
    let shared = Arc::clone(&slot.shared);
    let batched = shared.batched.as_ref();
    let inline = create_forces(durability, false);
    let (temp, file) = create_temp(dir, &id)?;
    // Locked before it is visible under its real name, so no other writer
    // can slip in between publication and this handle.
    let file = LockedFile::lock(file, &id, &temp.path)?;
    (&*file)
        .write_all(contents)
        .map_err(|source| io_error(&temp.path, source))?;
    if inline {
        fsync::all(&file, &temp.path).map_err(|source| io_error(&temp.path, source))?;
    }
    match fs::hard_link(&temp.path, path) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            return Err(StoreError::Exists(id));
        }
        Err(source) => return Err(io_error(path, source)),
    }
    let published = Published {
        withdraw: Withdraw {
            armed: true,
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            durability,
        },
        held: Arc::new(Held::new(file, slot)),
        unsynced: false,
    };
    drop(temp);
    if inline && let Err(err) = sync_dir(dir) {
        // All or nothing: dropping `published` withdraws a log whose
        // publication may not last.
        drop(published);
        return Err(err);
    }
    if let Some(batched) = batched {
        batched.created(&published.held, path);
    }
    Ok(published)
}

/// Create the log of a header-only `contents` in place: one exclusive
/// create of `path` (the only metadata operation), lock, one `fstat`, one
/// write. Runs where [`create_file`] decided and owns
/// `slot`, so the id stays claimed until the result is dropped or handed
/// on.
///
/// Atomicity comes from the header instead of a rename: until the write
/// lands, the file holds nothing or part of a header line, which no log
/// ever does. Reading reports such a file as [`StoreError::TornCreate`],
/// and the next create of the id replaces it. Under
/// [`Durability::TurnBoundary`] and [`Durability::EveryEvent`] the file and
/// the directory are forced here; under [`Durability::Grouped`] the result
/// is marked unsynced and [`Published::keep`] waits for the committer;
/// under [`Durability::Batched`] the log is handed to the write-behind
/// committer, which forces it (file, then directory) in its next round.
fn create_in_place(
    dir: &Path,
    slot: WriterSlot,
    path: &Path,
    contents: &[u8],
    durability: Durability,
    _creating: Option<Creating<'_>>,
) -> Result<Published, StoreError> {
    let id = slot.id.clone();
    // See `create_log`: no round runs until this log is marked.
    let shared = Arc::clone(&slot.shared);
    let batched = shared.batched.as_ref();
    let mut reclaimed = false;
    let mut recreated = false;
    let file = loop {
        let file = match OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .open(path)
        {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists && !reclaimed => {
                reclaimed = true;
                if !reclaim_torn(&id, path)? {
                    return Err(StoreError::Exists(id));
                }
                continue;
            }
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                return Err(StoreError::Exists(id));
            }
            Err(source) => return Err(io_error(path, source)),
        };
        // Between the create and the lock, another process may have found
        // the empty file, taken it for a crashed create and removed it:
        // another create of this id (which then holds the name, and nothing
        // here may touch it), or `remove_torn` (`dsh agents
        // --prune-orphans`), after which the name is free again. One more
        // exclusive create tells them apart.
        // A lock already taken is such a reclaimer at work on this file.
        match LockedFile::lock(file, &id, path) {
            Ok(file) if still_created(&file, path)? => break file,
            Ok(_) | Err(StoreError::Locked(_)) => {}
            Err(err) => return Err(err),
        }
        if recreated {
            return Err(StoreError::Exists(id));
        }
        recreated = true;
    };
    let published = Published {
        withdraw: Withdraw {
            armed: true,
            path: path.to_path_buf(),
            dir: dir.to_path_buf(),
            durability,
        },
        held: Arc::new(Held::new(file, slot)),
        unsynced: durability == Durability::Grouped,
    };
    // On any failure below, dropping `published` withdraws the file.
    (&*published.held.file)
        .write_all(contents)
        .map_err(|source| io_error(path, source))?;
    if create_forces(durability, true) {
        let sync_file = || {
            (published.held)
                .sync_data(path)
                .map_err(|source| io_error(path, source))
        };
        match shared.dir_sync.as_ref() {
            // The file and its directory entry, forced at once so that one
            // journal commit covers both.
            Some(dir_sync) => dir_sync.sync_with(sync_file)?,
            None => {
                sync_file()?;
                sync_dir(dir)?;
            }
        }
    }
    if let Some(batched) = batched {
        batched.created(&published.held, path);
    }
    Ok(published)
}

/// After a create of `path` found it taken: remove it if it is what a
/// crashed create leaves (see [`torn_header`]) and nobody holds it. `true`
/// when the name is free again.
pub(super) fn reclaim_torn(id: &SessionId, path: &Path) -> Result<bool, StoreError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(source) => return Err(io_error(path, source)),
    };
    let Some(file) = LockedFile::try_new(file) else {
        return Ok(false);
    };
    let mut bytes = Vec::new();
    (&*file)
        .read_to_end(&mut bytes)
        .map_err(|source| io_error(path, source))?;
    if !torn_header(&bytes) {
        return Ok(false);
    }
    match still_linked(&file, id, path) {
        Ok(()) => {}
        Err(StoreError::NotFound(_)) => return Ok(true),
        Err(err) => return Err(err),
    }
    match fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "replaced the torn header of a create that crashed");
            Ok(true)
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(source) => Err(io_error(path, source)),
    }
}

/// A log opened for appending: what it holds, its owner and its length.
pub(super) struct Opened {
    pub(super) loaded: LoadedSession,
    pub(super) held: Held,
    pub(super) len: u64,
}

/// Open, lock, read and repair the log of `id` for appending. Runs on the
/// blocking pool and owns `slot`, so the id stays claimed until the result
/// is dropped or handed on.
pub(super) fn open_log(
    slot: WriterSlot,
    path: &Path,
    durability: Durability,
) -> Result<Opened, StoreError> {
    let id = slot.id.clone();
    let mut attempts = 0;
    let file = loop {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|source| open_error(&id, path, source))?;
        let file = LockedFile::lock(file, &id, path)?;
        match still_linked(&file, &id, path) {
            Ok(()) => break file,
            // Removed (and perhaps created afresh) under us: look again.
            Err(StoreError::NotFound(_)) if attempts < 3 => attempts += 1,
            Err(err) => return Err(err),
        }
    };
    let size = file
        .metadata()
        .map_err(|source| io_error(path, source))?
        .len();
    let parsed = read_log(&id, path, &file, size)?;
    let mut len = parsed.keep;
    if let Some(torn) = &parsed.torn_tail {
        file.set_len(parsed.keep)
            .map_err(|source| io_error(path, source))?;
        tracing::warn!(
            path = %path.display(),
            line = torn.line,
            bytes = torn.bytes,
            "cut a torn last line from a session log"
        );
    }
    if parsed.missing_newline {
        (&*file)
            .write_all(b"\n")
            .map_err(|source| io_error(path, source))?;
        len += 1;
        tracing::warn!(path = %path.display(), "restored the missing newline after the last line of a session log");
    }
    if durability.syncs() && (parsed.torn_tail.is_some() || parsed.missing_newline) {
        fsync::data(&file, path).map_err(|source| io_error(path, source))?;
    }
    Ok(Opened {
        loaded: LoadedSession {
            header: parsed.header,
            events: parsed.events,
            torn_tail: parsed.torn_tail,
        },
        held: Held::new(file, slot),
        len,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use dsh_core::session::{EventPayload, TurnStart};

    use super::*;

    fn shared(dir: &Path) -> Arc<Shared> {
        Arc::new(Shared {
            dir: dir.to_path_buf(),
            durability: Durability::EveryEvent,
            writers: Mutex::new(HashSet::new()),
            sweep_failures: Vec::new(),
            group: None,
            batched: None,
            dir_sync: None,
        })
    }

    fn log_over(file: File, shared: &Arc<Shared>, path: &Path, len: u64) -> JsonlLog {
        let id = SessionId::new("a").unwrap();
        let slot = WriterSlot::claim(shared, &id).unwrap();
        let held = Arc::new(Held::new(LockedFile::try_new(file).unwrap(), slot));
        JsonlLog::new(held, path.to_path_buf(), Durability::EveryEvent, 0, len)
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
