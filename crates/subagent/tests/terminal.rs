//! Every child ends with a terminal record (B54): a notice lost to a crash
//! between a child's last turn and its notice is delivered exactly once
//! when its creator is live again; an infrastructure failure of a
//! background child reaches its creator as a notice; a child cataloged
//! that never accepted its task is reported as failed and never takes the
//! next message as its task. A crash is simulated by copying the logs
//! while the process is held at the crash point (what a SIGKILL leaves on
//! disk under `Durability::None`) and opening them in a new world.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_subagent::InfraError;
use std::sync::Arc;

use dsh_core::{CancellationToken, ContentBlock, Durability, StopReason};
use dsh_harness::Scripted;
use dsh_subagent::{Delivery, RuntimeConfig, SubagentError};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{
    Backing, ExternalProvider, Op, Point, RunEnd, When, World, notices_from, sid,
};
use tokio::sync::Semaphore;

const DURABILITY: Durability = Durability::None;

async fn idle(world: &World) {
    until(|| world.runtime.tasks().is_empty()).await;
    bounded(world.root.agent().wait_idle()).await;
}

// A child's turn ended, the process died before its notice was written;
// the next process delivers it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b54_a_lost_notice_is_delivered_once_after_a_kill() {
    let before = World::new(Backing::Jsonl(DURABILITY), RuntimeConfig::default()).await;
    // The root's first append is the catalog entry; the next, the notice.
    let mut spec = before.spec(Some("worker"));
    spec.child_id = Some(sid("child"));
    let gate = Arc::new(Semaphore::new(0));
    before.model.push(Scripted::Gated {
        gate: gate.clone(),
        then: Box::new(Scripted::Text("done".into())),
    });
    before.runtime.start_activation(spec).await.unwrap();
    let hold = before.hold(&Point {
        op: Op::Append,
        id: sid("lead"),
        when: When::Before,
    });
    gate.add_permits(1);
    bounded(hold.reached()).await;

    // The kill: what is on disk now is all the next process gets.
    let after = World::restarted(before.dir(), DURABILITY).await;
    hold.release();
    drop(before);
    let lead = after.root.agent().clone();
    assert!(notices_from(&lead, "child").is_empty(), "lost by the kill");

    assert_eq!(after.runtime.deliver_lost_notices(&lead).await.unwrap(), 1);
    idle(&after).await;
    assert_eq!(after.runtime.deliver_lost_notices(&lead).await.unwrap(), 0);
    let notices = notices_from(&lead, "child");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].0, Some(StopReason::COMPLETED));
    assert!(
        notices[0].1.contains("worker completed"),
        "{}",
        notices[0].1
    );
    assert!(
        notices[0].1.contains("done"),
        "the child's output: {}",
        notices[0].1
    );
}

// A notice that did arrive is never sent again by a later process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b54_a_delivered_notice_is_never_repeated_after_a_restart() {
    let before = World::new(Backing::Jsonl(DURABILITY), RuntimeConfig::default()).await;
    let mut spec = before.spec(Some("worker"));
    spec.child_id = Some(sid("child"));
    let child = before.runtime.start_activation(spec).await.unwrap();
    bounded(child.result()).await.unwrap();
    idle(&before).await;
    let dir = before.dir().to_path_buf();
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
    }
    drop(before);
    let after = World::restarted(copy.path(), DURABILITY).await;
    let lead = after.root.agent().clone();
    assert_eq!(after.runtime.deliver_lost_notices(&lead).await.unwrap(), 0);
    assert_eq!(notices_from(&lead, "child").len(), 1);
}

// The process died between the catalog entry and the initial prompt: the
// creator learns the child failed; the child never takes a message as its task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b54_a_child_cataloged_without_its_task_is_reported_failed_and_never_resumed() {
    let before = World::new(Backing::Jsonl(DURABILITY), RuntimeConfig::default()).await;
    // The child's first append is its activation record; the second, the prompt.
    let record = before.hold(&Point {
        op: Op::Append,
        id: sid("child"),
        when: When::Before,
    });
    let mut spec = before.spec(Some("worker"));
    spec.child_id = Some(sid("child"));
    let runtime = before.runtime.clone();
    let start = tokio::spawn(async move { runtime.start_activation(spec).await });
    bounded(record.reached()).await;
    let hold = before.hold(&Point {
        op: Op::Append,
        id: sid("child"),
        when: When::Before,
    });
    record.release();
    bounded(hold.reached()).await;
    let after = World::restarted(before.dir(), DURABILITY).await;
    hold.release();
    let _ = bounded(start).await;
    drop(before);

    let lead = after.root.agent().clone();
    assert_eq!(after.runtime.deliver_lost_notices(&lead).await.unwrap(), 1);
    idle(&after).await;
    let notices = notices_from(&lead, "child");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].0, Some(StopReason::ERROR));
    assert!(
        notices[0].1.contains("never accepted its task"),
        "{}",
        notices[0].1
    );

    let err = after
        .runtime
        .send_message(
            &lead,
            &sid("child"),
            vec![ContentBlock::text("take this as your task")],
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "NOT_RESUMABLE", "{err}");
    assert_eq!(after.runtime.registry().len(), 1, "the child is not live");
    assert_eq!(after.runtime.deliver_lost_notices(&lead).await.unwrap(), 0);
}

