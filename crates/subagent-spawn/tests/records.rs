//! The runtime's own records as they are on disk: the lines one spawn
//! child's start and settlement add to the parent's log (its catalog entry
//! and its usage record) and to the child's log (its activation record),
//! byte for byte, on the real JSONL store. The runtime serialises each
//! record once, straight from its type, so a payload's keys come in the
//! type's declaration order (the value tree this replaced sorted them;
//! readers parse either, `catalog::tests`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_core::{Durability, SessionId, SessionStore};
use dsh_harness::{Scripted, ScriptedModel};
use dsh_subagent::Delivery;
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::world::{World, WorldBuilder, caller_spec};

/// The `subagent/*` lines of `id`'s log, in order, with `child` written
/// as `<child>` and the event time as `<time>`.
fn runtime_lines(world: &World<dyn SessionStore>, id: &SessionId, child: &SessionId) -> String {
    let text = std::fs::read_to_string(world.jsonl().log_path(id)).unwrap();
    text.lines()
        .filter(|line| line.contains("\"type\":\"subagent/"))
        .map(|line| {
            let line = line.replace(child.as_str(), "<child>");
            let time_at = line.find("\"time\":").unwrap() + "\"time\":".len();
            let time_end = time_at + line[time_at..].find(',').unwrap();
            format!("{}<time>{}", &line[..time_at], &line[time_end..])
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn a_childs_records_are_written_as_before() {
    let model = Arc::new(
        ScriptedModel::new()
            .without_recording()
            .responder(|_| Scripted::Text("done".into())),
    );
    let world = WorldBuilder::project()
        .jsonl(Durability::EveryEvent)
        .model(model)
        .provider(Arc::new(SpawnProvider::new()))
        .build()
        .await;
    let lead = world.lead();
    for delivery in [Delivery::Caller, Delivery::Parent] {
        let mut spec = caller_spec(&lead, "spawn", "work");
        spec.delivery = delivery;
        let activation = world.start(spec).await;
        activation.result().await.unwrap();
        let child = activation.child_id().clone();
        insta::assert_snapshot!(
            format!("parent-{delivery:?}"),
            runtime_lines(&world, lead.id(), &child)
                .lines()
                .filter(|line| line.contains("<child>"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        insta::assert_snapshot!(
            format!("child-{delivery:?}"),
            runtime_lines(&world, &child, &child)
        );
    }
}
