//! The embedded default session store: one JSON-lines file per session,
//! `<dir>/<session-id>.jsonl`, whose first line is the header and every later
//! line one event. A log is published whole (written to a hidden temporary
//! file, then hard-linked into place so an existing log is never clobbered),
//! has exactly one writer at a time (an in-process registry plus an exclusive
//! OS file lock), and only ever grows by whole lines. Reading never skips a
//! line: the one thing repaired is a torn last line, cut on open and reported.
//! This module must never rewrite, reorder or drop a complete line, and never
//! write to a log it does not hold the lock for.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use async_trait::async_trait;
use dsh_core::{
    Durability, LoadedSession, SessionEvent, SessionHeader, SessionId, SessionLog, SessionStore,
    StoreError, TornTail,
};

use super::check_contiguous;

/// The file extension of a session log.
const EXTENSION: &str = ".jsonl";

/// A write buffer larger than this is released after use rather than kept.
const KEEP_BUFFER: usize = 1 << 20;

/// State shared by every clone of a [`JsonlStore`].
#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    durability: Durability,
    /// Ids held by a writer (or being created or removed) in this process.
    writers: Mutex<HashSet<SessionId>>,
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
/// decides only when the file is also forced to stable storage.
#[derive(Debug, Clone)]
pub struct JsonlStore {
    shared: Arc<Shared>,
}

impl JsonlStore {
    /// A store over `dir`, created (with its parents) if missing.
    ///
    /// # Errors
    /// [`StoreError::Io`] when the directory cannot be created.
    pub fn new(dir: impl Into<PathBuf>, durability: Durability) -> Result<Self, StoreError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|source| io_error(&dir, source))?;
        Ok(Self {
            shared: Arc::new(Shared {
                dir,
                durability,
                writers: Mutex::new(HashSet::new()),
            }),
        })
    }

    /// The directory holding the logs.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// When this store forces writes to stable storage.
    pub fn durability(&self) -> Durability {
        self.shared.durability
    }

    /// The file that holds (or would hold) the log of `id`.
    pub fn log_path(&self, id: &SessionId) -> PathBuf {
        let mut name = String::with_capacity(id.as_str().len() + EXTENSION.len());
        name.push_str(id.as_str());
        name.push_str(EXTENSION);
        self.shared.dir.join(name)
    }

    /// Reserve `id` in the in-process writer registry.
    fn claim(&self, id: &SessionId) -> Option<WriterSlot> {
        self.shared
            .writers()
            .insert(id.clone())
            .then(|| WriterSlot {
                shared: Arc::clone(&self.shared),
                id: id.clone(),
            })
    }
}

/// A reservation in the in-process writer registry, released on drop.
#[derive(Debug)]
struct WriterSlot {
    shared: Arc<Shared>,
    id: SessionId,
}

impl Drop for WriterSlot {
    fn drop(&mut self) {
        self.shared.writers().remove(&self.id);
    }
}

/// The append handle of one log in a [`JsonlStore`]. It holds the log's
/// exclusive file lock and its registry entry; dropping it releases both.
///
/// Each append is one `write` of whole lines. A failed write or fsync
/// poisons the handle: that call and every later append or checkpoint return
/// the same error, and the log must be reopened (which cuts any torn line).
/// An append whose future is dropped after its write has still written.
#[derive(Debug)]
pub struct JsonlLog {
    // Declared first so that the file (and its lock) is closed before the
    // registry entry is released.
    file: Arc<File>,
    path: PathBuf,
    id: SessionId,
    durability: Durability,
    state: Mutex<WriterState>,
    _slot: WriterSlot,
}

/// What an append needs under the handle's mutex.
#[derive(Debug)]
struct WriterState {
    /// The seq the next appended event must carry.
    next_seq: u64,
    /// The failure that made the handle unusable, if any.
    poisoned: Option<StoreError>,
    /// Reused serialisation buffer.
    buf: Vec<u8>,
}

impl JsonlLog {
    fn new(
        file: File,
        path: PathBuf,
        id: SessionId,
        durability: Durability,
        next_seq: u64,
        slot: WriterSlot,
    ) -> Self {
        Self {
            file: Arc::new(file),
            path,
            id,
            durability,
            state: Mutex::new(WriterState {
                next_seq,
                poisoned: None,
                buf: Vec::new(),
            }),
            _slot: slot,
        }
    }

