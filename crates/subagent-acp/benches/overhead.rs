//! Per-run overhead of the `acp` provider beyond the agent's own time, on
//! this crate's test agent (standard-library Python, so its own start-up is
//! small and fixed):
//!
//! - `first_update/provider`: `start_run` to the first progress event
//!   (spawn, `initialize`, `session/new`, `session/prompt`, one update);
//! - `first_update/raw`: the same exchange with the same program over bare
//!   pipes (spawn, three JSON lines written, read until the update) — the
//!   agent's own time; the difference is the provider's overhead;
//! - `dispose/after_end_turn`: `dispose` of a run whose turn ended (the
//!   agent exits on EOF);
//! - `dispose/after_reply_ignoring_eof`: the same for an agent that ignores
//!   EOF, so the answered grace runs out and SIGTERM ends it;
//! - `dispose/mid_turn`: `dispose` of a run whose agent honours the ACP
//!   cancel, mid-turn.
//!
//! Needs the peers: run `crates/subagent-acp/peers/install.sh` first.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use dsh_core::{
    Agent, AgentFactory, CancellationToken, ContentBlock, CreateAgent, SessionHeader, SessionId,
};
use dsh_harness::{Harness, MemoryStore, Scripted, ScriptedModel};
use dsh_subagent::{ResolvedStartRequest, SubagentRun};
use dsh_subagent_acp::{AcpConfig, AcpProvider};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn python() -> PathBuf {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/venv/bin/python");
    assert!(
        python.exists(),
        "the ACP peers are missing: run crates/subagent-acp/peers/install.sh"
    );
    python
}

fn rogue() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/rogue_agent.py")
}

async fn parent() -> dsh_core::AgentHandle {
    let store = Arc::new(MemoryStore::new());
    let model = Arc::new(ScriptedModel::new().responder(|_| Scripted::Text("ok".into())));
    let harness = Harness::builder(store).model(model).build().unwrap();
    harness
        .create(CreateAgent {
            header: SessionHeader::new(SessionId::generate(), std::env::temp_dir()),
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap()
}

fn request(parent: &Arc<dyn Agent>, prompt: &str) -> ResolvedStartRequest {
    ResolvedStartRequest {
        label: "a task".into(),
        cwd: std::env::temp_dir(),
        prompt: vec![ContentBlock::text(prompt)],
        parent: parent.clone(),
        agent_options: None,
        agent_preset: None,
        output_schema: None,
        max_depth: None,
        tool_filter: None,
        persona: None,
        cancel: CancellationToken::new(),
    }
}

/// The raw exchange: what the agent itself costs.
async fn raw_first_update(python: &Path, rogue: &Path) -> Duration {
    let started = Instant::now();
    let mut child = tokio::process::Command::new(python)
        .arg(rogue)
        .env_clear()
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    stdin
        .write_all(
            concat!(
                r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}"#,
                "\n",
                r#"{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/tmp","mcpServers":[]}}"#,
                "\n",
                r#"{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"rogue-1","prompt":[{"type":"text","text":"say hi"}]}}"#,
                "\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    while let Some(line) = lines.next_line().await.unwrap() {
        if line.contains("session/update") {
            break;
        }
    }
    let elapsed = started.elapsed();
    drop(stdin);
    child.wait().await.unwrap();
    elapsed
}

fn overhead(c: &mut Criterion) {
    let python = python();
    let rogue = rogue();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let handle = rt.block_on(parent());
    let parent = handle.agent().clone();
    let provider = AcpProvider::new(
        AcpConfig::new(&python)
            .args([rogue.display().to_string()])
            .graces(Duration::from_secs(2), Duration::from_secs(2)),
    )
    .unwrap();

    let mut group = c.benchmark_group("first_update");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("provider", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (_subscription, mut progress) = provider.progress().subscribe();
                    let started = Instant::now();
                    let run = provider
                        .start_run(request(&parent, "say hi"))
                        .await
                        .unwrap();
                    progress.recv().await.unwrap();
                    total += started.elapsed();
                    run.result().await.unwrap();
                    run.dispose().await.unwrap();
                }
                total
            })
        });
    });
    group.bench_function("raw", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += raw_first_update(&python, &rogue).await;
                }
                total
            })
        });
    });
    group.finish();

    let mut group = c.benchmark_group("dispose");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("after_end_turn", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let run = provider
                        .start_run(request(&parent, "say hi"))
                        .await
                        .unwrap();
                    run.result().await.unwrap();
                    let started = Instant::now();
                    run.dispose().await.unwrap();
                    total += started.elapsed();
                }
                total
            })
        });
    });
    // An agent that ignores stdin EOF (as real ones do): the answered grace
    // (100 ms by default), then SIGTERM; from the settled result to
    // `dispose` returning.
    let deaf = AcpProvider::new(
        AcpConfig::new(&python)
            .args([rogue.display().to_string(), "--ignore-eof".to_owned()])
            .graces(Duration::from_secs(2), Duration::from_secs(2)),
    )
    .unwrap();
    group.bench_function("after_reply_ignoring_eof", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let run = deaf.start_run(request(&parent, "say hi")).await.unwrap();
                    run.result().await.unwrap();
                    let started = Instant::now();
                    run.dispose().await.unwrap();
                    total += started.elapsed();
                }
                total
            })
        });
    });
    group.bench_function("mid_turn", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (_subscription, mut progress) = provider.progress().subscribe();
                    let run = provider
                        .start_run(request(&parent, "say working; wait_cancel"))
                        .await
                        .unwrap();
                    progress.recv().await.unwrap();
                    let started = Instant::now();
                    run.dispose().await.unwrap();
                    total += started.elapsed();
                }
                total
            })
        });
    });
    group.finish();
}

criterion_group!(benches, overhead);
criterion_main!(benches);
