//! The drop-point harness of the loop (B51): every await of `LoopAgent::send`,
//! `record` (the commit behind both), the turn-end `checkpoint`,
//! `Harness::create` (and its roll-back when its token fires),
//! `Harness::resume` and `dispose`, held at a
//! [`GatedStore`] gate over the JSONL store (under `EveryEvent` and `None`),
//! the future dropped there, the gate released. Afterwards the agent either
//! still works (a later send is accepted and runs, and memory equals the
//! log) or is cleanly gone (not in the registry, the log reopens); every
//! line of every log parses.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use dsh_core::projection::{PendingInboxProjection, replay};
use dsh_core::session::{StepStart, TurnStart, UserEntry};
use dsh_core::{
    Agent, AgentFactory, CallId, CancelCause, CancelOptions, ContentBlock, Durability,
    EventPayload, InboxTarget, SessionHeader, SessionStore, ToolCall, UserMessage,
};
use dsh_harness::{Harness, JsonlStore, LoopAgent, Scripted, ScriptedModel};
use dsh_test_support::store::{Gate, GatedStore, Op, Point};
use serde_json::json;
use support::*;

/// The call a case drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// `send` (a waking follow-up) on an idle agent.
    Send,
    /// `record` of an extension event.
    Record,
    /// `Harness::create`.
    Create,
    /// `Harness::resume` of a log whose last turn is open (so the repair writes).
    Resume,
    /// `dispose` of an idle agent.
    Dispose,
    /// `dispose` right after a discarding interrupt.
    DisposeAfterDiscard,
    /// `dispose` while the turn-end checkpoint is held.
    DisposeAtCheckpoint,
}

const CASES: &[(Call, Op)] = &[
    (Call::Send, Op::Append),
    (Call::Record, Op::Append),
    (Call::Create, Op::Create),
    (Call::Resume, Op::Open),
    (Call::Resume, Op::Append),
    (Call::Dispose, Op::Close),
    (Call::DisposeAfterDiscard, Op::Append),
    (Call::DisposeAfterDiscard, Op::Close),
    (Call::DisposeAtCheckpoint, Op::Checkpoint),
];

type Store = GatedStore<JsonlStore>;

struct World {
    _dir: tempfile::TempDir,
    store: Arc<Store>,
    model: Arc<ScriptedModel>,
    harness: Harness,
}

fn world(durability: Durability) -> World {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(GatedStore::new(
        JsonlStore::new(dir.path(), durability).unwrap(),
    ));
    // "first" hangs until cancelled; everything else is answered at once.
    let model = Arc::new(ScriptedModel::new().responder(|request| {
        if last_user_text(request) == "first" {
            Scripted::Hang
        } else {
            Scripted::Text("done".into())
        }
    }));
    let harness = Harness::builder(store.clone() as Arc<dyn SessionStore>)
        .model(model.clone())
        .build()
        .unwrap();
    World {
        _dir: dir,
        store,
        model,
        harness,
    }
}

/// A log whose turn stopped right after a tool call, as a crash leaves it.
async fn write_open_turn(store: &Store) {
    let header = SessionHeader::new(id("a"), "/work/project");
    let message = UserMessage::user_text("go");
    let payloads = vec![
        EventPayload::TurnStart(TurnStart { turn: 0 }),
        EventPayload::UserMessage(UserEntry { message }),
        EventPayload::StepStart(StepStart { turn: 0, step: 0 }),
        EventPayload::ToolCall(ToolCall {
            call_id: CallId::new("call-1"),
            name: "read".into(),
            input: json!({}).into(),
        }),
    ];
    let events = numbered(payloads);
    let log = store.inner().create(&header, &events).await.unwrap();
    log.close().await;
}

/// The future a case drops, with everything it borrows owned.
fn call(
    world: &World,
    call: Call,
    agent: Option<Arc<dyn Agent>>,
) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    let harness = world.harness.clone();
    match call {
        Call::Send => Box::pin(async move {
            let agent = agent.unwrap();
            let _ = agent.followup(UserMessage::user_text("dropped?")).await;
        }),
        Call::Record => Box::pin(async move {
            let agent = agent.unwrap();
            let _ = agent.record("test/mark", json!({"n": 1}).into()).await;
        }),
        Call::Create => Box::pin(async move {
            let _ = harness.create(create_spec("a")).await;
        }),
        Call::Resume => Box::pin(async move {
            let _ = harness.resume(resume_spec("a")).await;
        }),
        Call::Dispose | Call::DisposeAfterDiscard | Call::DisposeAtCheckpoint => {
            Box::pin(async move {
                let agent = agent.unwrap();
                let agent = agent.as_any().downcast_ref::<LoopAgent>().unwrap();
                agent.dispose().await;
            })
        }
    }
}

