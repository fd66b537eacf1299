//! World builders for the subagent suites: a JSONL (or memory) store that
//! can hold one call at a chosen point, a harness answering with a scripted
//! model, a live root agent, a subagent runtime over them, and a local
//! continuable provider. A test arms a [`Hold`] on the store, drives the
//! code under test until the hold is reached, and then decides what to do
//! with the future (drop it, for the drop-point tests) before releasing it.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::{
    AgentFactory, AgentHandle, CancellationToken, ContentBlock, CreateAgent, Durability,
    LoadedSession, ResumeAgent, SessionEvent, SessionHeader, SessionId, SessionLog, SessionStore,
    StoreError, Tool, ToolContext, ToolError, ToolOutput,
};
use dsh_harness::{Harness, JsonlStore, MemoryStore, Scripted, ScriptedModel};
use dsh_subagent::{
    ActivationSpec, ContinuableCreateRequest, ContinuableCreateSpec, Delivery, PrepareContinuable,
    RuntimeConfig, StartRequest, SubagentCapabilities, SubagentError, SubagentProvider,
    SubagentRuntime,
};
use tokio::sync::Semaphore;

/// The store operation a [`Hold`] stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// [`SessionStore::create`].
    Create,
    /// [`SessionStore::open`].
    Open,
    /// [`SessionStore::load`] and [`SessionStore::header`].
    Load,
    /// [`SessionLog::append`] on a log of the session.
    Append,
}

/// Whether a hold stops a call before the inner store runs it or after
/// (its effect done, its result not yet returned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Before the inner call: nothing of it happened yet.
    Before,
    /// After the inner call: its effect is on disk.
    After,
}

/// Where a hold stops: the first matching call after it was armed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// The operation.
    pub op: Op,
    /// The session it is made on.
    pub id: SessionId,
    /// Before or after the inner call.
    pub when: When,
}

/// One armed hold: see it reached, then release it.
#[derive(Clone)]
pub struct Hold {
    reached: Arc<Semaphore>,
    release: Arc<Semaphore>,
}

impl Hold {
    /// Wait until a call stopped at the point.
    pub async fn reached(&self) {
        if let Ok(permit) = self.reached.acquire().await {
            permit.forget();
        }
    }

    /// Let the held call go on (and any later one: the hold fires once).
    pub fn release(&self) {
        self.release.add_permits(1);
    }

    async fn stop(&self) {
        self.reached.add_permits(1);
        if let Ok(permit) = self.release.acquire().await {
            permit.forget();
        }
    }
}

#[derive(Default)]
struct Holds {
    /// The armed point, how many matching calls still pass first, its hold.
    armed: Mutex<Option<(Point, usize, Hold)>>,
    failing: Mutex<Option<Point>>,
}

impl Holds {
    /// The armed hold for this call, disarmed as it fires.
    fn take(&self, op: Op, id: &SessionId, when: When) -> Option<Hold> {
        let mut armed = self.armed.lock().unwrap_or_else(PoisonError::into_inner);
        let (point, pass, _) = armed.as_mut()?;
        if point.op != op || &point.id != id || point.when != when {
            return None;
        }
        if *pass > 0 {
            *pass -= 1;
            return None;
        }
        armed.take().map(|(_, _, hold)| hold)
    }

    async fn at(&self, op: Op, id: &SessionId, when: When) {
        if let Some(hold) = self.take(op, id, when) {
            hold.stop().await;
        }
    }

    /// An injected failure for this call, when one is armed (before the call).
    fn fault(&self, op: Op, id: &SessionId) -> Result<(), StoreError> {
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        if failing
            .as_ref()
            .is_some_and(|point| point.op == op && &point.id == id)
        {
            *failing = None;
            return Err(StoreError::Io {
                path: format!("injected/{id}").into(),
                source: Arc::new(std::io::Error::other("an injected failure")),
            });
        }
        Ok(())
    }
}

/// A store forwarding to `inner` that can hold one call at an armed point.
pub struct HoldingStore {
    inner: Arc<dyn SessionStore>,
    holds: Arc<Holds>,
}

impl HoldingStore {
    /// Forward to `inner`; nothing armed.
    pub fn new(inner: Arc<dyn SessionStore>) -> Self {
        Self {
            inner,
            holds: Arc::default(),
        }
    }

    /// Arm a hold at `point` (replacing any armed one).
    pub fn hold(&self, point: Point) -> Hold {
        self.hold_after(point, 0)
    }

    /// Arm a hold at `point` that lets the first `pass` matching calls
    /// through and stops the next one.
    pub fn hold_after(&self, point: Point, pass: usize) -> Hold {
        let hold = Hold {
            reached: Arc::new(Semaphore::new(0)),
            release: Arc::new(Semaphore::new(0)),
        };
        *self
            .holds
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((point, pass, hold.clone()));
        hold
    }

