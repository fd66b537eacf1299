//! The crash-point harness for the harness alone (B52), after SQLite's
//! crash tests but for a process crash only (every write before the crash
//! point whole, as the page cache keeps them; not a power loss, which can
//! lose or reorder unsynced writes): a real [`Harness`] with a scripted model runs a session
//! (injected context, follow-ups, a steer during a tool call, several tool
//! calls) once over a [`RecordingStore`]; then, for every write and a
//! spread of byte offsets in it (every offset of a small write), the
//! directory is rebuilt as a crash there would have left it (an
//! interrupted header-only create leaves its log with a torn header, a
//! seeded one its temporary file, a finished seeded one may leave its
//! second link), a fresh [`JsonlStore`] reopens it, and the invariants
//! are checked: no temporary file survives the store's opening, every log
//! opens (a torn last line is cut, nothing else is) but the torn header of
//! an interrupted create, which is recognised, kept as it was and replaced
//! by the next create of its id, what it holds is a
//! prefix of what the run wrote and holds every acknowledged write, and
//! after [`Harness::resume`] the pending inbox is accepted − claimed.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod store_support;
mod support;

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_core::message::UserMessage;
use dsh_core::session::{EventPayload, SessionEvent, SessionHeader};
use dsh_core::{
    Agent, AgentFactory, CancellationToken, Durability, MessageId, ResumeAgent, SessionStore,
};
use dsh_harness::store::JsonlStore;
use dsh_harness::{Harness, Scripted, ScriptedModel};
use dsh_test_support::logs::{accepted_minus_claimed, delivered, unanswered};
use dsh_test_support::store::{CrashPoint, Finals, Op, RecordingStore, Write};
use dsh_test_support::wait::{bounded, until};
use serde_json::json;
use tokio::sync::Semaphore;

use store_support::dead_pid;
use support::{Echo, create};

/// Writes up to this long are cut at every byte; longer ones at a spread.
const EVERY_BYTE: u64 = u64::MAX;

/// Run the session once, recording every write under `dir`.
async fn workload(dir: &Path) -> RecordingStore<JsonlStore> {
    let jsonl = JsonlStore::new(dir, Durability::None).unwrap();
    let locate = {
        let jsonl = jsonl.clone();
        move |id: &dsh_core::SessionId| jsonl.log_path(id)
    };
    let recording = RecordingStore::new(jsonl, locate);
    let gate = Arc::new(Semaphore::new(0));
    let model = Arc::new(
        ScriptedModel::with_responses([
            Scripted::Gated {
                gate: gate.clone(),
                then: Box::new(Scripted::ToolCalls {
                    text: Some("looking".into()),
                    calls: vec![("echo".into(), json!({"text": "x"}))],
                }),
            },
            Scripted::Text("done".into()),
            Scripted::ToolCalls {
                text: None,
                calls: vec![
                    ("echo".into(), json!({"text": "y"})),
                    ("echo".into(), json!({"text": "z"})),
                ],
            },
        ])
        .responder(|_| Scripted::Text("ok".into())),
    );
    let harness = Harness::builder(Arc::new(recording.clone()))
        .model(model.clone())
        .tool(Echo::new("echo"))
        .unwrap()
        .build()
        .unwrap();
    let handle = create(&harness, "lead").await;
    let agent = handle.agent().clone();
    agent
        .inject(UserMessage::user_text("context"))
        .await
        .unwrap();
    agent
        .followup(UserMessage::user_text("task"))
        .await
        .unwrap();
    until(|| model.requests().len() == 1).await;
    agent.steer(UserMessage::user_text("steer")).await.unwrap();
    gate.add_permits(1);
    bounded(agent.wait_idle()).await;
    agent
        .followup(UserMessage::user_text("second"))
        .await
        .unwrap();
    bounded(agent.wait_idle()).await;
    agent
        .followup(UserMessage::user_text("third"))
        .await
        .unwrap();
    bounded(agent.wait_idle()).await;
    bounded(harness.shutdown()).await;
    recording
}

