//! The scoped tool registry (behaviour H7): the host's tools with their input
//! schemas compiled once, narrowed for one agent by its preset's tool set and
//! its tool restriction, plus the agent's own extra tools. A restricted tool
//! vanishes from the model-visible list AND refuses to execute if called
//! anyway; naming an unknown tool in a preset or restriction is an error.
//! Running a call must never fail or panic outward: every call, whatever goes
//! wrong (unknown or hidden tool, arguments that fail the schema, a tool error,
//! a panic, cancellation), produces a [`ToolOutput`] for the model, and a tool
//! that is hidden or given invalid arguments must never execute.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use dsh_core::schema::JsonSchema;
use dsh_core::{Agent, Tool, ToolCall, ToolContext, ToolOutput, ToolRestriction, ToolSpec};
use futures::FutureExt;
use tokio_util::sync::CancellationToken;

/// A registered tool: the tool, its compiled input schema and its spec.
struct Entry {
    tool: Arc<dyn Tool>,
    schema: JsonSchema,
    spec: ToolSpec,
}

impl Entry {
    /// Compile `tool`'s input schema and take its spec.
    fn compile(tool: Arc<dyn Tool>) -> Result<Self, ToolRegistryError> {
        let name = tool.name().to_owned();
        let input_schema = tool.input_schema();
        let schema = JsonSchema::compile(input_schema.clone()).map_err(|err| {
            ToolRegistryError::InvalidSchema {
                name: name.clone(),
                message: err.to_string(),
            }
        })?;
        let spec = ToolSpec {
            name,
            description: tool.description(),
            input_schema,
        };
        Ok(Self { tool, schema, spec })
    }
}

/// The host's tools, with their input schemas compiled once.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    entries: BTreeMap<String, Arc<Entry>>,
}

impl fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ToolRegistry")
            .field(&self.names().collect::<Vec<_>>())
            .finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add `tool`, compiling its input schema.
    ///
    /// # Errors
    /// [`ToolRegistryError::Duplicate`] when a tool of that name is already
    /// registered, [`ToolRegistryError::InvalidSchema`] when its input schema
    /// does not compile. The registry is unchanged on error.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolRegistryError> {
        if self.entries.contains_key(tool.name()) {
            return Err(ToolRegistryError::Duplicate(tool.name().to_owned()));
        }
        let entry = Entry::compile(tool)?;
        self.entries
            .insert(entry.spec.name.clone(), Arc::new(entry));
        Ok(())
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Why a tool could not be registered or a tool scope composed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolRegistryError {
    /// Two tools share a name (in the registry, among an agent's extra tools,
    /// or an extra tool and a visible host tool).
    #[error("tool `{0}` is already registered")]
    Duplicate(String),
    /// The tool's input schema does not compile.
    #[error("tool `{name}` has an invalid input schema: {message}")]
    InvalidSchema {
        /// The tool's name.
        name: String,
        /// What the schema compiler said.
        message: String,
    },
    /// A preset or restriction names tools that do not exist (sorted).
    #[error("tool restriction names unknown tool(s): {}", .0.join(", "))]
    UnknownTools(Vec<String>),
}

impl ToolRegistryError {
    /// A stable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Duplicate(_) => "DUPLICATE_TOOL",
            Self::InvalidSchema { .. } => "INVALID_TOOL_SCHEMA",
            Self::UnknownTools(_) => "UNKNOWN_TOOL",
        }
    }
}

/// A tool in one agent's scope, and whether the agent may see and run it.
struct Slot {
    entry: Arc<Entry>,
    visible: bool,
}

impl Slot {
    /// Visible to this agent and available now.
    fn offered(&self) -> bool {
        self.visible && self.entry.tool.is_available()
    }
}

/// One agent's view of the tools: the host registry narrowed by a preset's
/// tool set and a restriction, plus the agent's own extra tools. Cheap to
/// clone (shared).
#[derive(Clone)]
pub struct ScopedTools {
    slots: Arc<BTreeMap<String, Slot>>,
}

impl fmt::Debug for ScopedTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (visible, hidden): (Vec<_>, Vec<_>) = self.slots.iter().partition(|(_, s)| s.visible);
        let names = |slots: Vec<(&String, &Slot)>| -> Vec<String> {
            slots.into_iter().map(|(name, _)| name.clone()).collect()
        };
        f.debug_struct("ScopedTools")
            .field("visible", &names(visible))
            .field("hidden", &names(hidden))
            .finish()
    }
}

