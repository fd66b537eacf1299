//! The session store seam: where logs live. A store creates a log from a
//! header and an optional seed, opens it for appending (one writer at a time),
//! and loads it read-only for anyone else. Implementations decide the medium;
//! they must never reorder, skip or invent events.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::id::SessionId;
use crate::session::{SessionEvent, SessionHeader};

/// When a durable store forces written events to stable storage (fsync).
///
/// It decides only *when* fsync runs, never *whether* an event is written:
/// every append is handed to the operating system before it returns, so a
/// crashed process loses nothing it acknowledged. What fsync adds is survival
/// of a machine or power failure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// Never fsync; the OS writes back when it likes. Fastest.
    None,
    /// Fsync at turn boundaries (a checkpoint) and when a log is created
    /// (the file and its directory entry; a store may force the two at
    /// once so that one journal commit covers both).
    /// The default: a power failure loses at most the turn in flight.
    #[default]
    TurnBoundary,
    /// Fsync after every append. Slowest: one disk flush per append.
    EveryEvent,
    /// Group commit: the same promise as [`Durability::TurnBoundary`] (a
    /// create and a checkpoint return only once what they cover is on
    /// stable storage, appends in between are written but not forced), but
    /// the fsyncs of every log of one store, and of its directory, are
    /// batched: one committer forces whatever logs asked for a sync since
    /// its last round, lingering for more within a bounded window the store
    /// configures while several logs are asking. A single writer is synced
    /// at once; many concurrent writers share their flushes. A crash or
    /// power loss loses only writes whose future had not yet returned.
    /// `TurnBoundary` stays the stricter choice for latency: each of its
    /// syncs is its own and never waits for another log's.
    ///
    /// The physics: a create or checkpoint waits for at least one sync
    /// round trip of the disk (a journal commit and a cache flush, about
    /// 0.1 to 1 ms on common SSDs), so children that each wait for their
    /// own create and turn-end sync, one after another, run no faster than
    /// one per two round trips, however the rounds are batched; only
    /// concurrent writers share them.
    Grouped,
    /// Write-behind group commit, the reference's 200 ms batching made
    /// honest: a create, append or checkpoint returns once its bytes are
    /// handed to the operating system (so a crashed process loses nothing
    /// it acknowledged, as under every mode), and the store's committer
    /// forces every log written since its last round, and the directory,
    /// at least once per window the store configures (by default 200 ms).
    /// A power loss can lose what was written in the last window; only
    /// [`SessionLog::sync`] and the store's [`SessionStore::flush`]
    /// acknowledge durability, resolving once everything written before
    /// them is on stable storage (a lone caller is synced at once, never
    /// held for the window). Within a round the committer forces newly
    /// created logs and the directory before any other log, so a parent's
    /// catalog entry naming a child never reaches stable storage through
    /// the committer before the child's log does. A failed background
    /// sync is never swallowed: it poisons the log (its next write, sync
    /// and checkpoint fail with it) and every later flush of the store
    /// returns it. Since nothing of a create, append or checkpoint waits
    /// for the disk, a store may do their writes inline on the caller's
    /// task (the JSONL store does).
    Batched,
}

impl Durability {
    /// Whether creates and checkpoints are forced to stable storage (every
    /// mode but [`Durability::None`]).
    pub fn syncs(self) -> bool {
        self != Self::None
    }
}

/// A torn last line found and cut off when a log was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The file that held it.
    pub path: PathBuf,
    /// Its 1-based line number.
    pub line: u64,
    /// How many bytes were cut (or would be, for a read-only load).
    pub bytes: u64,
}

/// A log as read from a store.
#[derive(Debug, Clone)]
pub struct LoadedSession {
    /// The header.
    pub header: SessionHeader,
    /// Every event, contiguous from seq 0.
    pub events: Vec<SessionEvent>,
    /// The torn last line that was (when opening) or would be (when loading) cut.
    pub torn_tail: Option<TornTail>,
}

