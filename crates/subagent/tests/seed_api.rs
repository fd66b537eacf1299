//! The seed API items the runtime lacked (runtime.md §4), each pinned by a
//! test that failed before it existed: the depth policy resolved against
//! the user's live setting, and `AgentOptions::subagent_depth`, which
//! deepens a child's delegation depth but never lowers it (B20); the
//! provider registration as a disposer and `provider-added` carrying the
//! provider's descriptor; lifecycle events a listener can scope to one tree,
//! with `subagent/end` carrying the final output or the failure; the
//! resolved start request carrying the label and the preset; seed 002's
//! traversal rule and listing rows with `has_children` and activity; the
//! second drain method, `drain_continuable_children`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_core::{
    AgentHandle, AgentOptions, CancellationToken, Durability, SessionHeader, SessionStore,
};
use std::sync::Arc;

use dsh_core::StopReason;
use dsh_subagent::{
    CATALOG_EVENT, CatalogEntry, ChildActivity, ChildMode, DescendantRow, RowDiagnostic,
    catalog_payload,
};
use dsh_subagent::{
    DEFAULT_MAX_DEPTH, InfraError, MaxDepth, ProviderDescriptor, RunOutcome, RuntimeConfig,
    SubagentCapabilities, SubagentError, SubagentEvent, TREE_EVENTS_BUFFER,
};
use dsh_test_support::wait::bounded;
use dsh_test_support::world::{
    Backing, ExternalProvider, LocalProvider, RunEnd, World, create_session, sid,
};

async fn world() -> World {
    World::new(Backing::Jsonl(Durability::None), RuntimeConfig::default()).await
}

/// A live root `id` whose composition carries `options`.
async fn root_with(world: &World, id: &str, options: AgentOptions) -> AgentHandle {
    let mut header = SessionHeader::new(sid(id), world.dir());
    header.composition.options = options;
    create_session(&world.harness, header).await
}

fn deepened(depth: u32) -> AgentOptions {
    AgentOptions {
        subagent_depth: Some(depth),
        ..AgentOptions::default()
    }
}

// Seed 002 `resolveMaxDepth(configured | 'provider-managed')`.
#[tokio::test]
async fn the_depth_policy_resolves_against_the_live_user_setting() {
    let world = world().await;
    let runtime = &world.runtime;
    assert_eq!(runtime.max_depth(), DEFAULT_MAX_DEPTH);
    assert_eq!(runtime.resolve_max_depth(None), Some(DEFAULT_MAX_DEPTH));

    runtime.set_max_depth(1);
    assert_eq!(runtime.resolve_max_depth(None), Some(1), "a live edit");
    // An explicit tool limit holds, above the user setting too.
    assert_eq!(runtime.resolve_max_depth(Some(MaxDepth::Limit(2))), Some(2));
    assert_eq!(
        runtime.resolve_max_depth(Some(MaxDepth::ProviderManaged)),
        None
    );
}

// B20: options can deepen a child, never make it shallower.
#[tokio::test]
async fn subagent_depth_deepens_a_child_and_never_lowers_it() {
    let world = world().await;
    let deep = root_with(&world, "deep", deepened(4)).await;
    let depth_of = |child: &dsh_core::SessionId| {
        world
            .runtime
            .registry()
            .get(child)
            .expect("the child is live until it settles")
            .header()
            .delegation_depth
    };

    // A parent counting as depth 4 (header 0) starts a child at 5, durably.
    let mut spec = world.spec(Some("below-deep"));
    spec.request.parent = deep.agent().clone();
    let child = world.runtime.start_activation(spec).await.unwrap();
    assert_eq!(depth_of(child.child_id()), 5);
    let stored = world.store.load(child.child_id()).await.unwrap();
    assert_eq!(stored.header.delegation_depth, 5);
    bounded(child.result()).await.unwrap();

    // The cap applies to the deepened depth.
    let mut spec = world.spec(Some("too-deep"));
    spec.request.parent = deep.agent().clone();
    spec.request.max_depth = Some(4);
    let err = world.runtime.start_activation(spec).await.unwrap_err();
    assert_eq!(err.code(), "DEPTH_LIMIT", "{err}");

    // A request's own depth deepens the child further ...
    let mut spec = world.spec(Some("deeper"));
    spec.request.parent = deep.agent().clone();
    spec.request.agent_options = Some(deepened(7));
    let child = world.runtime.start_activation(spec).await.unwrap();
    assert_eq!(depth_of(child.child_id()), 7);
    bounded(child.result()).await.unwrap();

    // ... but a shallower one changes nothing: under the plain root the
    // child is still at 1, under the deep one still at 5.
    for (parent, name, expected) in [(&world.root, "plain", 1), (&deep, "not-lowered", 5)] {
        let mut spec = world.spec(Some(name));
        spec.request.parent = parent.agent().clone();
        spec.request.agent_options = Some(deepened(0));
        let child = world.runtime.start_activation(spec).await.unwrap();
        assert_eq!(depth_of(child.child_id()), expected, "{name}");
        bounded(child.result()).await.unwrap();
    }
    world.quiesce().await;
}