impl ScopedTools {
    /// Compose an agent's scope. `preset`: the names the preset exposes
    /// (`None` = all host tools); `restriction`: allow/deny on top; `extra`:
    /// per-agent tools that are always visible, whatever the preset or
    /// restriction says. Extra tools shadow nothing: a name clash with a
    /// visible host tool (or another extra tool) is
    /// [`ToolRegistryError::Duplicate`]; an extra tool may take the name of a
    /// hidden host tool, which it then replaces for this agent.
    ///
    /// # Errors
    /// [`ToolRegistryError::UnknownTools`] listing (sorted) every name in
    /// `preset` or `restriction` that is neither a host tool nor an extra
    /// tool; [`ToolRegistryError::Duplicate`] as above;
    /// [`ToolRegistryError::InvalidSchema`] for an extra tool whose input
    /// schema does not compile.
    pub fn compose(
        registry: &ToolRegistry,
        preset: Option<&BTreeSet<String>>,
        restriction: Option<&ToolRestriction>,
        extra: &[Arc<dyn Tool>],
    ) -> Result<Self, ToolRegistryError> {
        let extra_names: BTreeSet<&str> = extra.iter().map(|tool| tool.name()).collect();
        let unknown: BTreeSet<&String> = preset
            .into_iter()
            .flatten()
            .chain(restriction.into_iter().flat_map(ToolRestriction::names))
            .filter(|name| {
                !registry.entries.contains_key(name.as_str())
                    && !extra_names.contains(name.as_str())
            })
            .collect();
        if !unknown.is_empty() {
            return Err(ToolRegistryError::UnknownTools(
                unknown.into_iter().cloned().collect(),
            ));
        }

        let mut slots: BTreeMap<String, Slot> = registry
            .entries
            .iter()
            .map(|(name, entry)| {
                let visible = preset.is_none_or(|names| names.contains(name))
                    && restriction.is_none_or(|r| r.permits(name));
                let slot = Slot {
                    entry: Arc::clone(entry),
                    visible,
                };
                (name.clone(), slot)
            })
            .collect();
        let mut extras = BTreeSet::new();
        for tool in extra {
            let name = tool.name();
            let clashes = slots.get(name).is_some_and(|slot| slot.visible);
            if clashes || !extras.insert(name) {
                return Err(ToolRegistryError::Duplicate(name.to_owned()));
            }
            let entry = Arc::new(Entry::compile(Arc::clone(tool))?);
            let slot = Slot {
                entry,
                visible: true,
            };
            slots.insert(name.to_owned(), slot);
        }
        Ok(Self {
            slots: Arc::new(slots),
        })
    }

    /// Model-visible specs (name, description, input schema), sorted by name:
    /// the visible tools that are available now ([`Tool::is_available`]) and
    /// offered to `agent` ([`Tool::offered_to`]), each with its current
    /// description.
    pub fn specs(&self, agent: &dyn Agent) -> Vec<ToolSpec> {
        self.slots
            .values()
            .filter(|slot| slot.offered() && slot.entry.tool.offered_to(agent))
            .map(|slot| ToolSpec {
                description: slot.entry.tool.description(),
                ..slot.entry.spec.clone()
            })
            .collect()
    }

    /// Whether the agent may see and run the tool called `name` now.
    pub fn is_visible(&self, name: &str) -> bool {
        self.slots.get(name).is_some_and(Slot::offered)
    }

    /// Run one call; always produces a result for the model, never an error
    /// or an escaping panic:
    /// - a name that is neither a host nor an extra tool: "Unknown tool `x`.
    ///   Available tools: a, b." (the visible ones);
    /// - a host tool hidden by the preset or restriction: "Tool `x` is not
    ///   available to this agent." (it does not execute);
    /// - input failing the schema: "Invalid arguments for `x`: `path`:
    ///   `message`; ... . Fix the arguments and call the tool again." with
    ///   every violation, sorted by path (it does not execute);
    /// - a [`dsh_core::ToolError`]: an error result with its message;
    /// - a panic inside `execute`: "Tool `x` failed unexpectedly." (logged);
    /// - `cancel` fired before or while it runs: "Tool `x` was cancelled."
    ///   (the tool's future is dropped, or never started).
    ///
    /// # Cancel safety
    /// Dropping the future drops the tool's `execute` future where it
    /// stands (see [`Tool`]'s own cancel safety); nothing is recorded here.
    pub async fn call(
        &self,
        call: &ToolCall,
        agent: Arc<dyn Agent>,
        cancel: CancellationToken,
    ) -> ToolOutput {
        self.run(call, self.prepare(call, agent.as_ref()), agent, cancel)
            .await
    }

    /// Run a step's calls; the results are in call order. Consecutive calls
    /// to tools whose [`Tool::concurrency_safe`] is true run concurrently;
    /// any other call runs alone, after everything before it and before
    /// everything after it. Unknown, hidden and invalid calls count as safe
    /// (they do not execute).
    ///
    /// # Cancel safety
    /// As [`ScopedTools::call`], for every call still running; calls after
    /// the drop point never start.
    pub async fn call_all(
        &self,
        calls: &[ToolCall],
        agent: Arc<dyn Agent>,
        cancel: CancellationToken,
    ) -> Vec<ToolOutput> {
        let mut results = Vec::with_capacity(calls.len());
        let mut batch = Vec::new();
        for call in calls {
            let prepared = self.prepare(call, agent.as_ref());
            let safe = prepared
                .as_ref()
                .map_or(true, |entry| entry.tool.concurrency_safe());
            let run = self.run(call, prepared, Arc::clone(&agent), cancel.clone());
            if safe {
                batch.push(run);
            } else {
                results.extend(futures::future::join_all(std::mem::take(&mut batch)).await);
                results.push(run.await);
            }
        }
        results.extend(futures::future::join_all(batch).await);
        results
    }

