//! The control tools against the real harness, the real JSONL store and the
//! subagent runtime with the `spawn`, `fork` and a test external provider.
//! The tools are host tools of the harness, bound to the runtime after it is
//! built. Children are kept running by a gated scripted model; agents whose
//! script is keyed by their first user text call the tools through the
//! loop (so the harness validates arguments against the published schemas);
//! refusal matrices call `execute` directly on live agents. Ordering is made
//! with gates and awaited effects, never with sleeps; timeouts only turn a
//! hang into a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_test_support::logs::{self, agent_messages};
use dsh_test_support::wait::bounded;
use dsh_test_support::world::models::{self, Scripts, script_key};
use dsh_test_support::world::{ExternalProvider, World as KitWorld, WorldBuilder, named_spec, sid};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dsh_core::{
    Agent, AgentStatus, CallId, CancelCause, CancelOptions, CancellationToken, ContentBlock,
    EventPayload, MessageSource, ModelRequest, SessionHeader, SessionStore, StopReason, Tool,
    ToolContext, UserMessage,
};
use dsh_harness::Scripted;
use dsh_subagent::catalog::{CATALOG_EVENT, catalog_payload};
use dsh_subagent::{CatalogEntry, ChildMode, Delivery, RuntimeConfig, SubagentActivation};
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::TappedAgent;
use dsh_tool_subagent_control::{ControlTools, RuntimeBinding, report_target};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

fn user(text: &str) -> UserMessage {
    UserMessage::new(vec![ContentBlock::text(text)], MessageSource::User)
}

// ---------------------------------------------------------------------------
// The world
// ---------------------------------------------------------------------------

/// A kit world (logs in `sessions/`, roots in `project/`) whose model holds
/// every `hold…` child's first turn behind `gate` and otherwise answers from
/// `scripts`, with the control tools bound to its runtime, `spawn`, `fork`
/// and a held external provider `ext` (its runs last until disposed), and
/// the root `lead-session`.
struct World {
    world: KitWorld<dyn SessionStore>,
    /// Releases one held first turn of a `hold ...` child per permit.
    gate: Arc<Semaphore>,
    scripts: Scripts,
    tools: BTreeMap<String, Arc<dyn Tool>>,
    lead: Arc<dyn Agent>,
}

impl std::ops::Deref for World {
    type Target = KitWorld<dyn SessionStore>;

    fn deref(&self) -> &Self::Target {
        &self.world
    }
}

async fn world_with(config: RuntimeConfig) -> World {
    let gate = Arc::new(Semaphore::new(0));
    let (model, scripts) = models::keyed(&gate);
    let binding = RuntimeBinding::new();
    let control = ControlTools::with_binding(&binding);
    let tools: BTreeMap<String, Arc<dyn Tool>> = control
        .iter()
        .map(|tool| (tool.name().to_owned(), tool.clone()))
        .collect();
    let world = WorldBuilder::project()
        .model(model)
        .tools(control)
        .config(config)
        .provider(Arc::new(SpawnProvider::new()))
        .provider(Arc::new(ForkProvider::new()))
        .provider(Arc::new(
            ExternalProvider::held("ext").with_id(sid("ext-run")),
        ))
        .build()
        .await;
    assert!(binding.bind(world.runtime.clone()));
    World {
        lead: world.lead(),
        world,
        gate,
        scripts,
        tools,
    }
}

async fn world() -> World {
    world_with(RuntimeConfig::default()).await
}

impl World {
    /// Script the agent whose first user text is `key`.
    fn script(&self, key: &str, responses: impl IntoIterator<Item = Scripted>) {
        self.scripts.script(key, responses);
    }

    async fn start_as(
        &self,
        parent: &Arc<dyn Agent>,
        provider: &str,
        name: &str,
        prompt: &str,
        delivery: Delivery,
    ) -> SubagentActivation {
        let mut spec = named_spec(parent, provider, name, prompt);
        spec.delivery = delivery;
        if provider == "ext" {
            spec.child_id = None;
        }
        self.runtime.start_activation(spec).await.unwrap()
    }

