//! The `spawn` provider through the subagent runtime, against the real
//! harness and (mostly) the real JSONL store: publication and the catalog
//! (B8, B25), who owns a published child (B7), starts that fail or are
//! cancelled and leave nothing behind (B9), lifecycle events (B10), results
//! and stop reasons (B12, B13), settlement, teardown and dispose (B15), one
//! live activation per child (B16), composition of the child (B20-B24),
//! names (B26, B27), settlement notices (B28) and concurrent starts. One
//! scripted model serves every agent of a test; it answers by the request
//! (usually by the first user message, which is a child's prompt), so parents
//! and children are scripted independently. Ordering is made with gates and
//! bounded yield loops, never with sleeps; timeouts only turn a hang into a
//! failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_test_support::logs::stop_reasons;
use dsh_test_support::requests::first_user_text;
use dsh_test_support::wait::{bounded, settle, until};
use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::schema::ObjectSchema;
use dsh_core::{
    Agent, AgentOptions, AgentStatus, CancellationToken, ContentBlock, EventPayload, InboxTarget,
    Message, MessageId, MessageSource, ModelError, ModelErrorKind, ModelRequest, SessionEvent,
    SessionId, SessionStore, StopReason, Tool, ToolContext, ToolError, ToolOutput, ToolRestriction,
    UserMessage,
};
use dsh_harness::{ModelRoutes, Scripted, ScriptedModel, SystemPrompt};
use dsh_subagent::{
    ActivationSpec, Catalog, CatalogEntry, ChildMode, Delivery, MemberNames, RunInfo, RunOutcome,
    RuntimeConfig, SubagentActivation, SubagentEvent, SubagentResult, fold_catalog,
};
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::TappedAgent;
use dsh_test_support::store::{GatedStore, Op, SharedStore};
use dsh_test_support::world::models::{echo_of as echo, gated};
use dsh_test_support::world::{When, World, WorldBuilder, caller_spec, models, sid};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

/// The root agent's session id.
const LEAD: &str = "lead-session";

/// A world over a JSONL store in a temp dir (logs in `sessions/`, roots
/// in `project/`) whose agents ask `model`, with `spawn` registered and
/// the root `lead-session`.
fn builder(model: &Arc<ScriptedModel>) -> WorldBuilder {
    WorldBuilder::project()
        .model(model.clone())
        .provider(Arc::new(SpawnProvider::new()))
}

async fn world(model: &Arc<ScriptedModel>) -> World<dyn SessionStore> {
    builder(model).build().await
}

/// A caller-delivered spawn of `prompt` under `parent`, label = prompt.
fn spec(parent: &Arc<dyn Agent>, prompt: &str) -> ActivationSpec {
    caller_spec(parent, "spawn", prompt)
}

fn named(mut spec: ActivationSpec, name: &str) -> ActivationSpec {
    spec.name = Some(name.into());
    spec
}

fn to_parent(mut spec: ActivationSpec) -> ActivationSpec {
    spec.delivery = Delivery::Parent;
    spec
}

fn text_of(content: &[ContentBlock]) -> String {
    dsh_core::content::joined_text(content)
}

/// How many tool results a request's transcript holds.
fn tool_results(request: &ModelRequest) -> usize {
    request
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .count()
}

fn has_assistant(request: &ModelRequest) -> bool {
    request
        .messages
        .iter()
        .any(|m| matches!(m, Message::Assistant { .. }))
}

/// The requests an agent whose first user message is `prompt` made.
fn requests_of(model: &ScriptedModel, prompt: &str) -> Vec<ModelRequest> {
    model
        .requests()
        .into_iter()
        .filter(|r| first_user_text(r) == prompt)
        .collect()
}

fn tool_names(request: &ModelRequest) -> BTreeSet<String> {
    request.tools.iter().map(|t| t.name.clone()).collect()
}

/// A model whose `hang` prompt never answers, and which holds every other
/// request until `gate` gets a permit, then echoes it.
fn hanging_model(gate: &Arc<Semaphore>) -> Arc<ScriptedModel> {
    let gate = gate.clone();
    Arc::new(
        ScriptedModel::new().responder(move |r| match first_user_text(r).as_str() {
            "hang" => Scripted::Hang,
            _ => gated(&gate, echo(r)),
        }),
    )
}

fn catalog(agent: &Arc<dyn Agent>) -> Catalog {
    fold_catalog(agent.header(), &agent.events()).unwrap()
}

fn output(result: &SubagentResult) -> String {
    text_of(&result.output)
}

async fn result_of(activation: &SubagentActivation) -> SubagentResult {
    bounded(activation.result()).await.unwrap()
}

/// The notices (`subagent-settled` acceptances) in an agent's log.
fn notices(events: &[SessionEvent]) -> Vec<(UserMessage, InboxTarget)> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::InboxAccepted(accepted)
                if matches!(
                    accepted.message.source,
                    MessageSource::SubagentSettled { .. }
                ) =>
            {
                Some((accepted.message.clone(), accepted.target))
            }
            _ => None,
        })
        .collect()
}

fn count_kind(events: &[SessionEvent], kind: &str) -> usize {
    events.iter().filter(|e| e.payload.kind() == kind).count()
}

/// A host tool that echoes its `text`.
struct Host(&'static str);

#[async_trait]
impl Tool for Host {
    fn name(&self) -> &str {
        self.0
    }

    fn description(&self) -> String {
        format!("Host tool {}.", self.0)
    }

    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}})
    }

    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!(
            "{}: {}",
            self.0,
            input["text"].as_str().unwrap_or_default()
        )))
    }
}

/// Nothing of a start that failed before publication is left: no log but
/// the ones listed, no catalog entry, no registry entry beyond `live`
/// agents, no runtime task, no activation.
async fn assert_nothing_left<S: SessionStore + ?Sized>(
    world: &World<S>,
    parent: &Arc<dyn Agent>,
    logs: &[SessionId],
    live: usize,
) {
    assert_eq!(world.sessions().await, logs, "no child log is left");
    assert!(catalog(parent).is_empty(), "no catalog entry is left");
    let stored = world.store.load(parent.id()).await.unwrap();
    assert!(
        fold_catalog(&stored.header, &stored.events)
            .unwrap()
            .is_empty()
    );
    assert_eq!(world.runtime.registry().len(), live, "no child is live");
    assert!(world.runtime.tasks().is_empty(), "no runtime task is left");
    assert!(world.harness.tasks().is_empty(), "no agent driver is left");
    assert_eq!(world.runtime.live_activations(), 0);
}

// ---------------------------------------------------------------------------
// B8, B25: publication and the catalog
// ---------------------------------------------------------------------------