    /// Make the first call at `point` fail (before the inner call) with an
    /// I/O error; `point.when` is ignored.
    pub fn fail(&self, point: Point) {
        *self
            .holds
            .failing
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(point);
    }

    /// Disarm a hold that never fired.
    pub fn disarm(&self) {
        *self
            .holds
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }

    fn wrap(&self, id: &SessionId, log: Arc<dyn SessionLog>) -> Arc<dyn SessionLog> {
        Arc::new(HoldingLog {
            id: id.clone(),
            inner: log,
            holds: self.holds.clone(),
        })
    }
}

struct HoldingLog {
    id: SessionId,
    inner: Arc<dyn SessionLog>,
    holds: Arc<Holds>,
}

#[async_trait]
impl SessionLog for HoldingLog {
    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError> {
        self.holds.at(Op::Append, &self.id, When::Before).await;
        self.holds.fault(Op::Append, &self.id)?;
        let appended = self.inner.append(events).await;
        self.holds.at(Op::Append, &self.id, When::After).await;
        appended
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        self.inner.checkpoint().await
    }

    async fn close(&self) {
        self.inner.close().await;
    }
}

#[async_trait]
impl SessionStore for HoldingStore {
    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        self.holds.at(Op::Create, &header.id, When::Before).await;
        self.holds.fault(Op::Create, &header.id)?;
        let log = self.inner.create(header, seed).await?;
        let log = self.wrap(&header.id, log);
        self.holds.at(Op::Create, &header.id, When::After).await;
        Ok(log)
    }

    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        self.holds.at(Op::Open, id, When::Before).await;
        self.holds.fault(Op::Open, id)?;
        let (loaded, log) = self.inner.open(id).await?;
        let log = self.wrap(id, log);
        self.holds.at(Op::Open, id, When::After).await;
        Ok((loaded, log))
    }

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        self.holds.at(Op::Load, id, When::Before).await;
        let loaded = self.inner.load(id).await;
        self.holds.at(Op::Load, id, When::After).await;
        loaded
    }

    async fn header(&self, id: &SessionId) -> Result<SessionHeader, StoreError> {
        self.holds.at(Op::Load, id, When::Before).await;
        let header = self.inner.header(id).await;
        self.holds.at(Op::Load, id, When::After).await;
        header
    }

    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        self.inner.exists(id).await
    }

    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        self.inner.list().await
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        self.inner.remove(id).await
    }
}

/// Which store a world runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// In memory.
    Memory,
    /// JSONL files in a temporary directory, with this durability.
    Jsonl(Durability),
}

/// The host tools every world registers (each answers `ok`).
pub const HOST_TOOLS: [&str; 3] = ["alpha", "beta", "gamma"];

/// A host tool that answers `ok`.
#[derive(Debug)]
pub struct NamedTool(pub &'static str);

#[async_trait]
impl Tool for NamedTool {
    fn name(&self) -> &str {
        self.0
    }

    fn description(&self) -> String {
        format!("The `{}` test tool.", self.0)
    }

    fn input_schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false})
    }

    async fn execute(
        &self,
        _input: serde_json::Value,
        _ctx: ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("ok"))
    }
}

/// A harness, a live root and a subagent runtime over one holding store.
pub struct World {
    /// The JSONL directory.
    dir: std::path::PathBuf,
    /// Keeps a temporary directory for the world's life.
    _temp: Option<tempfile::TempDir>,
    /// The store every agent writes through.
    pub store: Arc<HoldingStore>,
    /// The scripted model every agent asks.
    pub model: Arc<ScriptedModel>,
    /// The harness (the runtime's factory).
    pub harness: Harness,
    /// The runtime under test.
    pub runtime: SubagentRuntime,
    /// The live root.
    pub root: AgentHandle,
}

impl World {
    /// A world on `backing` whose model answers every request with `done`,
    /// with a fresh root `lead`.
    ///
    /// # Panics
    /// When the world cannot be built (a test failure).
    pub async fn new(backing: Backing, config: RuntimeConfig) -> Self {
        Self::build(backing, config, None, None).await
    }

    /// A world over the JSONL directory `dir` (kept when the world goes),
    /// with a fresh root `lead`: what a process the test kills runs.
    ///
    /// # Panics
    /// When the world cannot be built.
    pub async fn in_dir(dir: &std::path::Path, durability: Durability) -> Self {
        Self::build(
            Backing::Jsonl(durability),
            RuntimeConfig::default(),
            None,
            Some(dir),
        )
        .await
    }

    /// The JSONL directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// A world of a later process: the JSONL logs of `from` (copied as a
    /// killed process left them) under a new harness and runtime, with the
    /// root `lead` resumed.
    ///
    /// # Panics
    /// When the copy or the resume fails.
    pub async fn restarted(from: &std::path::Path, durability: Durability) -> Self {
        Self::build(
            Backing::Jsonl(durability),
            RuntimeConfig::default(),
            Some(from),
            None,
        )
        .await
    }

