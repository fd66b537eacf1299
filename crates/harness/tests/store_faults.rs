//! Fault tests of the JSONL store against real files: a disk that fills in
//! the middle of a batch (a tiny tmpfs; where none can be mounted the test
//! fails under CI and says why on stderr elsewhere: `skip_or_fail`), a log
//! in a newer format, strays that are not sessions, a log nobody may read
//! (mode 000, read by a process without the root capabilities that ignore
//! it), and the leftovers of a crashed create swept when a store opens.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod store_support;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use dsh_core::content::ContentBlock;
use dsh_core::message::{MessageSource, UserMessage};
use dsh_core::session::{EventPayload, SessionEvent, UserEntry};
use dsh_core::{Durability, MessageId, SessionStore};
use dsh_harness::store::JsonlStore;
use dsh_test_support::skip_or_fail;

use store_support::{dead_pid, header, io_source, sid, turn};

/// A tmpfs of `size` mounted on a fresh directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mount one, or say why not (not root, no mount in this sandbox).
    fn mount(size: &str) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|err| err.to_string())?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|err| format!("cannot run mount: {err}"))?;
        if output.status.success() {
            Ok(Self { dir })
        } else {
            Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// An event of about 1 KiB.
fn big(seq: u64) -> SessionEvent {
    SessionEvent {
        seq,
        time: seq,
        payload: EventPayload::UserMessage(UserEntry {
            message: UserMessage {
                id: MessageId::new(format!("m-{seq}")),
                content: vec![ContentBlock::text("x".repeat(1000))],
                source: MessageSource::User,
            },
        }),
    }
}

#[tokio::test]
async fn b52_enospc_in_the_middle_of_a_batch_leaves_nothing_of_it() {
    for durability in [Durability::None, Durability::EveryEvent] {
        let tmpfs = match Tmpfs::mount("64k") {
            Ok(tmpfs) => tmpfs,
            Err(reason) => {
                skip_or_fail(&format!("cannot mount a tmpfs ({reason})"));
                return;
            }
        };
        let store = JsonlStore::new(tmpfs.path(), durability).unwrap();
        let path = store.log_path(&sid("a"));
        let log = store.create(&header("a"), &[]).await.unwrap();
        let mut acked = 0;
        let err = loop {
            // Batches of 7 lines: the disk fills in the middle of one.
            let batch: Vec<_> = (acked..acked + 7).map(big).collect();
            match log.append(&batch).await {
                Ok(()) => acked += 7,
                Err(err) => break err,
            }
        };
        assert_eq!(
            io_source(&err).kind(),
            io::ErrorKind::StorageFull,
            "{durability:?}: {err}"
        );
        assert!(acked > 0, "{durability:?}: the first batch should fit");
        // The handle is poisoned with the same error.
        let again = log.append(&[big(acked)]).await.unwrap_err();
        assert_eq!(again.to_string(), err.to_string());
        let bytes = fs::read(&path).unwrap();
        assert_eq!(
            bytes.last(),
            Some(&b'\n'),
            "{durability:?}: a partial line was left"
        );
        drop(log);
        // Exactly the acknowledged events, nothing torn, nothing extra.
        let loaded = store.load(&sid("a")).await.unwrap();
        assert_eq!(loaded.events.len() as u64, acked, "{durability:?}");
        assert!(loaded.torn_tail.is_none());
        let (opened, _log) = store.open(&sid("a")).await.unwrap();
        assert_eq!(opened.events.len() as u64, acked);
    }
}

#[tokio::test]
async fn a_log_in_a_newer_format_is_refused_naming_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
    let path = store.log_path(&sid("a"));
    let mut newer = serde_json::to_value(header("a")).unwrap();
    newer["format"] = 2.into();
    let line = format!("{newer}\n{}\n", turn(0).to_json_line());
    fs::write(&path, &line).unwrap();
    // A newer format may also change the shape of known fields.
    newer["cwd"] = serde_json::json!({ "root": "/work", "relative": "." });
    fs::write(
        store.log_path(&sid("b")),
        format!("{}\n", newer.to_string().replace("\"a\"", "\"b\"")),
    )
    .unwrap();
    for id in [sid("a"), sid("b")] {
        let failures = [
            store.load(&id).await.err(),
            store.header(&id).await.err(),
            store.open(&id).await.err(),
        ];
        for err in failures {
            let err = err.unwrap();
            assert_eq!(err.code(), "SESSION_FORMAT_UNSUPPORTED", "{err}");
            let message = err.to_string();
            assert!(
                message.contains("format 2") && message.contains("format 1"),
                "{message}"
            );
        }
    }
    // Refused without a change.
    assert_eq!(fs::read_to_string(&path).unwrap(), line);
}

