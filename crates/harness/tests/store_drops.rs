//! Drop tests of the JSONL store: a future of `append` (fsync under
//! `EveryEvent`), `checkpoint`, `create` or `open` polled until its blocking
//! work is queued, then dropped, and what the store says afterwards. The
//! blocking work is held back deterministically by occupying the only
//! thread of the runtime's blocking pool; the same store is then asked from
//! a second runtime (another part of this process, with its own pool). This
//! reproduces the mechanism of the old `SESSION_BUSY` flake of
//! `presets_are_recorded_and_restored_with_per_agent_shadowing`: a detached
//! fsync kept the file (and its OS lock) after the registry claim was gone.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod store_support;

use std::sync::{Arc, mpsc};

use dsh_core::{Durability, LoadedSession, SessionId, SessionLog, SessionStore, StoreError};
use dsh_harness::store::JsonlStore;
use dsh_test_support::wait::{bounded, until};
use futures::FutureExt;
use tempfile::TempDir;
use tokio::runtime::{Builder, Runtime};

use store_support::{expect_busy, header, sid, turn};

/// A runtime whose blocking pool has one thread, which a test can occupy.
fn one_blocking_thread() -> Runtime {
    Builder::new_current_thread()
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Another runtime of this process, with a pool of its own.
fn elsewhere() -> Runtime {
    Builder::new_current_thread().enable_all().build().unwrap()
}

/// Occupy the only blocking thread of `rt` until the returned sender is
/// dropped: blocking work spawned meanwhile waits in the queue.
fn occupy(rt: &Runtime) -> mpsc::Sender<()> {
    let (release, released) = mpsc::channel::<()>();
    let (started, running) = mpsc::channel::<()>();
    rt.spawn_blocking(move || {
        started.send(()).unwrap();
        // Returns when the sender is dropped.
        let _ = released.recv();
    });
    running.recv().unwrap();
    release
}

/// Open `id`, waiting (bounded) while this process still holds it.
fn open_once_free(
    rt: &Runtime,
    store: &JsonlStore,
    id: &SessionId,
) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
    rt.block_on(bounded(async {
        loop {
            match store.open(id).await {
                Err(StoreError::Busy(_)) => {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await
                }
                other => return other,
            }
        }
    }))
}

/// Every durability: the drop tests hold for each.
const DURABILITIES: [Durability; 3] = [
    Durability::None,
    Durability::TurnBoundary,
    Durability::EveryEvent,
];

fn store(durability: Durability) -> (TempDir, JsonlStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), durability).unwrap();
    (dir, store)
}

/// Drop the future of a sync (an `EveryEvent` append or a `TurnBoundary`
/// checkpoint) and the log with it while the fsync is queued.
fn dropped_sync_keeps_the_log_held_until_it_ends(durability: Durability) {
    let rt = one_blocking_thread();
    let other = elsewhere();
    let (_dir, store) = store(durability);
    let log = rt.block_on(store.create(&header("a"), &[])).unwrap();
    let blocker = occupy(&rt);
    let events = [turn(0)];
    let mut sync = match durability {
        Durability::EveryEvent => log.append(&events).boxed(),
        _ => {
            rt.block_on(log.append(&events)).unwrap();
            log.checkpoint().boxed()
        }
    };
    rt.block_on(async { assert!(futures::poll!(&mut sync).is_pending()) });
    drop(sync);
    drop(log);
    // Nobody holds a handle, but the detached fsync still owns the file: the
    // answer is an honest in-process Busy, never a lock of a file nobody owns.
    expect_busy(
        other.block_on(store.open(&sid("a"))),
        "while the fsync is queued",
    );
    let removed = other.block_on(store.remove(&sid("a")));
    assert!(matches!(removed, Err(StoreError::Busy(_))), "{removed:?}");
    drop(blocker);
    let (loaded, _log) = open_once_free(&other, &store, &sid("a")).unwrap();
    assert_eq!(loaded.events, events);
}

