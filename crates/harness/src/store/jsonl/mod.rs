//! The embedded default session store: one JSON-lines file per session,
//! `<dir>/<session-id>.jsonl`, whose first line is the header and every later
//! line one event. A log is published whole: a header-only log is created
//! exclusively in place (one metadata operation; until its one write lands
//! the file holds a torn header, which reading recognises and the next
//! create replaces), a seeded one is written to a hidden temporary file,
//! then hard-linked into place so an existing log is never clobbered. It
//! has exactly one writer at a time (an in-process registry plus an exclusive
//! OS file lock, both held by one owner, in `slot`), and only ever
//! grows by whole lines. Reading never skips a line: the one thing repaired
//! is a torn last line, cut on open and reported (in `parse`). Opening a
//! store sweeps the temporary files a crashed writer left. This module must
//! never rewrite, reorder or drop a complete line, and never write to a log
//! it does not hold the lock for.

mod batched;
mod committer;
mod create;
mod dirsync;
#[cfg(test)]
mod durability_tests;
mod fsync;
mod group;
mod limits;
mod log;
mod parse;
mod publish;
mod skim;
mod slot;
mod stream;

use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::{
    Durability, KindEvents, LoadedSession, SessionEvent, SessionHeader, SessionId, SessionLog,
    SessionStore, StoreError,
};

use committer::Committer;
use create::{create_file, open_log};
pub use group::DEFAULT_WINDOW as DEFAULT_GROUP_WINDOW;
pub use limits::{OpenFileLimit, raise_open_file_limit};
pub use log::JsonlLog;
use log::JsonlLog as Log;
use parse::{parse_header, parse_lone_header};
use publish::TEMP_SUFFIX;
use slot::{LockedFile, WriterSlot, still_linked};

use super::check_contiguous;

/// The file extension of a session log.
const EXTENSION: &str = ".jsonl";

/// A temporary file whose writer may still be alive is swept only if it is
/// unlocked and at least this old (its pid may have been reused): a live
/// writer locks its temporary file within microseconds of creating it.
const STALE_TEMP: Duration = Duration::from_secs(60);

/// State shared by every clone of a [`JsonlStore`].
#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    /// Ids held by a writer (or being created, opened or removed) in this
    /// process.
    writers: Mutex<HashSet<SessionId>>,
    /// The leftovers the opening sweep could not remove.
    sweep_failures: Vec<StoreError>,
    /// When and how what is written is forced to stable storage.
    committer: Committer,
}

impl Shared {
    fn writers(&self) -> MutexGuard<'_, HashSet<SessionId>> {
        // The set stays consistent whatever panicked while holding it.
        self.writers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A [`SessionStore`] keeping each log as a JSON-lines file in one directory.
/// Clones share the directory and the in-process writer registry.
///
/// Every append is written to the file before it returns; [`Durability`]
/// decides only when the file is also forced to stable storage. Under
/// [`Durability::None`] a create is not fsynced either: after a power loss
/// (never after a mere crash) its log may be empty, which then loads as
/// [`StoreError::TornCreate`].
#[derive(Debug, Clone)]
pub struct JsonlStore {
    shared: Arc<Shared>,
}

impl JsonlStore {
    /// A store over `dir`, created (with its parents) if missing. Temporary
    /// files left by a writer that crashed (`.<id>.<pid>-….tmp`, unpublished
    /// logs and second links of published ones) are removed: those whose
    /// writing process is gone, and unlocked ones older than a minute. One
    /// that cannot be removed does not stop the store from opening; it is
    /// reported by [`JsonlStore::sweep_failures`].
    ///
    /// # Errors
    /// [`StoreError::Io`] when the directory cannot be created or read.
    ///
    /// Every live log holds one open descriptor, so the first store of a
    /// process raises its soft `RLIMIT_NOFILE` to the hard limit (see
    /// [`raise_open_file_limit`]), logging the change; 10,000 resident
    /// agents then fit wherever the hard limit allows them.
    ///
    /// Under [`Durability::Grouped`] the store's committer lingers at most
    /// [`DEFAULT_GROUP_WINDOW`], and under [`Durability::Batched`] it forces
    /// what was written at least once per [`DEFAULT_GROUP_WINDOW`];
    /// [`JsonlStore::with_group_window`] sets another window.
    pub fn new(dir: impl Into<PathBuf>, durability: Durability) -> Result<Self, StoreError> {
        Self::with_group_window(dir, durability, DEFAULT_GROUP_WINDOW)
    }

