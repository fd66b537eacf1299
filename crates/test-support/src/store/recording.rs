//! [`RecordingStore`]: records every successful write of the store it
//! wraps with the file lengths around it, so a crash test can rebuild the
//! directory as a crash at any byte of any write would have left it.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dsh_core::{
    LoadedSession, LogLayer, SessionEvent, SessionHeader, SessionId, SessionLog, SessionStore,
    StoreError, StoreLayer,
};

use super::{Op, lock};

/// What a [`RecordingStore`]'s run left ([`RecordingStore::finals`]).
#[derive(Debug, Clone, Default)]
pub struct Finals {
    /// The bytes of every file a write touched, by path.
    pub files: HashMap<PathBuf, Vec<u8>>,
    /// The events of every log written, by session.
    pub events: HashMap<SessionId, Vec<SessionEvent>>,
}

/// One write a [`RecordingStore`] saw succeed, in the order they happened.
#[derive(Debug, Clone)]
pub struct Write {
    /// [`Op::Create`] or [`Op::Append`] (a remove is recorded with no bytes).
    pub op: Op,
    /// The log written.
    pub id: SessionId,
    /// The file that holds it.
    pub path: PathBuf,
    /// The file's length before the write (0 for a create).
    pub len_before: u64,
    /// The file's length after it.
    pub len_after: u64,
    /// The events it wrote (a create's seed).
    pub events: Vec<SessionEvent>,
}

impl Write {
    /// How many bytes the write added.
    pub fn len(&self) -> u64 {
        self.len_after.saturating_sub(self.len_before)
    }

    /// Whether it added nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Write {
    /// Lay out in `dir` what this create, interrupted after `bytes` of its
    /// write, leaves in a JSONL store: a header-only create writes its log
    /// in place, so the log's file holds those bytes (a torn header, which
    /// the store reports as not a session and the next create of the id
    /// replaces); a seeded one writes a hidden temporary file of the writer
    /// `pid` (swept when a store next opens the directory), and the log is
    /// absent.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn lay_out_torn_create(
        &self,
        dir: &std::path::Path,
        bytes: &[u8],
        pid: u32,
    ) -> io::Result<PathBuf> {
        let path = if self.events.is_empty() {
            let name = self.path.file_name().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "a log path without a name")
            })?;
            dir.join(name)
        } else {
            dir.join(format!(".{}.{pid}-0-0.tmp", self.id))
        };
        std::fs::write(&path, bytes)?;
        Ok(path)
    }

    /// Whether this create writes its log in place (it has no seed), so an
    /// interrupted one leaves a torn header rather than a temporary file.
    pub fn creates_in_place(&self) -> bool {
        self.op == Op::Create && self.events.is_empty()
    }
}

/// Where a crash happens in a recorded run: during write `write` (an index
/// into [`RecordingStore::writes`]), after `bytes` of it reached the file.
/// Every earlier write is whole, no later one happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashPoint {
    /// The write the crash interrupts.
    pub write: usize,
    /// How many of its bytes reached the file (`0..=len`).
    pub bytes: u64,
}

/// Where the log of an id lives, for a store that keeps one file per log.
type Locate = Arc<dyn Fn(&SessionId) -> PathBuf + Send + Sync>;

/// A store that records every successful write of the store it wraps, with
/// the file lengths before and after, so that a test can rebuild the
/// directory as a crash at any byte of any write would have left it (see
/// [`RecordingStore::crash_points`] and [`RecordingStore::rebuild`]). It
/// assumes what a JSONL store guarantees: a log only grows by appends, and a
/// create publishes its file whole. Run the workload on one thread (a
/// current-thread runtime) so that writes do not interleave within a call.
#[derive(Clone)]
pub struct RecordingStore<S> {
    inner: S,
    locate: Locate,
    writes: Arc<Mutex<Vec<Write>>>,
}

