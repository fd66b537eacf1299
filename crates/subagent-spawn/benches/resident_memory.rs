//! Memory per resident child: start 1,000 spawn children whose model holds
//! them mid-turn (a gate), and report the heap each live activation holds:
//! the child agent, its log so far, its activation record, its catalog entry
//! in the parent and the parent's share of names. Prints bytes; not a
//! criterion bench.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_core::{
    AgentFactory, CancellationToken, ContentBlock, CreateAgent, SessionHeader, SessionId,
    SessionStore,
};
use dsh_harness::{Harness, MemoryStore, Scripted, ScriptedModel};
use dsh_subagent::{ActivationSpec, Delivery, RuntimeConfig, StartRequest, SubagentRuntime};
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::alloc::{CountingAllocator, live_bytes};
use tokio::sync::Semaphore;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const CHILDREN: usize = 1_000;

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let gate = Arc::new(Semaphore::new(0));
        let held = gate.clone();
        let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
        let model = Arc::new(ScriptedModel::new().without_recording().responder(move |_| Scripted::Gated {
            gate: held.clone(),
            then: Box::new(Scripted::Text("done".into())),
        }));
        let harness = Harness::builder(store.clone()).model(model).build().unwrap();
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
        let mut activations = Vec::with_capacity(CHILDREN);
        for _ in 0..CHILDREN {
            activations.push(
                subagents
                    .start_activation(ActivationSpec {
                        provider: "spawn".into(),
                        label: "resident".into(),
                        name: None,
                        child_id: None,
                        cancel: CancellationToken::new(),
                        delivery: Delivery::Caller,
                        request: StartRequest::new(parent.clone(), vec![ContentBlock::text("work")]),
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
        let per_child = (after - before) as f64 / CHILDREN as f64;
        println!(
            "resident children: {CHILDREN} live activations, {per_child:.0} bytes each ({:.2} KiB), \
             including the store's copy of each child's log",
            per_child / 1024.0
        );
        gate.add_permits(CHILDREN);
        for activation in &activations {
            activation.result().await.unwrap();
        }
    });
}
