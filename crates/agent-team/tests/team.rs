//! The team against the real harness, JSONL store and spawn/fork
//! providers: replay after a restart (B47), the roster's phases, names and
//! limits (B48), the mailbox (B49), the task board's compare-and-set and
//! graph rules (B50), authority, and records inherited through a fork.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use dsh_agent_team::{
    CreateTask, DeliveryMode, MemberContext, MemberPhase, MemberStatus, SendMessage, SpawnTeammate,
    TaskAction, TaskStatus, Team, TeamConfig, TeamId, TeamLimits, UpdateTask, WaitOutcome,
    fold_team, heading,
};
use dsh_core::{
    Agent, AgentFactory, CancellationToken, ContentBlock, CreateAgent, EventPayload, MessageSource,
    SessionHeader, UserMessage,
};
use dsh_harness::Scripted;
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::sid;
use support::*;

fn task(subject: &str) -> CreateTask {
    CreateTask {
        subject: subject.into(),
        ..CreateTask::default()
    }
}

async fn update(
    team: &Team,
    caller: &Arc<dyn Agent>,
    id: &str,
    expected_revision: u64,
    action: TaskAction,
) -> Result<dsh_agent_team::TaskView, &'static str> {
    bounded(team.update_task(
        caller,
        UpdateTask {
            id: id.into(),
            expected_revision,
            action,
        },
    ))
    .await
    .map_err(|err| err.code())
}

