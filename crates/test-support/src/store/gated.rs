//! [`GatedStore`]: holds a call at a named point (before or after the inner
//! call) until the test releases it, so a test can drop a future there.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dsh_core::{
    KindEvents, LoadedSession, SessionEvent, SessionHeader, SessionId, SessionLog, SessionStore,
    StoreError, StoreLayer,
};
use tokio::sync::watch;

use super::{OPS, Op, lock};

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

/// [`around`] for a call that covers each of `ids`: every id is counted and
/// may be held before the inner call, and again after it.
async fn around_each<T>(
    gates: &Gates,
    op: Op,
    ids: &[SessionId],
    call: impl Future<Output = T>,
) -> T {
    for id in ids {
        gates.count(op);
        gates.pass(op, Point::Before, id).await;
    }
    let result = call.await;
    for id in ids {
        gates.pass(op, Point::After, id).await;
    }
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
impl<S: SessionStore> StoreLayer for GatedStore<S> {
    fn wrapped(&self) -> &dyn SessionStore {
        &self.inner
    }

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

    /// Each id is a `Load` call, gated before and after the inner store
    /// reads them all in one call.
    async fn load_many(&self, ids: &[SessionId]) -> Vec<Result<LoadedSession, StoreError>> {
        around_each(&self.gates, Op::Load, ids, self.inner.load_many(ids)).await
    }

    /// As `load_many`.
    async fn load_kind_many(
        &self,
        ids: &[SessionId],
        kinds: &[&str],
    ) -> Vec<Result<KindEvents, StoreError>> {
        around_each(
            &self.gates,
            Op::Load,
            ids,
            self.inner.load_kind_many(ids, kinds),
        )
        .await
    }

    /// As `load_many`.
    async fn header_many(&self, ids: &[SessionId]) -> Vec<Result<SessionHeader, StoreError>> {
        around_each(&self.gates, Op::Load, ids, self.inner.header_many(ids)).await
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        self.around(Op::Remove, id, self.inner.remove(id)).await
    }

    async fn remove_torn(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.around(Op::Remove, id, self.inner.remove_torn(id))
            .await
    }
}
