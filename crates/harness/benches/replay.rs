//! Replay benchmarks of the JSONL store over a 100,000-event log of
//! realistic turns (`dsh_test_support::replay`, the workload the `dsh`
//! crate's `resume` bench also runs, there under the allocator `dsh` ships
//! with; here it is the system allocator, a library user's default):
//!
//! - `replay/load/100000`: `SessionStore::load` of the plain log, bytes of
//!   JSONL per second (aim: ≥ 600 MB/s on 2 cores);
//! - `replay/cold-resume/100000`: `Harness::resume` of the log until a
//!   follow-up is accepted (aim: ≤ 20 ms); the log is cut back to its
//!   length after each iteration, untimed, so every resume reads the same
//!   log.
//!
//! It also records bytes per event on disk
//! (`dsh_test_support::bench::record`). Files go under a fresh directory in
//! the system temporary directory, removed when done.

#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "benchmark code"
)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_test_support::bench::{Measurement, record};
use dsh_test_support::replay::{
    EVENTS, ReplayStore, resume_harness, runtime, time_cold_resumes, time_loads,
};

fn per_event(workload: &str, bytes: u64) {
    record(&Measurement {
        workload,
        n: Some(EVENTS),
        value: bytes as f64 / EVENTS as f64,
        unit: "B/event",
    })
    .unwrap();
}

fn replay(c: &mut Criterion) {
    let rt = runtime();
    let replay = ReplayStore::new("dsh-replay-bench-");
    let plain = replay.write(&rt, "plain");
    per_event("replay log on disk, plain JSONL", plain.size);

    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Bytes(plain.size));
    group.sample_size(20);
    group.bench_function(format!("load/{EVENTS}"), |b| {
        b.iter_custom(|iters| time_loads(&rt, &replay, &plain, iters));
    });
    group.finish();

    let harness = resume_harness(&replay);
    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    group.bench_function(format!("cold-resume/{EVENTS}"), |b| {
        b.iter_custom(|iters| time_cold_resumes(&rt, &harness, &plain, iters));
    });
    group.finish();
    rt.block_on(harness.shutdown());
}

criterion_group!(benches, replay);
criterion_main!(benches);