// B8, B25
#[tokio::test]
async fn b8_b25_start_returns_after_the_prompt_is_accepted_and_the_child_is_cataloged() {
    let gate = Arc::new(Semaphore::new(0));
    let model = models::holding(&gate);
    let world = world(&model).await;
    let parent = world.lead();

    let mut request = spec(&parent, "hold: inspect the parser");
    request.label = "parser review".into();
    let activation = world.start(request).await;
    let child_id = activation.child_id().clone();

    // Live in the registry, created by this parent.
    let child = world.live(&child_id);
    assert_eq!(child.header().parent_session.as_ref(), Some(parent.id()));
    // Its durable log opens with the activation's record (its delivery,
    // B54), then the accepted prompt, whose id is returned.
    assert!(world.store.exists(&child_id).await.unwrap());
    let log = world.store.load(&child_id).await.unwrap();
    assert!(
        matches!(&log.events[0].payload, EventPayload::Extension { kind, .. } if kind == "subagent/activation"),
        "the child's first event is {:?}",
        log.events[0].payload
    );
    let EventPayload::InboxAccepted(accepted) = &log.events[1].payload else {
        panic!("the child's second event is {:?}", log.events[1].payload);
    };
    assert_eq!(
        accepted.message.content,
        [ContentBlock::text("hold: inspect the parser")]
    );
    assert!(accepted.wake, "the prompt wakes the child");
    assert_eq!(activation.message_id(), Some(&accepted.message.id));
    assert_eq!(activation.name(), "agent-1");

    // The parent's log holds the catalog entry: identity, name, label,
    // provider and mode, and nothing about execution.
    let expected = CatalogEntry {
        child_id: child_id.clone(),
        name: Some("agent-1".into()),
        label: "parser review".into(),
        provider: "spawn".into(),
        mode: ChildMode::CONTINUABLE,
    };
    assert_eq!(catalog(&parent).entries(), std::slice::from_ref(&expected));
    let stored = world.store.load(parent.id()).await.unwrap();
    assert_eq!(
        fold_catalog(&stored.header, &stored.events)
            .unwrap()
            .entries(),
        std::slice::from_ref(&expected),
        "the catalog is durable"
    );
    let raw = stored
        .events
        .iter()
        .find_map(|e| match &e.payload {
            EventPayload::Extension { kind, payload } if kind == "subagent/child" => {
                Some(payload.to_value())
            }
            _ => None,
        })
        .unwrap();
    let keys: BTreeSet<&str> = raw
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["child_id", "label", "mode", "name", "provider"])
    );

    gate.add_permits(1);
    let result = result_of(&activation).await;
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(output(&result), "re: hold: inspect the parser");
    // Settled: the entry stays, unchanged.
    assert_eq!(catalog(&parent).entries(), [expected]);
}

// ---------------------------------------------------------------------------
// B7: the caller's token
// ---------------------------------------------------------------------------

// B7
#[tokio::test]
async fn b7_the_callers_token_no_longer_reaches_a_published_child() {
    let gate = Arc::new(Semaphore::new(0));
    let model = models::holding(&gate);
    let world = world(&model).await;
    let parent = world.lead();

    let cancel = CancellationToken::new();
    let mut request = spec(&parent, "hold: keep going");
    request.cancel = cancel.clone();
    let activation = world.start(request).await;
    until(|| requests_of(&model, "hold: keep going").len() == 1).await;

    // Cancelled while the child waits on its model: if the token reached the
    // child, the gated response would see it first and the turn would abort.
    cancel.cancel();
    gate.add_permits(1);
    let result = result_of(&activation).await;
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(output(&result), "re: hold: keep going");
}

// ---------------------------------------------------------------------------
// B9: nothing is left behind before publication
// ---------------------------------------------------------------------------

// B9, B17
#[tokio::test]
async fn b9_a_start_cancelled_before_the_call_leaves_nothing_behind() {
    let model = models::echo();
    let world = builder(&model)
        .config(RuntimeConfig {
            max_live_children_per_tree: 1,
        })
        .build()
        .await;
    let parent = world.lead();
    let (_sub, mut events) = world.runtime.events().subscribe();

    let cancel = CancellationToken::new();
    cancel.cancel();
    let mut request = named(spec(&parent, "never runs"), "scout");
    request.cancel = cancel;
    let err = world.runtime.start_activation(request).await.unwrap_err();
    assert_eq!(err.code(), "CANCELLED");

    assert_nothing_left(&world, &parent, &[parent.id().clone()], 1).await;
    assert!(events.try_recv().is_err(), "no lifecycle event");
    assert!(model.requests().is_empty());

    // The name and the tree's only capacity slot are free again.
    let activation = world.start(named(spec(&parent, "runs"), "scout")).await;
    assert_eq!(activation.name(), "scout");
    assert_eq!(
        result_of(&activation).await.stop_reason,
        StopReason::COMPLETED
    );
}

// B9
#[tokio::test]
async fn b9_a_start_cancelled_during_setup_leaves_no_log_name_or_task() {
    let model = models::echo();
    let world = builder(&model)
        .wrap(|inner| Arc::new(GatedStore::new(SharedStore(inner))))
        .build()
        .await;
    let parent = world.lead();
    let (_sub, mut events) = world.runtime.events().subscribe();

    // The next create writes the log, then stalls until released.
    let stalled = world.store.gate(Op::Create, When::After);
    let cancel = CancellationToken::new();
    let mut request = named(spec(&parent, "never runs"), "scout");
    request.cancel = cancel.clone();
    let runtime = world.runtime.clone();
    let start = tokio::spawn(async move { runtime.start_activation(request).await });

    bounded(stalled.reached()).await;
    assert_eq!(
        world.sessions().await.len(),
        2,
        "the child's log exists now"
    );
    cancel.cancel();
    // The create is not abandoned mid-way (the factory owns its rollback):
    // once the store returns, the factory sees the token and undoes it.
    stalled.release();
    let err = bounded(start).await.unwrap().unwrap_err();
    assert_eq!(err.code(), "CANCELLED");

    assert_nothing_left(&world, &parent, &[parent.id().clone()], 1).await;
    assert!(events.try_recv().is_err(), "no lifecycle event");
    assert!(model.requests().is_empty());
    let activation = world.start(named(spec(&parent, "runs"), "scout")).await;
    assert_eq!(activation.name(), "scout", "the name was released");
    assert_eq!(
        result_of(&activation).await.stop_reason,
        StopReason::COMPLETED
    );
}

// ---------------------------------------------------------------------------
// B10: lifecycle events
// ---------------------------------------------------------------------------

