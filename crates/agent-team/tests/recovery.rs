//! Recovery when the lead comes back: a `provisioning` member is decided by
//! its own log, both ways (B48); the mailbox's queued-minus-delivered set is
//! delivered in order, and a message its target already holds is only
//! acknowledged, never delivered again (B49).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_agent_team::{
    DeliveryMode, MEMBER_EVENT, MESSAGE_EVENT, MemberContext, MemberPhase, MessageRecord, Team,
    TeamConfig, TeamId,
};
use dsh_core::{Agent, MessageId, SessionId};
use dsh_subagent::{PromptDelivery, TrustedHost, UserPrompt};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::World;
use support::*;

async fn reopen(world: &World) -> (Team, dsh_agent_team::Recovery) {
    bounded(Team::open(
        lead(world),
        world.runtime.clone(),
        world.store.clone(),
        TeamConfig::default(),
    ))
    .await
    .expect("the team opens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioning_member_without_a_child_becomes_failed() {
    let world = world().await;
    let lead = lead(&world);
    let record = provisioning(&world, "ghost", &SessionId::generate());
    lead.record(
        MEMBER_EVENT,
        dsh_core::ExtensionPayload::new(&record).unwrap(),
    )
    .await
    .unwrap();
    let (team, recovery) = reopen(&world).await;
    assert_eq!(recovery.failed, ["ghost"]);
    assert!(recovery.activated.is_empty());
    let row = &team.roster()[1];
    assert_eq!(row.phase, MemberPhase::Failed);
    assert!(row.error.as_deref().unwrap().contains("interrupted"));
    // Decided once: opening again changes nothing.
    let (_, again) = reopen(&world).await;
    assert_eq!(again, dsh_agent_team::Recovery::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioning_member_whose_log_proves_it_becomes_active() {
    let world = world().await;
    let lead = lead(&world);
    let id = SessionId::generate();
    let record = provisioning(&world, "alice", &id);
    lead.record(
        MEMBER_EVENT,
        dsh_core::ExtensionPayload::new(&record).unwrap(),
    )
    .await
    .unwrap();
    // The start went through, and the process stopped before `active`.
    let mut spec = world.spec(Some("alice"));
    spec.provider = "spawn".into();
    spec.child_id = Some(id.clone());
    bounded(world.runtime.start_activation(spec)).await.unwrap();
    world.quiesce().await;

    let later = restarted(world.dir()).await;
    let (team, recovery) = reopen(&later).await;
    assert_eq!(recovery.activated, ["alice"]);
    assert_eq!(team.roster()[1].phase, MemberPhase::Active);
    let woke = send(
        &team,
        &lead_of(&later),
        "alice",
        "still there?",
        DeliveryMode::Wakeup,
    )
    .await;
    assert!(woke.delivered, "the recovered member takes messages");
    later.quiesce().await;
    assert_eq!(accepted(&events_of(&later, &id).await, &woke.id), 1);
}

fn lead_of(world: &World) -> std::sync::Arc<dyn Agent> {
    lead(world)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_acknowledges_what_the_target_holds_and_delivers_the_rest_in_order() {
    let world = world().await;
    let (team, _) = reopen(&world).await;
    let alice = spawn(&team, "alice", MemberContext::Fresh).await;
    world.quiesce().await;
    team.shutdown().await;
    drop(team);

    // Two queued messages: the first reached alice's inbox before the
    // process stopped (no acknowledgement), the second did not.
    let lead = lead(&world);
    let queue = |id: &str, text_: &str| MessageRecord {
        team: TeamId(lead.id().clone()),
        id: MessageId::new(id),
        from: "lead".into(),
        to: "alice".into(),
        delivery: DeliveryMode::Wakeup,
        content: text(text_),
    };
    for record in [queue("m-held", "first"), queue("m-lost", "second")] {
        lead.record(
            MESSAGE_EVENT,
            dsh_core::ExtensionPayload::new(&record).unwrap(),
        )
        .await
        .unwrap();
    }
    bounded(world.runtime.prompt(
        UserPrompt {
            child: alice.id.clone(),
            request_id: MessageId::new("m-held"),
            content: text("first"),
            attachments: Vec::new(),
            client_time_zone: None,
            delivery: PromptDelivery::Queue,
        },
        &TrustedHost,
        &dsh_core::CancellationToken::new(),
    ))
    .await
    .unwrap();
    world.quiesce().await;

    let (team, recovery) = reopen(&world).await;
    assert_eq!(recovery.delivered, 2);
    assert_eq!(team.state().pending().count(), 0);
    world.quiesce().await;
    until(|| !team.is_busy()).await;
    let log = events_of(&world, &alice.id).await;
    assert_eq!(accepted(&log, &MessageId::new("m-held")), 1, "never twice");
    assert_eq!(accepted(&log, &MessageId::new("m-lost")), 1, "never lost");
    let order: Vec<usize> = ["m-held", "m-lost"]
        .iter()
        .map(|id| {
            log.iter()
                .position(|event| {
                    matches!(&event.payload, dsh_core::EventPayload::InboxAccepted(a) if a.message.id.as_str() == *id)
                })
                .unwrap()
        })
        .collect();
    assert!(order[0] < order[1], "queue order");
}