impl<S> fmt::Debug for RecordingStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingStore")
            .field("writes", &lock(&self.writes).len())
            .finish_non_exhaustive()
    }
}

/// The length of `path`, 0 when missing or unreadable.
fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |meta| meta.len())
}

impl<S: SessionStore> RecordingStore<S> {
    /// Wrap `inner`, whose log of an id is the file `locate(id)`.
    pub fn new(inner: S, locate: impl Fn(&SessionId) -> PathBuf + Send + Sync + 'static) -> Self {
        Self {
            inner,
            locate: Arc::new(locate),
            writes: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Every write so far, in order.
    pub fn writes(&self) -> Vec<Write> {
        lock(&self.writes).clone()
    }

    /// What the recorded run left, the images a crash rebuild cuts: the
    /// bytes of every file a write touched, as they are now, and the events
    /// of every log written, as the inner store loads them.
    ///
    /// # Errors
    /// [`StoreError::Io`] when a file cannot be read, or the load's error.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn finals(&self) -> Result<Finals, StoreError> {
        let mut finals = Finals::default();
        for write in self.writes() {
            if !finals.files.contains_key(&write.path) {
                let bytes = std::fs::read(&write.path).map_err(|source| StoreError::Io {
                    path: write.path.clone(),
                    source: Arc::new(source),
                })?;
                finals.files.insert(write.path.clone(), bytes);
            }
            if !finals.events.contains_key(&write.id) {
                let loaded = self.inner.load(&write.id).await?;
                finals.events.insert(write.id.clone(), loaded.events);
            }
        }
        Ok(finals)
    }

    /// Every crash point of the recorded run: each write at every byte
    /// offset when it is at most `every_byte` long, and otherwise at its
    /// ends, around each line boundary and at a stride between them.
    ///
    /// # Errors
    /// A file of the run cannot be read.
    pub fn crash_points(&self, every_byte: u64) -> io::Result<Vec<CrashPoint>> {
        let mut points = Vec::new();
        for (index, write) in self.writes().iter().enumerate() {
            let len = write.len();
            let mut offsets: Vec<u64> = if len <= every_byte {
                (0..=len).collect()
            } else {
                let bytes = std::fs::read(&write.path)?;
                let start = usize::try_from(write.len_before).unwrap_or(usize::MAX);
                let end = usize::try_from(write.len_after).unwrap_or(usize::MAX);
                let region = bytes.get(start..end).unwrap_or_default();
                let stride = (len / 16).max(1);
                let mut offsets: Vec<u64> = (0..=len)
                    .step_by(usize::try_from(stride).unwrap_or(1))
                    .collect();
                for (at, _) in region
                    .iter()
                    .enumerate()
                    .filter(|(_, byte)| **byte == b'\n')
                {
                    let at = at as u64;
                    offsets.extend([at, at + 1, at + 2]);
                }
                offsets.extend([1, len.saturating_sub(1), len]);
                offsets
            };
            offsets.retain(|offset| *offset <= len);
            offsets.sort_unstable();
            offsets.dedup();
            points.extend(offsets.into_iter().map(|bytes| CrashPoint {
                write: index,
                bytes,
            }));
        }
        Ok(points)
    }

    /// The files of the run as a crash at `point` would have left them,
    /// given `finals`, the contents of every file at the end of the run
    /// (read them once). A file is present with its length at that moment;
    /// the interrupted write contributes its first `point.bytes`, except that
    /// a create publishes whole or not at all, so an interrupted create is
    /// absent (the caller decides what temporary file it leaves). Returns
    /// `(path, contents)` pairs, and whether the interrupted write was a
    /// create that never got published.
    pub fn rebuild(
        &self,
        finals: &std::collections::HashMap<PathBuf, Vec<u8>>,
        point: CrashPoint,
    ) -> (Vec<(PathBuf, Vec<u8>)>, Option<Write>) {
        let writes = self.writes();
        let mut lens: Vec<(PathBuf, u64)> = Vec::new();
        let mut set = |path: &PathBuf, len: Option<u64>| match (
            lens.iter().position(|(known, _)| known == path),
            len,
        ) {
            (Some(at), Some(len)) => lens[at].1 = len,
            (Some(at), None) => {
                lens.remove(at);
            }
            (None, Some(len)) => lens.push((path.clone(), len)),
            (None, None) => {}
        };
        let mut unpublished = None;
        for (index, write) in writes.iter().enumerate().take(point.write + 1) {
            let whole = index < point.write || point.bytes >= write.len();
            match write.op {
                Op::Remove if whole => set(&write.path, None),
                Op::Remove => {}
                Op::Create if !whole => unpublished = Some(write.clone()),
                _ if whole => set(&write.path, Some(write.len_after)),
                _ => set(&write.path, Some(write.len_before + point.bytes)),
            }
        }
        let files = lens
            .into_iter()
            .map(|(path, len)| {
                let bytes = finals.get(&path).map_or_else(Vec::new, |bytes| {
                    bytes[..usize::try_from(len).unwrap_or(usize::MAX).min(bytes.len())].to_vec()
                });
                (path, bytes)
            })
            .collect();
        (files, unpublished)
    }

    fn record(&self, write: Write) {
        lock(&self.writes).push(write);
    }

    fn wrap(&self, id: SessionId, log: Arc<dyn SessionLog>) -> Arc<dyn SessionLog> {
        Arc::new(RecordingLog {
            path: (self.locate)(&id),
            id,
            inner: log,
            writes: Arc::clone(&self.writes),
        })
    }
}

/// A log handle of a [`RecordingStore`].
struct RecordingLog {
    id: SessionId,
    path: PathBuf,
    inner: Arc<dyn SessionLog>,
    writes: Arc<Mutex<Vec<Write>>>,
}

#[async_trait]
impl LogLayer for RecordingLog {
    fn wrapped(&self) -> &dyn SessionLog {
        &*self.inner
    }

    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError> {
        let len_before = file_len(&self.path);
        self.inner.append(events).await?;
        if !events.is_empty() {
            lock(&self.writes).push(Write {
                op: Op::Append,
                id: self.id.clone(),
                path: self.path.clone(),
                len_before,
                len_after: file_len(&self.path),
                events: events.to_vec(),
            });
        }
        Ok(())
    }
}

impl<S: SessionStore> RecordingStore<S> {
    /// Record the removal of the log of `id`, whose file `path` was
    /// `len_before` bytes long.
    fn record_remove(&self, id: &SessionId, path: PathBuf, len_before: u64) {
        self.record(Write {
            op: Op::Remove,
            id: id.clone(),
            path,
            len_before,
            len_after: len_before,
            events: Vec::new(),
        });
    }
}

#[async_trait]
impl<S: SessionStore> StoreLayer for RecordingStore<S> {
    fn wrapped(&self) -> &dyn SessionStore {
        &self.inner
    }

    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        let log = self.inner.create(header, seed).await?;
        let path = (self.locate)(&header.id);
        self.record(Write {
            op: Op::Create,
            id: header.id.clone(),
            len_before: 0,
            len_after: file_len(&path),
            path,
            events: seed.to_vec(),
        });
        Ok(self.wrap(header.id.clone(), log))
    }

    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        let (loaded, log) = self.inner.open(id).await?;
        Ok((loaded, self.wrap(id.clone(), log)))
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        let path = (self.locate)(id);
        let len_before = file_len(&path);
        self.inner.remove(id).await?;
        self.record_remove(id, path, len_before);
        Ok(())
    }

    async fn remove_torn(&self, id: &SessionId) -> Result<bool, StoreError> {
        let path = (self.locate)(id);
        let len_before = file_len(&path);
        let removed = self.inner.remove_torn(id).await?;
        if removed {
            self.record_remove(id, path, len_before);
        }
        Ok(removed)
    }
}
