//! `resume_tree` after a SIGKILL (issue 19), against the real harness and
//! the real JSONL store, across two processes. The test re-executes its own
//! binary as a child process that builds a tree under `lead`: `runner`
//! (its first turn held, a message queued behind it), `sleeper` (its first
//! turn held, nothing queued), `parked` (its turn held, a message queued,
//! then interrupted by the user, so the message is parked) and `idle` (done
//! before the kill). It signals readiness with a file and is killed with
//! SIGKILL. A new process over the same directory calls `resume_tree(lead)`
//! once and finds the tree as it was: the root live; `runner` resumed and
//! continuing with its queued message; `sleeper` resumed, its cut turn
//! closed as aborted and its creator told so (B54); `parked` cold with its
//! input, which never reached the model; `idle` cold. The only wait that is
//! not a gate is the bounded poll for the readiness file, which crosses a
//! process boundary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_core::{CancellationToken, ContentBlock, Durability, StopReason};
use dsh_harness::{Scripted, ScriptedModel};
use dsh_subagent::{InterruptAuthority, MemberResume, ResumeReason};
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::requests::user_texts;
use dsh_test_support::wait::bounded;
use dsh_test_support::world::process::{child_process, runtime, start_ready};
use dsh_test_support::world::{WorldBuilder, named_spec, notices_from, sid};
use tokio::sync::Semaphore;

/// The variable that turns the child-process test on, naming the directory.
const DIR_VAR: &str = "DSH_RESUME_TREE_DIR";

/// The root agent's session id.
const LEAD: &str = "lead-session";

/// How long the readiness poll may take before the test fails.
const BOUND: Duration = Duration::from_secs(60);

/// One process's view of the directory, with `spawn` registered and a root
/// named `root`.
fn world(dir: &Path, model: &Arc<ScriptedModel>, root: &str) -> WorldBuilder {
    WorldBuilder::project()
        .jsonl(Durability::EveryEvent)
        .in_dir(dir)
        .model(model.clone())
        .provider(Arc::new(SpawnProvider::new()))
        .root(root)
}

/// Build the tree, hold three turns, park one, signal readiness and wait
/// to be killed.
async fn doomed(dir: PathBuf) {
    let gate = Arc::new(Semaphore::new(0));
    let held = gate.clone();
    let model = Arc::new(ScriptedModel::new().responder(move |request| {
        let texts = user_texts(&request.messages);
        if texts.first().is_some_and(|text| text == "quick") {
            Scripted::Text("done quickly".into())
        } else {
            // Every other turn (the lead's too) is held for good.
            Scripted::Gated {
                gate: held.clone(),
                then: Box::new(Scripted::Text("never".into())),
            }
        }
    }));
    let world = world(&dir, &model, LEAD).build().await;
    let lead = world.lead();
    let cancel = CancellationToken::new();

    let idle = bounded(
        world
            .runtime
            .start_activation(named_spec(&lead, "spawn", "idle", "quick")),
    )
    .await
    .unwrap();
    let settled = bounded(idle.result()).await.unwrap();
    assert!(settled.stop_reason.is_completed(), "{settled:?}");

    let mut running = Vec::new();
    for name in ["runner", "sleeper", "parked"] {
        let activation = bounded(world.runtime.start_activation(named_spec(
            &lead,
            "spawn",
            name,
            &format!("hold {name}"),
        )))
        .await
        .unwrap();
        running.push(activation);
    }
    // Each held child is inside its first turn.
    for name in ["runner", "sleeper", "parked"] {
        let agent = world
            .runtime
            .registry()
            .get(&sid(&format!("s-{name}")))
            .unwrap();
        let mut status = agent.watch_status();
        bounded(status.wait_for(|status| *status == dsh_core::AgentStatus::Running))
            .await
            .unwrap();
    }
    for (name, text) in [("runner", "runner input"), ("parked", "parked input")] {
        bounded(world.runtime.send_message(
            &lead,
            &sid(&format!("s-{name}")),
            vec![ContentBlock::text(text)],
            &cancel,
        ))
        .await
        .unwrap();
    }
    bounded(
        world
            .runtime
            .interrupt(&sid("s-parked"), &InterruptAuthority::User),
    )
    .await
    .unwrap();
    let parked = world.runtime.registry().get(&sid("s-parked")).unwrap();
    bounded(parked.wait_idle()).await;

    std::fs::write(dir.join("ready.tmp"), b"ready").unwrap();
    std::fs::rename(dir.join("ready.tmp"), dir.join("ready")).unwrap();
    // Keep everything alive until the kill.
    let _keep = (world, lead, running, parked, gate, model);
    std::future::pending::<()>().await;
}

/// Runs only when re-executed by `resume_tree_after_sigkill`.
#[test]
fn resume_tree_child_process() {
    child_process(DIR_VAR, doomed);
}

#[test]
fn resume_tree_after_sigkill_brings_the_tree_back_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = start_ready("resume_tree_child_process", DIR_VAR, dir.path(), BOUND);
    let mut process = child.take();
    process.kill().unwrap();
    let status = process.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "killed by SIGKILL: {status}");
    runtime().block_on(after_restart(dir.path()));
}

