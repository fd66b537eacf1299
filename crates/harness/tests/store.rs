//! Integration tests of the session stores: the shared contract run against
//! both [`JsonlStore`] and [`MemoryStore`], the JSONL store's recovery rules
//! (torn tails, corrupt lines, lost newlines), its durability settings, its
//! file locking, and a snapshot pinning the durable file format. These tests
//! only ever touch temporary directories they create.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_core::content::ContentBlock;
use dsh_core::message::{InboxTarget, MessageSource, ToolCall, Usage, UserMessage};
use dsh_core::options::{AgentOptions, Composition};
use dsh_core::session::{
    AssistantEntry, EventPayload, ExtensionPayload, FORMAT_VERSION, InboxAccepted, InboxIds,
    SessionEvent, SessionHeader, StepStart, ToolResultEntry, TurnEnd, TurnStart, UserEntry,
};
use dsh_core::{CallId, Durability, MessageId, SessionId, SessionStore, StopReason, StoreError};
use dsh_harness::store::{JsonlStore, MemoryStore};
use dsh_test_support::sid;
use tempfile::TempDir;

const T0: u64 = 1_700_000_000_000;

fn header(id: &str) -> SessionHeader {
    let mut header = SessionHeader::new(sid(id), "/work/project");
    header.created_at = T0;
    header
}

fn event(seq: u64, payload: EventPayload) -> SessionEvent {
    SessionEvent {
        seq,
        time: T0 + seq,
        payload,
    }
}

fn turn_start(seq: u64) -> SessionEvent {
    event(seq, EventPayload::TurnStart(TurnStart { turn: seq }))
}

fn user_text(seq: u64, text: &str) -> SessionEvent {
    event(
        seq,
        EventPayload::UserMessage(UserEntry {
            message: UserMessage {
                id: MessageId::new(format!("m-{seq}")),
                content: vec![ContentBlock::text(text)],
                source: MessageSource::User,
            },
        }),
    )
}

/// `count` events with seqs `from..from + count`.
fn events(from: u64, count: u64) -> Vec<SessionEvent> {
    (from..from + count)
        .map(|seq| {
            if seq % 2 == 0 {
                turn_start(seq)
            } else {
                user_text(seq, "héllo wörld")
            }
        })
        .collect()
}

/// One store under test. `jsonl` is set for the file-backed one.
struct Fixture {
    name: &'static str,
    store: Arc<dyn SessionStore>,
    jsonl: Option<JsonlStore>,
    _dir: Option<TempDir>,
}

impl Fixture {
    fn memory() -> Self {
        Self {
            name: "memory",
            store: Arc::new(MemoryStore::new()),
            jsonl: None,
            _dir: None,
        }
    }

    fn jsonl(durability: Durability) -> Self {
        let dir = TempDir::new().unwrap();
        let store = JsonlStore::new(dir.path().join("sessions"), durability).unwrap();
        Self {
            name: "jsonl",
            store: Arc::new(store.clone()),
            jsonl: Some(store),
            _dir: Some(dir),
        }
    }

    /// The log file of `id`, for the JSONL store.
    fn file(&self, id: &str) -> Option<PathBuf> {
        self.jsonl.as_ref().map(|store| store.log_path(&sid(id)))
    }

    /// The raw bytes of the log of `id`, for the JSONL store.
    fn bytes(&self, id: &str) -> Option<Vec<u8>> {
        self.file(id).map(|path| std::fs::read(path).unwrap())
    }
}

/// Every store the shared contract is checked against.
fn fixtures() -> Vec<Fixture> {
    vec![Fixture::memory(), Fixture::jsonl(Durability::TurnBoundary)]
}

fn dir_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn line_count(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&byte| byte == b'\n').count()
}

/// A closed JSONL log `id` holding `count` events, and the store over it.
async fn closed_log(
    durability: Durability,
    id: &str,
    count: u64,
) -> (TempDir, JsonlStore, PathBuf) {
    let dir = TempDir::new().unwrap();
    let store = JsonlStore::new(dir.path(), durability).unwrap();
    let log = store.create(&header(id), &[]).await.unwrap();
    log.append(&events(0, count)).await.unwrap();
    drop(log);
    let path = store.log_path(&sid(id));
    (dir, store, path)
}

fn append_raw(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(bytes).unwrap();
}

