//! Session store benchmarks: append throughput of the JSONL store under each
//! durability setting and of the memory store, and durable log creation:
//! the fsync floors (a bare exclusive create, one write and `fdatasync`, in
//! a loop; and the same plus the directory's `fsync`, the least any store
//! pays for a create that survives a power loss, what `TurnBoundary`
//! promises), the store's create under `TurnBoundary` (which syncs the file
//! and its directory; and the temporary-file-and-link path a seeded create
//! takes, every create's path before), and a durable child's log (create, a
//! turn's events, checkpoint, close) under `TurnBoundary`, `Grouped` and
//! `Batched`, one after another and many at once; a `Batched` row ends
//! with the store's `flush`, so it counts children on stable storage; the
//! child rows run on a runtime worker ([`on_worker`]), where a child's
//! driver task writes its log. Replay is in `replay.rs`. They
//! write only under fresh directories of
//! [`dsh_test_support::bench::store_dir`], and delete nothing (creating
//! files soon after deleting many would measure the file system's
//! allocator, here and in the benches that run next).

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark code")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_core::content::ContentBlock;
use dsh_core::session::{AssistantEntry, EventPayload, SessionEvent, SessionHeader};
use dsh_core::{Durability, SessionId, SessionStore};
use dsh_harness::store::{JsonlStore, MemoryStore};
use dsh_test_support::bench::{ASSISTANT_TEXT, mixed_event as mixed, on_worker};
use tokio::runtime::Runtime;

/// Events per turn in the append benchmarks: a checkpoint follows each turn.
const TURN: u64 = 12;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// A fresh directory for one group's logs, never deleted by the bench
/// (see [`dsh_test_support::bench::store_dir`]).
fn scratch_dir(name: &str) -> PathBuf {
    dsh_test_support::bench::store_dir(&format!("store-{name}"))
}

fn header(id: &SessionId) -> SessionHeader {
    SessionHeader::new(id.clone(), "/work/project")
}

fn event(seq: u64, payload: EventPayload) -> SessionEvent {
    SessionEvent {
        seq,
        time: 1_700_000_000_000 + seq * 37,
        payload,
    }
}

/// The event appended one per call: an assistant message of ~200 bytes.
fn assistant(seq: u64) -> SessionEvent {
    event(
        seq,
        EventPayload::AssistantMessage(AssistantEntry {
            content: vec![ContentBlock::text(ASSISTANT_TEXT)],
        }),
    )
}

fn append(c: &mut Criterion) {
    let rt = runtime();
    let root = scratch_dir("append");
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Elements(1));
    for (name, durability) in [
        ("none", Durability::None),
        ("turn-boundary", Durability::TurnBoundary),
        ("every-event", Durability::EveryEvent),
    ] {
        if durability == Durability::EveryEvent {
            group.sample_size(10);
            group.warm_up_time(Duration::from_millis(500));
        }
        let store = JsonlStore::new(root.join(name), durability).unwrap();
        let mut logs = 0u64;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                // A fresh log per sample keeps the files small.
                logs += 1;
                let id = SessionId::new(format!("bench-{logs}")).unwrap();
                let log = rt.block_on(store.create(&header(&id), &[])).unwrap();
                let mut batch = [assistant(0)];
                let start = Instant::now();
                for seq in 0..iters {
                    batch[0].seq = seq;
                    rt.block_on(log.append(&batch)).unwrap();
                    if seq % TURN == TURN - 1 {
                        rt.block_on(log.checkpoint()).unwrap();
                    }
                }
                let elapsed = start.elapsed();
                drop(log);
                elapsed
            });
        });
    }
    group.finish();
}

/// The events of one short turn of a child, after its create: what a
/// one-shot child writes before its turn-end checkpoint.
fn child_turn() -> Vec<SessionEvent> {
    (0..13).map(mixed).collect()
}

/// One durable child's log: create, a turn, the turn-end checkpoint, close.
async fn durable_child(store: &JsonlStore, id: SessionId, turn: &[SessionEvent]) {
    // Under `Batched` none of these waits for a sync; the row's flush does.
    let log = store.create(&header(&id), &[]).await.unwrap();
    log.append(turn).await.unwrap();
    log.checkpoint().await.unwrap();
    log.close().await;
}

