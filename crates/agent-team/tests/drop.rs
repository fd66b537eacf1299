//! Drop tests of every public async method of [`Team`] (B51): a store call
//! the method makes is held at a gate, the method's future is polled until
//! it is parked there and dropped, the gate is released, and what is left
//! is checked: the work either never began or finished whole (a member
//! reaches a terminal phase, a queued message is delivered once, a task
//! revision is written once), and the live state is the fold of the log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::time::Duration;

use dsh_agent_team::{
    CreateTask, DeliveryMode, MEMBER_EVENT, MemberContext, MemberPhase, SendMessage, SpawnTeammate,
    TaskAction, TaskStatus, Team, TeamConfig, TeamEvent, UpdateTask, fold_team,
};
use dsh_core::{CancellationToken, SessionId};
use dsh_harness::Scripted;
use dsh_test_support::store::Gate;
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{Op, Point, When, World};
use support::*;

/// Poll `work` until `gate` holds its store call, drop it there, release.
async fn drop_at_gate<F: Future>(gate: &Gate, work: F) {
    let mut work = Box::pin(work);
    tokio::select! {
        biased;
        () = bounded(gate.reached()) => {}
        _ = &mut work => panic!("the work finished before it reached the gate"),
    }
    drop(work);
    gate.release();
}

fn lead_append(world: &World) -> Point {
    Point {
        op: Op::Append,
        id: lead(world).id().clone(),
        when: When::Before,
    }
}

/// Wait until the team's detached work and the world are quiet.
async fn settled(world: &World, team: &Team) {
    until(|| !team.is_busy()).await;
    world.quiesce().await;
    until(|| !team.is_busy()).await;
    assert_eq!(
        essentials(&team.state()),
        essentials(&fold_team(&team.id(), &lead(world).events())),
        "the live state is the fold of the log"
    );
    assert!(team.state().refused().is_empty());
}

fn member_phases(world: &World, name: &str) -> Vec<MemberPhase> {
    team_records(&lead(world).events())
        .into_iter()
        .filter_map(|record| match record {
            TeamEvent::Member(member) if member.name == name => Some(member.phase),
            _ => None,
        })
        .collect()
}

