//! Session store benchmarks: append throughput of the JSONL store under each
//! durability setting and of the memory store (replay is in `replay.rs`).
//! They write only under a fresh directory in the system temporary
//! directory, which they remove when done.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark code")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_core::content::ContentBlock;
use dsh_core::session::{AssistantEntry, EventPayload, SessionEvent, SessionHeader};
use dsh_core::{Durability, SessionId, SessionStore};
use dsh_harness::store::{JsonlStore, MemoryStore};
use dsh_test_support::bench::ASSISTANT_TEXT;
use tokio::runtime::Runtime;

/// Events per turn in the append benchmarks: a checkpoint follows each turn.
const TURN: u64 = 12;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn scratch_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dsh-store-bench-{}-{name}", std::process::id()))
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
                rt.block_on(store.remove(&id)).unwrap();
                elapsed
            });
        });
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&root);
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

criterion_group!(benches, append, memory);
criterion_main!(benches);
