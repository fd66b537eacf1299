//! Usage roll-up and budgets over real providers: a three-level tree of
//! spawn, fork and external children whose usage adds up per activation and
//! per subtree (in results, notices, `subagent/end` and cold listings); a
//! budget exhausted mid-turn at depth 2 that stops only that subtree; a
//! start refused before it runs because it cannot fit in its parent's
//! budget; and a child stopped by its time limit under paused tokio time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use dsh_core::EventPayload;
use dsh_core::{ContentBlock, StopReason, Usage};
use dsh_harness::{Scripted, ScriptedModel};
use dsh_subagent::{
    ActivationSpec, CATALOG_EVENT, RunOutcome, SubagentEvent, SubagentResult, USAGE_EVENT,
};
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{
    ExternalProvider, World, WorldBuilder, models, named_spec, notices_from, sid,
};
use serde_json::json;
use tokio::sync::Semaphore;

/// A JSONL world with `spawn`, `fork` and a held external provider `ext`.
async fn world(
    model: &Arc<ScriptedModel>,
    ext: &Arc<ExternalProvider>,
) -> World<dyn dsh_core::SessionStore> {
    WorldBuilder::project()
        .model(model.clone())
        .provider(Arc::new(SpawnProvider::new()))
        .provider(Arc::new(ForkProvider::new()))
        .provider(ext.clone())
        .build()
        .await
}

fn text(result: &SubagentResult) -> String {
    dsh_core::content::joined_text(&result.output)
}

async fn result_of(activation: &dsh_subagent::SubagentActivation) -> SubagentResult {
    bounded(activation.result()).await.unwrap()
}

async fn start(
    world: &World<dyn dsh_core::SessionStore>,
    spec: ActivationSpec,
) -> dsh_subagent::SubagentActivation {
    bounded(world.runtime.start_activation(spec)).await.unwrap()
}