    /// Start a `spawn` child held in its first turn; returns its live agent
    /// once its model holds that turn's request (so later messages reach it
    /// at a step, not in its first request).
    async fn held(&self, parent: &Arc<dyn Agent>, name: &str) -> Arc<dyn Agent> {
        let prompt = format!("hold {name}");
        let activation = self
            .start_as(parent, "spawn", name, &prompt, Delivery::Parent)
            .await;
        self.holding(&prompt).await;
        self.runtime.registry().get(activation.child_id()).unwrap()
    }

    /// Wait until the model has received a request keyed `key`.
    async fn holding(&self, key: &str) {
        bounded(async {
            while requests_of(self, key).is_empty() {
                tokio::task::yield_now().await;
            }
        })
        .await;
    }

    /// Call a tool's `execute` directly as `caller`.
    async fn call(&self, tool: &str, caller: &Arc<dyn Agent>, input: Value) -> (bool, String) {
        self.call_with(tool, caller, input, CancellationToken::new())
            .await
    }

    async fn call_with(
        &self,
        tool: &str,
        caller: &Arc<dyn Agent>,
        input: Value,
        cancel: CancellationToken,
    ) -> (bool, String) {
        let ctx = ToolContext {
            agent: caller.clone(),
            call_id: CallId::new("direct"),
            cancel,
        };
        match bounded(self.tools[tool].execute(input, ctx)).await {
            Ok(output) => (
                output.is_error,
                dsh_core::content::joined_text(&output.content),
            ),
            Err(err) => (true, err.0),
        }
    }

    /// Start a turn of `agent` with `text` and wait until it is idle.
    async fn turn(&self, agent: &Arc<dyn Agent>, text: &str) {
        agent.followup(user(text)).await.unwrap();
        bounded(agent.wait_idle()).await;
    }

    /// Record a hand-written catalog entry in `parent`'s log.
    async fn record(&self, parent: &Arc<dyn Agent>, name: &str, mode: ChildMode) {
        let entry = CatalogEntry {
            child_id: sid(&format!("s-{name}")),
            name: Some(name.into()),
            label: format!("task {name}"),
            provider: "legacy".into(),
            mode,
        };
        parent
            .record(CATALOG_EVENT, catalog_payload(&entry))
            .await
            .unwrap();
    }

    async fn finish(self) {
        self.gate.add_permits(1000);
        self.runtime.shutdown().await;
        self.harness.shutdown().await;
    }
}

/// Every tool result in an agent's log: `(tool, is_error, text)`.
fn tool_results(agent: &Arc<dyn Agent>) -> Vec<(String, bool, String)> {
    agent
        .events()
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolResult(r) => Some((
                r.name.clone(),
                r.is_error,
                dsh_core::content::joined_text(&r.content),
            )),
            _ => None,
        })
        .collect()
}

/// The texts of the agent-message inbox items an agent accepted after its
/// initial prompt, with senders.
fn relayed(agent: &Arc<dyn Agent>) -> Vec<(String, String)> {
    let initial = agent.header().parent_session.is_some();
    agent_messages(
        agent
            .events()
            .iter()
            .filter(|e| matches!(e.payload, EventPayload::InboxAccepted(_)))
            .skip(usize::from(initial)),
    )
}

fn stop_reasons(agent: &Arc<dyn Agent>) -> Vec<String> {
    logs::stop_reasons(&agent.events())
}

fn calls(calls: &[(&str, Value)]) -> Scripted {
    Scripted::ToolCalls {
        text: None,
        calls: calls
            .iter()
            .map(|(name, input)| ((*name).to_owned(), input.clone()))
            .collect(),
    }
}

/// The requests the model got from the agent whose first user text is `key`.
fn requests_of(world: &World, key: &str) -> Vec<ModelRequest> {
    world
        .model
        .requests()
        .into_iter()
        .filter(|r| script_key(&r.messages) == key)
        .collect()
}

