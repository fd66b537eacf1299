//! A runtime that ran many children keeps nothing per child once they are
//! gone: after 200 children of one parent started one after another
//! (unnamed, so each takes a default `agent-N`, and named) settled and left
//! the live set, no activation, reserved name, delivery or resume is left,
//! only the one cached catalog of the live parent, which the names now
//! live in: a later start still cannot take a settled child's name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_core::{CancellationToken, ContentBlock};
use dsh_subagent::{
    ActivationSpec, AdmissionError, Delivery, RuntimeFootprint, StartRequest, SubagentError,
};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::WorldBuilder;

const CHILDREN: usize = 200;

fn spec(lead: &std::sync::Arc<dyn dsh_core::Agent>, name: Option<String>) -> ActivationSpec {
    ActivationSpec {
        provider: "local".into(),
        label: "task".into(),
        name,
        child_id: None,
        cancel: CancellationToken::new(),
        delivery: Delivery::Caller,
        request: StartRequest::new(lead.clone(), vec![ContentBlock::text("work")]),
    }
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
    until(|| runtime.tasks().is_empty()).await;
    assert_eq!(
        runtime.footprint(),
        RuntimeFootprint {
            cached_catalogs: 1,
            ..RuntimeFootprint::default()
        }
    );
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