fn sum(parts: &[Usage]) -> Usage {
    let mut total = Usage::default();
    for part in parts {
        total += *part;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_rolls_up_a_tree_of_spawn_fork_and_external_children() {
    let gate = Arc::new(Semaphore::new(0));
    let (model, _scripts) = models::keyed(&gate);
    let ext = Arc::new(ExternalProvider::held("ext"));
    let world = world(&model, &ext).await;
    let lead = world.lead();
    let (_listening, mut events) = world.runtime.subscribe_tree(lead.id());

    // `a` (spawn) holds its first turn while it delegates twice.
    let a = start(&world, named_spec(&lead, "spawn", "a", "hold-a")).await;
    let a_agent = world.live(&sid("s-a"));
    let f = start(&world, named_spec(&a_agent, "fork", "f", "fork work")).await;
    let f_result = result_of(&f).await;
    assert_eq!(f_result.stop_reason, StopReason::COMPLETED);
    assert_ne!(f_result.usage, Usage::default(), "the model reported usage");
    assert_eq!(
        f_result.subtree_usage, f_result.usage,
        "a leaf's subtree is itself"
    );

    let mut x_spec = named_spec(&a_agent, "ext", "x", "external work");
    x_spec.child_id = None;
    let x = start(&world, x_spec).await;
    let reported = Usage {
        input_tokens: 100,
        output_tokens: 20,
        cached_input_tokens: 10,
        reasoning_tokens: 7,
    };
    ext.run(0).settle(SubagentResult {
        output: vec![ContentBlock::text("external done")],
        usage: reported,
        ..SubagentResult::stopped(StopReason::COMPLETED)
    });
    let x_result = result_of(&x).await;
    assert_eq!(
        (x_result.usage, x_result.subtree_usage),
        (reported, reported)
    );

    gate.add_permits(1);
    let a_result = result_of(&a).await;
    assert_eq!(a_result.stop_reason, StopReason::COMPLETED);
    assert_eq!(
        a_result.subtree_usage,
        sum(&[a_result.usage, f_result.usage, reported]),
        "a's subtree is its own usage and both children's"
    );
    world.quiesce().await;

    // `subagent/end` carries the totals.
    let mut ended = None;
    while let Ok(event) = events.try_recv() {
        if let SubagentEvent::End(info, RunOutcome::Settled(result)) = event
            && info.child_id == sid("s-a")
        {
            ended = Some(result);
        }
    }
    assert_eq!(ended.unwrap().subtree_usage, a_result.subtree_usage);

    // The notice says it in one line.
    let notices = notices_from(&lead, "s-a");
    assert_eq!(notices.len(), 1);
    insta::assert_snapshot!("notice_with_usage", notices[0].1);

    // A cold listing (every child is gone) shows the recorded totals.
    assert!(world.registry().get(&sid("s-a")).is_none());
    let rows = world.descendants().await.unwrap();
    let row = |name: &str| {
        rows.iter()
            .find(|row| row.entry.name.as_deref() == Some(name))
            .unwrap()
    };
    assert_eq!(row("a").usage.own, a_result.usage);
    assert_eq!(row("a").usage.subtree, a_result.subtree_usage);
    assert_eq!(row("f").usage.subtree, f_result.usage);
    assert_eq!(row("x").usage.own, reported);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_exhausted_mid_turn_at_depth_two_stops_that_subtree_only() {
    let gate = Arc::new(Semaphore::new(0));
    let (model, scripts) = models::keyed(&gate);
    let ext = Arc::new(ExternalProvider::held("ext"));
    let world = world(&model, &ext).await;
    let lead = world.lead();

    let one = start(&world, named_spec(&lead, "spawn", "one", "hold-one")).await;
    let one_agent = world.live(&sid("s-one"));
    let sibling = start(&world, named_spec(&one_agent, "spawn", "sib", "hold-sib")).await;

    // `spend` says something and calls a tool, then its next step hangs:
    // the first step's usage is over its budget, so it is stopped mid-turn.
    let step = Arc::new(Semaphore::new(0));
    scripts.script(
        "spend",
        [
            models::gated(
                &step,
                Scripted::ToolCalls {
                    text: Some("partial findings".into()),
                    calls: vec![("no_such_tool".into(), json!({}))],
                },
            ),
            Scripted::Hang,
        ],
    );
    let mut spec = named_spec(&one_agent, "spawn", "spend", "spend");
    spec.request.token_budget = Some(3);
    let spend = start(&world, spec).await;
    let spend_agent = world.live(&sid("s-spend"));
    let deep = start(
        &world,
        named_spec(&spend_agent, "spawn", "deep", "hold-deep"),
    )
    .await;
    step.add_permits(1);

    let spent = result_of(&spend).await;
    assert_eq!(spent.stop_reason, StopReason::BUDGET_EXHAUSTED);
    assert_eq!(
        text(&spent),
        "partial findings",
        "the partial output is kept"
    );
    assert!(
        spent.diagnostic.as_deref().unwrap().contains("budget of 3"),
        "{:?}",
        spent.diagnostic
    );
    assert_eq!(result_of(&deep).await.stop_reason, StopReason::ABORTED);

    // The parent got the reason; it and its other child run on.
    until(|| !notices_from(&one_agent, "s-spend").is_empty()).await;
    let notices = notices_from(&one_agent, "s-spend");
    assert_eq!(notices[0].0, Some(StopReason::BUDGET_EXHAUSTED));
    assert!(
        notices[0].1.contains("partial findings"),
        "{}",
        notices[0].1
    );
    assert!(world.registry().get(&sid("s-one")).is_some());
    assert!(world.registry().get(&sid("s-sib")).is_some());

    gate.add_permits(2);
    assert_eq!(result_of(&sibling).await.stop_reason, StopReason::COMPLETED);
    let one_result = result_of(&one).await;
    assert_eq!(one_result.stop_reason, StopReason::COMPLETED);
    let mut inside = one_result.usage;
    inside += spent.subtree_usage;
    assert!(
        one_result.subtree_usage.input_tokens >= inside.input_tokens,
        "the stopped subtree's usage still counts above it"
    );
    world.quiesce().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_cannot_fit_in_its_parents_budget_is_refused_before_it_runs() {
    let gate = Arc::new(Semaphore::new(0));
    let (model, _scripts) = models::keyed(&gate);
    let ext = Arc::new(ExternalProvider::held("ext"));
    let world = world(&model, &ext).await;
    let lead = world.lead();

    let mut spec = named_spec(&lead, "spawn", "boss", "hold-boss");
    spec.request.token_budget = Some(100);
    let boss = start(&world, spec).await;
    let boss_agent = world.live(&sid("s-boss"));

    let mut greedy = named_spec(&boss_agent, "spawn", "greedy", "work");
    greedy.request.token_budget = Some(500);
    let err = bounded(world.runtime.start_activation(greedy))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "OVER_BUDGET");
    assert!(
        err.to_string().contains("Ask for at most 100 tokens"),
        "{err}"
    );
    let cataloged = boss_agent.events().iter().any(|event| {
        matches!(&event.payload, EventPayload::Extension { kind, .. } if kind == CATALOG_EVENT)
    });
    assert!(!cataloged, "nothing ran and nothing was recorded");
    assert!(world.store.load(&sid("s-greedy")).await.is_err());

    // A budget the external provider can meter is refused by one that
    // cannot, like any start-time flag.
    let mut metered = named_spec(&boss_agent, "ext", "metered", "work");
    metered.request.token_budget = Some(10);
    let probe = Arc::new(dsh_test_support::world::Probe::new(
        "blind",
        true,
        dsh_subagent::SubagentCapabilities {
            token_budget: false,
            ..dsh_subagent::SubagentCapabilities::ALL
        },
    ));
    world.runtime.register(probe.clone()).unwrap();
    metered.provider = "blind".into();
    let err = bounded(world.runtime.start_activation(metered))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "UNSUPPORTED_CAPABILITY");
    assert!(err.to_string().contains("token_budget"), "{err}");
    assert_eq!(probe.calls(), 0);

    boss.dispose().await.unwrap();
    world.quiesce().await;
}

#[tokio::test(start_paused = true)]
async fn a_child_past_its_time_limit_is_stopped_as_timed_out() {
    let gate = Arc::new(Semaphore::new(0));
    let (model, _scripts) = models::keyed(&gate);
    let world = WorldBuilder::new()
        .memory()
        .model(model)
        .provider(Arc::new(SpawnProvider::new()))
        .build()
        .await;
    let lead = world.lead();
    let mut spec = named_spec(&lead, "spawn", "slow", "hold-slow");
    spec.request.time_limit = Some(Duration::from_secs(30));
    let slow = world.runtime.start_activation(spec).await.unwrap();
    // Paused time moves on only when every task waits: the child's limit
    // is the first timer to fire, well before this bound.
    let result = tokio::time::timeout(Duration::from_secs(3600), slow.result())
        .await
        .expect("the limit stops the child")
        .unwrap();
    assert_eq!(result.stop_reason, StopReason::TIMED_OUT);
    assert!(
        result
            .diagnostic
            .as_deref()
            .unwrap()
            .contains("time limit of 30 s"),
        "{:?}",
        result.diagnostic
    );
    let notices = notices_from(&lead, "s-slow");
    assert_eq!(notices[0].0, Some(StopReason::TIMED_OUT));
    let recorded = lead.events().iter().any(|event| {
        matches!(&event.payload, EventPayload::Extension { kind, .. } if kind == USAGE_EVENT)
    });
    assert!(
        recorded,
        "a settled child's usage is recorded in its parent's log"
    );
}