    /// [`JsonlStore::new`], with the longest time a group-commit round
    /// under [`Durability::Grouped`] may linger for more logs after its
    /// first request, or, under [`Durability::Batched`], the longest a
    /// write may wait for the round that forces it (ignored by the other
    /// modes). A grouped round lingers only while several logs are asking,
    /// and closes early once none arrives for a moment; `Duration::ZERO`
    /// never lingers (rounds then batch only what arrives while the
    /// previous sync runs). A batched round runs a window after the first
    /// write it covers, or at once for a [`SessionLog::sync`] or
    /// [`SessionStore::flush`].
    ///
    /// # Errors
    /// As [`JsonlStore::new`]; under [`Durability::Batched`] also when the
    /// committer thread cannot be started, and under
    /// [`Durability::TurnBoundary`] and [`Durability::EveryEvent`] when the
    /// directory syncer's thread cannot.
    pub fn with_group_window(
        dir: impl Into<PathBuf>,
        durability: Durability,
        window: Duration,
    ) -> Result<Self, StoreError> {
        let dir = dir.into();
        limits::raise_once();
        fs::create_dir_all(&dir).map_err(|source| io_error(&dir, source))?;
        let sweep_failures = sweep_temps(&dir)?;
        let committer = Committer::start(&dir, durability, window)?;
        Ok(Self {
            shared: Arc::new(Shared {
                dir,
                sweep_failures,
                writers: Mutex::new(HashSet::new()),
                committer,
            }),
        })
    }

    /// The group-commit window, under [`Durability::Grouped`] and
    /// [`Durability::Batched`].
    pub fn group_window(&self) -> Option<Duration> {
        self.shared.committer.window()
    }

    /// How many logs have writes that the store has not yet forced to
    /// stable storage: under [`Durability::Batched`], those its committer
    /// has yet to force (a cheap look at what is synced); 0 under the
    /// other modes, whose unforced appends wait for a checkpoint.
    pub fn unsynced(&self) -> usize {
        self.shared.committer.unsynced()
    }

    /// Claim the writer slot of `id`. Under [`Durability::Batched`] a log
    /// closed but not yet forced is still held by the committer: then ask
    /// for its round at once, and claim again once it has run.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped claim holds nothing (the round it asked for
    /// still runs).
    async fn claim(&self, id: &SessionId) -> Option<WriterSlot> {
        if let Some(slot) = WriterSlot::claim(&self.shared, id) {
            return Some(slot);
        }
        let batched = self.shared.committer.batched()?;
        // A failed round is reported by every later flush and to the log's
        // holder; here it only means the log is not free.
        if batched.flush().await.is_err() {
            return None;
        }
        WriterSlot::claim(&self.shared, id)
    }

    /// The crash leftovers that opening this store found but could not
    /// remove (unreadable, or not removable), each with its path and OS
    /// error: a host shows them as warnings. Empty when the sweep was clean.
    pub fn sweep_failures(&self) -> &[StoreError] {
        &self.shared.sweep_failures
    }

    /// The directory holding the logs.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// When this store forces writes to stable storage.
    pub fn durability(&self) -> Durability {
        self.shared.committer.durability()
    }

    /// The file that holds (or would hold) the log of `id`.
    pub fn log_path(&self, id: &SessionId) -> PathBuf {
        self.shared.dir.join(file_name(id))
    }