/// Empty `dir`.
fn clear(dir: &Path) {
    for entry in fs::read_dir(dir).unwrap() {
        fs::remove_file(entry.unwrap().path()).unwrap();
    }
}

fn name(path: &Path) -> &std::ffi::OsStr {
    path.file_name().unwrap()
}

/// Lay out in `scratch` what a crash at `point` leaves, by a writer whose
/// pid was `dead`.
fn rebuild(
    recording: &RecordingStore<JsonlStore>,
    finals: &HashMap<PathBuf, Vec<u8>>,
    point: CrashPoint,
    write: &Write,
    scratch: &Path,
    dead: u32,
) {
    clear(scratch);
    let (files, unpublished) = recording.rebuild(finals, point);
    for (path, bytes) in files {
        fs::write(scratch.join(name(&path)), bytes).unwrap();
    }
    let temp = |n: u32| scratch.join(format!(".{}.{dead}-0-{n}.tmp", write.id));
    if let Some(create) = unpublished {
        // Died while writing a create: its log in place (a torn header), or
        // the temporary file of a seeded one.
        let bytes = &finals[&create.path][..usize::try_from(point.bytes).unwrap()];
        create.lay_out_torn_create(scratch, bytes, dead).unwrap();
    } else if write.op == Op::Create && !write.creates_in_place() {
        // Died between publishing the log and unlinking its temporary name.
        fs::hard_link(scratch.join(name(&write.path)), temp(1)).unwrap();
    }
}

/// Which of the loop's invariants to check beyond the store's own.
#[derive(Clone, Copy)]
struct Checks {
    /// No acknowledged message is lost: each is pending or in the
    /// conversation after resume.
    messages: bool,
    /// Every tool call has a result after resume.
    calls: bool,
}

