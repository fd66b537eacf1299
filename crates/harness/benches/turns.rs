//! Turn overhead of the reference loop with the scripted model: how many
//! complete turns (accept, claim, request, reply, turn end) one agent runs per
//! second, on the in-memory store and on the JSONL store without fsync.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_core::{
    AgentFactory, AgentHandle, CancellationToken, CreateAgent, Durability, SessionHeader,
    SessionId, SessionStore, UserMessage,
};
use dsh_harness::{Harness, JsonlStore, MemoryStore, Scripted, ScriptedModel};

/// Turns per agent before it is replaced, so the transcript stays short and
/// the number measures loop overhead rather than history growth.
const TURNS_PER_AGENT: u64 = 50;

async fn fresh(harness: &Harness, n: u64) -> AgentHandle {
    harness
        .create(CreateAgent {
            header: SessionHeader::new(SessionId::new(format!("bench-{n}")).unwrap(), "/"),
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap()
}

fn bench_turns(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Under target/bench-stores, never deleted by the bench (see
    // `dsh_test_support::bench::store_dir`): its thousands of files would
    // slow the creates of the benches after it.
    let dir = dsh_test_support::bench::store_dir("turns");
    let stores: Vec<(&str, Arc<dyn SessionStore>)> = vec![
        ("memory", Arc::new(MemoryStore::new())),
        (
            "jsonl-none",
            Arc::new(JsonlStore::new(&dir, Durability::None).unwrap()),
        ),
    ];
    let mut group = c.benchmark_group("turn");
    group.throughput(Throughput::Elements(1));
    for (name, store) in stores {
        let model = Arc::new(
            ScriptedModel::new()
                .without_recording()
                .responder(|_| Scripted::Text("ok".into())),
        );
        let harness = Harness::builder(store).model(model).build().unwrap();
        let mut agents = 0;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let mut spent = Duration::ZERO;
                    let mut done = 0;
                    while done < iters {
                        agents += 1;
                        let handle = fresh(&harness, agents).await;
                        let agent = handle.agent().clone();
                        let batch = TURNS_PER_AGENT.min(iters - done);
                        let start = Instant::now();
                        for _ in 0..batch {
                            agent.followup(UserMessage::user_text("go")).await.unwrap();
                            agent.wait_idle().await;
                        }
                        spent += start.elapsed();
                        done += batch;
                        handle.dispose().await;
                    }
                    spent
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench_turns);
criterion_main!(benches);