    /// Run `work(dir, id, path, syncs)` on the blocking pool while
    /// holding the in-process writer slot of `id` (`Busy` when taken); the
    /// slot is released when the work ends, even if its future was dropped.
    async fn while_held<T, F>(&self, id: &SessionId, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Path, &SessionId, &Path, bool) -> Result<T, StoreError> + Send + 'static,
    {
        let slot = self
            .claim(id)
            .await
            .ok_or_else(|| StoreError::Busy(id.clone()))?;
        let path = self.log_path(id);
        let dir = self.shared.dir.clone();
        // Whether the store forces its removals.
        let syncs = self.shared.committer.syncs();
        let (task_id, task_path) = (id.clone(), path.clone());
        blocking(&path, move || {
            let result = work(&dir, &task_id, &task_path, syncs);
            drop(slot);
            result
        })
        .await
    }
}

impl JsonlStore {
    /// Read each of `ids` with `read` in one trip to the blocking pool:
    /// per-file task hand-offs dominate the cost of reading many small logs.
    /// Results are in the order of `ids`; a failed trip fails every entry.
    async fn read_batch<T, F>(&self, ids: &[SessionId], read: F) -> Vec<Result<T, StoreError>>
    where
        T: Send + 'static,
        F: Fn(&SessionId, &Path) -> Result<T, StoreError> + Send + 'static,
    {
        let paths: Vec<(SessionId, PathBuf)> = ids
            .iter()
            .map(|id| (id.clone(), self.log_path(id)))
            .collect();
        let dir = self.dir().to_path_buf();
        let count = ids.len();
        let batch = blocking(&dir, move || {
            Ok(paths
                .iter()
                .map(|(id, path)| read(id, path))
                .collect::<Vec<_>>())
        })
        .await;
        fan_out(batch, count)
    }
}

/// A batch's results, or its trip's failure for each of its `count` entries.
fn fan_out<T>(
    batch: Result<Vec<Result<T, StoreError>>, StoreError>,
    count: usize,
) -> Vec<Result<T, StoreError>> {
    match batch {
        Ok(read) => read,
        Err(err) => (0..count).map(|_| Err(err.clone())).collect(),
    }
}

/// Every public async method below that may wait for the disk (an fsync, a
/// read of a whole log, a directory listing, an open, a remove) runs its
/// file work on the blocking pool. A dropped future detaches that work,
/// which finishes on its own; the writer claim travels with it, so the id
/// stays [`StoreError::Busy`] in this process until it ends (and never
/// `Locked` by a file nobody owns). A create that forces nothing (under
/// [`Durability::None`] and [`Durability::Batched`], and a header-only one
/// under [`Durability::Grouped`], whose sync the committer runs) is written
/// inline on the calling task, as every append is: one exclusive create, a
/// non-blocking lock, an `fstat` and one `write` into the page cache, a few
/// microseconds where a trip to the blocking pool and back costs two
/// cross-thread wake-ups (see `create::create_file` for what can still make
/// it wait, and why that is bounded).
#[async_trait]
impl SessionStore for JsonlStore {
    /// # Cancel safety
    /// Cancel safe: a dropped create leaves no log. A create written inline
    /// has no await point between its file's creation and its handle, so
    /// no drop can come between them. If the detached work (a create that
    /// forces, or one that found a committer round running) has already
    /// published it, it withdraws it while still holding it; until then an
    /// open of the id is `Busy` and a create `Exists`. Under
    /// [`Durability::Grouped`], a create dropped while it waits for its
    /// committer round withdraws the log on the spot (the round still
    /// syncs the removed file, holding the id until then).
    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        let id = header.id.clone();
        check_contiguous(&id, 0, seed)?;
        let path = self.log_path(&id);
        let mut buf = Vec::new();
        serde_json::to_writer(&mut buf, header).map_err(|err| {
            let message = format!("the session header cannot be written as JSON: {err}");
            io_error(&path, io::Error::new(io::ErrorKind::InvalidInput, message))
        })?;
        buf.push(b'\n');
        for event in seed {
            serde_json::to_writer(&mut buf, event)
                .map_err(|err| io_error(&path, io::Error::new(io::ErrorKind::InvalidData, err)))?;
            buf.push(b'\n');
        }
        // A held id names a log that exists (or is being created right now).
        let slot =
            WriterSlot::claim(&self.shared, &id).ok_or_else(|| StoreError::Exists(id.clone()))?;
        let dir = &self.shared.dir;
        let committer = &self.shared.committer;
        let len = buf.len() as u64;
        let in_place = seed.is_empty();
        // Inline when nothing is forced (see `create_file`): no trip to
        // the blocking pool, and no await point between the file's
        // creation and its handle.
        let published = if committer.create_forces(in_place) {
            let (dir, task_path) = (dir.clone(), path.clone());
            blocking(&path, move || {
                create_file(&dir, slot, &task_path, &buf, in_place, None)
            })
            .await?
        } else {
            let creating = match committer.batched() {
                Some(batched) => Some(batched.creating_soon().await),
                None => None,
            };
            create_file(dir, slot, &path, &buf, in_place, creating)?
        };
        let held = published.keep(&path).await?;
        let next_seq = seed.len() as u64;
        Ok(Arc::new(Log::new(held, path, next_seq, len)))
    }