/// A log's header and, of its events, only the extension events of some
/// types, as [`SessionStore::load_kind_many`] reads them: what a fold that
/// needs only those (a subagent catalog, say) has to see.
#[derive(Debug, Clone)]
pub struct KindEvents {
    /// The header.
    pub header: SessionHeader,
    /// The [`crate::EventPayload::Extension`] events of the asked types, in
    /// log order, each with its own seq (so not contiguous).
    pub events: Vec<SessionEvent>,
}

impl KindEvents {
    /// Keep of a whole log only its header and its extension events of
    /// the types in `kinds`.
    pub fn of_kinds(loaded: LoadedSession, kinds: &[&str]) -> Self {
        let events = loaded
            .events
            .into_iter()
            .filter(|event| {
                matches!(&event.payload, crate::EventPayload::Extension { kind: found, .. } if kinds.contains(&found.as_str()))
            })
            .collect();
        Self {
            header: loaded.header,
            events,
        }
    }
}

/// Why a store operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// No log with this id.
    #[error("session `{0}` does not exist")]
    NotFound(SessionId),
    /// A log with this id already exists.
    #[error("session `{0}` already exists")]
    Exists(SessionId),
    /// A writer in this process holds the log (or is creating or removing it).
    #[error("session `{0}` is open for writing in this process")]
    Busy(SessionId),
    /// Another process (or another open file of this one, outside the
    /// store's own bookkeeping) holds the log's lock.
    #[error("session `{0}` is locked by another process")]
    Locked(SessionId),
    /// A line that is not the torn last one could not be read.
    #[error("{}:{line}: corrupt session log: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        message: String,
    },
    /// Events given to append or create were not contiguous with the log.
    #[error("session `{id}`: expected event seq {expected}, got {got}")]
    OutOfSequence {
        /// The session.
        id: SessionId,
        /// The seq the log needs next.
        expected: u64,
        /// The seq offered.
        got: u64,
    },
    /// The file is not a session log at all (a first line that is not a
    /// session header, such as a stray `README.jsonl`). A consumer listing a
    /// directory can skip it with a warning; nothing was changed.
    #[error("{}: not a session log: {reason}", path.display())]
    NotASession {
        /// The file.
        path: PathBuf,
        /// Why it is not one.
        reason: String,
    },
    /// The file is what a create leaves before its header is whole: empty,
    /// or one line without its newline that is not a header. Either the
    /// create is running right now (in this process or another) or it
    /// ended before it was acknowledged: killed, or a power loss under
    /// [`Durability::None`] or [`Durability::Batched`] before the file was
    /// written back. It never held an acknowledged log, so it is nobody's
    /// session: a consumer listing a directory skips it without a warning
    /// (it is the store's own, not a stranger's file), and
    /// [`SessionStore::remove_torn`] removes it once no writer holds it.
    /// Nothing was changed.
    #[error("{}: an unfinished create: the session header was never written whole", path.display())]
    TornCreate {
        /// The file.
        path: PathBuf,
    },
    /// The log was written in a newer durable format than this build reads
    /// (its header's `format` is above [`crate::session::FORMAT_VERSION`]).
    #[error(
        "{}: the session log is in format {found}, newer than format {supported} that this build reads; open it with a newer dsh",
        path.display()
    )]
    UnsupportedFormat {
        /// The file.
        path: PathBuf,
        /// The format the header names.
        found: u64,
        /// The newest format this build reads.
        supported: u32,
    },
    /// The handle was closed ([`SessionLog::close`]); reopen the log.
    #[error("the log of session `{0}` is closed")]
    Closed(SessionId),
    /// The medium failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },
}

impl StoreError {
    /// A stable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "SESSION_NOT_FOUND",
            Self::Exists(_) => "SESSION_EXISTS",
            Self::Busy(_) => "SESSION_BUSY",
            Self::Locked(_) => "SESSION_LOCKED",
            Self::Corrupt { .. } => "SESSION_CORRUPT",
            Self::OutOfSequence { .. } => "OUT_OF_SEQUENCE",
            Self::NotASession { .. } => "NOT_A_SESSION",
            Self::TornCreate { .. } => "TORN_CREATE",
            Self::UnsupportedFormat { .. } => "SESSION_FORMAT_UNSUPPORTED",
            Self::Closed(_) => "SESSION_CLOSED",
            Self::Io { .. } => "STORE_IO",
        }
    }
}