#[tokio::test]
async fn b57_strays_are_not_sessions_and_touch_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
    let log = store.create(&header("good"), &[turn(0)]).await.unwrap();
    drop(log);
    fs::write(
        dir.path().join("README.jsonl"),
        "# Session logs\nDo not edit.\n",
    )
    .unwrap();
    fs::write(
        dir.path().join("data.jsonl"),
        "{\"name\":\"x\",\"value\":1}\n",
    )
    .unwrap();
    fs::write(dir.path().join("empty.jsonl"), "").unwrap();
    fs::write(dir.path().join("zeros.jsonl"), [0u8; 64]).unwrap();
    let ids = store.list().await.unwrap();
    let names: Vec<_> = ids.iter().map(|id| id.as_str()).collect();
    assert_eq!(names, ["README", "data", "empty", "good", "zeros"]);
    let loaded = store.load_many(&ids).await;
    for (id, result) in ids.iter().zip(&loaded) {
        if id.as_str() == "good" {
            assert_eq!(result.as_ref().unwrap().events, [turn(0)]);
            continue;
        }
        // A file with no newline that is not a header (empty, or zeros) is
        // what an unfinished create leaves; the others are strangers.
        let code = match id.as_str() {
            "empty" | "zeros" => "TORN_CREATE",
            _ => "NOT_A_SESSION",
        };
        let err = result.as_ref().unwrap_err();
        assert_eq!(err.code(), code, "{id}: {err}");
        let path = store.log_path(id);
        assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");
        let opened = store.open(id).await.err().unwrap();
        assert_eq!(opened.code(), code, "{id}: {opened}");
        assert_eq!(store.header(id).await.unwrap_err().code(), code);
    }
    // A damaged header that still opens as one, with lines after it, is
    // corruption, not a stray.
    let text = fs::read_to_string(store.log_path(&sid("good"))).unwrap();
    let rest = &text[text.find('\n').unwrap()..];
    fs::write(
        store.log_path(&sid("good")),
        format!("{}{rest}", &text[..20]),
    )
    .unwrap();
    assert_eq!(
        store.load(&sid("good")).await.unwrap_err().code(),
        "SESSION_CORRUPT"
    );
    // Alone, without its newline, it is what a create that crashed before
    // it was acknowledged leaves (a header written in place): an
    // unfinished create, for load, header and open alike.
    fs::write(store.log_path(&sid("good")), &text[..20]).unwrap();
    let err = store.load(&sid("good")).await.unwrap_err();
    assert_eq!(err.code(), "TORN_CREATE", "{err}");
    assert!(err.to_string().contains("unfinished create"), "{err}");
    let err = store.header(&sid("good")).await.unwrap_err();
    assert_eq!(err.code(), "TORN_CREATE", "{err}");
    let opened = store.open(&sid("good")).await.err().unwrap();
    assert_eq!(opened.code(), "TORN_CREATE", "{opened}");
    assert!(opened.to_string().contains("unfinished create"), "{opened}");
}

/// The test binary, re-run for one test without the capabilities that let
/// root read any file, when `setpriv` can drop them.
fn rerun_unprivileged(test: &str) -> Option<std::process::Output> {
    let exe = std::env::current_exe().ok()?;
    let output = Command::new("setpriv")
        .args(["--bounding-set", "-dac_override,-dac_read_search", "--"])
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .output()
        .ok()?;
    Some(output)
}

