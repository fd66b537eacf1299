//! Behaviour of the reference agent loop: H1-H8 of BEHAVIOURS.md, bad input,
//! and the model-visible request the loop builds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use dsh_core::projection::{PendingInboxProjection, replay};
use dsh_core::{
    AgentError, AgentFactory, AgentOptions, AgentStatus, CancelCause, CancelOptions, Composition,
    ContentBlock, EventPayload, InboxTarget, Message, MessageSource, ModelError, ModelErrorKind,
    Preset, PresetCatalog, RegistryEvent, SessionStore, StopReason, ToolRestriction, UserMessage,
};
use dsh_harness::{Harness, JsonlStore, MemoryStore, Scripted, ScriptedModel, SystemPrompt};
use serde_json::json;
use support::*;
use tokio::sync::Semaphore;

fn memory() -> Arc<dyn SessionStore> {
    Arc::new(MemoryStore::new())
}

#[tokio::test]
async fn a_turn_appends_every_model_visible_fact() {
    let model = Arc::new(ScriptedModel::with_responses([Scripted::Text(
        "hello".into(),
    )]));
    let harness = harness(memory(), model.clone());
    let handle = create(&harness, "a").await;
    let agent = handle.agent().clone();
    agent.followup(UserMessage::user_text("hi")).await.unwrap();
    settle(&agent).await;
    assert_eq!(
        kinds(&agent.events()),
        [
            "inbox/accepted",
            "turn/start",
            "user/message",
            "inbox/claimed",
            "step/start",
            "assistant/message",
            "usage",
            "turn/end"
        ]
    );
    assert_eq!(stop_reasons(&agent.events()), ["completed"]);
    // The store holds exactly what the agent holds.
    let stored = harness.store().load(agent.id()).await.unwrap();
    assert_eq!(stored.events, agent.events());
}

// H1, H2
#[tokio::test]
async fn references_carry_the_epoch_and_the_registry_is_observable() {
    let model = Arc::new(ScriptedModel::new());
    let harness = harness(memory(), model);
    let registry = harness.registry().clone();
    let (_sub, mut seen) = registry.events().subscribe();

    let first = create(&harness, "a").await;
    let stale = first.agent().reference();
    assert!(registry.is_live(&stale));
    assert_eq!(registry.list(), std::slice::from_ref(&stale));
    first.dispose().await;
    first.dispose().await; // idempotent
    assert!(!registry.is_live(&stale));

    let second = harness.resume(resume_spec("a")).await.unwrap();
    let live = second.agent().reference();
    assert_eq!(live.id, stale.id);
    assert_ne!(live.epoch, stale.epoch);
    assert!(registry.is_live(&live));
    assert!(!registry.is_live(&stale), "an earlier epoch is stale");
    assert!(registry.resolve(&stale).is_none());
    assert!(registry.get(&stale.id).is_some());
    // Disposing the earlier handle again withdraws nothing: only the live
    // agent's own publication can.
    first.dispose().await;
    assert!(registry.is_live(&live));

    let mut events = Vec::new();
    while let Ok(event) = seen.try_recv() {
        events.push(event);
    }
    assert_eq!(
        events,
        [
            RegistryEvent::Published(stale.clone()),
            RegistryEvent::Disposed(stale),
            RegistryEvent::Published(live)
        ]
    );
}

#[tokio::test]
async fn a_second_live_agent_for_one_session_is_refused() {
    let harness = harness(memory(), Arc::new(ScriptedModel::new()));
    let _live = create(&harness, "a").await;
    let err = harness.resume(resume_spec("a")).await.unwrap_err();
    assert_eq!(err.code(), "ALREADY_LIVE");
    let err = harness.create(create_spec("a")).await.unwrap_err();
    assert_eq!(err.code(), "ALREADY_LIVE");
}