// A background child whose run fails (an infrastructure fault, not a stop
// reason) still reaches its creator, with the error as the diagnostic.
#[tokio::test]
async fn b54_an_infrastructure_failure_of_a_background_child_reaches_its_creator() {
    let world = World::new(Backing::Jsonl(DURABILITY), RuntimeConfig::default()).await;
    world
        .runtime
        .register(Arc::new(ExternalProvider::new("failing").ending(
            RunEnd::Fails(SubagentError::Infra(InfraError::Provider {
                provider: "failing".into(),
                message: "the remote end went away".into(),
            })),
        )))
        .unwrap();
    let mut spec = world.spec(Some("remote"));
    spec.provider = "failing".into();
    spec.delivery = Delivery::Parent;
    let run = world.runtime.start_activation(spec).await.unwrap();
    let err = bounded(run.result()).await.unwrap_err();
    assert_eq!(err.code(), "PROVIDER_FAILED");
    idle(&world).await;
    let child = run.child_id().as_str().to_owned();
    let notices = notices_from(world.root.agent(), &child);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].0, Some(StopReason::ERROR));
    assert!(
        notices[0].1.contains("the remote end went away"),
        "{}",
        notices[0].1
    );
}

// B56: a write that fails in a background child's turn (its disk is full,
// say) ends that turn as `error` naming the OS error, and the creator hears
// it as a notice: nobody waits for ever on a child whose log broke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b56_a_failed_write_in_a_childs_turn_reaches_its_creator_as_an_error_notice() {
    let world = World::new(Backing::Jsonl(DURABILITY), RuntimeConfig::default()).await;
    let gate = Arc::new(Semaphore::new(0));
    world.model.push(Scripted::Gated {
        gate: gate.clone(),
        then: Box::new(Scripted::Text("an answer the disk never holds".into())),
    });
    let mut spec = world.spec(Some("worker"));
    spec.child_id = Some(sid("child"));
    let run = world.runtime.start_activation(spec).await.unwrap();
    // The child's next write (its answer, at the latest) fails.
    world.fail(&Point {
        op: Op::Append,
        id: sid("child"),
        when: When::Before,
    });
    gate.add_permits(1);
    let result = bounded(run.result()).await.unwrap();
    assert_eq!(result.stop_reason, StopReason::ERROR);
    let diagnostic = result.diagnostic.clone().unwrap_or_default();
    assert!(
        diagnostic.contains("Input/output error"),
        "the OS error is in the diagnostic: {diagnostic}"
    );
    idle(&world).await;
    let notices = notices_from(world.root.agent(), "child");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].0, Some(StopReason::ERROR));
    assert!(
        notices[0].1.contains("Input/output error"),
        "{}",
        notices[0].1
    );
}

// B28/B54: the notice is sent only after the child stops taking input, so a
// message that arrives while the notice is on its way goes to a resume and
// is answered, never claimed by a turn the teardown then cancels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_while_the_notice_is_on_its_way_is_answered_by_a_resume() {
    let world = World::new(Backing::Jsonl(DURABILITY), RuntimeConfig::default()).await;
    let gate = Arc::new(Semaphore::new(0));
    world.model.push(Scripted::Gated {
        gate: gate.clone(),
        then: Box::new(Scripted::Text("first answer".into())),
    });
    let mut spec = world.spec(Some("worker"));
    spec.child_id = Some(sid("child"));
    world.runtime.start_activation(spec).await.unwrap();
    // The root's next append is the child's notice: hold it there.
    let notice = world.hold(&Point {
        op: Op::Append,
        id: sid("lead"),
        when: When::Before,
    });
    gate.add_permits(1);
    bounded(notice.reached()).await;
    let late = tokio::spawn(world.tell("child", "one late question"));
    notice.release();
    bounded(late).await.unwrap().unwrap();
    until(|| notices_from(world.root.agent(), "child").len() == 2).await;
    world.quiesce().await;
    let notices = notices_from(world.root.agent(), "child");
    assert_eq!(
        notices
            .iter()
            .map(|(reason, _)| reason.clone())
            .collect::<Vec<_>>(),
        [Some(StopReason::COMPLETED), Some(StopReason::COMPLETED)],
        "the late message was answered by a resumed activation: {notices:?}"
    );
}

