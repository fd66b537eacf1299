//! What the runtime owns and what it must never touch: a caller-supplied
//! child id that names a stored session is refused and that log kept
//! (finding 0.1); a start whose initial prompt is not accepted fails after
//! rolling back (B8); activations have identity, so an old handle never
//! stops a later resume (B15); admission and drain cannot race (B32).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_core::{Agent, Durability, SessionStore, StopReason};
use dsh_harness::Scripted;
use dsh_subagent::{InterruptAuthority, RuntimeConfig, SubagentError, fold_catalog};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{
    Backing, ExternalProvider, Op, Point, When, World, create_root, notices_from, sid, starts,
};
use tokio::sync::Semaphore;

fn jsonl() -> Backing {
    Backing::Jsonl(Durability::None)
}

fn one_child() -> RuntimeConfig {
    RuntimeConfig {
        max_live_children_per_tree: 1,
    }
}

// Finding 0.1: the id of a session from an earlier process is refused, and
// its log is never deleted.
#[tokio::test]
async fn a_caller_supplied_child_id_naming_a_stored_session_is_refused_and_kept() {
    let world = World::new(jsonl(), RuntimeConfig::default()).await;
    let old = create_root(&world.harness, &sid("old"), world.dir()).await;
    old.agent()
        .followup(dsh_core::UserMessage::new(
            vec![dsh_core::ContentBlock::text("earlier work")],
            dsh_core::MessageSource::User,
        ))
        .await
        .unwrap();
    bounded(old.agent().wait_idle()).await;
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
    world.fail(&Point {
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
    bounded(next.result()).await.unwrap();
}

async fn send(world: &World, to: &str, text: &str) -> Result<dsh_core::MessageId, SubagentError> {
    world.tell(to, text).await
}

fn stop_reasons(agent: &Arc<dyn Agent>, child: &str) -> Vec<StopReason> {
    notices_from(agent, child)
        .into_iter()
        .filter_map(|(reason, _)| reason)
        .collect()
}

// B15: disposing an old handle never stops a later resume of the child.
#[tokio::test]
async fn an_old_handles_dispose_never_stops_a_later_resume() {
    let world = World::new(jsonl(), RuntimeConfig::default()).await;
    let old = world.cold_child("child").await;
    let gate = Arc::new(Semaphore::new(0));
    world.model.push(Scripted::Gated {
        gate: gate.clone(),
        then: Box::new(Scripted::Text("resumed work".into())),
    });
    send(&world, "child", "again").await.unwrap();
    assert_eq!(world.runtime.live_activations(), 1);
    bounded(old.dispose()).await.unwrap();
    gate.add_permits(1);
    world.quiesce().await;
    assert_eq!(
        stop_reasons(world.root.agent(), "child"),
        [StopReason::COMPLETED, StopReason::COMPLETED],
        "the resumed activation completed its turn"
    );
}

// Finding 0.6: a delivery that fails leaves the resumed child cold, never
// an activation that settles "aborted" and wakes its creator.
#[tokio::test]
async fn a_failed_delivery_undoes_the_resume() {
    let world = World::new(jsonl(), RuntimeConfig::default()).await;
    world.cold_child("child").await;
    let (_subscription, mut events) = world.runtime.events().subscribe();
    world.fail(&Point {
        op: Op::Append,
        id: sid("child"),
        when: When::Before,
    });
    send(&world, "child", "again").await.unwrap_err();
    world.quiesce().await;
    assert_eq!(starts(&mut events), 0, "no activation was announced");
    assert_eq!(world.runtime.registry().len(), 1, "the child is cold");
    assert_eq!(
        stop_reasons(world.root.agent(), "child").len(),
        1,
        "no notice for an activation that never ran"
    );
}

// B11/3.2.12: a run id that names a stored session is refused, even when
// no activation of this process used it.
#[tokio::test]
async fn an_external_run_id_naming_a_stored_session_is_refused() {
    let world = World::new(jsonl(), RuntimeConfig::default()).await;
    world.cold_child("child").await;
    // A runtime of a later process: it never saw `child` as a run id.
    let later = dsh_subagent::SubagentRuntime::new(
        Arc::new(world.harness.clone()),
        world.store.clone(),
        RuntimeConfig::default(),
    );
    later
        .register(Arc::new(
            ExternalProvider::new("fixed").with_id(sid("child")),
        ))
        .unwrap();
    let mut spec = world.spec(Some("external"));
    spec.provider = "fixed".into();
    let err = later.start_activation(spec).await.unwrap_err();
    assert_eq!(err.code(), "DUPLICATE_RUN_ID", "{err}");
}

// B32: a drain cancels a start in flight; nothing publishes into the tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_cancels_a_start_in_flight_and_nothing_publishes() {
    let world = World::new(jsonl(), RuntimeConfig::default()).await;
    let hold = world.hold(&Point {
        op: Op::Create,
        id: sid("child"),
        when: When::Before,
    });
    let mut spec = world.spec(Some("child"));
    spec.child_id = Some(sid("child"));
    let runtime = world.runtime.clone();
    let start = tokio::spawn(async move { runtime.start_activation(spec).await });
    bounded(hold.reached()).await;
    // The drain closes admission and cancels the work in flight before its
    // first await: poll it that far, then let the held call go on.
    let roots = [world.root.agent().clone()];
    let mut drain = Box::pin(world.runtime.drain_descendants(&roots));
    assert!(futures::poll!(&mut drain).is_pending());
    hold.release();
    let started = bounded(start).await.unwrap();
    assert_eq!(started.unwrap_err().code(), "CANCELLED");
    bounded(drain).await.unwrap();
    world.quiesce().await;
    let root = world.root.agent();
    assert!(
        fold_catalog(root.header(), &root.events())
            .unwrap()
            .is_empty()
    );
    assert_eq!(world.sessions().await, [sid("lead")]);
}

// B32: a drain cancels a resume in flight and waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_cancels_a_resume_in_flight_and_waits_for_it() {
    let world = World::new(jsonl(), RuntimeConfig::default()).await;
    world.cold_child("child").await;
    let hold = world.hold(&Point {
        op: Op::Open,
        id: sid("child"),
        when: When::Before,
    });
    let message = tokio::spawn(world.tell("child", "again"));
    bounded(hold.reached()).await;
    // The drain closes admission and cancels the work in flight before its
    // first await: poll it that far, then let the held call go on.
    let roots = [world.root.agent().clone()];
    let mut drain = Box::pin(world.runtime.drain_descendants(&roots));
    assert!(futures::poll!(&mut drain).is_pending());
    hold.release();
    bounded(drain).await.unwrap();
    // Once the drain returned, nothing of the tree is live.
    assert_eq!(world.runtime.live_activations(), 0);
    assert_eq!(world.runtime.registry().len(), 1);
    let sent = bounded(message).await.unwrap();
    assert_eq!(sent.unwrap_err().code(), "CANCELLED");
}