// H3
#[tokio::test]
async fn acceptance_is_durable_before_it_is_acknowledged_and_resume_delivers_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SessionStore> =
        Arc::new(JsonlStore::new(dir.path(), dsh_core::Durability::None).unwrap());
    let gate = Arc::new(Semaphore::new(0));
    let model = Arc::new(ScriptedModel::with_responses([Scripted::Gated {
        gate: gate.clone(),
        then: Box::new(Scripted::Text("first".into())),
    }]));
    let harness = harness(store.clone(), model.clone());
    let handle = create(&harness, "a").await;
    let agent = handle.agent().clone();

    let first = agent.followup(UserMessage::user_text("one")).await.unwrap();
    // The receipt exists on disk the moment it is returned.
    let on_disk = store.load(agent.id()).await.unwrap();
    assert!(on_disk.events.iter().any(|e| matches!(
        &e.payload, EventPayload::InboxAccepted(a) if a.message.id == first
    )));
    bounded(until(|| model.requests().len() == 1)).await;
    let second = agent.followup(UserMessage::user_text("two")).await.unwrap();
    let third = agent
        .followup(UserMessage::user_text("three"))
        .await
        .unwrap();
    assert_eq!(agent.pending(), [second.clone(), third.clone()]);

    // Stop mid-turn: the first message was claimed, the others were not.
    handle.dispose().await;
    let log = store.load(&id("a")).await.unwrap();
    let pending = replay(&PendingInboxProjection, &log.header, &log.events);
    let ids: Vec<_> = pending
        .items()
        .map(|item| item.message.id.clone())
        .collect();
    assert_eq!(ids, [second.clone(), third.clone()]);

    // A resume delivers accepted minus claimed, each exactly once.
    model.push(Scripted::Text("for two".into()));
    model.push(Scripted::Text("for three".into()));
    let resumed = harness.resume(resume_spec("a")).await.unwrap();
    let agent = resumed.agent().clone();
    settle(&agent).await;
    let events = agent.events();
    let claimed: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::InboxClaimed(ids) => Some(ids.message_ids.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(claimed, [first, second, third]);
    assert!(agent.pending().is_empty());
    assert_eq!(stop_reasons(&events), ["aborted", "completed", "completed"]);
}

// H4
#[tokio::test]
async fn steering_joins_at_the_next_step_and_injection_never_wakes() {
    let gate = Arc::new(Semaphore::new(0));
    let echo = Echo::new("echo");
    let model = Arc::new(ScriptedModel::with_responses([
        Scripted::Gated {
            gate: gate.clone(),
            then: Box::new(Scripted::ToolCalls {
                text: None,
                calls: vec![("echo".into(), json!({"text": "x"}))],
            }),
        },
        Scripted::Text("done".into()),
        Scripted::Text("second turn".into()),
    ]));
    let harness = Harness::builder(memory())
        .model(model.clone())
        .tool(echo.clone())
        .unwrap()
        .build()
        .unwrap();
    let handle = create(&harness, "a").await;
    let agent = handle.agent().clone();

    // Injected context on an idle agent waits and does not wake it.
    let mut arrivals = agent.observe_inbox();
    let context = agent
        .inject(UserMessage::user_text("context"))
        .await
        .unwrap();
    assert_eq!(agent.status(), AgentStatus::Idle);
    let arrival = arrivals.recv().await.unwrap();
    assert_eq!(arrival.message_id, context);
    assert!(!arrival.wake);
    assert_eq!(arrival.target, InboxTarget::NextStep);
    assert_eq!(
        agent.pending(),
        std::slice::from_ref(&context),
        "observing does not consume"
    );
    assert!(model.requests().is_empty());

    agent
        .followup(UserMessage::user_text("task"))
        .await
        .unwrap();
    assert_eq!(agent.status(), AgentStatus::Running);
    bounded(until(|| model.requests().len() == 1)).await;
    let steer = agent.steer(UserMessage::user_text("steer")).await.unwrap();
    gate.add_permits(1);
    settle(&agent).await;

    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one turn, two steps");
    let first: Vec<String> = requests[0].messages.iter().map(message_text).collect();
    let second: Vec<String> = requests[1].messages.iter().map(message_text).collect();
    // The turn opened with the injected context and the task.
    assert_eq!(first, ["context", "task"]);
    // Steering arrived after the tool result, at the step boundary.
    assert_eq!(second, ["context", "task", "", "echo: x", "steer"]);
    assert_eq!(echo.count(), 1);
    assert!(agent.pending().is_empty());
    assert!(!agent.pending().contains(&steer));
}