// B10
#[tokio::test]
async fn b10_start_and_end_carry_one_identity_and_the_settled_outcome() {
    let model = models::echo();
    let world = world(&model).await;
    let parent = world.lead();

    let registry = world.runtime.registry().clone();
    let live_at_start = Arc::new(Mutex::new(Vec::new()));
    let _panicking = world
        .runtime
        .events()
        .listen(|_| panic!("a listener that panics"));
    let _probe = world.runtime.events().listen({
        let live_at_start = live_at_start.clone();
        move |event| {
            if let SubagentEvent::Start(info) = event {
                let live = registry.get(&info.child_id).is_some();
                live_at_start.lock().unwrap().push(live);
            }
        }
    });
    let (_sub, mut seen) = world.runtime.events().subscribe();

    // A foreground (caller-delivered) activation: launch() announces it
    // as it does a background one (the ACP suite's foreground.rs checks
    // the same for an external child).
    let foreground = spec(&parent, "do it");
    assert_eq!(foreground.delivery, Delivery::Caller);
    let activation = world.start(foreground).await;
    let result = result_of(&activation).await;
    assert_eq!(result.stop_reason, StopReason::COMPLETED);

    let first = bounded(seen.recv()).await.unwrap();
    let second = bounded(seen.recv()).await.unwrap();
    let expected = RunInfo {
        provider: "spawn".into(),
        name: "agent-1".into(),
        label: "do it".into(),
        child_id: activation.child_id().clone(),
        parent_session_id: parent.id().clone(),
        root: parent.id().clone(),
        local: true,
    };
    assert_eq!(first, SubagentEvent::Start(expected.clone()));
    assert_eq!(
        second,
        SubagentEvent::End(expected, RunOutcome::Settled(result))
    );
    assert_eq!(first.name(), "subagent/start");
    assert_eq!(second.name(), "subagent/end");
    bounded(world.runtime.shutdown()).await;
    assert!(seen.try_recv().is_err(), "exactly one end per start");
    assert_eq!(
        *live_at_start.lock().unwrap(),
        [true],
        "the child is resolvable during subagent/start"
    );
}

// ---------------------------------------------------------------------------
// B12, B13: results
// ---------------------------------------------------------------------------

// B12
#[tokio::test]
async fn b12_a_child_failure_is_a_stop_reason_never_an_err() {
    let model = Arc::new(
        ScriptedModel::new().responder(|r| match first_user_text(r).as_str() {
            "fail" => Scripted::Fail(ModelError::new(ModelErrorKind::Api, "upstream overloaded")),
            "run out" => Scripted::MaxTokens("partial answer".into()),
            "refuse" => Scripted::Refusal("I will not".into()),
            _ => Scripted::Text("fine".into()),
        }),
    );
    let world = world(&model).await;
    let parent = world.lead();

    let failed = result_of(&world.start(spec(&parent, "fail")).await).await;
    assert_eq!(failed.stop_reason, StopReason::ERROR);
    let diagnostic = failed.diagnostic.expect("an error carries a diagnostic");
    assert!(
        diagnostic.contains("upstream overloaded"),
        "diagnostic: {diagnostic}"
    );
    assert!(failed.output.is_empty());
    assert!(failed.structured.is_none());

    let cut = result_of(&world.start(spec(&parent, "run out")).await).await;
    assert_eq!(cut.stop_reason, StopReason::MAX_TOKENS);
    assert_eq!(output(&cut), "partial answer", "partial output is kept");

    let refused = result_of(&world.start(spec(&parent, "refuse")).await).await;
    assert_eq!(refused.stop_reason, StopReason::REFUSAL);
    assert_eq!(output(&refused), "I will not");

    let fine = result_of(&world.start(spec(&parent, "other")).await).await;
    assert_eq!(fine.stop_reason, StopReason::COMPLETED);
    assert_eq!(fine.diagnostic, None);
}

// B13
#[tokio::test]
async fn b13_output_is_the_last_non_empty_assistant_message() {
    let model = Arc::new(ScriptedModel::new().responder(|r| match tool_results(r) {
        0 => Scripted::ToolCalls {
            text: Some("first words".into()),
            calls: vec![("alpha".into(), json!({"text": "a"}))],
        },
        1 => Scripted::ToolCalls {
            text: Some("second words".into()),
            calls: vec![("alpha".into(), json!({"text": "b"}))],
        },
        // The last step says nothing: only usage is recorded.
        _ => Scripted::Text(String::new()),
    }));
    let world = builder(&model).tool(Arc::new(Host("alpha"))).build().await;
    let parent = world.lead();
    let activation = world.start(spec(&parent, "work in steps")).await;
    let result = result_of(&activation).await;
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(result.output, [ContentBlock::text("second words")]);
    let log = world.store.load(activation.child_id()).await.unwrap();
    assert_eq!(count_kind(&log.events, "assistant/message"), 2);
    assert_eq!(count_kind(&log.events, "usage"), 3);
}

// ---------------------------------------------------------------------------
// B15: settlement, teardown, dispose
// ---------------------------------------------------------------------------

// B15, B28
#[tokio::test]
async fn b15_the_notice_and_teardown_come_before_the_result() {
    let model = models::echo();
    let world = world(&model).await;
    let parent = world.lead();

    let activation = world.start(to_parent(spec(&parent, "report back"))).await;
    let child_id = activation.child_id().clone();
    let result = result_of(&activation).await;
    // Right when the result resolves: the notice is already in the parent's
    // log, and the child is already torn down.
    let parent_events = parent.events();
    let accepted = notices(&parent_events);
    assert_eq!(
        accepted.len(),
        1,
        "the notice was accepted before the result"
    );
    assert_eq!(accepted[0].0.source.sender(), Some(&child_id));
    assert!(
        world.runtime.registry().get(&child_id).is_none(),
        "the child was disposed before the result"
    );
    assert_eq!(world.runtime.live_activations(), 0);
    drop(
        world
            .store
            .open(&child_id)
            .await
            .expect("teardown released the child's log"),
    );

    // The notice reports what the child's finished log says.
    let log = world.store.load(&child_id).await.unwrap();
    assert!(
        log.events.last().unwrap().is_turn_end(),
        "the child's log ends with its turn"
    );
    assert_eq!(stop_reasons(&log.events), ["completed"]);
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert!(text_of(&accepted[0].0.content).contains("re: report back"));

    // Dispose after settling, twice, from two holders: fine.
    let other = activation.clone();
    bounded(activation.dispose()).await.unwrap();
    bounded(other.dispose()).await.unwrap();
    assert_eq!(result_of(&other).await, result);
    bounded(parent.wait_idle()).await;
}

// B15
#[tokio::test]
async fn b15_disposing_a_running_child_settles_aborted_and_stops_only_that_activation() {
    let gate = Arc::new(Semaphore::new(0));
    let model = hanging_model(&gate);
    let world = world(&model).await;
    let parent = world.lead();

    let hanging = world.start(spec(&parent, "hang")).await;
    let sibling = world.start(spec(&parent, "sibling")).await;
    until(|| model.requests().len() == 2).await;
    let child_id = hanging.child_id().clone();
    let (_sub, mut seen) = world.runtime.events().subscribe();

    let again = hanging.clone();
    let (first, second) = tokio::join!(hanging.dispose(), again.dispose());
    first.unwrap();
    second.unwrap();
    let result = result_of(&hanging).await;
    assert_eq!(result.stop_reason, StopReason::ABORTED);
    assert!(world.runtime.registry().get(&child_id).is_none());
    let log = world.store.load(&child_id).await.unwrap();
    assert_eq!(stop_reasons(&log.events), ["aborted"]);
    bounded(hanging.dispose()).await.unwrap();
    let end = bounded(seen.recv()).await.unwrap();
    assert_eq!(
        end,
        SubagentEvent::End(
            RunInfo {
                provider: "spawn".into(),
                name: "agent-1".into(),
                label: "hang".into(),
                child_id,
                parent_session_id: parent.id().clone(),
                root: parent.id().clone(),
                local: true,
            },
            RunOutcome::Settled(result)
        )
    );

    // The sibling was untouched.
    assert!(world.runtime.registry().get(sibling.child_id()).is_some());
    gate.add_permits(1);
    let result = result_of(&sibling).await;
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(output(&result), "re: sibling");
}

