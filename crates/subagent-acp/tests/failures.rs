//! The `acp` provider against this crate's own test agent
//! (`tests/agents/rogue_agent.py`, standard-library Python driven by its
//! prompt) for what the real agents cannot do: ignore cancel, EOF and
//! SIGTERM with a grandchild in the group, never answer `initialize`,
//! write garbage, exit non-zero, close stdout, answer with an error (its
//! message and data shown, bounded, configured values masked), stop
//! for every reason. Also: a command that does not exist, a start abandoned
//! by its caller, the environment and directory a child gets (B37), the
//! capability refusals before any process starts and the catalog and
//! messaging rules of external children (B42). Every test ends by checking
//! the process table.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use dsh_core::schema::ObjectSchema;
use dsh_core::{AgentOptions, CancellationToken, ContentBlock, StopReason, ToolRestriction};
use dsh_subagent::{ChildMode, Delivery, ResolvedStartRequest, SubagentRun, fold_catalog};
use dsh_subagent_acp::{AcpConfig, DEFAULT_INHERITED_ENV, ProgressUpdate};
use support::*;

/// Run `script` on a rogue agent started with `args` and return the result.
async fn rogue_result(args: &[&str], script: &str) -> (World, dsh_subagent::SubagentResult) {
    let peers = peers();
    let world = world(vec![quick(peers.rogue(args))]).await;
    let result = world.run("acp", script).await;
    (world, result)
}

