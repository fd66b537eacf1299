//! Tree-scale costs on the JSONL store without fsync: listing a root's
//! 10,000 and 100,000 cold children (each child's catalog read from its log), resuming a
//! child whose log holds 100,000 events, and sending one message from the
//! root to each of 1,000 children, cold (each send resumes the child; timed
//! until every child has run its turn and settled again) and live (each
//! child kept resident by an interrupt). Criterion reports
//! children per second (elements/s) or replayed bytes per second; the
//! resume is timed with and without the dispose that follows it.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use dsh_core::session::{
    AssistantEntry, InboxAccepted, InboxIds, StepStart, TurnEnd, TurnStart, UserEntry,
};
use dsh_core::{
    Agent, AgentError, AgentFactory, AgentHandle, AgentStatus, CancellationToken, ContentBlock,
    CreateAgent, Durability, EventPayload, InboxTarget, MessageSource, ResumeAgent, SessionEvent,
    SessionHeader, SessionId, SessionStore, StopReason, Usage, UserMessage,
};
use dsh_harness::{Harness, JsonlStore, Scripted, ScriptedModel};
use dsh_subagent::catalog::{CATALOG_EVENT, catalog_payload};
use dsh_subagent::{
    ActivationSpec, CatalogEntry, ChildMode, Delivery, InterruptAuthority, RuntimeConfig,
    StartRequest, SubagentError, SubagentRuntime,
};
use dsh_subagent_spawn::SpawnProvider;

const LISTED: usize = 10_000;
/// The listing aim's size: 100,000 cold children in at most 0.5 s.
const LISTED_LARGE: usize = 100_000;
const EVENTS: u64 = 100_000;
const MESSAGED: usize = 1_000;

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

struct World {
    runtime: SubagentRuntime,
    harness: Arc<Harness>,
    store: Arc<JsonlStore>,
    root: AgentHandle,
}

async fn make_world() -> World {
    // Kept after the bench ends, as every bench store is.
    let dir = dsh_test_support::bench::store_dir("tree");
    let store = Arc::new(JsonlStore::new(&dir, Durability::None).unwrap());
    let model = Arc::new(
        ScriptedModel::new()
            .without_recording()
            .responder(|_| Scripted::Text("ok".into())),
    );
    let harness = Arc::new(
        Harness::builder(store.clone())
            .model(model)
            .build()
            .unwrap(),
    );
    let root = harness
        .create(CreateAgent {
            header: SessionHeader::new(SessionId::generate(), std::env::temp_dir()),
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
    let runtime = SubagentRuntime::new(
        harness.clone(),
        store.clone(),
        RuntimeConfig {
            max_live_children_per_tree: usize::MAX,
        },
    );
    runtime.register(Arc::new(SpawnProvider::new())).unwrap();
    World {
        runtime,
        harness,
        store,
        root,
    }
}

/// Catalog `n` children under the root without running them: each child's
/// log is created directly through the store and closed at once.
async fn catalog_cold_children(world: &World, n: usize) {
    let root = world.root.agent();
    for i in 0..n {
        let mut header = SessionHeader::new(SessionId::generate(), std::env::temp_dir());
        header.parent_session = Some(root.id().clone());
        header.delegation_depth = 1;
        drop(world.store.create(&header, &[]).await.unwrap());
        let entry = CatalogEntry {
            child_id: header.id.clone(),
            name: Some(format!("c{i}")),
            label: format!("task {i}"),
            provider: "spawn".into(),
            mode: ChildMode::CONTINUABLE,
        };
        root.record(CATALOG_EVENT, catalog_payload(&entry))
            .await
            .unwrap();
    }
}

fn list(c: &mut Criterion) {
    let rt = tokio_runtime();
    let mut group = c.benchmark_group("list");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(LISTED as u64));

    let world = rt.block_on(async {
        let world = make_world().await;
        catalog_cold_children(&world, LISTED).await;
        world
    });
    let root_id = world.root.agent().id().clone();
    let cancel = CancellationToken::new();
    let check = |rows: usize| assert_eq!(rows, LISTED);

    // The root live: its catalog is folded from its events in memory.
    group.bench_function("10000-live-root", |b| {
        b.iter(|| {
            let rows = rt
                .block_on(world.runtime.list_descendants(&root_id, &cancel))
                .unwrap();
            check(rows.len());
        });
    });
    // Everything cold: the root's catalog is read from its log too.
    rt.block_on(world.root.dispose());
    group.bench_function("10000-cold", |b| {
        b.iter(|| {
            let rows = rt
                .block_on(world.runtime.list_descendants(&root_id, &cancel))
                .unwrap();
            check(rows.len());
        });
    });
    group.finish();
    rt.block_on(async {
        world.runtime.shutdown().await;
        world.harness.shutdown().await;
    });
}

/// 100,000 cold children of a cold root. Built only when the filter picks
/// the benchmark (it takes seconds), and kept for all its samples.
fn list_large(c: &mut Criterion) {
    let rt = tokio_runtime();
    let mut group = c.benchmark_group("list");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(LISTED_LARGE as u64));
    let mut built: Option<(World, SessionId)> = None;
    let cancel = CancellationToken::new();
    group.bench_function("100000-cold", |b| {
        let (world, root_id) = built.get_or_insert_with(|| {
            rt.block_on(async {
                let world = make_world().await;
                catalog_cold_children(&world, LISTED_LARGE).await;
                world.root.dispose().await;
                let root_id = world.root.agent().id().clone();
                (world, root_id)
            })
        });
        b.iter(|| {
            let rows = rt
                .block_on(world.runtime.list_descendants(root_id, &cancel))
                .unwrap();
            assert_eq!(rows.len(), LISTED_LARGE);
        });
    });
    group.finish();
    if let Some((world, _)) = built {
        rt.block_on(async {
            world.runtime.shutdown().await;
            world.harness.shutdown().await;
        });
    }
}

