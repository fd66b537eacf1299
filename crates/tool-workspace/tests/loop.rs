//! The tools inside the real agent loop: registered as host tools of a
//! harness, offered to an agent whose composition allows only `read_file`
//! and `grep` (the runtime's tool filter applies to them like any other),
//! called by a scripted model, with the harness checking arguments against
//! the published schemas before `execute`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_core::{
    AgentFactory, CancellationToken, ContentBlock, CreateAgent, Durability, MessageSource,
    SessionHeader, SessionId, ToolRestriction, UserMessage,
};
use dsh_harness::{Harness, JsonlStore, Scripted, ScriptedModel};
use dsh_tool_workspace::{Policy, WorkspaceTools};
use serde_json::json;

#[tokio::test]
async fn a_filtered_agent_reads_and_greps_through_the_loop() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "alpha\nbeta\n").unwrap();
    let model = Arc::new(ScriptedModel::with_responses([
        Scripted::ToolCalls {
            text: None,
            calls: vec![
                ("read_file".into(), json!({"path": "a.txt"})),
                ("grep".into(), json!({"pattern": "beta", "regex": true})),
                ("shell".into(), json!({"command": "touch x"})),
            ],
        },
        Scripted::Text("done".into()),
    ]));
    let store = Arc::new(JsonlStore::new(dir.path().join("sessions"), Durability::None).unwrap());
    let mut builder = Harness::builder(store).model(model.clone());
    for tool in WorkspaceTools::new(&root, Policy::default()).unwrap() {
        builder = builder.tool(tool).unwrap();
    }
    let harness = builder.build().unwrap();
    let mut header = SessionHeader::new(SessionId::new("reader").unwrap(), &root);
    header.composition.tools = Some(ToolRestriction::allow(["read_file", "grep"]));
    let agent = harness
        .create(CreateAgent {
            header,
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap()
        .agent()
        .clone();
    agent
        .followup(UserMessage::new(
            vec![ContentBlock::text("look")],
            MessageSource::User,
        ))
        .await
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), agent.wait_idle())
        .await
        .unwrap();
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let mut offered: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    offered.sort_unstable();
    assert_eq!(offered, ["grep", "read_file"]);
    let results = serde_json::to_string(&requests[1].messages).unwrap();
    assert!(results.contains("     1\\talpha"), "{results}");
    // The unknown field is caught against the schema, and shell is not offered.
    assert!(
        results.contains("Additional properties are not allowed ('regex' was unexpected)"),
        "{results}"
    );
    assert!(
        results.contains("Tool `shell` is not available to this agent."),
        "{results}"
    );
    assert!(!root.join("x").exists());
}