    /// The tool to execute for `call`, or the result that replaces executing it.
    fn prepare(&self, call: &ToolCall, agent: &dyn Agent) -> Result<Arc<Entry>, ToolOutput> {
        let name = &call.name;
        let Some(slot) = self.slots.get(name) else {
            let visible: Vec<&str> = self
                .slots
                .iter()
                .filter(|(_, slot)| slot.offered())
                .map(|(name, _)| name.as_str())
                .collect();
            let available = if visible.is_empty() {
                "No tools are available.".to_owned()
            } else {
                format!("Available tools: {}.", visible.join(", "))
            };
            return Err(ToolOutput::error(format!(
                "Unknown tool `{name}`. {available}"
            )));
        };
        if !slot.visible {
            tracing::warn!(tool = %name, call_id = %call.call_id, "call to a tool hidden from this agent refused");
            return Err(ToolOutput::error(format!(
                "Tool `{name}` is not available to this agent."
            )));
        }
        if !slot.entry.tool.is_available() {
            return Err(ToolOutput::error(format!(
                "Tool `{name}` is not available right now."
            )));
        }
        if !slot.entry.tool.offered_to(agent) {
            return Err(ToolOutput::error(format!(
                "Tool `{name}` is not available to this agent."
            )));
        }
        if let Err(err) = slot.entry.schema.validate(&call.input) {
            // Sorted so the text does not depend on the validator's keyword order.
            let mut violations = err.violations;
            violations.sort_by(|a, b| {
                (&a.instance_path, &a.message).cmp(&(&b.instance_path, &b.message))
            });
            let violations: Vec<String> = violations
                .iter()
                .map(|v| {
                    let path = if v.instance_path.is_empty() {
                        "(root)"
                    } else {
                        v.instance_path.as_str()
                    };
                    format!("{path}: {}", v.message)
                })
                .collect();
            return Err(ToolOutput::error(format!(
                "Invalid arguments for `{name}`: {}. Fix the arguments and call the tool again.",
                violations.join("; ")
            )));
        }
        Ok(Arc::clone(&slot.entry))
    }

    /// Execute a prepared call, turning every outcome into a result.
    async fn run(
        &self,
        call: &ToolCall,
        prepared: Result<Arc<Entry>, ToolOutput>,
        agent: Arc<dyn Agent>,
        cancel: CancellationToken,
    ) -> ToolOutput {
        let entry = match prepared {
            Ok(entry) => entry,
            Err(output) => return output,
        };
        let name = &call.name;
        let cancelled = || ToolOutput::error(format!("Tool `{name}` was cancelled."));
        if cancel.is_cancelled() {
            return cancelled();
        }
        let ctx = ToolContext {
            agent,
            call_id: call.call_id.clone(),
            cancel: cancel.clone(),
        };
        let execution =
            AssertUnwindSafe(entry.tool.execute(call.input.clone(), ctx)).catch_unwind();
        let outcome = tokio::select! {
            biased;
            () = cancel.cancelled() => return cancelled(),
            outcome = execution => outcome,
        };
        match outcome {
            Ok(Ok(output)) => output,
            Ok(Err(err)) => ToolOutput::error(err.0),
            Err(payload) => {
                tracing::error!(
                    tool = %name,
                    call_id = %call.call_id,
                    panic = panic_message(payload.as_ref()),
                    "tool panicked"
                );
                ToolOutput::error(format!("Tool `{name}` failed unexpectedly."))
            }
        }
    }
}