// B32: a member resumed while its creator is cold, then interrupted (parked),
// is stopped by the drain, which completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_stops_a_parked_member_resumed_under_a_cold_creator() {
    let world = World::new(jsonl(), RuntimeConfig::default()).await;
    let gate = Arc::new(Semaphore::new(0));
    world.model.push(Scripted::Gated {
        gate: gate.clone(),
        then: Box::new(Scripted::Text("a is done".into())),
    });
    let mut a = world.spec(Some("a"));
    a.child_id = Some(sid("a"));
    let a = world.runtime.start_activation(a).await.unwrap();
    until(|| world.model.requests().len() == 1).await;
    let a_agent = world.runtime.registry().get(a.child_id()).unwrap();
    let mut a1 = world.spec(Some("a1"));
    a1.child_id = Some(sid("a1"));
    a1.request.parent = a_agent.clone();
    let a1 = world.runtime.start_activation(a1).await.unwrap();
    bounded(a1.result()).await.unwrap();
    gate.add_permits(1);
    bounded(a.result()).await.unwrap();
    world.quiesce().await;
    assert!(
        world.runtime.registry().get(&sid("a")).is_none(),
        "a is cold"
    );

    world.model.push(Scripted::Hang);
    send(&world, "a1", "again").await.unwrap();
    until(|| {
        world
            .runtime
            .registry()
            .get(&sid("a1"))
            .is_some_and(|agent| agent.status() == dsh_core::AgentStatus::Running)
    })
    .await;
    world
        .runtime
        .interrupt(&sid("a1"), &InterruptAuthority::User)
        .await
        .unwrap();
    let a1_agent = world.runtime.registry().get(&sid("a1")).unwrap();
    bounded(a1_agent.wait_idle()).await;
    assert_eq!(
        world.runtime.live_activations(),
        1,
        "parked, still resident"
    );

    bounded(
        world
            .runtime
            .drain_descendants(std::slice::from_ref(world.root.agent())),
    )
    .await
    .unwrap();
    assert_eq!(world.runtime.live_activations(), 0);
    assert_eq!(world.runtime.registry().len(), 1);
}

