//! Subagent test worlds, built by one [`WorldBuilder`]: a store (memory, or
//! JSONL files in a temporary or given directory, optionally wrapped: the
//! holding [`WorldStore`], a counting [`FaultStore`], any wrapper), a
//! harness answering with a scripted model ([`models`]) and offering the
//! test's tools, a live root agent (fresh, or resumed from what a killed
//! process left), and a subagent runtime over them with the test's
//! providers registered (the real ones, or the scripted ones of
//! [`providers`]). A test holds a store call at a [`Point`]
//! ([`World::hold`]), drives the code under test until the gate is reached,
//! and then decides what to do with the future (drop it, for the drop-point
//! tests) before releasing it.

mod builder;
pub mod models;
pub mod process;
pub mod providers;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{
    Agent, AgentError, AgentFactory, AgentHandle, AgentRegistry, CancellationToken, ContentBlock,
    CreateAgent, Durability, EventPayload, MessageId, MessageSource, ResumeAgent, SessionHeader,
    SessionId, SessionStore, StopReason, Tool, ToolContext, ToolError, ToolOutput,
};
use dsh_harness::{Harness, JsonlStore, ScriptedModel};
use dsh_subagent::{
    ActivationSpec, Delivery, DescendantRow, RuntimeConfig, StartRequest, SubagentActivation,
    SubagentError, SubagentEvent, SubagentRuntime,
};

use crate::store::{Fault, FaultStore, GatedStore, SharedStore};
use crate::wait::{bounded, until};

pub use crate::sid;
pub use crate::store::{Gate, Op, Point as When};
pub use builder::{Layout, PROJECT_ROOT, WorldBuilder};
pub use providers::{Bare, ExternalProvider, LocalProvider, Probe, RunControl, RunEnd};

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

/// The holding store of [`World::new`]: faults over gates over the
/// world's backing.
pub type WorldStore = FaultStore<GatedStore<SharedStore>>;

/// Which store a world runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// JSONL files in the world's sessions directory, with this durability.
    Jsonl(Durability),
    /// An in-memory store (nothing outlives the world).
    Memory,
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

/// The harness's streamed text handed to a runtime's
/// [`dsh_subagent::TextFeed`] once attached ([`WorldBuilder::stream_text`]).
#[derive(Debug, Default)]
pub struct StreamedText(std::sync::OnceLock<dsh_subagent::TextFeed>);

impl StreamedText {
    /// Feed `runtime` from now on (the first attach wins).
    pub fn attach(&self, runtime: &SubagentRuntime) {
        let _first = self.0.set(runtime.text_feed());
    }
}

impl dsh_harness::TextObserver for StreamedText {
    fn text_delta(&self, agent: &SessionId, delta: &str) {
        if let Some(feed) = self.0.get() {
            feed.delta(agent, delta);
        }
    }
}

/// A harness, a live root and a subagent runtime over one store, built by a
/// [`WorldBuilder`]. `S` is the store's type as the test sees it (the
/// wrapper it chose, or `dyn SessionStore`); by default it is the holding
/// [`WorldStore`] of [`World::new`].
pub struct World<S: ?Sized = WorldStore> {
    /// The world's directory (a temporary one unless given).
    dir: PathBuf,
    /// Where the JSONL logs are.
    sessions: PathBuf,
    /// The directory every root starts in (it exists).
    project: PathBuf,
    /// Keeps a temporary directory for the world's life.
    _temp: Option<tempfile::TempDir>,
    /// The JSONL store under every wrapper, on a JSONL backing.
    jsonl: Option<JsonlStore>,
    /// The store every agent writes through, as the test chose it.
    pub store: Arc<S>,
    /// The same store as the harness and the runtime hold it.
    shared: Arc<dyn SessionStore>,
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
    /// with the host tools, the `local` provider and a fresh root `lead`,
    /// over a holding store ([`World::hold`], [`World::fail`]).
    ///
    /// # Panics
    /// When the world cannot be built (a test failure).
    ///
    /// # Cancel safety
    /// A test helper: a drop part-way drops the temporary directory with
    /// whatever the world had written in it.
    pub async fn new(backing: Backing, config: RuntimeConfig) -> Self {
        WorldBuilder::new()
            .backing(backing)
            .config(config)
            .host_tools()
            .local()
            .holding()
            .build()
            .await
    }

