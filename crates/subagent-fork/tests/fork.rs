//! The `fork` provider against the real harness and JSONL store: the seed is
//! the parent's balanced completed-turn prefix captured once (B18), facts in
//! the seed stay the parent's (B19), a fork never returns inherited text
//! (B13), and the capability table of both in-process providers (B4, B6).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_core::schema::ObjectSchema;
use dsh_core::{
    Agent, AgentFactory, AgentOptions, CancellationToken, ContentBlock, Durability, EventPayload,
    Message, ModelError, ModelErrorKind, SessionStore, ToolRestriction, UserMessage,
};
use dsh_harness::{Scripted, ScriptedModel};
use dsh_subagent::{ActivationSpec, Delivery, StartRequest, fold_catalog};
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::requests::last_user_text;
use dsh_test_support::world::{NamedTool, World, WorldBuilder, caller_spec};
use tokio::sync::Semaphore;

/// A kit world (logs in `sessions/` with the default durability, the root
/// `lead-session` in `project/`) whose agents ask `model` and may call a
/// `noop` tool, with `fork` and `spawn` registered.
async fn world(model: ScriptedModel) -> World<dyn SessionStore> {
    WorldBuilder::project()
        .jsonl(Durability::default())
        .model(Arc::new(model))
        .tool(Arc::new(NamedTool("noop")))
        .provider(Arc::new(ForkProvider::new()))
        .provider(Arc::new(SpawnProvider::new()))
        .build()
        .await
}

fn spec(provider: &str, parent: &Arc<dyn Agent>, prompt: &str) -> ActivationSpec {
    caller_spec(parent, provider, prompt)
}

async fn turn(agent: &Arc<dyn Agent>, text: &str) {
    agent.followup(UserMessage::user_text(text)).await.unwrap();
    agent.wait_idle().await;
}

// B18
#[tokio::test]
async fn a_fork_is_seeded_with_the_completed_turn_prefix_captured_once() {
    let world = world(
        ScriptedModel::new()
            .responder(|request| Scripted::Text(format!("re: {}", last_user_text(request)))),
    )
    .await;
    let parent = world.lead();

    // No completed turn: no seed.
    let empty = world
        .runtime
        .start_activation(spec("fork", &parent, "early"))
        .await
        .unwrap();
    empty.result().await.unwrap();
    let header = world.store.header(empty.child_id()).await.unwrap();
    assert_eq!(header.seed_len, 0);

    turn(&parent, "hello").await;
    let prefix_len = parent.events().len() as u64;
    let child = world
        .runtime
        .start_activation(spec("fork", &parent, "go on"))
        .await
        .unwrap();
    let result = child.result().await.unwrap();
    assert_eq!(dsh_core::content::joined_text(&result.output), "re: go on");

    let log = world.store.load(child.child_id()).await.unwrap();
    assert_eq!(log.header.seed_len, prefix_len);
    // The seed is the parent's log, event for event.
    let parent_events = parent.events();
    assert_eq!(
        &log.events[..prefix_len as usize],
        &parent_events[..prefix_len as usize]
    );
    // The child's model saw the parent's conversation, then its own prompt.
    let request = world
        .model
        .requests()
        .into_iter()
        .find(|r| last_user_text(r) == "go on")
        .unwrap();
    let texts: Vec<String> = request
        .messages
        .iter()
        .map(|m| match m {
            Message::User { content, .. } | Message::Assistant { content, .. } => {
                dsh_core::content::joined_text(content)
            }
            Message::Tool { .. } => String::new(),
        })
        .collect();
    assert_eq!(texts, ["hello", "re: hello", "go on"]);

    // Captured once: later parent turns do not reach the child's log.
    turn(&parent, "more").await;
    let again = world.store.load(child.child_id()).await.unwrap();
    assert_eq!(again.events, log.events);
}