#[tokio::test]
async fn steering_an_idle_agent_starts_a_turn() {
    let model = Arc::new(ScriptedModel::with_responses([Scripted::Text("ok".into())]));
    let harness = harness(memory(), model.clone());
    let handle = create(&harness, "a").await;
    let agent = handle.agent().clone();
    agent.steer(UserMessage::user_text("now")).await.unwrap();
    settle(&agent).await;
    assert_eq!(model.requests().len(), 1);
}

// H5
#[tokio::test]
async fn interrupt_keeping_the_inbox_parks_pending_work_until_a_waking_send() {
    let model = Arc::new(ScriptedModel::with_responses([Scripted::Hang]));
    let harness = harness(memory(), model.clone());
    let handle = create(&harness, "a").await;
    let agent = handle.agent().clone();
    let claimed = agent.followup(UserMessage::user_text("one")).await.unwrap();
    bounded(until(|| model.requests().len() == 1)).await;
    let parked = agent.followup(UserMessage::user_text("two")).await.unwrap();

    agent.cancel(CancelCause::User, CancelOptions { keep_inbox: true });
    settle(&agent).await;
    assert_eq!(stop_reasons(&agent.events()), ["aborted"]);
    // Claimed work is not requeued; pending work stays, and nothing starts.
    assert_eq!(agent.pending(), std::slice::from_ref(&parked));
    tokio::task::yield_now().await;
    assert_eq!(agent.status(), AgentStatus::Idle);
    assert_eq!(model.requests().len(), 1);

    // A non-waking send leaves it parked; a waking one releases the queue in order.
    model.push(Scripted::Text("for two".into()));
    model.push(Scripted::Text("for three".into()));
    agent
        .send(
            UserMessage::user_text("quiet"),
            InboxTarget::NextTurn,
            false,
        )
        .await
        .unwrap();
    assert_eq!(agent.status(), AgentStatus::Idle);
    agent
        .followup(UserMessage::user_text("three"))
        .await
        .unwrap();
    settle(&agent).await;
    let users: Vec<String> = agent
        .events()
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::UserMessage(u) => {
                Some(dsh_core::content::joined_text(&u.message.content))
            }
            _ => None,
        })
        .collect();
    assert_eq!(users, ["one", "two", "quiet", "three"]);
    let claims = agent
        .events()
        .iter()
        .filter(|e| matches!(&e.payload, EventPayload::InboxClaimed(c) if c.message_ids.contains(&claimed)))
        .count();
    assert_eq!(claims, 1, "the interrupted message is never claimed twice");
}

#[tokio::test]
async fn interrupt_without_keeping_the_inbox_discards_pending_work() {
    let model = Arc::new(ScriptedModel::with_responses([Scripted::Hang]));
    let harness = harness(memory(), model.clone());
    let handle = create(&harness, "a").await;
    let agent = handle.agent().clone();
    agent.followup(UserMessage::user_text("one")).await.unwrap();
    bounded(until(|| model.requests().len() == 1)).await;
    let dropped = agent.followup(UserMessage::user_text("two")).await.unwrap();
    agent.cancel(CancelCause::Parent, CancelOptions::default());
    settle(&agent).await;
    harness.tasks().close();
    harness.tasks().wait().await;
    assert!(agent.pending().is_empty());
    assert!(agent.events().iter().any(|e| matches!(
        &e.payload, EventPayload::InboxDiscarded(d) if d.message_ids == [dropped.clone()]
    )));
    // Cancelling an idle agent is a no-op.
    agent.cancel(CancelCause::User, CancelOptions::default());
    assert_eq!(agent.status(), AgentStatus::Idle);
}

fn presets() -> PresetCatalog {
    PresetCatalog::new().with(Preset {
        id: "reviewer".into(),
        persona: Some("You review {{project}} code.".into()),
        tools: Some(["read".to_owned(), "grep".to_owned()].into()),
        options: AgentOptions {
            model: Some("review-model".into()),
            ..AgentOptions::default()
        },
    })
}