    /// As [`World::new`], over the JSONL directory `dir` (kept when the
    /// world goes): what a process the test kills runs.
    ///
    /// # Panics
    /// When the world cannot be built.
    ///
    /// # Cancel safety
    /// A drop part-way may leave the root's log in `dir` (it is created
    /// first), with no live agent.
    pub async fn in_dir(dir: &Path, durability: Durability) -> Self {
        WorldBuilder::new()
            .jsonl(durability)
            .in_dir(dir)
            .host_tools()
            .local()
            .holding()
            .build()
            .await
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
    pub async fn restarted(from: &Path, durability: Durability) -> Self {
        WorldBuilder::new()
            .jsonl(durability)
            .restarted_from(from)
            .host_tools()
            .local()
            .holding()
            .build()
            .await
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
}

impl<S: SessionStore + ?Sized> World<S> {
    /// The world's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of the JSONL logs (on a memory backing, where they
    /// would be).
    pub fn sessions_dir(&self) -> &Path {
        &self.sessions
    }

    /// The directory every root starts in (it exists).
    pub fn project(&self) -> &Path {
        &self.project
    }

    /// The JSONL store under every wrapper, so a test can write past them
    /// (a corrupt log) or find a log's file.
    ///
    /// # Panics
    /// On a memory backing.
    pub fn jsonl(&self) -> &JsonlStore {
        match &self.jsonl {
            Some(jsonl) => jsonl,
            None => panic!("a memory world has no JSONL store"),
        }
    }

    /// The store as the harness and the runtime hold it.
    pub fn shared_store(&self) -> Arc<dyn SessionStore> {
        Arc::clone(&self.shared)
    }

    /// The registry of live agents.
    pub fn registry(&self) -> &AgentRegistry {
        self.runtime.registry()
    }

    /// The live root agent.
    pub fn lead(&self) -> Arc<dyn Agent> {
        Arc::clone(self.root.agent())
    }

    /// The live agent of `id`.
    ///
    /// # Panics
    /// When it is not live.
    pub fn live(&self, id: &SessionId) -> Arc<dyn Agent> {
        match self.registry().get(id) {
            Some(agent) => agent,
            None => panic!("{id} is not live"),
        }
    }

    /// Create a live session with `header` straight through the harness.
    ///
    /// # Panics
    /// When creation fails.
    ///
    /// # Cancel safety
    /// As [`AgentFactory::create`]: a drop leaves no live session.
    pub async fn session(&self, header: SessionHeader) -> AgentHandle {
        create_session(&self.harness, header).await
    }

    /// Resume the stored session `id` under a new epoch.
    ///
    /// # Errors
    /// As [`AgentFactory::resume`].
    ///
    /// # Cancel safety
    /// As [`AgentFactory::resume`].
    pub async fn try_resume(&self, id: &SessionId) -> Result<AgentHandle, AgentError> {
        self.harness.resume(resuming(id.clone())).await
    }

    /// Resume the stored session `id` under a new epoch.
    ///
    /// # Panics
    /// When it cannot be resumed.
    ///
    /// # Cancel safety
    /// As [`AgentFactory::resume`].
    pub async fn resume(&self, id: &str) -> AgentHandle {
        match self.try_resume(&sid(id)).await {
            Ok(handle) => handle,
            Err(err) => panic!("{id} does not resume: {err}"),
        }
    }

    /// Create a further root `id` in the project directory.
    ///
    /// # Panics
    /// When creation fails.
    ///
    /// # Cancel safety
    /// As [`AgentFactory::create`]: a drop leaves no live agent.
    pub async fn agent(&self, id: &str) -> AgentHandle {
        create_root(&self.harness, &sid(id), &self.project).await
    }

    /// A message from the root to `target` (by session id) saying `text`,
    /// as `send_message` delivers it under a token nobody cancels. The
    /// future owns what it needs, so a test can spawn it or drop it at an
    /// await point.
    ///
    /// # Cancel safety
    /// As [`SubagentRuntime::send_message`].
    pub fn tell(
        &self,
        target: &str,
        text: &str,
    ) -> impl Future<Output = Result<MessageId, SubagentError>> + Send + 'static {
        let (runtime, root, target) = (self.runtime.clone(), self.lead(), sid(target));
        let content = vec![ContentBlock::text(text)];
        async move {
            runtime
                .send_message(&root, &target, content, &CancellationToken::new())
                .await
        }
    }

    /// The root's descendants, listed (bounded) under a token nobody
    /// cancels.
    ///
    /// # Errors
    /// As [`SubagentRuntime::list_descendants`].
    ///
    /// # Panics
    /// When the listing hangs.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn descendants(&self) -> Result<Vec<DescendantRow>, SubagentError> {
        let root = self.lead();
        bounded(
            self.runtime
                .list_descendants(root.id(), &CancellationToken::new()),
        )
        .await
    }

