//! The drop-point harness (B51): the loop drops a tool future wherever it
//! waits when its turn is cancelled, so every public operation of the
//! runtime must leave either nothing or a fully published, monitored
//! activation when its future is dropped. For each operation and each store
//! call it makes, a held store stops that call, the operation's future is
//! polled until the hold is reached (the test asserts it got there) and
//! dropped, the hold is released, and the test asserts one of the two
//! outcomes, and that every child that settled told the lead once (a drain
//! dropped while its child's notice is written still leaves that notice). Every case runs on the JSONL store under `EveryEvent` and
//! under `None`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::pin::pin;

use dsh_core::{
    CancellationToken, ContentBlock, Durability, EventPayload, MessageId, MessageSource,
    SessionEvent, SessionId, SessionStore, UserMessage,
};
use dsh_subagent::{
    InterruptAuthority, PromptDelivery, RuntimeConfig, SubagentEvent, TrustedHost, UserPrompt,
    fold_catalog,
};
use dsh_test_support::wait::bounded;
use dsh_test_support::world::{Backing, Op, Point, When, World, sid};
use futures::future::BoxFuture;

const BACKINGS: [Backing; 2] = [
    Backing::Jsonl(Durability::EveryEvent),
    Backing::Jsonl(Durability::None),
];

/// The operations under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operation {
    /// `start_activation` of a named child with a caller-supplied id.
    Start,
    /// `send_message` from the root to a cold child (a resume).
    Send,
    /// A user `prompt` to a cold child (a resume).
    Prompt,
    /// A whole host-built message with its own source (`deliver_whole`)
    /// to a cold child (a resume).
    Deliver,
    /// `interrupt` of a cold child under the root's authority.
    Interrupt,
    /// `drain_descendants` of the root while a child settles.
    Drain,
}

/// What a dropped operation may leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Left {
    Nothing,
    Published,
}

fn child() -> SessionId {
    sid("child")
}

fn lead() -> SessionId {
    sid("lead")
}

fn cases() -> Vec<(Operation, Point)> {
    let at = |op, id: SessionId, when| Point { op, id, when };
    let mut cases = Vec::new();
    for when in [When::Before, When::After] {
        cases.push((Operation::Start, at(Op::Create, child(), when)));
        cases.push((Operation::Start, at(Op::Append, lead(), when)));
        cases.push((Operation::Start, at(Op::Append, child(), when)));
        for operation in [Operation::Send, Operation::Prompt, Operation::Deliver] {
            // A send to a direct child of the live root reads nothing of the
            // child before the open that resumes it (the root's catalog
            // knows it); a user's prompt reads its lineage and log.
            if operation != Operation::Send {
                cases.push((operation, at(Op::Load, child(), when)));
            }
            cases.push((operation, at(Op::Open, child(), when)));
            cases.push((operation, at(Op::Append, child(), when)));
        }
        cases.push((Operation::Interrupt, at(Op::Load, child(), when)));
        cases.push((Operation::Drain, at(Op::Append, lead(), when)));
    }
    cases
}

fn spec(world: &World) -> dsh_subagent::ActivationSpec {
    let mut spec = world.spec(Some("worker"));
    spec.child_id = Some(child());
    spec
}

/// Start the child and wait until it settled and went cold.
async fn cold_child(world: &World) {
    let activation = world.runtime.start_activation(spec(world)).await.unwrap();
    bounded(activation.result()).await.unwrap();
    world.quiesce().await;
    assert!(world.runtime.registry().get(&child()).is_none());
}

fn operation(world: &World, operation: Operation) -> BoxFuture<'_, ()> {
    let runtime = world.runtime.clone();
    let root = world.root.agent().clone();
    match operation {
        Operation::Start => {
            let spec = spec(world);
            Box::pin(async move {
                let _ = runtime.start_activation(spec).await;
            })
        }
        Operation::Send => {
            let send = world.tell(child().as_str(), "wake up");
            Box::pin(async move {
                let _ = send.await;
            })
        }
        Operation::Prompt => Box::pin(async move {
            let request = UserPrompt {
                child: child(),
                request_id: MessageId::generate(),
                content: vec![ContentBlock::text("wake up")],
                attachments: Vec::new(),
                client_time_zone: None,
                delivery: PromptDelivery::Queue,
            };
            let _ = runtime
                .prompt(request, &TrustedHost, &CancellationToken::new())
                .await;
        }),
        Operation::Deliver => Box::pin(async move {
            let message = UserMessage::new(
                vec![ContentBlock::text("wake up")],
                MessageSource::Other {
                    kind: "team-message".into(),
                    fields: serde_json::Map::new(),
                },
            );
            let _ = runtime
                .deliver_whole(
                    &child(),
                    message,
                    PromptDelivery::Queue,
                    &TrustedHost,
                    &CancellationToken::new(),
                )
                .await;
        }),
        Operation::Interrupt => Box::pin(async move {
            let _ = runtime
                .interrupt(&child(), &InterruptAuthority::Ancestor(root))
                .await;
        }),
        Operation::Drain => Box::pin(async move {
            let _ = runtime.drain_descendants(&[root]).await;
        }),
    }
}

