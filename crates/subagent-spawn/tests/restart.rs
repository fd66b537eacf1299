//! Restart after a crash (B29, B34, B35), against the real harness and the
//! real JSONL store, across two processes. The test re-executes its own
//! binary as a child process that builds a three-level named tree (`lead`
//! → `alpha` → `beta` → `gamma`, reserved ids), holds every child's first
//! turn behind a gate that never opens, queues two messages to `beta`
//! behind its running turn, records what it saw (listing, names, message
//! ids) and signals readiness with a file. The test then kills it with
//! SIGKILL in the middle of those turns and, over the same directory, finds
//! the same catalog, names and listing, resumes the cold `beta` by name,
//! delivers a message to it, and checks that every accepted message is in
//! `beta`'s log exactly once and claimed exactly once, that the turn killed
//! mid-flight is closed as aborted, and that the queued messages reached
//! the model after the restart. The only wait that is not a gate is the
//! bounded poll for the readiness file, which crosses a process boundary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_test_support::requests::user_texts;
use dsh_test_support::wait::bounded;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_core::{Agent, CancellationToken, ContentBlock, Durability, EventPayload, StopReason};
use dsh_harness::{Scripted, ScriptedModel};
use dsh_subagent::{DescendantRow, SubagentRuntime};
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::world::process::{child_process, runtime, start_ready};
use dsh_test_support::world::{WorldBuilder, named_spec, sid};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};

/// The variable that turns the child-process test on, naming the directory.
const DIR_VAR: &str = "DSH_RESTART_DIR";

/// The root agent's session id.
const LEAD: &str = "lead-session";

/// How long any single wait may take before the test fails instead of hanging.
const BOUND: Duration = Duration::from_secs(30);

/// One process's view of the directory: a kit world over its JSONL logs
/// (in `sessions/`, the root in `project/`) with `spawn` registered, whose
/// root `lead-session` is created, or resumed from what a killed process
/// left.
fn world(dir: &Path, model: &Arc<ScriptedModel>) -> WorldBuilder {
    WorldBuilder::project()
        .jsonl(Durability::EveryEvent)
        .in_dir(dir)
        .model(model.clone())
        .provider(Arc::new(SpawnProvider::new()))
}

/// The listing as plain JSON, comparable across processes.
/// The listing as JSON, without the activity (what is live differs
/// between the killed process and the restarted one).
fn listing_json(rows: &[DescendantRow]) -> Value {
    let mut json = serde_json::to_value(rows).unwrap();
    if let Some(rows) = json.as_array_mut() {
        for row in rows {
            if let Some(row) = row.as_object_mut() {
                row.remove("activity");
            }
        }
    }
    json
}

/// `depth parent child path` per row.
fn outline(rows: &[DescendantRow]) -> Vec<String> {
    rows.iter()
        .map(|row| {
            format!(
                "{} {} {} {}",
                row.depth,
                row.parent_id,
                row.entry.child_id,
                row.path.as_deref().unwrap_or("-")
            )
        })
        .collect()
}

const NAMES: [&str; 4] = ["alpha", "alpha/beta", "alpha/beta/gamma", "lead"];

async fn resolve_all(runtime: &SubagentRuntime, caller: &Arc<dyn Agent>) -> Value {
    let cancel = CancellationToken::new();
    let mut names = serde_json::Map::new();
    for name in NAMES {
        let id = bounded(runtime.resolve_name(caller, name, &cancel))
            .await
            .unwrap();
        names.insert(name.into(), json!(id.to_string()));
    }
    Value::Object(names)
}

// ---------------------------------------------------------------------------
// The process that is killed
// ---------------------------------------------------------------------------

/// Build the tree, queue messages behind `beta`'s held turn, record what
/// this process sees, signal readiness and wait to be killed.
async fn doomed(dir: PathBuf) {
    let gate = Arc::new(Semaphore::new(0));
    let (started, mut turns) = mpsc::unbounded_channel::<String>();
    let held = gate.clone();
    let model = Arc::new(ScriptedModel::new().responder(move |request| {
        let texts = user_texts(&request.messages);
        let _ = started.send(texts.first().cloned().unwrap_or_default());
        // Every child's first turn is held for good.
        Scripted::Gated {
            gate: held.clone(),
            then: Box::new(Scripted::Text("never".into())),
        }
    }));
    let world = world(&dir, &model).build().await;
    let lead = world.lead();
    let mut parent = lead.clone();
    for name in ["alpha", "beta", "gamma"] {
        let activation = bounded(world.runtime.start_activation(named_spec(
            &parent,
            "spawn",
            name,
            &format!("hold {name}"),
        )))
        .await
        .unwrap();
        parent = world.runtime.registry().get(activation.child_id()).unwrap();
    }
    // Every child is in the middle of its first turn (its model was asked).
    let mut prompts = Vec::new();
    for _ in 0..3 {
        prompts.push(bounded(turns.recv()).await.unwrap());
    }
    prompts.sort();
    assert_eq!(prompts, ["hold alpha", "hold beta", "hold gamma"]);

    // Two messages queued behind beta's held turn.
    let cancel = CancellationToken::new();
    let mut queued = Vec::new();
    for text in ["before kill 1", "before kill 2"] {
        let id = bounded(world.runtime.send_message(
            &lead,
            &sid("s-beta"),
            vec![ContentBlock::text(text)],
            &cancel,
        ))
        .await
        .unwrap();
        queued.push(id.to_string());
    }

    let listing = bounded(world.runtime.list_descendants(&sid(LEAD), &cancel))
        .await
        .unwrap();
    let seen = json!({
        "listing": listing_json(&listing),
        "names": resolve_all(&world.runtime, &lead).await,
        "queued": queued,
    });
    std::fs::write(dir.join("seen.json"), serde_json::to_vec(&seen).unwrap()).unwrap();
    std::fs::write(dir.join("ready.tmp"), b"ready").unwrap();
    std::fs::rename(dir.join("ready.tmp"), dir.join("ready")).unwrap();
    // Keep everything alive until the kill.
    let _keep = (world, lead, parent, gate, model);
    std::future::pending::<()>().await;
}