// B15
#[tokio::test(start_paused = true)]
async fn b15_an_activation_settles_only_after_the_children_it_owns() {
    let middle_gate = Arc::new(Semaphore::new(0));
    let leaf_gate = Arc::new(Semaphore::new(0));
    let model = {
        let (middle_gate, leaf_gate) = (middle_gate.clone(), leaf_gate.clone());
        Arc::new(
            ScriptedModel::new().responder(move |r| match first_user_text(r).as_str() {
                // The middle child's first turn waits; its notice turn answers.
                "middle" if !has_assistant(r) => gated(&middle_gate, echo(r)),
                "middle" => Scripted::Text("middle heard from its leaf".into()),
                "leaf" => gated(&leaf_gate, echo(r)),
                _ => echo(r),
            }),
        )
    };
    let world = world(&model).await;
    let parent = world.lead();

    let middle = world.start(spec(&parent, "middle")).await;
    let middle_agent = world.live(middle.child_id());
    let leaf = world.start(to_parent(spec(&middle_agent, "leaf"))).await;

    // The middle child finishes its turn while its leaf still runs.
    middle_gate.add_permits(1);
    until(|| stop_reasons(&middle_agent.events()) == ["completed"]).await;
    bounded(middle_agent.wait_idle()).await;
    settle().await;
    assert!(
        futures::FutureExt::now_or_never(middle.result()).is_none(),
        "the middle activation settled while it still owned a live child"
    );
    assert!(world.runtime.registry().get(middle.child_id()).is_some());

    // The leaf settles; its notice gives the middle child a turn; then the
    // middle activation settles, with the output of that last turn.
    leaf_gate.add_permits(1);
    assert_eq!(output(&result_of(&leaf).await), "re: leaf");
    let result = result_of(&middle).await;
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(output(&result), "middle heard from its leaf");
    assert!(world.runtime.registry().get(leaf.child_id()).is_none());
    assert!(world.runtime.registry().get(middle.child_id()).is_none());
}

// B15 (child-first release)
#[tokio::test]
async fn b15_disposing_a_child_releases_the_children_it_owns_first() {
    let gate = Arc::new(Semaphore::new(0));
    let model = hanging_model(&gate);
    let world = world(&model).await;
    let parent = world.lead();

    let middle = world.start(spec(&parent, "middle")).await;
    let middle_agent = world.live(middle.child_id());
    let leaf = world.start(spec(&middle_agent, "hang")).await;
    until(|| model.requests().len() == 2).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let _ends = world.runtime.events().listen({
        let order = order.clone();
        move |event| {
            if let SubagentEvent::End(info, _) = event {
                order.lock().unwrap().push(info.child_id.clone());
            }
        }
    });

    bounded(middle.dispose()).await.unwrap();
    assert_eq!(result_of(&middle).await.stop_reason, StopReason::ABORTED);
    assert!(
        world.runtime.registry().get(leaf.child_id()).is_none(),
        "the disposed child's own child is still live"
    );
    assert!(
        futures::FutureExt::now_or_never(leaf.result()).is_some(),
        "the owned child settled before its owner"
    );
    assert_eq!(
        *order.lock().unwrap(),
        [leaf.child_id().clone(), middle.child_id().clone()],
        "child-first release"
    );
}

// ---------------------------------------------------------------------------
// B16: one live activation per child
// ---------------------------------------------------------------------------

// B16
#[tokio::test]
async fn b16_a_child_has_at_most_one_live_activation() {
    let gate = Arc::new(Semaphore::new(0));
    let model = models::holding(&gate);
    let world = world(&model).await;
    let parent = world.lead();

    let mut first = spec(&parent, "hold: once");
    first.child_id = Some(sid("reserved-child"));
    let activation = world.start(first).await;
    assert_eq!(activation.child_id(), &sid("reserved-child"));
    let sessions = world.sessions().await;

    let mut second = named(spec(&parent, "hold: twice"), "second");
    second.child_id = Some(sid("reserved-child"));
    let err = world.runtime.start_activation(second).await.unwrap_err();
    assert!(
        ["DUPLICATE_RUN_ID", "ALREADY_LIVE"].contains(&err.code()),
        "unexpected error {err:?}"
    );
    assert_eq!(world.runtime.live_activations(), 1);
    assert_eq!(catalog(&parent).len(), 1, "no second catalog entry");
    assert_eq!(world.sessions().await, sessions);
    let log = world.store.load(&sid("reserved-child")).await.unwrap();
    assert_eq!(
        count_kind(&log.events, "inbox/accepted"),
        1,
        "no second prompt"
    );

    gate.add_permits(1);
    let result = result_of(&activation).await;
    assert_eq!(output(&result), "re: hold: once");
    // The refused start held its name only until it failed.
    let later = world.start(named(spec(&parent, "later"), "second")).await;
    assert_eq!(later.name(), "second");
    result_of(&later).await;
}

// ---------------------------------------------------------------------------
// B20: delegation depth
// ---------------------------------------------------------------------------

// B20
#[tokio::test]
async fn b20_depth_is_parent_plus_one_and_max_depth_refuses_before_the_child_exists() {
    let gate = Arc::new(Semaphore::new(0));
    let model = models::holding(&gate);
    let world = world(&model).await;
    let parent = world.lead();
    assert_eq!(parent.header().delegation_depth, 0);

    // Refused at the root: the child would be at depth 1.
    let mut refused = named(spec(&parent, "too deep"), "deep");
    refused.request.max_depth = Some(0);
    let err = world.runtime.start_activation(refused).await.unwrap_err();
    assert_eq!(err.code(), "DEPTH_LIMIT");
    assert_nothing_left(&world, &parent, &[parent.id().clone()], 1).await;

    let mut allowed = spec(&parent, "hold: middle");
    allowed.request.max_depth = Some(1);
    let child = world.start(allowed).await;
    let child_agent = world.live(child.child_id());
    assert_eq!(child_agent.header().delegation_depth, 1);
    let stored = world.store.header(child.child_id()).await.unwrap();
    assert_eq!(stored.delegation_depth, 1, "the depth is persisted");

    // A grandchild, while the child is live (held on its model).
    let grandchild = world.start(spec(&child_agent, "leaf")).await;
    let stored = world.store.header(grandchild.child_id()).await.unwrap();
    assert_eq!(stored.delegation_depth, 2);
    assert_eq!(stored.parent_session.as_ref(), Some(child.child_id()));
    assert_eq!(output(&result_of(&grandchild).await), "re: leaf");

    // Refused below the child: a grandchild would be at depth 2.
    let sessions = world.sessions().await;
    let mut refused = spec(&child_agent, "leaf too deep");
    refused.request.max_depth = Some(1);
    let err = world.runtime.start_activation(refused).await.unwrap_err();
    assert_eq!(err.code(), "DEPTH_LIMIT");
    assert_eq!(world.sessions().await, sessions, "no log was created");
    assert_eq!(catalog(&child_agent).len(), 1, "only the first grandchild");
    assert!(requests_of(&model, "leaf too deep").is_empty());

    gate.add_permits(1);
    assert_eq!(result_of(&child).await.stop_reason, StopReason::COMPLETED);
}