fn drain(events: &mut dsh_core::observe::Events<SubagentEvent>) -> Vec<SubagentEvent> {
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        seen.push(event);
    }
    seen
}

/// What a tree's stream holds now (it lost nothing).
fn drain_tree(events: &mut tokio::sync::broadcast::Receiver<SubagentEvent>) -> Vec<SubagentEvent> {
    let mut seen = Vec::new();
    loop {
        match events.try_recv() {
            Ok(event) => seen.push(event),
            Err(tokio::sync::broadcast::error::TryRecvError::Empty) => return seen,
            Err(other) => panic!("the stream lost events: {other:?}"),
        }
    }
}

// Seed 002 `registerProvider(p): () => void` and `provider-added(provider)`.
#[tokio::test]
async fn a_registration_is_the_disposer_of_exactly_its_provider() {
    let world = world().await;
    let runtime = &world.runtime;
    let (_sub, mut events) = runtime.events().subscribe();

    let registration = runtime
        .register_provider(Arc::new(ExternalProvider::new("ext")))
        .unwrap();
    assert_eq!(registration.name(), "ext");
    let added = ProviderDescriptor {
        name: "ext".into(),
        capabilities: SubagentCapabilities::ALL,
        inherits_parent_context: false,
        continuable: false,
        external: true,
        agent_route_defaults: None,
    };
    assert_eq!(
        drain(&mut events),
        [SubagentEvent::ProviderAdded(added.clone())]
    );

    // Removal through the registration, once.
    assert!(registration.remove());
    assert!(runtime.get("ext").is_none());
    assert_eq!(
        drain(&mut events),
        [SubagentEvent::ProviderRemoved("ext".into())]
    );

    // A registration outlived by its provider removes nothing of a later
    // one under the same name.
    let stale = runtime
        .register_provider(Arc::new(LocalProvider::new("shared")))
        .unwrap();
    assert!(runtime.remove("shared"));
    let later = runtime
        .register_provider(Arc::new(LocalProvider::new("shared")))
        .unwrap();
    assert!(!stale.remove(), "the stale registration removed nothing");
    assert!(runtime.get("shared").is_some());

    // Dropping the registration unregisters; a kept one stays.
    drop(later);
    assert!(runtime.get("shared").is_none());
    runtime
        .register_provider(Arc::new(ExternalProvider::new("kept")))
        .unwrap()
        .keep();
    assert!(runtime.get("kept").is_some());

    let names: Vec<&str> = drain(&mut events).iter().map(SubagentEvent::name).collect();
    assert_eq!(
        names,
        [
            "subagent/provider-added",
            "subagent/provider-removed",
            "subagent/provider-added",
            "subagent/provider-removed",
            "subagent/provider-added",
        ]
    );
}

