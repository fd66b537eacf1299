//! `Durability::Grouped` on the JSONL store: creates and checkpoints return
//! only after the committer's round that forces them, a lone writer is
//! never held for the window while a crowd shares rounds, a dropped future
//! leaves what the store promises (a create no log, a checkpoint a log held
//! until its sync has run), a process killed at any moment between a write
//! and its sync loses only what was never acknowledged, and the store
//! raises the soft open-file limit so that many live logs fit under a low
//! one.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod store_support;

use std::process::Command;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use dsh_core::{Durability, SessionId, SessionLog, SessionStore};
use dsh_harness::store::JsonlStore;
use dsh_harness::store::jsonl::DEFAULT_GROUP_WINDOW;
use dsh_test_support::skip_or_fail;
use dsh_test_support::wait::{bounded, until};
use futures::FutureExt;

use store_support::{FOREVER, header, sid, spawn_self, turn, windowed};

fn grouped(dir: &std::path::Path, window: Duration) -> JsonlStore {
    windowed(dir, Durability::Grouped, window)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_writer_is_synced_at_once_and_what_it_was_told_is_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = grouped(dir.path(), FOREVER);
    assert_eq!(store.group_window(), Some(FOREVER));
    assert_eq!(
        JsonlStore::new(dir.path(), Durability::Grouped)
            .unwrap()
            .group_window(),
        Some(DEFAULT_GROUP_WINDOW)
    );
    for n in 0..5 {
        let id = format!("lone-{n}");
        // One writer at a time: if a round lingered for company, the
        // window (an hour) would outlast `bounded`.
        let log = bounded(store.create(&header(&id), &[])).await.unwrap();
        bounded(log.append(&[turn(0), turn(1)])).await.unwrap();
        bounded(log.checkpoint()).await.unwrap();
        bounded(log.close()).await;
        let loaded = store.load(&sid(&id)).await.unwrap();
        assert_eq!(loaded.events, [turn(0), turn(1)]);
    }
    // A seeded create (temporary file and link) is grouped too.
    let log = bounded(store.create(&header("seeded"), &[turn(0)]))
        .await
        .unwrap();
    bounded(log.checkpoint()).await.unwrap();
    bounded(log.close()).await;
    assert_eq!(store.load(&sid("seeded")).await.unwrap().events, [turn(0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_shares_rounds_and_each_round_closes_when_arrivals_stop() {
    let dir = tempfile::tempdir().unwrap();
    let store = grouped(dir.path(), FOREVER);
    let writers = (0..64).map(|n| {
        let store = store.clone();
        tokio::spawn(async move {
            let id = format!("crowd-{n}");
            let log = store.create(&header(&id), &[]).await.unwrap();
            log.append(&[turn(0)]).await.unwrap();
            log.checkpoint().await.unwrap();
            log.close().await;
        })
    });
    // Lingering for the whole window would outlast `bounded`.
    for writer in bounded(futures::future::join_all(writers)).await {
        writer.unwrap();
    }
    let ids = store.list().await.unwrap();
    assert_eq!(ids.len(), 64);
    for result in store.load_many(&ids).await {
        assert_eq!(result.unwrap().events, [turn(0)]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_grouped_create_leaves_no_log_and_a_dropped_checkpoint_holds_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = grouped(dir.path(), Duration::ZERO);
    // Dropped at its first await, and at every later one.
    for polls in 0..6 {
        let id = format!("dropped-{polls}");
        let created = header(&id);
        let mut create = Box::pin(store.create(&created, &[]));
        let mut done = false;
        for _ in 0..polls {
            if let Poll::Ready(result) = futures::poll!(&mut create) {
                result.unwrap().close().await;
                done = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(create);
        let id = sid(&id);
        // Once the detached work has ended the id is free again, and the
        // log exists only if the create finished before the drop.
        let mut reopened = None;
        until(|| {
            reopened = store.open(&id).now_or_never();
            !matches!(reopened, Some(Err(dsh_core::StoreError::Busy(_))) | None)
        })
        .await;
        let (exists, opened) = (store.exists(&id).await.unwrap(), reopened.unwrap());
        assert_eq!(exists, done, "after {polls} polls");
        match opened {
            Ok((_, log)) => {
                assert!(done);
                log.close().await;
            }
            Err(err) => assert!(!done && err.code() == "SESSION_NOT_FOUND", "{err}"),
        }
    }

    let log = store.create(&header("held"), &[]).await.unwrap();
    log.append(&[turn(0)]).await.unwrap();
    let mut checkpoint = Box::pin(log.checkpoint());
    let _ = futures::poll!(&mut checkpoint);
    drop(checkpoint);
    // Closed means openable: close waits for the detached sync.
    bounded(log.close()).await;
    let (loaded, reopened) = store.open(&sid("held")).await.unwrap();
    assert_eq!(loaded.events, [turn(0)]);
    reopened.close().await;
}

/// The environment variable that makes this test binary a writer to kill.
const WRITER: &str = "DSH_GROUP_COMMIT_WRITER";

/// Run as a child process: create logs and append to them under
/// `Grouped`, printing each write once it was acknowledged, until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_writer_until_killed() {
    let Ok(dir) = std::env::var(WRITER) else {
        return;
    };
    let store = grouped(std::path::Path::new(&dir), Duration::from_millis(2));
    let writers = (0..4).map(|lane| {
        let store = store.clone();
        tokio::spawn(async move {
            for n in 0u64.. {
                let id = format!("w{lane}-{n}");
                let log: Arc<dyn SessionLog> = store.create(&header(&id), &[]).await.unwrap();
                println!("created {id}");
                for seq in 0..3 {
                    log.append(&[turn(seq)]).await.unwrap();
                    log.checkpoint().await.unwrap();
                    println!("synced {id} {}", seq + 1);
                }
                log.close().await;
            }
        })
    });
    futures::future::join_all(writers).await;
}

/// A SIGKILL keeps the page cache, so this shows that a write is on its
/// way to the file before it is acknowledged, not that it was synced.
#[test]
fn a_sigkill_mid_flight_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, mut lines) = spawn_self("grouped_writer_until_killed", WRITER, dir.path());
    let mut acked: std::collections::HashMap<String, usize> = Default::default();
    let mut seen = 0;
    // Kill it mid-flight, once it has acknowledged a few hundred writes.
    while seen < 400 {
        let line = lines.next().expect("the writer stopped early").unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["created", id] => {
                acked.insert((*id).to_owned(), 0);
            }
            ["synced", id, n] => {
                acked.insert((*id).to_owned(), n.parse().unwrap());
            }
            _ => continue,
        }
        seen += 1;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    drop(lines);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = JsonlStore::new(dir.path(), Durability::Grouped).unwrap();
        let ids = store.list().await.unwrap();
        for (id, events) in &acked {
            let id = SessionId::new(id.as_str()).unwrap();
            assert!(ids.contains(&id), "acknowledged {id} is gone");
            let (loaded, log) = store.open(&id).await.unwrap();
            assert!(
                loaded.events.len() >= *events,
                "{id}: {} events, {events} acknowledged",
                loaded.events.len()
            );
            log.close().await;
        }
        for id in ids.iter().filter(|id| !acked.contains_key(id.as_str())) {
            // A create the kill interrupted: a whole log, or a torn header
            // that the next create of the id replaces.
            match store.open(id).await {
                Ok((_, log)) => log.close().await,
                Err(err) => {
                    assert_eq!(err.code(), "TORN_CREATE", "{id}: {err}");
                    let log = store.create(&header(id.as_str()), &[]).await.unwrap();
                    log.close().await;
                }
            }
        }
    });
}

/// The environment variable that makes this test binary the many-logs child.
const MANY: &str = "DSH_GROUP_COMMIT_MANY_LOGS";

/// Run as a child process: with a soft open-file limit of 64, keep 500
/// logs open at once.
#[tokio::test]
async fn many_live_logs_under_a_low_soft_limit() {
    let Ok(dir) = std::env::var(MANY) else {
        return;
    };
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(64),
            maximum: limit.maximum,
        },
    )
    .unwrap();
    let store = JsonlStore::new(std::path::Path::new(&dir), Durability::None).unwrap();
    let mut logs = Vec::new();
    for n in 0..500 {
        let log = store
            .create(&header(&format!("live-{n}")), &[])
            .await
            .unwrap_or_else(|err| panic!("log {n}: {err}"));
        log.append(&[turn(0)]).await.unwrap();
        logs.push(log);
    }
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    println!("live logs: {} soft limit: {soft:?}", logs.len());
}

#[test]
fn the_store_raises_a_low_soft_open_file_limit_so_many_logs_stay_open() {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
    if hard.is_some_and(|hard| hard < 600) {
        // The machine itself allows fewer descriptors; nothing to show.
        skip_or_fail("the hard open-file limit is below 600");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "many_live_logs_under_a_low_soft_limit",
            "--nocapture",
        ])
        .args(["--test-threads", "1"])
        .env(MANY, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!("live logs: 500 soft limit: {hard:?}")),
        "{stdout}"
    );
}
