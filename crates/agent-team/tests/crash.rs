//! The crash-point harness over a team workload (B47-B49): a lead spawns
//! two teammates (one fresh, one forked), they exchange quiet and waking
//! messages and work the task board, once, over a [`RecordingStore`]. Then,
//! for every write and a spread of byte offsets in it, the directory is
//! rebuilt as a crash there would have left it, a new process resumes the
//! lead and opens its team, and the invariants are checked: the fold
//! refuses nothing and equals the live state, no member is left
//! `provisioning`, no message is held twice by its target, every
//! acknowledged message is held exactly once, every waking message is
//! delivered (only a quiet one for an inactive target may stay queued), and
//! no log is left torn (a teammate's create cut short before its header).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_agent_team::{
    CreateTask, DeliveryMode, MemberContext, MemberPhase, SendMessage, SpawnTeammate, TaskAction,
    Team, TeamConfig, UpdateTask, fold_team,
};
use dsh_core::{Agent, Durability, SessionId, SessionStore};
use dsh_harness::{JsonlStore, Scripted};
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::store::{Op, RecordingStore, SharedStore};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{World, WorldBuilder, sid};
use support::{accepted, essentials, text};

/// A process over `dir`'s logs: a kit world (the root `lead` created, or
/// resumed) with the real providers.
fn process(dir: &Path) -> WorldBuilder {
    WorldBuilder::new()
        .in_dir(dir)
        .provider(Arc::new(SpawnProvider::new()))
        .provider(Arc::new(ForkProvider::new()))
}

async fn settle<S: SessionStore + ?Sized>(process: &World<S>, team: &Team) {
    for _ in 0..2 {
        until(|| !team.is_busy()).await;
        for reference in process.runtime.registry().list() {
            if let Some(agent) = process.runtime.registry().resolve(&reference) {
                bounded(agent.wait_idle()).await;
            }
        }
    }
}

async fn send(team: &Team, from: &Arc<dyn Agent>, to: &str, body: &str, delivery: DeliveryMode) {
    bounded(team.send_message(
        from,
        SendMessage {
            to: to.into(),
            content: text(body),
            delivery,
        },
    ))
    .await
    .unwrap();
}

/// The team workload, once, recording every write under `dir`.
async fn workload(dir: &Path) -> RecordingStore<SharedStore> {
    let locate = {
        let jsonl = JsonlStore::new(dir, Durability::None).unwrap();
        move |id: &SessionId| jsonl.log_path(id)
    };
    let process = process(dir)
        .wrap(move |base| Arc::new(RecordingStore::new(SharedStore(base), locate)))
        .build()
        .await;
    let (model, lead) = (&process.model, process.lead());
    let (team, _) = bounded(Team::open(
        lead.clone(),
        process.runtime.clone(),
        process.shared_store(),
        TeamConfig::default(),
    ))
    .await
    .unwrap();
    // Alice's first turn hangs, so she stays resident to act.
    model.push(Scripted::Hang);
    for (name, context) in [
        ("alice", MemberContext::Fresh),
        ("bob", MemberContext::Fork),
    ] {
        bounded(team.spawn_teammate(
            &lead,
            SpawnTeammate {
                name: name.into(),
                description: String::new(),
                prompt: text(&format!("you are {name}")),
                context,
                worktree: false,
            },
        ))
        .await
        .unwrap();
    }
    let alice_id = team.state().member("alice").unwrap().record.id.clone();
    let bob_id = team.state().member("bob").unwrap().record.id.clone();
    until(|| process.runtime.registry().get(&bob_id).is_none()).await;
    let alice = process.runtime.registry().get(&alice_id).unwrap();

    send(&team, &alice, "bob", "hi bob", DeliveryMode::Wakeup).await;
    send(&team, &alice, "lead", "a note", DeliveryMode::Quiet).await;
    send(
        &team,
        &lead,
        "alice",
        "context for you",
        DeliveryMode::Quiet,
    )
    .await;
    let create = |subject: &str, blocked_by: Vec<String>| CreateTask {
        subject: subject.into(),
        blocked_by,
        ..CreateTask::default()
    };
    bounded(team.create_task(&lead, create("one", Vec::new())))
        .await
        .unwrap();
    bounded(team.create_task(&alice, create("two", vec!["task-1".into()])))
        .await
        .unwrap();
    for (expected_revision, action) in [(1, TaskAction::Claim), (2, TaskAction::Complete)] {
        bounded(team.update_task(
            &alice,
            UpdateTask {
                id: "task-1".into(),
                expected_revision,
                action,
            },
        ))
        .await
        .unwrap();
    }
    until(|| process.runtime.registry().get(&bob_id).is_none()).await;
    send(&team, &lead, "bob", "later, bob", DeliveryMode::Quiet).await;
    send(&team, &lead, "bob", "wake up, bob", DeliveryMode::Wakeup).await;
    bounded(team.interrupt(&lead, "alice")).await.unwrap();
    settle(&process, &team).await;
    team.shutdown().await;
    bounded(process.harness.shutdown()).await;
    RecordingStore::clone(&process.store)
}

