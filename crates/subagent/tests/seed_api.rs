//! The seed API items the runtime lacked (runtime.md §4), each pinned by a
//! test that failed before it existed: the depth policy resolved against
//! the user's live setting, and `AgentOptions::subagent_depth`, which
//! deepens a child's delegation depth but never lowers it (B20).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_core::{AgentHandle, AgentOptions, Durability, SessionHeader, SessionStore};
use dsh_subagent::{DEFAULT_MAX_DEPTH, MaxDepth, RuntimeConfig};
use dsh_test_support::wait::bounded;
use dsh_test_support::world::{Backing, World, create_session, sid};

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