    /// # Cancel safety
    /// Cancel safe: a dropped open leaves the log closed (a torn tail may
    /// have been cut); the id is `Busy` until the detached work ends.
    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        let slot = self
            .claim(id)
            .await
            .ok_or_else(|| StoreError::Busy(id.clone()))?;
        let path = self.log_path(id);
        let task_path = path.clone();
        let opened = blocking(&path, move || open_log(slot, &task_path)).await?;
        let next_seq = opened.loaded.events.len() as u64;
        let log = Log::new(Arc::new(opened.held), path, next_seq, opened.len);
        Ok((opened.loaded, Arc::new(log)))
    }

    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        let path = self.log_path(id);
        let (task_id, task_path) = (id.clone(), path.clone());
        blocking(&path, move || load_log(&task_id, &task_path)).await
    }

    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn load_many(&self, ids: &[SessionId]) -> Vec<Result<LoadedSession, StoreError>> {
        self.read_batch(ids, load_log).await
    }

    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn load_kind_many(
        &self,
        ids: &[SessionId],
        kinds: &[&str],
    ) -> Vec<Result<KindEvents, StoreError>> {
        let kinds: Vec<String> = kinds.iter().map(|&kind| kind.to_owned()).collect();
        let dir = self.dir().to_path_buf();
        let batch = ids.to_vec();
        let read = blocking(self.dir(), move || {
            let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
            Ok(skim::skim_many(&dir, &batch, &kinds))
        })
        .await;
        fan_out(read, ids.len())
    }

    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        let path = self.log_path(id);
        let (task_id, task_path) = (id.clone(), path.clone());
        blocking(&path, move || read_header(&task_id, &task_path)).await
    }

    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn header_many(&self, ids: &[SessionId]) -> Vec<Result<SessionHeader, StoreError>> {
        self.read_batch(ids, read_header).await
    }

    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        let path = self.log_path(id);
        path.try_exists().map_err(|source| io_error(&path, source))
    }

    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        let dir = self.shared.dir.clone();
        blocking(&self.shared.dir, move || list_logs(&dir)).await
    }

    /// Under [`Durability::Batched`], wait for the committer to force
    /// everything written before the call; under the other modes nothing
    /// is left to a background sync (appends between checkpoints under
    /// [`Durability::TurnBoundary`] are forced by the log's
    /// [`SessionLog::sync`]), so it returns at once.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped flush changes nothing; the round it asked
    /// for still runs.
    async fn flush(&self) -> Result<(), StoreError> {
        self.shared.committer.flush().await
    }

    /// # Cancel safety
    /// As `remove`: a dropped call finishes detached, holding the id.
    async fn remove_torn(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.while_held(id, |_, id, path, _| create::reclaim_torn(id, path))
            .await
    }

    /// # Cancel safety
    /// Not cancel safe: a dropped remove finishes detached (the log is then
    /// gone unless another process held it); the id is `Busy` until then.
    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        self.while_held(id, remove_log).await
    }
}