// B9 after a kill: a log left between a child's creation and its catalog
// entry is removed; a session that ever took input is never touched.
#[tokio::test]
async fn b9_orphan_logs_a_kill_left_are_removed_and_nothing_else() {
    let world = World::new(Backing::Jsonl(DURABILITY), RuntimeConfig::default()).await;
    let stray = |id: &str| {
        let mut header = dsh_core::SessionHeader::new(sid(id), world.dir());
        header.parent_session = Some(sid("lead"));
        header
    };
    let orphan = world.session(stray("orphan")).await;
    orphan.dispose().await;
    let worked = world.session(stray("worked")).await;
    worked
        .agent()
        .followup(dsh_core::UserMessage::user_text("a task from elsewhere"))
        .await
        .unwrap();
    bounded(worked.agent().wait_idle()).await;
    worked.dispose().await;
    let live = world.session(stray("live")).await;
    world.cold_child("child").await;
    // What a create killed before its header landed leaves (a torn
    // header-only file), and a file in the directory that is no log at all.
    std::fs::write(world.jsonl().log_path(&sid("torn")), br#"{"id":"to"#).unwrap();
    std::fs::write(world.jsonl().log_path(&sid("foreign")), b"not a log\n").unwrap();

    let mut removed = world
        .runtime
        .remove_orphans(world.root.agent())
        .await
        .unwrap();
    removed.sort();
    assert_eq!(removed, [sid("orphan"), sid("torn")]);
    assert_eq!(
        world.sessions().await,
        [
            sid("child"),
            sid("foreign"),
            sid("lead"),
            sid("live"),
            sid("worked")
        ]
    );
    drop(live);
}

/// How many turns `agent`'s log has started.
fn turns(agent: &Arc<dyn dsh_core::Agent>) -> usize {
    agent
        .events()
        .iter()
        .filter(|event| matches!(event.payload, dsh_core::EventPayload::TurnStart(_)))
        .count()
}

// A quiet tree (`dsh send <child>`): the child's notice reaches its idle
// root exactly once but starts no turn; it stays queued and the next waking
// message's turn reads it. Once the guard is gone, a notice wakes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_quiet_tree_a_notice_is_queued_for_its_idle_creator_and_wakes_no_one() {
    let world = World::new(Backing::Jsonl(DURABILITY), RuntimeConfig::default()).await;
    let root = world.root.agent().clone();
    let quiet = world.runtime.quiet_tree(&sid("lead"));
    let nested = world.runtime.quiet_tree(&sid("lead"));
    world.model.push(Scripted::Text("first answer".into()));
    let mut spec = world.spec(Some("worker"));
    spec.child_id = Some(sid("child"));
    world.runtime.start_activation(spec).await.unwrap();
    until(|| notices_from(&root, "child").len() == 1).await;
    world.quiesce().await;
    assert_eq!(turns(&root), 0, "the notice started a turn");
    assert_eq!(root.pending().len(), 1, "the notice is queued");
    // One of two guards gone: still quiet.
    drop(nested);
    world.model.push(Scripted::Text("second answer".into()));
    bounded(world.tell("child", "again")).await.unwrap();
    until(|| notices_from(&root, "child").len() == 2).await;
    world.quiesce().await;
    assert_eq!(turns(&root), 0, "a nested guard's drop woke the tree");
    // The last guard gone: the next notice wakes the root, whose turn reads
    // all three.
    drop(quiet);
    world.model.push(Scripted::Text("third answer".into()));
    world
        .model
        .push(Scripted::Text("the lead read them".into()));
    bounded(world.tell("child", "once more")).await.unwrap();
    until(|| notices_from(&root, "child").len() == 3).await;
    world.quiesce().await;
    bounded(root.wait_idle()).await;
    assert_eq!(turns(&root), 1);
    assert!(root.pending().is_empty(), "{:?}", root.pending());
}