/// The append handle of one open log. Only one exists per log at a time;
/// dropping it (or [`SessionLog::close`]) releases the log.
#[async_trait]
pub trait SessionLog: Send + Sync {
    /// Append events, whose seqs must continue the log. Returns once they are
    /// written (and synced, under [`Durability::EveryEvent`]).
    ///
    /// # Errors
    /// [`StoreError::OutOfSequence`], [`StoreError::Closed`] or an I/O
    /// failure; on failure nothing of the batch counts as written (a durable
    /// store cuts whatever part of it reached the medium) and the handle
    /// must not be used further.
    ///
    /// # Cancel safety
    /// Not cancel safe. A future dropped before it is first polled writes
    /// nothing; a store may write the batch at its first poll, so a future
    /// dropped at any await (an fsync, say) may have written it and advanced
    /// the log's next seq without the caller learning so. The store finishes
    /// such detached work itself and holds the log until it ends. A caller
    /// that must keep memory and log in step must not drop it.
    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError>;

    /// A turn boundary: under [`Durability::TurnBoundary`] (and
    /// [`Durability::Grouped`], batched with other logs), sync to stable
    /// storage; returns once synced. Under [`Durability::Batched`] it only
    /// reports a failure of an earlier background sync: the committer
    /// forces the log within its window, and [`SessionLog::sync`] waits
    /// for that.
    ///
    /// # Errors
    /// [`StoreError::Closed`] or an I/O failure.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped checkpoint changes nothing that was written;
    /// a sync already started finishes detached, holding the log until then.
    async fn checkpoint(&self) -> Result<(), StoreError>;

    /// Acknowledge durability: resolve once everything written to this log
    /// before the call is on stable storage, whatever the store's
    /// [`Durability`] (a store that never syncs by itself syncs here). The
    /// default is [`SessionLog::checkpoint`], right for stores whose
    /// checkpoint forces the log or that hold nothing on a medium.
    ///
    /// # Errors
    /// [`StoreError::Closed`], the failure that poisoned the log, or an
    /// I/O failure of this sync.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped sync changes nothing that was written; a sync
    /// already asked for still runs.
    async fn sync(&self) -> Result<(), StoreError> {
        self.checkpoint().await
    }

    /// Release the log: wait until no operation of this handle is still in
    /// flight anywhere (a detached fsync included), then let go of the
    /// writer lock. Afterwards every append and checkpoint fails, and the
    /// store may open the log again at once. Idempotent. The default does
    /// nothing, for stores whose handle holds nothing beyond itself. Under
    /// [`Durability::Batched`] close does not wait for the log's background
    /// sync: the store holds the log until that has run, and an open (or
    /// remove) of it meanwhile asks for the sync at once and waits for it
    /// instead of refusing.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the log closed for appends; the lock is
    /// then released when the last in-flight operation ends.
    async fn close(&self) {}
}

/// A log that wraps another and changes only some of its methods (a
/// watcher of failed writes, a meter of recorded usage): implement this,
/// and every [`SessionLog`] method it does not override forwards to
/// [`LogLayer::wrapped`], defaulted methods included, as [`StoreLayer`]
/// does for stores. A layer thus never hides an override of the log it
/// wraps (a store's own `sync` or `close`) behind the trait's default.
/// Each method means what the [`SessionLog`] method of the same name means.
#[async_trait]
pub trait LogLayer: Send + Sync {
    /// The log every method not overridden forwards to.
    fn wrapped(&self) -> &dyn SessionLog;

    /// [`SessionLog::append`].
    ///
    /// # Errors
    /// As [`SessionLog::append`].
    ///
    /// # Cancel safety
    /// As [`SessionLog::append`].
    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError> {
        self.wrapped().append(events).await
    }

