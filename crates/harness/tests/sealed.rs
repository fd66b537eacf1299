//! The opt-in sealed (zstd) form of a settled JSONL log: every reader reads
//! it transparently, an open for writing unseals it, a create of its id is
//! refused, and a crash at any point of sealing or unsealing leaves one
//! readable log (the directory is rebuilt as each crash point leaves it,
//! with temporary files named for a dead writer, then reopened).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod store_support;

use std::fs;
use std::path::{Path, PathBuf};

use dsh_core::session::{EventPayload, SessionEvent, SessionHeader, UserEntry};
use dsh_core::{Durability, SessionId, SessionStore, StoreError, UserMessage};
use dsh_harness::store::JsonlStore;
use dsh_test_support::wait::bounded;
use tempfile::TempDir;

use store_support::{dead_pid, header, sid, turn};

/// A log of `n` events that compresses like a real one (repeated text).
fn events(n: u64) -> Vec<SessionEvent> {
    (0..n)
        .map(|seq| {
            if seq % 2 == 0 {
                turn(seq)
            } else {
                SessionEvent {
                    seq,
                    time: seq,
                    payload: EventPayload::UserMessage(UserEntry {
                        message: UserMessage::user_text("please read src/lib.rs and fix it"),
                    }),
                }
            }
        })
        .collect()
}

/// A store in a fresh directory holding the closed log `id` of `n` events.
async fn store_with(id: &str, n: u64) -> (TempDir, JsonlStore, Vec<SessionEvent>) {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::TurnBoundary).unwrap();
    let written = events(n);
    let log = store.create(&header(id), &written).await.unwrap();
    log.close().await;
    drop(log);
    (dir, store, written)
}

/// The header the plain log of `id` was written with (its first line).
fn written_header(store: &JsonlStore, id: &SessionId) -> SessionHeader {
    let bytes = fs::read(store.log_path(id)).unwrap();
    let line = bytes.split(|&byte| byte == b'\n').next().unwrap();
    serde_json::from_slice(line).unwrap()
}

fn sealed_path(store: &JsonlStore, id: &SessionId) -> PathBuf {
    let mut path = store.log_path(id).into_os_string();
    path.push(".zst");
    PathBuf::from(path)
}

/// The names of the files in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn every_reader_reads_a_sealed_log_as_the_plain_one() {
    let (dir, store, written) = store_with("s", 40).await;
    let id = sid("s");
    let plain = fs::read(store.log_path(&id)).unwrap();
    let written_header = written_header(&store, &id);
    let sealed = store.seal(&id).await.unwrap();
    assert_eq!(sealed.plain_bytes, plain.len() as u64);
    assert!(sealed.sealed_bytes < sealed.plain_bytes / 4, "{sealed:?}");
    assert_eq!(names(dir.path()), ["s.jsonl.zst"]);
    // The same bytes inside: the durable format is unchanged.
    let inside = zstd_decode(&fs::read(sealed_path(&store, &id)).unwrap());
    assert_eq!(inside, plain);

    let loaded = store.load(&id).await.unwrap();
    assert_eq!(loaded.events, written);
    assert_eq!(loaded.header, written_header);
    assert_eq!(store.header(&id).await.unwrap(), written_header);
    assert_eq!(store.list().await.unwrap(), std::slice::from_ref(&id));
    assert!(store.exists(&id).await.unwrap());
    let many = store.load_many(std::slice::from_ref(&id)).await;
    assert_eq!(many[0].as_ref().unwrap().events, written);
    // A second seal finds no plain log.
    assert!(matches!(
        store.seal(&id).await,
        Err(StoreError::NotFound(_))
    ));
}

