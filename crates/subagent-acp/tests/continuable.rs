//! Continuable ACP children (issue 16): an agent that advertises
//! `loadSession` keeps its ACP session across turns, so `send_message` to
//! its settled child runs another `session/prompt` on the same session (the
//! agent loaded again with `session/load`, its replayed history kept out
//! of the new turn's output); after the parent process was SIGKILLed, a
//! new process resumes the child the same way from what the creator's log
//! recorded. An agent without `loadSession` keeps the refusal (B42).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_core::{CancellationToken, ContentBlock, Durability, SessionId};
use dsh_subagent::{Delivery, SubagentEvent};
use dsh_subagent_acp::{AcpConfig, AcpProvider};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::process::{child_process, start_ready};
use dsh_test_support::world::{World, notices_from};
use support::{MARK_VAR, marked_processes, peers, quick};

/// The variable that turns the child-process run on, naming its directory.
const DIR_VAR: &str = "DSH_ACP_CONTINUABLE_DIR";

/// The rogue agent keeping its sessions in `sessions`, marked `mark`.
fn continuable_agent(sessions: &Path, mark: &str) -> AcpConfig {
    let sessions = sessions.display().to_string();
    quick(peers().rogue(&["--sessions", &sessions, "--ignore-eof"])).env(MARK_VAR, mark)
}

/// Register `config` on `world` and start a parent-delivered child `scout`
/// with `prompt`; returns its id once it has settled.
async fn scout(world: &World, config: AcpConfig, prompt: &str) -> SessionId {
    world
        .runtime
        .register(Arc::new(AcpProvider::new(config).unwrap()))
        .unwrap();
    let mut spec = world.spec(Some("scout"));
    spec.provider = "acp".into();
    spec.delivery = Delivery::Parent;
    spec.request.prompt = vec![ContentBlock::text(prompt)];
    let activation = bounded(world.runtime.start_activation(spec)).await.unwrap();
    let result = bounded(activation.result()).await.unwrap();
    assert!(result.stop_reason.is_completed(), "{result:?}");
    activation.child_id().clone()
}

