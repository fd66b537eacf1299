//! The cost of progress on the step path (issue 19): one local child runs
//! `STEPS` steps (each a streamed text, one host tool call and its result)
//! with its text fed token by token to the progress bus, once with nobody
//! listening and once with a listener draining the bus as fast as it can.
//! Criterion reports steps per second (elements/s); the two functions of
//! the group `progress/steps` differ only in the listener.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dsh_core::Message;
use dsh_harness::{Scripted, ScriptedModel};
use dsh_subagent::RuntimeConfig;
use dsh_test_support::world::{Backing, World, WorldBuilder, caller_spec};
use serde_json::json;

/// Steps per child.
const STEPS: usize = 50;

async fn world() -> World<dyn dsh_core::SessionStore> {
    let model = Arc::new(
        ScriptedModel::new()
            .without_recording()
            .responder(|request| {
                let done = request
                    .messages
                    .iter()
                    .filter(|message| matches!(message, Message::Assistant { .. }))
                    .count();
                if done < STEPS {
                    Scripted::ToolCalls {
                        text: Some(format!("looking at part {done} of the task")),
                        calls: vec![("alpha".to_owned(), json!({}))],
                    }
                } else {
                    Scripted::Text("all parts done".to_owned())
                }
            }),
    );
    WorldBuilder::new()
        .backing(Backing::Memory)
        .host_tools()
        .local()
        .config(RuntimeConfig::default())
        .model(model)
        .stream_text()
        .build()
        .await
}

/// Run one child to its result; the time of that run only.
async fn one_child(world: &World<dyn dsh_core::SessionStore>) -> Duration {
    let lead = world.lead();
    let started = Instant::now();
    let child = world
        .runtime
        .start_activation(caller_spec(&lead, "local", "work"))
        .await
        .unwrap();
    let result = child.result().await.unwrap();
    let took = started.elapsed();
    assert!(result.stop_reason.is_completed(), "{result:?}");
    took
}

fn steps(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("progress/steps");
    group.throughput(Throughput::Elements(STEPS as u64 + 1));
    for listener in [false, true] {
        let id = if listener { "listener" } else { "no_listener" };
        group.bench_function(BenchmarkId::new(id, STEPS), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let world = world().await;
                    let draining = listener.then(|| {
                        let mut stream = world.runtime.progress();
                        tokio::spawn(async move { while stream.next().await.is_some() {} })
                    });
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += one_child(&world).await;
                    }
                    if let Some(draining) = draining {
                        draining.abort();
                    }
                    total
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, steps);
criterion_main!(benches);