// B35: concurrent messages to one cold child resume it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_messages_to_a_cold_child_resume_it_once() {
    let world = World::new(jsonl(), RuntimeConfig::default()).await;
    world.cold_child("child").await;
    let (_subscription, mut events) = world.runtime.events().subscribe();
    let gate = Arc::new(Semaphore::new(0));
    world.model.push(Scripted::Gated {
        gate: gate.clone(),
        then: Box::new(Scripted::Text("both seen".into())),
    });
    let (first, second) = tokio::join!(
        send(&world, "child", "first"),
        send(&world, "child", "second")
    );
    first.unwrap();
    second.unwrap();
    gate.add_permits(1);
    world.quiesce().await;
    assert_eq!(starts(&mut events), 1, "one resume, one subagent/start");
}

// Catalog order is call order: a start whose creation finishes later is
// still cataloged (and listed) before the starts made after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starts_are_cataloged_in_the_order_they_were_made() {
    let world = World::new(jsonl(), RuntimeConfig::default()).await;
    let hold = world.hold(&Point {
        op: Op::Create,
        id: sid("first"),
        when: When::After,
    });
    let start = |name: &str| {
        let mut spec = world.spec(Some(name));
        spec.child_id = Some(sid(name));
        let runtime = world.runtime.clone();
        tokio::spawn(async move { runtime.start_activation(spec).await })
    };
    let first = start("first");
    bounded(hold.reached()).await;
    let second = start("second");
    // The second is created (and waits for the first's catalog entry).
    let root = world.root.agent().clone();
    until(|| {
        world.runtime.registry().get(&sid("second")).is_some()
            || fold_catalog(root.header(), &root.events())
                .unwrap()
                .get(&sid("second"))
                .is_some()
    })
    .await;
    hold.release();
    bounded(first).await.unwrap().unwrap();
    bounded(second).await.unwrap().unwrap();
    let root = world.root.agent();
    let names: Vec<_> = fold_catalog(root.header(), &root.events())
        .unwrap()
        .entries()
        .iter()
        .filter_map(|entry| entry.name.clone())
        .collect();
    assert_eq!(names, ["first", "second"]);
    world.quiesce().await;
}

// A live parent whose log holds more catalog entries than a fold reads on
// one thread (a parent of thousands of children) is folded on its first
// start, on a multi-threaded runtime, where the long fold runs with its
// worker's other tasks handed off, and on a single-threaded one, where it
// runs in place; either way the next default name follows them all.
async fn a_long_catalog_fold(world: World) {
    const ENTRIES: usize = 9_000;
    let parent = world.root.agent().clone();
    for n in 0..ENTRIES {
        let entry = dsh_subagent::CatalogEntry {
            child_id: sid(&format!("c-{n}")),
            name: Some(format!("agent-{}", n + 1)),
            label: "task".into(),
            provider: "local".into(),
            mode: dsh_subagent::ChildMode::CONTINUABLE,
        };
        parent
            .record(
                dsh_subagent::CATALOG_EVENT,
                dsh_subagent::catalog_payload(&entry),
            )
            .await
            .unwrap();
    }
    let child = world.start(world.spec(None)).await;
    assert!(
        child.name().ends_with(&format!("agent-{}", ENTRIES + 1)),
        "{}",
        child.name()
    );
    bounded(child.result()).await.unwrap();
    world.quiesce().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_catalog_fold_on_a_multi_threaded_runtime() {
    a_long_catalog_fold(World::new(jsonl(), RuntimeConfig::default()).await).await;
}

#[tokio::test]
async fn a_long_catalog_fold_on_a_single_threaded_runtime() {
    a_long_catalog_fold(World::new(jsonl(), RuntimeConfig::default()).await).await;
}
