//! The review's deviations, each pinned: a child's tool filter only narrows
//! what its parent may use (B4, B58); a valid capture closes the
//! activation's input (B23); names and roots are for exact live members
//! only; a repeated user request id is delivered once (B36); a resumed
//! activation names its real provider (B10); depth arithmetic is checked
//! (B5); an external start passes `agent_preset` to a provider that claims
//! it and gets the provider's route merged under its options (B6).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_core::schema::ObjectSchema;
use dsh_core::{
    AgentOptions, CancellationToken, ContentBlock, Durability, EventPayload, MessageId,
    SessionHeader, StopReason, ToolRestriction,
};
use dsh_harness::Scripted;
use dsh_subagent::{
    AgentRoute, PromptDelivery, RuntimeConfig, SubagentEvent, TrustedHost, UserPrompt,
};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{Backing, ExternalProvider, World, sid};
use tokio::sync::Semaphore;

async fn world() -> World {
    World::new(Backing::Jsonl(Durability::None), RuntimeConfig::default()).await
}

// B58: an `Allow{alpha,beta}` parent cannot give a child more than it has.
#[tokio::test]
async fn b58_a_childs_tool_filter_narrows_the_inherited_restriction_and_never_widens_it() {
    let world = world().await;
    let mut header = SessionHeader::new(sid("restricted"), world.dir());
    header.composition.tools = Some(ToolRestriction::allow(["alpha", "beta"]));
    let parent = world.session(header).await;
    let parent = parent.agent();

    // A deny list on top of the allow list narrows it.
    let mut spec = world.spec(Some("narrowed"));
    spec.request.parent = parent.clone();
    spec.request.tool_filter = Some(ToolRestriction::deny(["alpha"]));
    let child = world.runtime.start_activation(spec).await.unwrap();
    let header = world.runtime.registry().get(child.child_id()).map_or_else(
        || panic!("the child is live until it settles"),
        |agent| agent.header().clone(),
    );
    assert_eq!(
        header.composition.tools,
        Some(ToolRestriction::allow(["beta"]))
    );
    bounded(child.result()).await.unwrap();

    // An allow list naming a tool the parent may not use is refused.
    let mut spec = world.spec(Some("widened"));
    spec.request.parent = parent.clone();
    spec.request.tool_filter = Some(ToolRestriction::allow(["beta", "gamma"]));
    let err = world.runtime.start_activation(spec).await.unwrap_err();
    assert_eq!(err.code(), "INVALID_REQUEST", "{err}");
    assert!(err.to_string().contains("gamma"), "{err}");

    // No filter inherits the parent's restriction, with a preset too.
    let mut spec = world.spec(Some("inherits"));
    spec.request.parent = parent.clone();
    let child = world.runtime.start_activation(spec).await.unwrap();
    let tools = world
        .runtime
        .registry()
        .get(child.child_id())
        .map(|agent| agent.header().composition.tools.clone());
    assert_eq!(tools, Some(Some(ToolRestriction::allow(["alpha", "beta"]))));
}

// B23: once the child submitted a valid structured result, its activation
// takes no more input: while it waits for a child of its own, neither that
// child's notice nor a message starts another turn that could change what
// this activation returns; the message goes to a later resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b23_a_valid_capture_closes_the_activations_input() {
    let world = world().await;
    let capture_gate = Arc::new(Semaphore::new(0));
    let grandchild_gate = Arc::new(Semaphore::new(0));
    world.model.push(Scripted::Gated {
        gate: capture_gate.clone(),
        then: Box::new(Scripted::ToolCalls {
            text: Some("captured answer".into()),
            calls: vec![("submit_result".into(), serde_json::json!({"ok": true}))],
        }),
    });
    world.model.push(Scripted::Gated {
        gate: grandchild_gate.clone(),
        then: Box::new(Scripted::Text("grandchild done".into())),
    });
    let mut spec = world.spec(Some("structured"));
    spec.child_id = Some(sid("structured"));
    spec.request.output_schema = Some(
        ObjectSchema::new(serde_json::json!({
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"]
        }))
        .unwrap(),
    );
    let child = world.runtime.start_activation(spec).await.unwrap();
    until(|| world.model.requests().len() == 1).await;
    let child_agent = world.runtime.registry().get(child.child_id()).unwrap();
    let mut grandchild = world.spec(Some("helper"));
    grandchild.request.parent = child_agent.clone();
    let grandchild = world.runtime.start_activation(grandchild).await.unwrap();
    until(|| world.model.requests().len() == 2).await;
    capture_gate.add_permits(1);
    until(|| {
        child_agent.status() == dsh_core::AgentStatus::Idle
            && child_agent
                .events()
                .iter()
                .any(|event| matches!(&event.payload, EventPayload::ToolResult(_)))
    })
    .await;
    let message = tokio::spawn(world.tell("structured", "more"));
    grandchild_gate.add_permits(1);
    bounded(grandchild.result()).await.unwrap();
    let result = bounded(child.result()).await.unwrap();
    assert_eq!(result.structured, Some(serde_json::json!({"ok": true})));
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(
        dsh_core::content::joined_text(&result.output),
        "captured answer",
        "no later turn changed the captured activation's output"
    );
    bounded(message).await.unwrap().unwrap();
    world.quiesce().await;
}