// ---------------------------------------------------------------------------
// list_agents
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_agents_over_a_mixed_tree() {
    let world = world().await;
    let lead = world.lead.clone();
    let a = world.held(&lead, "a").await;
    world
        .start_as(&lead, "fork", "b", "hold b", Delivery::Parent)
        .await;
    world
        .start_as(&lead, "ext", "ext", "run elsewhere", Delivery::Parent)
        .await;
    let quick = world
        .start_as(&lead, "spawn", "quick", "quick", Delivery::Caller)
        .await;
    bounded(quick.result()).await.unwrap();
    let a1 = world.held(&a, "a1").await;
    world.record(&lead, "old", ChildMode::ONE_SHOT).await;
    world.record(&lead, "ghost", ChildMode::CONTINUABLE).await;
    // An unknown kind is named with its diagnostic, not counted away.
    world.record(&lead, "odd", ChildMode::UNKNOWN).await;

    let (error, from_lead) = world.call("list_agents", &lead, json!({})).await;
    assert!(!error, "{from_lead}");
    insta::assert_snapshot!("list_agents_from_lead", from_lead);
    let (error, from_a1) = world.call("list_agents", &a1, json!({})).await;
    assert!(!error, "{from_a1}");
    insta::assert_snapshot!("list_agents_from_a1", from_a1);
    world.finish().await;
}

// ---------------------------------------------------------------------------
// send_message
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_by_name_path_and_id() {
    let world = world().await;
    let lead = world.lead.clone();
    let a = world.held(&lead, "a").await;
    let b = world.held(&lead, "b").await;
    let a1 = world.held(&a, "a1").await;

    let mut texts = Vec::new();
    for (caller, to, message) in [
        (&lead, "a", "to a by name"),
        (&lead, "a/a1", "to a1 by path"),
        (&lead, "s-b", "to b by id"),
        (&a1, "b", "from a1 to b, across branches"),
        (&b, "lead", "from b to lead"),
    ] {
        let (error, text) = world
            .call(
                "send_message",
                caller,
                json!({"to": to, "message": message}),
            )
            .await;
        assert!(!error, "{} -> {to}: {text}", caller.id());
        texts.push(text);
    }
    insta::assert_snapshot!("send_message_delivered", texts.join("\n"));
    assert_eq!(
        relayed(&a),
        [("lead-session".to_owned(), "to a by name".to_owned())]
    );
    assert_eq!(
        relayed(&a1),
        [("lead-session".to_owned(), "to a1 by path".to_owned())]
    );
    assert_eq!(
        relayed(&b),
        [
            ("lead-session".to_owned(), "to b by id".to_owned()),
            (
                "s-a1".to_owned(),
                "from a1 to b, across branches".to_owned()
            )
        ]
    );
    assert_eq!(
        relayed(&lead),
        [("s-b".to_owned(), "from b to lead".to_owned())]
    );
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_refusals() {
    let world = world().await;
    let lead = world.lead.clone();
    let a = world.held(&lead, "a").await;
    let a1 = world.held(&a, "a1").await;
    world
        .start_as(&lead, "ext", "ext", "run elsewhere", Delivery::Parent)
        .await;
    world.record(&lead, "old", ChildMode::ONE_SHOT).await;

    let cases: [(&str, &Arc<dyn Agent>, Value); 8] = [
        (
            "unknown name",
            &lead,
            json!({"to": "nobody", "message": "hi"}),
        ),
        (
            "unknown path",
            &lead,
            json!({"to": "a/nobody", "message": "hi"}),
        ),
        ("unknown id", &a, json!({"to": "s-nobody", "message": "hi"})),
        (
            "self by name",
            &lead,
            json!({"to": "lead", "message": "hi"}),
        ),
        ("self by path", &a1, json!({"to": "a/a1", "message": "hi"})),
        ("external", &lead, json!({"to": "ext", "message": "hi"})),
        ("one-shot", &a, json!({"to": "old", "message": "hi"})),
        ("blank", &lead, json!({"to": "a", "message": "   "})),
    ];
    let mut texts = Vec::new();
    for (case, caller, input) in cases {
        let (error, text) = world.call("send_message", caller, input).await;
        assert!(error, "{case}: {text}");
        texts.push(format!("{case}: {text}"));
    }
    insta::assert_snapshot!("send_message_refusals", texts.join("\n"));
    // Nothing was delivered anywhere.
    assert!(relayed(&a).is_empty() && relayed(&a1).is_empty() && relayed(&lead).is_empty());

    // An unbound tool refuses before anything else.
    let unbound = ControlTools::with_binding(&RuntimeBinding::new());
    let ctx = ToolContext {
        agent: lead.clone(),
        call_id: CallId::new("direct"),
        cancel: CancellationToken::new(),
    };
    let err = unbound[1]
        .execute(json!({"to": "a", "message": "hi"}), ctx)
        .await
        .unwrap_err();
    insta::assert_snapshot!("send_message_unbound", err.0);
    world.finish().await;
}

/// A cold child at the tree's live-agent limit: delivery is unavailable now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_at_capacity_and_while_draining() {
    let world = world_with(RuntimeConfig {
        max_live_children_per_tree: 1,
    })
    .await;
    let lead = world.lead.clone();
    let quick = world
        .start_as(&lead, "spawn", "quick", "quick", Delivery::Caller)
        .await;
    bounded(quick.result()).await.unwrap();
    world.held(&lead, "a").await;
    let (error, full) = world
        .call(
            "send_message",
            &lead,
            json!({"to": "quick", "message": "more"}),
        )
        .await;
    assert!(error);
    world.gate.add_permits(1);
    bounded(world.runtime.drain_descendants(std::slice::from_ref(&lead)))
        .await
        .unwrap();
    let (error, draining) = world
        .call("send_message", &lead, json!({"to": "a", "message": "more"}))
        .await;
    assert!(error);
    insta::assert_snapshot!(
        "send_message_capacity_and_draining",
        format!("{full}\n{draining}")
    );
    world.finish().await;
}

