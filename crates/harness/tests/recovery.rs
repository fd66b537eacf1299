//! What the loop finishes or keeps when a turn is cut short: a tool call a
//! crash left without a result is answered on resume (B53); a turn that
//! loops on a tool ends at its step limit (B55); the text a step streamed
//! before it was aborted or failed is kept (B13); a discarding interrupt
//! stays discarded across a disposal at once; a claim batch torn between a
//! message and its claim delivers the message exactly once; and a header
//! written by a newer build (unknown option fields) still opens.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{
    Agent, AgentFactory, AgentOptions, CancelCause, CancelOptions, Durability, EventPayload,
    InboxTarget, Message, ModelError, ModelErrorKind, SessionEvent, SessionStore, StopReason, Tool,
    ToolContext, ToolError, ToolOutput, UserMessage,
};
use dsh_harness::{Harness, JsonlStore, LoopAgent, MemoryStore, Scripted, ScriptedModel};
use serde_json::{Value, json};
use support::*;
use tokio::sync::Semaphore;

fn memory() -> Arc<dyn SessionStore> {
    Arc::new(MemoryStore::new())
}

async fn dispose(agent: &Arc<dyn Agent>) {
    let agent = agent.as_any().downcast_ref::<LoopAgent>().unwrap();
    bounded(agent.dispose()).await;
}

fn assistant_texts(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::AssistantMessage(entry) => {
                Some(dsh_core::content::joined_text(&entry.content))
            }
            _ => None,
        })
        .collect()
}

/// A tool that signals when it starts and then never returns.
struct Stuck {
    started: Arc<Semaphore>,
}

#[async_trait]
impl Tool for Stuck {
    fn name(&self) -> &str {
        "stuck"
    }

    fn description(&self) -> String {
        "Never returns.".into()
    }

    fn input_schema(&self) -> Value {
        json!({"type": "object", "additionalProperties": false})
    }

    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        self.started.add_permits(1);
        std::future::pending().await
    }
}

// B53, field-run items 1 and 2: the log is cut right after a tool call (a
// copy taken while the tool runs, as a SIGKILL leaves it). On resume the
// call gets an error result before the turn is closed, so the next request
// answers every call.
#[tokio::test]
async fn b53_a_tool_call_cut_by_a_crash_gets_an_error_result_on_resume() {
    let live_dir = tempfile::tempdir().unwrap();
    let crashed_dir = tempfile::tempdir().unwrap();
    let live_store = Arc::new(JsonlStore::new(live_dir.path(), Durability::None).unwrap());
    let started = Arc::new(Semaphore::new(0));
    let model = Arc::new(ScriptedModel::with_responses([Scripted::ToolCalls {
        text: None,
        calls: vec![("stuck".into(), json!({}))],
    }]));
    let live = Harness::builder(live_store.clone())
        .model(model)
        .tool(Arc::new(Stuck {
            started: started.clone(),
        }))
        .unwrap()
        .build()
        .unwrap();
    let agent = create(&live, "a").await.agent().clone();
    agent.followup(UserMessage::user_text("go")).await.unwrap();
    let _permit = bounded(started.acquire()).await.unwrap();
    // The crash image: the log as it is while the tool runs.
    let path = live_store.log_path(agent.id());
    std::fs::copy(&path, crashed_dir.path().join(path.file_name().unwrap())).unwrap();
    dispose(&agent).await;

    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("ok".into())));
    let store = Arc::new(JsonlStore::new(crashed_dir.path(), Durability::None).unwrap());
    let harness = Harness::builder(store.clone())
        .model(model.clone())
        .build()
        .unwrap();
    let resumed = harness.resume(resume_spec("a")).await.unwrap();
    let resumed = resumed.agent().clone();
    let events = resumed.events();
    let tail: Vec<String> = kinds(&events).into_iter().rev().take(3).rev().collect();
    assert_eq!(tail, ["tool/call", "tool/result", "turn/end"]);
    let Some(EventPayload::ToolResult(result)) = events.iter().rev().nth(1).map(|e| &e.payload)
    else {
        panic!("no tool result");
    };
    assert!(result.is_error);
    assert_eq!(
        dsh_core::content::joined_text(&result.content),
        dsh_harness::harness::INTERRUPTED_TOOL_CALL
    );
    assert_eq!(stop_reasons(&events), ["aborted"]);
    assert_every_call_answered(&events, "resumed");

    resumed
        .followup(UserMessage::user_text("and now?"))
        .await
        .unwrap();
    bounded(resumed.wait_idle()).await;
    let requests = model.requests();
    let messages = &requests.last().unwrap().messages;
    let calls_at = messages
        .iter()
        .position(|m| matches!(m, Message::Assistant { tool_calls, .. } if !tool_calls.is_empty()))
        .unwrap();
    assert!(
        matches!(&messages[calls_at + 1], Message::Tool { call_id, is_error: true, .. }
            if call_id.as_str() == "call-1"),
        "{messages:?}"
    );
    every_line_parses(&store.log_path(resumed.id()));
    dispose(&resumed).await;
}