fn event(seq: u64, payload: EventPayload) -> SessionEvent {
    SessionEvent {
        seq,
        time: 1_700_000_000_000 + seq,
        payload,
    }
}

/// One turn's worth of events, as a completed single-step turn writes them.
fn turn_events(turn: u64, first_seq: u64) -> Vec<SessionEvent> {
    let message = UserMessage::new(
        vec![ContentBlock::text(format!(
            "please do step {turn} of the task"
        ))],
        MessageSource::User,
    );
    let reply = format!(
        "Turn {turn}: {}",
        "the work for this step is done; the files were read and the summary follows. ".repeat(3)
    );
    let payloads = vec![
        EventPayload::InboxAccepted(InboxAccepted {
            message: message.clone(),
            target: InboxTarget::NextTurn,
            wake: true,
        }),
        EventPayload::TurnStart(TurnStart { turn }),
        EventPayload::InboxClaimed(InboxIds {
            message_ids: vec![message.id.clone()],
        }),
        EventPayload::UserMessage(UserEntry { message }),
        EventPayload::StepStart(StepStart { turn, step: 0 }),
        EventPayload::AssistantMessage(AssistantEntry {
            content: vec![ContentBlock::text(reply)],
        }),
        EventPayload::Usage(Usage {
            input_tokens: 1_200 + turn,
            output_tokens: 60,
            ..Usage::default()
        }),
        EventPayload::TurnEnd(TurnEnd {
            turn,
            stop_reason: StopReason::COMPLETED,
            diagnostic: None,
        }),
    ];
    payloads
        .into_iter()
        .zip(first_seq..)
        .map(|(payload, seq)| event(seq, payload))
        .collect()
}

/// Resume the child `id` from its log.
async fn resume_child(world: &World, id: &SessionId) -> AgentHandle {
    world
        .harness
        .resume(ResumeAgent {
            id: id.clone(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap()
}

fn resume(c: &mut Criterion) {
    let rt = tokio_runtime();
    let world = rt.block_on(make_world());
    let id = SessionId::generate();
    rt.block_on(async {
        let mut header = SessionHeader::new(id.clone(), std::env::temp_dir());
        header.parent_session = Some(world.root.agent().id().clone());
        header.delegation_depth = 1;
        let log = world.store.create(&header, &[]).await.unwrap();
        let mut seq = 0;
        let mut turn = 0;
        while seq < EVENTS {
            let mut batch = Vec::new();
            while seq < EVENTS && batch.len() < 8_000 {
                let mut events = turn_events(turn, seq);
                events.truncate(usize::try_from(EVENTS - seq).unwrap());
                seq += events.len() as u64;
                batch.extend(events);
                turn += 1;
            }
            log.append(&batch).await.unwrap();
        }
    });
    let bytes = std::fs::metadata(world.store.log_path(&id)).unwrap().len();
    // Checked once, outside the timing: `events()` copies the whole log.
    rt.block_on(async {
        let handle = resume_child(&world, &id).await;
        assert_eq!(handle.agent().events().len() as u64, EVENTS);
        handle.dispose().await;
    });

    let mut group = c.benchmark_group("resume");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("100k-events", |b| {
        b.iter(|| {
            rt.block_on(async {
                let handle = resume_child(&world, &id).await;
                handle.dispose().await;
            });
        });
    });
    // The replay alone: the dispose that frees the restored state is timed
    // out of the measurement.
    group.bench_function("100k-events-replay-only", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let handle = resume_child(&world, &id).await;
                    spent += start.elapsed();
                    handle.dispose().await;
                }
                spent
            })
        });
    });
    group.finish();
    rt.block_on(async {
        world.root.dispose().await;
        world.harness.shutdown().await;
    });
}

