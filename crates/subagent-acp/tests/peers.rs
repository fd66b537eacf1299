//! The `acp` provider through the subagent runtime against ACP agents
//! nobody on this team wrote, installed from the registries by
//! `peers/install.sh`: the TypeScript SDK's example agent (a five-step turn
//! with tool calls and one permission request) and the Python SDK's example
//! and echo agents. Covers the happy path with output and progress (B37),
//! both permission policies (B39), cancel mid-turn (B40), an agent killed
//! mid-turn (B41), image prompts refused for an agent that does not take
//! them, and many concurrent children. Every test ends by checking the
//! process table: no process it started is left.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use dsh_core::{ContentBlock, StopReason};
use dsh_subagent_acp::{AcpProgress, PermissionPolicy, ProgressUpdate};
use support::*;

/// The progress updates alone (run ids are random).
fn updates(events: &[AcpProgress]) -> Vec<ProgressUpdate> {
    events.iter().map(|event| event.update.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b37_b39_the_typescript_example_completes_with_its_message_as_output_and_the_rest_as_progress()
 {
    let peers = peers();
    let world = world(vec![peers.ts().permission(PermissionPolicy::Allow)]).await;
    let (_subscription, mut progress) = world.progress(0);
    let activation = world.start(world.spec("acp", "Improve the project")).await;
    let result = result_of(&activation).await;

    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(result.diagnostic, None);
    assert_eq!(
        text(&result),
        "I'll help you with that. Let me start by reading some files to understand the current \
         situation.\n\nNow I understand the project structure. I need to make some changes to \
         improve it.\n\nPerfect! I've successfully updated the configuration. The changes have \
         been applied.",
        "each message a paragraph apart (the agent's tool calls end them)"
    );
    let events = drain(&mut progress);
    assert!(
        events
            .iter()
            .all(|event| &event.run_id == activation.child_id())
    );
    // Tool calls and the permission decision are progress, never output.
    assert!(!text(&result).contains("Reading project files"));
    insta::assert_json_snapshot!(updates(&events));
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b39_the_default_policy_rejects_the_permission_request() {
    let peers = peers();
    let world = world(vec![peers.ts()]).await;
    let (_subscription, mut progress) = world.progress(0);
    let result = world.run("acp", "Improve the project").await;

    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert!(
        text(&result).ends_with(
            "\n\nI understand you prefer not to make that change. I'll skip the configuration update."
        ),
        "{}",
        text(&result)
    );
    let decisions: Vec<ProgressUpdate> = updates(&drain(&mut progress))
        .into_iter()
        .filter(|update| matches!(update, ProgressUpdate::Permission { .. }))
        .collect();
    assert_eq!(
        decisions,
        [ProgressUpdate::Permission {
            tool_call_id: "call_2".into(),
            granted: false
        }]
    );
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b37_the_python_examples_answer_with_their_streamed_text() {
    let peers = peers();
    let world = world(vec![
        peers.py("agent.py").name("py-example"),
        peers.py("echo_agent.py").name("py-echo"),
    ])
    .await;
    let (example, echo) = tokio::join!(
        world.run("py-example", "What is in this directory?"),
        world.run("py-echo", "echo me"),
    );
    assert_eq!(example.stop_reason, StopReason::COMPLETED);
    assert_eq!(text(&example), "Client sent:What is in this directory?");
    assert_eq!(echo.stop_reason, StopReason::COMPLETED);
    assert_eq!(text(&echo), "echo me");
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b40_cancel_mid_turn_settles_aborted_with_the_partial_output_and_stops_the_agent() {
    let peers = peers();
    let world = world(vec![peers.ts().permission(PermissionPolicy::Allow)]).await;
    let (_subscription, mut progress) = world.progress(0);
    let activation = world.start(world.spec("acp", "Improve the project")).await;
    // The first chunk arrived; the agent now waits a second before its next step.
    progress_until(&mut progress, |event| {
        matches!(event.update, ProgressUpdate::Message { .. })
    })
    .await;
    bounded("dispose", activation.dispose()).await.unwrap();
    let result = result_of(&activation).await;

    assert_eq!(result.stop_reason, StopReason::ABORTED);
    assert_eq!(
        text(&result),
        "I'll help you with that. Let me start by reading some files to understand the current situation."
    );
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b41_an_agent_killed_mid_turn_settles_error_naming_the_signal() {
    let peers = peers();
    let world = world(vec![peers.ts().permission(PermissionPolicy::Allow)]).await;
    let (_subscription, mut progress) = world.progress(0);
    let activation = world.start(world.spec("acp", "Improve the project")).await;
    progress_until(&mut progress, |event| {
        matches!(event.update, ProgressUpdate::Message { .. })
    })
    .await;
    let agents = world.processes_once(1).await;
    assert_eq!(agents.len(), 1, "{agents:?}");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(agents[0].pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let result = result_of(&activation).await;

    assert_eq!(result.stop_reason, StopReason::ERROR);
    insta::assert_snapshot!(result.diagnostic.clone().unwrap(), @"the ACP agent was killed by signal 9 (SIGKILL) during the prompt turn");
    assert!(text(&result).starts_with("I'll help you with that."));
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b37_an_image_prompt_is_refused_for_an_agent_that_does_not_take_images() {
    let peers = peers();
    let world = world(vec![peers.py("agent.py")]).await;
    let mut spec = world.spec("acp", "What is in this picture?");
    spec.request.prompt.push(ContentBlock::Image {
        media_type: "image/png".into(),
        data: "iVBORw0KGgo=".into(),
    });
    let err = bounded("start", world.runtime.start_activation(spec))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "PROVIDER_FAILED");
    insta::assert_snapshot!(err.to_string(), @"provider `acp` failed: the ACP agent does not accept images (promptCapabilities.image is false), and the prompt has 1 image block(s)");
    assert_eq!(world.runtime.live_activations(), 0);
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_children_each_settle_with_their_own_output() {
    const TS: usize = 12;
    const ECHO: usize = 4;
    let peers = peers();
    let world = world(vec![
        peers.ts().permission(PermissionPolicy::Allow),
        peers.py("echo_agent.py").name("py-echo"),
    ])
    .await;
    let world = Arc::new(world);
    let mut runs = Vec::new();
    for index in 0..TS + ECHO {
        let world = world.clone();
        runs.push(tokio::spawn(async move {
            if index < TS {
                world.run("acp", &format!("task {index}")).await
            } else {
                world.run("py-echo", &format!("echo {index}")).await
            }
        }));
    }
    for (index, run) in runs.into_iter().enumerate() {
        let result = bounded("a concurrent child", run).await.unwrap();
        assert_eq!(result.stop_reason, StopReason::COMPLETED, "child {index}");
        if index < TS {
            assert!(text(&result).ends_with("The changes have been applied."));
        } else {
            assert_eq!(text(&result), format!("echo {index}"));
        }
    }
    assert_eq!(world.runtime.live_activations(), 0);
    world.assert_no_process_left();
}