/// A seal is read in one call into a buffer of the size its frame states;
/// a compressed log that other tools wrote (no size in the frame, or the
/// bytes split over two frames) still reads, through the streaming path.
#[tokio::test]
async fn a_sealed_log_reads_whatever_frames_hold_it() {
    let (_dir, store, written) = store_with("s", 40).await;
    let id = sid("s");
    let plain = fs::read(store.log_path(&id)).unwrap();
    store.seal(&id).await.unwrap();
    assert_eq!(store.load(&id).await.unwrap().events, written);
    let (front, back) = plain.split_at(plain.len() / 3);
    let mut unsized_frame = Vec::new();
    let mut encoder = zstd::stream::write::Encoder::new(&mut unsized_frame, 3).unwrap();
    std::io::Write::write_all(&mut encoder, &plain).unwrap();
    encoder.finish().unwrap();
    let two_frames = [
        zstd::bulk::compress(front, 3).unwrap(),
        zstd::bulk::compress(back, 3).unwrap(),
    ]
    .concat();
    for form in [unsized_frame, two_frames] {
        fs::write(sealed_path(&store, &id), &form).unwrap();
        assert_eq!(zstd_decode(&form), plain);
        assert_eq!(store.load(&id).await.unwrap().events, written);
    }
}

/// Decompress a zstd file the way any tool would (the frame is standard).
fn zstd_decode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(
        &mut zstd::stream::read::Decoder::new(bytes).unwrap(),
        &mut out,
    )
    .unwrap();
    out
}

#[tokio::test]
async fn an_open_unseals_the_log_and_appends_to_the_plain_form() {
    let (dir, store, mut written) = store_with("s", 10).await;
    let id = sid("s");
    store.seal(&id).await.unwrap();
    let (loaded, log) = store.open(&id).await.unwrap();
    assert_eq!(loaded.events, written);
    assert_eq!(names(dir.path()), ["s.jsonl"]);
    let next = turn(10);
    log.append(std::slice::from_ref(&next)).await.unwrap();
    log.close().await;
    drop(log);
    written.push(next);
    assert_eq!(store.load(&id).await.unwrap().events, written);
    // And it seals again, with the new event inside.
    store.seal(&id).await.unwrap();
    assert_eq!(store.load(&id).await.unwrap().events, written);
}

