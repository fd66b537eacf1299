//! The crash-point harness over a delegating workload (B52, B53, B54): a
//! lead starts three children in the background (each calls a tool, then
//! answers), is woken by their notices, and messages a settled child, which
//! is resumed cold to answer. The run is made once over a
//! [`RecordingStore`]; then, for every write and a spread of byte offsets
//! in it (its ends, around every line boundary and at a stride), the
//! directory is rebuilt as a crash there would have left it and opened by
//! a new process's world. After each rebuild: no temporary file survives
//! the store's opening; every log is a prefix of what the run wrote and
//! holds every acknowledged write; the tree lists; lost notices are
//! delivered exactly once (a second pass finds none, no notice id repeats);
//! every cataloged child has a log, and every one whose turn ended has
//! told its creator; every session
//! resumes with each tool call answered and its pending inbox equal to
//! accepted − claimed − discarded, with no acknowledged message lost.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_core::message::Message;
use dsh_core::session::{EventPayload, SessionEvent};
use dsh_core::{
    Agent, CancellationToken, Durability, MessageId, MessageSource, SessionId, SessionStore,
};
use dsh_harness::store::JsonlStore;
use dsh_harness::{Scripted, ScriptedModel};

use dsh_test_support::logs::{accepted_minus_claimed, delivered, unanswered};
use dsh_test_support::store::{CrashPoint, Finals, Op, RecordingStore, SharedStore, Write};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{NamedTool, World, WorldBuilder, sid};
use serde_json::json;

const DURABILITY: Durability = Durability::None;

/// Writes up to this long are cut at every byte; longer ones at a spread.
const EVERY_BYTE: u64 = 48;

/// Children the lead starts.
const CHILDREN: usize = 3;

/// A model that calls the `alpha` tool for new input and answers once the
/// tool has answered: every agent of the run makes tool calls.
fn model() -> Arc<ScriptedModel> {
    Arc::new(
        ScriptedModel::new().responder(|request| match request.messages.last() {
            Some(Message::Tool { .. }) => Scripted::Text("done".into()),
            _ => Scripted::ToolCalls {
                text: Some("checking".into()),
                calls: vec![("alpha".into(), json!({}))],
            },
        }),
    )
}

