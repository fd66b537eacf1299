//! Teardown after a reply (issue 16, field run item 8): an agent that has
//! answered its turn but ignores stdin EOF is escalated after the short
//! answered grace, not the long mid-turn EOF grace, and the whole process
//! group is gone when `dispose` returns. The mid-turn graces here are far
//! longer than the tests' bound, so waiting one out fails the test; the
//! measured times are printed, never asserted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use dsh_core::{CancellationToken, ContentBlock, StopReason};
use dsh_subagent::{ResolvedStartRequest, SubagentRun};
use support::*;

/// A rogue agent that ignores EOF, with mid-turn graces no test waits out.
fn deaf(peers: &Peers) -> dsh_subagent_acp::AcpConfig {
    peers
        .rogue(&["--ignore-eof"])
        .graces(Duration::from_secs(600), Duration::from_secs(600))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answered_run_that_ignores_eof_is_disposed_after_the_short_grace() {
    let peers = peers();
    let world = world(vec![deaf(&peers)]).await;
    let provider = world.providers[0].clone();
    let run = bounded(
        "start",
        provider.start_run(ResolvedStartRequest {
            label: "a task".into(),
            cwd: world.project(),
            prompt: vec![ContentBlock::text("say hello")],
            parent: world.lead.clone(),
            agent_options: None,
            agent_preset: None,
            output_schema: None,
            max_depth: None,
            tool_filter: None,
            persona: None,
            cancel: CancellationToken::new(),
        }),
    )
    .await
    .unwrap();
    // The result settles from the agent's answer, before any teardown.
    let result = bounded("the run's result", run.result()).await.unwrap();
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(text(&result), "hello");
    // The agent ignores EOF: it is still there after its answer.
    assert_eq!(world.processes().len(), 1, "{:?}", world.processes());

    let started = Instant::now();
    bounded("dispose after end_turn", run.dispose())
        .await
        .unwrap();
    eprintln!(
        "run.dispose after end_turn (agent ignores EOF): {:?}",
        started.elapsed()
    );
    world.assert_no_process_left();
    // Dispose does not rewrite the agent's verdict.
    assert_eq!(
        run.result().await.unwrap().stop_reason,
        StopReason::COMPLETED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activation_on_an_agent_that_ignores_eof_settles_without_the_mid_turn_grace() {
    let peers = peers();
    let world = world(vec![deaf(&peers)]).await;
    let started = Instant::now();
    let activation = world.start(world.spec("acp", "say hello")).await;
    let result = result_of(&activation).await;
    eprintln!(
        "activation start to result (agent ignores EOF): {:?}",
        started.elapsed()
    );
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(text(&result), "hello");
    bounded("dispose", activation.dispose()).await.unwrap();
    world.assert_no_process_left();
}
