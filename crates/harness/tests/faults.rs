//! Store faults during a turn (B56): a [`FaultStore`] fails the k-th write
//! of a short turn (a tool call and an answer) with `ENOSPC` or `EIO`, for
//! every k. The turn ends as `error` with the OS error in its diagnostic,
//! the waiter's `wait_idle` returns and `fault` names the error, later
//! input is refused with `LOG_FAILED`, and the log reopens and resumes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use dsh_core::{
    Agent, AgentError, AgentFactory, AgentStatus, Durability, EventPayload, Message, SessionStore,
    StoreError, UserMessage,
};
use dsh_harness::{Harness, JsonlStore, LoopAgent, Scripted, ScriptedModel};
use dsh_test_support::store::{Fault, FaultStore, Op};
use serde_json::json;
use support::*;

type Store = FaultStore<JsonlStore>;

struct World {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    harness: Harness,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FaultStore::new(
        JsonlStore::new(dir.path(), Durability::TurnBoundary).unwrap(),
    ));
    // One tool call, then an answer once the result is in.
    let model = Arc::new(ScriptedModel::new().responder(|request| {
        let answered = request
            .messages
            .iter()
            .any(|message| matches!(message, Message::Tool { .. }));
        if answered {
            Scripted::Text("done".into())
        } else {
            Scripted::ToolCalls {
                text: Some("let me echo".into()),
                calls: vec![("echo".into(), json!({"text": "x"}))],
            }
        }
    }));
    let harness = Harness::builder(store.clone() as Arc<dyn SessionStore>)
        .model(model)
        .tool(Echo::new("echo"))
        .unwrap()
        .build()
        .unwrap();
    World {
        _dir: dir,
        store,
        harness,
    }
}

fn os_error(err: &StoreError) -> Option<i32> {
    match err {
        StoreError::Io { source, .. } => source.raw_os_error(),
        _ => None,
    }
}

/// How many appends (and checkpoints) the turn makes when nothing fails.
async fn writes_of_a_turn() -> (u64, u64) {
    let world = world();
    let agent = create(&world.harness, "a").await.agent().clone();
    let (appends, checkpoints) = (
        world.store.calls(Op::Append),
        world.store.calls(Op::Checkpoint),
    );
    agent.followup(UserMessage::user_text("go")).await.unwrap();
    bounded(agent.wait_idle()).await;
    assert_eq!(stop_reasons(&agent.events()), ["completed"]);
    (
        world.store.calls(Op::Append) - appends,
        world.store.calls(Op::Checkpoint) - checkpoints,
    )
}

/// After the fault: the agent is idle and broken, the error names the OS
/// error, the log reopens, and a resume goes on with a valid transcript.
async fn check_faulted(world: &World, agent: &Arc<dyn Agent>, errno: i32, what: &str) {
    bounded(agent.wait_idle()).await;
    assert_eq!(agent.status(), AgentStatus::Idle, "{what}");
    match agent.fault() {
        Some(AgentError::LogFailed(err)) => assert_eq!(os_error(&err), Some(errno), "{what}"),
        other => panic!("{what}: expected a log fault, got {other:?}"),
    }
    let later = agent.followup(UserMessage::user_text("later")).await;
    assert!(
        matches!(&later, Err(err) if err.code() == "LOG_FAILED"),
        "{what}: {later:?}"
    );
    let loop_agent = agent.as_any().downcast_ref::<LoopAgent>().unwrap();
    bounded(loop_agent.dispose()).await;
    assert!(world.harness.registry().get(agent.id()).is_none(), "{what}");

    let inner = world.store.inner();
    every_line_parses(&inner.log_path(agent.id()));
    let resumed = world
        .harness
        .resume(resume_spec("a"))
        .await
        .unwrap_or_else(|err| panic!("{what}: the log does not resume: {err}"));
    let resumed = resumed.agent().clone();
    bounded(resumed.wait_idle()).await;
    assert!(resumed.fault().is_none(), "{what}");
    resumed
        .followup(UserMessage::user_text("again"))
        .await
        .unwrap();
    bounded(resumed.wait_idle()).await;
    assert_eq!(
        stop_reasons(&resumed.events()).last().map(String::as_str),
        Some("completed"),
        "{what}"
    );
    assert_every_call_answered(&resumed.events(), what);
    let stored = inner.load(agent.id()).await.unwrap();
    assert_eq!(stored.events, resumed.events(), "{what}");
    let resumed = resumed.as_any().downcast_ref::<LoopAgent>().unwrap();
    bounded(resumed.dispose()).await;
}

#[tokio::test]
async fn a_failed_write_at_every_k_ends_the_turn_as_error_and_reaches_the_waiter() {
    let (appends, _) = writes_of_a_turn().await;
    assert!(appends >= 6, "the turn makes {appends} appends");
    for (fault, errno) in [(Fault::ENOSPC, 28), (Fault::EIO, 5)] {
        for k in 1..=appends {
            let what = format!("append {k} of {appends} failing with errno {errno}");
            let world = world();
            let agent = create(&world.harness, "a").await.agent().clone();
            world.store.fail(Op::Append, k, fault);
            let sent = agent.followup(UserMessage::user_text("go")).await;
            if k == 1 {
                // The acceptance itself failed: the caller gets the OS error.
                let err = sent.expect_err(&what);
                assert!(
                    matches!(&err, AgentError::Store(err) if os_error(err) == Some(errno)),
                    "{what}: {err:?}"
                );
            } else {
                sent.unwrap();
                bounded(agent.wait_idle()).await;
                // The turn ended as `error`, the OS error in its diagnostic
                // (kept in memory: the end itself could not be written).
                let events = agent.events();
                let Some(EventPayload::TurnEnd(end)) = events.last().map(|e| &e.payload) else {
                    panic!("{what}: the turn did not end: {:?}", kinds(&events));
                };
                assert_eq!(end.stop_reason.as_str(), "error", "{what}");
                let diagnostic = end.diagnostic.clone().unwrap_or_default();
                let expected = std::io::Error::from_raw_os_error(errno).to_string();
                assert!(diagnostic.contains(&expected), "{what}: {diagnostic}");
            }
            check_faulted(&world, &agent, errno, &what).await;
        }
    }
}

#[tokio::test]
async fn a_failed_turn_end_sync_is_the_agents_fault() {
    let (_, checkpoints) = writes_of_a_turn().await;
    assert_eq!(checkpoints, 1);
    let world = world();
    let agent = create(&world.harness, "a").await.agent().clone();
    world.store.fail(Op::Checkpoint, 1, Fault::EIO);
    agent.followup(UserMessage::user_text("go")).await.unwrap();
    check_faulted(&world, &agent, 5, "checkpoint failing with EIO").await;
}
