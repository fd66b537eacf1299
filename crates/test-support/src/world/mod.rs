//! World builders for the subagent suites: a JSONL store wrapped in the
//! kit's [`FaultStore`] and [`GatedStore`], a harness answering with a
//! scripted model and offering three host tools, a live root agent (fresh,
//! or resumed from what a killed process left), a subagent runtime over
//! them, and a local continuable provider. A test holds a store call at a
//! [`Point`] ([`World::hold`]), drives the code under test until the gate
//! is reached, and then decides what to do with the future (drop it, for
//! the drop-point tests) before releasing it.

pub mod process;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dsh_core::{
    Agent, AgentFactory, AgentHandle, AgentOptions, CancellationToken, ContentBlock, CreateAgent,
    Durability, EventPayload, MessageSource, ResumeAgent, SessionHeader, SessionId, SessionStore,
    StopReason, Tool, ToolContext, ToolError, ToolOutput,
};
use dsh_harness::{Harness, JsonlStore, Scripted, ScriptedModel};
use dsh_subagent::{
    ActivationSpec, AgentRoute, ContinuableCreateRequest, ContinuableCreateSpec, Delivery,
    PrepareContinuable, ResolvedStartRequest, RuntimeConfig, StartExternal, StartRequest,
    SubagentActivation, SubagentCapabilities, SubagentError, SubagentEvent, SubagentProvider,
    SubagentResult, SubagentRun, SubagentRuntime,
};

use crate::store::{Fault, FaultStore, GatedStore};
use crate::wait::{bounded, until};

pub use crate::store::{Gate, Op, Point as When};

/// A store call a test holds or fails: the operation, on the log of which
/// session, before or after the inner call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// The operation.
    pub op: Op,
    /// The session whose log it is made on.
    pub id: SessionId,
    /// Before or after the inner call (a failure is always before).
    pub when: When,
}

/// The store a world writes through: faults over gates over JSONL files.
pub type WorldStore = FaultStore<GatedStore<JsonlStore>>;

