//! [`FaultStore`]: fails chosen calls of the store it wraps with chosen OS
//! errors, or stops the world after the k-th write. A failure happens
//! instead of the inner call, never after it.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dsh_core::{
    KindEvents, LoadedSession, SessionEvent, SessionHeader, SessionId, SessionLog, SessionStore,
    StoreError, StoreLayer,
};

use super::{OPS, Op, lock};

/// The OS error an injected failure carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// An error of this kind, with a message naming the injection.
    Kind(io::ErrorKind),
    /// A raw OS error number (`errno`), as the kernel would return it.
    Os(i32),
}

impl Fault {
    /// No space left on device (Linux `ENOSPC`).
    pub const ENOSPC: Self = Self::Os(28);
    /// Input/output error (Linux `EIO`).
    pub const EIO: Self = Self::Os(5);
    /// Permission denied (Linux `EACCES`).
    pub const EACCES: Self = Self::Os(13);

    /// The error this fault produces, as an [`io::Error`].
    pub fn to_io_error(self) -> io::Error {
        match self {
            Self::Kind(kind) => io::Error::new(kind, "injected by FaultStore"),
            Self::Os(errno) => io::Error::from_raw_os_error(errno),
        }
    }
}

/// Which calls a rule counts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    Store,
    Log(SessionId),
}

#[derive(Debug)]
struct Rule {
    op: Op,
    scope: Scope,
    nth: u64,
    fault: Fault,
    seen: u64,
    fired: bool,
}

#[derive(Debug, Default)]
struct Plan {
    rules: Vec<Rule>,
    /// Stop the world after this many writes.
    stop_after: Option<u64>,
    writes: u64,
    stopped: bool,
    calls: [u64; OPS],
    /// Per-log counts, by op.
    log_calls: Vec<(SessionId, [u64; OPS])>,
}

/// The path an injected [`StoreError::Io`] names: a marker, not a file.
fn fault_path(op: Op, id: &SessionId) -> PathBuf {
    PathBuf::from(format!("<injected {op} fault on {id}>"))
}

fn injected(op: Op, id: &SessionId, fault: Fault) -> StoreError {
    StoreError::Io {
        path: fault_path(op, id),
        source: Arc::new(fault.to_io_error()),
    }
}

/// The error every call gets once the world has stopped.
fn stopped(op: Op, id: &SessionId) -> StoreError {
    StoreError::Io {
        path: fault_path(op, id),
        source: Arc::new(io::Error::other(
            "the world stopped: FaultStore simulates a process that died after an earlier write",
        )),
    }
}

impl Plan {
    /// Count a call of `op` on `id` and decide whether it fails.
    fn enter(&mut self, op: Op, id: &SessionId) -> Result<(), StoreError> {
        if self.stopped && op != Op::Close {
            return Err(stopped(op, id));
        }
        self.calls[op.index()] += 1;
        let per_log = match self.log_calls.iter_mut().find(|(log, _)| log == id) {
            Some((_, counts)) => counts,
            None => {
                self.log_calls.push((id.clone(), [0; OPS]));
                let last = self.log_calls.len() - 1;
                &mut self.log_calls[last].1
            }
        };
        per_log[op.index()] += 1;
        let mut failure = None;
        for rule in &mut self.rules {
            let counts = match &rule.scope {
                Scope::Store => true,
                Scope::Log(log) => log == id,
            };
            if rule.op != op || !counts || rule.fired {
                continue;
            }
            rule.seen += 1;
            if rule.seen == rule.nth {
                rule.fired = true;
                failure.get_or_insert(rule.fault);
            }
        }
        if let Some(fault) = failure {
            return Err(injected(op, id, fault));
        }
        Ok(())
    }

    /// Note that a write went through; stop the world if it was the last.
    fn wrote(&mut self, op: Op) {
        if !op.is_write() {
            return;
        }
        self.writes += 1;
        if self.stop_after.is_some_and(|limit| self.writes >= limit) {
            self.stopped = true;
        }
    }
}

/// A store that fails chosen calls of the store it wraps.
///
/// Rules are one-shot: "the `nth` call (1-based) of `op`", counted over the
/// whole store ([`FaultStore::fail`]) or over one log
/// ([`FaultStore::fail_on_log`]); a failing call never reaches the inner
/// store. [`FaultStore::stop_after_writes`] lets `k` writes (create, append,
/// remove) through and then fails every later call except `list`, `exists`
/// and `close`, as a process that died after its k-th write would never do
/// anything again. The log handles it returns are wrapped the same way and
/// share the plan. A failed append does not poison the wrapper: the caller
/// is trusted to honour the contract and stop using the handle.
#[derive(Clone)]
pub struct FaultStore<S> {
    inner: S,
    plan: Arc<Mutex<Plan>>,
}