    /// [`SessionLog::checkpoint`].
    ///
    /// # Errors
    /// As [`SessionLog::checkpoint`].
    ///
    /// # Cancel safety
    /// As [`SessionLog::checkpoint`].
    async fn checkpoint(&self) -> Result<(), StoreError> {
        self.wrapped().checkpoint().await
    }

    /// [`SessionLog::sync`].
    ///
    /// # Errors
    /// As [`SessionLog::sync`].
    ///
    /// # Cancel safety
    /// As [`SessionLog::sync`].
    async fn sync(&self) -> Result<(), StoreError> {
        self.wrapped().sync().await
    }

    /// [`SessionLog::close`].
    ///
    /// # Cancel safety
    /// As [`SessionLog::close`].
    async fn close(&self) {
        self.wrapped().close().await;
    }
}

/// Every layer is a log: each method is the layer's own (its override, or
/// the forward to its inner log). The lint makes a method added to
/// [`SessionLog`] with a default fail the build until it is forwarded here
/// (and given a [`LogLayer`] method), instead of silently taking the default.
#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<L: LogLayer> SessionLog for L {
    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError> {
        LogLayer::append(self, events).await
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        LogLayer::checkpoint(self).await
    }

    async fn sync(&self) -> Result<(), StoreError> {
        LogLayer::sync(self).await
    }

    async fn close(&self) {
        LogLayer::close(self).await;
    }
}