#[test]
fn a_dropped_every_event_append_holds_the_log_until_its_fsync_ends() {
    dropped_sync_keeps_the_log_held_until_it_ends(Durability::EveryEvent);
}

#[test]
fn a_dropped_checkpoint_holds_the_log_until_its_fsync_ends() {
    dropped_sync_keeps_the_log_held_until_it_ends(Durability::TurnBoundary);
}

#[test]
fn close_waits_for_a_detached_fsync_and_then_the_log_opens_at_once() {
    let rt = one_blocking_thread();
    let other = elsewhere();
    let (_dir, store) = store(Durability::EveryEvent);
    let log = rt.block_on(store.create(&header("a"), &[])).unwrap();
    let blocker = occupy(&rt);
    let events = [turn(0)];
    let mut append = log.append(&events).boxed();
    rt.block_on(async { assert!(futures::poll!(&mut append).is_pending()) });
    drop(append);
    let mut close = log.close().boxed();
    rt.block_on(async {
        assert!(
            futures::poll!(&mut close).is_pending(),
            "close must wait for the queued fsync"
        );
    });
    // Closed for appends at once, though not yet released.
    let err = rt.block_on(log.append(&[turn(1)])).unwrap_err();
    assert_eq!(err.code(), "SESSION_CLOSED", "{err}");
    assert!(matches!(
        other.block_on(store.open(&sid("a"))),
        Err(StoreError::Busy(_))
    ));
    drop(blocker);
    rt.block_on(bounded(close));
    // "Closed" means "openable now": no retry.
    let (loaded, reopened) = other.block_on(store.open(&sid("a"))).unwrap();
    assert_eq!(loaded.events, events);
    // Closing again (or after the release) returns at once.
    rt.block_on(bounded(log.close()));
    assert!(rt.block_on(log.checkpoint()).is_err());
    drop(reopened);
}

/// The modes whose create forces the file and directory, on the blocking
/// pool; under the others a create runs inline and has no await to drop.
const FORCING_CREATES: [Durability; 2] = [Durability::TurnBoundary, Durability::EveryEvent];