    /// The file this handle appends to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The session whose log this is.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    fn state(&self) -> MutexGuard<'_, WriterState> {
        // Every critical section leaves the state consistent (a failed write
        // poisons it explicitly), so a panic elsewhere does not invalidate it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn poisoned(&self) -> Option<StoreError> {
        self.state().poisoned.clone()
    }

    /// Fsync on the blocking pool; a failure poisons the handle.
    async fn sync(&self) -> Result<(), StoreError> {
        let file = Arc::clone(&self.file);
        let path = self.path.clone();
        let result = blocking(&self.path, move || {
            file.sync_data().map_err(|source| io_error(&path, source))
        })
        .await;
        if let Err(err) = &result {
            self.state().poisoned.get_or_insert_with(|| err.clone());
        }
        result
    }
}

#[async_trait]
impl SessionLog for JsonlLog {
    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError> {
        {
            let mut state = self.state();
            if let Some(err) = &state.poisoned {
                return Err(err.clone());
            }
            if events.is_empty() {
                return Ok(());
            }
            check_contiguous(&self.id, state.next_seq, events)?;
            let WriterState { buf, .. } = &mut *state;
            buf.clear();
            for event in events {
                serde_json::to_writer(&mut *buf, event).map_err(|err| {
                    io_error(&self.path, io::Error::new(io::ErrorKind::InvalidData, err))
                })?;
                buf.push(b'\n');
            }
            // One write of whole lines: a crash can tear only the last one.
            if let Err(source) = (&*self.file).write_all(buf) {
                let err = io_error(&self.path, source);
                state.poisoned = Some(err.clone());
                return Err(err);
            }
            if buf.capacity() > KEEP_BUFFER {
                *buf = Vec::new();
            }
            state.next_seq += events.len() as u64;
        }
        if self.durability == Durability::EveryEvent {
            self.sync().await?;
        }
        Ok(())
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        if let Some(err) = self.poisoned() {
            return Err(err);
        }
        match self.durability {
            Durability::TurnBoundary => self.sync().await,
            // Nothing to force, or every append already forced itself.
            Durability::None | Durability::EveryEvent => Ok(()),
        }
    }
}

#[async_trait]
impl SessionStore for JsonlStore {
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
        let slot = self
            .claim(&id)
            .ok_or_else(|| StoreError::Exists(id.clone()))?;
        let dir = self.shared.dir.clone();
        let durability = self.shared.durability;
        let (task_id, task_path) = (id.clone(), path.clone());
        let file = blocking(&path, move || {
            create_log(&dir, &task_id, &task_path, &buf, durability)
        })
        .await?;
        let next_seq = seed.len() as u64;
        Ok(Arc::new(JsonlLog::new(
            file, path, id, durability, next_seq, slot,
        )))
    }

    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        let slot = self.claim(id).ok_or_else(|| StoreError::Busy(id.clone()))?;
        let path = self.log_path(id);
        let durability = self.shared.durability;
        let (task_id, task_path) = (id.clone(), path.clone());
        let (loaded, file) =
            blocking(&path, move || open_log(&task_id, &task_path, durability)).await?;
        let next_seq = loaded.events.len() as u64;
        let log = JsonlLog::new(file, path, id.clone(), durability, next_seq, slot);
        Ok((loaded, Arc::new(log)))
    }

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        let path = self.log_path(id);
        let (task_id, task_path) = (id.clone(), path.clone());
        blocking(&path, move || load_log(&task_id, &task_path)).await
    }

    async fn load_many(&self, ids: &[SessionId]) -> Vec<Result<LoadedSession, StoreError>> {
        // One trip to the blocking pool for the whole batch: per-file task
        // hand-offs dominate the cost of reading many small logs.
        let paths: Vec<(SessionId, PathBuf)> = ids
            .iter()
            .map(|id| (id.clone(), self.log_path(id)))
            .collect();
        let dir = self.dir().to_path_buf();
        let count = ids.len();
        let batch = blocking(&dir, move || {
            Ok(paths
                .iter()
                .map(|(id, path)| load_log(id, path))
                .collect::<Vec<_>>())
        })
        .await;
        match batch {
            Ok(loaded) => loaded,
            Err(err) => (0..count).map(|_| Err(err.clone())).collect(),
        }
    }

    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        let path = self.log_path(id);
        let (task_id, task_path) = (id.clone(), path.clone());
        blocking(&path, move || read_header(&task_id, &task_path)).await
    }

    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        let path = self.log_path(id);
        path.try_exists().map_err(|source| io_error(&path, source))
    }

    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        let dir = self.shared.dir.clone();
        blocking(&self.shared.dir, move || list_logs(&dir)).await
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        let slot = self.claim(id).ok_or_else(|| StoreError::Busy(id.clone()))?;
        let path = self.log_path(id);
        let dir = self.shared.dir.clone();
        let durability = self.shared.durability;
        let (task_id, task_path) = (id.clone(), path.clone());
        blocking(&path, move || {
            let result = remove_log(&dir, &task_id, &task_path, durability);
            drop(slot);
            result
        })
        .await
    }
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