fn looping_model() -> Arc<ScriptedModel> {
    Arc::new(
        ScriptedModel::new()
            .without_recording()
            .responder(|_| Scripted::ToolCalls {
                text: None,
                calls: vec![("echo".into(), json!({"text": "again"}))],
            }),
    )
}

fn looping_harness(defaults: AgentOptions) -> Harness {
    Harness::builder(memory())
        .model(looping_model())
        .tool(Echo::new("echo"))
        .unwrap()
        .defaults(defaults)
        .build()
        .unwrap()
}

fn step_starts(events: &[SessionEvent]) -> usize {
    kinds(events).iter().filter(|k| *k == "step/start").count()
}

// B55 and field-run item 1: a model that calls a tool for ever ends at the
// limit, with its own stop reason, every call answered.
#[tokio::test]
async fn b55_a_turn_that_loops_on_a_tool_ends_at_its_step_limit() {
    let harness = looping_harness(AgentOptions {
        max_turn_steps: Some(3),
        ..AgentOptions::default()
    });
    let agent = create(&harness, "a").await.agent().clone();
    let events = turn(&agent, "loop").await;
    assert_eq!(step_starts(&events), 3);
    assert_eq!(stop_reasons(&events), [StopReason::STEP_LIMIT.as_str()]);
    assert_every_call_answered(&events, "step limit");
    let Some(EventPayload::TurnEnd(end)) = events.last().map(|e| &e.payload) else {
        panic!("no turn end");
    };
    assert!(end.diagnostic.as_deref().unwrap().contains("3 steps"));
    // The next turn gets the whole budget again.
    agent
        .followup(UserMessage::user_text("more"))
        .await
        .unwrap();
    bounded(agent.wait_idle()).await;
    assert_eq!(step_starts(&agent.events()), 6);
    dispose(&agent).await;
}

// The limit is per agent: a composition overrides the host's, and with
// none anywhere the default applies.
#[tokio::test]
async fn the_step_limit_is_overridable_per_agent_and_defaults_to_200() {
    let harness = looping_harness(AgentOptions {
        max_turn_steps: Some(5),
        ..AgentOptions::default()
    });
    let mut spec = create_spec("short");
    spec.header.composition.options.max_turn_steps = Some(2);
    let short = harness.create(spec).await.unwrap().agent().clone();
    short
        .followup(UserMessage::user_text("loop"))
        .await
        .unwrap();
    bounded(short.wait_idle()).await;
    assert_eq!(step_starts(&short.events()), 2);
    dispose(&short).await;

    let mut spec = create_spec("none");
    spec.header.composition.options.max_turn_steps = Some(0);
    let refused = harness.create(spec).await.unwrap_err();
    assert_eq!(refused.code(), "COMPOSITION", "{refused}");

    let harness = looping_harness(AgentOptions::default());
    let agent = create(&harness, "default").await.agent().clone();
    agent
        .followup(UserMessage::user_text("loop"))
        .await
        .unwrap();
    bounded(agent.wait_idle()).await;
    assert_eq!(
        step_starts(&agent.events()),
        dsh_core::options::DEFAULT_MAX_TURN_STEPS as usize
    );
    assert_eq!(stop_reasons(&agent.events()), ["step-limit"]);
    dispose(&agent).await;
}

// B13: the text an aborted step streamed is its assistant message.
#[tokio::test]
async fn b13_the_text_an_aborted_step_streamed_is_kept() {
    let stalled = Arc::new(Semaphore::new(0));
    let model = Arc::new(ScriptedModel::with_responses([Scripted::Stall {
        text: "I have found three of the".into(),
        stalled: stalled.clone(),
    }]));
    let harness = harness(memory(), model);
    let agent = create(&harness, "a").await.agent().clone();
    agent
        .followup(UserMessage::user_text("look"))
        .await
        .unwrap();
    let _stalled = bounded(stalled.acquire()).await.unwrap();
    agent.cancel(CancelCause::User, CancelOptions::default());
    bounded(agent.wait_idle()).await;
    let events = agent.events();
    assert_eq!(assistant_texts(&events), ["I have found three of the"]);
    assert_eq!(stop_reasons(&events), ["aborted"]);
    dispose(&agent).await;
}

// B13: and so is the text of a step whose stream failed.
#[tokio::test]
async fn b13_the_text_a_failed_step_streamed_is_kept() {
    let model = Arc::new(ScriptedModel::with_responses([Scripted::FailMidStream {
        text: "partial".into(),
        error: ModelError::new(ModelErrorKind::Transport, "connection reset"),
    }]));
    let harness = harness(memory(), model);
    let agent = create(&harness, "a").await.agent().clone();
    let events = turn(&agent, "look").await;
    assert_eq!(assistant_texts(&events), ["partial"]);
    assert_eq!(stop_reasons(&events), ["error"]);
    dispose(&agent).await;
}