#[test]
fn a_create_that_forces_nothing_runs_inline_even_with_the_blocking_pool_taken() {
    for durability in [Durability::None, Durability::Batched] {
        let rt = one_blocking_thread();
        let (dir, store) = store(durability);
        let blocker = occupy(&rt);
        let header = header("a");
        let mut create = store.create(&header, &[]).boxed();
        // Done at the first poll, while the pool's only thread is taken:
        // no await point, so no drop can come between file and handle.
        let first = rt.block_on(async { futures::poll!(&mut create) });
        let std::task::Poll::Ready(created) = first else {
            panic!("{durability:?}: the create waited for the blocking pool");
        };
        let log = created.unwrap();
        rt.block_on(log.append(&[turn(0)])).unwrap();
        rt.block_on(bounded(log.close()));
        drop(blocker);
        let loaded = rt.block_on(store.load(&sid("a"))).unwrap();
        assert_eq!(loaded.events, [turn(0)], "{durability:?}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}

#[test]
fn a_dropped_create_holds_the_id_and_then_leaves_no_log() {
    for durability in FORCING_CREATES {
        let rt = one_blocking_thread();
        let other = elsewhere();
        let (dir, store) = store(durability);
        let blocker = occupy(&rt);
        let header = header("a");
        let mut create = store.create(&header, &[]).boxed();
        rt.block_on(async { assert!(futures::poll!(&mut create).is_pending()) });
        drop(create);
        expect_busy(
            other.block_on(store.open(&sid("a"))),
            "while the create is queued",
        );
        drop(blocker);
        let opened = open_once_free(&other, &store, &sid("a"));
        assert!(
            matches!(opened, Err(StoreError::NotFound(_))),
            "{:?}",
            opened.err()
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // The id is free for a real create.
        other.block_on(store.create(&header, &[])).unwrap();
    }
}

#[test]
fn a_create_dropped_after_its_publication_withdraws_the_log() {
    for durability in FORCING_CREATES {
        let rt = Builder::new_current_thread().enable_all().build().unwrap();
        let (dir, store) = store(durability);
        let header = header("a");
        // The blocking work runs freely here, so on a loaded machine it can
        // finish before the first poll returns; then the log was handed
        // over whole, and the attempt is made again on a fresh id.
        let mut attempt = 0;
        let (id, create) = loop {
            let id = sid(&format!("a{attempt}"));
            let mut header = header.clone();
            header.id = id.clone();
            let store = store.clone();
            let mut create = Box::pin(async move { store.create(&header, &[]).await.map(drop) });
            let first = rt.block_on(async { futures::poll!(&mut create) });
            match first {
                std::task::Poll::Pending => break (id, create),
                std::task::Poll::Ready(done) => {
                    done.unwrap();
                    attempt += 1;
                    assert!(
                        attempt < 100,
                        "{durability:?}: every create finished at once"
                    );
                }
            }
        };
        let path = store.log_path(&id);
        // The blocking work publishes the log; nobody polls the future again.
        rt.block_on(until(|| path.exists()));
        drop(create);
        let opened = open_once_free(&rt, &store, &id);
        assert!(
            matches!(opened, Err(StoreError::NotFound(_))),
            "{:?}",
            opened.err()
        );
        // Only the logs of attempts that finished at once are left.
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            attempt,
            "{durability:?}"
        );
    }
}

#[test]
fn a_dropped_open_holds_the_id_until_its_work_ends() {
    for durability in DURABILITIES {
        let rt = one_blocking_thread();
        let other = elsewhere();
        let (_dir, store) = store(durability);
        drop(rt.block_on(store.create(&header("a"), &[turn(0)])).unwrap());
        let blocker = occupy(&rt);
        let id = sid("a");
        let mut open = store.open(&id).boxed();
        rt.block_on(async { assert!(futures::poll!(&mut open).is_pending()) });
        drop(open);
        expect_busy(
            other.block_on(store.open(&sid("a"))),
            "while the open is queued",
        );
        drop(blocker);
        let (loaded, _log) = open_once_free(&other, &store, &sid("a")).unwrap();
        assert_eq!(loaded.events, [turn(0)]);
    }
}

/// A child process forked by any thread shares every descriptor of this
/// process until it execs. The store must not depend on close releasing the
/// lock: here a child is held between fork and exec while the log is
/// released and reopened. This was the mechanism of the `agent_loop` flake
/// (a parallel test's insta snapshot spawns `cargo metadata`).
#[test]
#[allow(unsafe_code, reason = "pre_exec holds a forked child before exec")]
fn a_child_forked_while_a_log_is_open_does_not_keep_it_locked() {
    use std::io::{Read, Write};
    use std::os::unix::process::CommandExt;

    let rt = elsewhere();
    let (_dir, store) = store(Durability::None);
    let log = rt.block_on(store.create(&header("a"), &[turn(0)])).unwrap();
    let (mut forked, mut forked_tx) = std::io::pipe().unwrap();
    let (mut go_rx, mut go) = std::io::pipe().unwrap();
    let mut command = std::process::Command::new("true");
    // SAFETY: the closure only reads and writes pipes the child inherited.
    unsafe {
        command.pre_exec(move || {
            forked_tx.write_all(b"f")?;
            let mut byte = [0u8; 1];
            go_rx.read_exact(&mut byte)?;
            Ok(())
        });
    }
    let spawner = std::thread::spawn(move || command.spawn().and_then(|mut child| child.wait()));
    let mut byte = [0u8; 1];
    forked.read_exact(&mut byte).unwrap();
    // The child now shares the log's descriptor.
    rt.block_on(log.close());
    drop(log);
    let reopened = rt.block_on(store.open(&sid("a")));
    go.write_all(b"g").unwrap();
    assert!(spawner.join().unwrap().unwrap().success());
    let (loaded, _log) =
        reopened.unwrap_or_else(|err| panic!("the closed log did not reopen: {err}"));
    assert_eq!(loaded.events, [turn(0)]);
}