fn composed_harness(
    store: Arc<dyn SessionStore>,
    model: Arc<ScriptedModel>,
) -> (Harness, Arc<Echo>) {
    let write = Echo::new("write");
    let harness = Harness::builder(store)
        .model(model)
        .tool(Echo::new("read"))
        .unwrap()
        .tool(Echo::new("grep"))
        .unwrap()
        .tool(write.clone())
        .unwrap()
        .presets(presets())
        .prompt(
            SystemPrompt::new()
                .persona("You are a helpful assistant.")
                .section("rules", "Work in {{project}}.")
                .var("project", "dsh"),
        )
        .build()
        .unwrap();
    (harness, write)
}

// H6
#[tokio::test]
async fn presets_are_recorded_and_restored_with_per_agent_shadowing() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SessionStore> =
        Arc::new(JsonlStore::new(dir.path(), dsh_core::Durability::TurnBoundary).unwrap());
    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("ok".into())));
    let (harness, _) = composed_harness(store.clone(), model.clone());

    let mut spec = create_spec("r");
    spec.header.composition = Composition {
        preset: Some("reviewer".into()),
        persona: None,
        tools: Some(ToolRestriction::deny(["grep"])),
        options: AgentOptions::default(),
    };
    let handle = harness.create(spec).await.unwrap();
    handle
        .agent()
        .followup(UserMessage::user_text("go"))
        .await
        .unwrap();
    settle(handle.agent()).await;
    handle.dispose().await;

    let header = store.header(&id("r")).await.unwrap();
    assert_eq!(header.composition.preset.as_deref(), Some("reviewer"));

    let resumed = harness.resume(resume_spec("r")).await.unwrap();
    resumed
        .agent()
        .followup(UserMessage::user_text("again"))
        .await
        .unwrap();
    settle(resumed.agent()).await;

    let requests = model.requests();
    for request in &requests {
        assert_eq!(request.system, "You review dsh code.\n\nWork in dsh.");
        assert_eq!(request.model.as_deref(), Some("review-model"));
        let tools: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(tools, ["read"], "preset set narrowed by the restriction");
    }

    // A persona given for one agent shadows the preset's, for that agent only.
    let mut spec = create_spec("s");
    spec.header.composition = Composition {
        preset: Some("reviewer".into()),
        persona: Some("You are terse.".into()),
        ..Composition::default()
    };
    let shadowed = harness.create(spec).await.unwrap();
    shadowed
        .agent()
        .followup(UserMessage::user_text("go"))
        .await
        .unwrap();
    settle(shadowed.agent()).await;
    let last = model.requests().pop().unwrap();
    assert_eq!(last.system, "You are terse.\n\nWork in dsh.");
}

// H7
#[tokio::test]
async fn a_restricted_tool_is_hidden_and_refuses_to_run() {
    let model = Arc::new(ScriptedModel::with_responses([
        Scripted::ToolCalls {
            text: None,
            calls: vec![("write".into(), json!({"text": "x"}))],
        },
        Scripted::Text("ok".into()),
    ]));
    let (harness, write) = composed_harness(memory(), model.clone());
    let mut spec = create_spec("a");
    spec.header.composition.tools = Some(ToolRestriction::allow(["read"]));
    let handle = harness.create(spec).await.unwrap();
    handle
        .agent()
        .followup(UserMessage::user_text("go"))
        .await
        .unwrap();
    settle(handle.agent()).await;
    let requests = model.requests();
    assert_eq!(requests[0].tools.len(), 1);
    assert_eq!(requests[0].tools[0].name, "read");
    assert_eq!(write.count(), 0, "the hidden tool never ran");
    let result = requests[1].messages.last().unwrap();
    assert!(matches!(result, Message::Tool { is_error: true, .. }));
    assert!(
        message_text(result).contains("not available"),
        "{}",
        message_text(result)
    );
}

#[tokio::test]
async fn an_unknown_name_in_a_restriction_fails_creation_and_leaves_nothing() {
    let store = memory();
    let (harness, _) = composed_harness(store.clone(), Arc::new(ScriptedModel::new()));
    let mut spec = create_spec("a");
    spec.header.composition.tools = Some(ToolRestriction::allow(["read", "nonexistent"]));
    let err = harness.create(spec).await.unwrap_err();
    assert_eq!(err.code(), "COMPOSITION");
    assert!(err.to_string().contains("nonexistent"), "{err}");
    assert!(store.list().await.unwrap().is_empty());
    assert!(harness.registry().is_empty());
}

