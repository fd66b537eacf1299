//! Start-and-settle throughput of spawn children with the scripted model:
//! N children started one after another and all at once (N = 100, 1,000,
//! 10,000), on the in-memory store and the JSONL store without fsync, plus
//! fork seeding cost against the parent log's length. Criterion reports
//! children per second (elements/s).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dsh_core::{
    Agent, AgentFactory, CancellationToken, ContentBlock, CreateAgent, Durability, SessionHeader,
    SessionId, SessionStore, UserMessage,
};
use dsh_harness::{Harness, JsonlStore, MemoryStore, Scripted, ScriptedModel};
use dsh_subagent::{
    ActivationSpec, Delivery, RuntimeConfig, StartRequest, SubagentProvider, SubagentRuntime,
};
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;

struct World {
    runtime: SubagentRuntime,
    parent: Arc<dyn Agent>,
    _dir: Option<tempfile::TempDir>,
}

async fn world(jsonl: bool, provider: Arc<dyn SubagentProvider>) -> World {
    let (store, dir): (Arc<dyn SessionStore>, _) = if jsonl {
        let dir = tempfile::tempdir().unwrap();
        (
            Arc::new(JsonlStore::new(dir.path(), Durability::None).unwrap()),
            Some(dir),
        )
    } else {
        (Arc::new(MemoryStore::new()), None)
    };
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
            header: SessionHeader::new(SessionId::generate(), std::env::temp_dir()),
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap()
        .agent()
        .clone();
    let runtime = SubagentRuntime::new(
        Arc::new(harness),
        store,
        RuntimeConfig {
            max_live_children_per_tree: usize::MAX,
        },
    );
    runtime.register(provider).unwrap();
    World {
        runtime,
        parent,
        _dir: dir,
    }
}

fn spec(world: &World, provider: &str) -> ActivationSpec {
    ActivationSpec {
        provider: provider.into(),
        label: "bench".into(),
        name: None,
        child_id: None,
        cancel: CancellationToken::new(),
        delivery: Delivery::Caller,
        request: StartRequest::new(world.parent.clone(), vec![ContentBlock::text("work")]),
    }
}

async fn run_children(world: &World, n: usize, concurrent: bool) {
    if concurrent {
        let starts = (0..n).map(|_| async {
            let activation = world
                .runtime
                .start_activation(spec(world, "spawn"))
                .await
                .unwrap();
            activation.result().await.unwrap();
        });
        futures::future::join_all(starts).await;
    } else {
        for _ in 0..n {
            let activation = world
                .runtime
                .start_activation(spec(world, "spawn"))
                .await
                .unwrap();
            activation.result().await.unwrap();
        }
    }
}

fn start_and_settle(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("spawn");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for store in ["memory", "jsonl"] {
        for mode in ["sequential", "concurrent"] {
            for n in [100usize, 1_000, 10_000] {
                if store == "jsonl" && n == 10_000 && mode == "sequential" {
                    // Same per-child cost as 1,000; skip to keep the run short.
                    continue;
                }
                group.throughput(Throughput::Elements(n as u64));
                group.bench_with_input(
                    BenchmarkId::new(format!("{store}/{mode}"), n),
                    &n,
                    |b, &n| {
                        b.iter_custom(|iters| {
                            runtime.block_on(async {
                                let mut spent = Duration::ZERO;
                                for _ in 0..iters {
                                    // A fresh parent each time: its catalog grows with every child.
                                    let world =
                                        world(store == "jsonl", Arc::new(SpawnProvider::new()))
                                            .await;
                                    let start = Instant::now();
                                    run_children(&world, n, mode == "concurrent").await;
                                    spent += start.elapsed();
                                    world.runtime.shutdown().await;
                                }
                                spent
                            })
                        });
                    },
                );
            }
        }
    }
    group.finish();
}

fn fork_seeding(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("fork-seed");
    group.sample_size(10);
    for turns in [10usize, 100, 1_000] {
        let world = runtime.block_on(async {
            let world = world(false, Arc::new(ForkProvider::new())).await;
            for _ in 0..turns {
                world
                    .parent
                    .followup(UserMessage::user_text("hello"))
                    .await
                    .unwrap();
                world.parent.wait_idle().await;
            }
            world
        });
        let events = world.parent.events().len() as u64;
        group.throughput(Throughput::Elements(events));
        group.bench_with_input(
            BenchmarkId::new("parent-events", events),
            &events,
            |b, _| {
                b.iter(|| {
                    runtime.block_on(async {
                        let activation = world
                            .runtime
                            .start_activation(spec(&world, "fork"))
                            .await
                            .unwrap();
                        activation.result().await.unwrap();
                    })
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, start_and_settle, fork_seeding);
criterion_main!(benches);
