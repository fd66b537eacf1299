//! What the Restate engine costs, against the real server and real test
//! workers on loopback (in a private network namespace, as the tests run:
//! the bench re-executes itself under `unshare --net`):
//!
//! - `journaled_turn`: one turn of one step (claim, `turn/start`, the
//!   model's reply, `turn/end`: every effect journaled), from the accept
//!   of a follow-up to the turn's end as the session's status reports it.
//!   The local path's turn is `crates/harness/benches/turns.rs`; the
//!   overhead is the difference (aim: ≤ 10 ms median a step).
//! - `children_started`: a lead starts 10 background children in one step;
//!   from its prompt to every child's first turn ended (throughput in
//!   children).
//! - `failover`: a worker is killed while a model step waits at a gate;
//!   from the kill to the step being asked again on the other worker (aim:
//!   ≤ 2 s with the tests' 50 ms retry interval).
//!
//! Needs `crates/restate/server/install.sh` and root (for the namespace).
//! Not run by the tests; `cargo bench -p dsh-restate --bench engine`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use dsh_core::{InboxTarget, SessionHeader, SessionId, UserMessage};
use dsh_restate::state::inbox::AcceptRequest;
use serde_json::json;
use support::cluster::{Cluster, lead};

/// How often the bench asks a session's status: the resolution of the
/// turn and children timings.
const POLL: Duration = Duration::from_millis(1);

/// Children a lead starts in `children_started`.
const CHILDREN: usize = 10;

/// Leads the `children_started` script has (one per iteration).
const SPAWNERS: usize = 500;

fn main() {
    if !support::inside() {
        let status = support::in_namespace()
            .args(std::env::args().skip(1))
            .status()
            .expect("unshare (run as root, with util-linux installed)");
        std::process::exit(status.code().unwrap_or(1));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut criterion = Criterion::default().configure_from_args();
    journaled_turn(&mut criterion, &runtime);
    children_started(&mut criterion, &runtime);
    failover(&mut criterion, &runtime);
    criterion.final_summary();
}

fn journaled_turn(criterion: &mut Criterion, runtime: &tokio::runtime::Runtime) {
    let mut cluster = runtime.block_on(Cluster::start(json!({}), &[]));
    cluster.poll = POLL;
    let (id, header) = lead();
    runtime.block_on(async {
        let client = cluster.client();
        client
            .start(&header, UserMessage::user_text("warm up"))
            .await
            .unwrap();
        cluster.wait_turns(&id, 1).await;
    });
    let mut turns = 1;
    let mut group = criterion.benchmark_group("restate");
    group.sample_size(20);
    group.bench_function("journaled_turn", |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(async {
                let client = cluster.client();
                let started = Instant::now();
                for _ in 0..iters {
                    turns += 1;
                    let request = AcceptRequest {
                        request_id: format!("turn-{turns}"),
                        message: UserMessage::user_text("again"),
                        target: InboxTarget::NextTurn,
                        wake: true,
                    };
                    client.accept(&id, &request).await.unwrap();
                    cluster.wait_turns(&id, turns).await;
                }
                started.elapsed()
            })
        });
    });
    group.finish();
}

fn children_started(criterion: &mut Criterion, runtime: &tokio::runtime::Runtime) {
    let call = json!({"tool": "subagent", "input": {"description": "work", "prompt": "work"}});
    let spawner = json!([{"calls": vec![call; CHILDREN]}, {"text": "started"}]);
    let sessions: serde_json::Map<String, serde_json::Value> = (0..SPAWNERS)
        .map(|n| (format!("spawner{n}"), spawner.clone()))
        .collect();
    let mut cluster = runtime.block_on(Cluster::start(sessions.into(), &[]));
    cluster.poll = POLL;
    let mut next = 0;
    let mut group = criterion.benchmark_group("restate");
    group.sample_size(10);
    group.throughput(Throughput::Elements(CHILDREN as u64));
    group.bench_function("children_started", |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(async {
                let client = cluster.client();
                let started = Instant::now();
                for _ in 0..iters {
                    assert!(next < SPAWNERS, "more iterations than scripted spawners");
                    let id = SessionId::new(format!("spawner{next}")).unwrap();
                    next += 1;
                    let header = SessionHeader::new(id.clone(), "/");
                    client
                        .start(&header, UserMessage::user_text("go"))
                        .await
                        .unwrap();
                    for child in 1..=CHILDREN {
                        let child = SessionId::new(format!("{id}.{child}")).unwrap();
                        cluster.wait_turns(&child, 1).await;
                    }
                }
                started.elapsed()
            })
        });
    });
    group.finish();
}

fn failover(criterion: &mut Criterion, runtime: &tokio::runtime::Runtime) {
    let mut group = criterion.benchmark_group("restate");
    group.sample_size(10);
    group.bench_function("failover", |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let sessions = json!({"lead": [{"text": "after", "gate": "step"}]});
                    let mut cluster = Cluster::start(sessions, &["step"]).await;
                    cluster.start_lead().await;
                    cluster.started("step").await;
                    let killed = Instant::now();
                    cluster.kill_a();
                    cluster.started("step").await;
                    total += killed.elapsed();
                    cluster.open("step").await;
                }
                total
            })
        });
    });
    group.finish();
}