// H8
#[tokio::test]
async fn an_unknown_template_variable_fails_creation_and_leaves_nothing() {
    let store = memory();
    let (harness, _) = composed_harness(store.clone(), Arc::new(ScriptedModel::new()));
    let mut spec = create_spec("a");
    spec.header.composition.persona = Some("You serve {{customer}}.".into());
    let err = harness.create(spec).await.unwrap_err();
    assert!(err.to_string().contains("customer"), "{err}");
    assert!(store.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn an_unknown_preset_fails_creation() {
    let (harness, _) = composed_harness(memory(), Arc::new(ScriptedModel::new()));
    let mut spec = create_spec("a");
    spec.header.composition.preset = Some("ghost".into());
    let err = harness.create(spec).await.unwrap_err();
    assert!(err.to_string().contains("unknown preset `ghost`"), "{err}");
}

/// An open-ended catalog takes an id it does not hold as an empty preset:
/// an agent whose preset was withdrawn resumes from what its header
/// records, its own persona included.
#[tokio::test]
async fn an_open_ended_catalog_resumes_an_agent_whose_preset_is_gone() {
    let store = memory();
    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("ok".into())));
    let mut spec = create_spec("a");
    spec.header.composition.preset = Some("ghost".into());
    spec.header.composition.persona = Some("You are the ghost's reviewer.".into());
    let build = |presets: PresetCatalog| {
        Harness::builder(store.clone())
            .model(model.clone())
            .presets(presets)
            .build()
            .unwrap()
    };
    let creating = build(PresetCatalog::new().with(Preset {
        id: "ghost".into(),
        persona: None,
        tools: None,
        options: AgentOptions::default(),
    }));
    creating.create(spec).await.unwrap().dispose().await;
    let closed = build(PresetCatalog::new()).resume(resume_spec("a")).await;
    let err = closed.err().unwrap();
    assert!(err.to_string().contains("unknown preset `ghost`"), "{err}");
    let resumed = build(PresetCatalog::new().open_ended())
        .resume(resume_spec("a"))
        .await
        .unwrap();
    resumed
        .agent()
        .followup(UserMessage::user_text("again"))
        .await
        .unwrap();
    settle(resumed.agent()).await;
    let last = model.requests().pop().unwrap();
    assert!(
        last.system.starts_with("You are the ghost's reviewer."),
        "{}",
        last.system
    );
}

#[tokio::test]
async fn cancelled_creation_leaves_no_session_and_no_agent() {
    let store = memory();
    let harness = harness(store.clone(), Arc::new(ScriptedModel::new()));
    let spec = create_spec("a");
    spec.cancel.cancel();
    let err = harness.create(spec).await.unwrap_err();
    assert!(matches!(err, AgentError::Cancelled));
    assert!(store.list().await.unwrap().is_empty());
    assert!(harness.registry().is_empty());
    assert!(harness.tasks().is_empty());
}

#[tokio::test]
async fn bad_tool_input_and_unknown_tools_go_back_to_the_model() {
    let echo = Echo::new("echo");
    let model = Arc::new(ScriptedModel::with_responses([
        Scripted::ToolCalls {
            text: Some("trying".into()),
            calls: vec![
                ("echo".into(), json!({"text": 5, "extra": true})),
                ("missing".into(), json!({})),
            ],
        },
        Scripted::ToolCalls {
            text: None,
            calls: vec![("echo".into(), json!({"text": "fixed"}))],
        },
        Scripted::Text("done".into()),
    ]));
    let harness = Harness::builder(memory())
        .model(model.clone())
        .tool(echo.clone())
        .unwrap()
        .build()
        .unwrap();
    let handle = create(&harness, "a").await;
    handle
        .agent()
        .followup(UserMessage::user_text("go"))
        .await
        .unwrap();
    settle(handle.agent()).await;
    assert_eq!(echo.count(), 1, "only the valid call ran");
    assert_eq!(stop_reasons(&handle.agent().events()), ["completed"]);
    let second = &model.requests()[1];
    let results: Vec<(bool, String)> = second
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { is_error, .. } => Some((*is_error, message_text(m))),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|(is_error, _)| *is_error));
    assert!(
        results[0].1.contains("Invalid arguments"),
        "{}",
        results[0].1
    );
    assert!(
        results[1].1.contains("Unknown tool `missing`"),
        "{}",
        results[1].1
    );
}

