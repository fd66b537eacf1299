//! Memory of idle agents: create 10,000 agents with empty histories and
//! report the heap each one holds (agent, inbox, channels, tools, prompt;
//! the in-memory store's per-session entry is counted too, so the JSONL
//! figure is the agent alone); then 1,000 agents that each hold a history
//! of 20 turns (40 KiB of text), to show how many copies of its log an
//! agent keeps; then the time of one 50-step turn over a 1 MiB history, to
//! show what each model request copies. Not a criterion bench: it prints.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_core::session::{AssistantEntry, TurnEnd, TurnStart, UserEntry};
use dsh_core::{
    AgentFactory, CancellationToken, ContentBlock, CreateAgent, Durability, EventPayload,
    SessionEvent, SessionHeader, SessionId, SessionStore, StopReason, Tool, ToolContext, ToolError,
    ToolOutput, UserMessage,
};
use dsh_harness::{Harness, JsonlStore, MemoryStore, Scripted, ScriptedModel, SystemPrompt};
use dsh_test_support::alloc::{CountingAllocator, live_bytes};
use dsh_test_support::bench::{Measurement, record};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const AGENTS: usize = 10_000;
const HISTORY_AGENTS: usize = 1_000;

/// A seed of `turns` completed turns, each a user message and an answer of
/// `chars` characters.
fn history(turns: usize, chars: usize) -> Vec<SessionEvent> {
    let text = "x".repeat(chars);
    let mut payloads = Vec::new();
    for turn in 0..turns as u64 {
        payloads.push(EventPayload::TurnStart(TurnStart { turn }));
        payloads.push(EventPayload::UserMessage(UserEntry {
            message: UserMessage::user_text(text.clone()),
        }));
        payloads.push(EventPayload::AssistantMessage(AssistantEntry {
            content: vec![ContentBlock::text(text.clone())],
        }));
        payloads.push(EventPayload::TurnEnd(TurnEnd {
            turn,
            stop_reason: StopReason::COMPLETED,
            diagnostic: None,
        }));
    }
    payloads
        .into_iter()
        .enumerate()
        .map(|(seq, payload)| SessionEvent {
            seq: seq as u64,
            time: 0,
            payload,
        })
        .collect()
}

fn spec(id: String, seed: Vec<SessionEvent>) -> CreateAgent {
    CreateAgent {
        header: SessionHeader::new(SessionId::new(id).unwrap(), "/work"),
        seed,
        setup: Default::default(),
        cancel: CancellationToken::new(),
    }
}

struct Noop;

#[async_trait::async_trait]
impl Tool for Noop {
    fn name(&self) -> &str {
        "noop"
    }
    fn description(&self) -> String {
        "Does nothing.".into()
    }
    fn input_schema(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }
    async fn execute(
        &self,
        _input: serde_json::Value,
        _ctx: ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("ok"))
    }
}

/// Resident heap per agent holding a 20-turn, 40 KiB history.
fn history_memory(runtime: &tokio::runtime::Runtime, dir: &std::path::Path) {
    let store = Arc::new(JsonlStore::new(dir.join("history"), Durability::None).unwrap());
    let harness = Harness::builder(store)
        .model(Arc::new(ScriptedModel::new()))
        .build()
        .unwrap();
    let seed = history(20, 1024);
    let before = live_bytes();
    let handles = runtime.block_on(async {
        let mut handles = Vec::with_capacity(HISTORY_AGENTS);
        for n in 0..HISTORY_AGENTS {
            let created = harness.create(spec(format!("h-{n}"), seed.clone()));
            handles.push(created.await.unwrap());
        }
        handles
    });
    let per_agent = (live_bytes() - before) as f64 / HISTORY_AGENTS as f64;
    record(&Measurement {
        workload: "idle agent, 20-turn 40 KiB history, heap, jsonl store",
        n: Some(HISTORY_AGENTS as u64),
        value: per_agent,
        unit: "B/agent",
    })
    .unwrap();
    println!(
        "agents with a 20-turn history (40 KiB of text): {per_agent:.0} bytes each ({:.1} KiB)",
        per_agent / 1024.0
    );
    runtime.block_on(async {
        for handle in &handles {
            handle.dispose().await;
        }
    });
}

/// Wall time of one turn of 50 tool steps over a 512-turn, 1 MiB history.
fn long_turn(runtime: &tokio::runtime::Runtime) {
    let steps = std::sync::atomic::AtomicUsize::new(0);
    let steps = Arc::new(steps);
    let counter = steps.clone();
    let model = ScriptedModel::new()
        .without_recording()
        .responder(move |_| {
            if counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 49 {
                Scripted::ToolCalls {
                    text: None,
                    calls: vec![("noop".into(), serde_json::json!({}))],
                }
            } else {
                Scripted::Text("done".into())
            }
        });
    let harness = Harness::builder(Arc::new(MemoryStore::new()))
        .model(Arc::new(model))
        .tool(Arc::new(Noop))
        .unwrap()
        .build()
        .unwrap();
    let elapsed = runtime.block_on(async {
        let handle = harness
            .create(spec("long".into(), history(512, 1024)))
            .await
            .unwrap();
        let agent = handle.agent().clone();
        let start = std::time::Instant::now();
        agent.followup(UserMessage::user_text("go")).await.unwrap();
        agent.wait_idle().await;
        let elapsed = start.elapsed();
        handle.dispose().await;
        elapsed
    });
    println!(
        "one 50-step turn over a 1 MiB history: {:.1} ms ({:.2} ms a step)",
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e3 / 50.0
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing
    // useful either: this program only measures and prints.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Under target/bench-stores, never deleted by the bench (see
    // `dsh_test_support::bench::store_dir`): its thousands of files would
    // slow the creates of the benches after it.
    let dir = dsh_test_support::bench::store_dir("idle-memory");
    let stores: Vec<(&str, Arc<dyn SessionStore>)> = vec![
        ("memory store", Arc::new(MemoryStore::new())),
        (
            "jsonl store",
            Arc::new(JsonlStore::new(&dir, Durability::None).unwrap()),
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
        record(&Measurement {
            workload: &format!("idle agent, empty history, heap, {name}"),
            n: Some(AGENTS as u64),
            value: per_agent,
            unit: "B/agent",
        })
        .unwrap();
        runtime.block_on(async {
            for handle in &handles {
                handle.dispose().await;
            }
        });
    }
    history_memory(&runtime, &dir);
    long_turn(&runtime);
}
