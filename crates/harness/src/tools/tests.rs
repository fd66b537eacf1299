//! Unit tests of the scoped tool registry: registration, restriction (hide
//! and refuse), preset narrowing, per-agent extra tools, argument validation
//! with every violation listed, tool errors and panics as error results,
//! cancellation, the concurrency of a step's calls, and tools that are
//! unavailable or not offered to an agent.

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
    AgentError, AgentOptions, CallId, InboxTarget, MessageId, SessionId, ToolError, ToolInput,
    UserMessage,
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
        Epoch::NONE
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
    async fn record(
        &self,
        kind: &str,
        _payload: dsh_core::ExtensionPayload,
    ) -> Result<u64, AgentError> {
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
        input: input.into(),
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
    let scope = ScopedTools::compose(&reg, Some(&set(&["capture"])), Some(&deny), &extra).unwrap();
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
async fn arguments_no_value_tree_holds_are_refused_without_running() {
    let journal = Arc::default();
    let reg = registry([TestTool::new("read", &journal).arc()]);
    let scope = ScopedTools::compose(&reg, None, None, &[]).unwrap();
    // Valid JSON, so the call and its log line keep it; its number is out
    // of `f64`'s range, so it is parsed (here, once) only to be refused.
    let huge = ToolCall {
        call_id: CallId::new("c1"),
        name: "read".into(),
        input: ToolInput::from_json(r#"{"path": 1e400}"#).unwrap(),
    };
    let out = scope
        .call(&huge, StubAgent::shared(), CancellationToken::new())
        .await;
    assert!(out.is_error);
    assert!(
        text_of(&out).starts_with("Invalid arguments for `read`: number out of range"),
        "{}",
        text_of(&out)
    );
    assert_eq!(journal.runs_of("read"), 0);
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
        ScopedTools::compose(&registry([tool.clone() as Arc<dyn Tool>]), None, None, &[]).unwrap();
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