/// Which store a world runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// JSONL files in the world's directory, with this durability.
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
    pub store: Arc<WorldStore>,
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
    ///
    /// # Cancel safety
    /// A test helper: a drop part-way drops the temporary directory with
    /// whatever the world had written in it.
    pub async fn new(backing: Backing, config: RuntimeConfig) -> Self {
        Self::build(backing, config, None, None).await
    }

    /// A world over the JSONL directory `dir` (kept when the world goes),
    /// with a fresh root `lead`: what a process the test kills runs.
    ///
    /// # Panics
    /// When the world cannot be built.
    ///
    /// # Cancel safety
    /// A drop part-way may leave the root's log in `dir` (it is created
    /// first), with no live agent.
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
    ///
    /// # Cancel safety
    /// A drop part-way drops the copy (a temporary directory); `from` is only
    /// read.
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
        let Backing::Jsonl(durability) = backing;
        let store = Arc::new(FaultStore::new(GatedStore::new(
            JsonlStore::new(&dir, durability).expect("a JSONL store"),
        )));
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

    /// Hold the next call at `point` until the gate is released.
    pub fn hold(&self, point: &Point) -> Gate {
        self.store
            .inner()
            .gate_on_log(&point.id, point.op, point.when)
    }

    /// Fail the next call at `point` with an I/O error (`EIO`).
    pub fn fail(&self, point: &Point) {
        self.store.fail_on_log(&point.id, point.op, 1, Fault::EIO);
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
    ///
    /// # Cancel safety
    /// Cancel safe: it only lists.
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
///
/// # Cancel safety
/// As [`AgentFactory::create`]: a drop leaves no live root.
pub async fn create_root(
    factory: &dyn AgentFactory,
    id: &SessionId,
    cwd: &std::path::Path,
) -> AgentHandle {
    create_session(factory, SessionHeader::new(id.clone(), cwd)).await
}

/// Create a live session with `header` (no seed, no setup).
///
/// # Panics
/// When creation fails.
///
/// # Cancel safety
/// As [`AgentFactory::create`]: a drop leaves no live session.
#[allow(clippy::expect_used)]
pub async fn create_session(factory: &dyn AgentFactory, header: SessionHeader) -> AgentHandle {
    factory
        .create(CreateAgent {
            header,
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .expect("the session is created")
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

impl World {
    /// Wait (bounded) until the runtime has no task and no activation and
    /// every live agent is idle, twice over (a notice can wake the root).
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn quiesce(&self) {
        for _ in 0..2 {
            until(|| self.runtime.tasks().is_empty() && self.runtime.live_activations() == 0).await;
            for reference in self.runtime.registry().list() {
                if let Some(agent) = self.runtime.registry().resolve(&reference) {
                    bounded(agent.wait_idle()).await;
                }
            }
        }
    }

    /// Start the root's child `name` (its id is `name` too), wait until it
    /// settled and went cold, and return its handle.
    ///
    /// # Panics
    /// When the start or the child fails.
    ///
    /// # Cancel safety
    /// As [`SubagentRuntime::start_activation`]: a drop leaves nothing or a
    /// published, monitored child, which settles on its own.
    #[allow(clippy::expect_used)]
    pub async fn cold_child(&self, name: &str) -> SubagentActivation {
        let mut spec = self.spec(Some(name));
        spec.child_id = Some(sid(name));
        let activation = self
            .runtime
            .start_activation(spec)
            .await
            .expect("the child starts");
        bounded(activation.result())
            .await
            .expect("the child settles");
        self.quiesce().await;
        activation
    }
}

/// The settlement notices `agent`'s log holds from `child`: stop reason and text.
pub fn notices_from(agent: &Arc<dyn Agent>, child: &str) -> Vec<(Option<StopReason>, String)> {
    agent
        .events()
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::InboxAccepted(accepted) => match &accepted.message.source {
                MessageSource::SubagentSettled {
                    sender_session_id,
                    stop_reason,
                    ..
                } if sender_session_id.as_str() == child => Some((
                    stop_reason.clone(),
                    dsh_core::content::joined_text(&accepted.message.content),
                )),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// How many `subagent/start` events `events` holds (drained).
pub fn starts(events: &mut tokio::sync::mpsc::UnboundedReceiver<SubagentEvent>) -> usize {
    let mut count = 0;
    while let Ok(event) = events.try_recv() {
        count += usize::from(matches!(event, SubagentEvent::Start(_)));
    }
    count
}

/// How an [`ExternalProvider`]'s runs end.
#[derive(Debug, Clone)]
pub enum RunEnd {
    /// Completed at once.
    Completed,
    /// Failed at once with this infrastructure error.
    Fails(SubagentError),
}

/// An external provider whose runs end at once as configured; it records
/// the agent options of the last start it was given.
pub struct ExternalProvider {
    name: &'static str,
    id: Option<SessionId>,
    route: Option<AgentRoute>,
    end: RunEnd,
    seen: Mutex<Option<ResolvedStartRequest>>,
}

impl ExternalProvider {
    /// Runs registered as `name`, with fresh ids, that complete.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            id: None,
            route: None,
            end: RunEnd::Completed,
            seen: Mutex::new(None),
        }
    }

    /// Every run carries `id`.
    #[must_use]
    pub fn with_id(mut self, id: SessionId) -> Self {
        self.id = Some(id);
        self
    }

    /// The provider offers this default route.
    #[must_use]
    pub fn with_route(mut self, route: AgentRoute) -> Self {
        self.route = Some(route);
        self
    }

    /// Runs end so.
    #[must_use]
    pub fn ending(mut self, end: RunEnd) -> Self {
        self.end = end;
        self
    }

    /// The agent options of the last start.
    pub fn seen_options(&self) -> Option<AgentOptions> {
        self.seen_request()
            .and_then(|request| request.agent_options)
    }

    /// The last start request it was given.
    pub fn seen_request(&self) -> Option<ResolvedStartRequest> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl StartExternal for ExternalProvider {
    async fn start(
        &self,
        request: ResolvedStartRequest,
    ) -> Result<Arc<dyn SubagentRun>, SubagentError> {
        *self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(request);
        Ok(Arc::new(EndedRun {
            id: self.id.clone().unwrap_or_else(SessionId::generate),
            end: self.end.clone(),
        }))
    }
}

impl SubagentProvider for ExternalProvider {
    fn name(&self) -> &str {
        self.name
    }

    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities::ALL
    }

    fn inherits_parent_context(&self) -> bool {
        false
    }

    fn agent_route_defaults(&self) -> Option<AgentRoute> {
        self.route.clone()
    }

    fn external(&self) -> Option<&dyn StartExternal> {
        Some(self)
    }
}

struct EndedRun {
    id: SessionId,
    end: RunEnd,
}

#[async_trait]
impl SubagentRun for EndedRun {
    fn id(&self) -> &SessionId {
        &self.id
    }

    async fn result(&self) -> Result<SubagentResult, SubagentError> {
        match &self.end {
            RunEnd::Completed => Ok(SubagentResult::stopped(StopReason::COMPLETED)),
            RunEnd::Fails(err) => Err(err.clone()),
        }
    }

    async fn dispose(&self) -> Result<(), SubagentError> {
        Ok(())
    }
}

/// A harness over `store` answering with `model` (and offering `tools`),
/// and a subagent runtime over it with `providers` registered: the pair
/// every subagent suite builds its world from.
///
/// # Panics
/// When the harness cannot be built or a provider does not register.
#[allow(clippy::expect_used)]
pub fn harness_and_runtime(
    store: Arc<dyn SessionStore>,
    model: Arc<ScriptedModel>,
    tools: Vec<Arc<dyn Tool>>,
    providers: Vec<Arc<dyn SubagentProvider>>,
    config: RuntimeConfig,
) -> (Harness, SubagentRuntime) {
    let mut builder = Harness::builder(store.clone()).model(model);
    for tool in tools {
        builder = builder.tool(tool).expect("the tool registers");
    }
    let harness = builder.build().expect("a harness");
    let runtime = SubagentRuntime::new(Arc::new(harness.clone()), store, config);
    for provider in providers {
        runtime.register(provider).expect("the provider registers");
    }
    (harness, runtime)
}
