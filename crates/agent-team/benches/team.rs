//! The team's costs, on the real harness over a JSONL store (no fsync):
//!
//! - `fold/replay_100k`: folding a lead log of 100,000 team events (8
//!   members, 256 tasks and their revisions, queued and delivered messages)
//!   already in memory, in events/s;
//! - `fold/parse_and_replay_100k`: the same from the log's JSONL lines;
//! - `live/task_update`: one compare-and-set task edit through [`Team`]
//!   (check, append to the lead's log, apply);
//! - `live/message_to_resident`: one quiet message to a resident teammate,
//!   queued, injected and acknowledged;
//! - `live/message_to_cold`: one waking message to a cold teammate, queued,
//!   delivered through a resume and acknowledged (the teammate's turn and
//!   its going cold again are not timed).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_agent_team::{
    CreateTask, DeliveredRecord, DeliveryMode, MemberContext, MemberPhase, MemberRecord,
    MessageRecord, SendMessage, SpawnTeammate, TaskAction, TaskRecord, TaskStatus, Team,
    TeamConfig, TeamEvent, TeamId, TeamLimits, UpdateTask, fold_team,
};
use dsh_core::{ContentBlock, Durability, EventPayload, MessageId, SessionEvent, SessionId};
use dsh_harness::Scripted;
use dsh_subagent::RuntimeConfig;
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::wait::until;
use dsh_test_support::world::{Backing, World};

const EVENTS: usize = 100_000;

fn event(seq: usize, record: &TeamEvent) -> SessionEvent {
    SessionEvent {
        seq: seq as u64,
        time: 1_700_000_000_000,
        payload: EventPayload::Extension {
            kind: record.kind().into(),
            payload: record.to_payload().unwrap(),
        },
    }
}

/// A valid lead log of exactly [`EVENTS`] team events.
fn lead_log(team: &TeamId) -> Vec<SessionEvent> {
    let mut records = Vec::with_capacity(EVENTS);
    let names: Vec<String> = (0..8).map(|n| format!("member-{n}")).collect();
    for name in &names {
        for phase in [MemberPhase::Provisioning, MemberPhase::Active] {
            records.push(TeamEvent::Member(MemberRecord {
                team: team.clone(),
                id: SessionId::new(format!("s-{name}")).unwrap(),
                name: name.clone(),
                description: "bench".into(),
                provider: "spawn".into(),
                context: MemberContext::Fresh,
                phase,
                error: None,
                worktree: None,
            }));
        }
    }
    let mut tasks: Vec<TaskRecord> = Vec::new();
    for n in 1..=256 {
        let task = TaskRecord {
            team: team.clone(),
            id: format!("task-{n}"),
            revision: 1,
            subject: format!("task {n}"),
            description: "a task of the bench".into(),
            status: TaskStatus::Pending,
            owner: None,
            blocked_by: if n > 1 {
                vec![format!("task-{}", n - 1)]
            } else {
                Vec::new()
            },
            write_scopes: vec![format!("src/module-{n}")],
            by: "lead".into(),
            note: None,
        };
        records.push(TeamEvent::Task(task.clone()));
        tasks.push(task);
    }
    let mut round = 0usize;
    while records.len() < EVENTS {
        round += 1;
        let to = &names[round % names.len()];
        let id = MessageId::new(format!("m-{round}"));
        records.push(TeamEvent::Message(MessageRecord {
            team: team.clone(),
            id: id.clone(),
            from: "lead".into(),
            to: to.clone(),
            delivery: DeliveryMode::Wakeup,
            content: vec![ContentBlock::text(format!("message {round}"))],
        }));
        records.push(TeamEvent::Delivered(DeliveredRecord {
            team: team.clone(),
            id,
            to: to.clone(),
        }));
        let count = tasks.len();
        let task = &mut tasks[round % count];
        task.revision += 1;
        task.subject = format!("task {} (edit {round})", task.id);
        records.push(TeamEvent::Task(task.clone()));
    }
    records.truncate(EVENTS);
    records
        .iter()
        .enumerate()
        .map(|(seq, record)| event(seq, record))
        .collect()
}

