//! Integration tests of the subagent runtime: the provider registry, the
//! checks made before any provider code runs, activations and their
//! lifecycle events, run ids, results, diagnostics, disposal, capacity and
//! names (B1-B17 and part of B26 in `BEHAVIOURS.md`). They drive the runtime
//! over the reference harness (a kit world on a memory store) with the kit's
//! scripted providers: `LocalProvider` (local continuable creation,
//! optionally gated), `ExternalProvider` (external runs the test settles by
//! hand) and `Probe` (records any call to its code).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_subagent::{AdmissionError, InfraError, RegistryError};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_core::observe::Events;
use dsh_core::schema::ObjectSchema;
use dsh_core::{
    Agent, AgentOptions, CancellationToken, ContentBlock, EventPayload, MessageSource, ModelError,
    ModelErrorKind, SessionStore, StopReason, ToolRestriction,
};
use dsh_harness::Scripted;
use dsh_subagent::result::{MAX_DIAGNOSTIC_BYTES, TRUNCATION_MARKER};
use dsh_subagent::{
    ActivationSpec, AgentRoute, Catalog, ChildMode, Delivery, ProviderDescriptor, RunInfo,
    RunOutcome, RuntimeConfig, StartRequest, SubagentActivation, SubagentCapabilities,
    SubagentError, SubagentEvent, SubagentProvider, SubagentResult, fold_catalog,
};
use dsh_test_support::wait::{bounded, settle, until};
use dsh_test_support::world::{
    Bare, ExternalProvider, LocalProvider, Probe, World, WorldBuilder, sid,
};
use futures::FutureExt;
use serde_json::json;
use tokio::sync::Semaphore;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn drain(rx: &mut Events<SubagentEvent>) -> Vec<SubagentEvent> {
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    events
}

fn lifecycle(events: &[SubagentEvent]) -> Vec<SubagentEvent> {
    events
        .iter()
        .filter(|e| matches!(e, SubagentEvent::Start(_) | SubagentEvent::End(..)))
        .cloned()
        .collect()
}

fn completed(text: &str) -> SubagentResult {
    SubagentResult {
        output: vec![ContentBlock::text(text)],
        ..SubagentResult::stopped(StopReason::COMPLETED)
    }
}

fn output_text(result: &SubagentResult) -> String {
    dsh_core::content::joined_text(&result.output)
}

// ---------------------------------------------------------------------------
// The environment: a kit world over a memory store, the root parent, a
// runtime with no provider yet
// ---------------------------------------------------------------------------

/// A kit world and its root parent.
struct Env {
    world: World<dyn SessionStore>,
    parent: Arc<dyn Agent>,
}

impl std::ops::Deref for Env {
    type Target = World<dyn SessionStore>;

    fn deref(&self) -> &Self::Target {
        &self.world
    }
}

async fn env() -> Env {
    env_with(RuntimeConfig::default(), 0).await
}

async fn env_with(config: RuntimeConfig, parent_depth: u32) -> Env {
    let world = WorldBuilder::new()
        .memory()
        .config(config)
        .root("lead-session")
        .root_header(move |header| header.delegation_depth = parent_depth)
        .build()
        .await;
    Env {
        parent: world.lead(),
        world,
    }
}

/// A tree with at most `children` live children, and a held external
/// provider `ext` registered.
async fn capped(children: usize) -> (Env, Arc<ExternalProvider>) {
    let env = env_with(
        RuntimeConfig {
            max_live_children_per_tree: children,
        },
        0,
    )
    .await;
    let ext = Arc::new(ExternalProvider::held("ext"));
    env.runtime.register(ext.clone()).unwrap();
    (env, ext)
}

impl Env {
    /// A caller-delivered start of `provider` under the root parent.
    fn spec(&self, provider: &str) -> ActivationSpec {
        spec_for(&self.parent, provider)
    }

    fn catalog(&self) -> Catalog {
        fold_catalog(self.parent.header(), &self.parent.events()).unwrap()
    }

    /// B9's "nothing left behind": no session but the parent's, no catalog
    /// entry, no live activation, no live agent but the parent, no lifecycle
    /// event.
    async fn assert_nothing_left(&self, events: &mut Events<SubagentEvent>) {
        assert_eq!(self.sessions().await, [self.parent.id().clone()]);
        assert!(self.catalog().is_empty(), "{:?}", self.catalog());
        assert_eq!(self.runtime.live_activations(), 0);
        assert_eq!(self.runtime.registry().len(), 1);
        assert_eq!(lifecycle(&drain(events)), []);
    }
}

fn spec_for(parent: &Arc<dyn Agent>, provider: &str) -> ActivationSpec {
    ActivationSpec {
        provider: provider.to_owned(),
        label: "a task".into(),
        name: None,
        child_id: None,
        cancel: CancellationToken::new(),
        delivery: Delivery::Caller,
        request: StartRequest::new(parent.clone(), vec![ContentBlock::text("do the task")]),
    }
}

fn same_provider(a: &Arc<dyn SubagentProvider>, b: &Arc<dyn SubagentProvider>) -> bool {
    std::ptr::eq(Arc::as_ptr(a).cast::<()>(), Arc::as_ptr(b).cast::<()>())
}

// ---------------------------------------------------------------------------
// B1-B3: the registry
// ---------------------------------------------------------------------------

#[tokio::test]
async fn b1_duplicate_registration_fails_and_the_first_stays() {
    let env = env().await;
    let (_sub, mut events) = env.runtime.events().subscribe();
    let first: Arc<dyn SubagentProvider> = Arc::new(LocalProvider::new("spawn"));
    env.runtime.register(first.clone()).unwrap();

    let second: Arc<dyn SubagentProvider> =
        Arc::new(LocalProvider::new("spawn").with_capabilities(SubagentCapabilities::default()));
    let err = env.runtime.register(second.clone()).unwrap_err();
    assert_eq!(err.code(), "DUPLICATE_PROVIDER");
    assert!(
        matches!(&err, SubagentError::Registry(RegistryError::DuplicateProvider(name)) if name == "spawn")
    );

    let got = env.runtime.get("spawn").unwrap();
    assert!(same_provider(&got, &first));
    assert!(!same_provider(&got, &second));
    assert_eq!(got.capabilities(), SubagentCapabilities::ALL);
    assert_eq!(env.runtime.list(), ["spawn"]);
    assert_eq!(
        drain(&mut events),
        [SubagentEvent::ProviderAdded(ProviderDescriptor::of(
            first.as_ref()
        ))]
    );
}

#[tokio::test]
async fn b1_a_provider_without_an_execution_path_is_refused() {
    let env = env().await;
    let (_sub, mut events) = env.runtime.events().subscribe();
    let err = env.runtime.register(Arc::new(Bare)).unwrap_err();
    assert_eq!(err.code(), "UNSUPPORTED_CAPABILITY");
    assert!(
        matches!(&err, SubagentError::Admission(AdmissionError::UnsupportedCapability { provider, .. }) if provider == "bare")
    );
    assert!(env.runtime.get("bare").is_none());
    assert!(env.runtime.list().is_empty());
    assert!(drain(&mut events).is_empty());
}

