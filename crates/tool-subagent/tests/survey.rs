//! The `subagent_survey` tool (seed 003) over a real runtime with real
//! providers: the matrix as a model reads it, the same matrix after a
//! provider is removed and after it is registered again, and a provider
//! removed between the registry's `list` and `get`, which the survey
//! reports instead of failing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use dsh_core::{CallId, Tool, ToolContext};
use dsh_subagent::{RuntimeConfig, SubagentProvider, SubagentRuntime};
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::specs::assert_committed_specs;
use dsh_test_support::world::{Backing, ExternalProvider, World};
use dsh_tool_subagent::SurveyTool;
use dsh_tool_subagent::survey::{ProviderDirectory, survey};

async fn world() -> World {
    let world = World::new(
        Backing::Jsonl(dsh_core::Durability::None),
        RuntimeConfig::default(),
    )
    .await;
    world
        .runtime
        .register(Arc::new(SpawnProvider::new()))
        .unwrap();
    world
        .runtime
        .register(Arc::new(ForkProvider::new()))
        .unwrap();
    world
        .runtime
        .register(Arc::new(ExternalProvider::new("remote")))
        .unwrap();
    world
}

async fn run(world: &World) -> String {
    let tool = SurveyTool::new(world.runtime.clone());
    let output = tool
        .execute(
            serde_json::json!({}),
            ToolContext {
                agent: world.root.agent().clone(),
                call_id: CallId::new("call-1"),
                cancel: Default::default(),
            },
        )
        .await
        .unwrap();
    assert!(!output.is_error);
    dsh_core::content::joined_text(&output.content)
}

#[tokio::test]
async fn the_matrix_with_a_provider_removed_and_registered_again() {
    let world = world().await;
    let before = run(&world).await;
    assert!(world.runtime.remove("fork"));
    let removed = run(&world).await;
    world
        .runtime
        .register(Arc::new(ForkProvider::new()))
        .unwrap();
    let again = run(&world).await;
    insta::assert_snapshot!(format!(
        "== all registered\n{before}\n\n== fork removed\n{removed}\n\n== fork registered again\n{again}"
    ));
    world.runtime.shutdown().await;
    world.root.dispose().await;
}

/// The runtime, with a provider taken away right after the names are read.
struct RemovingBetween {
    runtime: SubagentRuntime,
    victim: Mutex<Option<&'static str>>,
}

impl ProviderDirectory for RemovingBetween {
    fn provider_names(&self) -> Vec<String> {
        let names = self.runtime.provider_names();
        if let Some(victim) = self.victim.lock().unwrap().take() {
            assert!(self.runtime.remove(victim));
        }
        names
    }

    fn provider(&self, name: &str) -> Option<Arc<dyn SubagentProvider>> {
        self.runtime.provider(name)
    }
}

#[tokio::test]
async fn a_provider_removed_between_list_and_get_is_reported_not_an_error() {
    let world = world().await;
    let racing = RemovingBetween {
        runtime: world.runtime.clone(),
        victim: Mutex::new(Some("spawn")),
    };
    let text = survey(&racing);
    assert!(
        text.contains("spawn: removed while the survey ran"),
        "{text}"
    );
    assert!(text.contains("fork\n  start-time capabilities:"), "{text}");
    assert_eq!(world.runtime.list(), ["local", "fork", "remote"]);
    world.runtime.shutdown().await;
    world.root.dispose().await;
}

#[tokio::test]
async fn no_provider_is_said_in_a_sentence() {
    let world = World::new(
        Backing::Jsonl(dsh_core::Durability::None),
        RuntimeConfig::default(),
    )
    .await;
    assert!(world.runtime.remove("local"));
    assert_eq!(run(&world).await, "No subagent provider is registered.");
    world.runtime.shutdown().await;
    world.root.dispose().await;
}

#[tokio::test]
async fn the_committed_spec_is_the_live_one() {
    let world = world().await;
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(SurveyTool::new(world.runtime.clone()))];
    assert_committed_specs(
        env!("CARGO_MANIFEST_DIR"),
        &tools,
        "cargo test -p dsh-tool-subagent --test survey",
    );
    world.runtime.shutdown().await;
    world.root.dispose().await;
}