#[tokio::test]
async fn a_sealed_id_exists_for_create_and_remove() {
    let (dir, store, _) = store_with("s", 4).await;
    let id = sid("s");
    store.seal(&id).await.unwrap();
    assert!(matches!(
        store.create(&header("s"), &[]).await,
        Err(StoreError::Exists(_))
    ));
    assert_eq!(names(dir.path()), ["s.jsonl.zst"]);
    store.remove(&id).await.unwrap();
    assert!(names(dir.path()).is_empty());
    assert!(!store.exists(&id).await.unwrap());
    assert!(matches!(
        store.remove(&id).await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_live_log_is_not_sealed() {
    let (dir, store, _) = store_with("s", 4).await;
    let id = sid("s");
    let (_, log) = store.open(&id).await.unwrap();
    assert!(matches!(store.seal(&id).await, Err(StoreError::Busy(_))));
    // Another process holding it (another store over the same directory
    // stands in for one: the OS lock is per open file).
    let other = JsonlStore::new(dir.path(), Durability::None).unwrap();
    assert!(matches!(other.seal(&id).await, Err(StoreError::Locked(_))));
    log.close().await;
    drop(log);
    assert_eq!(names(dir.path()), ["s.jsonl"]);
}

#[tokio::test]
async fn a_torn_tail_is_not_sealed_and_a_damaged_seal_is_corrupt() {
    let (dir, store, written) = store_with("s", 4).await;
    let id = sid("s");
    let path = store.log_path(&id);
    let mut bytes = fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"seq\":4,");
    fs::write(&path, &bytes).unwrap();
    assert!(matches!(
        store.seal(&id).await,
        Err(StoreError::Corrupt { .. })
    ));
    assert_eq!(names(dir.path()), ["s.jsonl"]);
    // Opened once, the tail is cut, and then it seals.
    let (_, log) = store.open(&id).await.unwrap();
    log.close().await;
    drop(log);
    store.seal(&id).await.unwrap();
    assert_eq!(store.load(&id).await.unwrap().events, written);

    let sealed = sealed_path(&store, &id);
    let mut damaged = fs::read(&sealed).unwrap();
    let middle = damaged.len() / 2;
    damaged.truncate(middle);
    fs::write(&sealed, damaged).unwrap();
    for err in [
        store.load(&id).await.map(drop),
        store.open(&id).await.map(drop),
    ] {
        assert!(matches!(err, Err(StoreError::Corrupt { .. })), "{err:?}");
    }
    // Nothing was published from the damaged frame.
    assert_eq!(names(dir.path()), ["s.jsonl.zst"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_seal_finishes_detached_and_leaves_one_form() {
    let (dir, store, written) = store_with("s", 200).await;
    let id = sid("s");
    {
        let seal = std::pin::pin!(store.seal(&id));
        // Polled once: the work is on the blocking pool now.
        assert!(futures::poll!(seal).is_pending());
    }
    // Busy until the detached work ends, then the log opens, in one form.
    let (loaded, log) = bounded(async {
        loop {
            match store.open(&id).await {
                Err(StoreError::Busy(_)) => tokio::task::yield_now().await,
                opened => break opened.unwrap(),
            }
        }
    })
    .await;
    assert_eq!(loaded.events, written);
    log.close().await;
    drop(log);
    let left = names(dir.path());
    assert_eq!(left, ["s.jsonl"], "{left:?}");
    assert_eq!(bounded(store.load(&id)).await.unwrap().events, written);
}

/// What a crash at one point of a seal or an unseal leaves, besides the
/// files named.
#[derive(Debug, Clone, Copy)]
enum Crash {
    /// Sealing: died writing the compressed temporary file (half of it).
    SealWritingTemp,
    /// Sealing: died after renaming it into place, before the unlink.
    SealBeforeUnlink,
    /// Unsealing: died writing the plain temporary file (half of it).
    UnsealWritingTemp,
    /// Unsealing: died after linking the plain log, before removing the
    /// compressed one and the temporary name.
    UnsealBeforeRemove,
}

#[tokio::test]
async fn a_crash_at_any_point_of_sealing_leaves_one_readable_log() {
    let dead = dead_pid();
    for crash in [
        Crash::SealWritingTemp,
        Crash::SealBeforeUnlink,
        Crash::UnsealWritingTemp,
        Crash::UnsealBeforeRemove,
    ] {
        let (dir, store, written) = store_with("s", 30).await;
        let id = sid("s");
        let plain_path = store.log_path(&id);
        let plain = fs::read(&plain_path).unwrap();
        let written_header = written_header(&store, &id);
        store.seal(&id).await.unwrap();
        let sealed_file = sealed_path(&store, &id);
        let sealed = fs::read(&sealed_file).unwrap();
        let temp = dir.path().join(format!(".s.{dead}-0-0.tmp"));
        match crash {
            Crash::SealWritingTemp => {
                fs::remove_file(&sealed_file).unwrap();
                fs::write(&plain_path, &plain).unwrap();
                fs::write(&temp, &sealed[..sealed.len() / 2]).unwrap();
            }
            Crash::SealBeforeUnlink => fs::write(&plain_path, &plain).unwrap(),
            Crash::UnsealWritingTemp => fs::write(&temp, &plain[..plain.len() / 2]).unwrap(),
            Crash::UnsealBeforeRemove => {
                fs::write(&plain_path, &plain).unwrap();
                fs::hard_link(&plain_path, &temp).unwrap();
            }
        }
        drop(store);
        let store = JsonlStore::new(dir.path(), Durability::TurnBoundary).unwrap();
        let at = format!("{crash:?}");
        let left = names(dir.path());
        assert!(
            left.iter().all(|name| !name.ends_with(".tmp")),
            "{at}: {left:?}"
        );
        assert_eq!(
            store.list().await.unwrap(),
            std::slice::from_ref(&id),
            "{at}"
        );
        assert_eq!(store.load(&id).await.unwrap().events, written, "{at}");
        assert_eq!(store.header(&id).await.unwrap(), written_header, "{at}");
        // Opening for writing leaves the plain form alone.
        let (loaded, log) = store.open(&id).await.unwrap();
        assert_eq!(loaded.events, written, "{at}");
        log.close().await;
        drop(log);
        assert_eq!(names(dir.path()), ["s.jsonl"], "{at}");
        assert_eq!(fs::read(&plain_path).unwrap(), plain, "{at}");
    }
}