#[tokio::test]
async fn model_failures_end_the_turn_with_a_stop_reason_and_the_agent_lives_on() {
    let model = Arc::new(ScriptedModel::with_responses([
        Scripted::Fail(ModelError::new(
            ModelErrorKind::Transport,
            "connection reset",
        )),
        Scripted::MaxTokens("partial".into()),
        Scripted::Refusal("no".into()),
        Scripted::FailMidStream {
            text: "half".into(),
            error: ModelError::new(ModelErrorKind::Protocol, "bad chunk"),
        },
        Scripted::Text("fine".into()),
    ]));
    let harness = harness(memory(), model);
    let handle = create(&harness, "a").await;
    let agent = handle.agent().clone();
    for prompt in ["1", "2", "3", "4", "5"] {
        agent
            .followup(UserMessage::user_text(prompt))
            .await
            .unwrap();
        settle(&agent).await;
    }
    let events = agent.events();
    assert_eq!(
        stop_reasons(&events),
        ["error", "max-tokens", "refusal", "error", "completed"]
    );
    let diagnostics: Vec<Option<String>> = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::TurnEnd(end) => Some(end.diagnostic.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        diagnostics[0].as_deref(),
        Some("transport error: connection reset")
    );
}

#[tokio::test]
async fn a_tool_can_end_the_turn() {
    let capture = Echo::ending_turn("capture");
    let model = Arc::new(ScriptedModel::with_responses([Scripted::ToolCalls {
        text: None,
        calls: vec![("capture".into(), json!({"text": "result"}))],
    }]));
    let harness = harness(memory(), model.clone());
    let mut spec = create_spec("a");
    spec.setup.tools.push(capture.clone());
    let handle = harness.create(spec).await.unwrap();
    handle
        .agent()
        .followup(UserMessage::user_text("go"))
        .await
        .unwrap();
    settle(handle.agent()).await;
    assert_eq!(model.requests().len(), 1, "no request after the capture");
    assert_eq!(capture.count(), 1);
    assert_eq!(stop_reasons(&handle.agent().events()), ["completed"]);
}

#[tokio::test]
async fn images_are_refused_by_a_text_only_model() {
    let harness = harness(memory(), Arc::new(ScriptedModel::new()));
    let handle = create(&harness, "a").await;
    let image = UserMessage::new(
        vec![ContentBlock::Image {
            media_type: "image/png".into(),
            data: "iVBORw0KGgo=".into(),
        }],
        MessageSource::User,
    );
    let err = handle.agent().followup(image).await.unwrap_err();
    assert_eq!(err.code(), "INVALID_INPUT");
    assert!(handle.agent().events().is_empty(), "nothing was accepted");
}

#[tokio::test]
async fn extension_events_are_recorded_and_builtin_types_are_reserved() {
    let harness = harness(memory(), Arc::new(ScriptedModel::new()));
    let handle = create(&harness, "a").await;
    let agent = handle.agent();
    let seq = agent
        .record("subagent/child", json!({"name": "x"}).into())
        .await
        .unwrap();
    assert_eq!(seq, 0);
    let err = agent
        .record("turn/end", json!({}).into())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "RESERVED_EVENT_TYPE");
    let stored = harness.store().load(agent.id()).await.unwrap();
    assert_eq!(kinds(&stored.events), ["subagent/child"]);
}

