//! Deterministic replay of real logs (B59): a session that ran tool steps,
//! a step limit, a refusal, a max-tokens cut, a model failure, a tool that
//! ended its turn and a cancelled turn replays identical; so does the same
//! log cut by a crash after any event and repaired as a resume repairs it;
//! and a log with a derived event altered (a claimed message that no
//! longer matches its inbox item, a missing step start, two events
//! swapped) parts from the replay exactly there. A tree's replay over a
//! JSONL store passes over a create a crash cut short.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use dsh_core::{
    Agent, AgentFactory, AgentOptions, CancelCause, CancelOptions, ContentBlock, CreateAgent,
    Durability, EventPayload, ModelError, ModelErrorKind, SessionEvent, SessionHeader, SessionId,
    SessionStore, UserMessage,
};
use dsh_harness::replay::{Verdict, replay_session, replay_tree};
use dsh_harness::turn::{close_interrupted_turn, open_turn};
use dsh_harness::{Harness, JsonlStore, MemoryStore, Scripted, ScriptedModel};
use serde_json::json;
use support::*;

/// The log of one session that went through every kind of turn.
async fn eventful() -> (SessionHeader, Vec<SessionEvent>) {
    let call = |text: &str| Scripted::ToolCalls {
        text: Some(format!("calling {text}")),
        calls: vec![("echo".into(), json!({"text": text}))],
    };
    let model = Arc::new(ScriptedModel::with_responses([
        // Turn 0: two tool steps, then an answer.
        call("a"),
        Scripted::ToolCalls {
            text: None,
            calls: vec![
                ("echo".into(), json!({"text": "b"})),
                ("missing".into(), json!({})),
            ],
        },
        Scripted::Text("done".into()),
        // Turn 1: a refusal. Turn 2: cut at max tokens.
        Scripted::Refusal("no".into()),
        Scripted::MaxTokens("so much to s".into()),
        // Turn 3: the model fails mid-stream.
        Scripted::FailMidStream {
            text: "partial".into(),
            error: ModelError::new(ModelErrorKind::Api, "overloaded"),
        },
        // Turn 4: a tool ends the turn.
        Scripted::ToolCalls {
            text: None,
            calls: vec![("finish".into(), json!({"text": "x"}))],
        },
        // Turn 5: runs into the step limit of 3.
        call("1"),
        call("2"),
        call("3"),
        // Turn 6: hangs until cancelled.
        Scripted::Hang,
    ]));
    let harness = Harness::builder(Arc::new(MemoryStore::new()))
        .model(model.clone())
        .tool(Echo::new("echo"))
        .unwrap()
        .tool(Echo::ending_turn("finish"))
        .unwrap()
        .defaults(AgentOptions {
            max_turn_steps: Some(3),
            ..AgentOptions::default()
        })
        .build()
        .unwrap();
    let mut spec: CreateAgent = create_spec("eventful");
    spec.header.cwd = "/work".into();
    let handle = harness.create(spec).await.unwrap();
    let agent: Arc<dyn Agent> = handle.agent().clone();
    for text in ["one", "two", "three", "four", "five", "six"] {
        turn(&agent, text).await;
    }
    agent
        .followup(UserMessage::user_text("seven"))
        .await
        .unwrap();
    // Steering that arrives while the model hangs is discarded by the cancel.
    until(|| model.requests().len() == 11).await;
    agent.steer(UserMessage::user_text("steer")).await.unwrap();
    agent.cancel(CancelCause::User, CancelOptions::default());
    settle(&agent).await;
    let events = agent.events();
    let header = agent.header().clone();
    harness.shutdown().await;
    (header, events)
}

fn identical(header: &SessionHeader, events: &[SessionEvent]) {
    match replay_session(header, events) {
        Verdict::Identical { .. } => {}
        Verdict::Diverged(divergence) => panic!("{divergence}"),
    }
}

fn diverges_at(header: &SessionHeader, events: &[SessionEvent], seq: u64) {
    match replay_session(header, events) {
        Verdict::Identical { .. } => panic!("the altered log replayed identical"),
        Verdict::Diverged(divergence) => assert_eq!(divergence.seq, seq, "{divergence}"),
    }
}

