//! Start-and-settle throughput of spawn children with the scripted model:
//! N children started one after another and all at once (N = 100, 1,000,
//! 10,000), on the in-memory store and the JSONL store without fsync
//! (`jsonl`), durable under `TurnBoundary` (`jsonl-turn-boundary`) and
//! durable with group commit (`jsonl-grouped`) and with write-behind group
//! commit (`jsonl-batched`, whose rows end with the store's `flush`, so
//! that every child counted is on stable storage), plus fork seeding cost
//! against the parent log's length. Criterion reports children per second
//! (elements/s). Every iteration gets a fresh store directory, and none is
//! deleted, not even when the bench ends (see
//! [`dsh_test_support::bench::store_dir`]): creating files soon after
//! deleting many costs this ext4 ten times more, which would measure the
//! allocator. The
//! parent's side runs on a runtime worker, as a parent's tool call does
//! inside its driver task ([`on_worker`]).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
use dsh_test_support::bench::on_worker;

struct World {
    runtime: SubagentRuntime,
    parent: Arc<dyn Agent>,
    store: Arc<dyn SessionStore>,
}

/// Where a world keeps its logs: in memory, or in a fresh directory under
/// `root` (kept until the bench ends) with this durability.
#[derive(Clone, Copy)]
enum Backing<'a> {
    Memory,
    Jsonl(&'a Path, Durability),
}

impl Backing<'_> {
    /// The backing a row of the table names.
    fn of<'a>(store: &str, root: &'a Path) -> Backing<'a> {
        match store {
            "memory" => Backing::Memory,
            "jsonl" => Backing::Jsonl(root, Durability::None),
            "jsonl-turn-boundary" => Backing::Jsonl(root, Durability::TurnBoundary),
            "jsonl-grouped" => Backing::Jsonl(root, Durability::Grouped),
            "jsonl-batched" => Backing::Jsonl(root, Durability::Batched),
            other => panic!("no store {other}"),
        }
    }
}

async fn world(backing: Backing<'_>, provider: Arc<dyn SubagentProvider>) -> World {
    static FRESH: AtomicU64 = AtomicU64::new(0);
    let store: Arc<dyn SessionStore> = match backing {
        Backing::Memory => Arc::new(MemoryStore::new()),
        Backing::Jsonl(root, durability) => {
            let dir = root.join(FRESH.fetch_add(1, Ordering::Relaxed).to_string());
            Arc::new(JsonlStore::new(dir, durability).unwrap())
        }
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
        store.clone(),
        RuntimeConfig {
            max_live_children_per_tree: usize::MAX,
        },
    );
    runtime.register(provider).unwrap();
    World {
        runtime,
        parent,
        store,
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
    let root = dsh_test_support::bench::store_dir("activations");
    let mut group = c.benchmark_group("spawn");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for store in [
        "memory",
        "jsonl",
        "jsonl-turn-boundary",
        "jsonl-grouped",
        "jsonl-batched",
    ] {
        for mode in ["sequential", "concurrent"] {
            for n in [100usize, 1_000, 10_000] {
                let skip = (store.starts_with("jsonl") && n == 10_000 && mode == "sequential")
                    || (store == "jsonl-turn-boundary" && n == 10_000);
                if skip {
                    // Same per-child cost as 1,000; skip to keep the run short.
                    continue;
                }
                group.throughput(Throughput::Elements(n as u64));
                group.bench_with_input(
                    BenchmarkId::new(format!("{store}/{mode}"), n),
                    &n,
                    |b, &n| {
                        b.iter_custom(|iters| {
                            let root = root.clone();
                            on_worker(&runtime, async move {
                                let mut spent = Duration::ZERO;
                                for _ in 0..iters {
                                    // A fresh parent each time: its catalog grows with every child.
                                    let world = world(
                                        Backing::of(store, &root),
                                        Arc::new(SpawnProvider::new()),
                                    )
                                    .await;
                                    let start = Instant::now();
                                    run_children(&world, n, mode == "concurrent").await;
                                    // Under `Batched`, every child durable
                                    // before the clock stops.
                                    world.store.flush().await.unwrap();
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
            let world = world(Backing::Memory, Arc::new(ForkProvider::new())).await;
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