#[tokio::test]
async fn a_turn_left_open_by_a_crash_is_closed_as_aborted_on_resume() {
    let store = memory();
    let header = dsh_core::SessionHeader::new(id("a"), "/");
    let log = store.create(&header, &[]).await.unwrap();
    let message = UserMessage::user_text("hi");
    let events = [
        EventPayload::InboxAccepted(dsh_core::session::InboxAccepted {
            message: message.clone(),
            target: InboxTarget::NextTurn,
            wake: true,
        }),
        EventPayload::TurnStart(dsh_core::session::TurnStart { turn: 0 }),
        EventPayload::InboxClaimed(dsh_core::session::InboxIds {
            message_ids: vec![message.id.clone()],
        }),
    ];
    let events: Vec<_> = events
        .into_iter()
        .enumerate()
        .map(|(seq, payload)| dsh_core::SessionEvent {
            seq: seq as u64,
            time: 0,
            payload,
        })
        .collect();
    log.append(&events).await.unwrap();
    drop(log);
    let model = Arc::new(ScriptedModel::new());
    let harness = harness(store, model.clone());
    let handle = harness.resume(resume_spec("a")).await.unwrap();
    settle(handle.agent()).await;
    assert_eq!(stop_reasons(&handle.agent().events()), ["aborted"]);
    assert!(model.requests().is_empty(), "claimed work is not redone");
}

#[tokio::test]
async fn the_model_visible_request_is_pinned() {
    let model = Arc::new(ScriptedModel::with_responses([
        Scripted::ToolCalls {
            text: Some("Let me check.".into()),
            calls: vec![("read".into(), json!({"text": "README.md"}))],
        },
        Scripted::Text("It is a harness.".into()),
    ]));
    let (harness, _) = composed_harness(memory(), model.clone());
    let mut spec = create_spec("a");
    spec.header.composition.options.max_output_tokens = Some(512);
    let handle = harness.create(spec).await.unwrap();
    let agent = handle.agent().clone();
    agent
        .followup(UserMessage::user_text("What is this project?"))
        .await
        .unwrap();
    settle(&agent).await;
    // Model-visible messages carry no random ids: the request is deterministic.
    let request = model.requests().pop().unwrap();
    // Keys sorted: serde_json's `preserve_order` may be on in a workspace
    // build (a dependency enables it), and the pinned content must not
    // depend on which crates happen to be built together.
    insta::with_settings!({ sort_maps => true }, {
        // Through serde_json first: a tool call's input serialises as its
        // JSON text only there.
        let request = serde_json::to_value(&request).unwrap();
        insta::assert_json_snapshot!("model_visible_request", request);
    });
    assert_eq!(
        stop_reasons(&agent.events()),
        [StopReason::COMPLETED.to_string()]
    );
}

#[tokio::test]
async fn input_pending_in_a_seed_is_not_delivered_to_the_seeded_session() {
    let store = memory();
    let model = Arc::new(ScriptedModel::new());
    let harness = harness(store, model.clone());
    let foreign = UserMessage::user_text("meant for the parent");
    let seed: Vec<dsh_core::SessionEvent> = [
        EventPayload::TurnStart(dsh_core::session::TurnStart { turn: 0 }),
        EventPayload::InboxAccepted(dsh_core::session::InboxAccepted {
            message: foreign,
            target: InboxTarget::NextTurn,
            wake: true,
        }),
        EventPayload::TurnEnd(dsh_core::session::TurnEnd {
            turn: 0,
            stop_reason: StopReason::COMPLETED,
            diagnostic: None,
        }),
    ]
    .into_iter()
    .enumerate()
    .map(|(seq, payload)| dsh_core::SessionEvent {
        seq: seq as u64,
        time: 0,
        payload,
    })
    .collect();
    let mut spec = create_spec("fork");
    spec.seed = seed;
    let handle = harness.create(spec).await.unwrap();
    assert_eq!(handle.agent().header().seed_len, 3);
    assert!(handle.agent().pending().is_empty());
    handle.dispose().await;
    let resumed = harness.resume(resume_spec("fork")).await.unwrap();
    assert!(resumed.agent().pending().is_empty());
    assert_eq!(resumed.agent().status(), AgentStatus::Idle);
    assert!(model.requests().is_empty());
}

#[tokio::test]
async fn a_seed_must_be_contiguous_and_balanced() {
    let harness = harness(memory(), Arc::new(ScriptedModel::new()));
    let mut spec = create_spec("a");
    spec.seed = vec![dsh_core::SessionEvent {
        seq: 0,
        time: 0,
        payload: EventPayload::TurnStart(dsh_core::session::TurnStart { turn: 0 }),
    }];
    let err = harness.create(spec).await.unwrap_err();
    assert_eq!(err.code(), "INVALID_SEED");
    assert!(harness.store().list().await.unwrap().is_empty());
}