fn fold(c: &mut Criterion) {
    let team = TeamId(SessionId::new("lead").unwrap());
    let log = lead_log(&team);
    let lines: Vec<String> = log.iter().map(SessionEvent::to_json_line).collect();
    let state = fold_team(&team, &log);
    assert!(state.refused().is_empty(), "{:?}", &state.refused()[..1]);
    assert_eq!(state.applied(), EVENTS as u64);
    let mut group = c.benchmark_group("fold");
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.sample_size(10);
    group.bench_function("replay_100k", |b| b.iter(|| fold_team(&team, &log)));
    group.bench_function("parse_and_replay_100k", |b| {
        b.iter(|| {
            let events: Vec<SessionEvent> = lines
                .iter()
                .map(|line| SessionEvent::from_json_line(line).unwrap())
                .collect();
            fold_team(&team, &events)
        });
    });
    group.finish();
}

async fn team_world() -> (World, Team) {
    let world = World::new(Backing::Jsonl(Durability::None), RuntimeConfig::default()).await;
    world
        .runtime
        .register(Arc::new(SpawnProvider::new()))
        .unwrap();
    let config = TeamConfig {
        limits: TeamLimits {
            max_pending_per_member: usize::MAX,
            ..TeamLimits::default()
        },
        ..TeamConfig::default()
    };
    let (team, _) = Team::open(
        world.root.agent().clone(),
        world.runtime.clone(),
        world.store.clone(),
        config,
    )
    .await
    .unwrap();
    (world, team)
}

async fn spawn(team: &Team, name: &str) -> SessionId {
    team.spawn_teammate(
        team.lead(),
        SpawnTeammate {
            name: name.into(),
            description: String::new(),
            prompt: vec![ContentBlock::text("bench")],
            context: MemberContext::Fresh,
            worktree: false,
        },
    )
    .await
    .unwrap()
    .id
}

fn live(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("live");
    group.throughput(Throughput::Elements(1));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));

    let (world, team) = rt.block_on(team_world());
    let lead = world.root.agent().clone();
    rt.block_on(team.create_task(
        &lead,
        CreateTask {
            subject: "edited".into(),
            ..CreateTask::default()
        },
    ))
    .unwrap();
    let mut revision = 1;
    group.bench_function("task_update", |b| {
        b.iter(|| {
            let view = rt
                .block_on(team.update_task(
                    &lead,
                    UpdateTask {
                        id: "task-1".into(),
                        expected_revision: revision,
                        action: TaskAction::Edit {
                            subject: Some(format!("edit {revision}")),
                            description: None,
                            blocked_by: None,
                            write_scopes: None,
                        },
                    },
                ))
                .unwrap();
            revision = view.task.revision;
        });
    });

    // A resident teammate: its first turn hangs, so it stays live.
    world.model.push(Scripted::Hang);
    let resident = rt.block_on(spawn(&team, "resident"));
    rt.block_on(until(|| world.runtime.registry().get(&resident).is_some()));
    group.bench_function("message_to_resident", |b| {
        b.iter(|| {
            let sent = rt
                .block_on(team.send_message(
                    &lead,
                    SendMessage {
                        to: "resident".into(),
                        content: vec![ContentBlock::text("fyi")],
                        delivery: DeliveryMode::Quiet,
                    },
                ))
                .unwrap();
            assert!(sent.delivered);
        });
    });
    rt.block_on(async {
        team.interrupt(&lead, "resident").await.unwrap();
    });

    let cold = rt.block_on(spawn(&team, "cold"));
    group.bench_function("message_to_cold", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                rt.block_on(until(|| world.runtime.registry().get(&cold).is_none()));
                let start = Instant::now();
                let sent = rt
                    .block_on(team.send_message(
                        &lead,
                        SendMessage {
                            to: "cold".into(),
                            content: vec![ContentBlock::text("wake up")],
                            delivery: DeliveryMode::Wakeup,
                        },
                    ))
                    .unwrap();
                total += start.elapsed();
                assert!(sent.delivered);
            }
            total
        });
    });
    group.finish();
}

criterion_group!(benches, fold, live);
criterion_main!(benches);