// ---------------------------------------------------------------------------
// B21: agent options
// ---------------------------------------------------------------------------

// B21
#[tokio::test]
async fn b21_agent_options_merge_over_the_parents_and_the_request_wins() {
    let default_route = models::echo();
    let main_route = models::echo();
    let routes = ModelRoutes::new()
        .route("default", default_route.clone())
        .route("main", main_route.clone());
    let parent_options = AgentOptions {
        provider: Some("main".into()),
        model: Some("parent-model".into()),
        reasoning_effort: Some("low".into()),
        max_output_tokens: Some(1000),
        ..AgentOptions::default()
    };
    let world = builder(&default_route)
        .harness(|b| b.models(routes))
        .root_header({
            let options = parent_options.clone();
            move |h| h.composition.options = options
        })
        .build()
        .await;
    let parent = world.lead();

    // Override the model and the token cap; the route and effort are the parent's.
    let mut request = spec(&parent, "use the child model");
    request.request.agent_options = Some(AgentOptions {
        model: Some("child-model".into()),
        max_output_tokens: Some(256),
        ..AgentOptions::default()
    });
    let child = world.start(request).await;
    assert_eq!(result_of(&child).await.stop_reason, StopReason::COMPLETED);
    let header = world.store.header(child.child_id()).await.unwrap();
    assert_eq!(
        header.composition.options,
        AgentOptions {
            provider: Some("main".into()),
            model: Some("child-model".into()),
            reasoning_effort: Some("low".into()),
            max_output_tokens: Some(256),
            ..AgentOptions::default()
        }
    );
    let asked = requests_of(&main_route, "use the child model");
    assert_eq!(asked.len(), 1, "the child uses the parent's route");
    assert_eq!(asked[0].model.as_deref(), Some("child-model"));
    assert_eq!(asked[0].reasoning_effort.as_deref(), Some("low"));
    assert_eq!(asked[0].max_output_tokens, Some(256));
    assert!(default_route.requests().is_empty());

    // Override the route: the model id is still the parent's.
    let mut request = spec(&parent, "use the default route");
    request.request.agent_options = Some(AgentOptions {
        provider: Some("default".into()),
        ..AgentOptions::default()
    });
    let child = world.start(request).await;
    result_of(&child).await;
    let asked = requests_of(&default_route, "use the default route");
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].model.as_deref(), Some("parent-model"));
    assert_eq!(asked[0].max_output_tokens, Some(1000));

    // No override: the parent's composition.
    let child = world.start(spec(&parent, "inherit")).await;
    result_of(&child).await;
    let header = world.store.header(child.child_id()).await.unwrap();
    assert_eq!(header.composition.options, parent_options);
    assert_eq!(parent.header().composition.options, parent_options);
}

// ---------------------------------------------------------------------------
// B22: tool filter and persona
// ---------------------------------------------------------------------------

async fn two_tool_world(model: &Arc<ScriptedModel>) -> World<dyn SessionStore> {
    builder(model)
        .harness(|b| {
            b.prompt(
                SystemPrompt::new()
                    .section("base", "You work in dsh.")
                    .persona("Default persona."),
            )
        })
        .tool(Arc::new(Host("alpha")))
        .tool(Arc::new(Host("beta")))
        .build()
        .await
}

// B22
#[tokio::test]
async fn b22_tool_filter_and_persona_apply_to_the_child_only() {
    let model = models::echo();
    let world = two_tool_world(&model).await;
    let parent = world.lead();

    let mut request = spec(&parent, "restricted");
    request.request.tool_filter = Some(ToolRestriction::allow(["alpha"]));
    request.request.persona = Some("You review parsers.".into());
    let child = world.start(request).await;
    assert_eq!(result_of(&child).await.stop_reason, StopReason::COMPLETED);
    let header = world.store.header(child.child_id()).await.unwrap();
    assert_eq!(
        header.composition.tools,
        Some(ToolRestriction::allow(["alpha"]))
    );
    assert_eq!(
        header.composition.persona.as_deref(),
        Some("You review parsers.")
    );
    let asked = requests_of(&model, "restricted");
    assert_eq!(tool_names(&asked[0]), BTreeSet::from(["alpha".to_owned()]));
    assert!(asked[0].system.contains("You review parsers."));
    assert!(!asked[0].system.contains("Default persona."));

    // The parent's next request still sees both tools and its own persona.
    parent
        .followup(UserMessage::user_text("parent turn"))
        .await
        .unwrap();
    bounded(parent.wait_idle()).await;
    let asked = requests_of(&model, "parent turn");
    assert_eq!(asked.len(), 1);
    assert_eq!(
        tool_names(&asked[0]),
        BTreeSet::from(["alpha".to_owned(), "beta".to_owned()])
    );
    assert!(asked[0].system.contains("Default persona."));
    assert!(!asked[0].system.contains("You review parsers."));
    assert_eq!(parent.header().composition.tools, None);
}

// B22, B9
#[tokio::test]
async fn b22_an_unknown_tool_or_a_bad_persona_fails_the_start_and_leaves_no_child() {
    let model = models::echo();
    let world = two_tool_world(&model).await;
    let parent = world.lead();
    let (_sub, mut events) = world.runtime.events().subscribe();

    let mut request = named(spec(&parent, "unknown tool"), "scout");
    request.request.tool_filter = Some(ToolRestriction::allow(["alpha", "gamma"]));
    let err = world.runtime.start_activation(request).await.unwrap_err();
    assert!(err.to_string().contains("gamma"), "{err}");
    assert_nothing_left(&world, &parent, &[parent.id().clone()], 1).await;

    let mut request = named(spec(&parent, "bad persona"), "scout");
    request.request.persona = Some("You are {{nobody}}.".into());
    let err = world.runtime.start_activation(request).await.unwrap_err();
    assert!(err.to_string().contains("nobody"), "{err}");
    assert_nothing_left(&world, &parent, &[parent.id().clone()], 1).await;

    assert!(events.try_recv().is_err(), "no lifecycle event");
    assert!(model.requests().is_empty());
    let child = world.start(named(spec(&parent, "fine"), "scout")).await;
    assert_eq!(child.name(), "scout", "the failed starts released the name");
    result_of(&child).await;
}

// ---------------------------------------------------------------------------
// B23: structured output
// ---------------------------------------------------------------------------