/// Send `text` to `child` from the root and wait for the notice of the turn
/// it runs; returns that notice's text.
async fn follow_up(world: &World, child: &SessionId, text: &str) -> String {
    let before = notices_from(world.root.agent(), child.as_str()).len();
    bounded(world.runtime.send_message(
        world.root.agent(),
        child,
        vec![ContentBlock::text(text)],
        &CancellationToken::new(),
    ))
    .await
    .unwrap();
    until(|| notices_from(world.root.agent(), child.as_str()).len() > before).await;
    let notices = notices_from(world.root.agent(), child.as_str());
    notices[before].1.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_runs_another_prompt_on_the_childs_acp_session() {
    let sessions = tempfile::tempdir().unwrap();
    let mark = SessionId::generate().to_string();
    let world = World::new(
        dsh_test_support::world::Backing::Jsonl(Durability::None),
        Default::default(),
    )
    .await;
    let (_subscription, mut events) = world.runtime.events().subscribe();
    let child = scout(&world, continuable_agent(sessions.path(), &mark), "say one").await;
    world.quiesce().await;
    let first = notices_from(world.root.agent(), child.as_str());
    assert_eq!(first.len(), 1);
    assert!(first[0].1.ends_with("one"), "{first:?}");

    let reply = follow_up(&world, &child, "recall; say two").await;
    // The same session: it remembers the first turn, and the replayed
    // history is not part of this turn's output.
    assert!(reply.ends_with("recalled: onetwo"), "{reply}");
    assert!(!reply.contains("oneone"), "{reply}");
    world.quiesce().await;
    let mut activations = 0;
    while let Ok(event) = events.try_recv() {
        if let SubagentEvent::Start(info) = event
            && info.child_id == child
        {
            activations += 1;
        }
    }
    assert_eq!(activations, 2, "one activation per turn, one child");
    assert!(
        marked_processes(&mark).is_empty(),
        "each turn's agent is gone once it settled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_load_session_refuses_a_follow_up() {
    let mark = SessionId::generate().to_string();
    let world = World::new(
        dsh_test_support::world::Backing::Jsonl(Durability::None),
        Default::default(),
    )
    .await;
    let config = quick(peers().rogue(&["--ignore-eof"])).env(MARK_VAR, &mark);
    let child = scout(&world, config, "say one").await;
    world.quiesce().await;
    let err = bounded(world.runtime.send_message(
        world.root.agent(),
        &child,
        vec![ContentBlock::text("recall")],
        &CancellationToken::new(),
    ))
    .await
    .unwrap_err();
    assert_eq!(err.code(), "EXTERNAL_TARGET");
}

/// The run the killed process makes: a continuable child says `alpha` and
/// hangs mid-turn; the process reports the child id and is ready.
async fn killed_run(dir: PathBuf) {
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let world = World::in_dir(&logs, Durability::None).await;
    let mark = std::fs::read_to_string(dir.join("mark")).unwrap();
    world
        .runtime
        .register(Arc::new(
            AcpProvider::new(continuable_agent(&dir.join("agent"), &mark)).unwrap(),
        ))
        .unwrap();
    let mut spec = world.spec(Some("scout"));
    spec.provider = "acp".into();
    spec.delivery = Delivery::Parent;
    spec.request.prompt = vec![ContentBlock::text("say alpha; hang")];
    let activation = world.runtime.start_activation(spec).await.unwrap();
    std::fs::write(dir.join("child"), activation.child_id().as_str()).unwrap();
    // The agent has said its word (its session file holds it) and hangs.
    let said = dir.join("agent");
    until(|| {
        std::fs::read_dir(&said).unwrap().flatten().any(|entry| {
            std::fs::read_to_string(entry.path()).is_ok_and(|text| text.contains("alpha"))
        })
    })
    .await;
    std::fs::write(dir.join("ready"), b"").unwrap();
    std::future::pending::<()>().await;
}

/// Runs only when re-executed by the SIGKILL test.
#[test]
fn continuable_child_process() {
    child_process(DIR_VAR, killed_run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_parent_process_is_sigkilled_the_child_resumes_with_session_load() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("agent")).unwrap();
    let mark = SessionId::generate().to_string();
    std::fs::write(dir.path().join("mark"), &mark).unwrap();
    let mut process = start_ready(
        "continuable_child_process",
        DIR_VAR,
        dir.path(),
        Duration::from_secs(60),
    );
    assert_eq!(marked_processes(&mark).len(), 1, "the agent runs mid-turn");
    let mut child_process = process.take();
    child_process.kill().unwrap();
    child_process.wait().unwrap();
    // The agent dies with its parent (PR_SET_PDEATHSIG).
    until(|| marked_processes(&mark).is_empty()).await;

    let child = SessionId::new(std::fs::read_to_string(dir.path().join("child")).unwrap()).unwrap();
    let world = World::restarted(&dir.path().join("logs"), Durability::None).await;
    world
        .runtime
        .register(Arc::new(
            AcpProvider::new(continuable_agent(&dir.path().join("agent"), &mark)).unwrap(),
        ))
        .unwrap();
    let reply = follow_up(&world, &child, "recall").await;
    assert!(reply.ends_with("recalled: alpha"), "{reply}");
    world.quiesce().await;
    assert!(marked_processes(&mark).is_empty());
}

/// A follow-up to a continuable ACP child whose creator is a cold member
/// (not the root): the runtime resumes the creator under the live root, so
/// the follow-up runs on the same ACP session, its notice reaches that
/// creator's log, and the creator goes cold again once it is quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_whose_creator_is_cold_resumes_the_creator_for_its_notice() {
    let sessions = tempfile::tempdir().unwrap();
    let mark = SessionId::generate().to_string();
    let world = World::new(
        dsh_test_support::world::Backing::Jsonl(Durability::None),
        Default::default(),
    )
    .await;
    world
        .runtime
        .register(Arc::new(
            AcpProvider::new(continuable_agent(sessions.path(), &mark)).unwrap(),
        ))
        .unwrap();
    // An intermediate member: a local child of the root, settled and cold.
    let mid = world.start(world.spec(Some("mid"))).await;
    bounded(mid.result()).await.unwrap();
    world.quiesce().await;
    let mid = mid.child_id().clone();
    assert!(world.runtime.registry().get(&mid).is_none(), "mid is cold");
    // The ACP child is mid's: made while mid was live, then mid went cold.
    let creator = world.resume(mid.as_str()).await;
    let mut spec = world.spec(Some("scout"));
    spec.provider = "acp".into();
    spec.request.parent = creator.agent().clone();
    spec.request.prompt = vec![ContentBlock::text("say one")];
    let scout = world.start(spec).await;
    assert!(
        bounded(scout.result())
            .await
            .unwrap()
            .stop_reason
            .is_completed()
    );
    world.quiesce().await;
    let scout = scout.child_id().clone();
    creator.dispose().await;
    assert!(world.runtime.registry().get(&mid).is_none(), "mid is cold");

    let (_subscription, mut events) = world.runtime.events().subscribe();
    bounded(world.runtime.send_message(
        world.root.agent(),
        &scout,
        vec![ContentBlock::text("recall; say two")],
        &CancellationToken::new(),
    ))
    .await
    .unwrap();
    let mut settled = None;
    while settled.is_none() {
        if let SubagentEvent::End(info, outcome) = bounded(events.recv()).await.unwrap()
            && info.child_id == scout
        {
            assert_eq!(info.parent_session_id, mid);
            settled = Some(outcome);
        }
    }
    let Some(dsh_subagent::RunOutcome::Settled(result)) = settled else {
        panic!("the follow-up failed: {settled:?}");
    };
    assert_eq!(result.output_text(), "recalled: onetwo");
    world.quiesce().await;
    assert!(
        world.runtime.registry().get(&mid).is_none(),
        "mid is cold again once quiet"
    );
    let log = dsh_core::SessionStore::load(world.store.as_ref(), &mid)
        .await
        .unwrap()
        .events;
    let heard = dsh_subagent::heard_from(&log, &scout, "mid/scout");
    assert_eq!(heard.len(), 2, "{heard:?}");
    assert!(heard[1].ends_with("recalled: onetwo"), "{}", heard[1]);
    assert!(marked_processes(&mark).is_empty());
}