/// Take the exclusive advisory lock on `file`, or report the log busy.
fn try_lock(file: &File, id: &SessionId, path: &Path) -> Result<(), StoreError> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(StoreError::Locked(id.clone())),
        Err(TryLockError::Error(source)) => Err(io_error(path, source)),
    }
}

/// After locking an open `file`, make sure `path` still names it: a log
/// removed (or removed and re-created) between open and lock is not the log.
fn still_linked(file: &File, id: &SessionId, path: &Path) -> Result<(), StoreError> {
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
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(|source| io_error(dir, source))
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
            tracing::warn!(path = %self.path.display(), error = %err, "could not remove a temporary session file");
        }
    }
}

/// Create a fresh hidden temporary file next to the log of `id`.
fn create_temp(dir: &Path, id: &SessionId) -> Result<(TempFile, File), StoreError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    let mut attempts = 0;
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(".{id}.{pid}-{nanos}-{n}.tmp"));
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

/// Write `contents` to a temporary file, lock it, and publish it as `path`
/// without clobbering. Returns the locked writer.
fn create_log(
    dir: &Path,
    id: &SessionId,
    path: &Path,
    contents: &[u8],
    durability: Durability,
) -> Result<File, StoreError> {
    let (temp, file) = create_temp(dir, id)?;
    // Locked before it is visible under its real name, so no other writer
    // can slip in between publication and this handle.
    try_lock(&file, id, &temp.path)?;
    (&file)
        .write_all(contents)
        .map_err(|source| io_error(&temp.path, source))?;
    if durability != Durability::None {
        file.sync_all()
            .map_err(|source| io_error(&temp.path, source))?;
    }
    match fs::hard_link(&temp.path, path) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            return Err(StoreError::Exists(id.clone()));
        }
        Err(source) => return Err(io_error(path, source)),
    }
    drop(temp);
    if durability != Durability::None
        && let Err(err) = sync_dir(dir)
    {
        // All or nothing: withdraw a log whose publication may not last.
        if let Err(undo) = fs::remove_file(path) {
            tracing::warn!(path = %path.display(), error = %undo, "could not withdraw a half-created session log");
        }
        return Err(err);
    }
    Ok(file)
}

/// Open, lock, read and repair the log of `id` for appending.
fn open_log(
    id: &SessionId,
    path: &Path,
    durability: Durability,
) -> Result<(LoadedSession, File), StoreError> {
    let mut attempts = 0;
    let mut file = loop {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|source| open_error(id, path, source))?;
        try_lock(&file, id, path)?;
        match still_linked(&file, id, path) {
            Ok(()) => break file,
            // Removed (and perhaps created afresh) under us: look again.
            Err(StoreError::NotFound(_)) if attempts < 3 => attempts += 1,
            Err(err) => return Err(err),
        }
    };
    let size = file.metadata().map_or(0, |meta| meta.len());
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    file.read_to_end(&mut bytes)
        .map_err(|source| io_error(path, source))?;
    let parsed = parse_log(id, path, bytes)?;
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
        (&file)
            .write_all(b"\n")
            .map_err(|source| io_error(path, source))?;
        tracing::warn!(path = %path.display(), "restored the missing newline after the last line of a session log");
    }
    if durability != Durability::None && (parsed.torn_tail.is_some() || parsed.missing_newline) {
        file.sync_data().map_err(|source| io_error(path, source))?;
    }
    let loaded = LoadedSession {
        header: parsed.header,
        events: parsed.events,
        torn_tail: parsed.torn_tail,
    };
    Ok((loaded, file))
}