// runtime.md §3.1.5: interrupt without keeping the inbox, then dispose at
// once; on resume the discarded items do not come back. Whether a detached
// discard write loses to the disposal depends on the schedule, so this runs
// many rounds on two workers (the detached-task version lost within ten).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarding_interrupt_survives_an_immediate_dispose() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..300 {
        let store = Arc::new(JsonlStore::new(dir.path(), Durability::None).unwrap());
        let model = Arc::new(ScriptedModel::new().responder(|request| {
            if last_user_text(request) == "first" {
                Scripted::Hang
            } else {
                Scripted::Text("ran".into())
            }
        }));
        let harness = harness(store.clone(), model.clone());
        let name = format!("a{round}");
        let agent = create(&harness, &name).await.agent().clone();
        agent
            .followup(UserMessage::user_text("first"))
            .await
            .unwrap();
        bounded(until(|| model.requests().len() == 1)).await;
        for (text, target) in [
            ("queued turn", InboxTarget::NextTurn),
            ("queued step", InboxTarget::NextStep),
        ] {
            agent
                .send(UserMessage::user_text(text), target, false)
                .await
                .unwrap();
        }
        agent.cancel(CancelCause::User, CancelOptions { keep_inbox: false });
        dispose(&agent).await;
        harness.shutdown().await;

        let resumed = harness.resume(resume_spec(&name)).await.unwrap();
        let resumed = resumed.agent().clone();
        assert!(resumed.pending().is_empty(), "round {round}");
        bounded(resumed.wait_idle()).await;
        assert_eq!(
            model.requests().len(),
            1,
            "round {round}: a discarded item ran"
        );
        dispose(&resumed).await;
    }
}

/// Cut the JSONL log of `id` right before its first line of type `kind`.
fn cut_before(store: &JsonlStore, id: &str, kind: &str) {
    let path = store.log_path(&support::id(id));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut kept = String::new();
    for line in text.lines() {
        if line.contains(&format!("\"type\":\"{kind}\"")) {
            break;
        }
        kept.push_str(line);
        kept.push('\n');
    }
    std::fs::write(&path, kept).unwrap();
}

// runtime.md §3.1.3: a claim batch torn after the message and before its
// claim (a crash mid-write) delivers the message exactly once.
#[tokio::test]
async fn a_claim_batch_torn_before_its_claim_delivers_the_message_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(JsonlStore::new(dir.path(), Durability::None).unwrap());
    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("ok".into())));
    let harness = harness(store.clone(), model.clone());
    let agent = create(&harness, "a").await.agent().clone();
    let id = agent
        .followup(UserMessage::user_text("only once"))
        .await
        .unwrap();
    bounded(agent.wait_idle()).await;
    dispose(&agent).await;
    cut_before(&store, "a", "inbox/claimed");

    let resumed = harness.resume(resume_spec("a")).await.unwrap();
    let resumed = resumed.agent().clone();
    bounded(resumed.wait_idle()).await;
    let delivered = resumed
        .events()
        .iter()
        .filter(
            |e| matches!(&e.payload, EventPayload::UserMessage(entry) if entry.message.id == id),
        )
        .count();
    assert_eq!(delivered, 1);
    assert!(resumed.pending().is_empty());
    assert_eq!(model.requests().len(), 1, "the message ran twice");
    dispose(&resumed).await;
}

// runtime.md §3.1.9: a header a newer build wrote, with option fields this
// build does not know, opens and resumes; model input stays strict (an
// argument the tool's schema does not name is refused).
#[tokio::test]
async fn a_header_with_unknown_option_fields_opens_and_model_input_stays_strict() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(JsonlStore::new(dir.path(), Durability::None).unwrap());
    let header = json!({
        "format": 1, "id": "newer", "delegation_depth": 0, "cwd": "/work/project",
        "seed_len": 0, "created_at": 1,
        "composition": {
            "persona": "p", "options": {"model": "m", "temperature": 0.2},
            "sandbox": "strict"
        }
    });
    std::fs::write(
        store.log_path(&id("newer")),
        format!("{}\n", serde_json::to_string(&header).unwrap()),
    )
    .unwrap();
    let model = Arc::new(ScriptedModel::with_responses([
        Scripted::ToolCalls {
            text: None,
            calls: vec![("echo".into(), json!({"text": "x", "loud": true}))],
        },
        Scripted::Text("done".into()),
    ]));
    let echo = Echo::new("echo");
    let harness = Harness::builder(store.clone())
        .model(model)
        .tool(echo.clone())
        .unwrap()
        .build()
        .unwrap();
    let resumed = harness.resume(resume_spec("newer")).await.unwrap();
    let agent = resumed.agent().clone();
    assert_eq!(agent.options().model.as_deref(), Some("m"));
    agent.followup(UserMessage::user_text("go")).await.unwrap();
    bounded(agent.wait_idle()).await;
    let refused = agent
        .events()
        .iter()
        .any(|e| matches!(&e.payload, EventPayload::ToolResult(result) if result.is_error));
    assert!(refused, "an unknown tool argument was accepted");
    assert_eq!(echo.count(), 0);
    dispose(&agent).await;
}