fn blockers(ids: &[&str]) -> TaskAction {
    TaskAction::Edit {
        subject: None,
        description: None,
        blocked_by: Some(ids.iter().map(|id| (*id).to_owned()).collect()),
        write_scopes: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_after_restart_yields_the_same_roster_board_and_mailbox() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    let alice = spawn(&team, "alice", MemberContext::Fresh).await;
    let bob = spawn(&team, "bob", MemberContext::Fork).await;
    assert_eq!(
        (alice.phase, bob.phase),
        (MemberPhase::Active, MemberPhase::Active)
    );
    world.quiesce().await;

    let woke = send(&team, &lead, "alice", "hello alice", DeliveryMode::Wakeup).await;
    assert!(woke.delivered);
    world.quiesce().await;
    let quiet = send(&team, &lead, "bob", "for later", DeliveryMode::Quiet).await;
    assert!(
        !quiet.delivered,
        "a quiet message waits for an inactive target"
    );

    let first = bounded(team.create_task(&lead, task("design")))
        .await
        .unwrap();
    let second = bounded(team.create_task(
        &lead,
        CreateTask {
            blocked_by: vec![first.task.id.clone()],
            write_scopes: vec!["./src//".into()],
            ..task("build")
        },
    ))
    .await
    .unwrap();
    assert!(first.ready && !second.ready);
    update(
        &team,
        &lead,
        "task-1",
        1,
        TaskAction::Assign {
            owner: "alice".into(),
        },
    )
    .await
    .unwrap();
    let done = update(&team, &lead, "task-1", 2, TaskAction::Complete)
        .await
        .unwrap();
    assert_eq!(done.task.status, TaskStatus::Completed);
    assert!(team.get_task(&lead, "task-2").unwrap().ready);
    assert_eq!(
        team.get_task(&lead, "task-2").unwrap().task.write_scopes,
        ["src"]
    );
    world.quiesce().await;

    let live = team.state();
    assert_eq!(
        essentials(&live),
        essentials(&fold_team(&team.id(), &lead.events())),
        "the live state is the fold of the log"
    );
    assert!(live.refused().is_empty());
    let alice_log = events_of(&world, &alice.id).await;
    assert_eq!(accepted(&alice_log, &woke.id), 1);

    let later = restarted(world.dir()).await;
    let reopened = open(&later).await;
    assert_eq!(essentials(&reopened.state()), essentials(&live));
    let statuses: Vec<MemberStatus> = reopened.roster().iter().map(|row| row.status).collect();
    assert_eq!(
        statuses,
        [
            MemberStatus::Idle,
            MemberStatus::Inactive,
            MemberStatus::Inactive
        ],
        "live status is derived after a restart, never replayed"
    );
    assert_eq!(reopened.roster()[2].pending_messages, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_target_sees_one_message_naming_its_id_and_sender() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    let alice = spawn(&team, "alice", MemberContext::Fresh).await;
    world.quiesce().await;
    let content = vec![
        ContentBlock::text("part one"),
        ContentBlock::text("part two"),
    ];
    let sent = bounded(team.send_message(
        &lead,
        SendMessage {
            to: "alice".into(),
            content: content.clone(),
            delivery: DeliveryMode::Wakeup,
        },
    ))
    .await
    .unwrap();
    world.quiesce().await;
    let log = events_of(&world, &alice.id).await;
    let messages: Vec<&UserMessage> = log
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::UserMessage(entry) if entry.message.id == sent.id => Some(&entry.message),
            _ => None,
        })
        .collect();
    assert_eq!(messages.len(), 1, "claimed exactly once");
    let mut expected = vec![ContentBlock::text(heading(&sent.id, "lead"))];
    expected.extend(content);
    assert_eq!(messages[0].content, expected);
    // Delivered whole through the runtime's resume: the cold target's log
    // keeps the team's source, not the runtime's `user` one.
    assert_eq!(messages[0].source.kind(), "team-message");
    let MessageSource::Other { fields, .. } = &messages[0].source else {
        panic!("{:?}", messages[0].source);
    };
    assert_eq!(fields["sender_name"], "lead");
    assert_eq!(fields["message_id"], sent.id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_refuses_stale_revisions_bad_edges_and_deleting_a_blocker() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    bounded(team.create_task(&lead, task("one"))).await.unwrap();
    bounded(team.create_task(
        &lead,
        CreateTask {
            blocked_by: vec!["task-1".into()],
            ..task("two")
        },
    ))
    .await
    .unwrap();
    let written = team_records(&lead.events()).len();

    assert_eq!(
        update(&team, &lead, "task-1", 7, TaskAction::Complete)
            .await
            .err(),
        Some("TEAM_TASK_STALE_REVISION")
    );
    assert_eq!(
        update(&team, &lead, "task-1", 1, blockers(&["task-2"]))
            .await
            .err(),
        Some("TEAM_TASK_INVALID_DEPENDENCY"),
        "a cycle"
    );
    assert_eq!(
        update(&team, &lead, "task-1", 1, blockers(&["task-1"]))
            .await
            .err(),
        Some("TEAM_TASK_INVALID_DEPENDENCY"),
        "a self edge"
    );
    let twice = bounded(team.create_task(
        &lead,
        CreateTask {
            blocked_by: vec!["task-1".into(), "task-1".into()],
            ..task("three")
        },
    ))
    .await;
    assert_eq!(
        twice.err().map(|err| err.code()),
        Some("TEAM_TASK_INVALID_DEPENDENCY")
    );
    let unknown = bounded(team.create_task(
        &lead,
        CreateTask {
            blocked_by: vec!["task-9".into()],
            ..task("three")
        },
    ))
    .await;
    assert_eq!(
        unknown.err().map(|err| err.code()),
        Some("TEAM_TASK_NOT_FOUND")
    );
    assert_eq!(
        update(&team, &lead, "task-1", 1, TaskAction::Delete)
            .await
            .err(),
        Some("TEAM_TASK_HAS_DEPENDENTS")
    );
    assert_eq!(
        update(&team, &lead, "task-2", 1, TaskAction::Claim)
            .await
            .err(),
        Some("TEAM_INVALID_TRANSITION"),
        "a blocked task cannot start"
    );
    assert_eq!(
        team_records(&lead.events()).len(),
        written,
        "nothing refused was written"
    );

    // A revision moves on by one; the old one is stale from then on.
    update(&team, &lead, "task-1", 1, TaskAction::Complete)
        .await
        .unwrap();
    assert_eq!(
        update(&team, &lead, "task-1", 1, TaskAction::Reopen)
            .await
            .err(),
        Some("TEAM_TASK_STALE_REVISION")
    );
    // Deleting the dependent first frees its blocker; the tombstone stays.
    update(&team, &lead, "task-2", 1, TaskAction::Delete)
        .await
        .unwrap();
    update(&team, &lead, "task-1", 2, TaskAction::Delete)
        .await
        .unwrap();
    assert!(team.list_tasks(&lead).unwrap().is_empty());
    assert_eq!(
        team.get_task(&lead, "task-2").unwrap().task.status,
        TaskStatus::Deleted
    );
    assert_eq!(
        update(&team, &lead, "task-2", 2, TaskAction::Reopen)
            .await
            .err(),
        Some("TEAM_INVALID_TRANSITION"),
        "a tombstone is final"
    );
    let next = bounded(team.create_task(&lead, task("after")))
        .await
        .unwrap();
    assert_eq!(next.task.id, "task-3", "ids are never reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_scope_overlaps_warn_but_never_lock() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    bounded(team.create_task(
        &lead,
        CreateTask {
            write_scopes: vec!["src".into()],
            ..task("one")
        },
    ))
    .await
    .unwrap();
    bounded(team.create_task(
        &lead,
        CreateTask {
            write_scopes: vec!["./src/a/".into(), "docs".into()],
            ..task("two")
        },
    ))
    .await
    .unwrap();
    let bad = bounded(team.create_task(
        &lead,
        CreateTask {
            write_scopes: vec!["../elsewhere".into()],
            ..task("three")
        },
    ))
    .await;
    assert_eq!(bad.err().map(|err| err.code()), Some("TEAM_INVALID_SCOPE"));
    assert!(team.get_task(&lead, "task-2").unwrap().warnings.is_empty());
    update(&team, &lead, "task-1", 1, TaskAction::Claim)
        .await
        .unwrap();
    let two = team.get_task(&lead, "task-2").unwrap();
    assert_eq!(
        two.warnings,
        ["write scope `src/a` overlaps `src` of in-progress task-1"]
    );
    let claimed = update(&team, &lead, "task-2", 1, TaskAction::Claim)
        .await
        .unwrap();
    assert_eq!(
        claimed.task.status,
        TaskStatus::InProgress,
        "a warning, not a lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_enforced_with_their_own_codes() {
    let world = world().await;
    let config = TeamConfig {
        limits: TeamLimits {
            max_members: 1,
            max_live_tasks: 2,
            max_pending_per_member: 1,
            max_message_bytes: 100,
        },
        ..TeamConfig::default()
    };
    let team = open_with(&world, config).await;
    let lead = lead(&world);
    spawn(&team, "alice", MemberContext::Fresh).await;
    let second = bounded(team.spawn_teammate(
        &lead,
        SpawnTeammate {
            name: "bob".into(),
            description: String::new(),
            prompt: text("hi"),
            context: MemberContext::Fresh,
            worktree: false,
        },
    ))
    .await;
    assert_eq!(
        second.err().map(|err| err.code()),
        Some("TEAM_MEMBER_LIMIT")
    );

    bounded(team.create_task(&lead, task("one"))).await.unwrap();
    bounded(team.create_task(&lead, task("two"))).await.unwrap();
    let third = bounded(team.create_task(&lead, task("three"))).await;
    assert_eq!(third.err().map(|err| err.code()), Some("TEAM_TASK_LIMIT"));
    update(&team, &lead, "task-2", 1, TaskAction::Delete)
        .await
        .unwrap();
    bounded(team.create_task(&lead, task("three")))
        .await
        .expect("a tombstone frees a slot");

    world.quiesce().await;
    let large = bounded(team.send_message(
        &lead,
        SendMessage {
            to: "alice".into(),
            content: text(&"x".repeat(100)),
            delivery: DeliveryMode::Quiet,
        },
    ))
    .await;
    assert_eq!(
        large.err().map(|err| err.code()),
        Some("TEAM_MESSAGE_TOO_LARGE")
    );
    let queued = send(&team, &lead, "alice", "one", DeliveryMode::Quiet).await;
    assert!(!queued.delivered);
    let full = bounded(team.send_message(
        &lead,
        SendMessage {
            to: "alice".into(),
            content: text("two"),
            delivery: DeliveryMode::Wakeup,
        },
    ))
    .await;
    assert_eq!(full.err().map(|err| err.code()), Some("TEAM_MAILBOX_LIMIT"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_member_keeps_its_name_and_names_follow_the_rules() {
    let world = world().await;
    let config = TeamConfig {
        fresh_provider: "missing".into(),
        ..TeamConfig::default()
    };
    let team = open_with(&world, config).await;
    let lead = lead(&world);
    let request = |name: &str| SpawnTeammate {
        name: name.into(),
        description: String::new(),
        prompt: text("hi"),
        context: MemberContext::Fresh,
        worktree: false,
    };
    let failed = bounded(team.spawn_teammate(&lead, request("alice"))).await;
    assert_eq!(failed.err().map(|err| err.code()), Some("NO_PROVIDER"));
    let row = &team.roster()[1];
    assert_eq!(
        (row.name.as_str(), row.phase),
        ("alice", MemberPhase::Failed)
    );
    assert!(row.error.is_some());
    let phases: Vec<MemberPhase> = team_records(&lead.events())
        .into_iter()
        .filter_map(|record| match record {
            dsh_agent_team::TeamEvent::Member(member) => Some(member.phase),
            _ => None,
        })
        .collect();
    assert_eq!(phases, [MemberPhase::Provisioning, MemberPhase::Failed]);
    let again = bounded(team.spawn_teammate(&lead, request("alice"))).await;
    assert_eq!(again.err().map(|err| err.code()), Some("TEAM_NAME_TAKEN"));
    for bad in ["Alice", "lead", "a--b"] {
        let refused = bounded(team.spawn_teammate(&lead, request(bad))).await;
        assert_eq!(
            refused.err().map(|err| err.code()),
            Some("TEAM_INVALID_NAME"),
            "{bad}"
        );
    }
    let long = "a".repeat(64);
    let fork = bounded(team.spawn_teammate(
        &lead,
        SpawnTeammate {
            context: MemberContext::Fork,
            ..request(&long)
        },
    ))
    .await
    .expect("a 64-character name is a team name even though the runtime's are shorter");
    assert_eq!(fork.phase, MemberPhase::Active);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teammate_cannot_spawn_assign_or_interrupt_and_the_lead_can() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    world.model.push(Scripted::Hang);
    spawn(&team, "alice", MemberContext::Fresh).await;
    let alice = resident(&world, &team, "alice").await;
    until(|| alice.status() == dsh_core::AgentStatus::Running).await;

    let spawned = bounded(team.spawn_teammate(
        &alice,
        SpawnTeammate {
            name: "bob".into(),
            description: String::new(),
            prompt: text("hi"),
            context: MemberContext::Fresh,
            worktree: false,
        },
    ))
    .await;
    assert_eq!(
        spawned.err().map(|err| err.code()),
        Some("TEAM_UNAUTHORIZED")
    );
    // A quiet message reaches a resident member at once, keeping its source.
    let quiet = send(&team, &lead, "alice", "context", DeliveryMode::Quiet).await;
    assert!(quiet.delivered);
    let held = alice
        .events()
        .into_iter()
        .find_map(|event| match event.payload {
            EventPayload::InboxAccepted(accepted) if accepted.message.id == quiet.id => {
                Some(accepted)
            }
            _ => None,
        });
    let held = held.expect("alice's inbox holds the quiet message");
    assert_eq!(held.message.source.kind(), "team-message");
    assert!(!held.wake, "a quiet message does not wake");

    let interrupted = bounded(team.interrupt(&alice, "alice")).await;
    assert_eq!(
        interrupted.err().map(|err| err.code()),
        Some("TEAM_UNAUTHORIZED")
    );

    bounded(team.create_task(&alice, task("hers")))
        .await
        .expect("any member creates");
    bounded(team.create_task(&lead, task("the lead's")))
        .await
        .unwrap();
    assert_eq!(
        update(
            &team,
            &alice,
            "task-2",
            1,
            TaskAction::Assign {
                owner: "alice".into()
            }
        )
        .await
        .err(),
        Some("TEAM_UNAUTHORIZED")
    );
    update(&team, &alice, "task-1", 1, TaskAction::Claim)
        .await
        .expect("a member claims");
    assert_eq!(
        update(&team, &alice, "task-2", 1, TaskAction::Delete)
            .await
            .err(),
        Some("TEAM_UNAUTHORIZED"),
        "only the owner or the lead"
    );
    update(
        &team,
        &lead,
        "task-2",
        1,
        TaskAction::Assign {
            owner: "alice".into(),
        },
    )
    .await
    .expect("the lead assigns");
    let roster = team.list_members(&alice).unwrap();
    assert_eq!(roster[1].owned_tasks, ["task-1", "task-2"]);

    let previous = bounded(team.interrupt(&lead, "alice")).await.unwrap();
    assert_eq!(previous, MemberStatus::Running);
    bounded(alice.wait_idle()).await;
    let kept = team.get_task(&lead, "task-1").unwrap();
    assert_eq!(
        kept.task.owner.as_deref(),
        Some("alice"),
        "an interrupt keeps ownership"
    );

    // Stopping gives every task back, each with a durable record.
    let released = bounded(team.stop(&lead, "alice")).await.unwrap();
    assert_eq!(released, ["task-1", "task-2"]);
    let freed = team.get_task(&lead, "task-1").unwrap().task;
    assert_eq!((freed.status, freed.owner), (TaskStatus::Pending, None));
    assert_eq!(
        freed.note.as_deref(),
        Some("released: the owner `alice` was stopped")
    );
    assert_eq!(
        essentials(&team.state()),
        essentials(&fold_team(&team.id(), &lead.events()))
    );

    // A child of the lead outside the roster is no member.
    world.model.push(Scripted::Hang);
    let mut spec = world.spec(Some("outsider"));
    spec.provider = "spawn".into();
    let outsider = bounded(world.runtime.start_activation(spec)).await.unwrap();
    let outsider = world.runtime.registry().get(outsider.child_id()).unwrap();
    let refused = bounded(team.create_task(&outsider, task("not mine"))).await;
    assert_eq!(
        refused.err().map(|err| err.code()),
        Some("TEAM_NOT_A_MEMBER")
    );
    assert_eq!(
        bounded(team.interrupt(&lead, "outsider"))
            .await
            .err()
            .map(|err| err.code()),
        Some("TEAM_UNKNOWN_MEMBER")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_inherited_through_a_fork_never_enter_the_new_roots_team() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    spawn(&team, "alice", MemberContext::Fresh).await;
    bounded(team.create_task(&lead, task("inherited")))
        .await
        .unwrap();
    world.quiesce().await;
    // A turn after the records, so the completed-turn prefix holds them.
    lead.followup(UserMessage::user_text("carry on"))
        .await
        .unwrap();
    world.quiesce().await;
    let seed = lead.completed_prefix();
    assert!(!fold_team(&team.id(), &seed).tasks().is_empty());

    let heir = world
        .harness
        .create(CreateAgent {
            header: SessionHeader::new(sid("heir"), world.dir()),
            seed,
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
    let (heirs, _) = bounded(Team::open(
        heir.agent().clone(),
        world.runtime.clone(),
        world.store.clone(),
        TeamConfig::default(),
    ))
    .await
    .unwrap();
    let state = heirs.state();
    assert!(state.members().is_empty() && state.tasks().is_empty());
    assert!(
        state.refused().is_empty(),
        "foreign records are skipped, not refused"
    );
    assert_eq!(state.team(), &TeamId(sid("heir")));
    let created = bounded(heirs.create_task(heir.agent(), task("own")))
        .await
        .unwrap();
    assert_eq!(created.task.id, "task-1");
    let member = bounded(heirs.spawn_teammate(
        heir.agent(),
        SpawnTeammate {
            name: "alice".into(),
            description: String::new(),
            prompt: text("hi"),
            context: MemberContext::Fresh,
            worktree: false,
        },
    ))
    .await
    .expect("the inherited name is free in the new team");
    assert_eq!(member.phase, MemberPhase::Active);
    world.quiesce().await;
    heir.dispose().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_sees_one_edge_after_it_began_and_checks_its_bound() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    let cancel = CancellationToken::new();
    let short = team
        .wait_for_change(&lead, Duration::from_secs(1), &cancel)
        .await;
    assert_eq!(
        short.err().map(|err| err.code()),
        Some("TEAM_INVALID_REQUEST")
    );
    let long = team
        .wait_for_change(&lead, Duration::from_secs(7200), &cancel)
        .await;
    assert_eq!(
        long.err().map(|err| err.code()),
        Some("TEAM_INVALID_REQUEST")
    );

    let idle = bounded(team.wait_for_progress(&lead, Duration::from_secs(600), &cancel))
        .await
        .unwrap();
    assert_eq!(idle, WaitOutcome::NoProgress, "nobody else is working");

    bounded(team.create_task(&lead, task("before")))
        .await
        .unwrap();
    let never = CancellationToken::new();
    let mut wait = std::pin::pin!(team.wait_for_change(&lead, Duration::from_secs(600), &never));
    // The earlier change is not replayed: the wait is registered and waiting.
    assert!(futures::poll!(wait.as_mut()).is_pending());
    bounded(team.create_task(&lead, task("after")))
        .await
        .unwrap();
    assert_eq!(bounded(wait).await.unwrap(), WaitOutcome::Changed);

    let mut cancelled =
        std::pin::pin!(team.wait_for_change(&lead, Duration::from_secs(600), &cancel));
    assert!(futures::poll!(cancelled.as_mut()).is_pending());
    cancel.cancel();
    let err = bounded(cancelled).await.unwrap_err();
    assert_eq!(err.code(), "CANCELLED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_fails_gives_its_tasks_back_with_a_durable_record() {
    let world = world().await;
    let team = open(&world).await;
    let lead = lead(&world);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    world.model.push(Scripted::Gated {
        gate: gate.clone(),
        then: Box::new(Scripted::Fail(dsh_core::ModelError::new(
            dsh_core::ModelErrorKind::Transport,
            "the connection dropped",
        ))),
    });
    spawn(&team, "alice", MemberContext::Fresh).await;
    let alice = resident(&world, &team, "alice").await;
    bounded(team.create_task(&lead, task("hers")))
        .await
        .unwrap();
    update(&team, &alice, "task-1", 1, TaskAction::Claim)
        .await
        .unwrap();
    gate.add_permits(1);
    until(|| team.get_task(&lead, "task-1").unwrap().task.owner.is_none()).await;
    let freed = team.get_task(&lead, "task-1").unwrap().task;
    assert_eq!((freed.status, freed.revision), (TaskStatus::Pending, 3));
    assert_eq!(
        freed.note.as_deref(),
        Some("released: the owner `alice` failed")
    );
    world.quiesce().await;
    until(|| !team.is_busy()).await;
    assert_eq!(
        essentials(&team.state()),
        essentials(&fold_team(&team.id(), &lead.events()))
    );
}