/// Read the log of `id` without locking or changing it.
fn load_log(id: &SessionId, path: &Path) -> Result<LoadedSession, StoreError> {
    let bytes = fs::read(path).map_err(|source| open_error(id, path, source))?;
    let parsed = parse_log(id, path, bytes)?;
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
    let file = File::open(path).map_err(|source| open_error(id, path, source))?;
    let mut line = Vec::new();
    BufReader::new(file)
        .read_until(b'\n', &mut line)
        .map_err(|source| io_error(path, source))?;
    parse_header(id, path, &line)
}

/// The ids of every log in `dir`, sorted.
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

/// Delete the log of `id` once no writer (in any process) holds it.
fn remove_log(
    dir: &Path,
    id: &SessionId,
    path: &Path,
    durability: Durability,
) -> Result<(), StoreError> {
    let file = File::open(path).map_err(|source| open_error(id, path, source))?;
    try_lock(&file, id, path)?;
    still_linked(&file, id, path)?;
    fs::remove_file(path).map_err(|source| open_error(id, path, source))?;
    drop(file);
    if durability != Durability::None {
        sync_dir(dir)?;
    }
    Ok(())
}

/// A log as parsed from its bytes.
struct Parsed {
    header: SessionHeader,
    events: Vec<SessionEvent>,
    /// How many bytes of the file belong to the log (everything but a torn tail).
    keep: u64,
    /// The torn last line, if any (excluded from `keep`).
    torn_tail: Option<TornTail>,
    /// Whether the last line parsed but lacks its `\n`.
    missing_newline: bool,
}

fn corrupt(path: &Path, line: u64, message: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

/// Parse the header line (with or without its `\n`) and check it names `id`.
fn parse_header(id: &SessionId, path: &Path, line: &[u8]) -> Result<SessionHeader, StoreError> {
    if line.is_empty() {
        return Err(corrupt(path, 1, "the file is empty: no session header"));
    }
    let header: SessionHeader = serde_json::from_slice(line)
        .map_err(|err| corrupt(path, 1, format!("unreadable session header: {err}")))?;
    if header.id != *id {
        let message = format!(
            "the header names session `{}`, but the file is the log of `{id}`",
            header.id
        );
        return Err(corrupt(path, 1, message));
    }
    Ok(header)
}

/// Parse a whole log. The only line that may fail without failing the log is
/// a last one with no `\n` (a torn append), which is reported, not kept.
fn parse_log(id: &SessionId, path: &Path, bytes: Vec<u8>) -> Result<Parsed, StoreError> {
    let total = bytes.len() as u64;
    let Some(last_newline) = bytes.iter().rposition(|&byte| byte == b'\n') else {
        // No complete line: at most a header whose newline was lost. A header
        // is published whole, so it is never treated as torn.
        let header = parse_header(id, path, &bytes)?;
        return Ok(Parsed {
            header,
            events: Vec::new(),
            keep: total,
            torn_tail: None,
            missing_newline: !bytes.is_empty(),
        });
    };
    let complete = last_newline + 1;
    let tail = &bytes[complete..];
    let tail_event = (!tail.is_empty()).then(|| {
        std::str::from_utf8(tail)
            .ok()
            .and_then(|text| SessionEvent::from_json_line(text).ok())
    });
    let header_end = bytes
        .iter()
        .position(|&byte| byte == b'\n')
        .unwrap_or(last_newline);
    let header = parse_header(id, path, &bytes[..header_end])?;
    let mut events = if header_end < last_newline {
        let region = &bytes[header_end + 1..last_newline];
        let threads = if region.len() >= PARALLEL_PARSE_BYTES {
            parse_threads()
        } else {
            1
        };
        parse_events(path, region, threads)?
    } else {
        Vec::new()
    };
    // The header, one line per event, then the tail.
    let next_line = events.len() as u64 + 2;
    match tail_event {
        None => Ok(Parsed {
            header,
            events,
            keep: total,
            torn_tail: None,
            missing_newline: false,
        }),
        Some(Some(event)) => {
            check_seq(path, next_line, events.len() as u64, &event)?;
            events.push(event);
            Ok(Parsed {
                header,
                events,
                keep: total,
                torn_tail: None,
                missing_newline: true,
            })
        }
        Some(None) => Ok(Parsed {
            header,
            events,
            keep: complete as u64,
            torn_tail: Some(TornTail {
                path: path.to_path_buf(),
                line: next_line,
                bytes: tail.len() as u64,
            }),
            missing_newline: false,
        }),
    }
}

/// Logs at least this large are parsed on several threads.
const PARALLEL_PARSE_BYTES: usize = 1 << 20;

/// How many threads parse a large log.
fn parse_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .clamp(1, 8)
    })
}

