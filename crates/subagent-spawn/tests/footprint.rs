//! A runtime that ran many children keeps nothing per child once they are
//! gone: after 200 children of one parent started one after another
//! (unnamed, so each takes a default `agent-N`, and named) settled and left
//! the live set, no activation, reserved name, delivery or resume is left,
//! only the one cached catalog of the live parent, which the names now
//! live in: a later start still cannot take a settled child's name. The
//! same holds for children started all at once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_core::{CancellationToken, ContentBlock};
use dsh_subagent::{
    ActivationSpec, AdmissionError, Delivery, RuntimeFootprint, StartRequest, SubagentError,
};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::{ExternalProvider, WorldBuilder};

const CHILDREN: usize = 200;

fn spec(lead: &std::sync::Arc<dyn dsh_core::Agent>, name: Option<String>) -> ActivationSpec {
    spec_for(lead, "local", name)
}

fn spec_for(
    lead: &std::sync::Arc<dyn dsh_core::Agent>,
    provider: &str,
    name: Option<String>,
) -> ActivationSpec {
    ActivationSpec {
        provider: provider.into(),
        label: "task".into(),
        name,
        child_id: None,
        cancel: CancellationToken::new(),
        delivery: Delivery::Caller,
        request: StartRequest::new(lead.clone(), vec![ContentBlock::text("work")]),
    }
}

/// Once every child settled, a runtime holds one live parent's catalog (and
/// `name_hints` next default names) and nothing per child.
async fn settled_to(runtime: &dsh_subagent::SubagentRuntime, name_hints: usize) {
    until(|| runtime.tasks().is_empty()).await;
    assert_eq!(
        runtime.footprint(),
        RuntimeFootprint {
            cached_catalogs: 1,
            name_hints,
            ..RuntimeFootprint::default()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_children_leave_nothing_behind_but_their_parents_catalog() {
    let world = WorldBuilder::new().memory().local().build().await;
    let runtime = &world.runtime;
    let lead = world.lead();
    for n in 0..CHILDREN {
        let name = (n % 2 == 1).then(|| format!("named-{n}"));
        let child = runtime.start_activation(spec(&lead, name)).await.unwrap();
        bounded(child.result()).await.unwrap();
    }
    settled_to(runtime, 1).await;
    // The names moved to the catalog: neither a default nor a chosen one
    // is handed out twice.
    let taken = runtime
        .start_activation(spec(&lead, Some("named-1".into())))
        .await
        .unwrap_err();
    assert!(
        matches!(
            taken,
            SubagentError::Admission(AdmissionError::NameTaken(ref name)) if name == "named-1"
        ),
        "{taken:?}"
    );
    let next = runtime.start_activation(spec(&lead, None)).await.unwrap();
    assert_eq!(next.name(), format!("agent-{}", CHILDREN / 2 + 1));
    bounded(next.result()).await.unwrap();
}

// Started all at once, so every start is in flight together (each holding
// its place in the parent's catalog order, its name and its slot): once
// they settled, nothing of any of them is left either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_children_leave_nothing_behind_but_their_parents_catalog() {
    let world = WorldBuilder::new().memory().local().build().await;
    let runtime = &world.runtime;
    let lead = world.lead();
    let starts = (0..CHILDREN).map(|_| async {
        let child = runtime.start_activation(spec(&lead, None)).await.unwrap();
        bounded(child.result()).await.unwrap();
    });
    futures::future::join_all(starts).await;
    settled_to(runtime, 1).await;
    let next = runtime.start_activation(spec(&lead, None)).await.unwrap();
    assert_eq!(next.name(), format!("agent-{}", CHILDREN + 1));
    bounded(next.result()).await.unwrap();
}

// External runs keep their ids only while they live (B11 holds among live
// runs): after many settled, the runtime holds none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_external_runs_leave_no_run_id_behind() {
    let world = WorldBuilder::new()
        .memory()
        .provider(std::sync::Arc::new(ExternalProvider::new("ext")))
        .build()
        .await;
    let runtime = &world.runtime;
    let lead = world.lead();
    for n in 0..CHILDREN {
        let mut spec = spec_for(&lead, "ext", Some(format!("run-{n}")));
        if n % 2 == 0 {
            spec.delivery = Delivery::Parent;
        }
        let child = runtime.start_activation(spec).await.unwrap();
        bounded(child.result()).await.unwrap();
    }
    settled_to(runtime, 0).await;
}

// A parent's catalog fold and its next default name are kept while it is
// live; parents that come and go leave them behind only until the cache
// sweeps, so they do not grow with the number of parents a runtime saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parents_that_left_do_not_keep_their_catalogs_or_name_hints() {
    const PARENTS: usize = 150;
    let world = WorldBuilder::new().memory().local().build().await;
    let runtime = &world.runtime;
    for n in 0..PARENTS {
        let root = world.agent(&format!("root-{n}")).await;
        let child = runtime
            .start_activation(spec(root.agent(), None))
            .await
            .unwrap();
        assert_eq!(child.name(), "agent-1");
        bounded(child.result()).await.unwrap();
        until(|| runtime.live_activations() == 0).await;
        root.dispose().await;
    }
    let footprint = runtime.footprint();
    assert!(
        footprint.cached_catalogs < PARENTS / 2,
        "{footprint:?}: folds of gone parents were kept"
    );
    assert!(
        footprint.name_hints <= footprint.cached_catalogs,
        "{footprint:?}: a gone parent's name hint outlived its fold"
    );
}
