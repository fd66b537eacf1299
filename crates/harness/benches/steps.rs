//! Per-step cost of the reference loop against the length of the history:
//! one agent whose log starts with 10 or 10,000 prior messages (completed
//! turns of a user message and an answer) runs one-step turns (accept,
//! claim, request, reply, turn end) on the in-memory store. The model
//! answers `ok` without reading the request, so the number is the loop's
//! own overhead: the aim is the row at 10,000 within 1.5x of the
//! row at 10 (`step/history/10000` against `step/history/10`). Each agent's
//! first turn, which projects the transcript from the log once per
//! activation (a resume's cost, not a step's), and a second that wakes the
//! runtime from the setup's idle, are run before the clock starts. The caller
//! runs on a runtime worker ([`on_worker`]), as a parent's driver does.
//!
//! Each agent's log is removed from the store once the agent is disposed,
//! off the clock. Criterion runs about thirty times as many agents for the
//! row at 10 as for the row at 10,000, and a store that kept every finished
//! agent's log grew the process by each of them, so the two rows measured
//! different heaps, not different histories: on one build, a step at 10
//! read 10.7 µs with the logs kept and 4.8 µs with them removed.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dsh_core::{
    AgentFactory, AgentHandle, CancellationToken, CreateAgent, FinishReason, Model, ModelError,
    ModelEvent, ModelRequest, ModelStream, SessionEvent, SessionHeader, SessionId, SessionStore,
    UserMessage,
};
use dsh_harness::{Harness, MemoryStore};
use dsh_test_support::bench::on_worker;
use dsh_test_support::logs::conversation;
use futures::StreamExt;

/// Turns per agent before it is replaced, so the history stays near its
/// nominal length.
const TURNS_PER_AGENT: u64 = 50;

/// A model whose cost does not depend on the request: it drops it and
/// answers `ok`.
struct Constant;

#[async_trait]
impl Model for Constant {
    fn name(&self) -> &str {
        "constant"
    }

    async fn stream(
        &self,
        request: ModelRequest,
        _cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        drop(request);
        Ok(futures::stream::iter([
            Ok(ModelEvent::TextDelta("ok".into())),
            Ok(ModelEvent::Finish(FinishReason::EndTurn)),
        ])
        .boxed())
    }
}

async fn fresh(harness: &Harness, seed: Vec<SessionEvent>) -> AgentHandle {
    harness
        .create(CreateAgent {
            header: SessionHeader::new(SessionId::generate(), "/"),
            seed,
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap()
}

fn steps(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = Arc::new(MemoryStore::new());
    let harness = Arc::new(
        Harness::builder(store.clone())
            .model(Arc::new(Constant))
            .build()
            .unwrap(),
    );
    let mut group = c.benchmark_group("step");
    group.throughput(Throughput::Elements(1));
    for prior in [10u64, 10_000] {
        let seed = conversation(prior);
        group.bench_with_input(BenchmarkId::new("history", prior), &seed, |b, seed| {
            b.iter_custom(|iters| {
                let (harness, store, seed) = (harness.clone(), store.clone(), seed.clone());
                on_worker(&runtime, async move {
                    let mut spent = Duration::ZERO;
                    let mut done = 0;
                    while done < iters {
                        let handle = fresh(&harness, seed.clone()).await;
                        let agent = handle.agent().clone();
                        // The activation's first turn projects the
                        // transcript from the log once (as a resume does);
                        // the steps after it are what a long session pays.
                        // The second absorbs the first step after the
                        // untimed setup, which took 100 µs-1 ms on the
                        // clock here (longer after a longer setup) with
                        // only 8k more instructions than the steps after
                        // it, and 21 µs on a current-thread runtime: most
                        // likely the wake-up of the worker parked during
                        // the setup, not a step's cost. The steps after it
                        // run the same instructions at either length
                        // (callgrind: 38.9k at 10, 36.5k at 10,000).
                        for _ in 0..2 {
                            agent.followup(UserMessage::user_text("go")).await.unwrap();
                            agent.wait_idle().await;
                        }
                        let batch = TURNS_PER_AGENT.min(iters - done);
                        let start = Instant::now();
                        for _ in 0..batch {
                            agent.followup(UserMessage::user_text("go")).await.unwrap();
                            agent.wait_idle().await;
                        }
                        spent += start.elapsed();
                        done += batch;
                        let id = agent.id().clone();
                        handle.dispose().await;
                        store.remove(&id).await.unwrap();
                    }
                    spent
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, steps);
criterion_main!(benches);