/// Split `region` (event lines without the final `\n`) into up to `parts`
/// runs of whole lines of about equal size, dropping the `\n` between runs.
fn split_lines(region: &[u8], parts: usize) -> Vec<&[u8]> {
    let target = region.len() / parts.max(1);
    let mut chunks = Vec::with_capacity(parts);
    let mut start = 0;
    for part in 1..parts {
        let from = (part * target).max(start);
        let Some(end) = region[from..]
            .iter()
            .position(|&byte| byte == b'\n')
            .map(|at| from + at)
        else {
            break;
        };
        chunks.push(&region[start..end]);
        start = end + 1;
    }
    chunks.push(&region[start..]);
    chunks
}

/// The events parsed from one run of lines, up to the first line that is
/// not a well-formed event (its problem in `failure`).
struct ChunkOutcome {
    events: Vec<SessionEvent>,
    failure: Option<String>,
}

/// Parse one run of `\n`-separated lines, stopping at the first bad one.
/// Seqs are checked by the caller, which knows where the run starts.
fn parse_chunk(chunk: &[u8]) -> ChunkOutcome {
    let lines = chunk.iter().filter(|&&byte| byte == b'\n').count() + 1;
    let mut events = Vec::with_capacity(lines);
    let (text, mut failure) = match std::str::from_utf8(chunk) {
        Ok(text) => (Some(text), None),
        Err(err) => {
            // Keep the whole lines before the one holding the bad byte.
            let valid = &chunk[..err.valid_up_to()];
            let before = valid
                .iter()
                .rposition(|&byte| byte == b'\n')
                .and_then(|end| std::str::from_utf8(&valid[..end]).ok());
            (before, Some("invalid UTF-8".to_owned()))
        }
    };
    for line in text.into_iter().flat_map(|text| text.split('\n')) {
        match SessionEvent::from_json_line(line) {
            Ok(event) => events.push(event),
            Err(err) => {
                failure = Some(format!("unreadable event: {err}"));
                break;
            }
        }
    }
    ChunkOutcome { events, failure }
}

/// Parse the event lines of a log (everything between the header's `\n`
/// and the final `\n`), split over up to `threads` threads. The event on
/// each line must carry its index as its seq.
fn parse_events(
    path: &Path,
    region: &[u8],
    threads: usize,
) -> Result<Vec<SessionEvent>, StoreError> {
    let chunks = split_lines(region, threads);
    let outcomes = match chunks.as_slice() {
        [only] => vec![parse_chunk(only)],
        [head, rest @ ..] => std::thread::scope(|scope| {
            let pending: Vec<_> = rest
                .iter()
                .map(|&chunk| {
                    let spawned = std::thread::Builder::new()
                        .name("dsh-store-parse".into())
                        .spawn_scoped(scope, move || parse_chunk(chunk));
                    (chunk, spawned.ok())
                })
                .collect();
            let mut outcomes = Vec::with_capacity(chunks.len());
            outcomes.push(parse_chunk(head));
            for (chunk, handle) in pending {
                outcomes.push(match handle {
                    Some(handle) => handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    // No thread to spare: parse it here.
                    None => parse_chunk(chunk),
                });
            }
            outcomes
        }),
        [] => Vec::new(),
    };
    let total: usize = outcomes.iter().map(|outcome| outcome.events.len()).sum();
    let mut events: Vec<SessionEvent> = Vec::new();
    for mut outcome in outcomes {
        for (index, event) in (events.len() as u64..).zip(&outcome.events) {
            // Line 1 is the header.
            check_seq(path, index + 2, index, event)?;
        }
        if let Some(message) = outcome.failure {
            let line = (events.len() + outcome.events.len()) as u64 + 2;
            return Err(corrupt(path, line, message));
        }
        if events.is_empty() {
            events = outcome.events;
            events.reserve(total - events.len());
        } else {
            events.append(&mut outcome.events);
        }
    }
    Ok(events)
}