/// Whether this process can read a file whatever its mode says.
fn reads_anything(dir: &Path) -> bool {
    let probe = dir.join("probe");
    fs::write(&probe, "x").unwrap();
    set_mode(&probe, 0o000);
    let readable = fs::read(&probe).is_ok();
    fs::remove_file(&probe).unwrap();
    readable
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

#[tokio::test]
async fn b57_an_unreadable_log_fails_alone_with_permission_denied() {
    const NAME: &str = "b57_an_unreadable_log_fails_alone_with_permission_denied";
    let dir = tempfile::tempdir().unwrap();
    if reads_anything(dir.path()) {
        // Root: the check is only meaningful without CAP_DAC_OVERRIDE.
        match rerun_unprivileged(NAME) {
            Some(output) => {
                let stdout = String::from_utf8_lossy(&output.stdout);
                assert!(
                    output.status.success() && stdout.contains("checked without DAC override"),
                    "unprivileged run failed:\n{stdout}\n{}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            None => skip_or_fail("setpriv is not available to drop CAP_DAC_OVERRIDE"),
        }
        return;
    }
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
    for id in ["a", "b", "c"] {
        drop(store.create(&header(id), &[turn(0)]).await.unwrap());
    }
    let locked: PathBuf = store.log_path(&sid("b"));
    set_mode(&locked, 0o000);
    let ids = store.list().await.unwrap();
    assert_eq!(ids, [sid("a"), sid("b"), sid("c")]);
    let loaded = store.load_many(&ids).await;
    assert!(loaded[0].is_ok() && loaded[2].is_ok());
    let denied = [
        loaded[1].as_ref().unwrap_err().clone(),
        store.load(&sid("b")).await.unwrap_err(),
        store.header(&sid("b")).await.unwrap_err(),
        store.open(&sid("b")).await.err().unwrap(),
    ];
    for err in denied {
        assert_eq!(
            io_source(&err).kind(),
            io::ErrorKind::PermissionDenied,
            "{err}"
        );
        assert!(err.to_string().contains("b.jsonl"), "{err}");
    }
    let (opened, _log) = store.open(&sid("c")).await.unwrap();
    assert_eq!(opened.events, [turn(0)]);
    println!("checked without DAC override");
}

#[tokio::test]
async fn opening_a_store_sweeps_what_a_crashed_create_left() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), Durability::None).unwrap();
    drop(store.create(&header("b"), &[turn(0)]).await.unwrap());
    let gone = dead_pid();
    let me = std::process::id();
    // An unpublished log, and a second link of a published one, each left
    // by a process that died.
    let unpublished = dir.path().join(format!(".a.{gone}-1-0.tmp"));
    fs::write(&unpublished, "{\"format\":1,\"id\":\"a\",\"cw").unwrap();
    let second_link = dir.path().join(format!(".b.{gone}-2-1.tmp"));
    fs::hard_link(store.log_path(&sid("b")), &second_link).unwrap();
    // A create in flight in this process: locked, kept.
    let in_flight = dir.path().join(format!(".c.{me}-3-2.tmp"));
    fs::write(&in_flight, "").unwrap();
    let lock = fs::File::open(&in_flight).unwrap();
    lock.try_lock().unwrap();
    // Just created by this live process and not yet locked: kept.
    let fresh = dir.path().join(format!(".d.{me}-4-3.tmp"));
    fs::write(&fresh, "").unwrap();
    // Not ours at all: kept.
    let foreign = dir.path().join(".notes.tmp");
    fs::write(&foreign, "mine").unwrap();
    // A stale leftover that cannot be removed (a directory by that name):
    // reported, and the store opens all the same.
    let stuck = dir.path().join(format!(".e.{gone}-5-4.tmp"));
    fs::create_dir(&stuck).unwrap();
    fs::write(stuck.join("inside"), "x").unwrap();

    let reopened = JsonlStore::new(dir.path(), Durability::None).unwrap();
    let failures: Vec<String> = reopened
        .sweep_failures()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].contains(".e."), "{failures:?}");
    assert!(stuck.exists());
    assert!(store.sweep_failures().is_empty());
    assert!(!unpublished.exists());
    assert!(!second_link.exists());
    assert!(in_flight.exists() && fresh.exists() && foreign.exists());
    let (loaded, _log) = reopened.open(&sid("b")).await.unwrap();
    assert_eq!(loaded.events, [turn(0)]);
    assert!(!reopened.exists(&sid("a")).await.unwrap());
    drop(lock);
}
