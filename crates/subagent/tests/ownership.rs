//! What the runtime owns and what it must never touch: a caller-supplied
//! child id that names a stored session is refused and that log kept
//! (finding 0.1); a start whose initial prompt is not accepted fails after
//! rolling back (B8); activations have identity, so an old handle never
//! stops a later resume (B15); admission and drain cannot race (B32).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_core::{Durability, SessionStore};
use dsh_subagent::{RuntimeConfig, SubagentEvent};
use dsh_test_support::world::{Backing, Op, Point, When, World, bounded, create_root, sid};

fn jsonl() -> Backing {
    Backing::Jsonl(Durability::None)
}

fn one_child() -> RuntimeConfig {
    RuntimeConfig {
        max_live_children_per_tree: 1,
    }
}

fn starts(events: &mut tokio::sync::mpsc::UnboundedReceiver<SubagentEvent>) -> usize {
    let mut count = 0;
    while let Ok(event) = events.try_recv() {
        count += usize::from(matches!(event, SubagentEvent::Start(_)));
    }
    count
}

// Finding 0.1: the id of a session from an earlier process is refused, and
// its log is never deleted.
#[tokio::test]
async fn a_caller_supplied_child_id_naming_a_stored_session_is_refused_and_kept() {
    let world = World::new(jsonl(), RuntimeConfig::default()).await;
    let old = create_root(&world.harness, &sid("old"), world.dir.path()).await;
    old.agent()
        .followup(dsh_core::UserMessage::new(
            vec![dsh_core::ContentBlock::text("earlier work")],
            dsh_core::MessageSource::User,
        ))
        .await
        .unwrap();
    bounded("the old session settles", old.agent().wait_idle()).await;
    old.dispose().await;
    let before = world.store.load(&sid("old")).await.unwrap().events;

    let mut spec = world.spec(Some("worker"));
    spec.child_id = Some(sid("old"));
    let err = world.runtime.start_activation(spec).await.unwrap_err();
    assert_eq!(err.code(), "DUPLICATE_RUN_ID", "{err}");
    let after = world.store.load(&sid("old")).await.unwrap().events;
    assert_eq!(after, before, "the stored session is untouched");
    assert_eq!(world.runtime.live_activations(), 0);
    assert_eq!(world.runtime.registry().len(), 1);
}

// B8: a start returns only after the initial prompt was accepted; a refused
// prompt is an error, and nothing of the child is left running.
#[tokio::test]
async fn a_refused_initial_prompt_fails_the_start_and_leaves_no_live_child() {
    let world = World::new(jsonl(), one_child()).await;
    let (_subscription, mut events) = world.runtime.events().subscribe();
    world.store.fail(Point {
        op: Op::Append,
        id: sid("child"),
        when: When::Before,
    });
    let mut spec = world.spec(Some("worker"));
    spec.child_id = Some(sid("child"));
    let err = world.runtime.start_activation(spec).await.unwrap_err();
    assert_eq!(err.code(), "INITIAL_PROMPT_FAILED", "{err}");
    assert_eq!(world.runtime.live_activations(), 0);
    assert_eq!(world.runtime.registry().len(), 1, "no live child");
    assert_eq!(starts(&mut events), 0, "never announced");
    // The capacity slot is free again.
    let next = world
        .runtime
        .start_activation(world.spec(None))
        .await
        .unwrap();
    bounded("the next child", next.result()).await.unwrap();
}