/// Check the directory a crash at `point` leaves.
async fn check(
    point: CrashPoint,
    writes: &[Write],
    finals: &HashMap<dsh_core::SessionId, Vec<SessionEvent>>,
    files: &HashMap<PathBuf, Vec<u8>>,
    scratch: &Path,
    checks: Checks,
) -> bool {
    let mut torn_header = false;
    let at = format!(
        "crash in write {} ({:?}) at byte {}",
        point.write, writes[point.write].op, point.bytes
    );
    let store = JsonlStore::new(scratch, Durability::None).unwrap();
    let leftovers: Vec<_> = fs::read_dir(scratch)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .filter(|name| name.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{at}: left {leftovers:?}");
    let interrupted = &writes[point.write];
    for id in store.list().await.unwrap() {
        let path = store.log_path(&id);
        let before = fs::read(&path).unwrap();
        let opened = store.open(&id).await;
        if let Err(err) = &opened
            && err.code() == "TORN_CREATE"
            && interrupted.creates_in_place()
            && interrupted.id == id
        {
            // The torn header of the create the crash interrupted, never
            // acknowledged: recognised, left as it was, and replaced by the
            // next create of the id.
            assert!(!before.contains(&b'\n'), "{at}: {id}: {err}");
            assert_eq!(fs::read(&path).unwrap(), before, "{at}: {id}");
            let whole = &files[&interrupted.path];
            let line = whole.split(|&byte| byte == b'\n').next().unwrap();
            let header: SessionHeader = serde_json::from_slice(line).unwrap();
            let log = store
                .create(&header, &[])
                .await
                .unwrap_or_else(|err| panic!("{at}: {id} cannot be created again: {err}"));
            bounded(log.close()).await;
            assert_eq!(store.load(&id).await.unwrap().events, []);
            torn_header = true;
            continue;
        }
        let (loaded, log) =
            opened.unwrap_or_else(|err| panic!("{at}: {id} does not reopen: {err}"));
        // Only a torn last line is cut; a complete last event that lost its
        // newline is kept and the newline restored.
        let after = fs::read(&path).unwrap();
        let complete = before
            .iter()
            .rposition(|&byte| byte == b'\n')
            .map_or(0, |at| at + 1);
        match &loaded.torn_tail {
            Some(torn) => {
                assert_eq!(after, before[..complete], "{at}: {id}");
                assert_eq!(torn.bytes, (before.len() - complete) as u64, "{at}: {id}");
            }
            None if complete == before.len() => assert_eq!(after, before, "{at}: {id}"),
            None => assert_eq!(after, [&before[..], b"\n"].concat(), "{at}: {id}"),
        }
        let written = &finals[&id];
        let held = loaded.events.len();
        assert_eq!(
            loaded.events,
            written[..held],
            "{at}: {id} is not a prefix of the run"
        );
        let acked: usize = writes[..point.write]
            .iter()
            .filter(|write| write.id == id)
            .map(|write| write.events.len())
            .sum();
        assert!(
            held >= acked,
            "{at}: {id} holds {held} events, {acked} were acknowledged"
        );
        bounded(log.close()).await;
        drop(log);

        let model = ScriptedModel::new().responder(|_| Scripted::Hang);
        let harness = Harness::builder(Arc::new(store.clone()))
            .model(Arc::new(model))
            .tool(Echo::new("echo"))
            .unwrap()
            .build()
            .unwrap();
        let handle = harness
            .resume(ResumeAgent {
                id: id.clone(),
                setup: Default::default(),
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap_or_else(|err| panic!("{at}: {id} does not resume: {err}"));
        let agent: Arc<dyn Agent> = handle.agent().clone();
        // Read before anything else runs: the resumed agent wakes for them.
        let pending: BTreeSet<MessageId> = agent.pending().into_iter().collect();
        let events = agent.events();
        assert_eq!(pending, accepted_minus_claimed(&events), "{at}: {id}");
        if checks.messages {
            // Every message whose acceptance was acknowledged is either
            // still pending or in the conversation.
            for write in &writes[..point.write] {
                for event in &write.events {
                    if let EventPayload::InboxAccepted(accepted) = &event.payload {
                        let message = &accepted.message.id;
                        assert!(
                            pending.contains(message) || delivered(&events).contains(message),
                            "{at}: acknowledged message {message} was lost"
                        );
                    }
                }
            }
        }
        if checks.calls {
            assert_eq!(unanswered(&events), Vec::<String>::new(), "{at}: {id}");
        }
        bounded(harness.shutdown()).await;
    }
    torn_header
}

async fn crash_everywhere(checks: Checks) {
    let run = tempfile::tempdir().unwrap();
    let recording = workload(run.path()).await;
    let writes = recording.writes();
    assert!(
        writes.len() >= 10,
        "the workload wrote only {} times",
        writes.len()
    );
    let Finals { files, events } = recording.finals().await.unwrap();
    let points = recording.crash_points(EVERY_BYTE).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let dead = dead_pid();
    let mut torn_headers = 0;
    for point in &points {
        let write = &writes[point.write];
        rebuild(&recording, &files, *point, write, scratch.path(), dead);
        torn_headers +=
            usize::from(check(*point, &writes, &events, &files, scratch.path(), checks).await);
    }
    // The lead's create writes its header in place: a crash inside it
    // leaves a torn header at every byte but the last.
    assert!(writes[0].creates_in_place(), "{:?}", writes[0].op);
    assert!(torn_headers > 0, "no crash point left a torn header");
    println!("{} crash points over {} writes", points.len(), writes.len());
}

#[tokio::test]
async fn b52_a_crash_at_any_byte_of_any_write_leaves_logs_that_reopen() {
    crash_everywhere(Checks {
        messages: false,
        calls: false,
    })
    .await;
}

#[tokio::test]
async fn b52_a_crash_anywhere_loses_no_acknowledged_message() {
    crash_everywhere(Checks {
        messages: true,
        calls: false,
    })
    .await;
}

#[tokio::test]
async fn b53_after_a_crash_anywhere_every_tool_call_has_a_result() {
    crash_everywhere(Checks {
        messages: false,
        calls: true,
    })
    .await;
}
