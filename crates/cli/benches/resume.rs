//! The replay workload of the harness's `replay` bench (a 100,000-event
//! log: its load, and its cold resume until a follow-up is accepted,
//! `dsh_test_support::replay`) under the allocator the `dsh` binary ships
//! with, so that the table shows what `dsh resume`, `dsh show` and a
//! message to a cold child pay, beside what a library user's default
//! allocator gives:
//!
//! - `dsh-alloc/load/100000`: bytes of JSONL loaded per second;
//! - `dsh-alloc/cold-resume/100000`: time until a follow-up is accepted.

#![allow(missing_docs, clippy::unwrap_used, reason = "benchmark code")]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_test_support::replay::{
    EVENTS, ReplayStore, resume_harness, runtime, time_cold_resumes, time_loads,
};

// As in `src/main.rs`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn resume(c: &mut Criterion) {
    let rt = runtime();
    let replay = ReplayStore::new("dsh-resume-bench-");
    let log = replay.write(&rt, "plain");
    let harness = resume_harness(&replay);
    let mut group = c.benchmark_group("dsh-alloc");
    group.sample_size(20);
    group.throughput(Throughput::Bytes(log.size));
    group.bench_function(format!("load/{EVENTS}"), |b| {
        b.iter_custom(|iters| time_loads(&rt, &replay, &log, iters));
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function(format!("cold-resume/{EVENTS}"), |b| {
        b.iter_custom(|iters| time_cold_resumes(&rt, &harness, &log, iters));
    });
    group.finish();
    rt.block_on(harness.shutdown());
}

criterion_group!(benches, resume);
criterion_main!(benches);