fn answer_schema() -> ObjectSchema {
    ObjectSchema::new(json!({
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
        "additionalProperties": false
    }))
    .unwrap()
}

// B23
#[tokio::test]
async fn b23_the_capture_tool_retries_invalid_arguments_and_returns_the_value() {
    let model = Arc::new(ScriptedModel::new().responder(|r| {
        if first_user_text(r) != "structured" {
            return echo(r);
        }
        match tool_results(r) {
            0 => Scripted::ToolCalls {
                text: Some("Submitting.".into()),
                calls: vec![("submit_result".into(), json!({"answer": "forty-two"}))],
            },
            1 => Scripted::ToolCalls {
                text: None,
                calls: vec![("submit_result".into(), json!({"answer": 42}))],
            },
            _ => Scripted::Text("the turn should have ended".into()),
        }
    }));
    let world = two_tool_world(&model).await;
    let parent = world.lead();

    let mut request = spec(&parent, "structured");
    request.request.output_schema = Some(answer_schema());
    request.request.tool_filter = Some(ToolRestriction::allow(["alpha"]));
    let child = world.start(request).await;
    let result = result_of(&child).await;
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(result.structured, Some(json!({"answer": 42})));
    assert_eq!(result.diagnostic, None);

    let asked = requests_of(&model, "structured");
    assert_eq!(asked.len(), 2, "a valid capture ends the turn");
    // The capture tool is there whatever the tool filter says, bound to the schema.
    assert_eq!(
        tool_names(&asked[0]),
        BTreeSet::from(["alpha".to_owned(), "submit_result".to_owned()])
    );
    let capture = asked[0]
        .tools
        .iter()
        .find(|t| t.name == "submit_result")
        .unwrap();
    assert_eq!(&capture.input_schema, answer_schema().as_value());
    // The invalid call came back as an error the model could fix.
    assert!(
        asked[1]
            .messages
            .iter()
            .any(|m| matches!(m, Message::Tool { is_error: true, .. })),
        "the invalid capture is an error result"
    );
    // The parent never gets the capture tool.
    parent
        .followup(UserMessage::user_text("parent turn"))
        .await
        .unwrap();
    bounded(parent.wait_idle()).await;
    assert!(!tool_names(&requests_of(&model, "parent turn")[0]).contains("submit_result"));
}

// B23
#[tokio::test]
async fn b23_finishing_without_a_capture_is_an_error() {
    let model = models::echo();
    let world = world(&model).await;
    let parent = world.lead();

    let mut request = spec(&parent, "forgets to submit");
    request.request.output_schema = Some(answer_schema());
    let result = result_of(&world.start(request).await).await;
    assert_eq!(result.stop_reason, StopReason::ERROR);
    assert_eq!(result.structured, None);
    let diagnostic = result.diagnostic.clone().unwrap();
    assert!(
        diagnostic.contains("submit_result"),
        "diagnostic: {diagnostic}"
    );
    assert_eq!(output(&result), "re: forgets to submit", "the text is kept");
}

// ---------------------------------------------------------------------------
// B24: working directory and origin
// ---------------------------------------------------------------------------

// B24
#[tokio::test]
async fn b24_cwd_resolves_against_the_parents_and_the_origin_is_kept() {
    let gate = Arc::new(Semaphore::new(0));
    let model = models::holding(&gate);
    let world = world(&model).await;
    let project = world.project();
    std::fs::create_dir_all(project.join("sub/inner")).unwrap();
    let parent = world.lead();
    assert_eq!(parent.header().origin, None);
    let origin = Some(project.display().to_string());

    // Omitted: the parent's directory.
    let child = world.start(spec(&parent, "here")).await;
    let header = world.store.header(child.child_id()).await.unwrap();
    assert_eq!(header.cwd, project);
    assert_eq!(
        header.origin, origin,
        "the parent's cwd when it has no origin"
    );
    result_of(&child).await;

    // Relative: against the parent's.
    let mut request = spec(&parent, "hold: below");
    request.request.cwd = Some(PathBuf::from("sub"));
    let child = world.start(request).await;
    let child_agent = world.live(child.child_id());
    assert_eq!(child_agent.cwd(), project.join("sub"));
    assert_eq!(child_agent.header().origin, origin);

    // A grandchild resolves against the child's directory, keeps the origin.
    let mut request = spec(&child_agent, "deeper");
    request.request.cwd = Some(PathBuf::from("inner"));
    let grandchild = world.start(request).await;
    let header = world.store.header(grandchild.child_id()).await.unwrap();
    assert_eq!(header.cwd, project.join("sub/inner"));
    assert_eq!(header.origin, origin);
    result_of(&grandchild).await;

    // Absolute: as given.
    let mut request = spec(&parent, "absolute");
    request.request.cwd = Some(project.join("sub/inner"));
    let absolute = world.start(request).await;
    let header = world.store.header(absolute.child_id()).await.unwrap();
    assert_eq!(header.cwd, project.join("sub/inner"));
    result_of(&absolute).await;

    gate.add_permits(1);
    result_of(&child).await;
}

// B24, B9
#[tokio::test]
async fn b24_a_missing_directory_is_an_invalid_request_and_leaves_nothing() {
    let model = models::echo();
    let world = world(&model).await;
    let parent = world.lead();
    std::fs::write(world.project().join("file.txt"), "not a directory").unwrap();

    for bad in [
        PathBuf::from("missing"),
        PathBuf::from("file.txt"),
        world.project().join("missing/too"),
    ] {
        let mut request = named(spec(&parent, "nowhere"), "scout");
        request.request.cwd = Some(bad.clone());
        let err = world.runtime.start_activation(request).await.unwrap_err();
        assert_eq!(err.code(), "INVALID_REQUEST", "{}", bad.display());
        assert_nothing_left(&world, &parent, &[parent.id().clone()], 1).await;
    }
    assert!(model.requests().is_empty());
}

// B24
#[tokio::test]
async fn b24_the_child_keeps_the_parents_origin_project() {
    let model = models::echo();
    let world = builder(&model)
        .root_header(|h| h.origin = Some("git@example.com:acme/app".into()))
        .build()
        .await;
    let sub = world.project().join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let parent = world.lead();

    let mut request = spec(&parent, "elsewhere");
    request.request.cwd = Some(sub.clone());
    let child = world.start(request).await;
    let header = world.store.header(child.child_id()).await.unwrap();
    assert_eq!(header.origin.as_deref(), Some("git@example.com:acme/app"));
    assert_eq!(header.cwd, sub);
    result_of(&child).await;
}

// ---------------------------------------------------------------------------
// B26, B27: names
// ---------------------------------------------------------------------------