impl<S> fmt::Debug for FaultStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultStore")
            .field("plan", &*lock(&self.plan))
            .finish_non_exhaustive()
    }
}

impl<S: SessionStore> FaultStore<S> {
    /// Wrap `inner`, with no faults planned yet.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            plan: Arc::new(Mutex::new(Plan::default())),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Fail the `nth` call (1-based, counted from now over every log) of `op`
    /// with `fault`.
    ///
    /// # Panics
    /// If `op` is [`Op::Close`] (which has no error to return) or `nth` is 0.
    pub fn fail(&self, op: Op, nth: u64, fault: Fault) -> &Self {
        self.add(op, Scope::Store, nth, fault)
    }

    /// Fail the `nth` call (1-based, counted from now) of `op` on the log of
    /// `id` with `fault`.
    ///
    /// # Panics
    /// As [`FaultStore::fail`].
    pub fn fail_on_log(&self, id: &SessionId, op: Op, nth: u64, fault: Fault) -> &Self {
        self.add(op, Scope::Log(id.clone()), nth, fault)
    }

    /// Let `writes` more writes (create, append, remove) through, counted
    /// from the start, then fail every later call: the process died.
    pub fn stop_after_writes(&self, writes: u64) -> &Self {
        let mut plan = lock(&self.plan);
        plan.stop_after = Some(writes);
        if plan.writes >= writes {
            plan.stopped = true;
        }
        self
    }

    /// Whether the world has stopped.
    pub fn is_stopped(&self) -> bool {
        lock(&self.plan).stopped
    }

    /// How many calls of `op` were made so far, failed ones included (calls
    /// after the world stopped are not counted).
    pub fn calls(&self, op: Op) -> u64 {
        lock(&self.plan).calls[op.index()]
    }

    /// How many calls of `op` were made on the log of `id` so far.
    pub fn calls_on_log(&self, id: &SessionId, op: Op) -> u64 {
        lock(&self.plan)
            .log_calls
            .iter()
            .find(|(log, _)| log == id)
            .map_or(0, |(_, counts)| counts[op.index()])
    }

    /// How many calls of `op` were made on each log so far, leaving out the
    /// logs it was never called on: per-id counts (a listing test asserts
    /// which sessions were read, and how often).
    pub fn calls_by_log(&self, op: Op) -> BTreeMap<SessionId, u64> {
        lock(&self.plan)
            .log_calls
            .iter()
            .filter(|(_, counts)| counts[op.index()] > 0)
            .map(|(id, counts)| (id.clone(), counts[op.index()]))
            .collect()
    }

    /// Forget every call counted so far (store-wide and per log), keeping the
    /// planned faults and the write count that stops the world: a test
    /// measures from here.
    pub fn reset_calls(&self) {
        let mut plan = lock(&self.plan);
        plan.calls = [0; OPS];
        plan.log_calls.clear();
    }

    /// How many writes went through to the inner store so far.
    pub fn writes(&self) -> u64 {
        lock(&self.plan).writes
    }

    fn add(&self, op: Op, scope: Scope, nth: u64, fault: Fault) -> &Self {
        assert!(
            op != Op::Close,
            "close returns nothing: a fault on it cannot be observed"
        );
        assert!(nth > 0, "calls are counted from 1");
        lock(&self.plan).rules.push(Rule {
            op,
            scope,
            nth,
            fault,
            seen: 0,
            fired: false,
        });
        self
    }

    fn enter(&self, op: Op, id: &SessionId) -> Result<(), StoreError> {
        lock(&self.plan).enter(op, id)
    }

    fn done<T>(&self, op: Op, result: &Result<T, StoreError>) {
        if result.is_ok() {
            lock(&self.plan).wrote(op);
        }
    }

    fn wrap(&self, id: SessionId, log: Arc<dyn SessionLog>) -> Arc<dyn SessionLog> {
        Arc::new(FaultLog {
            id,
            inner: log,
            plan: Arc::clone(&self.plan),
        })
    }
}

/// Each of `ids`' admission and the ids admitted, in order.
type Admitted = (Vec<Result<(), StoreError>>, Vec<SessionId>);