#[tokio::test]
async fn a_turn_in_flight_is_not_part_of_the_seed() {
    let gate = Arc::new(Semaphore::new(0));
    let parent_gate = gate.clone();
    let world =
        world(ScriptedModel::new().responder(
            move |request| match last_user_text(request).as_str() {
                "slow" => Scripted::Gated {
                    gate: parent_gate.clone(),
                    then: Box::new(Scripted::Text("finally".into())),
                },
                other => Scripted::Text(format!("re: {other}")),
            },
        ))
        .await;
    let parent = world.lead();
    turn(&parent, "first").await;
    let completed = parent.events().len() as u64;
    parent
        .followup(UserMessage::user_text("slow"))
        .await
        .unwrap();
    for _ in 0..10_000 {
        if parent
            .events()
            .iter()
            .any(|e| matches!(e.payload, EventPayload::StepStart(_)) && e.seq > completed)
        {
            break;
        }
        tokio::task::yield_now().await;
    }
    let child = world
        .runtime
        .start_activation(spec("fork", &parent, "side task"))
        .await
        .unwrap();
    child.result().await.unwrap();
    let header = world.store.header(child.child_id()).await.unwrap();
    assert_eq!(header.seed_len, completed, "the open turn is excluded");
    gate.add_permits(1);
    parent.wait_idle().await;
}

// B13: a fork never returns text inherited from its parent.
#[tokio::test]
async fn a_failed_fork_returns_no_inherited_text() {
    let world =
        world(
            ScriptedModel::new().responder(|request| match last_user_text(request).as_str() {
                "hello" => Scripted::Text("parent words".into()),
                _ => Scripted::Fail(ModelError::new(ModelErrorKind::Transport, "down")),
            }),
        )
        .await;
    let parent = world.lead();
    turn(&parent, "hello").await;
    let child = world
        .runtime
        .start_activation(spec("fork", &parent, "fail"))
        .await
        .unwrap();
    let result = child.result().await.unwrap();
    assert_eq!(result.stop_reason.as_str(), "error");
    assert!(result.output.is_empty(), "{:?}", result.output);
}

// B19
#[tokio::test]
async fn a_fork_child_made_after_spawned_siblings_lists_no_children_of_its_own() {
    let world = world(ScriptedModel::new().responder(|_| Scripted::Text("done".into()))).await;
    let parent = world.lead();
    turn(&parent, "hello").await;
    for _ in 0..2 {
        let mut s = spec("spawn", &parent, "sibling");
        s.delivery = Delivery::Caller;
        world
            .runtime
            .start_activation(s)
            .await
            .unwrap()
            .result()
            .await
            .unwrap();
    }
    // Make the catalog entries part of a completed turn, so the seed has them.
    turn(&parent, "again").await;
    let parent_catalog = fold_catalog(parent.header(), &parent.events()).unwrap();
    assert_eq!(parent_catalog.len(), 2);

    let gate = Arc::new(Semaphore::new(0));
    world.model.push(Scripted::Gated {
        gate: gate.clone(),
        then: Box::new(Scripted::Text("fork done".into())),
    });
    let fork = world
        .runtime
        .start_activation(spec("fork", &parent, "fork"))
        .await
        .unwrap();
    let child = world.harness.registry().get(fork.child_id()).unwrap();
    let own = fold_catalog(child.header(), &child.events()).unwrap();
    assert!(own.is_empty(), "inherited catalog facts are the parent's");
    // The inherited names are free for the fork's own children.
    let grandchild = world
        .runtime
        .start_activation(spec("spawn", &child, "grandchild"))
        .await
        .unwrap();
    assert_eq!(grandchild.name(), "agent-3/agent-1");
    grandchild.result().await.unwrap();
    gate.add_permits(1);
    fork.result().await.unwrap();
}

/// Every start-time option, applied to a request.
fn with_option(mut request: StartRequest, option: &str) -> StartRequest {
    match option {
        "agent_options" => {
            request.agent_options = Some(AgentOptions {
                max_output_tokens: Some(100),
                ..AgentOptions::default()
            });
        }
        "agent_preset" => request.agent_preset = Some("missing-preset".into()),
        "output_schema" => {
            request.output_schema = Some(
                ObjectSchema::new(serde_json::json!({"type": "object", "properties": {}})).unwrap(),
            );
        }
        "depth_limit" => request.max_depth = Some(5),
        "tool_filter" => request.tool_filter = Some(ToolRestriction::allow(["noop"])),
        "persona" => request.persona = Some("You are brief.".into()),
        other => panic!("unknown option {other}"),
    }
    request
}