fn create(c: &mut Criterion) {
    const CHILDREN: u64 = 1_000;
    let root = scratch_dir("create");
    let mut group = c.benchmark_group("create");
    group.sample_size(10);
    let header_line = {
        let mut line = serde_json::to_vec(&header(&SessionId::new("floor-0").unwrap())).unwrap();
        line.push(b'\n');
        line
    };
    let mut round = 0u64;
    let mut fresh = |name: &str| {
        round += 1;
        let dir = root.join(format!("{name}-{round}"));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    };

    // The floors: what any durable create costs on this disk, with the
    // file alone forced, and (the honest floor of `TurnBoundary`'s
    // promise) with its directory entry forced after it.
    group.throughput(Throughput::Elements(1));
    for (name, dir_sync) in [
        ("floor/create-fdatasync", false),
        ("floor/create-fdatasync-dirsync", true),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let dir = fresh("floor");
                let start = Instant::now();
                for n in 0..iters {
                    let mut file = std::fs::OpenOptions::new()
                        .append(true)
                        .create_new(true)
                        .open(dir.join(format!("floor-{n}.jsonl")))
                        .unwrap();
                    std::io::Write::write_all(&mut file, &header_line).unwrap();
                    file.sync_data().unwrap();
                    if dir_sync {
                        std::fs::File::open(&dir).unwrap().sync_all().unwrap();
                    }
                }
                start.elapsed()
            });
        });
    }
    let rt = runtime();
    group.bench_function("store/turn-boundary", |b| {
        b.iter_custom(|iters| {
            let store = JsonlStore::new(fresh("store"), Durability::TurnBoundary).unwrap();
            let start = Instant::now();
            for n in 0..iters {
                let id = SessionId::new(format!("c-{n}")).unwrap();
                let log = rt.block_on(store.create(&header(&id), &[])).unwrap();
                drop(log);
            }
            start.elapsed()
        });
    });
    // The path every create took before in-place creation (a seeded create
    // still takes it): temporary file, fsync, link, unlink, directory fsync.
    group.bench_function("store/turn-boundary-temp-link", |b| {
        b.iter_custom(|iters| {
            let store = JsonlStore::new(fresh("link"), Durability::TurnBoundary).unwrap();
            let seed = [mixed(0)];
            let start = Instant::now();
            for n in 0..iters {
                let id = SessionId::new(format!("c-{n}")).unwrap();
                let log = rt.block_on(store.create(&header(&id), &seed)).unwrap();
                drop(log);
            }
            start.elapsed()
        });
    });

    // A durable child's log, one after another and all at once.
    let turn = child_turn();
    let threads = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    group.throughput(Throughput::Elements(CHILDREN));
    for (name, durability) in [
        ("turn-boundary", Durability::TurnBoundary),
        ("grouped", Durability::Grouped),
        ("batched", Durability::Batched),
    ] {
        for mode in ["sequential", "concurrent"] {
            group.bench_function(format!("child/{name}-{mode}/{CHILDREN}"), |b| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        let store = JsonlStore::new(fresh(name), durability).unwrap();
                        let ids =
                            (0..CHILDREN).map(|n| SessionId::new(format!("child-{n}")).unwrap());
                        let turn = turn.clone();
                        // On a worker, as a child's driver task writes.
                        spent += on_worker(&threads, async move {
                            let start = Instant::now();
                            if mode == "sequential" {
                                for id in ids {
                                    durable_child(&store, id, &turn).await;
                                }
                            } else {
                                let children = ids.map(|id| {
                                    let (store, turn) = (store.clone(), turn.clone());
                                    tokio::spawn(
                                        async move { durable_child(&store, id, &turn).await },
                                    )
                                });
                                for child in futures::future::join_all(children).await {
                                    child.unwrap();
                                }
                            }
                            // Every child durable before the clock stops.
                            store.flush().await.unwrap();
                            start.elapsed()
                        });
                    }
                    spent
                });
            });
        }
    }
    group.finish();
}

fn memory(c: &mut Criterion) {
    let rt = runtime();
    let store = MemoryStore::new();
    let mut logs = 0u64;
    let mut group = c.benchmark_group("memory");
    group.throughput(Throughput::Elements(1));
    group.bench_function("append", |b| {
        b.iter_custom(|iters| {
            logs += 1;
            let id = SessionId::new(format!("bench-{logs}")).unwrap();
            let log = rt.block_on(store.create(&header(&id), &[])).unwrap();
            let mut batch = [assistant(0)];
            let start = Instant::now();
            for seq in 0..iters {
                batch[0].seq = seq;
                rt.block_on(log.append(&batch)).unwrap();
            }
            let elapsed = start.elapsed();
            drop(log);
            rt.block_on(store.remove(&id)).unwrap();
            elapsed
        });
    });
    group.finish();
}

criterion_group!(benches, append, memory, create);
criterion_main!(benches);