/// Check that `event`, on line `line`, is the `index`-th event of its log.
fn check_seq(path: &Path, line: u64, index: u64, event: &SessionEvent) -> Result<(), StoreError> {
    if event.seq == index {
        Ok(())
    } else {
        Err(corrupt(
            path,
            line,
            format!("expected seq {index}, found {}", event.seq),
        ))
    }
}

#[cfg(test)]
mod tests {
    use dsh_core::session::{EventPayload, TurnStart};

    use super::*;

    fn region(count: u64) -> String {
        (0..count)
            .map(|seq| {
                SessionEvent {
                    seq,
                    time: seq,
                    payload: EventPayload::TurnStart(TurnStart { turn: seq }),
                }
                .to_json_line()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn replace_line(text: &str, index: usize, with: &[u8]) -> Vec<u8> {
        let mut lines: Vec<Vec<u8>> = text
            .split('\n')
            .map(|line| line.as_bytes().to_vec())
            .collect();
        lines[index] = with.to_vec();
        lines.join(&b'\n')
    }

    fn failure_line(bytes: &[u8], threads: usize) -> (u64, String) {
        match parse_events(Path::new("log.jsonl"), bytes, threads) {
            Err(StoreError::Corrupt { line, message, .. }) => (line, message),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn split_lines_cuts_only_between_lines() {
        let text = region(10);
        for parts in 1..14 {
            let chunks = split_lines(text.as_bytes(), parts);
            assert!(!chunks.is_empty() && chunks.len() <= parts);
            assert_eq!(chunks.join(&b'\n'), text.as_bytes(), "{parts}");
        }
    }

    #[test]
    fn every_split_parses_the_same_events() {
        let text = region(25);
        let one = parse_events(Path::new("log.jsonl"), text.as_bytes(), 1).unwrap();
        assert_eq!(one.len(), 25);
        for threads in 2..6 {
            let many = parse_events(Path::new("log.jsonl"), text.as_bytes(), threads).unwrap();
            assert_eq!(many, one, "{threads}");
        }
    }

    #[test]
    fn every_split_reports_the_first_bad_line() {
        let text = region(12);
        for bad in 0..12 {
            let garbage = replace_line(&text, bad, b"{\"seq\":");
            let gap = replace_line(
                &text,
                bad,
                region(bad as u64 + 2)
                    .rsplit('\n')
                    .next()
                    .unwrap()
                    .as_bytes(),
            );
            let utf8 = replace_line(&text, bad, b"{\"seq\":\xff}");
            // A second problem further on must not mask the first.
            let twice = replace_line(
                &String::from_utf8(garbage.clone()).unwrap(),
                11.max(bad),
                b"x",
            );
            for threads in 1..5 {
                let line = bad as u64 + 2;
                let (at, message) = failure_line(&garbage, threads);
                assert_eq!(at, line, "garbage at {bad}, {threads} threads");
                assert!(message.starts_with("unreadable event"), "{message}");
                let (at, message) = failure_line(&gap, threads);
                assert_eq!(at, line, "gap at {bad}, {threads} threads");
                assert_eq!(message, format!("expected seq {bad}, found {}", bad + 1));
                let (at, message) = failure_line(&utf8, threads);
                assert_eq!(
                    (at, message.as_str()),
                    (line, "invalid UTF-8"),
                    "{threads} threads"
                );
                assert_eq!(failure_line(&twice, threads).0, line);
            }
        }
    }
}