    /// Start `spec` (bounded) and return its activation.
    ///
    /// # Panics
    /// When the start fails or hangs.
    ///
    /// # Cancel safety
    /// As [`SubagentRuntime::start_activation`]: a drop leaves nothing or a
    /// published, monitored child.
    #[allow(clippy::expect_used)]
    pub async fn start(&self, spec: ActivationSpec) -> SubagentActivation {
        bounded(self.runtime.start_activation(spec))
            .await
            .expect("the activation starts")
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
pub async fn create_root(factory: &dyn AgentFactory, id: &SessionId, cwd: &Path) -> AgentHandle {
    create_session(factory, SessionHeader::new(id.clone(), cwd)).await
}

/// Create a live session with `header`, with no seed, straight through the
/// factory (not started by a runtime).
///
/// # Panics
/// When creation fails.
///
/// # Cancel safety
/// As [`AgentFactory::create`]: a drop leaves no live session.
#[allow(clippy::expect_used)]
pub async fn create_session(factory: &dyn AgentFactory, header: SessionHeader) -> AgentHandle {
    factory
        .create(fresh(header))
        .await
        .expect("the session is created")
}

/// A resume of `id` with the default setup and a token nobody cancels.
fn resuming(id: SessionId) -> ResumeAgent {
    ResumeAgent {
        id,
        setup: Default::default(),
        cancel: CancellationToken::new(),
    }
}

/// A creation of `header` with no seed, the default setup and a token
/// nobody cancels.
fn fresh(header: SessionHeader) -> CreateAgent {
    CreateAgent {
        header,
        seed: Vec::new(),
        setup: Default::default(),
        cancel: CancellationToken::new(),
    }
}

/// A caller-delivered, unnamed start of `provider` under `parent`,
/// labelled and prompted `prompt` (tests change the fields they need).
pub fn caller_spec(parent: &Arc<dyn Agent>, provider: &str, prompt: &str) -> ActivationSpec {
    ActivationSpec {
        provider: provider.into(),
        label: prompt.into(),
        name: None,
        child_id: None,
        cancel: CancellationToken::new(),
        delivery: Delivery::Caller,
        request: StartRequest::new(Arc::clone(parent), vec![ContentBlock::text(prompt)]),
    }
}

/// A start of `provider` named `name` under `parent` with the reserved id
/// `s-<name>`, labelled `task <name>`, prompted with `prompt` and delivered
/// to the parent (tests change the fields they need).
pub fn named_spec(
    parent: &Arc<dyn Agent>,
    provider: &str,
    name: &str,
    prompt: &str,
) -> ActivationSpec {
    ActivationSpec {
        provider: provider.into(),
        label: format!("task {name}"),
        name: Some(name.into()),
        child_id: Some(sid(&format!("s-{name}"))),
        cancel: CancellationToken::new(),
        delivery: Delivery::Parent,
        request: StartRequest::new(Arc::clone(parent), vec![ContentBlock::text(prompt)]),
    }
}

impl<S: SessionStore + ?Sized> World<S> {
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
pub fn starts(events: &mut dsh_core::observe::Events<SubagentEvent>) -> usize {
    let mut count = 0;
    while let Ok(event) = events.try_recv() {
        count += usize::from(matches!(event, SubagentEvent::Start(_)));
    }
    count
}