// B4, B6: capability refusals, table-driven over every flag and both providers.
#[tokio::test]
async fn capability_table_of_the_in_process_providers() {
    let world = world(ScriptedModel::new().responder(|_| Scripted::Text("done".into()))).await;
    let parent = world.lead();
    let table = [
        ("spawn", "agent_options", None),
        ("spawn", "agent_preset", Some("INVALID_REQUEST")),
        ("spawn", "output_schema", None),
        ("spawn", "depth_limit", None),
        ("spawn", "tool_filter", None),
        ("spawn", "persona", None),
        ("fork", "agent_options", None),
        ("fork", "agent_preset", Some("UNSUPPORTED_CAPABILITY")),
        ("fork", "output_schema", None),
        ("fork", "depth_limit", None),
        ("fork", "tool_filter", None),
        ("fork", "persona", None),
    ];
    for (provider, option, refusal) in table {
        let sessions_before = world.store.list().await.unwrap().len();
        let mut s = spec(provider, &parent, "task");
        s.request = with_option(s.request, option);
        let outcome = world.runtime.start_activation(s).await;
        match (refusal, outcome) {
            (None, Ok(activation)) => {
                activation.result().await.unwrap();
            }
            (Some(code), Err(err)) => {
                assert_eq!(err.code(), code, "{provider}/{option}: {err}");
                if code == "UNSUPPORTED_CAPABILITY" {
                    assert!(err.to_string().contains(option), "{err}");
                }
                assert_eq!(
                    world.store.list().await.unwrap().len(),
                    sessions_before,
                    "{provider}/{option} left a session behind"
                );
            }
            (expected, outcome) => {
                panic!(
                    "{provider}/{option}: expected {expected:?}, got {:?}",
                    outcome.map(|a| a.child_id().clone())
                )
            }
        }
    }
    // An unknown preset on spawn is a composition error that leaves nothing.
    assert_eq!(world.runtime.live_activations(), 0);
}

/// A spawn provider with its own model route.
struct Routed(SpawnProvider);

impl dsh_subagent::SubagentProvider for Routed {
    fn name(&self) -> &str {
        "routed"
    }
    fn capabilities(&self) -> dsh_subagent::SubagentCapabilities {
        dsh_subagent::SubagentCapabilities::ALL
    }
    fn inherits_parent_context(&self) -> bool {
        false
    }
    fn agent_route_defaults(&self) -> Option<dsh_subagent::AgentRoute> {
        Some(dsh_subagent::AgentRoute {
            provider: "alt".into(),
            model: "route-model".into(),
        })
    }
    fn continuable(&self) -> Option<&dyn dsh_subagent::PrepareContinuable> {
        self.0.continuable()
    }
}

