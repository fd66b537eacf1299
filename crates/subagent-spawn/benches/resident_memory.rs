//! Memory per resident child: start spawn children whose model holds them
//! mid-turn (a gate), and report the heap each live activation holds: the
//! child agent, its log so far, its activation record, its catalog entry in
//! the parent and the parent's share of names. On the memory store (1,000
//! children; the figure includes the store's copy of each log) and on the
//! JSONL store (10,000 children, each holding its open log: the process
//! must not run out of descriptors). Then the same children parked: each
//! mid-turn child interrupted, so that it stays resident and idle with the
//! short history of its aborted turn (the "resident idle child");
//! its history's size on disk is printed beside it. Prints and records the
//! bytes (`bench::record`, B/child); not a criterion bench.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_core::Durability;
use dsh_core::{
    AgentFactory, CancellationToken, ContentBlock, CreateAgent, SessionHeader, SessionId,
    SessionStore,
};
use dsh_harness::{Harness, JsonlStore, MemoryStore, Scripted, ScriptedModel};
use dsh_subagent::{
    ActivationSpec, Delivery, InterruptAuthority, RuntimeConfig, StartRequest, SubagentRuntime,
};
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::alloc::{CountingAllocator, live_bytes};
use dsh_test_support::bench::{Measurement, record};
use tokio::sync::Semaphore;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = dsh_test_support::bench::store_dir("resident-memory");
    let memory: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    resident(&runtime, "memory", memory, 1_000, None);
    let jsonl = Arc::new(JsonlStore::new(&dir, Durability::None).unwrap());
    resident(&runtime, "jsonl", jsonl.clone(), 10_000, Some(&jsonl));
}

/// Hold `children` spawn children mid-turn over `store` and report the heap
/// each holds.
fn resident(
    runtime: &tokio::runtime::Runtime,
    name: &str,
    store: Arc<dyn SessionStore>,
    children: usize,
    park_on: Option<&JsonlStore>,
) {
    runtime.block_on(async {
        let gate = Arc::new(Semaphore::new(0));
        let held = gate.clone();
        let model = Arc::new(
            ScriptedModel::new()
                .without_recording()
                .responder(move |_| Scripted::Gated {
                    gate: held.clone(),
                    then: Box::new(Scripted::Text("done".into())),
                }),
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
        let subagents = SubagentRuntime::new(
            Arc::new(harness),
            store,
            RuntimeConfig {
                max_live_children_per_tree: usize::MAX,
            },
        );
        subagents.register(Arc::new(SpawnProvider::new())).unwrap();
        let before = live_bytes();
        let mut activations = Vec::with_capacity(children);
        for _ in 0..children {
            activations.push(
                subagents
                    .start_activation(ActivationSpec {
                        provider: "spawn".into(),
                        label: "resident".into(),
                        name: None,
                        child_id: None,
                        cancel: CancellationToken::new(),
                        delivery: Delivery::Caller,
                        request: StartRequest::new(
                            parent.clone(),
                            vec![ContentBlock::text("work")],
                        ),
                    })
                    .await
                    .unwrap(),
            );
        }
        // Let every child reach its model call.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        let after = live_bytes();
        let per_child = (after - before) as f64 / children as f64;
        println!(
            "resident children ({name} store): {children} live activations, {per_child:.0} bytes \
             each ({:.2} KiB), with each child's log so far (and, in memory, the store's copy)",
            per_child / 1024.0
        );
        record(&Measurement {
            workload: &format!("resident child mid-turn, heap, {name} store"),
            n: Some(children as u64),
            value: per_child,
            unit: "B/child",
        })
        .unwrap();
        if let Some(jsonl) = park_on {
            let read_log = |id: &SessionId| std::fs::read_to_string(jsonl.log_path(id)).unwrap();
            park(&subagents, &activations, before, children, read_log).await;
            return;
        }
        gate.add_permits(children);
        for activation in &activations {
            activation.result().await.unwrap();
        }
    });
}

/// Interrupt every mid-turn child so that it stays resident and idle, then
/// report the heap each parked child holds, history included; `read_log`
/// reads a child's log, whose size and parsed heap a sample of children
/// gives for the history.
async fn park(
    subagents: &SubagentRuntime,
    activations: &[dsh_subagent::SubagentActivation],
    before: isize,
    children: usize,
    read_log: impl Fn(&SessionId) -> String,
) {
    for activation in activations {
        subagents
            .interrupt(activation.child_id(), &InterruptAuthority::User)
            .await
            .unwrap();
    }
    for activation in activations {
        let agent = subagents
            .registry()
            .get(activation.child_id())
            .expect("an interrupted child stays resident");
        agent.wait_idle().await;
    }
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    let per_child = (live_bytes() - before) as f64 / children as f64;
    // The heap one child's history takes as parsed events, from a sample.
    // Read without awaiting, so that no other task of the runtime frees or
    // allocates in between.
    let texts: Vec<String> = activations
        .iter()
        .take(100)
        .map(|activation| read_log(activation.child_id()))
        .collect();
    let history = texts.iter().map(String::len).sum::<usize>() as f64 / texts.len() as f64;
    let loaded_before = live_bytes();
    let loaded: Vec<Vec<dsh_core::SessionEvent>> = texts
        .iter()
        .map(|text| {
            text.lines()
                .skip(1)
                .map(|line| dsh_core::SessionEvent::from_json_line(line).unwrap())
                .collect()
        })
        .collect();
    let history_heap = (live_bytes() - loaded_before) as f64 / texts.len() as f64;
    drop(loaded);
    println!(
        "parked children (jsonl store): {children} resident idle children, {per_child:.0} bytes \
         each ({:.2} KiB) with a history of {history:.0} bytes on disk each ({history_heap:.0} \
         bytes of heap as loaded events): {:.0} bytes besides it",
        per_child / 1024.0,
        per_child - history_heap
    );
    record(&Measurement {
        workload: "resident idle child (parked), heap with its history, jsonl store",
        n: Some(children as u64),
        value: per_child,
        unit: "B/child",
    })
    .unwrap();
    record(&Measurement {
        workload: "resident idle child (parked), heap besides its history, jsonl store",
        n: Some(children as u64),
        value: per_child - history_heap,
        unit: "B/child",
    })
    .unwrap();
    subagents.shutdown().await;
}