// B26, B27
#[tokio::test]
async fn b26_b27_names_default_are_unique_and_form_paths_from_the_root() {
    let gate = Arc::new(Semaphore::new(0));
    let model = models::holding(&gate);
    let world = world(&model).await;
    let parent = world.lead();

    let first = world.start(spec(&parent, "one")).await;
    let second = world.start(spec(&parent, "two")).await;
    assert_eq!(first.name(), "agent-1");
    assert_eq!(second.name(), "agent-2");
    result_of(&first).await;
    result_of(&second).await;

    // A requested name; a default skips what the catalog holds.
    let reviewer = world
        .start(named(spec(&parent, "hold: review"), "reviewer"))
        .await;
    assert_eq!(reviewer.name(), "reviewer");
    let taken = world.start(named(spec(&parent, "three"), "agent-3")).await;
    let fourth = world.start(spec(&parent, "four")).await;
    assert_eq!(fourth.name(), "agent-4");
    result_of(&taken).await;
    result_of(&fourth).await;

    // Taken (even by a settled sibling), invalid, or the root's name.
    for (name, code) in [
        ("agent-1", "NAME_TAKEN"),
        ("reviewer", "NAME_TAKEN"),
        ("lead", "INVALID_NAME"),
        ("Bad_Name", "INVALID_NAME"),
        ("9lives", "INVALID_NAME"),
    ] {
        let err = world
            .runtime
            .start_activation(named(spec(&parent, "refused"), name))
            .await
            .unwrap_err();
        assert_eq!(err.code(), code, "{name}");
    }
    assert!(requests_of(&model, "refused").is_empty());

    // Names are per parent; the full name is the path from the root.
    let reviewer_agent = world.live(reviewer.child_id());
    let checker = world
        .start(named(spec(&reviewer_agent, "hold: check"), "checker"))
        .await;
    assert_eq!(checker.name(), "reviewer/checker");
    let unnamed = world.start(spec(&reviewer_agent, "hold: anon")).await;
    assert_eq!(unnamed.name(), "reviewer/agent-1");

    assert_eq!(
        world.runtime.names_of(&parent).unwrap(),
        MemberNames {
            self_name: "lead".into(),
            parent: None
        }
    );
    assert_eq!(
        world.runtime.names_of(&reviewer_agent).unwrap(),
        MemberNames {
            self_name: "reviewer".into(),
            parent: Some("lead".into())
        }
    );
    assert_eq!(
        world
            .runtime
            .names_of(&world.runtime.registry().get(checker.child_id()).unwrap())
            .unwrap(),
        MemberNames {
            self_name: "reviewer/checker".into(),
            parent: Some("reviewer".into())
        }
    );

    let names: Vec<Option<String>> = catalog(&parent)
        .entries()
        .iter()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(
        names,
        ["agent-1", "agent-2", "reviewer", "agent-3", "agent-4"].map(|n| Some(n.to_owned()))
    );

    gate.add_permits(3);
    for activation in [&checker, &unnamed, &reviewer] {
        assert_eq!(
            result_of(activation).await.stop_reason,
            StopReason::COMPLETED
        );
    }
}

// ---------------------------------------------------------------------------
// B28: settlement notices
// ---------------------------------------------------------------------------

/// The notice messages (as a model sees them) of a request.
fn notice_messages(request: &ModelRequest) -> Vec<Message> {
    request
        .messages
        .iter()
        .filter(|m| {
            matches!(
                m,
                Message::User {
                    source: MessageSource::SubagentSettled { .. },
                    ..
                }
            )
        })
        .cloned()
        .collect()
}

// B28
#[tokio::test]
async fn b28_an_idle_parent_gets_a_turn_with_the_runtimes_notice() {
    let model = Arc::new(
        ScriptedModel::new().responder(|r| match first_user_text(r).as_str() {
            "broken" => Scripted::Fail(ModelError::new(
                ModelErrorKind::Transport,
                "connection reset",
            )),
            _ => echo(r),
        }),
    );
    let world = world(&model).await;
    let parent = world.lead();

    let mut request = named(to_parent(spec(&parent, "summarize")), "scout");
    request.child_id = Some(sid("scout-session"));
    let scout = world.start(request).await;
    assert_eq!(result_of(&scout).await.stop_reason, StopReason::COMPLETED);
    bounded(parent.wait_idle()).await;

    let asked: Vec<ModelRequest> = model
        .requests()
        .into_iter()
        .filter(|r| !notice_messages(r).is_empty())
        .collect();
    assert_eq!(
        asked.len(),
        1,
        "the idle parent ran one turn for the notice"
    );
    let notice = &notice_messages(&asked[0])[0];
    let Message::User { source, content } = notice else {
        unreachable!()
    };
    assert_eq!(source.kind(), "subagent-settled");
    assert_eq!(
        *source,
        MessageSource::SubagentSettled {
            summary: "scout completed".into(),
            stop_reason: Some(StopReason::COMPLETED),
            sender_session_id: sid("scout-session"),
        },
        "attributed to the runtime, naming the child"
    );
    assert!(text_of(content).contains("re: summarize"));
    insta::assert_json_snapshot!("notice_completed", notice);
    let events = parent.events();
    assert_eq!(stop_reasons(&events), ["completed"]);
    assert_eq!(notices(&events)[0].1, InboxTarget::NextTurn);

    // A failed child's notice carries the stop reason and the diagnostic.
    let mut request = named(to_parent(spec(&parent, "broken")), "fixer");
    request.child_id = Some(sid("fixer-session"));
    let fixer = world.start(request).await;
    let result = result_of(&fixer).await;
    assert_eq!(result.stop_reason, StopReason::ERROR);
    bounded(parent.wait_idle()).await;
    let last = model.requests().last().cloned().unwrap();
    let notice = notice_messages(&last).pop().unwrap();
    let Message::User { source, content } = &notice else {
        unreachable!()
    };
    assert_eq!(
        *source,
        MessageSource::SubagentSettled {
            summary: "fixer failed".into(),
            stop_reason: Some(StopReason::ERROR),
            sender_session_id: sid("fixer-session"),
        }
    );
    assert!(text_of(content).contains(result.diagnostic.as_deref().unwrap()));
    insta::assert_json_snapshot!("notice_error", notice);
}

