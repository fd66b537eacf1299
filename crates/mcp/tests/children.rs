//! B62 through the subagent runtime: one tree's lead starts two spawn
//! children with two `subagent` tools whose tool filters differ; the
//! child allowed `mcp__fs__read_text_file` reads a file through the
//! registry's `server-filesystem`, the child whose filter leaves it out
//! is not shown it and is refused when it calls it anyway. One server
//! process serves the whole tree.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use dsh_core::{Message, ModelRequest, ToolRestriction, UserMessage};
use dsh_harness::{Scripted, ScriptedModel};
use dsh_mcp::{McpServerConfig, McpServers};
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::requests::{first_user_text, tool_results as results};
use dsh_test_support::wait::bounded;
use dsh_test_support::world::WorldBuilder;
use dsh_tool_subagent::{SubagentTool, SubagentToolConfig};
use serde_json::json;
use support::{marked, marker, npm_servers};

/// A foreground `subagent` tool named `name` whose children get `filter`.
fn child_tool(name: &str, filter: ToolRestriction) -> SubagentToolConfig {
    SubagentToolConfig {
        tool_name: name.to_owned(),
        tool_filter: Some(filter),
        background: false,
        ..SubagentToolConfig::new("spawn")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_child_reads_through_the_server_and_one_whose_filter_omits_it_cannot() {
    let Some(dir) = npm_servers() else { return };
    let mark = marker("children");
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let file = root_path.join("notes.txt");
    std::fs::write(&file, "the answer is 42\n").unwrap();
    let config = McpServerConfig::command("fs", "node").args([
        dir.join("server-filesystem/dist/index.js")
            .display()
            .to_string(),
        root_path.display().to_string(),
        format!("--dsh-mark={mark}"),
    ]);
    let servers = McpServers::new(vec![config], root_path.clone()).unwrap();
    let tools = servers.tools().await.unwrap();

    let read = json!({"path": file.display().to_string()});
    let model = Arc::new(ScriptedModel::new().responder(move |request| {
        let first = first_user_text(request);
        let done = request
            .messages
            .iter()
            .any(|m| matches!(m, Message::Tool { .. }));
        match (first.starts_with("lead:"), done) {
            (true, false) => Scripted::ToolCalls {
                text: None,
                calls: vec![
                    (
                        "reader".into(),
                        json!({"description": "read", "prompt": "task: read the notes"}),
                    ),
                    (
                        "blind".into(),
                        json!({"description": "peek", "prompt": "task: peek at the notes"}),
                    ),
                ],
            },
            (false, false) => Scripted::ToolCalls {
                text: None,
                calls: vec![("mcp__fs__read_text_file".into(), read.clone())],
            },
            (_, true) => Scripted::Text("done".into()),
        }
    }));
    let world = WorldBuilder::project()
        .model(model.clone())
        .provider(Arc::new(SpawnProvider::new()))
        .setup(move |harness, runtime| {
            for tool in tools {
                harness.add_tool(tool).unwrap();
            }
            let reader = child_tool(
                "reader",
                ToolRestriction::allow(["mcp__fs__read_text_file"]),
            );
            let blind = child_tool("blind", ToolRestriction::deny(["mcp__fs__read_text_file"]));
            for config in [reader, blind] {
                harness
                    .add_tool(SubagentTool::install(runtime, config).unwrap())
                    .unwrap();
            }
        })
        .build()
        .await;
    let lead = world.root.agent();
    lead.followup(UserMessage::user_text("lead: delegate"))
        .await
        .unwrap();
    bounded(lead.wait_idle()).await;

    let requests = model.requests();
    let child = |task: &str| -> Vec<&ModelRequest> {
        requests
            .iter()
            .filter(|request| first_user_text(request).contains(task))
            .collect()
    };
    let names = |request: &ModelRequest| -> Vec<String> {
        request.tools.iter().map(|tool| tool.name.clone()).collect()
    };
    let reader = child("task: read the notes");
    let blind = child("task: peek at the notes");
    assert_eq!(reader.len(), 2, "the reader's two steps");
    assert_eq!(blind.len(), 2, "the blind child's two steps");
    assert!(names(reader[0]).contains(&"mcp__fs__read_text_file".to_owned()));
    assert!(
        !names(blind[0]).contains(&"mcp__fs__read_text_file".to_owned()),
        "{:?}",
        names(blind[0])
    );
    assert!(names(blind[0]).contains(&"mcp__fs__list_directory".to_owned()));
    assert_eq!(
        results(reader[1]),
        [(false, "the answer is 42\n".to_owned())]
    );
    assert_eq!(
        results(blind[1]),
        [(
            true,
            "Tool `mcp__fs__read_text_file` is not available to this agent.".to_owned()
        )]
    );
    assert_eq!(marked(&mark).len(), 1, "one server process for the tree");
    world.runtime.shutdown().await;
    world.harness.shutdown().await;
    servers.shutdown().await;
    assert_eq!(marked(&mark), Vec::<i32>::new(), "the server is gone");
}
