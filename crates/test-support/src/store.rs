//! Session-store wrappers for fault, drop and crash tests. Each wraps any
//! [`SessionStore`] and implements it again, so they stack
//! (`FaultStore::new(GatedStore::new(JsonlStore::new(..)?))`):
//!
//! - [`FaultStore`] fails the k-th call of an operation with a chosen OS
//!   error (`ENOSPC`, `EIO`, `EACCES`, ...) wrapped as [`StoreError::Io`],
//!   counted per store or per log, and can stop the world after the k-th
//!   write, as if the process had died there.
//! - [`GatedStore`] holds a call at a named point (before or after the inner
//!   call) until the test releases it, and tells the test that the call got
//!   there, so a test can poll a future to that await and drop it.
//! - [`RecordingStore`] records every write with the file lengths around
//!   it, so a crash test can rebuild the directory as a crash at any byte of
//!   any write would have left it, and check that it reopens.
//!
//! - [`SharedStore`] turns a shared `Arc<dyn SessionStore>` back into a
//!   store value, so the wrappers above can wrap a store chosen at run time
//!   (what a test world does).
//!
//! Neither ever changes what the inner store writes: an injected failure
//! happens *instead of* the inner call, never after it, so whatever the
//! inner store holds is exactly what it acknowledged.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use dsh_core::{
    KindEvents, LoadedSession, SessionEvent, SessionHeader, SessionId, SessionLog, SessionStore,
    StoreError,
};
use tokio::sync::watch;

/// A store operation, as the wrappers count and gate it. `Load` covers
/// [`SessionStore::load`], `load_many` (once per id) and `header`; `list` and
/// `exists` are never counted, failed or gated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`SessionStore::create`]. A write.
    Create,
    /// [`SessionStore::open`].
    Open,
    /// [`SessionStore::load`], each id of `load_many`, and `header`.
    Load,
    /// [`SessionLog::append`]. A write.
    Append,
    /// [`SessionLog::checkpoint`].
    Checkpoint,
    /// [`SessionStore::remove`]. A write.
    Remove,
    /// [`SessionLog::close`]: it returns nothing, so it can be gated and is
    /// counted, but a [`FaultStore`] rule on it is refused.
    Close,
}

impl Op {
    /// Whether the operation changes what the store holds.
    pub fn is_write(self) -> bool {
        matches!(self, Self::Create | Self::Append | Self::Remove)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::Create => "create",
            Self::Open => "open",
            Self::Load => "load",
            Self::Append => "append",
            Self::Checkpoint => "checkpoint",
            Self::Remove => "remove",
            Self::Close => "close",
        };
        f.write_str(name)
    }
}

const OPS: usize = 7;

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

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the state consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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
impl<S: SessionStore> SessionStore for FaultStore<S> {
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
    /// through are skimmed by the inner store in one call.
    async fn load_kind_many(
        &self,
        ids: &[SessionId],
        kinds: &[&str],
    ) -> Vec<Result<KindEvents, StoreError>> {
        let admitted: Vec<Result<(), StoreError>> =
            ids.iter().map(|id| self.enter(Op::Load, id)).collect();
        let through: Vec<SessionId> = ids
            .iter()
            .zip(&admitted)
            .filter(|(_, admitted)| admitted.is_ok())
            .map(|(id, _)| id.clone())
            .collect();
        let mut read = self.inner.load_kind_many(&through, kinds).await.into_iter();
        ids.iter()
            .zip(admitted)
            .map(|(id, admitted)| {
                admitted?;
                read.next()
                    .unwrap_or_else(|| Err(StoreError::NotFound(id.clone())))
            })
            .collect()
    }

    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.inner.exists(id).await
    }

    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        self.inner.list().await
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        self.enter(Op::Remove, id)?;
        let result = self.inner.remove(id).await;
        self.done(Op::Remove, &result);
        result
    }

    /// Counted (and may be failed) as a `Remove`.
    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }

    async fn remove_torn(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.enter(Op::Remove, id)?;
        let result = self.inner.remove_torn(id).await;
        self.done(Op::Remove, &result);
        result
    }
}

/// Where a [`GatedStore`] holds a call: before it reaches the inner store,
/// or after the inner call returned and before its result is handed back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    /// Before the inner call: nothing of it has happened yet.
    Before,
    /// After the inner call: it has fully happened, the caller does not know.
    After,
}

#[derive(Debug)]
struct GateState {
    reached: watch::Sender<bool>,
    released: watch::Sender<bool>,
    /// Set when the held call went on (released) or its future was dropped.
    left: AtomicBool,
}