/// Run the delegating workload once in `dir`, recording every write.
async fn workload(dir: &Path) -> RecordingStore<SharedStore> {
    let locate = {
        let jsonl = JsonlStore::new(dir, DURABILITY).unwrap();
        move |id: &SessionId| jsonl.log_path(id)
    };
    let world = WorldBuilder::new()
        .jsonl(DURABILITY)
        .in_dir(dir)
        .wrap(move |base| Arc::new(RecordingStore::new(SharedStore(base), locate)))
        .model(model())
        .tool(Arc::new(NamedTool("alpha")))
        .local()
        .build()
        .await;
    let (harness, runtime) = (&world.harness, &world.runtime);
    let lead = world.lead();
    let mut children = Vec::new();
    for n in 0..CHILDREN {
        let spec = dsh_subagent::ActivationSpec {
            provider: "local".into(),
            label: format!("task {n}"),
            name: Some(format!("c{n}")),
            child_id: Some(sid(&format!("c{n}"))),
            cancel: CancellationToken::new(),
            delivery: dsh_subagent::Delivery::Parent,
            request: dsh_subagent::StartRequest::new(
                lead.clone(),
                vec![dsh_core::ContentBlock::text(format!("do task {n}"))],
            ),
        };
        children.push(runtime.start_activation(spec).await.unwrap());
    }
    for child in &children {
        bounded(child.result()).await.unwrap();
    }
    until(|| runtime.tasks().is_empty()).await;
    bounded(lead.wait_idle()).await;
    // A message to a settled child resumes it cold; it answers with a notice.
    runtime
        .send_message(
            &lead,
            &sid("c0"),
            vec![dsh_core::ContentBlock::text("one more thing")],
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    until(|| runtime.tasks().is_empty()).await;
    bounded(lead.wait_idle()).await;
    until(|| runtime.tasks().is_empty()).await;
    bounded(harness.shutdown()).await;
    RecordingStore::clone(&world.store)
}

/// The ids of the settlement notices a log accepted, by child.
fn notices(events: &[SessionEvent]) -> Vec<(SessionId, MessageId)> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::InboxAccepted(accepted) => match &accepted.message.source {
                MessageSource::SubagentSettled {
                    sender_session_id, ..
                } => Some((sender_session_id.clone(), accepted.message.id.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Lay out in `scratch` what a crash at `point` leaves.
fn rebuild(
    recording: &RecordingStore<SharedStore>,
    finals: &HashMap<PathBuf, Vec<u8>>,
    point: CrashPoint,
    write: &Write,
    scratch: &Path,
) {
    for entry in fs::read_dir(scratch).unwrap() {
        fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let (files, unpublished) = recording.rebuild(finals, point);
    for (path, bytes) in files {
        fs::write(scratch.join(path.file_name().unwrap()), bytes).unwrap();
    }
    if let Some(create) = unpublished {
        // Died while writing the temporary file of a create, as a process
        // that is gone (pid 0 is never a live writer's).
        let bytes = &finals[&create.path][..usize::try_from(point.bytes).unwrap()];
        fs::write(scratch.join(format!(".{}.0-0-0.tmp", write.id)), bytes).unwrap();
    }
}

/// Check what a crash at `point` left in `scratch`.
async fn check(
    point: CrashPoint,
    writes: &[Write],
    finals: &HashMap<SessionId, Vec<SessionEvent>>,
    scratch: &Path,
) {
    let at = format!(
        "crash in write {} ({:?} of {}) at byte {}",
        point.write, writes[point.write].op, writes[point.write].id, point.bytes
    );
    // The store's view: leftovers swept, every log a prefix holding every
    // acknowledged write.
    let store = JsonlStore::new(scratch, DURABILITY).unwrap();
    let leftovers: Vec<_> = fs::read_dir(scratch)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .filter(|name| name.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{at}: left {leftovers:?}");
    let ids = store.list().await.unwrap();
    let mut images = HashMap::new();
    for id in &ids {
        let loaded = store
            .load(id)
            .await
            .unwrap_or_else(|err| panic!("{at}: {id} does not load: {err}"));
        let held = loaded.events.len();
        assert_eq!(loaded.events, finals[id][..held], "{at}: {id} is no prefix");
        let acked: usize = writes[..point.write]
            .iter()
            .filter(|write| write.id == *id)
            .map(|write| write.events.len())
            .sum();
        assert!(
            held >= acked,
            "{at}: {id} holds {held}, {acked} acknowledged"
        );
        images.insert(id.clone(), loaded.events);
    }
    drop(store);
    if !ids.contains(&sid("lead")) {
        assert!(ids.is_empty(), "{at}: children without a lead: {ids:?}");
        return;
    }

    // A new process over what the crash left.
    let after = World::restarted(scratch, DURABILITY).await;
    let lead = after.root.agent().clone();
    let rows = after
        .descendants()
        .await
        .unwrap_or_else(|err| panic!("{at}: the tree does not list: {err}"));
    let cataloged: HashSet<SessionId> = rows.iter().map(|row| row.entry.child_id.clone()).collect();
    bounded(after.runtime.deliver_lost_notices(&lead))
        .await
        .unwrap_or_else(|err| panic!("{at}: lost notices: {err}"));
    until(|| after.runtime.tasks().is_empty()).await;
    bounded(lead.wait_idle()).await;
    let again = bounded(after.runtime.deliver_lost_notices(&lead))
        .await
        .unwrap();
    assert_eq!(again, 0, "{at}: a lost notice is delivered once");
    until(|| after.runtime.tasks().is_empty()).await;
    let lead_events = lead.events();
    let told = notices(&lead_events);
    let mut seen = HashSet::new();
    for (_, id) in &told {
        assert!(seen.insert(id.clone()), "{at}: notice {id} repeated");
    }
    for child in &cataloged {
        // A child is cataloged only once its log exists: a catalog entry
        // without one is a child no reader can open.
        let image = images
            .get(child)
            .unwrap_or_else(|| panic!("{at}: the cataloged child {child} has no log"));
        let ended = image
            .iter()
            .any(|event| matches!(event.payload, EventPayload::TurnEnd(_)));
        if ended {
            assert!(
                told.iter().any(|(from, _)| from == child),
                "{at}: {child} ended a turn and its creator never heard"
            );
        }
    }
    drop(lead_events);

    // Every session resumes answered and with its pending inbox intact.
    for id in &ids {
        let agent: Arc<dyn Agent> = match after.runtime.registry().get(id) {
            Some(live) => live,
            None => match after.try_resume(id).await {
                Ok(handle) => handle.agent().clone(),
                Err(err) => panic!("{at}: {id} does not resume: {err}"),
            },
        };
        let events = agent.events();
        let pending: BTreeSet<MessageId> = agent.pending().into_iter().collect();
        assert_eq!(pending, accepted_minus_claimed(&events), "{at}: {id}");
        assert_eq!(unanswered(&events), Vec::<String>::new(), "{at}: {id}");
        for write in &writes[..point.write] {
            if write.id != *id {
                continue;
            }
            for event in &write.events {
                if let EventPayload::InboxAccepted(accepted) = &event.payload {
                    let message = &accepted.message.id;
                    assert!(
                        pending.contains(message) || delivered(&events).contains(message),
                        "{at}: {id} lost the acknowledged message {message}"
                    );
                }
            }
        }
    }
    until(|| after.runtime.tasks().is_empty()).await;
    bounded(after.harness.shutdown()).await;
    dsh_test_support::replays::assert_store_replays(&JsonlStore::new(scratch, DURABILITY).unwrap())
        .await;
}

#[tokio::test]
async fn b52_b54_a_crash_at_any_point_of_a_delegating_run_recovers() {
    let run = tempfile::tempdir().unwrap();
    let recording = workload(run.path()).await;
    let writes = recording.writes();
    assert!(writes.len() >= 30, "only {} writes", writes.len());
    let Finals { files, events } = recording.finals().await.unwrap();
    assert!(
        writes
            .iter()
            .any(|write| write.op == Op::Create && write.id == sid("c0")),
        "the workload creates its children"
    );
    let points = recording.crash_points(EVERY_BYTE).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    for point in &points {
        rebuild(
            &recording,
            &files,
            *point,
            &writes[point.write],
            scratch.path(),
        );
        check(*point, &writes, &events, scratch.path()).await;
    }
    println!("{} crash points over {} writes", points.len(), writes.len());
}
