//! Memory of idle agents: create 10,000 agents with empty histories and
//! report the heap each one holds (agent, inbox, channels, tools, prompt;
//! the in-memory store's per-session entry is counted too, so the JSONL
//! figure is the agent alone). Not a criterion bench: it prints bytes.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_core::{
    AgentFactory, CancellationToken, CreateAgent, Durability, SessionHeader, SessionId,
    SessionStore,
};
use dsh_harness::{Harness, JsonlStore, MemoryStore, ScriptedModel, SystemPrompt};
use dsh_test_support::alloc::{CountingAllocator, live_bytes};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const AGENTS: usize = 10_000;

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing
    // useful either: this program only measures and prints.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let stores: Vec<(&str, Arc<dyn SessionStore>)> = vec![
        ("memory store", Arc::new(MemoryStore::new())),
        (
            "jsonl store",
            Arc::new(JsonlStore::new(dir.path(), Durability::None).unwrap()),
        ),
    ];
    for (name, store) in stores {
        let harness = Harness::builder(store)
            .model(Arc::new(ScriptedModel::new()))
            .prompt(SystemPrompt::new().persona("You are a careful assistant."))
            .build()
            .unwrap();
        let before = live_bytes();
        let handles = runtime.block_on(async {
            let mut handles = Vec::with_capacity(AGENTS);
            for n in 0..AGENTS {
                let header =
                    SessionHeader::new(SessionId::new(format!("idle-{n}")).unwrap(), "/work");
                handles.push(
                    harness
                        .create(CreateAgent {
                            header,
                            seed: Vec::new(),
                            setup: Default::default(),
                            cancel: CancellationToken::new(),
                        })
                        .await
                        .unwrap(),
                );
            }
            handles
        });
        let after = live_bytes();
        let per_agent = (after - before) as f64 / AGENTS as f64;
        println!(
            "idle agents ({name}): {AGENTS} agents, {per_agent:.0} bytes each ({:.2} KiB)",
            per_agent / 1024.0
        );
        runtime.block_on(async {
            for handle in &handles {
                handle.dispose().await;
            }
        });
    }
}
