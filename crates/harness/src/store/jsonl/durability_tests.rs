//! Which syncs each durability mode makes, and in what order: a script of
//! store and log calls runs under every mode, and after each call the
//! syncs it made (noted by `fsync` in tests) must be exactly the ones the
//! mode promises. Deleting any sync a mode promises fails its test. A
//! process crash keeps the page cache, so no crash or kill test can see a
//! missing sync; this is where one is seen.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::time::Duration;

use dsh_core::session::{EventPayload, TurnStart};
use dsh_core::{Durability, SessionEvent, SessionHeader, SessionId, SessionStore};

use super::JsonlStore;
use super::fsync::trace;

fn turn(seq: u64) -> SessionEvent {
    SessionEvent {
        seq,
        time: seq,
        payload: EventPayload::TurnStart(TurnStart { turn: seq }),
    }
}

fn header(id: &str) -> SessionHeader {
    SessionHeader::new(SessionId::new(id).unwrap(), "/")
}

/// The syncs one step must make: groups in order, each group's syncs in
/// any order (they run at once, on several threads).
type Expected = [&'static [&'static [&'static str]]; STEPS];

const STEPS: usize = 10;

/// The steps, by name, for failure messages.
const NAMES: [&str; STEPS] = [
    "create a (header only, in place)",
    "create b (seeded, temporary file and link)",
    "append to a",
    "append to a again",
    "checkpoint a",
    "sync a",
    "append to a, then flush the store",
    "close a and b, flush the store",
    "open a with a torn tail",
    "remove b",
];

/// Run the script under `durability`; the syncs each step made.
async fn syncs_of(durability: Durability) -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    // A window no test outlasts: a batched round runs only when asked.
    let store =
        JsonlStore::with_group_window(dir.path(), durability, Duration::from_secs(3_600)).unwrap();
    let dir = store.dir().to_path_buf();
    let mut steps = Vec::new();
    let mut seen = trace::under(&dir).len();
    let mut step = |steps: &mut Vec<Vec<String>>| {
        let now = trace::under(&dir);
        steps.push(now[seen..].to_vec());
        seen = now.len();
    };
    let a = store.create(&header("a"), &[]).await.unwrap();
    step(&mut steps);
    let b = store.create(&header("b"), &[turn(0)]).await.unwrap();
    step(&mut steps);
    a.append(&[turn(0)]).await.unwrap();
    step(&mut steps);
    a.append(&[turn(1)]).await.unwrap();
    step(&mut steps);
    a.checkpoint().await.unwrap();
    step(&mut steps);
    a.sync().await.unwrap();
    step(&mut steps);
    a.append(&[turn(2)]).await.unwrap();
    store.flush().await.unwrap();
    step(&mut steps);
    a.close().await;
    b.close().await;
    store.flush().await.unwrap();
    step(&mut steps);
    let path = store.log_path(&header("a").id);
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(b"{\"seq\":3,\"ti").unwrap();
    let (loaded, a) = store.open(&header("a").id).await.unwrap();
    assert!(loaded.torn_tail.is_some());
    step(&mut steps);
    a.close().await;
    store.remove(&header("b").id).await.unwrap();
    step(&mut steps);
    steps
}

async fn check(durability: Durability, expected: Expected) {
    let steps = syncs_of(durability).await;
    for ((name, made), groups) in NAMES.iter().zip(&steps).zip(expected) {
        let mut made = made.as_slice();
        let mut fail = false;
        for group in groups {
            if made.len() < group.len() {
                fail = true;
                break;
            }
            let (these, rest) = made.split_at(group.len());
            let mut these = these.to_vec();
            these.sort();
            let mut group = group.to_vec();
            group.sort_unstable();
            fail |= these != group;
            made = rest;
        }
        fail |= !made.is_empty();
        assert!(
            !fail,
            "{durability:?}, {name}: made {:?}, promised {groups:?}",
            steps[NAMES.iter().position(|n| n == name).unwrap()]
        );
    }
}

#[tokio::test]
async fn every_event_forces_each_append_and_each_create_with_its_directory() {
    check(
        Durability::EveryEvent,
        [
            &[&["data a.jsonl", "dir"]],
            &[&["all temp"], &["dir"]],
            &[&["data a.jsonl"]],
            &[&["data a.jsonl"]],
            &[],
            &[&["data a.jsonl"]],
            &[&["data a.jsonl"]],
            &[],
            &[&["data a.jsonl"]],
            &[&["dir"]],
        ],
    )
    .await;
}

#[tokio::test]
async fn turn_boundary_forces_creates_checkpoints_and_syncs_only() {
    check(
        Durability::TurnBoundary,
        [
            &[&["data a.jsonl", "dir"]],
            &[&["all temp"], &["dir"]],
            &[],
            &[],
            &[&["data a.jsonl"]],
            &[&["data a.jsonl"]],
            &[],
            &[],
            &[&["data a.jsonl"]],
            &[&["dir"]],
        ],
    )
    .await;
}

#[tokio::test]
async fn grouped_forces_through_its_committer_the_file_before_the_directory() {
    check(
        Durability::Grouped,
        [
            &[&["data a.jsonl"], &["dir"]],
            &[&["all temp"], &["dir"]],
            &[],
            &[],
            &[&["data a.jsonl"]],
            &[&["data a.jsonl"]],
            &[],
            &[],
            &[&["data a.jsonl"]],
            &[&["dir"]],
        ],
    )
    .await;
}

#[tokio::test]
async fn batched_forces_new_logs_and_the_directory_before_dirty_ones_when_asked() {
    check(
        Durability::Batched,
        [
            &[],
            &[],
            &[],
            &[],
            &[],
            // The round `sync` asks for: both new logs, the directory.
            &[&["data a.jsonl", "data b.jsonl"], &["dir"]],
            &[&["data a.jsonl"]],
            &[],
            &[&["data a.jsonl"]],
            &[&["dir"]],
        ],
    )
    .await;
}

#[tokio::test]
async fn none_forces_only_what_a_log_sync_asks_for() {
    check(
        Durability::None,
        [
            &[],
            &[],
            &[],
            &[],
            &[],
            &[&["data a.jsonl"], &["dir"]],
            &[],
            &[],
            &[],
            &[],
        ],
    )
    .await;
}
