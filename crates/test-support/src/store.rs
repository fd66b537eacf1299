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
//!
//! Neither ever changes what the inner store writes: an injected failure
//! happens *instead of* the inner call, never after it, so whatever the
//! inner store holds is exactly what it acknowledged.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use dsh_core::{
    LoadedSession, SessionEvent, SessionHeader, SessionId, SessionLog, SessionStore, StoreError,
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
}