/// Where session logs live.
#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Create a log holding `header` and then `seed` (seqs from 0), and open
    /// it for appending. Either the whole log exists afterwards or none of it.
    ///
    /// # Errors
    /// [`StoreError::Exists`], [`StoreError::OutOfSequence`], or an I/O failure.
    ///
    /// # Cancel safety
    /// Cancel safe: a create whose future is dropped leaves no log behind
    /// (one already published is withdrawn), though the id may stay held in
    /// this process until the store's detached work on it has ended: an open
    /// meanwhile gets [`StoreError::Busy`], a create [`StoreError::Exists`].
    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError>;

    /// Open an existing log for appending, cutting a torn last line (reported
    /// in [`LoadedSession::torn_tail`]).
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::Busy`], [`StoreError::Locked`],
    /// [`StoreError::Corrupt`], [`StoreError::NotASession`],
    /// [`StoreError::TornCreate`], [`StoreError::UnsupportedFormat`], or I/O.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped open leaves the log closed, with at most its
    /// torn tail cut; the id may be held ([`StoreError::Busy`]) until the
    /// store's detached work on it has ended.
    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError>;

    /// Read a log without opening it for writing; a torn last line is left in
    /// place and ignored (a writer may be mid-append).
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::Corrupt`],
    /// [`StoreError::NotASession`], [`StoreError::TornCreate`],
    /// [`StoreError::UnsupportedFormat`], or I/O.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError>;

    /// Read several logs as [`SessionStore::load`] does, results in the
    /// order of `ids`; one bad log fails only its own entry. The default
    /// reads them one by one; a store can batch them (one trip to a blocking
    /// pool, one query) for listings.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn load_many(&self, ids: &[SessionId]) -> Vec<Result<LoadedSession, StoreError>> {
        let mut loaded = Vec::with_capacity(ids.len());
        for id in ids {
            loaded.push(self.load(id).await);
        }
        loaded
    }

    /// Read several logs as [`SessionStore::load_many`] does, keeping only
    /// their header and their extension events of the types in `kinds`, results in
    /// the order of `ids`; one bad log fails only its own entry. A store
    /// may check the other events only for being well-formed event lines
    /// in sequence, without parsing their payloads: a log whose lines are
    /// not whole JSON events fails as `load` would, but a known event type
    /// with a payload of the wrong shape may pass here. The default loads
    /// the logs whole and filters them.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn load_kind_many(
        &self,
        ids: &[SessionId],
        kinds: &[&str],
    ) -> Vec<Result<KindEvents, StoreError>> {
        self.load_many(ids)
            .await
            .into_iter()
            .map(|loaded| loaded.map(|loaded| KindEvents::of_kinds(loaded, kinds)))
            .collect()
    }

    /// Read only the header.
    ///
    /// # Errors
    /// As [`SessionStore::load`].
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        Ok(self.load(id).await?.header)
    }

    /// Read only the headers of several logs, as [`SessionStore::header`]
    /// does, results in the order of `ids`; one bad log fails only its own
    /// entry. The default reads them one by one; a store can batch them
    /// (one trip to a blocking pool) for a scan of a whole directory.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn header_many(&self, ids: &[SessionId]) -> Vec<Result<SessionHeader, StoreError>> {
        let mut headers = Vec::with_capacity(ids.len());
        for id in ids {
            headers.push(self.header(id).await);
        }
        headers
    }

    /// Whether a log exists.
    ///
    /// # Errors
    /// An I/O failure.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError>;

    /// The ids of every log, sorted. Cheap: it reads no log, so a listed id
    /// may still fail to load (a file that is not a session, say).
    ///
    /// # Errors
    /// An I/O failure.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing.
    async fn list(&self) -> Result<Vec<SessionId>, StoreError>;

    /// Acknowledge durability for the whole store: resolve once everything
    /// written to any of its logs (and its directory) before the call is on
    /// stable storage. Under [`Durability::Batched`] a host calls it before
    /// it reports success and exits. The default does nothing, for stores
    /// that sync every write they acknowledge or hold nothing on a medium.
    ///
    /// # Errors
    /// An I/O failure of this or of any earlier background sync of the
    /// store: once a sync failed, what it covered may be lost, and every
    /// later flush says so.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped flush changes nothing that was written; a
    /// sync already asked for still runs.
    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Delete a log that no writer holds.
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::Busy`], [`StoreError::Locked`], or I/O.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped at an await, the log may or may not be gone
    /// (the removal finishes detached, holding the id until it ends).
    async fn remove(&self, id: &SessionId) -> Result<(), StoreError>;

    /// Delete the log of `id` if it is what a create that crashed before
    /// its header was written leaves (a torn, header-only file: `load`
    /// says [`StoreError::TornCreate`]) and no writer holds it; `true`
    /// when it was removed or was already gone. Such a file is nobody's
    /// session, so recovery may remove it. The default (a store whose
    /// creates are atomic) removes nothing.
    ///
    /// # Errors
    /// [`StoreError::Busy`] when this process holds the id, or I/O.
    ///
    /// # Cancel safety
    /// As [`SessionStore::remove`].
    async fn remove_torn(&self, id: &SessionId) -> Result<bool, StoreError> {
        let _ = id;
        Ok(false)
    }
}

/// A store that wraps another and changes only some of its methods (a fault
/// injector, a gate, a recorder, a watcher of failed writes): implement
/// this, and every [`SessionStore`] method it does not override forwards
/// to [`StoreLayer::wrapped`], defaulted methods included. A layer thus never
/// hides an override of the store it wraps (a batched `load_kind_many`,
/// say) behind the trait's default. Each method means what the
/// [`SessionStore`] method of the same name means.
#[async_trait]
pub trait StoreLayer: Send + Sync + 'static {
    /// The store every method not overridden forwards to.
    fn wrapped(&self) -> &dyn SessionStore;

    /// [`SessionStore::create`].
    ///
    /// # Errors
    /// As [`SessionStore::create`].
    ///
    /// # Cancel safety
    /// As [`SessionStore::create`].
    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        self.wrapped().create(header, seed).await
    }

    /// [`SessionStore::open`].
    ///
    /// # Errors
    /// As [`SessionStore::open`].
    ///
    /// # Cancel safety
    /// As [`SessionStore::open`].
    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        self.wrapped().open(id).await
    }

    /// [`SessionStore::load`].
    ///
    /// # Errors
    /// As [`SessionStore::load`].
    ///
    /// # Cancel safety
    /// As [`SessionStore::load`].
    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        self.wrapped().load(id).await
    }

    /// [`SessionStore::load_many`].
    ///
    /// # Cancel safety
    /// As [`SessionStore::load_many`].
    async fn load_many(&self, ids: &[SessionId]) -> Vec<Result<LoadedSession, StoreError>> {
        self.wrapped().load_many(ids).await
    }

    /// [`SessionStore::load_kind_many`].
    ///
    /// # Cancel safety
    /// As [`SessionStore::load_kind_many`].
    async fn load_kind_many(
        &self,
        ids: &[SessionId],
        kinds: &[&str],
    ) -> Vec<Result<KindEvents, StoreError>> {
        self.wrapped().load_kind_many(ids, kinds).await
    }

    /// [`SessionStore::header`].
    ///
    /// # Errors
    /// As [`SessionStore::header`].
    ///
    /// # Cancel safety
    /// As [`SessionStore::header`].
    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        self.wrapped().header(id).await
    }

    /// [`SessionStore::header_many`].
    ///
    /// # Cancel safety
    /// As [`SessionStore::header_many`].
    async fn header_many(&self, ids: &[SessionId]) -> Vec<Result<SessionHeader, StoreError>> {
        self.wrapped().header_many(ids).await
    }

    /// [`SessionStore::exists`].
    ///
    /// # Errors
    /// As [`SessionStore::exists`].
    ///
    /// # Cancel safety
    /// As [`SessionStore::exists`].
    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.wrapped().exists(id).await
    }

    /// [`SessionStore::list`].
    ///
    /// # Errors
    /// As [`SessionStore::list`].
    ///
    /// # Cancel safety
    /// As [`SessionStore::list`].
    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        self.wrapped().list().await
    }

    /// [`SessionStore::flush`].
    ///
    /// # Errors
    /// As [`SessionStore::flush`].
    ///
    /// # Cancel safety
    /// As [`SessionStore::flush`].
    async fn flush(&self) -> Result<(), StoreError> {
        self.wrapped().flush().await
    }

    /// [`SessionStore::remove`].
    ///
    /// # Errors
    /// As [`SessionStore::remove`].
    ///
    /// # Cancel safety
    /// As [`SessionStore::remove`].
    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        self.wrapped().remove(id).await
    }

    /// [`SessionStore::remove_torn`].
    ///
    /// # Errors
    /// As [`SessionStore::remove_torn`].
    ///
    /// # Cancel safety
    /// As [`SessionStore::remove_torn`].
    async fn remove_torn(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.wrapped().remove_torn(id).await
    }
}

/// Every layer is a store: each method is the layer's own (its override,
/// or the forward to its inner store).
#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<L: StoreLayer> SessionStore for L {
    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        StoreLayer::create(self, header, seed).await
    }

    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        StoreLayer::open(self, id).await
    }

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        StoreLayer::load(self, id).await
    }

    async fn load_many(&self, ids: &[SessionId]) -> Vec<Result<LoadedSession, StoreError>> {
        StoreLayer::load_many(self, ids).await
    }

    async fn load_kind_many(
        &self,
        ids: &[SessionId],
        kinds: &[&str],
    ) -> Vec<Result<KindEvents, StoreError>> {
        StoreLayer::load_kind_many(self, ids, kinds).await
    }

    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        StoreLayer::header(self, id).await
    }

    async fn header_many(&self, ids: &[SessionId]) -> Vec<Result<SessionHeader, StoreError>> {
        StoreLayer::header_many(self, ids).await
    }

    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        StoreLayer::exists(self, id).await
    }

    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        StoreLayer::list(self).await
    }

    async fn flush(&self) -> Result<(), StoreError> {
        StoreLayer::flush(self).await
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        StoreLayer::remove(self, id).await
    }

    async fn remove_torn(&self, id: &SessionId) -> Result<bool, StoreError> {
        StoreLayer::remove_torn(self, id).await
    }
}