// B6, B21: request override, then provider route, then parent.
#[tokio::test]
async fn options_merge_request_then_provider_route_then_parent() {
    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("done".into())));
    let world = WorldBuilder::new()
        .memory()
        .model(model.clone())
        .harness({
            let model = model.clone();
            move |b| {
                b.models(
                    dsh_harness::ModelRoutes::new()
                        .route("default", model.clone())
                        .route("alt", model),
                )
            }
        })
        .provider(Arc::new(Routed(SpawnProvider::new())))
        .root("lead-session")
        .root_header(|header| {
            header.composition.options = AgentOptions {
                model: Some("parent-model".into()),
                reasoning_effort: Some("low".into()),
                ..AgentOptions::default()
            };
        })
        .build()
        .await;
    let (runtime, store, parent) = (&world.runtime, &world.store, world.lead());

    let plain = runtime
        .start_activation(spec("routed", &parent, "a"))
        .await
        .unwrap();
    plain.result().await.unwrap();
    let options = store
        .header(plain.child_id())
        .await
        .unwrap()
        .composition
        .options;
    assert_eq!(
        options.provider.as_deref(),
        Some("alt"),
        "the route beats the parent"
    );
    assert_eq!(options.model.as_deref(), Some("route-model"));
    assert_eq!(
        options.reasoning_effort.as_deref(),
        Some("low"),
        "gaps come from the parent"
    );

    let mut overridden = spec("routed", &parent, "b");
    overridden.request.agent_options = Some(AgentOptions {
        model: Some("override".into()),
        ..AgentOptions::default()
    });
    let child = runtime.start_activation(overridden).await.unwrap();
    child.result().await.unwrap();
    let options = store
        .header(child.child_id())
        .await
        .unwrap()
        .composition
        .options;
    assert_eq!(options.provider.as_deref(), Some("alt"));
    assert_eq!(
        options.model.as_deref(),
        Some("override"),
        "the request beats the route"
    );
    let last = model.requests().pop().unwrap();
    assert_eq!(last.model.as_deref(), Some("override"));
}

// B35: a cold fork child resumes from its own log: the seed is replayed, not re-forked.
#[tokio::test]
async fn a_cold_fork_child_replays_its_seed_without_reforking() {
    let world = world(
        ScriptedModel::new()
            .responder(|request| Scripted::Text(format!("re: {}", last_user_text(request)))),
    )
    .await;
    let parent = world.lead();
    turn(&parent, "hello").await;
    let mut s = spec("fork", &parent, "forked");
    s.delivery = Delivery::Parent;
    let child = world.runtime.start_activation(s).await.unwrap();
    child.result().await.unwrap();
    parent.wait_idle().await;
    let before = world.store.load(child.child_id()).await.unwrap();
    // The parent moves on; the fork must not see it.
    turn(&parent, "later").await;
    world
        .runtime
        .send_message(
            &parent,
            child.child_id(),
            vec![ContentBlock::text("again")],
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    let agent = world.harness.registry().get(child.child_id()).unwrap();
    agent.wait_idle().await;
    let after = world.store.load(child.child_id()).await.unwrap();
    assert_eq!(after.header.seed_len, before.header.seed_len);
    assert_eq!(&after.events[..before.events.len()], &before.events[..]);
    let request = world
        .model
        .requests()
        .into_iter()
        .find(|r| {
            matches!(r.messages.last(), Some(Message::User { content, .. })
                if dsh_core::content::joined_text(content) == "again")
        })
        .unwrap();
    let texts: Vec<String> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::User { content, .. } => Some(dsh_core::content::joined_text(content)),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts,
        ["hello", "forked", "again"],
        "seed once, no later parent turns"
    );
}

// B35: a resumed child does not inherit an earlier output schema.
#[tokio::test]
async fn a_resumed_child_has_no_capture_tool() {
    let world = world(ScriptedModel::new().responder(|request| {
        let has_capture = request.tools.iter().any(|t| t.name == "submit_result");
        if has_capture {
            Scripted::ToolCalls {
                text: None,
                calls: vec![("submit_result".into(), serde_json::json!({"ok": true}))],
            }
        } else {
            Scripted::Text("plain".into())
        }
    }))
    .await;
    let parent = world.lead();
    let mut s = spec("spawn", &parent, "structured");
    s.request.output_schema = Some(
        ObjectSchema::new(serde_json::json!({
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"]
        }))
        .unwrap(),
    );
    let child = world.runtime.start_activation(s).await.unwrap();
    let result = child.result().await.unwrap();
    assert_eq!(result.structured, Some(serde_json::json!({"ok": true})));
    let asked = world.model.requests().len();
    world
        .runtime
        .send_message(
            &parent,
            child.child_id(),
            vec![ContentBlock::text("more")],
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    dsh_test_support::wait::until(|| world.model.requests().len() > asked).await;
    let last = world.model.requests().pop().unwrap();
    assert!(
        last.tools.iter().all(|t| t.name != "submit_result"),
        "{:?}",
        last.tools
    );
}