impl<S: SessionStore> FaultStore<S> {
    /// Count each of `ids` as a `Load`, deciding which fail.
    fn admit_loads(&self, ids: &[SessionId]) -> Admitted {
        let admitted: Vec<Result<(), StoreError>> =
            ids.iter().map(|id| self.enter(Op::Load, id)).collect();
        let through = ids
            .iter()
            .zip(&admitted)
            .filter(|(_, admitted)| admitted.is_ok())
            .map(|(id, _)| id.clone())
            .collect();
        (admitted, through)
    }
}

/// The result of each of `ids`: its failed admission, or the next of what
/// the inner store read for the ids let through.
fn merge<T>(
    ids: &[SessionId],
    admitted: Vec<Result<(), StoreError>>,
    read: Vec<Result<T, StoreError>>,
) -> Vec<Result<T, StoreError>> {
    let mut read = read.into_iter();
    ids.iter()
        .zip(admitted)
        .map(|(id, admitted)| {
            admitted?;
            read.next()
                .unwrap_or_else(|| Err(StoreError::NotFound(id.clone())))
        })
        .collect()
}

/// A log handle of a [`FaultStore`].
struct FaultLog {
    id: SessionId,
    inner: Arc<dyn SessionLog>,
    plan: Arc<Mutex<Plan>>,
}

#[async_trait]
impl SessionLog for FaultLog {
    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError> {
        lock(&self.plan).enter(Op::Append, &self.id)?;
        let result = self.inner.append(events).await;
        if result.is_ok() {
            lock(&self.plan).wrote(Op::Append);
        }
        result
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        lock(&self.plan).enter(Op::Checkpoint, &self.id)?;
        self.inner.checkpoint().await
    }

    async fn sync(&self) -> Result<(), StoreError> {
        // Failed and counted as a checkpoint: both force the log.
        lock(&self.plan).enter(Op::Checkpoint, &self.id)?;
        self.inner.sync().await
    }

    async fn close(&self) {
        // Counted, never failed; the inner log is always released.
        let _ = lock(&self.plan).enter(Op::Close, &self.id);
        self.inner.close().await;
    }
}

#[async_trait]
impl<S: SessionStore> StoreLayer for FaultStore<S> {
    fn wrapped(&self) -> &dyn SessionStore {
        &self.inner
    }

    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        self.enter(Op::Create, &header.id)?;
        let result = self.inner.create(header, seed).await;
        self.done(Op::Create, &result);
        Ok(self.wrap(header.id.clone(), result?))
    }

    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        self.enter(Op::Open, id)?;
        let (loaded, log) = self.inner.open(id).await?;
        Ok((loaded, self.wrap(id.clone(), log)))
    }

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        self.enter(Op::Load, id)?;
        self.inner.load(id).await
    }

    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        self.enter(Op::Load, id)?;
        self.inner.header(id).await
    }

    /// Each id is counted (and may be failed) as a `Load`; the ids let
    /// through are loaded by the inner store in one call.
    async fn load_many(&self, ids: &[SessionId]) -> Vec<Result<LoadedSession, StoreError>> {
        let (admitted, through) = self.admit_loads(ids);
        let read = self.inner.load_many(&through).await;
        merge(ids, admitted, read)
    }

    /// Each id is counted (and may be failed) as a `Load`; the ids let
    /// through are skimmed by the inner store in one call.
    async fn load_kind_many(
        &self,
        ids: &[SessionId],
        kinds: &[&str],
    ) -> Vec<Result<KindEvents, StoreError>> {
        let (admitted, through) = self.admit_loads(ids);
        let read = self.inner.load_kind_many(&through, kinds).await;
        merge(ids, admitted, read)
    }

    /// Each id is counted (and may be failed) as a `Load`; the ids let
    /// through are read by the inner store in one call.
    async fn header_many(&self, ids: &[SessionId]) -> Vec<Result<SessionHeader, StoreError>> {
        let (admitted, through) = self.admit_loads(ids);
        let read = self.inner.header_many(&through).await;
        merge(ids, admitted, read)
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        self.enter(Op::Remove, id)?;
        let result = self.inner.remove(id).await;
        self.done(Op::Remove, &result);
        result
    }

    /// Counted (and may be failed) as a `Remove`.
    async fn remove_torn(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.enter(Op::Remove, id)?;
        let result = self.inner.remove_torn(id).await;
        self.done(Op::Remove, &result);
        result
    }
}