// Seed 002/003: `subagent/start` and `subagent/end` scoped to one tree;
// the end carries the final output, or the infrastructure failure.
#[tokio::test]
async fn lifecycle_events_are_scoped_by_tree_and_the_end_carries_the_outcome() {
    let world = world().await;
    let failure = SubagentError::Infra(InfraError::Provider {
        provider: "broken".into(),
        message: "the run was lost".into(),
    });
    world
        .runtime
        .register(Arc::new(
            ExternalProvider::new("broken").ending(RunEnd::Fails(failure)),
        ))
        .unwrap();
    let other = create_session(
        &world.harness,
        SessionHeader::new(sid("other"), world.dir()),
    )
    .await;
    let lead = world.root.agent().id().clone();
    let (_lead_sub, mut lead_events) = world.runtime.subscribe_tree(&lead);
    let (_other_sub, mut other_events) = world.runtime.subscribe_tree(other.agent().id());

    let child = world
        .runtime
        .start_activation(world.spec(Some("worker")))
        .await
        .unwrap();
    let output = bounded(child.result()).await.unwrap();
    assert_eq!(dsh_core::content::joined_text(&output.output), "done");
    let mut spec = world.spec(Some("lost"));
    spec.provider = "broken".into();
    let lost = world.runtime.start_activation(spec).await.unwrap();
    bounded(lost.result()).await.unwrap_err();
    let mut spec = world.spec(Some("elsewhere"));
    spec.request.parent = other.agent().clone();
    let elsewhere = world.runtime.start_activation(spec).await.unwrap();
    bounded(elsewhere.result()).await.unwrap();
    world.quiesce().await;

    let seen = drain_tree(&mut lead_events);
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen.iter().all(|event| event.root() == Some(&lead)));
    // A monitor emits its end after the result settles, so the ends are
    // found by child, not by position.
    let end_of = |child: &dsh_core::SessionId| {
        seen.iter()
            .find_map(|event| match event {
                SubagentEvent::End(info, outcome) if info.child_id == *child => Some(outcome),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no end for {child}: {seen:?}"))
    };
    match end_of(child.child_id()) {
        RunOutcome::Settled(result) => {
            assert_eq!(result, &output, "the end carries the final output");
        }
        other => panic!("expected the worker's result, got {other:?}"),
    }
    match end_of(lost.child_id()) {
        outcome @ RunOutcome::Error(message) => {
            assert!(message.contains("the run was lost"), "{message}");
            assert_eq!(outcome.stop_reason(), StopReason::ERROR);
        }
        other => panic!("expected the lost run's failure, got {other:?}"),
    }

    let seen = drain_tree(&mut other_events);
    let names: Vec<&str> = seen.iter().map(SubagentEvent::name).collect();
    assert_eq!(names, ["subagent/start", "subagent/end"]);
    assert!(
        seen.iter()
            .all(|event| event.root() == Some(other.agent().id()))
    );
    // Provider events belong to no tree, so a tree listener never sees them.
    world
        .runtime
        .register(Arc::new(LocalProvider::new("late")))
        .unwrap();
    assert!(drain_tree(&mut lead_events).is_empty());
}

// A tree's stream is bounded: a receiver that stops reading holds at most
// `TREE_EVENTS_BUFFER` events; past that it loses the oldest, is told how
// many, and reads on from the oldest kept.
#[tokio::test]
async fn a_tree_stream_that_is_not_read_keeps_a_bounded_number_of_events() {
    let world = world().await;
    world
        .runtime
        .register(Arc::new(ExternalProvider::new("ext")))
        .unwrap();
    let lead = world.root.agent().id().clone();
    let (_subscription, mut events) = world.runtime.subscribe_tree(&lead);
    let children = TREE_EVENTS_BUFFER / 2 + 10;
    for n in 0..children {
        let mut spec = world.spec(Some(&format!("run-{n}")));
        spec.provider = "ext".into();
        let run = world.runtime.start_activation(spec).await.unwrap();
        bounded(run.result()).await.unwrap();
    }
    world.quiesce().await;
    // Two events a child (start, end): twenty too many were kept for no reader.
    let lost = (children * 2 - TREE_EVENTS_BUFFER) as u64;
    assert!(matches!(
        events.try_recv(),
        Err(tokio::sync::broadcast::error::TryRecvError::Lagged(n)) if n == lost
    ));
    assert_eq!(drain_tree(&mut events).len(), TREE_EVENTS_BUFFER);
}

// Seed 002 `ResolvedSubagentStartRequest extends SubagentStartRequest`:
// the provider sees the label and the preset it was asked for.
#[tokio::test]
async fn the_resolved_request_carries_the_label_and_the_preset() {
    let world = world().await;
    let external = Arc::new(ExternalProvider::new("ext"));
    world.runtime.register(external.clone()).unwrap();
    let mut spec = world.spec(Some("labelled"));
    spec.provider = "ext".into();
    spec.label = "review the parser".into();
    spec.request.agent_preset = Some("reviewer".into());
    let run = world.runtime.start_activation(spec).await.unwrap();
    bounded(run.result()).await.unwrap();
    let seen = external.seen_request().expect("the provider was started");
    assert_eq!(seen.label, "review the parser");
    assert_eq!(seen.agent_preset.as_deref(), Some("reviewer"));

    world.quiesce().await;
}

/// Record in `parent`'s catalog a child `id` named `name` of `mode`.
async fn record(parent: &AgentHandle, id: &str, name: &str, mode: &str) {
    let entry = CatalogEntry {
        child_id: sid(id),
        name: Some(name.to_owned()),
        label: format!("{mode} {id}"),
        provider: "by-hand".into(),
        mode: serde_json::from_value(serde_json::json!(mode)).unwrap(),
    };
    parent
        .agent()
        .record(CATALOG_EVENT, catalog_payload(&entry))
        .await
        .unwrap();
}

/// A live session `id` created under `parent`.
async fn child_session(world: &World, parent: &AgentHandle, id: &str) -> AgentHandle {
    let mut header = SessionHeader::new(sid(id), world.dir());
    header.parent_session = Some(parent.agent().id().clone());
    header.delegation_depth = 1;
    create_session(&world.harness, header).await
}

fn row<'a>(rows: &'a [DescendantRow], id: &str) -> &'a DescendantRow {
    rows.iter()
        .find(|row| row.entry.child_id.as_str() == id)
        .unwrap_or_else(|| panic!("{id} is not listed: {rows:?}"))
}