async fn run_case(durability: Durability, which: Call, op: Op, point: Point) {
    let world = world(durability);
    let what = format!("{which:?} dropped at {op} {point:?} under {durability:?}");
    // Prepare what the call needs.
    let agent = match which {
        Call::Create => None,
        Call::Resume => {
            write_open_turn(&world.store).await;
            None
        }
        _ => {
            let handle = create(&world.harness, "a").await;
            Some(handle.agent().clone())
        }
    };
    if which == Call::DisposeAfterDiscard {
        // A turn that hangs, with input queued behind it, then interrupted
        // without keeping the inbox.
        let agent = agent.as_ref().unwrap();
        agent
            .followup(UserMessage::user_text("first"))
            .await
            .unwrap();
        bounded(until(|| world.model.requests().len() == 1)).await;
        agent
            .send(
                UserMessage::user_text("queued"),
                InboxTarget::NextTurn,
                false,
            )
            .await
            .unwrap();
    }
    let gate = world.store.gate(op, point);
    if which == Call::DisposeAtCheckpoint {
        agent
            .as_ref()
            .unwrap()
            .followup(UserMessage::user_text("turn"))
            .await
            .unwrap();
        bounded(gate.reached()).await;
    }
    if which == Call::DisposeAfterDiscard {
        agent
            .as_ref()
            .unwrap()
            .cancel(CancelCause::User, CancelOptions { keep_inbox: false });
    }

    let mut future = call(&world, which, agent.clone());
    let finished = bounded(async {
        tokio::select! {
            () = &mut future => true,
            () = gate.reached() => false,
        }
    })
    .await;
    assert!(!finished, "{what}: the call never reached its gate");
    drop(future);
    gate.release();
    bounded(until(|| gate.has_left())).await;
    bounded(until(|| world.harness.tasks().is_empty())).await;
    check(&world, &what).await;
}

/// The agent still works, or is cleanly gone (and then resumes and works);
/// the log reopens, parses, answers every tool call, and holds no
/// discarded item as pending.
async fn check(world: &World, what: &str) {
    let id = id("a");
    let agent = match world.harness.registry().get(&id) {
        Some(agent) => agent,
        None if world.store.inner().exists(&id).await.unwrap() => world
            .harness
            .resume(resume_spec("a"))
            .await
            .unwrap_or_else(|err| panic!("{what}: the log does not resume: {err}"))
            .agent()
            .clone(),
        None => return,
    };
    assert!(agent.fault().is_none(), "{what}: {:?}", agent.fault());
    agent
        .followup(UserMessage::user_text("later"))
        .await
        .unwrap_or_else(|err| panic!("{what}: a later send failed: {err}"));
    bounded(agent.wait_idle()).await;
    assert_eq!(
        stop_reasons(&agent.events()).last().map(String::as_str),
        Some("completed"),
        "{what}"
    );
    let stored = world.store.inner().load(&id).await.unwrap();
    assert_eq!(
        stored.events,
        agent.events(),
        "{what}: memory and log differ"
    );
    let loop_agent = agent.as_any().downcast_ref::<LoopAgent>().unwrap();
    bounded(loop_agent.dispose()).await;
    assert!(
        world.harness.registry().get(&id).is_none(),
        "{what}: still published"
    );

    every_line_parses(&world.store.inner().log_path(&id));
    let (loaded, log) = world
        .store
        .inner()
        .open(&id)
        .await
        .unwrap_or_else(|err| panic!("{what}: the log does not reopen: {err}"));
    log.close().await;
    assert!(loaded.torn_tail.is_none(), "{what}: a torn tail");
    assert_every_call_answered(&loaded.events, what);
    let pending = replay(&PendingInboxProjection, &loaded.header, &loaded.events);
    assert!(
        pending
            .items()
            .all(|item| item.message.content != vec![ContentBlock::text("queued")]),
        "{what}: a discarded item is pending again"
    );
}