/// An armed gate of a [`GatedStore`]: it catches the next call of its
/// operation (on its log, if it names one) at its point, and holds it until
/// [`Gate::release`]. It is one-shot: later calls pass. Dropping the gate
/// does not release it; a call caught by it then waits until its future is
/// dropped.
#[derive(Debug, Clone)]
pub struct Gate {
    state: Arc<GateState>,
}

impl Gate {
    /// Whether a call has reached the gate (it may since have been released
    /// or dropped).
    pub fn is_reached(&self) -> bool {
        *self.state.reached.borrow()
    }

    /// Wait until a call reaches the gate. Unbounded: wrap it in
    /// [`crate::wait::bounded`].
    ///
    /// # Cancel safety
    /// Dropping the future only stops waiting.
    pub async fn reached(&self) {
        let mut reached = self.state.reached.subscribe();
        // The sender lives in `self`, so the wait cannot fail.
        let _ = reached.wait_for(|reached| *reached).await;
    }

    /// Let the held call (and, if none has arrived yet, the one that will)
    /// go on.
    pub fn release(&self) {
        self.state.released.send_replace(true);
    }

    /// Whether the caught call has gone on past the gate or been dropped
    /// while held there.
    pub fn has_left(&self) -> bool {
        self.state.left.load(Ordering::SeqCst)
    }
}

/// Marks a gate left however the held call ends (released or dropped).
struct Leaving<'a>(&'a GateState);

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.0.left.store(true, Ordering::SeqCst);
    }
}

#[derive(Debug)]
struct Armed {
    op: Op,
    point: Point,
    id: Option<SessionId>,
    state: Arc<GateState>,
}

#[derive(Debug, Default)]
struct Gates {
    armed: Mutex<Vec<Armed>>,
    calls: [AtomicU64; OPS],
}

impl Gates {
    /// Hold here if a gate is armed for this call.
    async fn pass(&self, op: Op, point: Point, id: &SessionId) {
        let gate = {
            let mut armed = lock(&self.armed);
            let found = armed.iter().position(|gate| {
                gate.op == op
                    && gate.point == point
                    && gate.id.as_ref().is_none_or(|only| only == id)
            });
            found.map(|at| armed.remove(at).state)
        };
        let Some(state) = gate else {
            return;
        };
        let leaving = Leaving(&state);
        let mut released = state.released.subscribe();
        state.reached.send_replace(true);
        // The sender lives in `state`, held here, so the wait cannot fail.
        let _ = released.wait_for(|released| *released).await;
        drop(leaving);
    }

    fn count(&self, op: Op) {
        self.calls[op.index()].fetch_add(1, Ordering::SeqCst);
    }
}

/// A store whose calls a test can hold at a gate, to poll a future to that
/// await and drop it there. Without armed gates it forwards every call
/// unchanged. The log handles it returns are gated the same way.
#[derive(Clone)]
pub struct GatedStore<S> {
    inner: S,
    gates: Arc<Gates>,
}

impl<S> fmt::Debug for GatedStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatedStore")
            .field("gates", &self.gates)
            .finish_non_exhaustive()
    }
}

impl<S: SessionStore> GatedStore<S> {
    /// Wrap `inner`, with no gates armed.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            gates: Arc::new(Gates::default()),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Arm a gate that catches the next call of `op`, on any log, at `point`.
    pub fn gate(&self, op: Op, point: Point) -> Gate {
        self.arm(op, point, None)
    }

    /// Arm a gate that catches the next call of `op` on the log of `id` at
    /// `point`.
    pub fn gate_on_log(&self, id: &SessionId, op: Op, point: Point) -> Gate {
        self.arm(op, point, Some(id.clone()))
    }

    /// How many calls of `op` have started so far.
    pub fn calls(&self, op: Op) -> u64 {
        self.gates.calls[op.index()].load(Ordering::SeqCst)
    }

    fn arm(&self, op: Op, point: Point, id: Option<SessionId>) -> Gate {
        let state = Arc::new(GateState {
            reached: watch::Sender::new(false),
            released: watch::Sender::new(false),
            left: AtomicBool::new(false),
        });
        lock(&self.gates.armed).push(Armed {
            op,
            point,
            id,
            state: Arc::clone(&state),
        });
        Gate { state }
    }

    async fn around<T>(&self, op: Op, id: &SessionId, call: impl Future<Output = T>) -> T {
        around(&self.gates, op, id, call).await
    }

    fn wrap(&self, id: SessionId, log: Arc<dyn SessionLog>) -> Arc<dyn SessionLog> {
        Arc::new(GatedLog {
            id,
            inner: log,
            gates: Arc::clone(&self.gates),
        })
    }
}