// Seed 002: namesOf/rootOf take an exact live member and fail otherwise.
#[tokio::test]
async fn names_and_roots_are_only_for_exact_live_members() {
    let world = world().await;
    let root = world.root.agent();
    assert_eq!(world.runtime.names_of(root).unwrap().self_name, "lead");
    assert_eq!(world.runtime.root_of(root).unwrap(), sid("lead"));

    let mut spec = world.spec(Some("member"));
    spec.child_id = Some(sid("member"));
    let gate = Arc::new(Semaphore::new(0));
    world.model.push(Scripted::Gated {
        gate: gate.clone(),
        then: Box::new(Scripted::Text("done".into())),
    });
    let child = world.runtime.start_activation(spec).await.unwrap();
    let agent = world.runtime.registry().get(child.child_id()).unwrap();
    let names = world.runtime.names_of(&agent).unwrap();
    assert_eq!(names.self_name, "member");
    assert_eq!(names.parent.as_deref(), Some("lead"));
    assert_eq!(world.runtime.root_of(&agent).unwrap(), sid("lead"));
    gate.add_permits(1);
    bounded(child.result()).await.unwrap();
    world.quiesce().await;

    // The agent object of a settled activation is no longer the live one.
    assert_eq!(
        world.runtime.names_of(&agent).unwrap_err().code(),
        "NOT_LIVE"
    );
    // A live session with a creator that is no activation is no member.
    let mut header = SessionHeader::new(sid("stray"), world.dir());
    header.parent_session = Some(sid("lead"));
    let stray = world.session(header).await;
    assert_eq!(
        world.runtime.names_of(stray.agent()).unwrap_err().code(),
        "NOT_A_MEMBER"
    );
    assert_eq!(
        world.runtime.root_of(stray.agent()).unwrap_err().code(),
        "NOT_A_MEMBER"
    );
}

fn accepted_with(events: &[dsh_core::SessionEvent], id: &MessageId) -> usize {
    events
        .iter()
        .filter(|event| {
            matches!(&event.payload, EventPayload::InboxAccepted(accepted) if &accepted.message.id == id)
        })
        .count()
}

// B36/3.2.11: a caller-minted request id is an idempotency key.
#[tokio::test]
async fn a_repeated_user_request_id_is_delivered_once() {
    let world = world().await;
    world.cold_child("child").await;
    let id = MessageId::new("req-1");
    for _ in 0..2 {
        let accepted = world
            .runtime
            .prompt(
                UserPrompt {
                    child: sid("child"),
                    request_id: id.clone(),
                    content: vec![ContentBlock::text("once, please")],
                    attachments: Vec::new(),
                    client_time_zone: None,
                    delivery: PromptDelivery::Queue,
                },
                &TrustedHost,
                &CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(accepted.message_id, id);
        world.quiesce().await;
    }
    let events = dsh_core::SessionStore::load(world.store.as_ref(), &sid("child"))
        .await
        .unwrap()
        .events;
    assert_eq!(accepted_with(&events, &id), 1);
}

// B10/3.2.14: a resume's `subagent/start` names the provider that made the child.
#[tokio::test]
async fn a_resumed_activation_names_its_real_provider() {
    let world = world().await;
    world.cold_child("child").await;
    let (_subscription, mut events) = world.runtime.events().subscribe();
    world.tell("child", "again").await.unwrap();
    world.quiesce().await;
    let mut providers = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let SubagentEvent::Start(info) = event {
            providers.push(info.provider);
        }
    }
    assert_eq!(providers, ["local"]);
}

// B5/3.2.15: the child depth is checked arithmetic, never an overflow.
#[tokio::test]
async fn a_depth_that_would_overflow_is_refused() {
    let world = world().await;
    let mut header = SessionHeader::new(sid("deep"), world.dir());
    header.delegation_depth = u32::MAX;
    let deep = world.session(header).await;
    let mut spec = world.spec(None);
    spec.request.parent = deep.agent().clone();
    let err = world.runtime.start_activation(spec).await.unwrap_err();
    assert_eq!(err.code(), "INVALID_REQUEST", "{err}");
}

// B6/3.2.8: an external start is never "accepted then ignored": a preset
// reaches a provider that claims the capability (seed 002's resolved
// request extends the start request).
#[tokio::test]
async fn an_external_start_passes_its_preset_and_gets_the_route_under_its_options() {
    let world = world().await;
    let routed = Arc::new(ExternalProvider::new("routed").with_route(AgentRoute {
        provider: "remote".into(),
        model: "default-model".into(),
    }));
    world.runtime.register(routed.clone()).unwrap();
    let mut spec = world.spec(Some("preset"));
    spec.provider = "routed".into();
    spec.request.agent_preset = Some("reviewer".into());
    let run = world.runtime.start_activation(spec).await.unwrap();
    bounded(run.result()).await.unwrap();
    let seen = routed.seen_request().unwrap();
    assert_eq!(seen.agent_preset.as_deref(), Some("reviewer"));

    let mut spec = world.spec(Some("options"));
    spec.provider = "routed".into();
    spec.request.agent_options = Some(AgentOptions {
        model: Some("chosen".into()),
        ..AgentOptions::default()
    });
    let run = world.runtime.start_activation(spec).await.unwrap();
    bounded(run.result()).await.unwrap();
    let seen = routed.seen_options().unwrap();
    assert_eq!(seen.provider.as_deref(), Some("remote"));
    assert_eq!(seen.model.as_deref(), Some("chosen"));
}