/// Start `n` spawn children of the root; with `park`, interrupt each one as
/// soon as it is published so that it stays resident and idle.
async fn start_children(world: &World, n: usize, park: bool) -> Vec<SessionId> {
    let mut ids = Vec::with_capacity(n);
    // A child may finish its turn before the interrupt parks it; start
    // another until `n` are resident.
    while ids.len() < n {
        let activation = world
            .runtime
            .start_activation(ActivationSpec {
                provider: "spawn".into(),
                label: "bench".into(),
                name: None,
                child_id: None,
                cancel: CancellationToken::new(),
                delivery: Delivery::Caller,
                request: StartRequest::new(
                    world.root.agent().clone(),
                    vec![ContentBlock::text("work")],
                ),
            })
            .await
            .unwrap();
        let id = activation.child_id().clone();
        if park {
            match world
                .runtime
                .interrupt(&id, &InterruptAuthority::User)
                .await
            {
                Ok(_) => {}
                // Settled and released between its start and the
                // interrupt: it cannot be parked; start another.
                Err(SubagentError::Agent(AgentError::Disposed(_))) => continue,
                Err(err) => panic!("interrupting child {id}: {err}"),
            }
            if world.runtime.registry().get(&id).is_none() {
                continue;
            }
        } else {
            activation.result().await.unwrap();
        }
        ids.push(id);
    }
    ids
}

/// Wait until every child has settled and the root is idle again.
async fn quiesce(world: &World) {
    loop {
        world.root.agent().wait_idle().await;
        if world.runtime.live_activations() == 0 && world.root.agent().status() == AgentStatus::Idle
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Wait until every child is idle (resident, parked) and the root is idle.
async fn settle_parked(world: &World, ids: &[SessionId]) {
    for id in ids {
        if let Some(agent) = world.runtime.registry().get(id) {
            agent.wait_idle().await;
        }
    }
    world.root.agent().wait_idle().await;
}

async fn send_all(world: &World, ids: &[SessionId]) {
    let root: &Arc<dyn Agent> = world.root.agent();
    let cancel = CancellationToken::new();
    for id in ids {
        world
            .runtime
            .send_message(root, id, vec![ContentBlock::text("more")], &cancel)
            .await
            .unwrap();
    }
}

fn message(c: &mut Criterion) {
    let rt = tokio_runtime();
    let mut group = c.benchmark_group("message");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(MESSAGED as u64));

    // Cold: every child settled and left; each send resumes its target,
    // which runs a turn and settles again (its notice reaches the root).
    // Timed: the sends and that settling, until every child is cold again
    // and the root idle ("resume, turn, settle"). Each iteration builds a
    // fresh tree (untimed), so no iteration finds what an earlier one
    // learned or a root history grown by earlier notices.
    group.bench_function("1000-cold", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let world = make_world().await;
                    let ids = start_children(&world, MESSAGED, false).await;
                    quiesce(&world).await;
                    let start = Instant::now();
                    send_all(&world, &ids).await;
                    quiesce(&world).await;
                    spent += start.elapsed();
                    world.runtime.shutdown().await;
                    world.root.dispose().await;
                    world.harness.shutdown().await;
                }
                spent
            })
        });
    });

    // Live: every child resident and idle (parked by an interrupt). A send
    // wakes it, so each iteration parks a fresh set.
    group.bench_function("1000-live", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let world = make_world().await;
                    let ids = start_children(&world, MESSAGED, true).await;
                    settle_parked(&world, &ids).await;
                    // Rarely a child settles in the instant before its park;
                    // message only the resident ones.
                    let ids: Vec<SessionId> = ids
                        .into_iter()
                        .filter(|id| world.runtime.registry().get(id).is_some())
                        .collect();
                    let start = Instant::now();
                    send_all(&world, &ids).await;
                    spent += start.elapsed();
                    world.runtime.shutdown().await;
                    world.root.dispose().await;
                    world.harness.shutdown().await;
                }
                spent
            })
        });
    });
    group.finish();
}

criterion_group!(benches, list, list_large, resume, message);
criterion_main!(benches);
