//! What the Restate engine costs, against the real server and real test
//! workers on loopback (in a private network namespace, as the tests run:
//! the bench re-executes itself under `unshare --net`). Where a time is
//! read from the log, it is the events' journaled clock (`time`, ms): the
//! client's polling (admin SQL, 2-50 ms an answer) is not in it.
//!
//! - `turn_latency`: a one-step turn seen from outside: from the accept
//!   of a follow-up to the session's status reporting the turn ended and
//!   the session idle (status polled every [`POLL`]).
//! - `journaled_turn`: the same turn inside the log: from the claimed
//!   input's `inbox/accepted` to `turn/end`.
//! - `journaled_turn_long_log`: as `journaled_turn`, for a session whose
//!   log holds [`LONG_LOG`] events before (the turn reads its whole log
//!   back at its start, one state entry per 64 events).
//! - `journaled_step`: what one more journaled step adds to a turn: a
//!   turn of [`STEPS`] steps (each but the last a model reply calling the
//!   idempotent `count` tool) less a one-step turn, over `STEPS - 1`, both
//!   from the log. The local path's step is `crates/harness/benches`'
//!   (`turns.rs`, `steps.rs`); the aim is ≤ 10 ms median a step.
//! - `children_started`: a lead starts [`CHILDREN`] background children
//!   in one step; from its prompt (client clock) to the last child's
//!   first `turn/end` (its log's clock; one host). Throughput in
//!   children.
//! - `failover`: a worker is `kill -9`ed while a model step waits at a
//!   gate; from the kill to the step being asked again on the other
//!   worker (aim: ≤ 2 s with the harness's 50 ms retry interval).
//!
//! Needs `crates/restate/server/install.sh` and root (for the namespace).
//! Not run by the tests; `cargo bench -p dsh-restate --bench engine`. The
//! numbers and what they mean are in `docs/performance.md`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};
use dsh_core::session::{AssistantEntry, UserEntry};
use dsh_core::{
    ContentBlock, EventPayload, InboxTarget, SessionEvent, SessionHeader, SessionId, UserMessage,
};
use dsh_restate::client::RestateClient;
use dsh_restate::object::SessionSeed;
use dsh_restate::state::inbox::AcceptRequest;
use dsh_test_support::restate::cluster::{Cluster, lead};
use dsh_test_support::restate::{in_namespace, inside};
use serde_json::{Value, json};

/// How often the bench asks a session's status.
const POLL: Duration = Duration::from_millis(1);

/// Events the session of `journaled_turn_long_log` starts with.
const LONG_LOG: u64 = 6_400;

/// Steps of the long turn in `journaled_step`.
const STEPS: usize = 11;

/// Turns the `journaled_step` script has room for (a long and a short one
/// per iteration).
const STEP_TURNS: u64 = 400;

/// Children a lead starts in `children_started`.
const CHILDREN: usize = 10;

/// How long `children_started` waits for a child's first turn at most.
const CHILD_BOUND: Duration = Duration::from_secs(60);

/// Leads the `children_started` script has (one per iteration).
const SPAWNERS: usize = 400;

fn main() {
    if !inside() {
        let status = in_namespace()
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
    turns(&mut criterion, &runtime);
    journaled_step(&mut criterion, &runtime);
    children_started(&mut criterion, &runtime);
    failover(&mut criterion, &runtime);
    criterion.final_summary();
}

/// A cluster running `sessions`, its status polled every [`POLL`].
fn cluster(runtime: &tokio::runtime::Runtime, sessions: Value) -> Cluster {
    let mut cluster = runtime.block_on(Cluster::start(sessions, &[]));
    cluster.poll = POLL;
    cluster
}

/// The bench group, for runs of seconds each: few samples, flat.
fn group(criterion: &mut Criterion) -> BenchmarkGroup<'_, WallTime> {
    let mut group = criterion.benchmark_group("restate");
    group.sample_size(10).sampling_mode(SamplingMode::Flat);
    group
}

/// The wall clock in ms, as the worker journals it.
fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// The whole log of `id`.
async fn events(client: &RestateClient, id: &SessionId) -> Vec<SessionEvent> {
    let mut events = Vec::new();
    let mut from = 0;
    loop {
        let page = client.events_since(id, from).await.unwrap();
        for line in page.lines.lines() {
            events.push(serde_json::from_str(line).unwrap());
        }
        from = page.next_seq;
        if page.complete {
            return events;
        }
    }
}

/// The last turn of a log, from its claimed input's acceptance to its
/// end, by the journaled clock.
fn last_turn(events: &[SessionEvent]) -> Duration {
    let end = events
        .iter()
        .rposition(|event| matches!(event.payload, EventPayload::TurnEnd(_)))
        .unwrap();
    let start = events[..end]
        .iter()
        .rposition(|event| matches!(event.payload, EventPayload::TurnStart(_)))
        .unwrap();
    let accepted = events[..start]
        .iter()
        .rposition(|event| matches!(event.payload, EventPayload::InboxAccepted(_)))
        .unwrap_or(start);
    Duration::from_millis(events[end].time - events[accepted].time)
}

/// Accept a follow-up for `id`'s next turn (request id `request`).
async fn follow_up(client: &RestateClient, id: &SessionId, request: String) {
    let request = AcceptRequest {
        request_id: request,
        message: UserMessage::user_text("again"),
        target: InboxTarget::NextTurn,
        wake: true,
    };
    client.accept(id, &request).await.unwrap();
}