fn renumbered(mut events: Vec<SessionEvent>) -> Vec<SessionEvent> {
    for (seq, event) in events.iter_mut().enumerate() {
        event.seq = seq as u64;
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_of_every_kind_of_turn_replays_identical() {
    let (header, events) = eventful().await;
    let reasons = stop_reasons(&events);
    for reason in [
        "completed",
        "refusal",
        "max-tokens",
        "error",
        "step-limit",
        "aborted",
    ] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} turn: {reasons:?}"
        );
    }
    match replay_session(&header, &events) {
        Verdict::Identical { turns } => assert_eq!(turns, 7),
        Verdict::Diverged(divergence) => panic!("{divergence}"),
    }
}

/// A crash after any event, then a resume's repair: the cut log replays
/// identical, and a repair that differs from what a resume writes parts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_cut_anywhere_and_repaired_replays_identical() {
    let (header, events) = eventful().await;
    for cut in 1..events.len() {
        let mut log = events[..cut].to_vec();
        identical(&header, &log);
        if let Some(turn) = open_turn(&log) {
            let repair = close_interrupted_turn(turn, &log, 5);
            log.extend(repair);
            identical(&header, &log);
            // A repair that says something else is no resume's.
            let last = log.len() - 1;
            if let EventPayload::TurnEnd(end) = &mut log[last].payload {
                end.diagnostic = Some("something else".into());
            }
            diverges_at(&header, &log, last as u64);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_message_that_no_longer_matches_its_inbox_item_parts_there() {
    let (header, mut events) = eventful().await;
    let at = events
        .iter()
        .rposition(|e| matches!(e.payload, EventPayload::UserMessage(_)))
        .unwrap();
    if let EventPayload::UserMessage(entry) = &mut events[at].payload {
        entry.message.content = vec![ContentBlock::text("not what was sent")];
    }
    diverges_at(&header, &events, at as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_step_start_parts_there() {
    let (header, events) = eventful().await;
    // A later step's start (the first goes out with its turn's start).
    let at = events
        .iter()
        .position(|e| matches!(&e.payload, EventPayload::StepStart(s) if s.step == 1))
        .unwrap();
    let mut log = events.clone();
    log.remove(at);
    diverges_at(&header, &renumbered(log), at as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_events_swapped_part_at_the_first() {
    let (header, events) = eventful().await;
    // A tool call and its turn's usage.
    let at = events
        .iter()
        .position(|e| matches!(e.payload, EventPayload::ToolCall(_)))
        .unwrap();
    assert!(matches!(events[at + 1].payload, EventPayload::Usage(_)));
    let mut log = events.clone();
    log.swap(at, at + 1);
    diverges_at(&header, &renumbered(log), at as u64);
    // A turn's start and its claimed message.
    let at = events
        .iter()
        .rposition(|e| matches!(e.payload, EventPayload::TurnStart(_)))
        .unwrap();
    let mut log = events.clone();
    log.swap(at, at + 1);
    diverges_at(&header, &renumbered(log), at as u64);
}

/// A create that a kill cut short leaves its log holding nothing or part
/// of its header line: no session yet, so a tree's replay (the one every
/// suite's `dsh_test_support::replays` ends with) passes over it, at every
/// cut, and replays the whole sessions beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_replay_passes_over_a_create_cut_short() {
    let (header, events) = eventful().await;
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
    drop(store.create(&header, &events).await.unwrap());
    let torn = SessionId::new("torn").unwrap();
    drop(
        store
            .create(&SessionHeader::new(torn.clone(), "/"), &[])
            .await
            .unwrap(),
    );
    let line = std::fs::read(store.log_path(&torn)).unwrap();
    for cut in 0..line.len() - 1 {
        std::fs::write(store.log_path(&torn), &line[..cut]).unwrap();
        let replays = replay_tree(&store, None).await.unwrap_or_else(|err| {
            panic!("cut at {cut} of {}: {err}", line.len());
        });
        assert_eq!(replays.len(), 1, "cut at {cut}: {replays:?}");
        assert_eq!(replays[0].id, header.id);
        assert_eq!(replays[0].verdict, Verdict::Identical { turns: 7 });
    }
}
