//! How many store reads a control tool makes, counted per log by the kit's
//! `FaultStore` over the real JSONL store: `wait` naming a sender, and the
//! refusals of `send_message` and `interrupt_agent` for a session outside
//! the caller's tree, read along the sessions concerned (their headers, the
//! live root's catalog), never by listing the whole tree. The same call on
//! a tree of a few members and on one of many makes the same reads, and no
//! other member's log is opened.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use dsh_core::{
    CallId, CancellationToken, ContentBlock, InboxTarget, MessageSource, SessionHeader, SessionId,
    SessionStore, Tool, ToolContext, UserMessage,
};
use dsh_subagent::catalog::{CATALOG_EVENT, catalog_payload};
use dsh_subagent::{CatalogEntry, ChildMode};
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::store::{FaultStore, SharedStore};
use dsh_test_support::wait::bounded;
use dsh_test_support::world::{Op, WorldBuilder, models, sid};
use dsh_tool_subagent_control::{ControlTools, RuntimeBinding};
use serde_json::{Value, json};

type World = dsh_test_support::world::World<FaultStore<SharedStore>>;

/// A world whose lead has a cold child `kid` (a log of its own, named in
/// the lead's catalog) and `members` more cataloged children, each with a
/// cold log, plus a root `stranger` of another tree.
async fn world(members: usize) -> (World, BTreeMap<String, Arc<dyn Tool>>) {
    let binding = RuntimeBinding::new();
    let control = ControlTools::with_binding(&binding);
    let tools = control
        .iter()
        .map(|tool| (tool.name().to_owned(), tool.clone()))
        .collect();
    let world = WorldBuilder::project()
        .counting()
        .model(models::echo())
        .tools(control)
        .provider(Arc::new(SpawnProvider::new()))
        .build()
        .await;
    assert!(binding.bind(world.runtime.clone()));
    let lead = world.lead();
    let names = std::iter::once("kid".to_owned()).chain((0..members).map(|n| format!("m{n}")));
    for name in names {
        let child = sid(&format!("s-{name}"));
        let mut header = SessionHeader::new(child.clone(), world.project());
        header.parent_session = Some(lead.id().clone());
        header.delegation_depth = 1;
        world.store.create(&header, &[]).await.unwrap();
        let entry = CatalogEntry {
            child_id: child,
            name: Some(name.clone()),
            label: format!("task {name}"),
            provider: "spawn".into(),
            mode: ChildMode::CONTINUABLE,
        };
        lead.record(CATALOG_EVENT, catalog_payload(&entry))
            .await
            .unwrap();
    }
    let stranger = SessionHeader::new(sid("s-stranger"), world.project());
    world.store.create(&stranger, &[]).await.unwrap();
    (world, tools)
}

/// Call `tool` as the lead; returns its text and the reads per log it made.
async fn reads_of(
    world: &World,
    tools: &BTreeMap<String, Arc<dyn Tool>>,
    tool: &str,
    input: Value,
) -> (String, BTreeMap<SessionId, u64>) {
    world.store.reset_calls();
    let ctx = ToolContext {
        agent: world.lead(),
        call_id: CallId::new("direct"),
        cancel: CancellationToken::new(),
    };
    let text = match bounded(tools[tool].execute(input, ctx)).await {
        Ok(output) => dsh_core::content::joined_text(&output.content),
        Err(err) => err.0,
    };
    (text, world.store.calls_by_log(Op::Load))
}

/// The three calls, with what each said and read, on a tree of `members`
/// more children.
async fn calls(members: usize) -> Vec<(String, BTreeMap<SessionId, u64>)> {
    let (world, tools) = world(members).await;
    let lead = world.lead();
    // A message from the cold child waits in the lead's inbox.
    let message = UserMessage::new(
        vec![ContentBlock::text("done")],
        MessageSource::AgentMessage {
            sender_session_id: sid("s-kid"),
        },
    );
    lead.send(message, InboxTarget::NextStep, false)
        .await
        .unwrap();
    let out = vec![
        reads_of(&world, &tools, "wait", json!({"timeout_ms": 1000})).await,
        reads_of(
            &world,
            &tools,
            "send_message",
            json!({"to": "s-stranger", "message": "hi"}),
        )
        .await,
        reads_of(
            &world,
            &tools,
            "interrupt_agent",
            json!({"to": "s-stranger"}),
        )
        .await,
    ];
    world.runtime.shutdown().await;
    world.harness.shutdown().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_tools_read_the_same_whatever_the_tree_size() {
    let small = calls(2).await;
    let large = calls(40).await;
    let [wait, send, interrupt] = &large[..] else {
        panic!("{large:?}");
    };
    assert!(wait.0.contains("a message from `kid`"), "{}", wait.0);
    assert!(send.0.contains("s-stranger"), "{}", send.0);
    assert!(interrupt.0.contains("s-stranger"), "{}", interrupt.0);
    for ((tool, (small_text, small_reads)), (large_text, large_reads)) in
        ["wait", "send_message", "interrupt_agent"]
            .iter()
            .zip(&small)
            .zip(&large)
    {
        assert_eq!(small_text, large_text, "{tool}");
        assert_eq!(
            small_reads, large_reads,
            "{tool}: the reads grow with the tree"
        );
        let members: Vec<&SessionId> = large_reads
            .keys()
            .filter(|id| id.as_str().starts_with("s-m"))
            .collect();
        assert!(
            members.is_empty(),
            "{tool} read members it is not about: {members:?}"
        );
    }
}