// ---------------------------------------------------------------------------
// interrupt_agent
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_agent_authority_and_effect() {
    let world = world().await;
    let lead = world.lead.clone();
    let a = world.held(&lead, "a").await;
    let b = world.held(&lead, "b").await;
    let a1 = world.held(&a, "a1").await;
    let _b1 = world.held(&b, "b1").await;

    let cases: [(&str, &Arc<dyn Agent>, &str); 6] = [
        ("sibling", &a, "b"),
        ("cousin", &b, "a/a1"),
        ("child to parent", &a1, "a"),
        ("to the root", &a, "lead"),
        ("self", &a, "a"),
        ("unknown", &lead, "nobody"),
    ];
    let mut texts = Vec::new();
    for (case, caller, to) in cases {
        let (error, text) = world
            .call("interrupt_agent", caller, json!({"to": to}))
            .await;
        assert!(error, "{case}: {text}");
        texts.push(format!("{case}: {text}"));
    }
    insta::assert_snapshot!("interrupt_agent_refusals", texts.join("\n"));
    for agent in [&a, &b, &a1] {
        assert_eq!(agent.status(), AgentStatus::Running, "a refusal stopped it");
    }

    // The root may interrupt a grandchild; the grandchild stops its turn.
    let (error, stopped) = world
        .call("interrupt_agent", &lead, json!({"to": "a/a1"}))
        .await;
    assert!(!error, "{stopped}");
    bounded(a1.wait_idle()).await;
    assert_eq!(stop_reasons(&a1), ["aborted"]);
    let (error, again) = world
        .call("interrupt_agent", &a, json!({"to": "a/a1"}))
        .await;
    assert!(!error, "{again}");
    insta::assert_snapshot!("interrupt_agent_accepted", format!("{stopped}\n{again}"));
    // The activation is kept: a1 is still a member, and a still runs.
    assert!(world.runtime.registry().get(a1.id()).is_some());
    assert_eq!(a.status(), AgentStatus::Running);
    world.finish().await;
}

// ---------------------------------------------------------------------------
// wait
// ---------------------------------------------------------------------------

/// `agent` with a tap saying when `pending()` is called: `wait` calls it
/// right after it subscribes to the inbox, so a test can deliver strictly
/// after the subscription and exercise the arrival path. The flag says
/// whether anything copied the agent's whole log (`events()`).
fn observed(agent: &Arc<dyn Agent>) -> (Arc<dyn Agent>, Arc<Semaphore>, Arc<AtomicBool>) {
    let checked = Arc::new(Semaphore::new(0));
    let copied = Arc::new(AtomicBool::new(false));
    let (tap, flag) = (checked.clone(), copied.clone());
    let wrapper: Arc<dyn Agent> = Arc::new(
        TappedAgent::new(agent.clone())
            .on_pending(move || tap.add_permits(1))
            .on_first_events(move || flag.store(true, Ordering::SeqCst)),
    );
    (wrapper, checked, copied)
}

