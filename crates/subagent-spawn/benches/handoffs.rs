//! Hand-off cost of one spawn child on the in-memory store with the scripted
//! model: children started and awaited one after another (prompt, driver,
//! model, monitor, result), N = 100, 1,000 and 10,000 under one parent and
//! one runtime, so a rate that falls with N shows per-child state the
//! runtime keeps after a child is gone. Criterion reports children per
//! second (elements/s); the aim is at most 25 µs a child, flat in N.
//! The parent's side runs on a runtime worker, as a parent's tool call
//! does inside its driver task ([`on_worker`]).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dsh_core::{
    AgentFactory, CancellationToken, ContentBlock, CreateAgent, SessionHeader, SessionId,
};
use dsh_harness::{Harness, MemoryStore, Scripted, ScriptedModel};
use dsh_subagent::{ActivationSpec, Delivery, RuntimeConfig, StartRequest, SubagentRuntime};
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::bench::on_worker;

fn handoffs(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("handoff");
    group.sample_size(10);
    for n in [100u64, 1_000, 10_000] {
        group.throughput(Throughput::Elements(n));
        group.bench_with_input(BenchmarkId::new("memory/sequential", n), &n, |b, &n| {
            b.iter_custom(|iters| {
                on_worker(&runtime, async move {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        let store = Arc::new(MemoryStore::new());
                        let model = Arc::new(
                            ScriptedModel::new()
                                .without_recording()
                                .responder(|_| Scripted::Text("done".into())),
                        );
                        let harness = Harness::builder(store.clone())
                            .model(model)
                            .build()
                            .unwrap();
                        let parent = harness
                            .create(CreateAgent {
                                header: SessionHeader::new(SessionId::generate(), "/"),
                                seed: Vec::new(),
                                setup: Default::default(),
                                cancel: CancellationToken::new(),
                            })
                            .await
                            .unwrap();
                        let subagents = SubagentRuntime::new(
                            Arc::new(harness),
                            store,
                            RuntimeConfig {
                                max_live_children_per_tree: usize::MAX,
                            },
                        );
                        subagents.register(Arc::new(SpawnProvider::new())).unwrap();
                        let start = Instant::now();
                        for _ in 0..n {
                            let activation = subagents
                                .start_activation(ActivationSpec {
                                    provider: "spawn".into(),
                                    label: "bench".into(),
                                    name: None,
                                    child_id: None,
                                    cancel: CancellationToken::new(),
                                    delivery: Delivery::Caller,
                                    request: StartRequest::new(
                                        parent.agent().clone(),
                                        vec![ContentBlock::text("work")],
                                    ),
                                })
                                .await
                                .unwrap();
                            activation.result().await.unwrap();
                        }
                        spent += start.elapsed();
                        subagents.shutdown().await;
                        parent.dispose().await;
                    }
                    spent
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, handoffs);
criterion_main!(benches);