/// The file name of the plain log of `id` in the store's directory.
fn file_name(id: &SessionId) -> String {
    let mut name = String::with_capacity(id.as_str().len() + EXTENSION.len());
    name.push_str(id.as_str());
    name.push_str(EXTENSION);
    name
}

/// Wrap an OS error with the path it concerns.
fn io_error(path: &Path, source: io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_path_buf(),
        source: Arc::new(source),
    }
}

/// Like [`io_error`], but a missing file is [`StoreError::NotFound`].
fn open_error(id: &SessionId, path: &Path, source: io::Error) -> StoreError {
    if source.kind() == io::ErrorKind::NotFound {
        StoreError::NotFound(id.clone())
    } else {
        io_error(path, source)
    }
}

/// Run `work` on the blocking pool. A panic in it is resumed here; a task
/// cancelled by runtime shutdown is an I/O failure on `path`.
async fn blocking<T, F>(path: &Path, work: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        Err(err) => Err(io_error(
            path,
            io::Error::other(format!("blocking task failed: {err}")),
        )),
    }
}

/// Read the log of `id` without locking or changing it.
fn load_log(id: &SessionId, path: &Path) -> Result<LoadedSession, StoreError> {
    let file = File::open(path).map_err(|source| open_error(id, path, source))?;
    let size = file
        .metadata()
        .map_err(|source| io_error(path, source))?
        .len();
    let parsed = stream::read_log(id, path, &file, size)?;
    if let Some(torn) = &parsed.torn_tail {
        tracing::debug!(
            path = %path.display(),
            line = torn.line,
            bytes = torn.bytes,
            "ignoring an incomplete last line of a session log"
        );
    }
    Ok(LoadedSession {
        header: parsed.header,
        events: parsed.events,
        torn_tail: parsed.torn_tail,
    })
}

/// Read and check only the first line of the log of `id`.
fn read_header(id: &SessionId, path: &Path) -> Result<SessionHeader, StoreError> {
    use std::io::BufRead;
    let file = File::open(path).map_err(|source| open_error(id, path, source))?;
    let mut line = Vec::new();
    io::BufReader::new(file)
        .read_until(b'\n', &mut line)
        .map_err(|source| io_error(path, source))?;
    if line.last() == Some(&b'\n') {
        line.pop();
        parse_header(id, path, &line)
    } else {
        parse_lone_header(id, path, &line)
    }
}

/// The ids of every log in `dir`, sorted. Reads no file: a stray that is not
/// a session is listed, and fails (alone) when loaded.
fn list_logs(dir: &Path) -> Result<Vec<SessionId>, StoreError> {
    let mut ids = Vec::new();
    for entry in fs::read_dir(dir).map_err(|source| io_error(dir, source))? {
        let entry = entry.map_err(|source| io_error(dir, source))?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|name| name.strip_suffix(EXTENSION)) else {
            continue;
        };
        // Hidden files (temporaries) and foreign names are not session ids.
        let Ok(id) = SessionId::new(stem) else {
            continue;
        };
        let file_type = entry
            .file_type()
            .map_err(|source| io_error(&entry.path(), source))?;
        if !file_type.is_dir() {
            ids.push(id);
        }
    }
    ids.sort();
    Ok(ids)
}

/// Delete the log of `id` once no writer (in any process) holds it,
/// forcing the directory after when `syncs`.
fn remove_log(dir: &Path, id: &SessionId, path: &Path, syncs: bool) -> Result<(), StoreError> {
    let file = File::open(path).map_err(|source| open_error(id, path, source))?;
    let file = LockedFile::lock(file, id, path)?;
    still_linked(&file, id, path)?;
    fs::remove_file(path).map_err(|source| open_error(id, path, source))?;
    drop(file);
    if syncs {
        fsync::dir(dir)?;
    }
    Ok(())
}