/// The text of a panic payload, when it has one.
fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-text panic payload)")
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::any::Any;
    use std::path::PathBuf;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use async_trait::async_trait;
    use dsh_core::agent::{AgentStatus, CancelCause, CancelOptions, Epoch, InboxArrival};
    use dsh_core::session::{SessionEvent, SessionHeader};
    use dsh_core::{
        AgentError, AgentOptions, CallId, InboxTarget, MessageId, SessionId, ToolError, UserMessage,
    };
    use serde_json::{Value, json};
    use tokio::sync::{Barrier, broadcast, watch};

    /// The minimal agent a tool's context needs.
    struct StubAgent {
        header: SessionHeader,
        status: watch::Sender<AgentStatus>,
        inbox: broadcast::Sender<InboxArrival>,
    }

    impl StubAgent {
        fn shared() -> Arc<dyn Agent> {
            let id = SessionId::new("stub").unwrap();
            Arc::new(Self {
                header: SessionHeader::new(id, "/tmp"),
                status: watch::channel(AgentStatus::Idle).0,
                inbox: broadcast::channel(1).0,
            })
        }
    }

    #[async_trait]
    impl Agent for StubAgent {
        fn id(&self) -> &SessionId {
            &self.header.id
        }
        fn epoch(&self) -> Epoch {
            Epoch(0)
        }
        fn header(&self) -> &SessionHeader {
            &self.header
        }
        fn options(&self) -> AgentOptions {
            AgentOptions::default()
        }
        fn cwd(&self) -> PathBuf {
            self.header.cwd.clone()
        }
        fn accepts_images(&self) -> bool {
            false
        }
        fn status(&self) -> AgentStatus {
            *self.status.borrow()
        }
        fn watch_status(&self) -> watch::Receiver<AgentStatus> {
            self.status.subscribe()
        }
        async fn send(
            &self,
            _message: UserMessage,
            _target: InboxTarget,
            _wake: bool,
        ) -> Result<MessageId, AgentError> {
            Err(AgentError::Disposed(self.header.id.clone()))
        }
        fn cancel(&self, _cause: CancelCause, _options: CancelOptions) {}
        async fn wait_idle(&self) {}
        fn observe_inbox(&self) -> broadcast::Receiver<InboxArrival> {
            self.inbox.subscribe()
        }
        fn pending(&self) -> Vec<MessageId> {
            Vec::new()
        }
        fn events(&self) -> Vec<SessionEvent> {
            Vec::new()
        }
        async fn record(&self, kind: &str, _payload: Value) -> Result<u64, AgentError> {
            Err(AgentError::ReservedEventType(kind.to_owned()))
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    /// What a test tool does when executed.
    #[derive(Clone)]
    enum Behaviour {
        /// Answer with the tool's name.
        Echo,
        /// Fail with this message.
        Fail(&'static str),
        /// Panic.
        Panic,
        /// Wait until cancelled.
        Hang,
    }

    /// A tool that logs its executions into a shared journal.
    struct TestTool {
        name: &'static str,
        schema: Value,
        safe: bool,
        behaviour: Behaviour,
        /// Waited on once inside `execute`, to prove overlap.
        barrier: Option<Arc<Barrier>>,
        /// Yields to the scheduler this many times inside `execute`.
        yields: usize,
        journal: Arc<Journal>,
    }

    #[derive(Default)]
    struct Journal {
        log: Mutex<Vec<String>>,
        active: AtomicUsize,
    }

    impl Journal {
        fn note(&self, line: String) {
            self.log.lock().unwrap().push(line);
        }
        fn lines(&self) -> Vec<String> {
            self.log.lock().unwrap().clone()
        }
        fn runs_of(&self, name: &str) -> usize {
            let start = format!("start {name}");
            self.lines()
                .iter()
                .filter(|l| l.starts_with(&start))
                .count()
        }
    }

    impl TestTool {
        fn new(name: &'static str, journal: &Arc<Journal>) -> Self {
            Self {
                name,
                schema: json!({"type": "object"}),
                safe: false,
                behaviour: Behaviour::Echo,
                barrier: None,
                yields: 0,
                journal: Arc::clone(journal),
            }
        }
        fn safe(mut self) -> Self {
            self.safe = true;
            self
        }
        fn behaving(mut self, behaviour: Behaviour) -> Self {
            self.behaviour = behaviour;
            self
        }
        fn schema(mut self, schema: Value) -> Self {
            self.schema = schema;
            self
        }
        fn meeting(mut self, barrier: &Arc<Barrier>, yields: usize) -> Self {
            self.barrier = Some(Arc::clone(barrier));
            self.yields = yields;
            self
        }
        fn yielding(mut self, yields: usize) -> Self {
            self.yields = yields;
            self
        }
        fn arc(self) -> Arc<dyn Tool> {
            Arc::new(self)
        }
    }

    #[async_trait]
    impl Tool for TestTool {
        fn name(&self) -> &str {
            self.name
        }
        fn description(&self) -> String {
            format!("The {} tool.", self.name)
        }
        fn input_schema(&self) -> Value {
            self.schema.clone()
        }
        fn concurrency_safe(&self) -> bool {
            self.safe
        }
        async fn execute(&self, _input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
            let active = self.journal.active.fetch_add(1, Ordering::SeqCst) + 1;
            self.journal
                .note(format!("start {} active={active}", self.name));
            if let Some(barrier) = &self.barrier {
                barrier.wait().await;
            }
            for _ in 0..self.yields {
                tokio::task::yield_now().await;
            }
            let active = self.journal.active.fetch_sub(1, Ordering::SeqCst);
            self.journal
                .note(format!("end {} active={active}", self.name));
            match &self.behaviour {
                Behaviour::Echo => Ok(ToolOutput::text(format!("{} {}", self.name, ctx.call_id))),
                Behaviour::Fail(message) => Err(ToolError::new(*message)),
                Behaviour::Panic => panic!("kaboom"),
                Behaviour::Hang => {
                    ctx.cancel.cancelled().await;
                    Ok(ToolOutput::text("late"))
                }
            }
        }
    }

    fn registry(tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> ToolRegistry {
        let mut registry = ToolRegistry::new();
        for tool in tools {
            registry.register(tool).unwrap();
        }
        registry
    }

    fn tool_call(id: &str, name: &str, input: Value) -> ToolCall {
        ToolCall {
            call_id: CallId::new(id),
            name: name.to_owned(),
            input,
        }
    }

    fn text_of(output: &ToolOutput) -> String {
        dsh_core::content::joined_text(&output.content)
    }

    async fn call(scope: &ScopedTools, name: &str, input: Value) -> ToolOutput {
        scope
            .call(
                &tool_call("c1", name, input),
                StubAgent::shared(),
                CancellationToken::new(),
            )
            .await
    }

    fn names(scope: &ScopedTools) -> Vec<String> {
        scope
            .specs(StubAgent::shared().as_ref())
            .into_iter()
            .map(|spec| spec.name)
            .collect()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|&n| n.to_owned()).collect()
    }

    fn host(journal: &Arc<Journal>) -> ToolRegistry {
        registry(["read", "write", "grep"].map(|n| TestTool::new(n, journal).arc()))
    }

    #[test]
    fn registry_lists_and_rejects_duplicates() {
        let journal = Arc::default();
        let mut reg = host(&journal);
        assert_eq!(reg.names().collect::<Vec<_>>(), ["grep", "read", "write"]);
        assert_eq!((reg.len(), reg.is_empty()), (3, false));
        assert!(ToolRegistry::new().is_empty());
        let err = reg
            .register(TestTool::new("read", &journal).arc())
            .unwrap_err();
        assert_eq!(err, ToolRegistryError::Duplicate("read".into()));
        assert_eq!(err.code(), "DUPLICATE_TOOL");
        assert_eq!(err.to_string(), "tool `read` is already registered");
        assert_eq!(reg.len(), 3);
    }

    #[test]
    fn an_invalid_schema_is_rejected_at_registration() {
        let journal = Arc::default();
        let mut reg = ToolRegistry::new();
        let bad = TestTool::new("bad", &journal).schema(json!({"type": 5}));
        let err = reg.register(bad.arc()).unwrap_err();
        assert_eq!(err.code(), "INVALID_TOOL_SCHEMA");
        assert!(
            matches!(&err, ToolRegistryError::InvalidSchema { name, .. } if name == "bad"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("tool `bad` has an invalid input schema: "),
            "{err}"
        );
        assert!(reg.is_empty());
    }

    #[tokio::test]
    async fn an_allow_list_hides_and_refuses() {
        let journal = Arc::default();
        let allow = ToolRestriction::allow(["read"]);
        let scope = ScopedTools::compose(&host(&journal), None, Some(&allow), &[]).unwrap();
        assert_eq!(names(&scope), ["read"]);
        assert!(scope.is_visible("read") && !scope.is_visible("write"));
        let out = call(&scope, "write", json!({})).await;
        assert!(out.is_error);
        assert_eq!(
            text_of(&out),
            "Tool `write` is not available to this agent."
        );
        assert_eq!(
            journal.runs_of("write"),
            0,
            "a hidden tool must not execute"
        );
        let out = call(&scope, "read", json!({})).await;
        assert_eq!((out.is_error, text_of(&out).as_str()), (false, "read c1"));
    }

    #[tokio::test]
    async fn a_deny_list_hides_and_refuses() {
        let journal = Arc::default();
        let deny = ToolRestriction::deny(["write"]);
        let scope = ScopedTools::compose(&host(&journal), None, Some(&deny), &[]).unwrap();
        assert_eq!(names(&scope), ["grep", "read"]);
        let out = call(&scope, "write", json!({})).await;
        assert_eq!(
            text_of(&out),
            "Tool `write` is not available to this agent."
        );
        assert!(out.is_error);
        assert_eq!(journal.runs_of("write"), 0);
    }

    #[tokio::test]
    async fn a_preset_narrows_and_a_restriction_narrows_further() {
        let journal = Arc::default();
        let reg = host(&journal);
        let preset = set(&["read", "grep"]);
        let scope = ScopedTools::compose(&reg, Some(&preset), None, &[]).unwrap();
        assert_eq!(names(&scope), ["grep", "read"]);
        assert!(call(&scope, "write", json!({})).await.is_error);

        // A restriction cannot widen the preset.
        let allow = ToolRestriction::allow(["read", "write"]);
        let scope = ScopedTools::compose(&reg, Some(&preset), Some(&allow), &[]).unwrap();
        assert_eq!(names(&scope), ["read"]);
        for hidden in ["write", "grep"] {
            let out = call(&scope, hidden, json!({})).await;
            assert_eq!(
                text_of(&out),
                format!("Tool `{hidden}` is not available to this agent.")
            );
        }
        assert_eq!(journal.runs_of("write") + journal.runs_of("grep"), 0);
        let specs = scope.specs(StubAgent::shared().as_ref());
        assert_eq!(specs[0].description, "The read tool.");
        assert_eq!(specs[0].input_schema, json!({"type": "object"}));
    }

    #[test]
    fn unknown_names_in_a_preset_or_restriction_are_listed() {
        let journal = Arc::default();
        let reg = host(&journal);
        let preset = set(&["read", "nope"]);
        let allow = ToolRestriction::allow(["zzz", "aaa", "read", "nope"]);
        let err = ScopedTools::compose(&reg, Some(&preset), Some(&allow), &[]).unwrap_err();
        assert_eq!(
            err,
            ToolRegistryError::UnknownTools(vec!["aaa".into(), "nope".into(), "zzz".into()])
        );
        assert_eq!(err.code(), "UNKNOWN_TOOL");
        assert_eq!(
            err.to_string(),
            "tool restriction names unknown tool(s): aaa, nope, zzz"
        );
        let deny = ToolRestriction::deny(["ghost"]);
        let err = ScopedTools::compose(&reg, None, Some(&deny), &[]).unwrap_err();
        assert_eq!(err, ToolRegistryError::UnknownTools(vec!["ghost".into()]));
    }

    #[tokio::test]
    async fn extra_tools_are_visible_despite_an_allow_list() {
        let journal = Arc::default();
        let reg = host(&journal);
        let allow = ToolRestriction::allow(["read"]);
        let extra = [TestTool::new("capture", &journal).arc()];
        let scope = ScopedTools::compose(&reg, None, Some(&allow), &extra).unwrap();
        assert_eq!(names(&scope), ["capture", "read"]);
        let out = call(&scope, "capture", json!({})).await;
        assert_eq!(
            (out.is_error, text_of(&out).as_str()),
            (false, "capture c1")
        );

        // A deny-list or preset naming an extra tool is valid and does not hide it.
        let deny = ToolRestriction::deny(["capture"]);
        let scope =
            ScopedTools::compose(&reg, Some(&set(&["capture"])), Some(&deny), &extra).unwrap();
        assert_eq!(names(&scope), ["capture"]);
    }

    #[tokio::test]
    async fn extra_tools_shadow_nothing() {
        let journal = Arc::default();
        let reg = host(&journal);
        let clash = [TestTool::new("read", &journal).arc()];
        let err = ScopedTools::compose(&reg, None, None, &clash).err();
        assert_eq!(err, Some(ToolRegistryError::Duplicate("read".into())));
        let twice = [
            TestTool::new("capture", &journal).arc(),
            TestTool::new("capture", &journal).arc(),
        ];
        let err = ScopedTools::compose(&reg, None, None, &twice).err();
        assert_eq!(err, Some(ToolRegistryError::Duplicate("capture".into())));
        let bad = [TestTool::new("capture", &journal)
            .schema(json!({"type": 5}))
            .arc()];
        let err = ScopedTools::compose(&reg, None, None, &bad).err();
        assert_eq!(err.map(|e| e.code()), Some("INVALID_TOOL_SCHEMA"));

        // Taking the name of a hidden host tool is allowed: the extra one runs.
        let own = Arc::new(Journal::default());
        let extra = [TestTool::new("write", &own).arc()];
        let deny = ToolRestriction::deny(["write"]);
        let scope = ScopedTools::compose(&reg, None, Some(&deny), &extra).unwrap();
        assert!(scope.is_visible("write"));
        assert!(!call(&scope, "write", json!({})).await.is_error);
        assert_eq!((own.runs_of("write"), journal.runs_of("write")), (1, 0));
    }

    #[tokio::test]
    async fn invalid_arguments_list_every_violation_and_do_not_run() {
        let journal = Arc::default();
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "count": {"type": "integer", "minimum": 1}
            },
            "required": ["path"],
            "additionalProperties": false
        });
        let reg = registry([TestTool::new("read", &journal).schema(schema).arc()]);
        let scope = ScopedTools::compose(&reg, None, None, &[]).unwrap();
        let out = call(&scope, "read", json!({"count": 0, "extra": true})).await;
        assert!(out.is_error);
        insta::assert_snapshot!(text_of(&out), @r#"Invalid arguments for `read`: (root): "path" is a required property; (root): Additional properties are not allowed ('extra' was unexpected); /count: 0 is less than the minimum of 1. Fix the arguments and call the tool again."#);
        let out = call(&scope, "read", json!("not an object")).await;
        insta::assert_snapshot!(text_of(&out), @r#"Invalid arguments for `read`: (root): "not an object" is not of type "object". Fix the arguments and call the tool again."#);
        assert_eq!(journal.runs_of("read"), 0);
        assert!(
            !call(&scope, "read", json!({"path": "a", "count": 2}))
                .await
                .is_error
        );
    }

    #[tokio::test]
    async fn an_unknown_tool_lists_the_available_ones() {
        let journal = Arc::default();
        let deny = ToolRestriction::deny(["write"]);
        let scope = ScopedTools::compose(&host(&journal), None, Some(&deny), &[]).unwrap();
        let out = call(&scope, "delete", json!({})).await;
        assert!(out.is_error);
        assert_eq!(
            text_of(&out),
            "Unknown tool `delete`. Available tools: grep, read."
        );
        let empty = ScopedTools::compose(&ToolRegistry::new(), None, None, &[]).unwrap();
        let out = call(&empty, "delete", json!({})).await;
        assert_eq!(
            text_of(&out),
            "Unknown tool `delete`. No tools are available."
        );
    }

    #[tokio::test]
    async fn a_tool_error_becomes_an_error_result() {
        let journal = Arc::default();
        let failing = TestTool::new("read", &journal).behaving(Behaviour::Fail("no such file: a"));
        let scope = ScopedTools::compose(&registry([failing.arc()]), None, None, &[]).unwrap();
        let out = call(&scope, "read", json!({})).await;
        assert_eq!(out, ToolOutput::error("no such file: a"));
    }

    #[tokio::test]
    async fn a_panicking_tool_becomes_an_error_result() {
        let journal = Arc::default();
        let boom = TestTool::new("boom", &journal).behaving(Behaviour::Panic);
        let scope = ScopedTools::compose(&registry([boom.arc()]), None, None, &[]).unwrap();
        let out = call(&scope, "boom", json!({})).await;
        assert_eq!(out, ToolOutput::error("Tool `boom` failed unexpectedly."));
        // The scope stays usable.
        assert_eq!(journal.runs_of("boom"), 1);
        assert!(call(&scope, "boom", json!({})).await.is_error);
    }

    #[tokio::test]
    async fn cancel_stops_a_running_tool_and_prevents_new_ones() {
        let journal = Arc::default();
        let hang = TestTool::new("hang", &journal).behaving(Behaviour::Hang);
        let scope = ScopedTools::compose(&registry([hang.arc()]), None, None, &[]).unwrap();
        let cancel = CancellationToken::new();
        let first = tool_call("c1", "hang", json!({}));
        let running = scope.call(&first, StubAgent::shared(), cancel.clone());
        let mut running = std::pin::pin!(running);
        assert!(futures::poll!(running.as_mut()).is_pending());
        cancel.cancel();
        assert_eq!(
            running.await,
            ToolOutput::error("Tool `hang` was cancelled.")
        );
        let out = scope
            .call(
                &tool_call("c2", "hang", json!({})),
                StubAgent::shared(),
                cancel,
            )
            .await;
        assert_eq!(out, ToolOutput::error("Tool `hang` was cancelled."));
        assert_eq!(journal.runs_of("hang"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn safe_tools_overlap_unsafe_ones_run_alone_and_order_holds() {
        let journal = Arc::new(Journal::default());
        let first = Arc::new(Barrier::new(2));
        let second = Arc::new(Barrier::new(2));
        let reg = registry([
            // `a` yields longer than `b`, so `b` finishes first.
            TestTool::new("a", &journal).safe().meeting(&first, 5).arc(),
            TestTool::new("b", &journal).safe().meeting(&first, 0).arc(),
            TestTool::new("u", &journal).yielding(5).arc(),
            TestTool::new("d", &journal)
                .safe()
                .meeting(&second, 0)
                .arc(),
            TestTool::new("e", &journal)
                .safe()
                .meeting(&second, 5)
                .arc(),
        ]);
        let scope = ScopedTools::compose(&reg, None, None, &[]).unwrap();
        let calls: Vec<ToolCall> = ["a", "b", "ghost", "u", "d", "e"]
            .iter()
            .enumerate()
            .map(|(i, name)| tool_call(&format!("c{i}"), name, json!({})))
            .collect();
        // If the safe pairs did not overlap, their barriers would never open and
        // (with time paused) the timeout would fire at once.
        let results = tokio::time::timeout(
            Duration::from_secs(60),
            scope.call_all(&calls, StubAgent::shared(), CancellationToken::new()),
        )
        .await
        .expect("safe tools must run concurrently");
        let texts: Vec<String> = results.iter().map(text_of).collect();
        assert_eq!(
            texts,
            [
                "a c0",
                "b c1",
                "Unknown tool `ghost`. Available tools: a, b, d, e, u.",
                "u c3",
                "d c4",
                "e c5"
            ]
        );
        assert_eq!(
            journal.lines(),
            [
                "start a active=1",
                "start b active=2",
                "end b active=2",
                "end a active=1",
                // `u` yields five times, yet nothing runs beside it.
                "start u active=1",
                "end u active=1",
                "start d active=1",
                "start e active=2",
                "end d active=2",
                "end e active=1",
            ]
        );
    }

    #[tokio::test]
    async fn unsafe_tools_run_one_at_a_time_in_order() {
        let journal = Arc::new(Journal::default());
        let reg = registry([
            TestTool::new("x", &journal).yielding(3).arc(),
            TestTool::new("y", &journal).arc(),
        ]);
        let scope = ScopedTools::compose(&reg, None, None, &[]).unwrap();
        let calls = [
            tool_call("1", "x", json!({})),
            tool_call("2", "y", json!({})),
            tool_call("3", "x", json!({})),
        ];
        let results = scope
            .call_all(&calls, StubAgent::shared(), CancellationToken::new())
            .await;
        let texts: Vec<String> = results.iter().map(text_of).collect();
        assert_eq!(texts, ["x 1", "y 2", "x 3"]);
        let lines = journal.lines();
        assert!(lines.iter().all(|l| l.ends_with("active=1")), "{lines:?}");
        assert_eq!(lines.len(), 6);
    }

    /// A tool that comes and goes, with wording that changes while it is away.
    struct Flickering {
        available: std::sync::atomic::AtomicBool,
        wording: std::sync::Mutex<&'static str>,
    }

    #[async_trait]
    impl Tool for Flickering {
        fn name(&self) -> &str {
            "flicker"
        }
        fn description(&self) -> String {
            (*self.wording.lock().unwrap()).to_owned()
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn is_available(&self) -> bool {
            self.available.load(Ordering::SeqCst)
        }
        async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text("ran"))
        }
    }

    #[tokio::test]
    async fn an_unavailable_tool_is_not_offered_refuses_calls_and_returns_with_fresh_wording() {
        let tool = Arc::new(Flickering {
            available: std::sync::atomic::AtomicBool::new(true),
            wording: std::sync::Mutex::new("first wording"),
        });
        let scope =
            ScopedTools::compose(&registry([tool.clone() as Arc<dyn Tool>]), None, None, &[])
                .unwrap();
        assert_eq!(
            scope.specs(StubAgent::shared().as_ref())[0].description,
            "first wording"
        );
        assert_eq!(text_of(&call(&scope, "flicker", json!({})).await), "ran");

        tool.available.store(false, Ordering::SeqCst);
        *tool.wording.lock().unwrap() = "second wording";
        assert!(scope.specs(StubAgent::shared().as_ref()).is_empty());
        assert!(!scope.is_visible("flicker"));
        let refused = call(&scope, "flicker", json!({})).await;
        assert!(refused.is_error);
        assert_eq!(
            text_of(&refused),
            "Tool `flicker` is not available right now."
        );

        tool.available.store(true, Ordering::SeqCst);
        assert_eq!(
            scope.specs(StubAgent::shared().as_ref())[0].description,
            "second wording"
        );
        assert_eq!(text_of(&call(&scope, "flicker", json!({})).await), "ran");
    }

    /// A tool offered only to agents whose session has a parent.
    struct ChildrenOnly;

    #[async_trait]
    impl Tool for ChildrenOnly {
        fn name(&self) -> &str {
            "children-only"
        }
        fn description(&self) -> String {
            "for children".to_owned()
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn offered_to(&self, agent: &dyn Agent) -> bool {
            agent.header().parent_session.is_some()
        }
        async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::text("ran"))
        }
    }

    #[tokio::test]
    async fn a_tool_not_offered_to_an_agent_is_neither_shown_nor_run_for_it() {
        let scope = ScopedTools::compose(
            &registry([Arc::new(ChildrenOnly) as Arc<dyn Tool>]),
            None,
            None,
            &[],
        )
        .unwrap();
        let root = StubAgent::shared();
        assert!(scope.specs(root.as_ref()).is_empty());
        let refused = call(&scope, "children-only", json!({})).await;
        assert!(refused.is_error);
        assert_eq!(
            text_of(&refused),
            "Tool `children-only` is not available to this agent."
        );

        let mut header = SessionHeader::new(SessionId::new("child").unwrap(), "/tmp");
        header.parent_session = Some(SessionId::new("stub").unwrap());
        let child: Arc<dyn Agent> = Arc::new(StubAgent {
            header,
            status: watch::channel(AgentStatus::Idle).0,
            inbox: broadcast::channel(1).0,
        });
        assert_eq!(scope.specs(child.as_ref()).len(), 1);
        let ran = scope
            .call(
                &tool_call("c1", "children-only", json!({})),
                child,
                CancellationToken::new(),
            )
            .await;
        assert_eq!(text_of(&ran), "ran");
    }
}
