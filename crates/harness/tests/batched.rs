//! `Durability::Batched` on the JSONL store: creates, appends, checkpoints
//! and closes return without waiting for any sync (with a one-hour window,
//! none could), a log's `sync` and the store's `flush` resolve only once
//! the committer's round has forced what they cover, a closed log that is
//! not yet forced can be opened again at once, every future dropped at
//! every await leaves what the store promises, and a process killed with
//! SIGKILL after a flush returned leaves everything flushed readable.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod store_support;

use std::task::Poll;
use std::time::Duration;

use dsh_core::{Durability, SessionStore, StoreError};
use dsh_harness::store::JsonlStore;
use dsh_harness::store::jsonl::DEFAULT_GROUP_WINDOW;
use dsh_test_support::wait::{bounded, until};
use futures::FutureExt;

use store_support::{FOREVER, header, sid, spawn_self, turn, windowed};

fn batched(dir: &std::path::Path, window: Duration) -> JsonlStore {
    windowed(dir, Durability::Batched, window)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_writer_never_waits_for_the_window_and_flush_waits_for_the_sync() {
    let dir = tempfile::tempdir().unwrap();
    let store = batched(dir.path(), FOREVER);
    assert_eq!(store.group_window(), Some(FOREVER));
    assert_eq!(
        JsonlStore::new(dir.path(), Durability::Batched)
            .unwrap()
            .group_window(),
        Some(DEFAULT_GROUP_WINDOW)
    );
    assert_eq!(store.unsynced(), 0);
    bounded(store.flush()).await.unwrap();
    for n in 0..3 {
        let id = format!("lone-{n}");
        let log = bounded(store.create(&header(&id), &[])).await.unwrap();
        bounded(log.append(&[turn(0), turn(1)])).await.unwrap();
        bounded(log.checkpoint()).await.unwrap();
        bounded(log.close()).await;
    }
    // Nothing was forced: the window is an hour and nobody asked.
    assert_eq!(store.unsynced(), 3);
    bounded(store.flush()).await.unwrap();
    assert_eq!(store.unsynced(), 0);
    for n in 0..3 {
        let loaded = store.load(&sid(&format!("lone-{n}"))).await.unwrap();
        assert_eq!(loaded.events, [turn(0), turn(1)]);
    }

    // A log's own sync forces it at once too.
    let log = bounded(store.create(&header("own"), &[turn(0)]))
        .await
        .unwrap();
    bounded(log.append(&[turn(1)])).await.unwrap();
    assert_eq!(store.unsynced(), 1);
    bounded(log.sync()).await.unwrap();
    assert_eq!(store.unsynced(), 0);
    // Nothing new: at once, without a round.
    bounded(log.sync()).await.unwrap();
    bounded(log.close()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_log_not_yet_forced_opens_again_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = batched(dir.path(), FOREVER);
    let log = store.create(&header("again"), &[]).await.unwrap();
    log.append(&[turn(0)]).await.unwrap();
    // Close does not wait for the sync; the committer holds the log.
    bounded(log.close()).await;
    assert_eq!(store.unsynced(), 1);
    assert!(matches!(
        log.append(&[turn(1)]).await,
        Err(StoreError::Closed(_))
    ));
    // The open asks for the round and then takes the log.
    let (loaded, reopened) = bounded(store.open(&sid("again"))).await.unwrap();
    assert_eq!(loaded.events, [turn(0)]);
    assert_eq!(store.unsynced(), 0);
    reopened.append(&[turn(1)]).await.unwrap();
    reopened.close().await;
    // So does a remove.
    bounded(store.remove(&sid("again"))).await.unwrap();
    assert!(!store.exists(&sid("again")).await.unwrap());
    // A live writer still makes the log busy.
    let live = store.create(&header("live"), &[]).await.unwrap();
    match bounded(store.open(&sid("live"))).await {
        Err(StoreError::Busy(_)) => {}
        other => panic!("expected Busy, got {:?}", other.map(|_| ())),
    }
    live.close().await;
}

/// Poll `future` up to `polls` times (fewer if it finishes), then drop it.
async fn poll_then_drop<F: Future>(future: F, polls: usize) {
    let mut future = Box::pin(future);
    for _ in 0..polls {
        if futures::poll!(&mut future).is_ready() {
            return;
        }
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_future_dropped_at_every_await_leaves_what_the_store_promises() {
    let dir = tempfile::tempdir().unwrap();
    let store = batched(dir.path(), FOREVER);
    for polls in 0..6 {
        // A create: the log exists only if it finished before the drop.
        let id = format!("create-{polls}");
        let created = header(&id);
        let mut create = Box::pin(store.create(&created, &[]));
        let mut done = None;
        for _ in 0..polls {
            if let Poll::Ready(result) = futures::poll!(&mut create) {
                done = Some(result.unwrap());
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(create);
        let finished = done.is_some();
        if let Some(log) = done {
            // An append, a sync and a flush, each dropped after `polls`.
            log.append(&[turn(0)]).await.unwrap();
            poll_then_drop(log.sync(), polls).await;
            poll_then_drop(store.flush(), polls).await;
            poll_then_drop(log.close(), polls).await;
        }
        let id = sid(&id);
        // Once the detached work has ended the id is free again.
        let mut reopened = None;
        until(|| {
            reopened = store.open(&id).now_or_never();
            !matches!(reopened, Some(Err(StoreError::Busy(_))) | None)
        })
        .await;
        assert_eq!(store.exists(&id).await.unwrap(), finished, "{polls}");
        match reopened.unwrap() {
            Ok((loaded, log)) => {
                assert!(finished);
                assert_eq!(loaded.events, [turn(0)], "{polls}");
                log.close().await;
            }
            Err(err) => assert!(!finished && err.code() == "SESSION_NOT_FOUND", "{err}"),
        }
    }
    // Whatever was dropped, a flush afterwards forces everything.
    bounded(store.flush()).await.unwrap();
    assert_eq!(store.unsynced(), 0);
}

/// The environment variable that makes this test binary a writer to kill.
const WRITER: &str = "DSH_BATCHED_WRITER";

/// Run as a child process: create logs and append to them under
/// `Batched`, flushing after each batch and printing what each flush
/// covered once it returned, until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_writer_until_killed() {
    let Ok(dir) = std::env::var(WRITER) else {
        return;
    };
    let store = batched(std::path::Path::new(&dir), FOREVER);
    for batch in 0u64.. {
        let writers = (0..8).map(|n| {
            let store = store.clone();
            async move {
                let id = format!("b{batch}-{n}");
                let log = store.create(&header(&id), &[]).await.unwrap();
                for seq in 0..3 {
                    log.append(&[turn(seq)]).await.unwrap();
                }
                log.close().await;
            }
        });
        futures::future::join_all(writers).await;
        store.flush().await.unwrap();
        println!("flushed {batch}");
    }
}

/// A SIGKILL keeps the page cache, so this shows that a flush returns only
/// once its batch is written, not that it was synced.
#[test]
fn a_sigkill_after_a_flush_leaves_everything_flushed_readable() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, mut lines) = spawn_self("batched_writer_until_killed", WRITER, dir.path());
    let mut flushed = None;
    while flushed.is_none_or(|batch| batch < 20) {
        let line = lines.next().expect("the writer stopped early").unwrap();
        if let Some(batch) = line.strip_prefix("flushed ") {
            flushed = Some(batch.parse::<u64>().unwrap());
        }
    }
    // SIGKILL, mid-flight: later batches may be half written.
    child.kill().unwrap();
    child.wait().unwrap();
    drop(lines);
    let flushed = flushed.unwrap();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = JsonlStore::new(dir.path(), Durability::Batched).unwrap();
        for batch in 0..=flushed {
            for n in 0..8 {
                let id = sid(&format!("b{batch}-{n}"));
                let loaded = store.load(&id).await.unwrap();
                assert_eq!(loaded.events, [turn(0), turn(1), turn(2)], "{id}");
            }
        }
        // What the kill interrupted is a whole log, a log with some of its
        // appends, or a torn header the next create of the id replaces.
        for id in store.list().await.unwrap() {
            match store.open(&id).await {
                Ok((_, log)) => log.close().await,
                Err(err) => {
                    assert_eq!(err.code(), "TORN_CREATE", "{id}: {err}");
                    let log = store.create(&header(id.as_str()), &[]).await.unwrap();
                    log.close().await;
                }
            }
        }
        store.flush().await.unwrap();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_create_that_fails_reaches_its_caller_and_poisons_nothing_else() {
    for durability in [Durability::Batched, Durability::None] {
        let dir = tempfile::tempdir().unwrap();
        let store = windowed(dir.path(), durability, FOREVER);
        // A directory where the log of `a` would go: its exclusive create
        // finds the name taken, and reading it back as a torn create fails.
        std::fs::create_dir(store.log_path(&sid("a"))).unwrap();
        let Err(err) = store.create(&header("a"), &[]).await else {
            panic!("{durability:?}: created over a directory");
        };
        let StoreError::Io { path, .. } = &err else {
            panic!("{durability:?}: expected an I/O error, got {err:?}");
        };
        assert_eq!(path, &store.log_path(&sid("a")), "{err}");
        // The id is released (the same failure again, not `Busy`), and
        // every other log of the store is untouched by it.
        let Err(again) = store.create(&header("a"), &[]).await else {
            panic!("{durability:?}: created over a directory");
        };
        assert_eq!(again.to_string(), err.to_string());
        let log = store.create(&header("b"), &[]).await.unwrap();
        log.append(&[turn(0)]).await.unwrap();
        log.checkpoint().await.unwrap();
        log.close().await;
        bounded(store.flush()).await.unwrap();
        let loaded = store.load(&sid("b")).await.unwrap();
        assert_eq!(loaded.events, [turn(0)], "{durability:?}");
    }
}