#[tokio::test]
async fn b1_a_default_route_without_agent_options_is_refused() {
    let env = env().await;
    let route = AgentRoute {
        provider: "default".into(),
        model: "child-model".into(),
    };
    let refused = Arc::new(
        LocalProvider::new("routed")
            .with_capabilities(SubagentCapabilities {
                agent_options: false,
                ..SubagentCapabilities::ALL
            })
            .with_route(route.clone()),
    );
    let err = env.runtime.register(refused).unwrap_err();
    assert_eq!(err.code(), "UNSUPPORTED_CAPABILITY");
    assert!(err.to_string().contains("agent_options"), "{err}");
    assert!(env.runtime.get("routed").is_none());

    // The same route with the flag is accepted.
    let accepted = Arc::new(LocalProvider::new("routed").with_route(route));
    env.runtime.register(accepted).unwrap();
    assert_eq!(env.runtime.list(), ["routed"]);
}

#[tokio::test]
async fn b2_registration_and_removal_are_observable_and_listing_keeps_order() {
    let env = env().await;
    let (_sub, mut events) = env.runtime.events().subscribe();
    env.runtime
        .register(Arc::new(LocalProvider::new("zeta")))
        .unwrap();
    env.runtime
        .register(Arc::new(ExternalProvider::held("alpha")))
        .unwrap();
    env.runtime
        .register(Arc::new(LocalProvider::new("mid")))
        .unwrap();
    assert_eq!(env.runtime.list(), ["zeta", "alpha", "mid"]);

    assert!(env.runtime.remove("alpha"));
    assert!(
        !env.runtime.remove("alpha"),
        "a second removal removes nothing"
    );
    assert!(!env.runtime.remove("never-registered"));
    assert_eq!(env.runtime.list(), ["zeta", "mid"]);
    env.runtime
        .register(Arc::new(ExternalProvider::held("alpha")))
        .unwrap();
    assert_eq!(env.runtime.list(), ["zeta", "mid", "alpha"]);

    let seen = drain(&mut events);
    assert_eq!(
        seen,
        [
            SubagentEvent::ProviderAdded(ProviderDescriptor::of(&LocalProvider::new("zeta"))),
            SubagentEvent::ProviderAdded(ProviderDescriptor::of(&ExternalProvider::new("alpha"))),
            SubagentEvent::ProviderAdded(ProviderDescriptor::of(&LocalProvider::new("mid"))),
            SubagentEvent::ProviderRemoved("alpha".into()),
            SubagentEvent::ProviderAdded(ProviderDescriptor::of(&ExternalProvider::new("alpha"))),
        ]
    );
    let names: Vec<&str> = seen.iter().map(SubagentEvent::name).collect();
    assert_eq!(
        names,
        [
            "subagent/provider-added",
            "subagent/provider-added",
            "subagent/provider-added",
            "subagent/provider-removed",
            "subagent/provider-added",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn b3_removal_blocks_new_starts_but_not_a_running_activation() {
    let env = env().await;
    let ext = Arc::new(ExternalProvider::held("ext"));
    env.runtime.register(ext.clone()).unwrap();
    let activation = env.runtime.start_activation(env.spec("ext")).await.unwrap();

    assert!(env.runtime.remove("ext"));
    let err = env
        .runtime
        .start_activation(env.spec("ext"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "NO_PROVIDER");
    assert_eq!(
        ext.started(),
        1,
        "the removed provider was not called again"
    );

    // The activation handed out before the removal is untouched.
    settle().await;
    let run = ext.run(0);
    assert_eq!(run.dispose_calls(), 0);
    assert_eq!(env.runtime.live_activations(), 1);
    assert!(activation.result().now_or_never().is_none());

    run.settle(completed("finished after removal"));
    let result = bounded(activation.result()).await.unwrap();
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(output_text(&result), "finished after removal");
    assert_eq!(env.runtime.live_activations(), 0);
}

// ---------------------------------------------------------------------------
// B4-B6: checks before provider code
// ---------------------------------------------------------------------------

/// One start-time flag: how to clear it in the capabilities, how to ask for
/// it in a request, and the name the refusal must carry.
struct Flag {
    capability: &'static str,
    clear: fn(&mut SubagentCapabilities),
    ask: fn(&mut StartRequest),
}

fn flags() -> Vec<Flag> {
    vec![
        Flag {
            capability: "agent_options",
            clear: |c| c.agent_options = false,
            ask: |r| {
                r.agent_options = Some(AgentOptions {
                    model: Some("other-model".into()),
                    ..AgentOptions::default()
                });
            },
        },
        Flag {
            capability: "agent_preset",
            clear: |c| c.agent_preset = false,
            ask: |r| r.agent_preset = Some("reviewer".into()),
        },
        Flag {
            capability: "output_schema",
            clear: |c| c.output_schema = false,
            ask: |r| {
                r.output_schema = Some(
                    ObjectSchema::new(json!({
                        "type": "object",
                        "properties": {"verdict": {"type": "string"}},
                        "required": ["verdict"]
                    }))
                    .unwrap(),
                );
            },
        },
        Flag {
            // The request's `max_depth` needs the `depth_limit` flag.
            capability: "depth_limit",
            clear: |c| c.depth_limit = false,
            ask: |r| r.max_depth = Some(5),
        },
        Flag {
            capability: "tool_filter",
            clear: |c| c.tool_filter = false,
            ask: |r| r.tool_filter = Some(ToolRestriction::allow(["read"])),
        },
        Flag {
            capability: "persona",
            clear: |c| c.persona = false,
            ask: |r| r.persona = Some("You review code.".into()),
        },
    ]
}

#[tokio::test]
async fn b4_each_missing_flag_is_refused_before_any_provider_code_runs() {
    for external in [false, true] {
        for flag in flags() {
            let env = env().await;
            let (_sub, mut events) = env.runtime.events().subscribe();
            let mut caps = SubagentCapabilities::ALL;
            (flag.clear)(&mut caps);
            let probe = Arc::new(Probe::new("probe", external, caps));
            env.runtime.register(probe.clone()).unwrap();

            let mut spec = env.spec("probe");
            spec.delivery = Delivery::Parent;
            (flag.ask)(&mut spec.request);
            let err = env.runtime.start_activation(spec).await.unwrap_err();
            let context = format!("flag {} (external: {external})", flag.capability);
            assert_eq!(err.code(), "UNSUPPORTED_CAPABILITY", "{context}: {err}");
            match &err {
                SubagentError::Admission(AdmissionError::UnsupportedCapability {
                    provider,
                    capability,
                }) => {
                    assert_eq!(provider, "probe", "{context}");
                    assert_eq!(*capability, flag.capability, "{context}");
                }
                other => panic!("{context}: {other:?}"),
            }
            assert!(
                err.to_string().contains(flag.capability),
                "{context}: {err}"
            );
            assert_eq!(probe.calls(), 0, "{context}: provider code ran");
            env.assert_nothing_left(&mut events).await;

            // Control: with every flag the same request reaches the provider.
            let full = Arc::new(Probe::new("full", external, SubagentCapabilities::ALL));
            env.runtime.register(full.clone()).unwrap();
            let mut spec = env.spec("full");
            (flag.ask)(&mut spec.request);
            let err = env.runtime.start_activation(spec).await.unwrap_err();
            assert_eq!(err.code(), "PROVIDER_FAILED", "{context}: {err}");
            assert_eq!(full.calls(), 1, "{context}");
            env.assert_nothing_left(&mut events).await;
        }
    }
}

#[tokio::test]
async fn b4_agent_preset_is_refused_for_a_provider_inheriting_parent_context() {
    for external in [false, true] {
        let env = env().await;
        let (_sub, mut events) = env.runtime.events().subscribe();
        let probe = Arc::new(Probe::new("fork", external, SubagentCapabilities::ALL).inheriting());
        env.runtime.register(probe.clone()).unwrap();
        let mut spec = env.spec("fork");
        spec.request.agent_preset = Some("reviewer".into());
        let err = env.runtime.start_activation(spec).await.unwrap_err();
        assert_eq!(err.code(), "UNSUPPORTED_CAPABILITY");
        assert!(
            matches!(&err, SubagentError::Admission(AdmissionError::UnsupportedCapability { capability, .. }) if capability.starts_with("agent_preset")),
            "{err:?}"
        );
        assert_eq!(probe.calls(), 0);
        env.assert_nothing_left(&mut events).await;

        // Without the preset the inheriting provider is reached.
        env.runtime
            .start_activation(env.spec("fork"))
            .await
            .unwrap_err();
        assert_eq!(probe.calls(), 1);
    }
}

#[tokio::test]
async fn b5_b20_child_depth_is_parent_plus_one_and_max_depth_is_checked_first() {
    // A root at depth 0: its child is at depth 1.
    let env = env().await;
    let local = Arc::new(LocalProvider::new("spawn"));
    env.runtime.register(local.clone()).unwrap();
    let probe = Arc::new(Probe::new("probe", false, SubagentCapabilities::ALL));
    env.runtime.register(probe.clone()).unwrap();
    let (_sub, mut events) = env.runtime.events().subscribe();

    let mut refused = env.spec("probe");
    refused.request.max_depth = Some(0);
    let err = env.runtime.start_activation(refused).await.unwrap_err();
    assert_eq!(err.code(), "DEPTH_LIMIT");
    assert!(
        matches!(
            err,
            SubagentError::Admission(AdmissionError::DepthLimit { depth: 1, max: 0 })
        ),
        "{err:?}"
    );
    assert_eq!(probe.calls(), 0);
    env.assert_nothing_left(&mut events).await;

    let mut allowed = env.spec("spawn");
    allowed.request.max_depth = Some(1);
    let activation = env.runtime.start_activation(allowed).await.unwrap();
    assert_eq!(local.prepared(), 1);
    let result = bounded(activation.result()).await.unwrap();
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    let header = env.store.header(activation.child_id()).await.unwrap();
    assert_eq!(header.delegation_depth, 1);
    assert_eq!(header.parent_session.as_ref(), Some(env.parent.id()));

    // A parent at depth 2: its child would be at depth 3.
    let deep = env_with(RuntimeConfig::default(), 2).await;
    let local = Arc::new(LocalProvider::new("spawn"));
    deep.runtime.register(local.clone()).unwrap();
    let mut refused = deep.spec("spawn");
    refused.request.max_depth = Some(2);
    let err = deep.runtime.start_activation(refused).await.unwrap_err();
    assert!(
        matches!(
            err,
            SubagentError::Admission(AdmissionError::DepthLimit { depth: 3, max: 2 })
        ),
        "{err:?}"
    );
    assert_eq!(
        local.prepared(),
        0,
        "the provider ran before the depth check"
    );
    assert_eq!(deep.sessions().await, [deep.parent.id().clone()]);

    let mut allowed = deep.spec("spawn");
    allowed.request.max_depth = Some(3);
    let activation = deep.runtime.start_activation(allowed).await.unwrap();
    bounded(activation.result()).await.unwrap();
    let header = deep.store.header(activation.child_id()).await.unwrap();
    assert_eq!(header.delegation_depth, 3);

    // Without a cap the depth still grows by one.
    let activation = deep
        .runtime
        .start_activation(deep.spec("spawn"))
        .await
        .unwrap();
    bounded(activation.result()).await.unwrap();
    let header = deep.store.header(activation.child_id()).await.unwrap();
    assert_eq!(header.delegation_depth, 3);
}

#[test]
fn b5_an_output_schema_outside_the_subset_cannot_be_built() {
    let err = ObjectSchema::new(json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^a"},
            "tags": {"type": "array", "items": {"type": "string", "format": "email"}}
        },
        "patternProperties": {"^x": {"type": "string"}}
    }))
    .unwrap_err();
    assert_eq!(err.code(), "INVALID_SCHEMA");
    let paths: Vec<&str> = err.violations.iter().map(|v| v.path.as_str()).collect();
    for expected in [
        "/properties/name/pattern",
        "/properties/tags/items/format",
        "/patternProperties",
    ] {
        assert!(
            paths.contains(&expected),
            "{expected} missing from {paths:?}"
        );
    }
    assert!(
        err.to_string().contains("/properties/name/pattern"),
        "{err}"
    );

    // Not object-rooted.
    let err = ObjectSchema::new(json!({"type": "array", "items": {"type": "string"}})).unwrap_err();
    assert_eq!(err.code(), "INVALID_SCHEMA");
    assert!(!err.violations.is_empty());

    // Inside the subset it builds.
    ObjectSchema::new(json!({
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
        "required": ["kind"],
        "additionalProperties": false,
        "title": "answer"
    }))
    .unwrap();
}

// ---------------------------------------------------------------------------
// B7-B9: publication, the caller's token, failure before publication
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn b7_b8_external_start_returns_after_start_and_the_callers_token_no_longer_reaches_it() {
    let env = env().await;
    let gate = Arc::new(Semaphore::new(0));
    let ext = Arc::new(ExternalProvider::held("ext").gated(gate.clone()));
    env.runtime.register(ext.clone()).unwrap();
    let token = CancellationToken::new();
    let mut spec = env.spec("ext");
    spec.cancel = token.clone();
    spec.delivery = Delivery::Parent;
    spec.name = Some("remote".into());

    let runtime = env.runtime.clone();
    let starting = tokio::spawn(async move { runtime.start_activation(spec).await });
    until(|| ext.started() == 1).await;
    settle().await;
    assert!(!starting.is_finished(), "returned before the run started");
    assert_eq!(env.runtime.live_activations(), 0);

    gate.add_permits(1);
    let activation = bounded(starting).await.unwrap().unwrap();
    let run = ext.run(0);
    assert_eq!(activation.child_id(), run.id());
    assert_eq!(activation.name(), "remote");
    assert!(
        activation.message_id().is_none(),
        "no message id for an external child"
    );
    let entry = env.catalog().get(run.id()).cloned().unwrap();
    assert_eq!(entry.mode, ChildMode::EXTERNAL);
    assert_eq!(entry.name.as_deref(), Some("remote"));

    // After publication the caller's token no longer reaches the run.
    token.cancel();
    settle().await;
    assert_eq!(
        run.dispose_calls(),
        0,
        "the caller's token disposed the run"
    );
    assert!(activation.result().now_or_never().is_none());
    assert_eq!(env.runtime.live_activations(), 1);

    run.settle(completed("remote answer"));
    let result = bounded(activation.result()).await.unwrap();
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
    assert_eq!(output_text(&result), "remote answer");
}

#[tokio::test]
async fn b42_a_follow_up_to_an_external_child_is_refused_as_external() {
    // An external child has no session of its own; the refusal must still
    // say what it is, not that the child is outside the tree.
    let env = env().await;
    let ext = Arc::new(ExternalProvider::held("ext"));
    env.runtime.register(ext.clone()).unwrap();
    let mut spec = env.spec("ext");
    spec.delivery = Delivery::Parent;
    spec.name = Some("remote".into());
    let activation = bounded(env.runtime.start_activation(spec)).await.unwrap();
    let err = env
        .tell(activation.child_id().as_str(), "one more thing")
        .await
        .unwrap_err();
    assert_eq!(err.code(), "EXTERNAL_TARGET");
    assert_eq!(
        err.to_string(),
        format!(
            "`{}` is an external agent; it cannot receive follow-up messages",
            activation.child_id()
        )
    );
    // An id nobody knows is still outside the tree.
    let stranger = env.tell("nobody", "hello?").await.unwrap_err();
    assert!(stranger.to_string().contains("not a member"), "{stranger}");
    ext.run(0).settle(completed("done"));
    bounded(activation.result()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn b7_b8_local_start_returns_with_the_accepted_prompt_and_outlives_the_callers_token() {
    let env = env().await;
    let local = Arc::new(LocalProvider::new("spawn"));
    env.runtime.register(local.clone()).unwrap();
    // The child's first model request waits for the test.
    let model_gate = Arc::new(Semaphore::new(0));
    env.model.push(Scripted::Gated {
        gate: model_gate.clone(),
        then: Box::new(Scripted::Text("child answer".into())),
    });
    let token = CancellationToken::new();
    let mut spec = env.spec("spawn");
    spec.cancel = token.clone();

    let activation = env.runtime.start_activation(spec).await.unwrap();
    let message_id = activation
        .message_id()
        .cloned()
        .expect("a local child has a message id");
    let child = env.runtime.registry().get(activation.child_id()).unwrap();
    let accepted = child.events().into_iter().find_map(|e| match e.payload {
        EventPayload::InboxAccepted(accepted) if accepted.message.id == message_id => {
            Some(accepted)
        }
        _ => None,
    });
    let accepted = accepted.expect("the initial prompt is accepted before start returns");
    assert_eq!(
        dsh_core::content::joined_text(&accepted.message.content),
        "do the task"
    );
    assert_eq!(
        accepted.message.source,
        MessageSource::AgentMessage {
            sender_session_id: env.parent.id().clone()
        }
    );

    token.cancel();
    settle().await;
    assert!(activation.result().now_or_never().is_none());
    assert_eq!(env.runtime.live_activations(), 1);
    model_gate.add_permits(1);
    let result = bounded(activation.result()).await.unwrap();
    assert_eq!(
        result.stop_reason,
        StopReason::COMPLETED,
        "the caller's token reached the child"
    );
    assert_eq!(output_text(&result), "child answer");
}

#[tokio::test]
async fn b9_cancelled_before_the_call_leaves_nothing_behind() {
    for external in [false, true] {
        let env = env().await;
        let local = Arc::new(LocalProvider::new("spawn"));
        let ext = Arc::new(ExternalProvider::held("ext"));
        env.runtime.register(local.clone()).unwrap();
        env.runtime.register(ext.clone()).unwrap();
        let provider = if external { "ext" } else { "spawn" };
        let (_sub, mut events) = env.runtime.events().subscribe();

        let mut spec = env.spec(provider);
        spec.name = Some("worker".into());
        spec.delivery = Delivery::Parent;
        spec.cancel.cancel();
        let err = env.runtime.start_activation(spec).await.unwrap_err();
        assert_eq!(err.code(), "CANCELLED");
        assert_eq!(local.prepared() + ext.started(), 0);
        env.assert_nothing_left(&mut events).await;

        // The name is free again.
        let mut again = env.spec(provider);
        again.name = Some("worker".into());
        again.delivery = Delivery::Parent;
        let activation = env.runtime.start_activation(again).await.unwrap();
        assert_eq!(activation.name(), "worker");
    }
}

#[tokio::test(start_paused = true)]
async fn b9_cancelled_during_preparation_leaves_nothing_behind() {
    let env = env().await;
    let gate = Arc::new(Semaphore::new(0));
    let local = Arc::new(LocalProvider::new("spawn").gated(gate.clone()));
    env.runtime.register(local.clone()).unwrap();
    let (_sub, mut events) = env.runtime.events().subscribe();

    let token = CancellationToken::new();
    let mut spec = env.spec("spawn");
    spec.name = Some("worker".into());
    spec.cancel = token.clone();
    let runtime = env.runtime.clone();
    let starting = tokio::spawn(async move { runtime.start_activation(spec).await });
    until(|| local.prepared() == 1).await;
    settle().await;
    assert!(!starting.is_finished());

    token.cancel();
    let err = bounded(starting).await.unwrap().unwrap_err();
    assert_eq!(err.code(), "CANCELLED");
    env.assert_nothing_left(&mut events).await;

    // The name is free again.
    gate.add_permits(1);
    let mut again = env.spec("spawn");
    again.name = Some("worker".into());
    let activation = env.runtime.start_activation(again).await.unwrap();
    assert_eq!(activation.name(), "worker");
    bounded(activation.result()).await.unwrap();
}

#[tokio::test]
async fn b9_cancelled_during_an_external_start_leaves_nothing_behind() {
    let env = env().await;
    let gate = Arc::new(Semaphore::new(0));
    let ext = Arc::new(ExternalProvider::held("ext").gated(gate.clone()));
    env.runtime.register(ext.clone()).unwrap();
    let (_sub, mut events) = env.runtime.events().subscribe();

    let token = CancellationToken::new();
    let mut spec = env.spec("ext");
    spec.name = Some("worker".into());
    spec.delivery = Delivery::Parent;
    spec.cancel = token.clone();
    let runtime = env.runtime.clone();
    let starting = tokio::spawn(async move { runtime.start_activation(spec).await });
    until(|| ext.started() == 1).await;
    token.cancel();
    let err = bounded(starting).await.unwrap().unwrap_err();
    assert_eq!(err.code(), "CANCELLED");
    assert_eq!(ext.run_count(), 0);
    env.assert_nothing_left(&mut events).await;

    gate.add_permits(1);
    let mut again = env.spec("ext");
    again.name = Some("worker".into());
    again.delivery = Delivery::Parent;
    let activation = env.runtime.start_activation(again).await.unwrap();
    assert_eq!(activation.name(), "worker");
}

#[tokio::test]
async fn b9_a_provider_failure_leaves_nothing_behind() {
    let env = env().await;
    let ext = Arc::new(ExternalProvider::held("ext").failing(SubagentError::Infra(
        InfraError::Provider {
            provider: "ext".into(),
            message: "could not spawn the agent".into(),
        },
    )));
    env.runtime.register(ext.clone()).unwrap();
    let (_sub, mut events) = env.runtime.events().subscribe();
    let mut spec = env.spec("ext");
    spec.name = Some("worker".into());
    spec.delivery = Delivery::Parent;
    let err = env.runtime.start_activation(spec).await.unwrap_err();
    assert_eq!(err.code(), "PROVIDER_FAILED");
    assert_eq!(ext.started(), 1);
    env.assert_nothing_left(&mut events).await;
}

// ---------------------------------------------------------------------------
// B10: lifecycle events
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn b10_every_activation_emits_one_start_and_one_end_with_the_same_identity() {
    let env = env().await;
    let local = Arc::new(LocalProvider::new("spawn"));
    let ext = Arc::new(ExternalProvider::held("ext"));
    env.runtime.register(local.clone()).unwrap();
    env.runtime.register(ext.clone()).unwrap();

    // A listener registered first that panics on every event.
    let _boom = env
        .runtime
        .events()
        .listen(|event| panic!("listener failure on {event:?}"));
    // A listener checking that a local child resolves during its start.
    let resolvable = Arc::new(Mutex::new(Vec::new()));
    let registry = env.runtime.registry().clone();
    let seen = resolvable.clone();
    let _check = env.runtime.events().listen(move |event| {
        if let SubagentEvent::Start(info) = event {
            seen.lock()
                .unwrap()
                .push((info.local, registry.get(&info.child_id).is_some()));
        }
    });
    let (_sub, mut events) = env.runtime.events().subscribe();

    let local_activation = env
        .runtime
        .start_activation(env.spec("spawn"))
        .await
        .unwrap();
    let local_result = bounded(local_activation.result()).await.unwrap();
    assert_eq!(local_result.stop_reason, StopReason::COMPLETED);

    let ext_activation = env.runtime.start_activation(env.spec("ext")).await.unwrap();
    ext.run(0)
        .settle(SubagentResult::stopped(StopReason::REFUSAL));
    let ext_result = bounded(ext_activation.result()).await.unwrap();
    assert_eq!(ext_result.stop_reason, StopReason::REFUSAL);

    until(|| env.runtime.tasks().is_empty()).await;
    settle().await;
    let local_info = RunInfo {
        provider: "spawn".into(),
        name: "agent-1".into(),
        label: "a task".into(),
        child_id: local_activation.child_id().clone(),
        parent_session_id: env.parent.id().clone(),
        root: env.parent.id().clone(),
        local: true,
    };
    let ext_info = RunInfo {
        provider: "ext".into(),
        name: "agent-2".into(),
        label: "a task".into(),
        child_id: ext_activation.child_id().clone(),
        parent_session_id: env.parent.id().clone(),
        root: env.parent.id().clone(),
        local: false,
    };
    let seen = drain(&mut events);
    assert_eq!(
        seen,
        [
            SubagentEvent::Start(local_info.clone()),
            SubagentEvent::End(local_info, RunOutcome::Settled(local_result)),
            SubagentEvent::Start(ext_info.clone()),
            SubagentEvent::End(ext_info, RunOutcome::Settled(ext_result)),
        ]
    );
    assert_eq!(seen[0].name(), "subagent/start");
    assert_eq!(seen[1].name(), "subagent/end");
    assert_eq!(*resolvable.lock().unwrap(), [(true, true), (false, false)]);

    // A later dispose emits nothing more.
    local_activation.dispose().await.unwrap();
    ext_activation.dispose().await.unwrap();
    settle().await;
    assert!(drain(&mut events).is_empty());
}

// ---------------------------------------------------------------------------
// B11: run ids
// ---------------------------------------------------------------------------

#[tokio::test]
async fn b11_a_run_id_of_a_live_session_is_refused_and_the_run_disposed() {
    let env = env().await;
    let ext = Arc::new(ExternalProvider::held("ext").with_id(env.parent.id().clone()));
    env.runtime.register(ext.clone()).unwrap();
    let (_sub, mut events) = env.runtime.events().subscribe();
    let mut spec = env.spec("ext");
    spec.delivery = Delivery::Parent;
    spec.name = Some("remote".into());
    let err = env.runtime.start_activation(spec).await.unwrap_err();
    assert_eq!(err.code(), "DUPLICATE_RUN_ID");
    assert!(
        matches!(&err, SubagentError::Infra(InfraError::DuplicateRunId { provider, id }) if provider == "ext" && id == env.parent.id()),
        "{err:?}"
    );
    assert_eq!(
        ext.run(0).dispose_calls(),
        1,
        "the colliding run was not disposed"
    );
    env.assert_nothing_left(&mut events).await;
}

#[tokio::test]
async fn b11_a_repeated_run_id_is_refused_across_parents_and_providers() {
    let env = env().await;
    let fixed = sid("fixed-run");
    let first_provider = Arc::new(ExternalProvider::held("ext").with_id(fixed.clone()));
    let second_provider = Arc::new(ExternalProvider::held("ext-two").with_id(fixed.clone()));
    env.runtime.register(first_provider.clone()).unwrap();
    env.runtime.register(second_provider.clone()).unwrap();
    let other_root = env.agent("other-lead").await;
    let (_sub, mut events) = env.runtime.events().subscribe();

    let first = env.runtime.start_activation(env.spec("ext")).await.unwrap();
    assert_eq!(first.child_id(), &fixed);

    // The same provider and parent.
    let err = env
        .runtime
        .start_activation(env.spec("ext"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "DUPLICATE_RUN_ID");
    assert_eq!(first_provider.run(1).dispose_calls(), 1);

    // Another provider under another parent.
    let mut spec = spec_for(other_root.agent(), "ext-two");
    spec.delivery = Delivery::Parent;
    let err = env.runtime.start_activation(spec).await.unwrap_err();
    assert_eq!(err.code(), "DUPLICATE_RUN_ID");
    assert_eq!(second_provider.run(0).dispose_calls(), 1);
    let other_catalog =
        fold_catalog(other_root.agent().header(), &other_root.agent().events()).unwrap();
    assert!(other_catalog.is_empty());

    // The first run is untouched.
    assert_eq!(first_provider.run(0).dispose_calls(), 0);
    assert_eq!(env.runtime.live_activations(), 1);
    let starts = lifecycle(&drain(&mut events));
    assert_eq!(starts.len(), 1, "{starts:?}");
    first_provider.run(0).settle(completed("ok"));
    let result = bounded(first.result()).await.unwrap();
    assert_eq!(output_text(&result), "ok");
}

// B11 as it holds once a run settled: the runtime keeps no id per finished
// child, so a settled run's id is refused again under its own parent (whose
// catalog is durable and cached) but not under another parent.
#[tokio::test]
async fn b11_a_settled_runs_id_is_refused_under_its_parent_and_not_kept_for_others() {
    let env = env().await;
    let fixed = sid("settled-run");
    let provider = Arc::new(ExternalProvider::new("ext").with_id(fixed.clone()));
    env.runtime.register(provider.clone()).unwrap();
    let other_root = env.agent("other-lead").await;
    let mut spec = env.spec("ext");
    spec.delivery = Delivery::Parent;
    let settled = env.runtime.start_activation(spec).await.unwrap();
    bounded(settled.result()).await.unwrap();
    drop(settled);
    until(|| env.runtime.live_activations() == 0).await;
    assert_eq!(env.runtime.footprint().external_runs, 0);

    for delivery in [Delivery::Parent, Delivery::Caller] {
        let mut again = env.spec("ext");
        again.delivery = delivery;
        let err = env.runtime.start_activation(again).await.unwrap_err();
        assert_eq!(err.code(), "DUPLICATE_RUN_ID");
    }
    let elsewhere = env
        .runtime
        .start_activation(spec_for(other_root.agent(), "ext"))
        .await
        .unwrap();
    assert_eq!(elsewhere.child_id(), &fixed);
    bounded(elsewhere.result()).await.unwrap();
}

#[tokio::test]
async fn b11_a_reserved_local_id_already_in_use_is_refused_before_preparation() {
    let env = env().await;
    let local = Arc::new(LocalProvider::new("spawn"));
    env.runtime.register(local.clone()).unwrap();
    let (_sub, mut events) = env.runtime.events().subscribe();
    let mut spec = env.spec("spawn");
    spec.child_id = Some(env.parent.id().clone());
    let err = env.runtime.start_activation(spec).await.unwrap_err();
    assert_eq!(err.code(), "DUPLICATE_RUN_ID");
    assert_eq!(local.prepared(), 0);
    env.assert_nothing_left(&mut events).await;
}

// ---------------------------------------------------------------------------
// B12, B14: results and diagnostics
// ---------------------------------------------------------------------------

#[tokio::test]
async fn b12_a_failed_child_is_a_stop_reason_and_unknown_reasons_pass_through() {
    let env = env().await;
    let ext = Arc::new(ExternalProvider::held("ext"));
    env.runtime.register(ext.clone()).unwrap();
    let (_sub, mut events) = env.runtime.events().subscribe();

    let failed = env.runtime.start_activation(env.spec("ext")).await.unwrap();
    ext.run(0).settle(
        SubagentResult::stopped(StopReason::ERROR)
            .with_diagnostic("the agent process exited with status 3 during prompt"),
    );
    let result = bounded(failed.result())
        .await
        .expect("a child failure is not an Err");
    assert_eq!(result.stop_reason, StopReason::ERROR);
    assert_eq!(
        result.diagnostic.as_deref(),
        Some("the agent process exited with status 3 during prompt")
    );

    let limited = env.runtime.start_activation(env.spec("ext")).await.unwrap();
    ext.run(1)
        .settle(SubagentResult::stopped(StopReason::new("rate-limited")));
    let result = bounded(limited.result()).await.unwrap();
    assert_eq!(result.stop_reason.as_str(), "rate-limited");
    assert!(!result.stop_reason.is_known());
    assert!(!result.stop_reason.is_completed());

    // Only an infrastructure fault is an Err.
    let broken = env.runtime.start_activation(env.spec("ext")).await.unwrap();
    ext.run(2).fail(SubagentError::Infra(InfraError::Provider {
        provider: "ext".into(),
        message: "lost the run".into(),
    }));
    let err = bounded(broken.result()).await.unwrap_err();
    assert_eq!(err.code(), "PROVIDER_FAILED");

    until(|| env.runtime.tasks().is_empty()).await;
    let ends: Vec<RunOutcome> = drain(&mut events)
        .into_iter()
        .filter_map(|e| match e {
            SubagentEvent::End(_, outcome) => Some(outcome),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 3);
    assert_eq!(ends[0].stop_reason(), StopReason::ERROR);
    assert_eq!(ends[1].stop_reason(), StopReason::new("rate-limited"));
    assert!(matches!(&ends[2], RunOutcome::Error(message) if message.contains("lost the run")));
}

#[tokio::test]
async fn b12_a_local_model_failure_resolves_with_stop_reason_error() {
    let env = env().await;
    env.runtime
        .register(Arc::new(LocalProvider::new("spawn")))
        .unwrap();
    env.model.push(Scripted::Fail(ModelError::new(
        ModelErrorKind::Transport,
        "connection reset",
    )));
    let activation = env
        .runtime
        .start_activation(env.spec("spawn"))
        .await
        .unwrap();
    let result = bounded(activation.result())
        .await
        .expect("a model failure is not an Err");
    assert_eq!(result.stop_reason, StopReason::ERROR);
    assert!(result.diagnostic.is_some());
}

#[tokio::test]
async fn b14_a_long_diagnostic_is_cut_on_a_char_boundary_with_the_marker() {
    // Four-byte characters: the cut point must move back to a boundary.
    let long = "😀".repeat(2000); // 8000 bytes
    let result = SubagentResult::stopped(StopReason::ERROR).with_diagnostic(long.clone());
    let diagnostic = result.diagnostic.clone().unwrap();
    assert!(
        diagnostic.len() <= MAX_DIAGNOSTIC_BYTES,
        "{}",
        diagnostic.len()
    );
    assert!(diagnostic.ends_with(TRUNCATION_MARKER));
    let kept = diagnostic.strip_suffix(TRUNCATION_MARKER).unwrap();
    assert!(long.starts_with(kept));
    assert!(kept.chars().all(|c| c == '😀'));
    assert!(
        kept.len() + 4 + TRUNCATION_MARKER.len() > MAX_DIAGNOSTIC_BYTES,
        "cut too much"
    );

    // Two-byte characters.
    let long = "é".repeat(3000);
    let diagnostic = SubagentResult::stopped(StopReason::ERROR)
        .with_diagnostic(long.clone())
        .diagnostic
        .unwrap();
    assert!(diagnostic.len() <= MAX_DIAGNOSTIC_BYTES);
    assert!(diagnostic.ends_with(TRUNCATION_MARKER));
    assert!(long.starts_with(diagnostic.strip_suffix(TRUNCATION_MARKER).unwrap()));

    // At the limit nothing is cut; one byte over is.
    let exact = "a".repeat(MAX_DIAGNOSTIC_BYTES);
    let kept = SubagentResult::stopped(StopReason::ERROR).with_diagnostic(exact.clone());
    assert_eq!(kept.diagnostic.as_deref(), Some(exact.as_str()));
    let over = "a".repeat(MAX_DIAGNOSTIC_BYTES + 1);
    let cut = SubagentResult::stopped(StopReason::ERROR)
        .with_diagnostic(over)
        .diagnostic
        .unwrap();
    assert_eq!(cut.len(), MAX_DIAGNOSTIC_BYTES);
    assert!(cut.ends_with(TRUNCATION_MARKER));

    // Through the runtime, the bounded diagnostic reaches the caller as is.
    let env = env().await;
    let ext = Arc::new(ExternalProvider::held("ext"));
    env.runtime.register(ext.clone()).unwrap();
    let activation = env.runtime.start_activation(env.spec("ext")).await.unwrap();
    ext.run(0).settle(result);
    let got = bounded(activation.result()).await.unwrap();
    let diagnostic = got.diagnostic.unwrap();
    assert!(diagnostic.len() <= MAX_DIAGNOSTIC_BYTES);
    assert!(diagnostic.ends_with(TRUNCATION_MARKER));
}

// ---------------------------------------------------------------------------
// B15: disposal and shared results
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn b15_dispose_is_idempotent_and_every_holder_gets_the_same_result() {
    let env = env().await;
    let ext = Arc::new(ExternalProvider::held("ext"));
    env.runtime.register(ext.clone()).unwrap();
    let activation = env.runtime.start_activation(env.spec("ext")).await.unwrap();
    let other: SubagentActivation = activation.clone();
    let waiting = {
        let third = activation.clone();
        tokio::spawn(async move { third.result().await })
    };
    settle().await;
    assert!(!waiting.is_finished());

    let (a, b) = bounded(async { tokio::join!(activation.dispose(), other.dispose()) }).await;
    a.unwrap();
    b.unwrap();
    let (ra, rb) = tokio::join!(activation.result(), other.result());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    let rc = bounded(waiting).await.unwrap().unwrap();
    assert_eq!(ra, rb);
    assert_eq!(ra, rc);
    assert_eq!(ra.stop_reason, StopReason::ABORTED);
    assert_eq!(env.runtime.live_activations(), 0);

    // Again, after the teardown: still fine, nothing more happens.
    activation.dispose().await.unwrap();
    until(|| env.runtime.tasks().is_empty()).await;
    let run = ext.run(0);
    assert_eq!(run.effective_disposals(), 1);
    // The runtime disposes a stopped run once to stop it and once more in
    // teardown; SubagentRun::dispose is idempotent, so this is harmless.
    assert!(
        (1..=2).contains(&run.dispose_calls()),
        "{}",
        run.dispose_calls()
    );
}

#[tokio::test]
async fn b15_a_settled_external_run_is_disposed_exactly_once_in_teardown() {
    let env = env().await;
    let ext = Arc::new(ExternalProvider::held("ext"));
    env.runtime.register(ext.clone()).unwrap();
    let activation = env.runtime.start_activation(env.spec("ext")).await.unwrap();
    let run = ext.run(0);
    run.settle(completed("done"));
    bounded(activation.result()).await.unwrap();
    assert_eq!(run.dispose_calls(), 1, "the result settles after teardown");
    activation.dispose().await.unwrap();
    activation.dispose().await.unwrap();
    until(|| env.runtime.tasks().is_empty()).await;
    assert_eq!(run.dispose_calls(), 1);
}

#[tokio::test]
async fn b15_dispose_reports_a_teardown_failure_without_replacing_the_result() {
    let env = env().await;
    let ext =
        Arc::new(ExternalProvider::held("ext").failing_disposal("the process group survived"));
    env.runtime.register(ext.clone()).unwrap();
    let (_sub, mut events) = env.runtime.events().subscribe();
    let activation = env.runtime.start_activation(env.spec("ext")).await.unwrap();
    ext.run(0).settle(completed("captured"));
    let result = bounded(activation.result()).await.unwrap();
    assert_eq!(output_text(&result), "captured");

    let err = activation.dispose().await.unwrap_err();
    assert_eq!(err.code(), "TEARDOWN_FAILED");
    assert!(
        err.to_string().contains("the process group survived"),
        "{err}"
    );
    let again = activation.result().await.unwrap();
    assert_eq!(again, result, "the teardown failure replaced the result");

    until(|| env.runtime.tasks().is_empty()).await;
    let ends: Vec<RunOutcome> = drain(&mut events)
        .into_iter()
        .filter_map(|e| match e {
            SubagentEvent::End(_, outcome) => Some(outcome),
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 1);
    assert!(matches!(&ends[0], RunOutcome::Error(m) if m.contains("the process group survived")));
}

#[tokio::test(start_paused = true)]
async fn b15_disposing_a_local_activation_stops_the_child() {
    let env = env().await;
    env.runtime
        .register(Arc::new(LocalProvider::new("spawn")))
        .unwrap();
    env.model.push(Scripted::Hang);
    let activation = env
        .runtime
        .start_activation(env.spec("spawn"))
        .await
        .unwrap();
    let child = env.runtime.registry().get(activation.child_id()).unwrap();
    until(|| child.status() == dsh_core::AgentStatus::Running).await;
    settle().await;
    assert!(activation.result().now_or_never().is_none());

    let clone = activation.clone();
    let (a, b) = bounded(async { tokio::join!(activation.dispose(), clone.dispose()) }).await;
    a.unwrap();
    b.unwrap();
    let result = activation.result().await.unwrap();
    assert_eq!(result.stop_reason, StopReason::ABORTED);
    assert_eq!(env.runtime.live_activations(), 0);
    assert!(env.runtime.registry().get(activation.child_id()).is_none());
    // The child's log stays: it can be resumed later.
    assert!(env.sessions().await.contains(activation.child_id()));
}

// ---------------------------------------------------------------------------
// B17: capacity
// ---------------------------------------------------------------------------

#[tokio::test]
async fn b17_a_tree_has_at_most_the_configured_live_children() {
    let (env, ext) = capped(2).await;
    let first = env.runtime.start_activation(env.spec("ext")).await.unwrap();
    let _second = env.runtime.start_activation(env.spec("ext")).await.unwrap();

    let err = env
        .runtime
        .start_activation(env.spec("ext"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "CAPACITY");
    let message = err.to_string();
    assert!(message.contains("limit 2"), "{message}");
    assert!(message.contains("too many live subagents"), "{message}");
    assert_eq!(ext.started(), 2, "the provider ran for a refused start");

    // The cap is per tree: another root still has room.
    let other_root = env.agent("other-lead").await;
    let elsewhere = env
        .runtime
        .start_activation(spec_for(other_root.agent(), "ext"))
        .await
        .unwrap();
    assert_eq!(ext.started(), 3);

    ext.run(0).settle(completed("one"));
    bounded(first.result()).await.unwrap();
    let third = env.runtime.start_activation(env.spec("ext")).await.unwrap();
    // The third counts against the first tree, which had room again.
    assert_eq!(env.runtime.live_activations(), 3);
    drop((third, elsewhere));
}

/// A caller that awaits a child's result and then starts the next child
/// must find the settled child's capacity slot free. Here a slow
/// `subagent/end` listener (listeners are synchronous) keeps the runtime's
/// monitor task busy after the result settled, on another worker thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b17_capacity_is_free_once_the_result_settles() {
    let (env, ext) = capped(1).await;
    let first = env.runtime.start_activation(env.spec("ext")).await.unwrap();

    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let go_rx = Mutex::new(go_rx);
    let ended = Arc::new(AtomicUsize::new(0));
    let ends = ended.clone();
    let _slow_listener = env.runtime.events().listen(move |event| {
        if let SubagentEvent::End(..) = event {
            // Bounded: a missing release fails the test instead of hanging it.
            let _ = go_rx.lock().unwrap().recv_timeout(Duration::from_secs(10));
            ends.fetch_add(1, Ordering::SeqCst);
        }
    });

    ext.run(0).settle(completed("one"));
    let result = bounded(first.result()).await.unwrap();
    assert_eq!(output_text(&result), "one");
    assert_eq!(env.runtime.live_activations(), 0);
    let next = env.runtime.start_activation(env.spec("ext")).await;
    go_tx.send(()).unwrap();
    go_tx.send(()).unwrap();
    let next = next.map_err(|err| err.to_string());
    assert!(
        next.is_ok(),
        "a start right after the only child's result settled was refused: {next:?}"
    );
}

// ---------------------------------------------------------------------------
// Names (B26 subset)
// ---------------------------------------------------------------------------

#[tokio::test]
async fn names_an_invalid_name_fails_before_provider_code() {
    let env = env().await;
    let probe = Arc::new(Probe::new("probe", false, SubagentCapabilities::ALL));
    env.runtime.register(probe.clone()).unwrap();
    let (_sub, mut events) = env.runtime.events().subscribe();
    let too_long = "a".repeat(33);
    for bad in [
        "",
        "lead",
        "Reviewer",
        "1st",
        "-x",
        "a_b",
        "a b",
        "é",
        too_long.as_str(),
    ] {
        let mut spec = env.spec("probe");
        spec.name = Some(bad.to_owned());
        let err = env.runtime.start_activation(spec).await.unwrap_err();
        assert_eq!(err.code(), "INVALID_NAME", "{bad:?}: {err}");
        assert!(
            matches!(&err, SubagentError::Admission(AdmissionError::InvalidName { name, .. }) if name == bad),
            "{err:?}"
        );
    }
    assert_eq!(probe.calls(), 0);
    env.assert_nothing_left(&mut events).await;
}

#[tokio::test]
async fn names_a_name_is_taken_while_reserved_and_once_cataloged() {
    let env = env().await;
    let gate = Arc::new(Semaphore::new(0));
    let local = Arc::new(LocalProvider::new("spawn").gated(gate.clone()));
    let probe = Arc::new(Probe::new("probe", false, SubagentCapabilities::ALL));
    env.runtime.register(local.clone()).unwrap();
    env.runtime.register(probe.clone()).unwrap();

    // While the first start is being prepared, its reservation holds the name.
    let mut spec = env.spec("spawn");
    spec.name = Some("reviewer".into());
    let runtime = env.runtime.clone();
    let starting = tokio::spawn(async move { runtime.start_activation(spec).await });
    until(|| local.prepared() == 1).await;
    let mut clash = env.spec("probe");
    clash.name = Some("reviewer".into());
    let err = env
        .runtime
        .start_activation(clash.clone())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "NAME_TAKEN");
    assert!(err.to_string().contains("reviewer"), "{err}");

    gate.add_permits(1);
    let first = bounded(starting).await.unwrap().unwrap();
    assert_eq!(first.name(), "reviewer");
    bounded(first.result()).await.unwrap();

    // Settled or not, the catalog holds the name.
    let err = env.runtime.start_activation(clash).await.unwrap_err();
    assert_eq!(err.code(), "NAME_TAKEN");
    assert_eq!(probe.calls(), 0);
    assert_eq!(env.catalog().len(), 1);
    assert_eq!(
        env.catalog()
            .by_name("reviewer")
            .map(|e| e.child_id.clone()),
        Some(first.child_id().clone())
    );
}

#[tokio::test]
async fn names_omitted_names_are_agent_n_in_order() {
    let env = env().await;
    env.runtime
        .register(Arc::new(LocalProvider::new("spawn")))
        .unwrap();
    let first = env
        .runtime
        .start_activation(env.spec("spawn"))
        .await
        .unwrap();
    let second = env
        .runtime
        .start_activation(env.spec("spawn"))
        .await
        .unwrap();
    assert_eq!(first.name(), "agent-1");
    assert_eq!(second.name(), "agent-2");
    bounded(first.result()).await.unwrap();
    bounded(second.result()).await.unwrap();
    let third = env
        .runtime
        .start_activation(env.spec("spawn"))
        .await
        .unwrap();
    assert_eq!(third.name(), "agent-3");
    let names: Vec<Option<String>> = env
        .catalog()
        .entries()
        .iter()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(
        names,
        [
            Some("agent-1".to_owned()),
            Some("agent-2".to_owned()),
            Some("agent-3".to_owned())
        ]
    );
    let entry = env.catalog().get(first.child_id()).cloned().unwrap();
    assert_eq!(entry.mode, ChildMode::CONTINUABLE);
    assert_eq!(entry.provider, "spawn");
    assert_eq!(entry.label, "a task");
}

#[tokio::test]
async fn b32_drain_reports_every_teardown_failure_together_after_all_branches_settle() {
    let env = env().await;
    let failing =
        Arc::new(ExternalProvider::held("failing").failing_disposal("the process group survived"));
    let clean = Arc::new(ExternalProvider::held("clean"));
    env.runtime.register(failing.clone()).unwrap();
    env.runtime.register(clean.clone()).unwrap();
    // Two failing branches and one clean one under the drained root, plus a
    // run under another root that must keep running.
    let mut drained = Vec::new();
    for provider in ["failing", "clean", "failing"] {
        drained.push(
            env.runtime
                .start_activation(env.spec(provider))
                .await
                .unwrap(),
        );
    }
    let other_root = env.agent("other-root").await;
    let bystander = env
        .runtime
        .start_activation(spec_for(other_root.agent(), "clean"))
        .await
        .unwrap();

    let err = bounded(
        env.runtime
            .drain_descendants(std::slice::from_ref(&env.parent)),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "TEARDOWN_FAILED");
    let message = err.to_string();
    for index in [0, 1] {
        let id = failing.run(index).id().clone();
        assert!(
            message.contains(id.as_str()),
            "{id} missing from: {message}"
        );
    }
    assert!(
        !message.contains(clean.run(0).id().as_str()),
        "a clean teardown was reported: {message}"
    );
    // Every branch settled before the report, each run disposed once.
    for activation in &drained {
        assert!(
            activation.result().now_or_never().is_some(),
            "a branch was still running"
        );
    }
    for run in [failing.run(0), failing.run(1), clean.run(0)] {
        assert_eq!(run.effective_disposals(), 1);
    }
    // Admission below the drained root is closed; the other tree runs on.
    let refused = env
        .runtime
        .start_activation(env.spec("clean"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "DRAINING");
    assert!(
        bystander.result().now_or_never().is_none(),
        "an unrelated tree was stopped"
    );
    assert_eq!(clean.run(1).dispose_calls(), 0);
}