async fn after_restart(dir: &Path) {
    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("ok".into())));
    // A host root of its own; the tree's root is resumed by the call.
    let world = bounded(world(dir, &model, "host").build()).await;
    let cancel = CancellationToken::new();
    let tree = bounded(
        world
            .runtime
            .resume_tree(&sid(LEAD), Default::default(), &cancel),
    )
    .await
    .unwrap();
    let lead = tree.root.agent().clone();
    assert!(
        world.runtime.registry().get(&sid(LEAD)).is_some(),
        "the root is live"
    );
    let outcome = |name: &str| tree.members.outcome(&sid(&format!("s-{name}"))).cloned();
    assert_eq!(
        outcome("runner"),
        Some(MemberResume::Resumed(ResumeReason::PendingInput))
    );
    assert_eq!(
        outcome("sleeper"),
        Some(MemberResume::Resumed(ResumeReason::InterruptedTurn))
    );
    assert_eq!(outcome("parked"), Some(MemberResume::Parked));
    assert_eq!(outcome("idle"), Some(MemberResume::Cold));
    assert_eq!(tree.members.members.len(), 4, "{:?}", tree.members);

    bounded(world.runtime.wait_for_tree_work(&lead)).await;
    bounded(world.quiesce()).await;

    // The runner continued with the message queued before the kill.
    let asked: Vec<String> = model
        .requests()
        .iter()
        .flat_map(|request| user_texts(&request.messages))
        .collect();
    assert!(asked.iter().any(|t| t == "runner input"), "{asked:?}");
    // The parked input stays parked, and nobody woke the idle child.
    assert!(!asked.iter().any(|t| t == "parked input"), "{asked:?}");
    assert!(world.runtime.registry().get(&sid("s-parked")).is_none());
    assert!(world.runtime.registry().get(&sid("s-idle")).is_none());

    // The sleeper's cut turn reached its creator as `aborted`, once; the
    // runner's settlement too, and the idle child's notice is still one.
    let sleeper = notices_from(&lead, "s-sleeper");
    assert_eq!(sleeper.len(), 1, "{sleeper:?}");
    assert_eq!(sleeper[0].0, Some(StopReason::ABORTED), "{sleeper:?}");
    let runner = notices_from(&lead, "s-runner");
    assert_eq!(runner.len(), 1, "{runner:?}");
    assert_eq!(runner[0].0, Some(StopReason::COMPLETED), "{runner:?}");
    assert_eq!(notices_from(&lead, "s-idle").len(), 1);
    assert!(notices_from(&lead, "s-parked").is_empty());

    // A second call finds nothing more to do.
    let again = bounded(world.runtime.resume_members(&lead, &cancel))
        .await
        .unwrap();
    assert_eq!(again.resumed().count(), 0, "{again:?}");
    assert_eq!(again.root_notices, 0);
    world.runtime.shutdown().await;
    tree.root.dispose().await;
}

/// A `resume_tree` dropped while it walks the members leaves no live root
/// behind: the root it resumed is disposed, and the tree can be resumed
/// again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_tree_dropped_during_the_walk_leaves_no_live_root() {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("ok".into())));
    let world = bounded(world(dir.path(), &model, "host").holding().build()).await;
    // A second tree in the same directory: its root and one settled child,
    // then the root disposed, so the tree is cold.
    let root = bounded(world.session(dsh_core::SessionHeader::new(
        sid(LEAD),
        dir.path().to_path_buf(),
    )))
    .await;
    let idle = bounded(world.runtime.start_activation(named_spec(
        root.agent(),
        "spawn",
        "idle",
        "quick",
    )))
    .await
    .unwrap();
    bounded(idle.result()).await.unwrap();
    bounded(world.quiesce()).await;
    bounded(root.dispose()).await;
    bounded(dsh_test_support::wait::until(|| {
        world.runtime.registry().get(&sid(LEAD)).is_none()
    }))
    .await;

    // Held where the walk reads the member's log, and dropped there.
    let gate = world.hold(&dsh_test_support::world::Point {
        op: dsh_test_support::world::Op::Load,
        id: sid("s-idle"),
        when: dsh_test_support::world::When::Before,
    });
    let cancel = CancellationToken::new();
    let lead = sid(LEAD);
    let mut walk = Box::pin(
        world
            .runtime
            .resume_tree(&lead, Default::default(), &cancel),
    );
    tokio::select! {
        biased;
        () = bounded(gate.reached()) => {}
        _ = &mut walk => panic!("the walk finished before it read the member"),
    }
    assert!(
        world.runtime.registry().get(&sid(LEAD)).is_some(),
        "the root is live while the walk runs"
    );
    drop(walk);
    gate.release();
    bounded(dsh_test_support::wait::until(|| {
        world.runtime.registry().get(&sid(LEAD)).is_none()
    }))
    .await;

    // Nothing is left half-done: the next call resumes the tree.
    let tree = bounded(
        world
            .runtime
            .resume_tree(&sid(LEAD), Default::default(), &cancel),
    )
    .await
    .unwrap();
    assert_eq!(
        tree.members.outcome(&sid("s-idle")),
        Some(&MemberResume::Cold)
    );
    bounded(tree.root.dispose()).await;
}
