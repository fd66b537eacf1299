//! Model choice for an ACP child (issue 16): an agent that advertises a
//! model selector gets `agent_options.model` through
//! `session/set_config_option`; a model it does not offer is refused with
//! `UNSUPPORTED_CAPABILITY` naming the ones it does; and once the provider
//! has seen the agent (a probe or an earlier start), a flag or a model the
//! agent cannot honour is refused before any process starts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_core::AgentOptions;
use dsh_subagent::{AdmissionError, SubagentError};
use dsh_subagent_acp::Advertised;
use support::{World, bounded, peers, quick, result_of, text, world};

fn with_model(world: &World, model: &str, script: &str) -> dsh_subagent::ActivationSpec {
    let mut spec = world.spec("acp", script);
    spec.request.agent_options = Some(AgentOptions {
        model: Some(model.to_owned()),
        ..AgentOptions::default()
    });
    spec
}

async fn refusal(world: &World, spec: dsh_subagent::ActivationSpec) -> SubagentError {
    bounded("a refused start", world.runtime.start_activation(spec))
        .await
        .expect_err("the start is refused")
}

fn starts(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log).map_or(0, |text| text.lines().count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advertised_model_is_chosen_through_set_config_option() {
    let peers = peers();
    let world = world(vec![quick(peers.rogue(&["--models", "fast,deep"]))]).await;
    let activation = world.start(with_model(&world, "deep", "model")).await;
    let result = result_of(&activation).await;
    assert_eq!(text(&result), "deep", "{result:?}");
    assert_eq!(
        world.providers[0].advertised(),
        Some(Advertised {
            load_session: false,
            images: false,
            models: Some(vec!["fast".into(), "deep".into()]),
        })
    );
    bounded("dispose", activation.dispose()).await.unwrap();
    world.assert_no_process_left();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_the_agent_does_not_offer_is_refused_naming_the_offered_ones() {
    let peers = peers();
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("starts");
    let log_arg = log.display().to_string();
    let world = world(vec![quick(peers.rogue(&[
        "--models",
        "fast,deep",
        "--log-starts",
        &log_arg,
    ]))])
    .await;
    // Not seen yet: the agent is asked, and the start fails at session/new,
    // before publication, with nothing left running.
    let err = refusal(&world, with_model(&world, "huge", "say hi")).await;
    assert_eq!(err.code(), "UNSUPPORTED_CAPABILITY");
    assert_eq!(
        err.to_string(),
        "provider `acp` cannot use model `huge`; it offers `fast` and `deep`"
    );
    assert!(matches!(
        &err,
        SubagentError::Admission(AdmissionError::UnsupportedValue { offered, .. }) if offered.len() == 2
    ));
    world.assert_no_process_left();
    assert_eq!(starts(&log), 1);
    // Seen now: the same request is refused without starting the agent.
    let again = refusal(&world, with_model(&world, "huge", "say hi")).await;
    assert_eq!(again.to_string(), err.to_string());
    assert_eq!(
        starts(&log),
        1,
        "no process for a request the cache refuses"
    );
    // Options beyond the model are never passed to an external agent.
    let mut effort = with_model(&world, "fast", "say hi");
    effort
        .request
        .agent_options
        .as_mut()
        .unwrap()
        .reasoning_effort = Some("high".into());
    let err = refusal(&world, effort).await;
    assert_eq!(err.code(), "UNSUPPORTED_CAPABILITY");
    assert!(err.to_string().contains("other than `model`"), "{err}");
    assert_eq!(starts(&log), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_a_selector_refuses_a_model_and_after_a_probe_the_runtime_does() {
    let peers = peers();
    let world = world(vec![
        quick(peers.rogue(&[])).name("plain"),
        quick(peers.rogue(&[])).name("probed"),
    ])
    .await;
    let mut spec = with_model(&world, "fast", "say hi");
    spec.provider = "plain".into();
    let err = refusal(&world, spec).await;
    assert_eq!(err.code(), "UNSUPPORTED_CAPABILITY");
    assert!(err.to_string().contains("no model selector"), "{err}");
    world.assert_no_process_left();

    // A probe records what the agent advertises; then the runtime's own
    // capability check refuses the flag before the provider is called.
    let probed = bounded("probe", world.providers[1].probe(world.project()))
        .await
        .unwrap();
    assert_eq!(probed.models, None);
    world.assert_no_process_left();
    let mut spec = with_model(&world, "fast", "say hi");
    spec.provider = "probed".into();
    let err = refusal(&world, spec).await;
    assert_eq!(
        err.to_string(),
        "provider `probed` does not support agent_options"
    );
    // Without a model the probed agent starts as before.
    let mut spec = world.spec("probed", "say hello");
    spec.provider = "probed".into();
    let activation = world.start(spec).await;
    assert_eq!(text(&result_of(&activation).await), "hello");
    bounded("dispose", activation.dispose()).await.unwrap();
    world.assert_no_process_left();
}