fn request(name: &str) -> SpawnTeammate {
    SpawnTeammate {
        name: name.into(),
        description: String::new(),
        prompt: text("hi"),
        context: MemberContext::Fresh,
        worktree: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_dropped_at_any_write_still_reaches_a_terminal_phase() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    // At the provisioning record, at the child's creation, and at the
    // catalog entry the runtime writes in the lead's log.
    for name in ["alice", "bob", "carol"] {
        // Armed only now: a gate catches the next matching call.
        let gate = match name {
            "alice" => world.hold(&lead_append(&world)),
            "bob" => world.store.inner().gate(Op::Create, When::Before),
            _ => world.store.inner().gate(Op::Create, When::After),
        };
        drop_at_gate(&gate, team.spawn_teammate(&lead, request(name))).await;
        settled(&world, &team).await;
        assert_eq!(
            member_phases(&world, name),
            [MemberPhase::Provisioning, MemberPhase::Active],
            "{name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_dropped_at_any_write_is_delivered_exactly_once() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    let alice = spawn(&team, "alice", MemberContext::Fresh).await;
    world.quiesce().await;
    let at_target = || Point {
        op: Op::Append,
        id: alice.id.clone(),
        when: When::Before,
    };
    for n in 0..2 {
        let gate = if n == 0 {
            world.hold(&lead_append(&world))
        } else {
            world.hold(&at_target())
        };
        let before = team.state().messages().len();
        drop_at_gate(
            &gate,
            team.send_message(
                &lead,
                SendMessage {
                    to: "alice".into(),
                    content: text(&format!("message {n}")),
                    delivery: DeliveryMode::Wakeup,
                },
            ),
        )
        .await;
        settled(&world, &team).await;
        let state = team.state();
        let messages = state.messages();
        assert_eq!(messages.len(), before + 1, "queued once");
        let last = messages.last().unwrap();
        assert!(last.delivered, "delivered all the same");
        assert_eq!(
            accepted(&events_of(&world, &alice.id).await, &last.record.id),
            1
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_writes_dropped_at_the_append_are_written_once() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    let gate = world.hold(&lead_append(&world));
    drop_at_gate(
        &gate,
        team.create_task(
            &lead,
            CreateTask {
                subject: "one".into(),
                ..CreateTask::default()
            },
        ),
    )
    .await;
    settled(&world, &team).await;
    assert_eq!(team.state().tasks().len(), 1);

    let gate = world.hold(&lead_append(&world));
    let claim = UpdateTask {
        id: "task-1".into(),
        expected_revision: 1,
        action: TaskAction::Claim,
    };
    drop_at_gate(&gate, team.update_task(&lead, claim)).await;
    settled(&world, &team).await;
    let task = team.get_task(&lead, "task-1").unwrap().task;
    assert_eq!((task.revision, task.status), (2, TaskStatus::InProgress));
    let revisions = team_records(&lead.events())
        .into_iter()
        .filter(|record| matches!(record, TeamEvent::Task(_)))
        .count();
    assert_eq!(revisions, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_dropped_at_a_release_still_releases_every_task() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    world.model.push(Scripted::Hang);
    spawn(&team, "alice", MemberContext::Fresh).await;
    let alice = resident(&world, &team, "alice").await;
    for subject in ["one", "two"] {
        bounded(team.create_task(
            &alice,
            CreateTask {
                subject: subject.into(),
                ..CreateTask::default()
            },
        ))
        .await
        .unwrap();
    }
    for id in ["task-1", "task-2"] {
        bounded(team.update_task(
            &alice,
            UpdateTask {
                id: id.into(),
                expected_revision: 1,
                action: TaskAction::Claim,
            },
        ))
        .await
        .unwrap();
    }
    let gate = world.hold(&lead_append(&world));
    drop_at_gate(&gate, team.stop(&lead, "alice")).await;
    until(|| !team.is_busy()).await;
    for task in team.board() {
        assert_eq!(
            (task.task.status, task.task.owner),
            (TaskStatus::Pending, None)
        );
    }
    assert_eq!(
        essentials(&team.state()),
        essentials(&fold_team(&team.id(), &lead.events()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_dropped_during_recovery_still_decides_the_member_once() {
    let world = world().await;
    let lead = lead(&world);
    let ghost = provisioning(&world, "ghost", &SessionId::generate());
    lead.record(
        MEMBER_EVENT,
        dsh_core::ExtensionPayload::new(&ghost).unwrap(),
    )
    .await
    .unwrap();
    let gate = world.hold(&lead_append(&world));
    drop_at_gate(
        &gate,
        Team::open(
            lead.clone(),
            world.runtime.clone(),
            world.store.clone(),
            TeamConfig::default(),
        ),
    )
    .await;
    until(|| member_phases(&world, "ghost").len() == 2).await;
    let team = open(&world).await;
    assert_eq!(
        member_phases(&world, "ghost"),
        [MemberPhase::Provisioning, MemberPhase::Failed]
    );
    assert_eq!(team.roster()[1].phase, MemberPhase::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_wait_or_an_interrupt_leaves_nothing() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    world.model.push(Scripted::Hang);
    let _alice_row = spawn(&team, "alice", MemberContext::Fresh).await;
    let alice = resident(&world, &team, "alice").await;
    until(|| alice.status() == dsh_core::AgentStatus::Running).await;
    let written = lead.events().len();

    let never = CancellationToken::new();
    let mut wait = Box::pin(team.wait_for_change(&lead, Duration::from_secs(600), &never));
    assert!(futures::poll!(wait.as_mut()).is_pending());
    drop(wait);

    // An interrupt's only awaits are the runtime's lineage reads, in memory
    // for a resident target: a future dropped before it runs does nothing.
    drop(team.interrupt(&lead, "alice"));
    assert_eq!(
        alice.status(),
        dsh_core::AgentStatus::Running,
        "not interrupted"
    );
    assert_eq!(lead.events().len(), written, "nothing written");
    bounded(team.interrupt(&lead, "alice")).await.unwrap();
    bounded(alice.wait_idle()).await;
}