fn expect_corrupt(err: StoreError, path: &Path, line: u64, needle: &str) {
    let text = err.to_string();
    match err {
        StoreError::Corrupt {
            path: at,
            line: got,
            message,
        } => {
            assert_eq!(at, path, "{text}");
            assert_eq!(got, line, "{text}");
            assert!(message.contains(needle), "{text}");
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(text.contains(&format!(":{line}:")), "{text}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[tokio::test]
async fn create_then_open_and_load_return_header_and_seed() {
    for fx in fixtures() {
        let seed = events(0, 3);
        let log = fx.store.create(&header("a"), &seed).await.unwrap();
        let loaded = fx.store.load(&sid("a")).await.unwrap();
        assert_eq!(loaded.header, header("a"), "{}", fx.name);
        assert_eq!(loaded.events, seed, "{}", fx.name);
        assert!(loaded.torn_tail.is_none());
        assert_eq!(fx.store.header(&sid("a")).await.unwrap(), header("a"));
        assert!(fx.store.exists(&sid("a")).await.unwrap());
        assert!(!fx.store.exists(&sid("b")).await.unwrap());
        drop(log);
        let (opened, _log) = fx.store.open(&sid("a")).await.unwrap();
        assert_eq!(opened.header, header("a"), "{}", fx.name);
        assert_eq!(opened.events, seed, "{}", fx.name);
        assert!(opened.torn_tail.is_none());
    }
}

#[tokio::test]
async fn creating_an_existing_log_fails_and_keeps_the_first() {
    for fx in fixtures() {
        let log = fx.store.create(&header("a"), &events(0, 2)).await.unwrap();
        let before = fx.bytes("a");
        let mut other = header("a");
        other.cwd = "/elsewhere".into();
        let err = fx.store.create(&other, &[]).await.err().unwrap();
        assert!(
            matches!(err, StoreError::Exists(ref id) if id.as_str() == "a"),
            "{}: {err:?}",
            fx.name
        );
        // Also once the first writer is gone.
        drop(log);
        let err = fx.store.create(&other, &events(0, 1)).await.err().unwrap();
        assert!(matches!(err, StoreError::Exists(_)), "{}: {err:?}", fx.name);
        assert_eq!(fx.bytes("a"), before, "{}", fx.name);
        let loaded = fx.store.load(&sid("a")).await.unwrap();
        assert_eq!(loaded.header, header("a"));
        assert_eq!(loaded.events, events(0, 2));
        if let Some(store) = &fx.jsonl {
            assert_eq!(dir_entries(store.dir()), ["a.jsonl"]);
        }
    }
}

#[tokio::test]
async fn a_seed_not_from_zero_is_rejected_and_leaves_nothing() {
    for fx in fixtures() {
        for (bad, want) in [
            (events(1, 2), (0, 1)),
            (vec![turn_start(0), turn_start(2)], (1, 2)),
        ] {
            let err = fx.store.create(&header("a"), &bad).await.err().unwrap();
            assert_eq!(err.code(), "OUT_OF_SEQUENCE");
            match err {
                StoreError::OutOfSequence { expected, got, .. } => {
                    assert_eq!((expected, got), want, "{}", fx.name);
                }
                other => panic!("{}: expected OutOfSequence, got {other:?}", fx.name),
            }
        }
        assert!(!fx.store.exists(&sid("a")).await.unwrap());
        assert!(fx.store.list().await.unwrap().is_empty());
        if let Some(store) = &fx.jsonl {
            assert!(
                dir_entries(store.dir()).is_empty(),
                "{:?}",
                dir_entries(store.dir())
            );
        }
        // The id is free afterwards.
        fx.store.create(&header("a"), &events(0, 1)).await.unwrap();
    }
}

#[tokio::test]
async fn appends_continue_the_log() {
    for fx in fixtures() {
        let log = fx.store.create(&header("a"), &events(0, 2)).await.unwrap();
        log.append(&events(2, 1)).await.unwrap();
        log.append(&[]).await.unwrap();
        log.append(&events(3, 3)).await.unwrap();
        log.checkpoint().await.unwrap();
        assert_eq!(
            fx.store.load(&sid("a")).await.unwrap().events,
            events(0, 6),
            "{}",
            fx.name
        );
        drop(log);
        let (opened, log) = fx.store.open(&sid("a")).await.unwrap();
        assert_eq!(opened.events.len(), 6);
        log.append(&events(6, 2)).await.unwrap();
        drop(log);
        assert_eq!(
            fx.store.load(&sid("a")).await.unwrap().events,
            events(0, 8),
            "{}",
            fx.name
        );
        if let Some(bytes) = fx.bytes("a") {
            assert_eq!(line_count(&bytes), 9);
            assert!(bytes.ends_with(b"\n"));
        }
    }
}

#[tokio::test]
async fn json_text_read_across_lines_is_logged_on_one_line() {
    // A tool call and an extension payload read from pretty-printed JSON
    // (a model, a host, a file): their raw text spans lines, and written
    // as it was it would split their event into torn lines.
    let pretty = "{\n  \"path\": \"src/a.rs\",\n  \"note\": \"two\\nlines\"\n}";
    let call: ToolCall = serde_json::from_str(&format!(
        "{{\"call_id\": \"c-1\", \"name\": \"read\", \"input\": {pretty}}}"
    ))
    .unwrap();
    let payload: ExtensionPayload = serde_json::from_str(pretty).unwrap();
    let logged = vec![
        event(0, EventPayload::ToolCall(call)),
        event(
            1,
            EventPayload::Extension {
                kind: "test/pretty".into(),
                payload,
            },
        ),
    ];
    for fx in fixtures() {
        let log = fx.store.create(&header("p"), &logged).await.unwrap();
        drop(log);
        let (opened, _log) = fx.store.open(&sid("p")).await.unwrap();
        assert_eq!(opened.events, logged, "{}", fx.name);
        for event in &opened.events {
            let text = match &event.payload {
                EventPayload::ToolCall(call) => call.input.get(),
                EventPayload::Extension { payload, .. } => payload.get(),
                other => panic!("{other:?}"),
            };
            assert_eq!(text, r#"{"path":"src/a.rs","note":"two\nlines"}"#);
        }
        if let Some(bytes) = fx.bytes("p") {
            assert_eq!(line_count(&bytes), 3, "{}", fx.name);
        }
    }
}

#[tokio::test]
async fn an_out_of_sequence_append_is_rejected_and_writes_nothing() {
    for fx in fixtures() {
        let log = fx.store.create(&header("a"), &events(0, 2)).await.unwrap();
        let before = fx.bytes("a");
        for (bad, expected, got) in [
            (events(3, 1), 2, 3),
            (events(1, 1), 2, 1),
            (vec![turn_start(2), turn_start(4)], 3, 4),
        ] {
            match log.append(&bad).await {
                Err(StoreError::OutOfSequence {
                    id,
                    expected: e,
                    got: g,
                }) => {
                    assert_eq!((id.as_str(), e, g), ("a", expected, got), "{}", fx.name);
                }
                other => panic!("{}: expected OutOfSequence, got {other:?}", fx.name),
            }
        }
        assert_eq!(fx.bytes("a"), before, "{}", fx.name);
        assert_eq!(fx.store.load(&sid("a")).await.unwrap().events.len(), 2);
        // A rejected batch does not spoil the handle.
        log.append(&events(2, 1)).await.unwrap();
        assert_eq!(fx.store.load(&sid("a")).await.unwrap().events, events(0, 3));
    }
}

#[tokio::test]
async fn a_log_has_one_writer_at_a_time() {
    for fx in fixtures() {
        let created = fx.store.create(&header("a"), &[]).await.unwrap();
        let busy = fx.store.open(&sid("a")).await.err().unwrap();
        assert!(
            matches!(busy, StoreError::Busy(ref id) if id.as_str() == "a"),
            "{}: {busy:?}",
            fx.name
        );
        assert_eq!(busy.code(), "SESSION_BUSY");
        // Readers are never refused.
        fx.store.load(&sid("a")).await.unwrap();
        drop(created);
        let (_, first) = fx.store.open(&sid("a")).await.unwrap();
        let busy = fx.store.open(&sid("a")).await.err().unwrap();
        assert!(matches!(busy, StoreError::Busy(_)), "{}: {busy:?}", fx.name);
        drop(first);
        let (_, again) = fx.store.open(&sid("a")).await.unwrap();
        again.append(&events(0, 1)).await.unwrap();
    }
}

#[tokio::test]
async fn a_closed_log_refuses_writes_and_reopens_at_once() {
    for fx in fixtures() {
        let log = fx.store.create(&header("a"), &[]).await.unwrap();
        log.append(&events(0, 2)).await.unwrap();
        log.close().await;
        let refused = log.append(&events(2, 1)).await.unwrap_err();
        assert_eq!(refused.code(), "SESSION_CLOSED", "{}: {refused}", fx.name);
        assert_eq!(log.checkpoint().await.unwrap_err().code(), "SESSION_CLOSED");
        let (loaded, reopened) = fx.store.open(&sid("a")).await.unwrap();
        assert_eq!(loaded.events, events(0, 2), "{}", fx.name);
        // Closing (or dropping) the old handle again never releases the new one.
        log.close().await;
        drop(log);
        let busy = fx.store.open(&sid("a")).await.err().unwrap();
        assert_eq!(busy.code(), "SESSION_BUSY", "{}: {busy}", fx.name);
        reopened.append(&events(2, 1)).await.unwrap();
        assert_eq!(fx.store.load(&sid("a")).await.unwrap().events, events(0, 3));
    }
}

#[tokio::test]
async fn two_jsonl_stores_on_one_directory_exclude_each_other() {
    let dir = TempDir::new().unwrap();
    let first = JsonlStore::new(dir.path(), Durability::None).unwrap();
    let second = JsonlStore::new(dir.path(), Durability::None).unwrap();
    let log = first.create(&header("a"), &events(0, 1)).await.unwrap();
    let err = second.open(&sid("a")).await.err().unwrap();
    assert!(matches!(err, StoreError::Locked(_)), "{err:?}");
    let err = second.remove(&sid("a")).await.err().unwrap();
    assert!(matches!(err, StoreError::Locked(_)), "{err:?}");
    assert_eq!(second.load(&sid("a")).await.unwrap().events.len(), 1);
    drop(log);
    let (loaded, log) = second.open(&sid("a")).await.unwrap();
    assert_eq!(loaded.events.len(), 1);
    let err = first.open(&sid("a")).await.err().unwrap();
    assert!(matches!(err, StoreError::Locked(_)), "{err:?}");
    drop(log);
    first.open(&sid("a")).await.unwrap();
}

#[tokio::test]
async fn clones_of_a_jsonl_store_share_the_writer_registry() {
    let dir = TempDir::new().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
    let clone = store.clone();
    let _log = store.create(&header("a"), &[]).await.unwrap();
    let err = clone.open(&sid("a")).await.err().unwrap();
    assert!(matches!(err, StoreError::Busy(_)), "{err:?}");
    assert_eq!(clone.dir(), dir.path());
    assert_eq!(clone.durability(), Durability::None);
}

#[tokio::test]
async fn missing_logs_are_not_found() {
    for fx in fixtures() {
        let id = sid("ghost");
        assert!(
            matches!(
                fx.store.open(&id).await.err(),
                Some(StoreError::NotFound(_))
            ),
            "{}",
            fx.name
        );
        assert!(
            matches!(
                fx.store.load(&id).await.err(),
                Some(StoreError::NotFound(_))
            ),
            "{}",
            fx.name
        );
        assert!(
            matches!(
                fx.store.header(&id).await.err(),
                Some(StoreError::NotFound(_))
            ),
            "{}",
            fx.name
        );
        assert!(
            matches!(
                fx.store.remove(&id).await.err(),
                Some(StoreError::NotFound(_))
            ),
            "{}",
            fx.name
        );
        // A failed open leaves the id free to create.
        fx.store.create(&header("ghost"), &[]).await.unwrap();
    }
}

#[tokio::test]
async fn h10_open_cuts_a_torn_last_line() {
    let (_dir, store, path) = closed_log(Durability::TurnBoundary, "a", 3).await;
    let intact = std::fs::read(&path).unwrap();
    let torn = br#"{"seq":3,"time":1700000000003,"type":"turn/st"#;
    append_raw(&path, torn);
    let (loaded, log) = store.open(&sid("a")).await.unwrap();
    let tail = loaded.torn_tail.unwrap();
    assert_eq!(tail.path, path);
    assert_eq!(tail.line, 5, "header + 3 events, then the torn line");
    assert_eq!(tail.bytes, torn.len() as u64);
    assert_eq!(loaded.events, events(0, 3));
    let after = std::fs::read(&path).unwrap();
    assert_eq!(after, intact);
    assert!(after.ends_with(b"\n"));
    assert_eq!(line_count(&after), 4);
    // The log goes on from where the intact part ended.
    log.append(&events(3, 1)).await.unwrap();
    drop(log);
    let reloaded = store.load(&sid("a")).await.unwrap();
    assert_eq!(reloaded.events, events(0, 4));
    assert!(reloaded.torn_tail.is_none());
}

#[tokio::test]
async fn h10_a_torn_multibyte_character_is_a_torn_tail() {
    let (_dir, store, path) = closed_log(Durability::None, "a", 1).await;
    let line = user_text(1, "héllo").to_json_line();
    let cut = line.find('é').unwrap() + 1; // inside the two-byte `é`
    append_raw(&path, &line.as_bytes()[..cut]);
    let loaded = store.load(&sid("a")).await.unwrap();
    assert_eq!(loaded.torn_tail.unwrap().bytes, cut as u64);
    let (opened, _log) = store.open(&sid("a")).await.unwrap();
    assert_eq!(opened.torn_tail.unwrap().line, 3);
    assert_eq!(opened.events, events(0, 1));
}

#[tokio::test]
async fn h10_load_reports_a_torn_tail_but_never_changes_the_file() {
    let (_dir, store, path) = closed_log(Durability::TurnBoundary, "a", 2).await;
    append_raw(&path, b"{\"seq\":2,\"ti");
    let before = std::fs::read(&path).unwrap();
    let loaded = store.load(&sid("a")).await.unwrap();
    let tail = loaded.torn_tail.unwrap();
    assert_eq!((tail.line, tail.bytes), (4, 12));
    assert_eq!(tail.path, path);
    assert_eq!(loaded.events, events(0, 2));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // A writer may hold the log meanwhile: load takes no lock.
    let (_, _log) = store.open(&sid("a")).await.unwrap();
    store.load(&sid("a")).await.unwrap();
}

#[tokio::test]
async fn h10_a_corrupt_middle_line_names_the_file_and_line() {
    let (_dir, store, path) = closed_log(Durability::None, "a", 3).await;
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{\"seq\":1,\"time\":";
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let before = std::fs::read(&path).unwrap();
    for err in [
        store.load(&sid("a")).await.err().unwrap(),
        store.open(&sid("a")).await.err().unwrap(),
    ] {
        assert_eq!(err.code(), "SESSION_CORRUPT");
        expect_corrupt(err, &path, 3, "unreadable event");
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a corrupt log is never repaired"
    );
    // The failed open released the log.
    let err = store.open(&sid("a")).await.err().unwrap();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
}

#[tokio::test]
async fn h10_an_unparsable_last_line_with_its_newline_is_corrupt() {
    let (_dir, store, path) = closed_log(Durability::None, "a", 2).await;
    append_raw(&path, b"not json\n");
    let err = store.open(&sid("a")).await.err().unwrap();
    expect_corrupt(err, &path, 4, "unreadable event");
    // A blank line is not skipped either.
    let (_dir, store, path) = closed_log(Durability::None, "b", 2).await;
    append_raw(&path, b"\n");
    let err = store.load(&sid("b")).await.err().unwrap();
    expect_corrupt(err, &path, 4, "unreadable event");
}

#[tokio::test]
async fn h10_invalid_utf8_is_corrupt_at_its_line() {
    let (_dir, store, path) = closed_log(Durability::None, "a", 3).await;
    let mut bytes = std::fs::read(&path).unwrap();
    let third = bytes
        .iter()
        .enumerate()
        .filter(|(_, byte)| **byte == b'\n')
        .nth(1)
        .unwrap()
        .0;
    bytes[third + 5] = 0xff; // inside line 3
    std::fs::write(&path, bytes).unwrap();
    let err = store.load(&sid("a")).await.err().unwrap();
    expect_corrupt(err, &path, 3, "UTF-8");
}

#[tokio::test]
async fn h10_large_logs_report_the_same_lines() {
    // Over a megabyte: parsed on several threads where there are cores.
    let (_dir, store, path) = closed_log(Durability::None, "a", 12_000).await;
    assert!(std::fs::metadata(&path).unwrap().len() > 1 << 20);
    let loaded = store.load(&sid("a")).await.unwrap();
    assert_eq!(loaded.events, events(0, 12_000));
    let intact = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = intact.lines().map(str::to_owned).collect();
    lines[11_001] = turn_start(11_001).to_json_line().replace("turn", "tu\"rn");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let err = store.load(&sid("a")).await.err().unwrap();
    expect_corrupt(err, &path, 11_002, "unreadable event");
    lines[11_001] = user_text(11_001, "x").to_json_line();
    lines[9_000] = turn_start(9_001).to_json_line();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let err = store.open(&sid("a")).await.err().unwrap();
    expect_corrupt(err, &path, 9_001, "expected seq 8999, found 9001");
}

/// A log of over a megabyte is read as it is parsed, on several threads
/// where there are cores: its torn last line is still cut and reported on
/// open, and a whole last line without its `\n` still kept and mended.
#[tokio::test]
async fn h10_a_large_log_opened_with_a_torn_last_line_cuts_it() {
    let (_dir, store, path) = closed_log(Durability::None, "a", 12_000).await;
    let intact = std::fs::read(&path).unwrap();
    assert!(intact.len() > 1 << 20);
    let torn = br#"{"seq":12000,"time":1700000012000,"type":"turn/st"#;
    append_raw(&path, torn);
    let loaded = store.load(&sid("a")).await.unwrap();
    assert_eq!(loaded.torn_tail.unwrap().line, 12_002);
    let (opened, log) = store.open(&sid("a")).await.unwrap();
    let tail = opened.torn_tail.unwrap();
    assert_eq!((tail.line, tail.bytes), (12_002, torn.len() as u64));
    assert_eq!(opened.events, events(0, 12_000));
    assert_eq!(std::fs::read(&path).unwrap(), intact);
    // A whole last line without its `\n`: kept, and the `\n` restored.
    log.append(&events(12_000, 1)).await.unwrap();
    drop(log);
    let full = std::fs::read(&path).unwrap();
    std::fs::write(&path, &full[..full.len() - 1]).unwrap();
    let (opened, log) = store.open(&sid("a")).await.unwrap();
    assert!(opened.torn_tail.is_none());
    assert_eq!(opened.events, events(0, 12_001));
    assert_eq!(std::fs::read(&path).unwrap(), full);
    drop(log);
}

#[tokio::test]
async fn h10_a_corrupt_header_is_corrupt_at_line_one() {
    let (_dir, store, path) = closed_log(Durability::None, "a", 1).await;
    let text = std::fs::read_to_string(&path).unwrap();
    let rest = &text[text.find('\n').unwrap()..];
    std::fs::write(&path, format!("{{\"format\":1,\"id\":\"a\"{rest}")).unwrap();
    let err = store.open(&sid("a")).await.err().unwrap();
    expect_corrupt(err, &path, 1, "header");
    let err = store.header(&sid("a")).await.err().unwrap();
    expect_corrupt(err, &path, 1, "header");

    // A header naming another session.
    let other = serde_json::to_string(&header("b")).unwrap();
    std::fs::write(&path, format!("{other}{rest}")).unwrap();
    let err = store.load(&sid("a")).await.err().unwrap();
    expect_corrupt(err, &path, 1, "`b`");

    // No header at all: an unfinished create (what a kill in the middle of
    // a create, or a power loss under `Durability::None`, leaves).
    std::fs::write(&path, "").unwrap();
    let err = store.load(&sid("a")).await.err().unwrap();
    assert_eq!(err.code(), "TORN_CREATE", "{err}");
    assert!(err.to_string().contains("unfinished create"), "{err}");
    // A blank first line with lines after it is no create's: not a session.
    std::fs::write(&path, "\n{}\n").unwrap();
    let err = store.load(&sid("a")).await.err().unwrap();
    assert_eq!(err.code(), "NOT_A_SESSION", "{err}");
    assert!(err.to_string().contains("blank"), "{err}");
}

#[tokio::test]
async fn h10_a_seq_gap_is_corrupt() {
    let (_dir, store, path) = closed_log(Durability::None, "a", 2).await;
    append_raw(
        &path,
        format!("{}\n", turn_start(3).to_json_line()).as_bytes(),
    );
    let err = store.load(&sid("a")).await.err().unwrap();
    expect_corrupt(err, &path, 4, "expected seq 2, found 3");
    let err = store.open(&sid("a")).await.err().unwrap();
    expect_corrupt(err, &path, 4, "expected seq 2, found 3");
}

#[tokio::test]
async fn h10_a_complete_last_line_missing_its_newline_is_kept() {
    let (_dir, store, path) = closed_log(Durability::TurnBoundary, "a", 2).await;
    let last = user_text(2, "kept").to_json_line();
    append_raw(&path, last.as_bytes());
    let before = std::fs::read(&path).unwrap();
    // Read-only: kept, nothing written.
    let loaded = store.load(&sid("a")).await.unwrap();
    assert_eq!(loaded.events.len(), 3);
    assert!(loaded.torn_tail.is_none());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // Open: kept, and the newline restored.
    let (opened, log) = store.open(&sid("a")).await.unwrap();
    assert_eq!(opened.events.last(), Some(&user_text(2, "kept")));
    assert!(opened.torn_tail.is_none());
    let after = std::fs::read(&path).unwrap();
    assert_eq!(after, [before.as_slice(), b"\n"].concat());
    log.append(&events(3, 1)).await.unwrap();
    drop(log);
    assert_eq!(store.load(&sid("a")).await.unwrap().events.len(), 4);
}

#[tokio::test]
async fn h10_a_header_missing_its_newline_is_kept() {
    let dir = TempDir::new().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
    let path = store.log_path(&sid("a"));
    std::fs::write(&path, serde_json::to_string(&header("a")).unwrap()).unwrap();
    let (loaded, log) = store.open(&sid("a")).await.unwrap();
    assert!(loaded.events.is_empty());
    log.append(&events(0, 1)).await.unwrap();
    drop(log);
    assert_eq!(store.load(&sid("a")).await.unwrap().events, events(0, 1));
}

#[tokio::test]
async fn every_durability_puts_appends_on_disk_before_any_checkpoint() {
    for durability in [
        Durability::None,
        Durability::TurnBoundary,
        Durability::EveryEvent,
    ] {
        let dir = TempDir::new().unwrap();
        let store = JsonlStore::new(dir.path(), durability).unwrap();
        let log = store.create(&header("a"), &events(0, 1)).await.unwrap();
        let path = store.log_path(&sid("a"));
        for seq in 1..4 {
            let batch = events(seq, 1);
            log.append(&batch).await.unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            let last = text.lines().last().unwrap();
            assert_eq!(last, batch[0].to_json_line(), "{durability:?}");
            assert!(text.ends_with('\n'), "{durability:?}");
        }
        log.checkpoint().await.unwrap();
        assert_eq!(
            line_count(&std::fs::read(&path).unwrap()),
            5,
            "{durability:?}"
        );
    }
}

#[tokio::test]
async fn remove_and_list() {
    for fx in fixtures() {
        assert!(fx.store.list().await.unwrap().is_empty());
        let b = fx.store.create(&header("b"), &[]).await.unwrap();
        drop(fx.store.create(&header("a"), &events(0, 1)).await.unwrap());
        drop(fx.store.create(&header("c.1"), &[]).await.unwrap());
        if let Some(store) = &fx.jsonl {
            // Temporaries, foreign files and directories are not logs.
            for name in [
                ".a.123-4-5.tmp",
                ".hidden.jsonl",
                "notes.txt",
                "a.jsonl.bak",
                "bad name.jsonl",
            ] {
                std::fs::write(store.dir().join(name), "x").unwrap();
            }
            std::fs::create_dir(store.dir().join("dir.jsonl")).unwrap();
        }
        let ids = |ids: Vec<SessionId>| ids.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(
            ids(fx.store.list().await.unwrap()),
            ["a", "b", "c.1"],
            "{}",
            fx.name
        );
        let err = fx.store.remove(&sid("b")).await.err().unwrap();
        assert!(matches!(err, StoreError::Busy(_)), "{}: {err:?}", fx.name);
        fx.store.remove(&sid("a")).await.unwrap();
        assert!(!fx.store.exists(&sid("a")).await.unwrap());
        let err = fx.store.remove(&sid("a")).await.err().unwrap();
        assert!(
            matches!(err, StoreError::NotFound(_)),
            "{}: {err:?}",
            fx.name
        );
        assert_eq!(
            ids(fx.store.list().await.unwrap()),
            ["b", "c.1"],
            "{}",
            fx.name
        );
        drop(b);
        fx.store.remove(&sid("b")).await.unwrap();
        assert_eq!(ids(fx.store.list().await.unwrap()), ["c.1"], "{}", fx.name);
        if let Some(path) = fx.file("b") {
            assert!(!path.exists());
        }
        // A removed id can be created afresh.
        let log = fx.store.create(&header("a"), &[]).await.unwrap();
        log.append(&events(0, 1)).await.unwrap();
    }
}

#[tokio::test]
async fn clones_of_a_memory_store_share_logs() {
    let store = MemoryStore::new();
    let clone = store.clone();
    let log = store.create(&header("a"), &[]).await.unwrap();
    log.append(&events(0, 2)).await.unwrap();
    assert_eq!(clone.load(&sid("a")).await.unwrap().events, events(0, 2));
    assert!(matches!(
        clone.open(&sid("a")).await.err(),
        Some(StoreError::Busy(_))
    ));
}

/// A header and one event of every payload kind, with fixed times and ids.
fn format_fixture() -> (SessionHeader, Vec<SessionEvent>) {
    let mut extensions = serde_json::Map::new();
    extensions.insert(
        "host".into(),
        // Keys in sorted order: a `Value` keeps insertion order when
        // serde_json's `preserve_order` is on in the build (a dependency of
        // dsh-subagent-acp turns it on), so the bytes match either way.
        serde_json::json!({"build": 7, "name": "dsh-test"}),
    );
    let header = SessionHeader {
        format: FORMAT_VERSION,
        id: sid("s-format"),
        parent_session: Some(sid("s-lead")),
        origin: Some("project-origin".into()),
        delegation_depth: 1,
        cwd: "/work/project".into(),
        seed_len: 0,
        created_at: T0,
        composition: Composition {
            preset: Some("reviewer".into()),
            options: AgentOptions {
                model: Some("model-a".into()),
                ..AgentOptions::default()
            },
            ..Composition::default()
        },
        extensions,
    };
    let accepted = |id: &str, source: MessageSource, target: InboxTarget, wake: bool| {
        EventPayload::InboxAccepted(InboxAccepted {
            message: UserMessage {
                id: MessageId::new(id),
                content: vec![ContentBlock::text(format!("message {id}"))],
                source,
            },
            target,
            wake,
        })
    };
    let mut team = serde_json::Map::new();
    team.insert("team".into(), "t-1".into());
    team.insert("from".into(), "s-peer".into());
    let payloads = vec![
        EventPayload::TurnStart(TurnStart { turn: 0 }),
        accepted("m-1", MessageSource::User, InboxTarget::NextTurn, true),
        accepted(
            "m-2",
            MessageSource::AgentMessage {
                sender_session_id: sid("s-peer"),
            },
            InboxTarget::NextStep,
            true,
        ),
        accepted(
            "m-3",
            MessageSource::SubagentSettled {
                summary: "s-child completed".into(),
                stop_reason: Some(StopReason::COMPLETED),
                sender_session_id: sid("s-child"),
            },
            InboxTarget::NextTurn,
            false,
        ),
        accepted(
            "m-4",
            MessageSource::SubagentSettled {
                summary: "s-old settled".into(),
                stop_reason: None,
                sender_session_id: sid("s-old"),
            },
            InboxTarget::NextTurn,
            false,
        ),
        accepted(
            "m-5",
            MessageSource::Other {
                kind: "team-message".into(),
                fields: team,
            },
            InboxTarget::NextStep,
            true,
        ),
        EventPayload::InboxClaimed(InboxIds {
            message_ids: vec![MessageId::new("m-1"), MessageId::new("m-2")],
        }),
        EventPayload::InboxDiscarded(InboxIds {
            message_ids: vec![MessageId::new("m-4")],
        }),
        EventPayload::StepStart(StepStart { turn: 0, step: 0 }),
        EventPayload::UserMessage(UserEntry {
            message: UserMessage {
                id: MessageId::new("m-1"),
                content: vec![ContentBlock::text("message m-1")],
                source: MessageSource::User,
            },
        }),
        EventPayload::AssistantMessage(AssistantEntry {
            content: vec![
                ContentBlock::text("Here is the chart:"),
                ContentBlock::Image {
                    media_type: "image/png".into(),
                    data: "iVBORw0KGgo=".into(),
                },
            ],
        }),
        EventPayload::ToolCall(ToolCall {
            call_id: CallId::new("c-1"),
            name: "read_file".into(),
            input: serde_json::json!({"limit": 20, "path": "src/main.rs"}).into(),
        }),
        EventPayload::ToolResult(ToolResultEntry {
            call_id: CallId::new("c-1"),
            name: "read_file".into(),
            content: vec![ContentBlock::text("no such file: src/main.rs")],
            is_error: true,
        }),
        EventPayload::ToolResult(ToolResultEntry {
            call_id: CallId::new("c-2"),
            name: "read_file".into(),
            content: vec![ContentBlock::text("fn main() {}\n")],
            is_error: false,
        }),
        EventPayload::Usage(Usage {
            input_tokens: 1200,
            output_tokens: 85,
            ..Usage::default()
        }),
        EventPayload::TurnEnd(TurnEnd {
            turn: 0,
            stop_reason: StopReason::ERROR,
            diagnostic: Some("model error: rate-limited".into()),
        }),
        EventPayload::Extension {
            kind: "subagent/child".into(),
            payload: serde_json::json!({"child": "s-child", "name": "helper"}).into(),
        },
    ];
    let events = (0..)
        .zip(payloads)
        .map(|(seq, payload)| SessionEvent {
            seq,
            time: T0 + 1000 * seq,
            payload,
        })
        .collect();
    (header, events)
}

#[tokio::test]
async fn jsonl_format() {
    let dir = TempDir::new().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
    let (header, events) = format_fixture();
    let log = store.create(&header, &events[..1]).await.unwrap();
    log.append(&events[1..5]).await.unwrap();
    for event in &events[5..] {
        log.append(std::slice::from_ref(event)).await.unwrap();
    }
    drop(log);
    let text = std::fs::read_to_string(store.log_path(&header.id)).unwrap();
    insta::assert_snapshot!("jsonl_format", text);
    // The snapshot ignores trailing newlines; every line must have one.
    assert!(text.ends_with('\n'));
    assert_eq!(line_count(text.as_bytes()), 1 + events.len());
    // And it reads back exactly.
    let loaded = store.load(&header.id).await.unwrap();
    assert_eq!(loaded.header, header);
    assert_eq!(loaded.events, events);
}