// Seed 002: one-shot and unknown-mode entries are traversal nodes for a
// listing (only external children are leaves, and unknown ones are marked
// `unsupported`); for name resolution external and unknown entries are the
// leaves. Rows say whether they have children and what the child is doing.
#[tokio::test]
async fn listings_traverse_one_shot_and_unknown_children_and_rows_carry_children_and_activity() {
    let world = world().await;
    let lead = &world.root;
    let one_shot = child_session(&world, lead, "s-once").await;
    let unknown = child_session(&world, lead, "s-odd").await;
    record(lead, "s-once", "once", ChildMode::ONE_SHOT.as_str()).await;
    record(lead, "s-odd", "odd", ChildMode::UNKNOWN.as_str()).await;
    record(lead, "s-ext", "ext", ChildMode::EXTERNAL.as_str()).await;
    record(
        &one_shot,
        "s-below-once",
        "below",
        ChildMode::EXTERNAL.as_str(),
    )
    .await;
    record(
        &unknown,
        "s-below-odd",
        "below",
        ChildMode::EXTERNAL.as_str(),
    )
    .await;
    unknown.dispose().await;

    let rows = world
        .runtime
        .list_descendants(lead.agent().id(), &CancellationToken::new())
        .await
        .unwrap();
    let once = row(&rows, "s-once");
    assert!(once.has_children, "a one-shot child is traversed");
    assert_eq!(once.diagnostic, None);
    assert_eq!(once.activity, ChildActivity::Idle, "live and idle");
    let below = row(&rows, "s-below-once");
    assert_eq!(
        (below.depth, below.path.as_deref()),
        (2, Some("once/below"))
    );
    let odd = row(&rows, "s-odd");
    assert!(odd.has_children, "an unknown-mode child is traversed");
    assert_eq!(odd.diagnostic, Some(RowDiagnostic::Unsupported));
    assert_eq!(odd.activity, ChildActivity::Inactive, "disposed: cold");
    assert_eq!(row(&rows, "s-below-odd").path.as_deref(), Some("odd/below"));
    let ext = row(&rows, "s-ext");
    assert!(!ext.has_children && ext.diagnostic.is_none(), "a leaf");
    assert_eq!(ext.activity, ChildActivity::Inactive);
    assert!(!below.has_children);

    // Resolution walks through a one-shot child, not through an unknown
    // or external one.
    let resolve = |name: &'static str| {
        let runtime = world.runtime.clone();
        let caller = lead.agent().clone();
        async move {
            runtime
                .resolve_name(&caller, name, &CancellationToken::new())
                .await
        }
    };
    assert_eq!(resolve("once/below").await.unwrap(), sid("s-below-once"));
    for leaf in ["odd/below", "ext/below"] {
        let err = resolve(leaf).await.unwrap_err();
        assert_eq!(err.code(), "AGENT_NAME_NOT_FOUND", "{leaf}: {err}");
    }

    // The logs alone list the same tree, row for row, through the same
    // walk; with no runtime behind them nothing is live.
    let stored = dsh_subagent::list_stored_descendants(
        world.store.as_ref(),
        lead.agent().id(),
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    let cold: Vec<DescendantRow> = rows
        .iter()
        .cloned()
        .map(|mut row| {
            row.activity = ChildActivity::Inactive;
            row
        })
        .collect();
    assert_eq!(stored, cold);
    one_shot.dispose().await;
}