#[tokio::test]
async fn status_transitions_are_observable() {
    let gate = Arc::new(Semaphore::new(0));
    let model = Arc::new(ScriptedModel::with_responses([Scripted::Gated {
        gate: gate.clone(),
        then: Box::new(Scripted::Text("ok".into())),
    }]));
    let harness = harness(memory(), model);
    let handle = create(&harness, "a").await;
    let agent = handle.agent().clone();
    let mut status = agent.watch_status();
    assert_eq!(*status.borrow_and_update(), AgentStatus::Idle);
    agent.followup(UserMessage::user_text("go")).await.unwrap();
    status.changed().await.unwrap();
    assert_eq!(*status.borrow_and_update(), AgentStatus::Running);
    gate.add_permits(1);
    status.changed().await.unwrap();
    assert_eq!(*status.borrow_and_update(), AgentStatus::Idle);
    // Disposal leaves no driver task behind.
    handle.dispose().await;
    assert!(harness.tasks().is_empty());
    assert!(matches!(
        agent.followup(UserMessage::user_text("late")).await,
        Err(AgentError::Disposed(_))
    ));
}

#[tokio::test]
async fn a_tool_added_after_build_reaches_agents_composed_afterwards() {
    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("ok".into())));
    let harness = harness(memory(), model.clone());
    let before = create(&harness, "before").await;
    harness.add_tool(Echo::new("late")).unwrap();
    let refused = harness.add_tool(Echo::new("late")).unwrap_err();
    assert_eq!(refused.code(), "DUPLICATE_TOOL");
    let after = create(&harness, "after").await;
    for handle in [&before, &after] {
        handle
            .agent()
            .followup(UserMessage::user_text("go"))
            .await
            .unwrap();
        settle(handle.agent()).await;
    }
    let offered: Vec<Vec<String>> = model
        .requests()
        .iter()
        .map(|request| request.tools.iter().map(|tool| tool.name.clone()).collect())
        .collect();
    assert_eq!(offered, [vec![], vec!["late".to_owned()]]);
}

/// Records what a [`dsh_harness::TextObserver`] hears, with how many events
/// the agent's log held at each delta.
struct Heard {
    agent: std::sync::OnceLock<Arc<dyn dsh_core::Agent>>,
    deltas: std::sync::Mutex<Vec<(String, String, usize)>>,
}

impl dsh_harness::TextObserver for Heard {
    fn text_delta(&self, agent: &dsh_core::SessionId, delta: &str) {
        let logged = self.agent.get().map_or(0, |a| a.events().len());
        self.deltas
            .lock()
            .unwrap()
            .push((agent.to_string(), delta.to_owned(), logged));
    }
}

// The streamed text reaches an observer in order, before the step's text
// is recorded.
#[tokio::test]
async fn a_text_observer_hears_the_stream_before_the_step_is_recorded() {
    let model = Arc::new(ScriptedModel::with_responses([Scripted::Text(
        "hello world".into(),
    )]));
    let heard = Arc::new(Heard {
        agent: std::sync::OnceLock::new(),
        deltas: std::sync::Mutex::new(Vec::new()),
    });
    let harness = Harness::builder(memory())
        .model(model)
        .text_observer(heard.clone())
        .build()
        .unwrap();
    let handle = create(&harness, "a").await;
    let agent = handle.agent().clone();
    let _ = heard.agent.set(agent.clone());
    agent.followup(UserMessage::user_text("hi")).await.unwrap();
    settle(&agent).await;
    let deltas = heard.deltas.lock().unwrap().clone();
    let text: String = deltas.iter().map(|(_, d, _)| d.as_str()).collect();
    assert_eq!(text, "hello world");
    assert!(deltas.len() > 1, "the scripted model streams in chunks");
    assert!(deltas.iter().all(|(id, _, _)| id == "a"));
    let recorded = agent
        .events()
        .iter()
        .position(|e| matches!(e.payload, EventPayload::AssistantMessage(_)))
        .unwrap();
    assert!(
        deltas.iter().all(|(_, _, logged)| *logged <= recorded),
        "every delta came before the assistant message was recorded: {deltas:?}"
    );
}