/// Check a crash at one point: resume, open, recover, settle, then the invariants.
async fn check(scratch: &Path, label: &str) {
    let store: Arc<dyn SessionStore> =
        Arc::new(JsonlStore::new(scratch, Durability::None).unwrap());
    if !store.exists(&sid("lead")).await.unwrap() {
        return;
    }
    drop(store);
    let process = process(scratch).resume_root().label(label).build().await;
    let (store, lead) = (process.shared_store(), process.lead());
    let (team, recovery) = bounded(Team::open(
        lead.clone(),
        process.runtime.clone(),
        store.clone(),
        TeamConfig::default(),
    ))
    .await
    .unwrap_or_else(|err| panic!("{label}: the team opens: {err}"));
    assert!(recovery.errors.is_empty(), "{label}: {recovery:?}");
    settle(&process, &team).await;

    let state = team.state();
    assert!(state.refused().is_empty(), "{label}: {:?}", state.refused());
    assert_eq!(
        essentials(&state),
        essentials(&fold_team(&team.id(), &process.lead().events())),
        "{label}: live state and fold"
    );
    for member in state.members() {
        assert_ne!(member.record.phase, MemberPhase::Provisioning, "{label}");
    }
    for queued in state.messages() {
        let record = &queued.record;
        let target = if record.to == "lead" {
            lead.id().clone()
        } else {
            state.member(&record.to).unwrap().record.id.clone()
        };
        let events = match process.runtime.registry().get(&target) {
            Some(agent) => agent.events(),
            None => store.load(&target).await.unwrap().events,
        };
        let held = accepted(&events, &record.id);
        assert!(held <= 1, "{label}: {} delivered {held} times", record.id);
        if queued.delivered {
            assert_eq!(held, 1, "{label}: {} acknowledged but not held", record.id);
        } else {
            assert_eq!(
                record.delivery,
                DeliveryMode::Quiet,
                "{label}: waking {} left queued",
                record.id
            );
        }
    }
    team.shutdown().await;
    bounded(process.harness.shutdown()).await;
    // Nothing torn is left: a teammate whose create the crash cut short
    // was decided failed and its torn log removed.
    let ids = store.list().await.unwrap();
    for (id, header) in ids.iter().zip(store.header_many(&ids).await) {
        if let Err(err) = header {
            panic!("{label}: {id} does not read after recovery: {err}");
        }
    }
}

fn clear(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
}

#[tokio::test(flavor = "current_thread")]
async fn at_every_crash_point_no_message_is_lost_or_delivered_twice_and_the_fold_is_valid() {
    let run = tempfile::tempdir().unwrap();
    let recording = workload(run.path()).await;
    let writes = recording.writes();
    let mut finals: HashMap<PathBuf, Vec<u8>> = HashMap::new();
    for write in &writes {
        if let Ok(bytes) = std::fs::read(&write.path) {
            finals.insert(write.path.clone(), bytes);
        }
    }
    let team_writes = writes
        .iter()
        .filter(|write| {
            write
                .events
                .iter()
                .any(|e| e.payload.kind().starts_with("team/"))
        })
        .count();
    assert!(
        team_writes >= 15,
        "the workload writes team records: {team_writes}"
    );
    let scratch = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for point in recording.crash_points(0).unwrap() {
        let write = &writes[point.write];
        let len = write.len();
        clear(scratch.path());
        let (files, unpublished) = recording.rebuild(&finals, point);
        for (path, bytes) in files {
            std::fs::write(scratch.path().join(path.file_name().unwrap()), bytes).unwrap();
        }
        // Stopped inside a teammate's header-only create: its log file
        // holds part of its header, or nothing. (A seeded create leaves a
        // temporary file the store sweeps; the lead's own torn create is
        // no tree to recover.)
        if let Some(create) =
            unpublished.filter(|create| create.creates_in_place() && create.id != sid("lead"))
        {
            let bytes = &finals[&create.path][..usize::try_from(point.bytes).unwrap()];
            create
                .lay_out_torn_create(scratch.path(), bytes, std::process::id())
                .unwrap();
        }
        let label = format!(
            "crash in write {} ({:?} of {}) at byte {}/{}",
            point.write, write.op, write.id, point.bytes, len
        );
        if write.op == Op::Remove {
            continue;
        }
        check(scratch.path(), &label).await;
        checked += 1;
    }
    eprintln!(
        "{checked} crash points checked over {} writes",
        writes.len()
    );
    assert!(checked > 10 * team_writes, "{checked} crash points checked");
}