async fn around<T>(gates: &Gates, op: Op, id: &SessionId, call: impl Future<Output = T>) -> T {
    gates.count(op);
    gates.pass(op, Point::Before, id).await;
    let result = call.await;
    gates.pass(op, Point::After, id).await;
    result
}

/// A log handle of a [`GatedStore`].
struct GatedLog {
    id: SessionId,
    inner: Arc<dyn SessionLog>,
    gates: Arc<Gates>,
}

#[async_trait]
impl SessionLog for GatedLog {
    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError> {
        around(&self.gates, Op::Append, &self.id, self.inner.append(events)).await
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        around(
            &self.gates,
            Op::Checkpoint,
            &self.id,
            self.inner.checkpoint(),
        )
        .await
    }

    async fn sync(&self) -> Result<(), StoreError> {
        // Gated as a checkpoint: both force the log.
        around(&self.gates, Op::Checkpoint, &self.id, self.inner.sync()).await
    }

    async fn close(&self) {
        around(&self.gates, Op::Close, &self.id, self.inner.close()).await;
    }
}

#[async_trait]
impl<S: SessionStore> SessionStore for GatedStore<S> {
    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        let log = self
            .around(Op::Create, &header.id, self.inner.create(header, seed))
            .await?;
        Ok(self.wrap(header.id.clone(), log))
    }

    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        let (loaded, log) = self.around(Op::Open, id, self.inner.open(id)).await?;
        Ok((loaded, self.wrap(id.clone(), log)))
    }

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        self.around(Op::Load, id, self.inner.load(id)).await
    }

    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        self.around(Op::Load, id, self.inner.header(id)).await
    }

    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.inner.exists(id).await
    }

    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        self.inner.list().await
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        self.around(Op::Remove, id, self.inner.remove(id)).await
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }

    async fn remove_torn(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.around(Op::Remove, id, self.inner.remove_torn(id))
            .await
    }
}

/// A shared store as a store value: every call goes to the `Arc` it holds,
/// so [`FaultStore`], [`GatedStore`] and [`RecordingStore`] can wrap a store
/// whose type is only known at run time.
#[derive(Clone)]
pub struct SharedStore(pub Arc<dyn SessionStore>);

impl fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedStore").finish_non_exhaustive()
    }
}

#[async_trait]
impl SessionStore for SharedStore {
    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        self.0.create(header, seed).await
    }

    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        self.0.open(id).await
    }

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        self.0.load(id).await
    }

    async fn load_many(&self, ids: &[SessionId]) -> Vec<Result<LoadedSession, StoreError>> {
        self.0.load_many(ids).await
    }

    async fn load_kind_many(
        &self,
        ids: &[SessionId],
        kinds: &[&str],
    ) -> Vec<Result<KindEvents, StoreError>> {
        self.0.load_kind_many(ids, kinds).await
    }

    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        self.0.header(id).await
    }

    async fn header_many(&self, ids: &[SessionId]) -> Vec<Result<SessionHeader, StoreError>> {
        self.0.header_many(ids).await
    }

    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.0.exists(id).await
    }

    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        self.0.list().await
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        self.0.remove(id).await
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.0.flush().await
    }

    async fn remove_torn(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.0.remove_torn(id).await
    }
}

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
impl SessionLog for RecordingLog {
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

    async fn checkpoint(&self) -> Result<(), StoreError> {
        self.inner.checkpoint().await
    }

    async fn sync(&self) -> Result<(), StoreError> {
        self.inner.sync().await
    }

    async fn close(&self) {
        self.inner.close().await;
    }
}

#[async_trait]
impl<S: SessionStore> SessionStore for RecordingStore<S> {
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

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        self.inner.load(id).await
    }

    async fn load_many(&self, ids: &[SessionId]) -> Vec<Result<LoadedSession, StoreError>> {
        self.inner.load_many(ids).await
    }

    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        self.inner.header(id).await
    }

    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.inner.exists(id).await
    }

    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        self.inner.list().await
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        let path = (self.locate)(id);
        let len_before = file_len(&path);
        self.inner.remove(id).await?;
        self.record(Write {
            op: Op::Remove,
            id: id.clone(),
            path,
            len_before,
            len_after: len_before,
            events: Vec::new(),
        });
        Ok(())
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }

    async fn remove_torn(&self, id: &SessionId) -> Result<bool, StoreError> {
        let path = (self.locate)(id);
        let len_before = file_len(&path);
        let removed = self.inner.remove_torn(id).await?;
        if removed {
            self.record(Write {
                op: Op::Remove,
                id: id.clone(),
                path,
                len_before,
                len_after: len_before,
                events: Vec::new(),
            });
        }
        Ok(removed)
    }
}