    #[allow(clippy::expect_used)]
    async fn build(
        backing: Backing,
        config: RuntimeConfig,
        from: Option<&std::path::Path>,
        at: Option<&std::path::Path>,
    ) -> Self {
        let (dir, temp) = match at {
            Some(at) => (at.to_path_buf(), None),
            None => {
                let temp = tempfile::tempdir().expect("a temporary directory");
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        if let Some(from) = from {
            for entry in std::fs::read_dir(from).expect("the old directory lists") {
                let path = entry.expect("a directory entry").path();
                if path.is_file()
                    && let Some(name) = path.file_name()
                {
                    std::fs::copy(&path, dir.join(name)).expect("a log copies");
                }
            }
        }
        let inner: Arc<dyn SessionStore> = match backing {
            Backing::Memory => Arc::new(MemoryStore::new()),
            Backing::Jsonl(durability) => {
                Arc::new(JsonlStore::new(&dir, durability).expect("a JSONL store"))
            }
        };
        let store = Arc::new(HoldingStore::new(inner));
        let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("done".into())));
        let mut builder = Harness::builder(store.clone()).model(model.clone());
        for name in HOST_TOOLS {
            builder = builder
                .tool(Arc::new(NamedTool(name)))
                .expect("the host tool registers");
        }
        let harness = builder.build().expect("a harness");
        let root = match from {
            None => create_root(&harness, &sid("lead"), &dir).await,
            Some(_) => harness
                .resume(ResumeAgent {
                    id: sid("lead"),
                    setup: Default::default(),
                    cancel: CancellationToken::new(),
                })
                .await
                .expect("the root resumes"),
        };
        let runtime = SubagentRuntime::new(Arc::new(harness.clone()), store.clone(), config);
        runtime
            .register(Arc::new(LocalProvider::new("local")))
            .expect("the local provider registers");
        Self {
            dir,
            _temp: temp,
            store,
            model,
            harness,
            runtime,
            root,
        }
    }

    /// A start of the `local` provider under the root, delivered to it.
    pub fn spec(&self, name: Option<&str>) -> ActivationSpec {
        ActivationSpec {
            provider: "local".into(),
            label: "a task".into(),
            name: name.map(str::to_owned),
            child_id: None,
            cancel: CancellationToken::new(),
            delivery: Delivery::Parent,
            request: StartRequest::new(
                self.root.agent().clone(),
                vec![ContentBlock::text("do the task")],
            ),
        }
    }

    /// Every stored session, sorted.
    ///
    /// # Panics
    /// When the store cannot list.
    #[allow(clippy::expect_used)]
    pub async fn sessions(&self) -> Vec<SessionId> {
        let mut ids = self.store.list().await.expect("the store lists");
        ids.sort();
        ids
    }
}

/// Create a live root session `id` in `cwd`.
///
/// # Panics
/// When creation fails.
#[allow(clippy::expect_used)]
pub async fn create_root(
    factory: &dyn AgentFactory,
    id: &SessionId,
    cwd: &std::path::Path,
) -> AgentHandle {
    factory
        .create(CreateAgent {
            header: SessionHeader::new(id.clone(), cwd),
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .expect("the root is created")
}

/// A session id from test text.
///
/// # Panics
/// When the text is not a valid id.
#[allow(clippy::expect_used)]
pub fn sid(text: &str) -> SessionId {
    SessionId::new(text).expect("a valid session id")
}

/// A local continuable provider with every capability and an empty seed.
#[derive(Debug)]
pub struct LocalProvider {
    name: &'static str,
}

impl LocalProvider {
    /// A provider registered as `name`.
    pub fn new(name: &'static str) -> Self {
        Self { name }
    }
}

#[async_trait]
impl PrepareContinuable for LocalProvider {
    async fn prepare(
        &self,
        _request: ContinuableCreateRequest,
    ) -> Result<ContinuableCreateSpec, SubagentError> {
        Ok(ContinuableCreateSpec::default())
    }
}

impl SubagentProvider for LocalProvider {
    fn name(&self) -> &str {
        self.name
    }

    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities::ALL
    }

    fn inherits_parent_context(&self) -> bool {
        false
    }

    fn continuable(&self) -> Option<&dyn PrepareContinuable> {
        Some(self)
    }
}

/// Bound a wait so a bug fails the test instead of hanging it; never used
/// for ordering.
///
/// # Panics
/// After 20 seconds.
#[allow(clippy::expect_used)]
pub async fn bounded<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Wait (bounded) until `condition` holds, re-checking after other tasks ran.
///
/// # Panics
/// When the condition never holds.
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    bounded(what, async {
        while !condition() {
            tokio::task::yield_now().await;
        }
    })
    .await;
}