// B28, B9
#[tokio::test]
async fn b28_a_creator_that_is_no_longer_live_gets_no_notice() {
    let gate = Arc::new(Semaphore::new(0));
    let model = models::holding(&gate);
    let world = world(&model).await;
    let handle = world.root.clone();
    let parent = handle.agent().clone();

    let child = world.start(to_parent(spec(&parent, "hold: outlive"))).await;
    // The creator goes away, and comes back under a new epoch.
    bounded(handle.dispose()).await;
    let err = world
        .runtime
        .start_activation(spec(&parent, "from a stale parent"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "NOT_LIVE");
    let resumed = world.resume(LEAD).await;
    assert_ne!(resumed.agent().epoch(), parent.epoch());

    gate.add_permits(1);
    let result = result_of(&child).await;
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert!(
        notices(&resumed.agent().events()).is_empty(),
        "a later epoch of the creator is not the creator"
    );
    let stored = world.store.load(&sid(LEAD)).await.unwrap();
    assert!(notices(&stored.events).is_empty());
    assert!(requests_of(&model, "from a stale parent").is_empty());
}

// B28
#[tokio::test]
async fn b28_caller_delivery_sends_no_notice() {
    let model = models::echo();
    let world = world(&model).await;
    let parent = world.lead();

    let activation = world.start(spec(&parent, "quiet")).await;
    assert_eq!(
        result_of(&activation).await.stop_reason,
        StopReason::COMPLETED
    );
    bounded(world.runtime.shutdown()).await;
    let events = parent.events();
    assert!(notices(&events).is_empty());
    assert_eq!(count_kind(&events, "inbox/accepted"), 0);
    assert_eq!(parent.status(), AgentStatus::Idle);
    assert_eq!(model.requests().len(), 1, "only the child asked its model");
}

// B28
#[tokio::test]
async fn b28_a_running_parent_gets_the_notices_together_at_its_next_step() {
    let gate = Arc::new(Semaphore::new(0));
    let model = {
        let gate = gate.clone();
        Arc::new(ScriptedModel::new().responder(move |r| {
            if first_user_text(r) != "parent work" {
                return echo(r);
            }
            if has_assistant(r) {
                Scripted::Text("noted".into())
            } else {
                gated(&gate, Scripted::Text("working".into()))
            }
        }))
    };
    let world = world(&model).await;
    let parent = world.lead();
    parent
        .followup(UserMessage::user_text("parent work"))
        .await
        .unwrap();
    until(|| requests_of(&model, "parent work").len() == 1).await;
    assert_eq!(parent.status(), AgentStatus::Running);

    let a = world.start(to_parent(spec(&parent, "child a"))).await;
    let b = world.start(to_parent(spec(&parent, "child b"))).await;
    result_of(&a).await;
    result_of(&b).await;
    let accepted = notices(&parent.events());
    assert_eq!(accepted.len(), 2);
    assert!(
        accepted
            .iter()
            .all(|(_, target)| *target == InboxTarget::NextStep),
        "a running parent is steered"
    );

    gate.add_permits(1);
    bounded(parent.wait_idle()).await;
    let asked = requests_of(&model, "parent work");
    assert_eq!(asked.len(), 2, "one more step, no second turn");
    let senders: HashSet<SessionId> = notice_messages(&asked[1])
        .iter()
        .filter_map(|m| match m {
            Message::User { source, .. } => source.sender().cloned(),
            _ => None,
        })
        .collect();
    assert_eq!(
        senders,
        HashSet::from([a.child_id().clone(), b.child_id().clone()])
    );
    let events = parent.events();
    assert_eq!(count_kind(&events, "turn/start"), 1);
    assert_eq!(stop_reasons(&events), ["completed"]);
    let notice_ids: HashSet<MessageId> = accepted.iter().map(|(m, _)| m.id.clone()).collect();
    let claimed_together = events.iter().any(|e| match &e.payload {
        EventPayload::InboxClaimed(ids) => {
            ids.message_ids.iter().cloned().collect::<HashSet<_>>() == notice_ids
        }
        _ => false,
    });
    assert!(claimed_together, "both notices join the same step");
}

// ---------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------

// B8, B26, B15
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_activations_from_one_parent_settle_with_their_own_outputs_and_unique_names() {
    let model = models::echo();
    let world = world(&model).await;
    let parent = world.lead();

    let starts = (1..=20).map(|i| {
        let runtime = world.runtime.clone();
        let request = spec(&parent, &format!("task {i}"));
        async move {
            let activation = runtime.start_activation(request).await.unwrap();
            let result = activation.result().await.unwrap();
            (i, activation, result)
        }
    });
    let settled = bounded(futures::future::join_all(starts)).await;

    let mut names = BTreeSet::new();
    for (i, activation, result) in &settled {
        assert_eq!(result.stop_reason, StopReason::COMPLETED);
        assert_eq!(output(result), format!("re: task {i}"));
        names.insert(activation.name().to_owned());
    }
    let expected: BTreeSet<String> = (1..=20).map(|i| format!("agent-{i}")).collect();
    assert_eq!(names, expected);
    let catalog = catalog(&parent);
    assert_eq!(catalog.len(), 20);
    bounded(world.runtime.shutdown()).await;
    assert_eq!(world.runtime.live_activations(), 0);
    assert_eq!(world.runtime.registry().len(), 1);
    assert_eq!(world.sessions().await.len(), 21);
}

// B26, B8
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_activations_started_in_parallel_tasks_get_unique_names() {
    let model = models::echo();
    let world = world(&model).await;
    let parent = world.lead();

    let mut tasks = tokio::task::JoinSet::new();
    for i in 1..=20 {
        let runtime = world.runtime.clone();
        let request = spec(&parent, &format!("task {i}"));
        tasks.spawn(async move {
            let activation = runtime.start_activation(request).await?;
            let result = activation.result().await?;
            Ok::<_, dsh_subagent::SubagentError>((i, activation.name().to_owned(), result))
        });
    }
    let mut names = BTreeSet::new();
    while let Some(joined) = bounded(tasks.join_next()).await {
        let (i, name, result) = joined.unwrap().unwrap();
        assert_eq!(output(&result), format!("re: task {i}"));
        assert!(names.insert(name.clone()), "{name} was given twice");
    }
    assert_eq!(names.len(), 20);
    fold_catalog(parent.header(), &parent.events()).expect("the catalog stays loadable");
}

// B26
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b26_a_start_preempted_after_reading_the_catalog_does_not_reuse_a_siblings_name() {
    let model = models::echo();
    let world = world(&model).await;
    let lead = world.lead();
    // The forwarding agent stands for the root: it reports the root's
    // exact reference, which is live.
    let (entered, paused) = tokio::sync::oneshot::channel::<()>();
    let (resume, resumed) = std::sync::mpsc::channel::<()>();
    // The first catalog read takes its snapshot and then stalls the calling
    // thread: a preemption between the runtime's catalog read and its name
    // reservation, as any thread of a multi-threaded runtime can suffer.
    let parent: Arc<dyn Agent> =
        Arc::new(TappedAgent::new(lead.clone()).on_first_events(move || {
            let _ = entered.send(());
            // A runtime that serialised the read with the reservation would
            // block the other start here; the bound lets it go on then.
            let _ = resumed.recv_timeout(Duration::from_secs(5));
        }));
    assert!(world.runtime.registry().is_live(&parent.reference()));

    // The late start reads the catalog (empty) and is preempted.
    let runtime = world.runtime.clone();
    let late_request = spec(&parent, "late");
    let late = tokio::spawn(async move { runtime.start_activation(late_request).await });
    bounded(paused).await.unwrap();
    // Meanwhile another start runs to publication: it reserves, records and
    // releases its name.
    let early = world.start(spec(&parent, "early")).await;
    let _ = resume.send(());
    let late = bounded(late).await.unwrap().unwrap();

    assert_ne!(
        early.name(),
        late.name(),
        "two children of one parent got the same name"
    );
    fold_catalog(parent.header(), &parent.events()).expect("the catalog stays loadable");
    result_of(&early).await;
    result_of(&late).await;
}