/// The pid in a temporary file's name `.<id>.<pid>-<nanos>-<n>.tmp`.
fn temp_writer(name: &str) -> Option<u32> {
    let stem = name.strip_prefix('.')?.strip_suffix(TEMP_SUFFIX)?;
    let (id, stamp) = stem.rsplit_once('.')?;
    SessionId::new(id).ok()?;
    let mut parts = stamp.split('-');
    let pid = parts.next()?.parse().ok()?;
    let numbers = parts.filter(|part| part.parse::<u64>().is_ok()).count();
    (numbers == 2 && stamp.split('-').count() == 3).then_some(pid)
}

/// Whether process `pid` may still be running. Where that cannot be told,
/// it may.
fn may_be_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let proc = Path::new("/proc");
    if cfg!(target_os = "linux") && proc.join("self").exists() {
        proc.join(pid.to_string()).exists()
    } else {
        true
    }
}

/// Remove the temporary files of writers that crashed: a file whose writer
/// is gone, or that nobody locks and is older than [`STALE_TEMP`]. A locked
/// one belongs to a live create (or is a second link of a log a live writer
/// holds) and is left alone. One leftover that cannot be read or removed
/// stops nothing: it is returned, and the sweep goes on.
///
/// # Errors
/// The directory cannot be read.
fn sweep_temps(dir: &Path) -> Result<Vec<StoreError>, StoreError> {
    let mut failures = Vec::new();
    for entry in fs::read_dir(dir).map_err(|source| io_error(dir, source))? {
        let entry = entry.map_err(|source| io_error(dir, source))?;
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temp_writer) else {
            continue;
        };
        let path = entry.path();
        if let Err(err) = sweep_temp(&path, pid) {
            failures.push(err);
        }
    }
    Ok(failures)
}

/// Remove one temporary file if it is stale.
fn sweep_temp(path: &Path, pid: u32) -> Result<(), StoreError> {
    let file = match File::open(path) {
        Ok(file) => file,
        // Finished (or swept) by its writer meanwhile.
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(io_error(path, source)),
    };
    let Some(file) = LockedFile::try_new(file) else {
        return Ok(());
    };
    let old = file
        .metadata()
        .and_then(|meta| meta.modified())
        .ok()
        .and_then(|modified| modified.elapsed().ok())
        .is_some_and(|age| age >= STALE_TEMP);
    if !old && may_be_alive(pid) {
        return Ok(());
    }
    match fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "removed a temporary session file left by a crash");
            Ok(())
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(io_error(path, source)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_give_their_writer() {
        assert_eq!(temp_writer(".s-1.2.4242-17-3.tmp"), Some(4242));
        assert_eq!(temp_writer(".a.7-0-0.tmp"), Some(7));
        assert_eq!(temp_writer("a.jsonl"), None);
        assert_eq!(temp_writer(".a.x-0-0.tmp"), None);
        assert_eq!(temp_writer(".notes.tmp"), None);
        assert_eq!(temp_writer(".vim.1234.tmp"), None);
    }

    #[tokio::test]
    async fn header_many_reads_each_header_as_header_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
        let ids: Vec<SessionId> = ["h-a", "h-b", "h-missing", "h-foreign"]
            .into_iter()
            .map(|id| SessionId::new(id).unwrap())
            .collect();
        for id in &ids[..2] {
            drop(
                store
                    .create(&SessionHeader::new(id.clone(), "/"), &[])
                    .await
                    .unwrap(),
            );
        }
        fs::write(store.log_path(&ids[3]), "not a header\n").unwrap();
        let many = store.header_many(&ids).await;
        assert_eq!(many.len(), ids.len());
        for (id, batched) in ids.iter().zip(many) {
            let one = store.header(id).await;
            match (batched, one) {
                (Ok(batched), Ok(one)) => assert_eq!(batched.id, one.id),
                (Err(batched), Err(one)) => assert_eq!(batched.to_string(), one.to_string()),
                (batched, one) => panic!("{id}: {batched:?} against {one:?}"),
            }
        }
    }
}