/// Start a turn of `agent` keyed `key` whose first model request is held
/// until the returned gate gets a permit, then answers `then`; returns once
/// the model holds that request (the turn's input is claimed, so the inbox
/// is empty and new arrivals go to the next step).
async fn busy(world: &World, agent: &Arc<dyn Agent>, key: &str, then: Scripted) -> Arc<Semaphore> {
    let gate = Arc::new(Semaphore::new(0));
    world.script(
        key,
        [Scripted::Gated {
            gate: gate.clone(),
            then: Box::new(then),
        }],
    );
    agent.followup(user(key)).await.unwrap();
    world.holding(key).await;
    assert!(agent.pending().is_empty());
    gate
}

/// Arrivals after `wait` subscribed: a message, then a settlement notice.
/// The lead is mid-turn (its model holds a request), as it is whenever its
/// model calls `wait`, so arrivals stay pending until its next step. `wait`
/// describes them from their announcements: it never copies the caller's
/// log (models call it thousands of times a minute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_returns_on_an_arrival() {
    let world = world().await;
    let lead = world.lead.clone();
    let b = world.held(&lead, "b").await;
    let (caller, checked, copied) = observed(&lead);

    let lead_gate = busy(&world, &lead, "lead: busy", Scripted::Text("ok".into())).await;
    let waiting = world.call("wait", &caller, json!({"timeout_ms": 600000}));
    let message = async {
        bounded(checked.acquire()).await.unwrap().forget();
        world
            .call(
                "send_message",
                &b,
                json!({"to": "lead", "message": "news from b"}),
            )
            .await
    };
    let ((error, on_message), (send_error, _)) = tokio::join!(waiting, message);
    assert!(!error && !send_error, "{on_message}");
    assert!(
        !on_message.contains("news from b"),
        "content copied: {on_message}"
    );
    // The turn reads the message and ends; the inbox is empty again.
    lead_gate.add_permits(1);
    bounded(lead.wait_idle()).await;

    let lead_gate = busy(
        &world,
        &lead,
        "lead: busy again",
        Scripted::Text("ok".into()),
    )
    .await;
    let waiting = world.call("wait", &caller, json!({"timeout_ms": 600000}));
    let settle = async {
        bounded(checked.acquire()).await.unwrap().forget();
        // b's held turn ends: it settles and notifies the lead.
        world.gate.add_permits(1);
        bounded(b.wait_idle()).await;
    };
    let ((error, on_notice), ()) = tokio::join!(waiting, settle);
    assert!(!error, "{on_notice}");
    assert!(
        !copied.load(Ordering::SeqCst),
        "wait copied the caller's whole log"
    );
    lead_gate.add_permits(1);
    insta::assert_snapshot!("wait_arrivals", format!("{on_message}\n{on_notice}"));
    world.finish().await;
}

