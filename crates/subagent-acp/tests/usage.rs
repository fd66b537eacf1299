//! Usage rolled up a tree whose leaf is a real ACP agent: the lead starts
//! `a` (spawn), which holds its first turn while it starts `f` (fork) and
//! `x`, the rogue agent, which reports input, output and thought tokens at
//! the end of its turn. `x`'s reported usage (its thought tokens as
//! reasoning) is its result's, and it counts in `a`'s subtree next to `f`'s
//! and `a`'s own, in `a`'s result and in a cold listing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use dsh_core::{EventPayload, StopReason, Usage};
use dsh_subagent::SubagentResult;
use dsh_subagent_acp::AcpProvider;
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{WorldBuilder, models, named_spec, sid};
use support::{MARK_VAR, peers, quick};
use tokio::sync::Semaphore;

fn sum(parts: &[Usage]) -> Usage {
    let mut total = Usage::default();
    for part in parts {
        total += *part;
    }
    total
}

async fn result_of(activation: &dsh_subagent::SubagentActivation) -> SubagentResult {
    bounded(activation.result()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_childs_reported_usage_rolls_up_with_spawn_and_fork_children() {
    let peers = peers();
    let gate = Arc::new(Semaphore::new(0));
    let (model, _scripts) = models::keyed(&gate);
    let acp = AcpProvider::new(
        quick(peers.rogue(&[])).env(MARK_VAR, dsh_core::SessionId::generate().to_string()),
    )
    .unwrap();
    let world = WorldBuilder::project()
        .model(model)
        .provider(Arc::new(SpawnProvider::new()))
        .provider(Arc::new(ForkProvider::new()))
        .provider(Arc::new(acp))
        .build()
        .await;
    let lead = world.lead();

    let a = bounded(
        world
            .runtime
            .start_activation(named_spec(&lead, "spawn", "a", "hold-a")),
    )
    .await
    .unwrap();
    let a_agent = world.live(&sid("s-a"));
    // `a` is held only if its first request carries its prompt alone: wait
    // for its first step to start (its inbox is claimed by then), or `f`'s
    // notice could reach that claim first and `a` would answer at once and
    // be gone before `x` starts under it (one run in about 30 under load).
    bounded(until(|| {
        a_agent
            .events()
            .iter()
            .any(|event| matches!(event.payload, EventPayload::StepStart(_)))
    }))
    .await;
    let f = bounded(
        world
            .runtime
            .start_activation(named_spec(&a_agent, "fork", "f", "fork work")),
    )
    .await
    .unwrap();
    let f_result = result_of(&f).await;
    assert_eq!(f_result.stop_reason, StopReason::COMPLETED);

    let mut x_spec = named_spec(&a_agent, "acp", "x", "usage 100 20 7; say external done");
    x_spec.child_id = None;
    let x = bounded(world.runtime.start_activation(x_spec))
        .await
        .unwrap();
    let x_result = result_of(&x).await;
    assert_eq!(x_result.stop_reason, StopReason::COMPLETED, "{x_result:?}");
    let reported = Usage {
        input_tokens: 100,
        output_tokens: 20,
        reasoning_tokens: 7,
        ..Usage::default()
    };
    assert_eq!(
        (x_result.usage, x_result.subtree_usage),
        (reported, reported),
        "the agent's reported usage, thought tokens as reasoning"
    );

    gate.add_permits(1);
    let a_result = result_of(&a).await;
    assert_eq!(a_result.stop_reason, StopReason::COMPLETED);
    assert_eq!(
        a_result.subtree_usage,
        sum(&[a_result.usage, f_result.usage, reported]),
        "a's subtree is its own usage, the fork's and the ACP child's"
    );
    world.quiesce().await;

    let rows = world.descendants().await.unwrap();
    let row = |name: &str| {
        rows.iter()
            .find(|row| row.entry.name.as_deref() == Some(name))
            .unwrap()
    };
    assert_eq!(row("a").usage.subtree, a_result.subtree_usage);
    assert_eq!(row("x").usage.own, reported, "the cold listing keeps it");
}