/// `turn_latency` and `journaled_turn`: one-step turns of the lead.
fn turns(criterion: &mut Criterion, runtime: &tokio::runtime::Runtime) {
    let cluster = cluster(runtime, json!({}));
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
    let mut group = group(criterion);
    group.bench_function("turn_latency", |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(async {
                let started = Instant::now();
                for _ in 0..iters {
                    turns += 1;
                    follow_up(cluster.client(), &id, format!("turn-{turns}")).await;
                    cluster.wait_turns(&id, turns).await;
                }
                started.elapsed()
            })
        });
    });
    bench_journaled_turn(
        &mut group,
        "journaled_turn",
        runtime,
        &cluster,
        &id,
        &mut turns,
    );
    let long = SessionId::new("long").unwrap();
    let seed = (0..LONG_LOG)
        .map(|seq| SessionEvent {
            seq,
            time: 0,
            payload: if seq % 2 == 0 {
                EventPayload::UserMessage(UserEntry {
                    message: UserMessage::user_text(format!("question {seq}")),
                })
            } else {
                EventPayload::AssistantMessage(AssistantEntry {
                    content: vec![ContentBlock::text(format!("answer {seq}"))],
                })
            },
        })
        .collect();
    let mut long_turns = 0;
    runtime.block_on(async {
        let seed = SessionSeed {
            header: SessionHeader::new(long.clone(), "/"),
            seed,
        };
        cluster.client().create_session(&seed).await.unwrap();
    });
    bench_journaled_turn(
        &mut group,
        "journaled_turn_long_log",
        runtime,
        &cluster,
        &long,
        &mut long_turns,
    );
    group.finish();
}

/// One-step turns of `id` (which has ended `turns`), each from its
/// claimed input to its end by the journaled clock.
fn bench_journaled_turn(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    runtime: &tokio::runtime::Runtime,
    cluster: &Cluster,
    id: &SessionId,
    turns: &mut u64,
) {
    group.bench_function(name, |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    *turns += 1;
                    follow_up(cluster.client(), id, format!("turn-{turns}")).await;
                    cluster.wait_turns(id, *turns).await;
                    total += last_turn(&events(cluster.client(), id).await);
                }
                total
            })
        });
    });
}

/// `journaled_step`: a turn of [`STEPS`] steps against a one-step turn.
fn journaled_step(criterion: &mut Criterion, runtime: &tokio::runtime::Runtime) {
    let call = json!({"calls": [{"tool": "count_idempotent", "input": {"label": "step"}}]});
    let mut script: Vec<Value> = Vec::new();
    for _ in 0..STEP_TURNS {
        script.extend(std::iter::repeat_n(call.clone(), STEPS - 1));
        script.push(json!({"text": "long done"}));
        script.push(json!({"text": "short done"}));
    }
    let cluster = cluster(runtime, json!({ "lead": script }));
    let (id, header) = lead();
    let mut turns = 0;
    let mut group = group(criterion);
    group.bench_function("journaled_step", |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(async {
                let client = cluster.client();
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    assert!(turns + 2 <= 2 * STEP_TURNS, "more turns than scripted");
                    if turns == 0 {
                        client
                            .start(&header, UserMessage::user_text("long"))
                            .await
                            .unwrap();
                    } else {
                        follow_up(client, &id, format!("long-{turns}")).await;
                    }
                    turns += 1;
                    cluster.wait_turns(&id, turns).await;
                    let long = last_turn(&events(client, &id).await);
                    follow_up(client, &id, format!("short-{turns}")).await;
                    turns += 1;
                    cluster.wait_turns(&id, turns).await;
                    let short = last_turn(&events(client, &id).await);
                    let steps = u32::try_from(STEPS - 1).unwrap();
                    total += long.saturating_sub(short) / steps;
                }
                total
            })
        });
    });
    group.finish();
}

fn children_started(criterion: &mut Criterion, runtime: &tokio::runtime::Runtime) {
    let call = json!({"tool": "subagent", "input": {"description": "work", "prompt": "work"}});
    let spawner = json!([{"calls": vec![call; CHILDREN]}, {"text": "started"}]);
    let sessions: serde_json::Map<String, Value> = (0..SPAWNERS)
        .map(|n| (format!("spawner{n}"), spawner.clone()))
        .collect();
    let cluster = cluster(runtime, sessions.into());
    let mut next = 0;
    let mut group = group(criterion);
    group.throughput(Throughput::Elements(CHILDREN as u64));
    group.bench_function("children_started", |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(async {
                let client = cluster.client();
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    assert!(next < SPAWNERS, "more iterations than scripted spawners");
                    let id = SessionId::new(format!("spawner{next}")).unwrap();
                    next += 1;
                    let header = SessionHeader::new(id.clone(), "/");
                    let started = now_ms();
                    client
                        .start(&header, UserMessage::user_text("go"))
                        .await
                        .unwrap();
                    let mut last = started;
                    for child in 1..=CHILDREN {
                        let child = SessionId::new(format!("{id}.{child}")).unwrap();
                        // A refused `subagent` call creates no child:
                        // bounded, not waited on for ever.
                        tokio::time::timeout(CHILD_BOUND, cluster.wait_turns(&child, 1))
                            .await
                            .unwrap_or_else(|_| panic!("{child} ended no turn in {CHILD_BOUND:?}"));
                        let ended = events(client, &child)
                            .await
                            .iter()
                            .find(|event| matches!(event.payload, EventPayload::TurnEnd(_)))
                            .unwrap()
                            .time;
                        last = last.max(ended);
                    }
                    total += Duration::from_millis(last - started);
                }
                total
            })
        });
    });
    group.finish();
}

fn failover(criterion: &mut Criterion, runtime: &tokio::runtime::Runtime) {
    let mut group = group(criterion);
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
