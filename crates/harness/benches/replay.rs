//! Replay benchmarks of the JSONL store over a 100,000-event log of
//! realistic turns (`dsh_test_support::bench::mixed_event`):
//!
//! - `replay/load/100000`: `SessionStore::load` of the plain log, bytes of
//!   JSONL per second (aim: ≥ 600 MB/s on 2 cores);
//! - `replay/load-sealed/100000`: the same log sealed (zstd), bytes of
//!   decompressed JSONL per second (aim: ≥ 300 MB/s);
//! - `replay/cold-resume/100000`: `Harness::resume` of the log until a
//!   follow-up is accepted (aim: ≤ 20 ms); the log is cut back to its
//!   length after each iteration, untimed, so every resume reads the same
//!   log.
//!
//! It also records bytes per event on disk, plain and sealed
//! (`dsh_test_support::bench::record`). Files go under a fresh directory in
//! the system temporary directory, removed when done.

#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "benchmark code"
)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_core::session::SessionEvent;
use dsh_core::{
    AgentFactory, CancellationToken, Durability, ResumeAgent, SessionHeader, SessionId,
    SessionStore, UserMessage,
};
use dsh_harness::store::JsonlStore;
use dsh_harness::{Harness, Scripted, ScriptedModel};
use dsh_test_support::bench::{Measurement, mixed_event, record};
use tokio::runtime::Runtime;

const EVENTS: u64 = 100_000;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Write the 100,000-event log of `id` into `store`; its size in bytes.
fn write_log(rt: &Runtime, store: &JsonlStore, id: &SessionId) -> u64 {
    let header = SessionHeader::new(id.clone(), "/work/project");
    let log = rt.block_on(store.create(&header, &[])).unwrap();
    for chunk in (0..EVENTS).collect::<Vec<_>>().chunks(1_000) {
        let batch: Vec<SessionEvent> = chunk.iter().map(|&seq| mixed_event(seq)).collect();
        rt.block_on(log.append(&batch)).unwrap();
    }
    rt.block_on(log.close());
    drop(log);
    std::fs::metadata(store.log_path(id)).unwrap().len()
}

fn per_event(workload: &str, bytes: u64) {
    record(&Measurement {
        workload,
        n: Some(EVENTS),
        value: bytes as f64 / EVENTS as f64,
        unit: "B/event",
    })
    .unwrap();
}

/// Time `load` of `id`, `iters` times; each result is freed untimed.
fn time_loads(rt: &Runtime, store: &JsonlStore, id: &SessionId, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let start = Instant::now();
        let loaded = rt.block_on(store.load(id)).unwrap();
        total += start.elapsed();
        assert_eq!(loaded.events.len() as u64, EVENTS);
        drop(black_box(loaded));
    }
    total
}

fn replay(c: &mut Criterion) {
    let rt = runtime();
    let root = tempfile::Builder::new()
        .prefix("dsh-replay-bench-")
        .tempdir()
        .unwrap();
    let store = JsonlStore::new(root.path(), Durability::None).unwrap();
    let plain = SessionId::new("plain").unwrap();
    let sealed = SessionId::new("sealed").unwrap();
    let size = write_log(&rt, &store, &plain);
    let sealed_size = write_log(&rt, &store, &sealed);
    let seal = rt.block_on(store.seal(&sealed)).unwrap();
    assert_eq!(seal.plain_bytes, sealed_size);
    per_event("replay log on disk, plain JSONL", size);
    per_event("replay log on disk, sealed (zstd)", seal.sealed_bytes);

    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Bytes(size));
    group.sample_size(20);
    group.bench_function(format!("load/{EVENTS}"), |b| {
        b.iter_custom(|iters| time_loads(&rt, &store, &plain, iters));
    });
    group.throughput(Throughput::Bytes(sealed_size));
    group.bench_function(format!("load-sealed/{EVENTS}"), |b| {
        b.iter_custom(|iters| time_loads(&rt, &store, &sealed, iters));
    });
    group.finish();

    let model = ScriptedModel::new()
        .without_recording()
        .responder(|_| Scripted::Hang);
    let harness = Harness::builder(Arc::new(store.clone()))
        .model(Arc::new(model))
        .build()
        .unwrap();
    let path = store.log_path(&plain);
    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    group.bench_function(format!("cold-resume/{EVENTS}"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let handle = rt
                    .block_on(harness.resume(ResumeAgent {
                        id: plain.clone(),
                        setup: Default::default(),
                        cancel: CancellationToken::new(),
                    }))
                    .unwrap();
                rt.block_on(handle.agent().followup(UserMessage::user_text("go")))
                    .unwrap();
                total += start.elapsed();
                rt.block_on(handle.dispose());
                // Untimed: back to the log as written, for the next resume.
                let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                file.set_len(size).unwrap();
            }
            total
        });
    });
    group.finish();
    rt.block_on(harness.shutdown());
}

criterion_group!(benches, replay);
criterion_main!(benches);
