//! What the loop's repairs and failures show a model or a person, pinned as
//! one snapshot: the conversation a model is sent after a resume answered a
//! tool call a crash cut off (B53), and the diagnostics of a turn ended by
//! its step limit (B55) and by a full disk (B56). One test in its own
//! binary: insta runs `cargo metadata` (a fork) on its first assertion, and
//! a fork while a log is being reopened elsewhere in the process can hold
//! that log's lock for an instant.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use dsh_core::session::{StepStart, TurnStart, UserEntry};
use dsh_core::{
    AgentFactory, AgentOptions, CallId, Durability, EventPayload, SessionHeader, SessionStore,
    ToolCall, UserMessage,
};
use dsh_harness::{Harness, JsonlStore, MemoryStore, Scripted, ScriptedModel};
use dsh_test_support::store::{Fault, FaultStore, Op};
use serde_json::json;
use support::*;

fn last_diagnostic(events: &[dsh_core::SessionEvent]) -> String {
    match events.last().map(|event| &event.payload) {
        Some(EventPayload::TurnEnd(end)) => {
            format!(
                "{}: {}",
                end.stop_reason,
                end.diagnostic.clone().unwrap_or_default()
            )
        }
        other => panic!("the log does not end with a turn end: {other:?}"),
    }
}

#[tokio::test]
async fn repairs_and_failures_as_a_model_and_a_person_see_them() {
    // B53: a log cut right after a tool call, resumed and asked again.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(JsonlStore::new(dir.path(), Durability::None).unwrap());
    let header = SessionHeader::new(id("cut"), "/work/project");
    let log = store
        .create(
            &header,
            &numbered(vec![
                EventPayload::TurnStart(TurnStart { turn: 0 }),
                EventPayload::UserMessage(UserEntry {
                    message: UserMessage {
                        id: dsh_core::MessageId::new("m-1"),
                        ..UserMessage::user_text("Read the notes.")
                    },
                }),
                EventPayload::StepStart(StepStart { turn: 0, step: 0 }),
                EventPayload::ToolCall(ToolCall {
                    call_id: CallId::new("call-1"),
                    name: "read".into(),
                    input: json!({"path": "notes.md"}).into(),
                }),
            ]),
        )
        .await
        .unwrap();
    log.close().await;
    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("ok".into())));
    let harness = harness(store.clone(), model.clone());
    let resumed = harness.resume(resume_spec("cut")).await.unwrap();
    let resumed = resumed.agent().clone();
    let _ = turn(&resumed, "Go on.").await;
    let conversation = model.requests().pop().unwrap().messages;

    // B55: the diagnostic of a turn that hit its step limit.
    let looping = Arc::new(ScriptedModel::new().responder(|_| Scripted::ToolCalls {
        text: None,
        calls: vec![("echo".into(), json!({"text": "again"}))],
    }));
    let limited = Harness::builder(Arc::new(MemoryStore::new()))
        .model(looping)
        .tool(Echo::new("echo"))
        .unwrap()
        .defaults(AgentOptions {
            max_turn_steps: Some(2),
            ..AgentOptions::default()
        })
        .build()
        .unwrap();
    let agent = create(&limited, "loops").await.agent().clone();
    let step_limit = last_diagnostic(&turn(&agent, "loop").await);

    // B56: the diagnostic of a turn whose write met a full disk.
    let faulty = Arc::new(FaultStore::new(MemoryStore::new()));
    let full = harness_over(faulty.clone());
    let agent = create(&full, "full").await.agent().clone();
    faulty.fail(Op::Append, 3, Fault::ENOSPC);
    let disk_full = last_diagnostic(&turn(&agent, "write").await);

    insta::with_settings!({ sort_maps => true }, {
        insta::assert_json_snapshot!(
            "repairs_and_failures",
            json!({
                "conversation_after_b53": conversation,
                "step_limit": step_limit,
                "disk_full": disk_full,
            })
        );
    });
}

fn harness_over(store: Arc<dyn SessionStore>) -> Harness {
    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("done".into())));
    harness(store, model)
}