/// Items already pending when `wait` starts end it at once; through the
/// loop, the model's next request shows each message exactly once (B46).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_with_pending_items_returns_at_once_and_content_is_shown_once() {
    let world = world().await;
    let lead = world.lead.clone();
    let b = world.held(&lead, "b").await;
    let lead_gate = busy(
        &world,
        &lead,
        "lead: wait",
        calls(&[("wait", json!({"timeout_ms": 600000}))]),
    )
    .await;
    world.script("lead: wait", [Scripted::Text("read them".into())]);
    // While the lead's model thinks: a message from b, then b settles.
    let (error, text) = world
        .call(
            "send_message",
            &b,
            json!({"to": "lead", "message": "UNIQUE-MESSAGE-FROM-B"}),
        )
        .await;
    assert!(!error, "{text}");
    world.gate.add_permits(1);
    bounded(async {
        while lead.pending().len() < 2 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    lead_gate.add_permits(1);
    bounded(lead.wait_idle()).await;

    let results = tool_results(&lead);
    assert_eq!(results.len(), 1);
    let (name, error, text) = &results[0];
    assert_eq!((name.as_str(), *error), ("wait", false), "{text}");
    assert!(!text.contains("UNIQUE-MESSAGE-FROM-B"));
    insta::assert_snapshot!("wait_pending_at_start", text);

    // B46: the request after the wait shows the message once, after the
    // wait's result.
    let requests = requests_of(&world, "lead: wait");
    assert_eq!(requests.len(), 2);
    let after = serde_json::to_string(&requests[1].messages).unwrap();
    assert_eq!(after.matches("UNIQUE-MESSAGE-FROM-B").count(), 1, "{after}");
    let position = |needle: &str| after.find(needle).unwrap();
    assert!(position("UNIQUE-MESSAGE-FROM-B") > position("arrived for you"));
    let before = serde_json::to_string(&requests[0].messages).unwrap();
    assert!(!before.contains("UNIQUE-MESSAGE-FROM-B"));
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_times_out_and_refuses_bad_timeouts() {
    let world = world().await;
    let lead = world.lead.clone();
    world.script(
        "lead: bounds",
        [
            calls(&[
                ("wait", json!({"timeout_ms": 1})),
                ("wait", json!({"timeout_ms": 0})),
                ("wait", json!({"timeout_ms": 600001})),
                ("wait", json!({"timeout_ms": "soon"})),
                ("wait", json!({"timeout_ms": 5, "until": "a"})),
            ]),
            Scripted::Text("done".into()),
        ],
    );
    world.turn(&lead, "lead: bounds").await;
    let texts: Vec<String> = tool_results(&lead)
        .into_iter()
        .map(|(_, error, text)| format!("{}: {text}", if error { "error" } else { "ok" }))
        .collect();
    insta::assert_snapshot!("wait_timeout_and_bounds", texts.join("\n"));
    // Called directly (no schema in front), the tool checks the range itself.
    let (error, text) = world.call("wait", &lead, json!({"timeout_ms": 0})).await;
    assert!(error);
    insta::assert_snapshot!("wait_out_of_range_direct", text);
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_is_cancellable() {
    let world = world().await;
    let lead = world.lead.clone();
    // Directly: the call's token ends the wait.
    let (caller, checked, _) = observed(&lead);
    let cancel = CancellationToken::new();
    let waiting = world.call_with("wait", &caller, json!({}), cancel.clone());
    let cancelling = async {
        bounded(checked.acquire()).await.unwrap().forget();
        cancel.cancel();
    };
    let ((error, text), ()) = tokio::join!(waiting, cancelling);
    assert!(error);
    insta::assert_snapshot!("wait_cancelled_direct", text);

    // Through the loop: interrupting the lead ends its waiting turn.
    world.script(
        "lead: wait long",
        [calls(&[("wait", json!({"timeout_ms": 600000}))])],
    );
    lead.followup(user("lead: wait long")).await.unwrap();
    bounded(async {
        while !lead
            .events()
            .iter()
            .any(|e| matches!(&e.payload, EventPayload::ToolCall(c) if c.name == "wait"))
        {
            tokio::task::yield_now().await;
        }
    })
    .await;
    lead.cancel(CancelCause::User, CancelOptions::default());
    bounded(lead.wait_idle()).await;
    assert_eq!(stop_reasons(&lead), ["aborted"]);
    let results = tool_results(&lead);
    assert_eq!(results.len(), 1);
    assert!(results[0].1, "{results:?}");
    world.finish().await;
}

// ---------------------------------------------------------------------------
// report
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_reaches_the_direct_parent_without_ending_the_turn() {
    let world = world().await;
    let lead = world.lead.clone();
    let a = world.held(&lead, "a").await;
    world.script(
        "report task",
        [
            calls(&[(
                "report",
                json!({"message": "FINDING: the bug is in parse()"}),
            )]),
            Scripted::Text("finished after reporting".into()),
        ],
    );
    let child = world
        .start_as(&a, "spawn", "a1", "report task", Delivery::Caller)
        .await;
    let child_id = child.child_id().clone();
    let result = bounded(child.result()).await.unwrap();
    // The turn went on after the report: the model was asked again.
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(
        dsh_core::content::joined_text(&result.output),
        "finished after reporting"
    );
    assert_eq!(requests_of(&world, "report task").len(), 2);
    // The direct parent (a) got it once, attributed to the child; lead did not.
    assert_eq!(
        relayed(&a),
        [(
            child_id.to_string(),
            "FINDING: the bug is in parse()".to_owned()
        )]
    );
    assert!(relayed(&lead).is_empty());
    // The report's own result, from the child's log.
    let store = world.harness.store().clone();
    let log = store.load(&child_id).await.unwrap();
    let reported: Vec<String> = log
        .events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolResult(r) => {
                assert!(!r.is_error);
                Some(dsh_core::content::joined_text(&r.content))
            }
            _ => None,
        })
        .collect();
    insta::assert_snapshot!("report_delivered", reported.join("\n"));
    world.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_refusals() {
    let world = world().await;
    let lead = world.lead.clone();
    let a = world.held(&lead, "a").await;
    // A session that names a parent but was not started by the runtime.
    let mut header = SessionHeader::new(sid("stray"), world.project());
    header.parent_session = Some(lead.id().clone());
    let stray = world.session(header).await.agent().clone();

    let mut texts = Vec::new();
    for (case, caller, input) in [
        ("root", &lead, json!({"message": "hi"})),
        ("not in a tree", &stray, json!({"message": "hi"})),
        ("blank", &a, json!({"message": " "})),
    ] {
        let (error, text) = world.call("report", caller, input).await;
        assert!(error, "{case}: {text}");
        texts.push(format!("{case}: {text}"));
    }
    insta::assert_snapshot!("report_refusals", texts.join("\n"));
    assert!(relayed(&lead).is_empty());

    // The documented availability check agrees.
    let cancel = CancellationToken::new();
    assert_eq!(
        report_target(&world.runtime, &a, &cancel).await.unwrap(),
        *lead.id()
    );
    assert_eq!(
        report_target(&world.runtime, &lead, &cancel)
            .await
            .unwrap_err()
            .code(),
        "NO_PARENT"
    );
    assert_eq!(
        report_target(&world.runtime, &stray, &cancel)
            .await
            .unwrap_err()
            .code(),
        "NOT_CONTINUABLE"
    );
    world.finish().await;
}

// ---------------------------------------------------------------------------
// Malformed arguments, through the loop
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_arguments_are_refused_by_the_schema() {
    let world = world().await;
    let lead = world.lead.clone();
    world.held(&lead, "a").await;
    world.script(
        "lead: malformed",
        [
            calls(&[
                ("list_agents", json!({"scope": "descendants"})),
                (
                    "send_message",
                    json!({"to": "a", "message": "hi", "urgent": true}),
                ),
                ("send_message", json!({"subagent_id": "a", "message": "hi"})),
                ("send_message", json!({"to": "a"})),
                ("interrupt_agent", json!({"to": "a", "reason": "stop"})),
                ("interrupt_agent", json!({"agent_id": "a"})),
                ("report", json!({"output": "x"})),
                ("report", json!({"message": ""})),
            ]),
            Scripted::Text("done".into()),
        ],
    );
    world.turn(&lead, "lead: malformed").await;
    // `report` is not offered to a root at all, so its calls are refused
    // before their arguments are read (its schema is covered in specs.rs).
    let results = tool_results(&lead);
    assert_eq!(results.len(), 8);
    assert!(results.iter().all(|(_, error, _)| *error));
    let texts: Vec<String> = results.into_iter().map(|(_, _, text)| text).collect();
    insta::assert_snapshot!("malformed_arguments", texts.join("\n"));
    // Nothing reached a.
    let a = world.runtime.registry().get(&sid("s-a")).unwrap();
    assert!(relayed(&a).is_empty());
    world.finish().await;
}

/// An item queued for the caller's next turn ends `wait` at once, with a
/// hint to end the turn: no step of this turn would show it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_reports_items_queued_for_the_next_turn() {
    let world = world().await;
    let lead = world.lead.clone();
    let lead_gate = busy(&world, &lead, "lead: busy", Scripted::Text("ok".into())).await;
    lead.followup(user("a follow-up from the user"))
        .await
        .unwrap();
    let (error, text) = world
        .call("wait", &lead, json!({"timeout_ms": 600000}))
        .await;
    assert!(!error, "{text}");
    assert!(!text.contains("a follow-up from the user"));
    insta::assert_snapshot!("wait_next_turn", text);
    lead_gate.add_permits(1);
    world.finish().await;
}
