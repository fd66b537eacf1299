//! Shared builders for the team suites: a test-support world (JSONL store,
//! harness, scripted model, runtime) with the real spawn and fork providers
//! registered, a team opened on its root, and small queries over logs.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_agent_team::{
    DeliveryMode, MemberContext, MemberPhase, MemberRecord, MemberView, SendMessage, SendOutcome,
    SpawnTeammate, Team, TeamConfig, TeamEvent, TeamId, TeamState,
};
use dsh_core::{Agent, ContentBlock, Durability, EventPayload, MessageId, SessionEvent, SessionId};
use dsh_subagent::RuntimeConfig;
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{Backing, World};

/// A world with `spawn` and `fork` registered.
pub async fn world() -> World {
    let world = World::new(Backing::Jsonl(Durability::None), RuntimeConfig::default()).await;
    providers(&world);
    world
}

/// Register the real providers in `world`'s runtime.
pub fn providers(world: &World) {
    world
        .runtime
        .register(Arc::new(SpawnProvider::new()))
        .unwrap();
    world
        .runtime
        .register(Arc::new(ForkProvider::new()))
        .unwrap();
}

/// A world of a later process over `from`'s logs, providers registered.
pub async fn restarted(from: &std::path::Path) -> World {
    let world = World::restarted(from, Durability::None).await;
    providers(&world);
    world
}

/// The world's root.
pub fn lead(world: &World) -> Arc<dyn Agent> {
    world.root.agent().clone()
}

/// A member record of `world`'s team, `provisioning` (a start that never
/// finished).
pub fn provisioning(world: &World, name: &str, id: &SessionId) -> MemberRecord {
    MemberRecord {
        team: TeamId(lead(world).id().clone()),
        id: id.clone(),
        name: name.into(),
        description: String::new(),
        provider: "spawn".into(),
        context: MemberContext::Fresh,
        phase: MemberPhase::Provisioning,
        error: None,
        worktree: None,
    }
}

/// The live teammate `name`, once it is resident.
pub async fn resident(world: &World, team: &Team, name: &str) -> Arc<dyn Agent> {
    let id = team.state().member(name).unwrap().record.id.clone();
    until(|| world.runtime.registry().get(&id).is_some()).await;
    world.runtime.registry().get(&id).unwrap()
}

/// Open the team of `world`'s root with `config`.
pub async fn open_with(world: &World, config: TeamConfig) -> Team {
    let (team, recovery) = bounded(Team::open(
        lead(world),
        world.runtime.clone(),
        world.store.clone(),
        config,
    ))
    .await
    .expect("the team opens");
    assert!(recovery.errors.is_empty(), "{recovery:?}");
    team
}

/// Open the team of `world`'s root with the default configuration.
pub async fn open(world: &World) -> Team {
    open_with(world, TeamConfig::default()).await
}

/// Text content.
pub fn text(text: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::text(text)]
}

/// Spawn teammate `name` as the lead.
pub async fn spawn(team: &Team, name: &str, context: MemberContext) -> MemberView {
    bounded(team.spawn_teammate(
        team.lead(),
        SpawnTeammate {
            name: name.into(),
            description: format!("{name}'s work"),
            prompt: text(&format!("you are {name}")),
            context,
            worktree: false,
        },
    ))
    .await
    .expect("the teammate spawns")
}

/// Send `content` from `from` to `to`.
pub async fn send(
    team: &Team,
    from: &Arc<dyn Agent>,
    to: &str,
    content: &str,
    delivery: DeliveryMode,
) -> SendOutcome {
    bounded(team.send_message(
        from,
        SendMessage {
            to: to.into(),
            content: text(content),
            delivery,
        },
    ))
    .await
    .expect("the message is accepted")
}

/// The team records of a log.
pub fn team_records(events: &[SessionEvent]) -> Vec<TeamEvent> {
    events
        .iter()
        .filter_map(TeamEvent::from_event)
        .map(|record| record.expect("a team record parses"))
        .collect()
}

/// How many times a log accepted message `id`.
pub fn accepted(events: &[SessionEvent], id: &MessageId) -> usize {
    events
        .iter()
        .filter(|event| {
            matches!(&event.payload, EventPayload::InboxAccepted(accepted) if &accepted.message.id == id)
        })
        .count()
}

/// A stored or live log's events.
pub async fn events_of(world: &World, id: &SessionId) -> Vec<SessionEvent> {
    match world.runtime.registry().get(id) {
        Some(agent) => agent.events(),
        None => {
            use dsh_core::SessionStore;
            world.store.load(id).await.expect("the log loads").events
        }
    }
}

/// The parts of a state that must survive a restart.
pub fn essentials(state: &TeamState) -> String {
    format!(
        "{:?}\n{:?}\n{:?}",
        state.members(),
        state.tasks(),
        state.messages()
    )
}