/// Runs only when re-executed by `restart_after_sigkill`.
#[test]
fn restart_child_process() {
    child_process(DIR_VAR, doomed);
}

// ---------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------

/// Start the doomed process, wait for it to be ready, and kill it.
fn run_and_kill(dir: &Path) {
    let mut child = start_ready("restart_child_process", DIR_VAR, dir, BOUND);
    let mut process = child.take();
    process.kill().unwrap();
    let status = process.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "killed by SIGKILL: {status}");
}

#[test]
fn restart_after_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    run_and_kill(dir.path());
    let seen: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("seen.json")).unwrap()).unwrap();
    runtime().block_on(after_restart(dir.path(), &seen));
}

async fn after_restart(dir: &Path, seen: &Value) {
    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("ok".into())));
    // The dead process's lock on the root's log is gone: it resumes.
    let world = bounded(world(dir, &model).resume_root().build()).await;
    let lead = world.lead();
    let cancel = CancellationToken::new();

    // The same catalog and listing, read from the logs alone.
    let listing = bounded(world.runtime.list_descendants(&sid(LEAD), &cancel))
        .await
        .unwrap();
    assert_eq!(
        outline(&listing),
        [
            "1 lead-session s-alpha alpha",
            "2 s-alpha s-beta alpha/beta",
            "3 s-beta s-gamma alpha/beta/gamma",
        ]
    );
    assert!(listing.iter().all(|row| row.diagnostic.is_none()));
    assert_eq!(listing_json(&listing), seen["listing"], "the same listing");

    // The same names.
    assert_eq!(
        resolve_all(&world.runtime, &lead).await,
        seen["names"],
        "the same names"
    );
    let beta = bounded(world.runtime.resolve_name(&lead, "alpha/beta", &cancel))
        .await
        .unwrap();
    assert_eq!(beta, sid("s-beta"));
    assert!(
        world.runtime.registry().get(&beta).is_none(),
        "beta is cold"
    );

    // A message to the cold grandchild resumes it and is delivered.
    let after = bounded(world.runtime.send_message(
        &lead,
        &beta,
        vec![ContentBlock::text("after restart")],
        &cancel,
    ))
    .await
    .unwrap();
    let mut queued: Vec<String> = seen["queued"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(queued.len(), 2);
    queued.push(after.to_string());

    // Wait until beta has claimed everything it accepted and is idle.
    if let Some(agent) = world.runtime.registry().get(&beta) {
        bounded(async {
            loop {
                agent.wait_idle().await;
                let events = agent.events();
                let claimed = events
                    .iter()
                    .filter_map(|e| match &e.payload {
                        EventPayload::InboxClaimed(c) => Some(c.message_ids.clone()),
                        _ => None,
                    })
                    .flatten()
                    .any(|id| id.as_str() == after.as_str());
                if claimed {
                    break;
                }
                tokio::task::yield_now().await;
            }
        })
        .await;
    }

    let log = bounded(world.store.load(&beta)).await.unwrap();
    let accepted: Vec<String> = log
        .events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::InboxAccepted(a) => Some(a.message.id.to_string()),
            _ => None,
        })
        .collect();
    let claimed: Vec<String> = log
        .events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::InboxClaimed(c) => Some(c.message_ids.clone()),
            _ => None,
        })
        .flatten()
        .map(|id| id.to_string())
        .collect();
    // The prompt plus the two queued before the kill plus the one after.
    assert_eq!(accepted.len(), 4, "{accepted:?}");
    for id in &queued {
        assert!(accepted.contains(id), "{id} was accepted");
    }
    for id in &accepted {
        assert_eq!(
            accepted.iter().filter(|a| *a == id).count(),
            1,
            "{id} accepted once"
        );
        assert_eq!(
            claimed.iter().filter(|c| *c == id).count(),
            1,
            "{id} claimed once: {claimed:?}"
        );
    }

    // The turn running at the kill is closed as aborted.
    let ends: Vec<(u64, StopReason)> = log
        .events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::TurnEnd(end) => Some((end.turn, end.stop_reason.clone())),
            _ => None,
        })
        .collect();
    assert!(ends.len() >= 2, "a turn ran after the restart: {ends:?}");
    assert_eq!(ends[0].1, StopReason::ABORTED, "{ends:?}");
    assert!(
        ends[1..]
            .iter()
            .all(|(_, reason)| *reason != StopReason::ABORTED),
        "{ends:?}"
    );

    // The messages queued before the kill reached the model after the restart.
    let asked: Vec<String> = model
        .requests()
        .iter()
        .flat_map(|request| user_texts(&request.messages))
        .collect();
    for text in ["before kill 1", "before kill 2", "after restart"] {
        assert!(asked.iter().any(|t| t == text), "{text}: {asked:?}");
    }
    world.runtime.shutdown().await;
}