// Seed 003's second drain: `drain_continuable_children(parent, ids)` stops
// exactly the named live children of that parent and closes nothing.
#[tokio::test]
async fn drain_continuable_children_stops_only_the_named_children_of_the_parent() {
    let world = world().await;
    let other = create_session(
        &world.harness,
        SessionHeader::new(sid("other"), world.dir()),
    )
    .await;
    for _ in 0..4 {
        world.model.push(dsh_harness::Scripted::Hang);
    }
    let mut children = Vec::new();
    for name in ["a", "b", "c"] {
        children.push(
            world
                .runtime
                .start_activation(world.spec(Some(name)))
                .await
                .unwrap(),
        );
    }
    let mut spec = world.spec(Some("d"));
    spec.request.parent = other.agent().clone();
    let foreign = world.runtime.start_activation(spec).await.unwrap();
    let live = |id: &dsh_core::SessionId| world.runtime.registry().get(id).is_some();

    let ids = [
        children[0].child_id().clone(),
        children[1].child_id().clone(),
        foreign.child_id().clone(),
        sid("s-never-started"),
    ];
    bounded(
        world
            .runtime
            .drain_continuable_children(world.root.agent(), &ids),
    )
    .await
    .unwrap();
    for drained in &children[..2] {
        let result = bounded(drained.result()).await.unwrap();
        assert_eq!(result.stop_reason, StopReason::ABORTED);
        assert!(!live(drained.child_id()));
    }
    assert!(live(children[2].child_id()), "an unnamed sibling runs on");
    assert!(
        live(foreign.child_id()),
        "another parent's child is left alone"
    );

    // Nothing was closed: the parent starts again at once.
    let again = world
        .runtime
        .start_activation(world.spec(Some("again")))
        .await
        .unwrap();
    bounded(again.result()).await.unwrap();

    // A parent that is not the exact live agent drains nothing.
    let stale = other.agent().clone();
    other.dispose().await;
    let err = world
        .runtime
        .drain_continuable_children(&stale, &[foreign.child_id().clone()])
        .await
        .unwrap_err();
    assert_eq!(err.code(), "NOT_LIVE", "{err}");
    for running in [&children[2], &foreign] {
        bounded(running.dispose()).await.unwrap();
    }
    world.quiesce().await;
}

// One catalog read names a child's entry, live parent or cold, so a tool
// need not list the whole tree for it.
#[tokio::test]
async fn child_entry_reads_one_parents_catalog() {
    let world = world().await;
    let lead = world.root.agent().id().clone();
    let child = world.cold_child("known").await;
    let entry = world
        .runtime
        .child_entry(&lead, child.child_id())
        .await
        .unwrap()
        .expect("the lead's catalog holds the child");
    assert_eq!(entry.mode, ChildMode::CONTINUABLE);
    assert_eq!(entry.name.as_deref(), Some("known"));
    assert!(
        world
            .runtime
            .child_entry(&lead, &sid("s-stranger"))
            .await
            .unwrap()
            .is_none()
    );
    // A cold parent is read from its log.
    let err = world
        .runtime
        .child_entry(&sid("s-no-log"), child.child_id())
        .await
        .unwrap_err();
    assert_eq!(err.code(), "SESSION_NOT_FOUND", "{err}");
}