fn diagnostic(result: &dsh_subagent::SubagentResult) -> String {
    result.diagnostic.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b40_b41_an_agent_ignoring_cancel_eof_and_sigterm_is_killed_with_its_grandchild() {
    let peers = peers();
    let world = world(vec![quick(peers.rogue(&["--ignore-eof", "--ignore-term"]))]).await;
    let (_subscription, mut progress) = world.progress(0);
    let activation = world
        .start(world.spec("acp", "grandchild; say started; hang"))
        .await;
    progress_until(
        &mut progress,
        |event| matches!(&event.update, ProgressUpdate::Message { text } if text == "started"),
    )
    .await;
    // The agent and its `sleep` grandchild, one process group.
    let running = world.processes_once(2).await;
    assert_eq!(running.len(), 2, "{running:?}");
    assert!(running.iter().all(|p| p.pgrp == running[0].pgrp));

    bounded("dispose", activation.dispose()).await.unwrap();
    let result = result_of(&activation).await;
    assert_eq!(result.stop_reason, StopReason::ABORTED);
    assert!(text(&result).ends_with("started"));
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b40_the_runs_own_result_is_aborted_while_its_teardown_still_runs() {
    let peers = peers();
    // Graces long enough that the ladder is surely still climbing when the
    // result is checked, even on a loaded machine.
    let world = world(vec![
        peers
            .rogue(&["--ignore-eof", "--ignore-term"])
            .graces(Duration::from_secs(2), Duration::from_secs(2)),
    ])
    .await;
    let provider = world.providers[0].clone();
    let (_subscription, mut progress) = world.progress(0);
    let run = Arc::new(
        bounded(
            "start",
            provider.start_run(resolved(&world, "say started; hang")),
        )
        .await
        .unwrap(),
    );
    progress_until(&mut progress, |event| {
        matches!(event.update, ProgressUpdate::Message { .. })
    })
    .await;
    let disposing = tokio::spawn({
        let run = run.clone();
        async move { run.dispose().await }
    });
    let result = bounded("the run's result", run.result()).await.unwrap();
    assert_eq!(result.stop_reason, StopReason::ABORTED);
    assert_eq!(text(&result), "started");
    // The agent ignores EOF and SIGTERM, so the ladder is still climbing.
    assert!(!disposing.is_finished(), "the result waited for teardown");
    bounded("dispose", disposing).await.unwrap().unwrap();
    // Idempotent.
    run.dispose().await.unwrap();
    world.assert_no_process_left();
}

fn resolved(world: &World, prompt: &str) -> ResolvedStartRequest {
    ResolvedStartRequest {
        label: "a task".into(),
        cwd: world.project(),
        prompt: vec![ContentBlock::text(prompt)],
        parent: world.lead.clone(),
        agent_options: None,
        agent_preset: None,
        output_schema: None,
        max_depth: None,
        tool_filter: None,
        persona: None,
        cancel: CancellationToken::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b41_a_command_that_does_not_exist_fails_the_start_and_leaves_nothing() {
    let world = world(vec![AcpConfig::new("/nonexistent/dsh-acp-agent")]).await;
    let err = bounded(
        "start",
        world.runtime.start_activation(world.spec("acp", "hi")),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "PROVIDER_FAILED");
    insta::assert_snapshot!(err.to_string(), @"provider `acp` failed: the ACP agent `/nonexistent/dsh-acp-agent` could not be started: the command was not found");
    assert_eq!(world.runtime.live_activations(), 0);
    assert!(
        fold_catalog(world.lead.header(), &world.lead.events())
            .unwrap()
            .is_empty()
    );
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b41_an_agent_that_never_answers_initialize_is_bounded_by_the_startup_timeout() {
    let peers = peers();
    let world = world(vec![
        quick(peers.rogue(&["--silent"])).startup_timeout(Duration::from_millis(800)),
    ])
    .await;
    let err = bounded(
        "start",
        world.runtime.start_activation(world.spec("acp", "hi")),
    )
    .await
    .unwrap_err();
    insta::assert_snapshot!(err.to_string(), @"provider `acp` failed: the ACP agent did not answer initialize within 800ms");
    assert_eq!(world.runtime.live_activations(), 0);
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b41_an_agent_that_exits_during_initialize_fails_the_start_with_its_status() {
    let peers = peers();
    let world = world(vec![quick(peers.rogue(&["--exit-at-init", "7"]))]).await;
    let err = bounded(
        "start",
        world.runtime.start_activation(world.spec("acp", "hi")),
    )
    .await
    .unwrap_err();
    insta::assert_snapshot!(err.to_string(), @"provider `acp` failed: the ACP agent exited with status 7 during initialize");
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b9_a_start_abandoned_by_its_caller_kills_the_process() {
    let peers = peers();
    let world = world(vec![quick(peers.rogue(&["--silent", "--ignore-term"]))]).await;
    let spec = world.spec("acp", "hi");
    let cancel = spec.cancel.clone();
    let start = tokio::spawn({
        let runtime = world.runtime.clone();
        async move { runtime.start_activation(spec).await }
    });
    // Wait until the agent runs, then give up on the start.
    bounded("the agent to run", async {
        while world.processes().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    cancel.cancel();
    let err = bounded("start", start).await.unwrap().unwrap_err();
    assert_eq!(err.code(), "CANCELLED");
    // The runtime drops the provider's start future: the group is killed
    // on drop, and reaped a moment later.
    world.assert_no_process_left_soon().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b41_garbage_on_stdout_settles_error_without_quoting_it() {
    let (world, result) = rogue_result(&[], "say partial; garbage; hang").await;
    assert_eq!(result.stop_reason, StopReason::ERROR);
    assert_eq!(text(&result), "partial");
    insta::assert_snapshot!(diagnostic(&result), @"the ACP agent wrote a line that is not JSON-RPC to stdout (line 4) during the prompt turn");
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b41_a_non_zero_exit_mid_turn_settles_error_with_the_status() {
    let (world, result) = rogue_result(&[], "say partial; exit 3").await;
    assert_eq!(result.stop_reason, StopReason::ERROR);
    assert_eq!(text(&result), "partial");
    insta::assert_snapshot!(diagnostic(&result), @"the ACP agent exited with status 3 during the prompt turn");
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b41_a_closed_stdout_settles_error() {
    let (world, result) = rogue_result(&[], "close_stdout").await;
    assert_eq!(result.stop_reason, StopReason::ERROR);
    insta::assert_snapshot!(diagnostic(&result), @"the ACP agent closed its stdout during the prompt turn while still running");
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b14_an_error_answer_is_reported_with_its_message_and_data_bounded() {
    let (world, result) = rogue_result(&[], "say partial; error").await;
    assert_eq!(result.stop_reason, StopReason::ERROR);
    let diagnostic = diagnostic(&result);
    assert!(diagnostic.len() < 1024, "{diagnostic}");
    insta::assert_snapshot!(diagnostic);
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b14_a_failed_session_new_names_the_agents_message_but_never_a_configured_value() {
    let peers = peers();
    let world = world(vec![
        quick(peers.rogue(&["--auth-fails"])).env("DSH_ACP_TEST_SECRET", "hunter2-credential"),
    ])
    .await;
    let err = world.providers[0]
        .start_run(resolved(&world, "say never"))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("-32000: Authentication required"), "{err}");
    assert!(err.contains("chatgpt"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    insta::assert_snapshot!(err);
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b38_stop_reasons_from_a_real_process() {
    let peers = peers();
    let world = world(vec![quick(peers.rogue(&[]))]).await;
    let mut seen = Vec::new();
    for reason in [
        "end_turn",
        "max_tokens",
        "refusal",
        "cancelled",
        "max_turn_requests",
    ] {
        let result = world.run("acp", &format!("say x; stop {reason}")).await;
        assert_eq!(text(&result), "x");
        seen.push(format!(
            "{reason} -> {} {}",
            result.stop_reason,
            result.diagnostic.unwrap_or_default()
        ));
    }
    // A reason the protocol does not define is unreadable: an error.
    let unknown = world.run("acp", "stop gave_up").await;
    assert_eq!(unknown.stop_reason, StopReason::ERROR);
    insta::assert_snapshot!(seen.join("\n"));
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b37_thoughts_plans_and_tool_calls_are_progress_not_output() {
    let peers = peers();
    let world = world(vec![quick(peers.rogue(&[]))]).await;
    let (_subscription, mut progress) = world.progress(0);
    let result = world
        .run("acp", "think let me see; plan; tool; say the answer")
        .await;
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(text(&result), "the answer");
    let updates: Vec<ProgressUpdate> = drain(&mut progress)
        .into_iter()
        .map(|event| event.update)
        .collect();
    insta::assert_json_snapshot!(updates);
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b37_the_child_gets_a_scrubbed_environment_and_the_resolved_directory() {
    let peers = peers();
    let world = world(vec![
        quick(peers.rogue(&[])).env("DSH_CHILD_KEY", "configured"),
    ])
    .await;
    let mut spec = world.spec("acp", "env; say |; cwd");
    spec.request.cwd = Some("sub".into());
    let result = result_of(&world.start(spec).await).await;
    let output = text(&result);
    let (env, cwd) = output.split_once('|').unwrap();
    let names: Vec<&str> = env.split(',').collect();
    // Only the allow-list and the configured variables (the marker is one).
    for name in &names {
        assert!(
            DEFAULT_INHERITED_ENV.contains(name)
                || *name == "DSH_CHILD_KEY"
                || *name == MARK_VAR
                // set by the Python interpreter itself
                || *name == "LC_CTYPE",
            "unexpected variable {name}"
        );
    }
    assert!(names.contains(&"DSH_CHILD_KEY"));
    assert!(names.contains(&"PATH"));
    // This test process has plenty of variables the child must not see.
    assert!(std::env::var_os("CARGO_PKG_NAME").is_some());
    assert!(!names.contains(&"CARGO_PKG_NAME"));
    let sub = world.project().join("sub").display().to_string();
    assert_eq!(cwd, format!("{sub}|{sub}"), "process cwd | ACP session cwd");
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b37_images_reach_an_agent_that_takes_them() {
    let peers = peers();
    let world = world(vec![quick(peers.rogue(&["--images"]))]).await;
    let mut spec = world.spec("acp", "images");
    spec.request.prompt.push(ContentBlock::Image {
        media_type: "image/png".into(),
        data: "iVBORw0KGgo=".into(),
    });
    let result = result_of(&world.start(spec).await).await;
    assert_eq!(text(&result), "1");
    world.assert_no_process_left();
}

/// One way of asking for an option.
type EditRequest = dyn Fn(&mut dsh_subagent::StartRequest);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b42_options_an_external_agent_cannot_honour_are_refused_before_any_process_starts() {
    let world_dir = tempfile::tempdir().unwrap();
    let marker = world_dir.path().join("started");
    // A command that would leave a file behind if it ever ran.
    let probe =
        AcpConfig::new("/bin/sh").args(["-c".to_owned(), format!("touch {}", marker.display())]);
    let world = world(vec![probe]).await;
    let schema = ObjectSchema::new(serde_json::json!({"type": "object"})).unwrap();
    let cases: Vec<(&str, Box<EditRequest>)> = vec![
        (
            "agent_options",
            Box::new(|r| {
                r.agent_options = Some(AgentOptions {
                    reasoning_effort: Some("high".into()),
                    ..AgentOptions::default()
                })
            }),
        ),
        (
            "agent_preset",
            Box::new(|r| r.agent_preset = Some("reviewer".into())),
        ),
        (
            "output_schema",
            Box::new(move |r| r.output_schema = Some(schema.clone())),
        ),
        ("depth_limit", Box::new(|r| r.max_depth = Some(3))),
        (
            "tool_filter",
            Box::new(|r| r.tool_filter = Some(ToolRestriction::Deny(Default::default()))),
        ),
        ("persona", Box::new(|r| r.persona = Some("a pirate".into()))),
    ];
    let mut refusals = Vec::new();
    for (flag, edit) in cases {
        let mut spec = world.spec("acp", "hi");
        edit(&mut spec.request);
        let err = world.runtime.start_activation(spec).await.unwrap_err();
        assert_eq!(err.code(), "UNSUPPORTED_CAPABILITY", "{flag}");
        refusals.push(err.to_string());
    }
    insta::assert_snapshot!(refusals.join("\n"));
    assert!(!marker.exists(), "a refused start ran the agent");
    assert_eq!(world.runtime.live_activations(), 0);
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b42_external_children_are_catalog_leaves_that_refuse_follow_ups_and_notify_the_parent() {
    let peers = peers();
    let world = world(vec![quick(peers.rogue(&[]))]).await;
    let (_subscription, mut progress) = world.progress(0);
    let mut spec = world.spec("acp", "say working; wait_cancel");
    spec.delivery = Delivery::Parent;
    spec.name = Some("scout".into());
    let activation = world.start(spec).await;
    progress_until(&mut progress, |event| {
        matches!(event.update, ProgressUpdate::Message { .. })
    })
    .await;

    let catalog = fold_catalog(world.lead.header(), &world.lead.events()).unwrap();
    let entry = catalog.get(activation.child_id()).unwrap();
    assert_eq!(entry.mode, ChildMode::EXTERNAL);
    assert_eq!(entry.provider, "acp");
    assert_eq!(entry.name.as_deref(), Some("scout"));
    let err = world
        .runtime
        .send_message(
            &world.lead,
            activation.child_id(),
            vec![ContentBlock::text("one more thing")],
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), "EXTERNAL_TARGET");
    assert!(err.to_string().contains("external agent"), "{err}");
    let rows = world
        .runtime
        .list_descendants(world.lead.id(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);

    // Cancelled by dispose: the agent honours the ACP cancel.
    bounded("dispose", activation.dispose()).await.unwrap();
    let result = result_of(&activation).await;
    assert_eq!(result.stop_reason, StopReason::ABORTED);
    world.assert_no_process_left();

    // A background child that finishes tells its parent.
    let mut spec = world.spec("acp", "say all done");
    spec.delivery = Delivery::Parent;
    spec.name = Some("finisher".into());
    let finisher = world.start(spec).await;
    assert_eq!(
        result_of(&finisher).await.stop_reason,
        StopReason::COMPLETED
    );
    let notice = world
        .lead
        .events()
        .iter()
        .rev()
        .find_map(|event| match &event.payload {
            dsh_core::EventPayload::InboxAccepted(accepted)
                if matches!(
                    accepted.message.source,
                    dsh_core::MessageSource::SubagentSettled { .. }
                ) =>
            {
                Some(dsh_core::content::joined_text(&accepted.message.content))
            }
            _ => None,
        })
        .expect("a settlement notice");
    insta::assert_snapshot!(notice, @"[finisher completed; stop reason: completed]\n\nall done");
    world.lead.wait_idle().await;
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_refused_by_the_policy_is_named_in_the_diagnostic() {
    let (world, result) = rogue_result(&[], "say looking; ask rm -rf build").await;
    assert_eq!(result.stop_reason, StopReason::ABORTED);
    let diagnostic = diagnostic(&result);
    assert!(diagnostic.contains("`rm -rf build`"), "{diagnostic:?}");
    insta::assert_snapshot!(diagnostic, @"the agent asked permission to run `rm -rf build`; the `reject` policy refused it");
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_granted_by_the_allow_policy_lets_the_turn_go_on() {
    let peers = peers();
    let world = world(vec![
        quick(peers.rogue(&[])).permission(dsh_subagent_acp::PermissionPolicy::Allow),
    ])
    .await;
    let result = world.run("acp", "ask make test").await;
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(text(&result), "granted yes");
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b41_a_failed_start_shows_the_last_lines_of_the_agents_stderr_masked() {
    let peers = peers();
    let world = world(vec![
        quick(peers.rogue(&["--exit-at-init", "7", "--complain"]))
            .env("DSH_ACP_TEST_SECRET", "hunter2-credential"),
    ])
    .await;
    let err = bounded(
        "start",
        world.runtime.start_activation(world.spec("acp", "hi")),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(!err.contains("hunter2"), "{err}");
    insta::assert_snapshot!(err, @"provider `acp` failed: the ACP agent exited with status 7 during initialize; its stderr ended with: rogue: complaint 4 | rogue: complaint 5 | rogue: complaint 6 | rogue: complaint 7 | rogue: bad key [redacted] in config");
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allow_always_policy_picks_the_always_option() {
    let peers = peers();
    let world = world(vec![
        quick(peers.rogue(&[])).permission(dsh_subagent_acp::PermissionPolicy::AllowAlways),
    ])
    .await;
    let result = world.run("acp", "ask make test").await;
    assert_eq!(text(&result), "granted always");
    world.assert_no_process_left();
}

/// An asker that records each question and answers with `answer`.
#[derive(Debug)]
struct Recorder {
    asked: std::sync::Mutex<Vec<dsh_subagent_acp::PermissionQuestion>>,
    answer: dsh_subagent_acp::PermissionAnswer,
}

#[async_trait::async_trait]
impl dsh_subagent_acp::PermissionAsker for Recorder {
    async fn ask(
        &self,
        question: dsh_subagent_acp::PermissionQuestion,
    ) -> dsh_subagent_acp::PermissionAnswer {
        self.asked.lock().unwrap().push(question);
        self.answer
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ask_policy_asks_the_host_naming_the_agent_and_the_action() {
    use dsh_subagent_acp::PermissionAnswer;
    let peers = peers();
    for (answer, expected) in [
        (PermissionAnswer::AllowOnce, "granted yes"),
        (PermissionAnswer::AllowAlways, "granted always"),
        (PermissionAnswer::Reject, ""),
    ] {
        let recorder = Arc::new(Recorder {
            asked: std::sync::Mutex::new(Vec::new()),
            answer,
        });
        let world = world(vec![
            quick(peers.rogue(&[]))
                .name("rogue")
                .ask_with(recorder.clone()),
        ])
        .await;
        let result = world.run("rogue", "ask rm -rf build").await;
        assert_eq!(text(&result), expected, "{answer:?}");
        let asked = recorder.asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].agent, "rogue");
        assert_eq!(asked[0].action, "rm -rf build");
        assert_eq!(asked[0].kind.as_deref(), Some("execute"));
        world.assert_no_process_left();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_variable_passed_through_by_name_reaches_the_agent() {
    let peers = peers();
    // Cargo sets it for every test process; it is not on the default list.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let world = world(vec![quick(peers.rogue(&[])).pass_env("CARGO_MANIFEST_DIR")]).await;
    let result = world.run("acp", "env").await;
    assert!(
        text(&result)
            .split(',')
            .any(|name| name == "CARGO_MANIFEST_DIR")
    );
    world.assert_no_process_left();
}