fn own_messages(events: &[SessionEvent], text: &str) -> usize {
    events
        .iter()
        .filter(|event| match &event.payload {
            EventPayload::InboxAccepted(accepted) => {
                dsh_core::content::joined_text(&accepted.message.content) == text
            }
            _ => false,
        })
        .count()
}

fn notices(events: &[SessionEvent]) -> usize {
    events
        .iter()
        .filter(|event| match &event.payload {
            EventPayload::InboxAccepted(accepted) => {
                matches!(
                    accepted.message.source,
                    MessageSource::SubagentSettled { .. }
                )
            }
            _ => false,
        })
        .count()
}

async fn run_case(backing: Backing, operation_kind: Operation, point: Point) {
    let label = format!("{backing:?} {operation_kind:?} at {point:?}");
    let world = World::new(
        backing,
        RuntimeConfig {
            max_live_children_per_tree: 1,
        },
    )
    .await;
    if operation_kind != Operation::Start && operation_kind != Operation::Drain {
        cold_child(&world).await;
    }
    let mut activation = None;
    if operation_kind == Operation::Drain {
        // The child runs until the drain stops it; its notice is the held call.
        world.model.push(dsh_harness::Scripted::Hang);
        activation = Some(world.runtime.start_activation(spec(&world)).await.unwrap());
    }
    let (_subscription, mut events) = world.runtime.events().subscribe();
    let hold = world.hold(&point);
    {
        let mut future = pin!(operation(&world, operation_kind));
        tokio::select! {
            biased;
            () = hold.reached() => {}
            () = &mut future => panic!("{label}: the operation finished without reaching the point"),
        }
        // Dropped here, at the point.
    }
    hold.release();
    world.quiesce().await;
    drop(activation);

    let mut starts = 0;
    while let Ok(event) = events.try_recv() {
        if matches!(event, SubagentEvent::Start(_)) {
            starts += 1;
        }
    }
    // Never a live agent the runtime does not track.
    assert_eq!(
        world.runtime.registry().len(),
        1,
        "{label}: a live agent was left behind"
    );
    let root = world.root.agent();
    let catalog = fold_catalog(root.header(), &root.events()).unwrap();
    let stored = world.store.load(&child()).await.ok();
    let left = match operation_kind {
        Operation::Start => {
            if catalog.is_empty() {
                assert_eq!(world.sessions().await, [lead()], "{label}: an orphan log");
                assert_eq!(starts, 0, "{label}");
                Left::Nothing
            } else {
                let events = stored.expect("a published child has a log").events;
                assert_eq!(own_messages(&events, "do the task"), 1, "{label}");
                assert_eq!(starts, 1, "{label}");
                assert_eq!(notices(&root.events()), 1, "{label}: the notice");
                Left::Published
            }
        }
        Operation::Send | Operation::Prompt | Operation::Deliver => {
            let events = stored.expect("the child's log stays").events;
            match own_messages(&events, "wake up") {
                0 => {
                    assert_eq!(starts, 0, "{label}");
                    Left::Nothing
                }
                1 => {
                    if operation_kind == Operation::Deliver {
                        // Whole: the host's source, never rewritten to `user`.
                        let kinds: Vec<&str> = events
                            .iter()
                            .filter_map(|event| match &event.payload {
                                EventPayload::InboxAccepted(accepted)
                                    if dsh_core::content::joined_text(
                                        &accepted.message.content,
                                    ) == "wake up" =>
                                {
                                    Some(accepted.message.source.kind())
                                }
                                _ => None,
                            })
                            .collect();
                        assert_eq!(kinds, ["team-message"], "{label}");
                    }
                    assert_eq!(starts, 1, "{label}: the resume was adopted once");
                    assert_eq!(notices(&root.events()), 2, "{label}: the resumed notice");
                    Left::Published
                }
                n => panic!("{label}: the message was accepted {n} times"),
            }
        }
        Operation::Interrupt | Operation::Drain => {
            assert_eq!(starts, 0, "{label}");
            // The child settled once (the cold child before the interrupt,
            // the hanging one stopped by the drain): its notice reaches the
            // lead once, whatever the dropped future was doing.
            assert_eq!(notices(&root.events()), 1, "{label}: the settlement notice");
            Left::Nothing
        }
    };
    // What is left is whole: capacity and the name are free again, and a
    // drain of the tree completes.
    if operation_kind != Operation::Drain {
        let mut again = world.spec(Some(
            if left == Left::Nothing && operation_kind == Operation::Start {
                "worker"
            } else {
                "other"
            },
        ));
        again.child_id = None;
        let again = world.runtime.start_activation(again).await;
        let again = again.unwrap_or_else(|err| panic!("{label}: a later start failed: {err}"));
        bounded(again.result()).await.unwrap();
    }
    bounded(world.runtime.drain_descendants(std::slice::from_ref(root)))
        .await
        .unwrap();
    world.quiesce().await;
    assert_eq!(world.runtime.registry().len(), 1, "{label}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b51_every_operation_dropped_at_every_store_call_leaves_nothing_or_a_monitored_activation()
{
    for backing in BACKINGS {
        for (operation, point) in cases() {
            run_case(backing, operation, point).await;
        }
    }
}