async fn run_all(durability: Durability) {
    for &(which, op) in CASES {
        for point in [Point::Before, Point::After] {
            run_case(durability, which, op, point).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_await_of_the_loop_dropped_under_every_event_durability() {
    run_all(Durability::EveryEvent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_await_of_the_loop_dropped_without_durability() {
    run_all(Durability::None).await;
}

/// Poll `send` until it reaches `gate`, drop it there, then let the write
/// it left behind through and wait until that write has left the gate.
async fn drop_at_gate<F: Future>(send: F, gate: &Gate) {
    let mut send = Box::pin(send);
    bounded(async {
        tokio::select! {
            _ = &mut send => panic!("the send passed the gate"),
            () = gate.reached() => {}
        }
    })
    .await;
    drop(send);
    gate.release();
    bounded(until(|| gate.has_left())).await;
}

// The finding of runtime.md §3.1.1 in its plainest form: a send dropped
// after its write (at the fsync) left memory behind the log, and every later
// write failed `OUT_OF_SEQUENCE`.
#[tokio::test]
async fn a_send_dropped_after_its_write_leaves_the_agent_working() {
    let world = world(Durability::EveryEvent);
    let agent = create(&world.harness, "a").await.agent().clone();
    let gate = world.store.gate(Op::Append, Point::After);
    let send = agent.send(UserMessage::user_text("one"), InboxTarget::NextTurn, false);
    drop_at_gate(send, &gate).await;
    // The dropped message was accepted after all: it is pending.
    assert_eq!(agent.pending().len(), 1);
    agent.record("test/mark", json!({}).into()).await.unwrap();
    let stored = world.store.inner().load(agent.id()).await.unwrap();
    assert_eq!(stored.events, agent.events());
    assert!(stop_reasons(&stored.events).is_empty(), "no turn ran");
}

// A send dropped mid-write still accepts its message, and so must announce
// it: a `wait` observing the inbox (a lead waiting for a teammate's notice)
// would otherwise sleep to its timeout beside a pending item.
#[tokio::test]
async fn a_send_dropped_mid_write_still_announces_its_arrival() {
    let world = world(Durability::EveryEvent);
    let agent = create(&world.harness, "a").await.agent().clone();
    let mut arrivals = agent.observe_inbox();
    let gate = world.store.gate(Op::Append, Point::Before);
    let send = agent.send(UserMessage::user_text("one"), InboxTarget::NextStep, false);
    drop_at_gate(send, &gate).await;
    bounded(until(|| agent.pending().len() == 1)).await;
    let arrival = bounded(arrivals.recv()).await.unwrap();
    assert_eq!(arrival.message_id, agent.pending()[0]);
}

// A create whose token fires while the store is creating rolls back (close,
// then remove); dropped at either of those awaits, it leaves no live agent,
// and whatever log remains reopens and resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_create_dropped_during_its_roll_back_leaves_nothing_live() {
    for durability in [Durability::EveryEvent, Durability::None] {
        for op in [Op::Close, Op::Remove] {
            for point in [Point::Before, Point::After] {
                let what = format!("roll-back dropped at {op} {point:?} under {durability:?}");
                let world = world(durability);
                let creating = world.store.gate(Op::Create, Point::After);
                let rolling_back = world.store.gate(op, point);
                let spec = create_spec("a");
                let cancel = spec.cancel.clone();
                let harness = world.harness.clone();
                let mut future = Box::pin(async move { harness.create(spec).await });
                bounded(async {
                    tokio::select! {
                        _ = &mut future => panic!("{what}: created past the gate"),
                        () = creating.reached() => {}
                    }
                })
                .await;
                cancel.cancel();
                creating.release();
                bounded(async {
                    tokio::select! {
                        _ = &mut future => panic!("{what}: rolled back past the gate"),
                        () = rolling_back.reached() => {}
                    }
                })
                .await;
                drop(future);
                rolling_back.release();
                bounded(until(|| rolling_back.has_left())).await;
                bounded(until(|| world.harness.tasks().is_empty())).await;
                check(&world, &what).await;
            }
        }
    }
}
