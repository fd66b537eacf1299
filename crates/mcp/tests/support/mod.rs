//! What the MCP tests share: the servers they start (the fake one of
//! `fixtures/`, and the registry's `server-everything` and
//! `server-filesystem` installed by the ACP peers' script), an agent that
//! runs scripted calls against a set of tools under a tool filter, and the
//! processes a marker names.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_core::{
    AgentFactory, CancellationToken, Composition, ContentBlock, CreateAgent, Message,
    SessionHeader, SessionId, Tool, ToolRestriction, ToolSpec, UserMessage,
};
use dsh_harness::{Harness, MemoryStore, Scripted, ScriptedModel};
use dsh_mcp::McpServerConfig;
use serde_json::Value;

/// `python3`, or `None` after [`dsh_test_support::skip_or_fail`].
pub fn python() -> Option<PathBuf> {
    let found = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if found {
        Some(PathBuf::from("python3"))
    } else {
        dsh_test_support::skip_or_fail("python3 is not on PATH (the fake MCP server is Python)");
        None
    }
}

/// The fake server, named `fake`, marked with `marker` on its command
/// line, with a call timeout of one second.
pub fn fake(marker: &str) -> Option<McpServerConfig> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_server.py");
    let mut config = McpServerConfig::command("fake", python()?)
        .args([script.display().to_string(), marker.to_owned()]);
    config.call_timeout = Duration::from_secs(1);
    Some(config)
}

/// The `node_modules/@modelcontextprotocol` folder of the ACP peers, or
/// `None` after [`dsh_test_support::skip_or_fail`].
pub fn npm_servers() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../subagent-acp/peers/node_modules/@modelcontextprotocol");
    let ready = dir.join("server-everything/dist/index.js").is_file()
        && dir.join("server-filesystem/dist/index.js").is_file();
    if ready {
        Some(dir)
    } else {
        dsh_test_support::skip_or_fail(
            "the MCP servers are not installed (run crates/subagent-acp/peers/install.sh)",
        );
        None
    }
}

/// What one agent was offered and what its calls returned.
pub struct Ran {
    /// The tools its model was shown.
    pub offered: Vec<ToolSpec>,
    /// Each call's result text and whether it is an error, in call order.
    pub results: Vec<(String, bool)>,
}

impl Ran {
    /// The offered tools' names.
    pub fn names(&self) -> Vec<&str> {
        self.offered.iter().map(|spec| spec.name.as_str()).collect()
    }
}

/// A harness over `tools` (one tree's host tools).
pub fn harness(tools: &[Arc<dyn Tool>]) -> (Harness, Arc<ScriptedModel>) {
    let model = Arc::new(ScriptedModel::new());
    let harness = Harness::builder(Arc::new(MemoryStore::new()))
        .model(model.clone())
        .build()
        .unwrap();
    for tool in tools {
        harness.add_tool(tool.clone()).unwrap();
    }
    (harness, model)
}

/// Run one agent of `harness` under `filter` whose model makes `calls` in
/// one step, then ends its turn.
pub async fn run(
    harness: &Harness,
    model: &ScriptedModel,
    filter: Option<ToolRestriction>,
    calls: Vec<(&str, Value)>,
) -> Ran {
    let before = model.requests().len();
    model.push(Scripted::ToolCalls {
        text: None,
        calls: calls
            .into_iter()
            .map(|(name, input)| (name.to_owned(), input))
            .collect(),
    });
    model.push(Scripted::Text("done".into()));
    let mut header = SessionHeader::new(SessionId::generate(), std::env::temp_dir());
    header.composition = Composition {
        tools: filter,
        ..Composition::default()
    };
    let handle = harness
        .create(CreateAgent {
            setup: Default::default(),
            header,
            seed: Vec::new(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
    handle
        .agent()
        .followup(UserMessage::user_text("go"))
        .await
        .unwrap();
    handle.agent().wait_idle().await;
    handle.dispose().await;
    let requests = model.requests();
    let offered = requests[before].tools.clone();
    let results = requests[before + 1]
        .messages
        .iter()
        .filter_map(|message| match message {
            Message::Tool {
                content, is_error, ..
            } => Some((text_of(content), *is_error)),
            _ => None,
        })
        .collect();
    Ran { offered, results }
}

/// The text blocks of `content`, joined by newlines (an image as `[image]`).
pub fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } => text.clone(),
            ContentBlock::Image { media_type, .. } => format!("[image {media_type}]"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub use dsh_test_support::procs::marked;

/// A marker unique to this test run.
pub fn marker(test: &str) -> String {
    format!("dsh-mcp-test-{test}-{}", std::process::id())
}

/// One tree's servers (the fake one, marked for `test`) and a harness over
/// their tools.
pub struct FakeTree {
    /// The marker on the server's command line.
    pub mark: String,
    /// The servers.
    pub servers: dsh_mcp::McpServers,
    /// The tree's harness.
    pub harness: Harness,
    /// Its model.
    pub model: Arc<ScriptedModel>,
}

/// Start the fake server for `test` and a harness over its tools, or
/// `None` (after skip_or_fail) without Python.
pub async fn fake_tree(test: &str) -> Option<FakeTree> {
    let mark = marker(test);
    let config = fake(&mark)?;
    let servers = dsh_mcp::McpServers::new(vec![config], std::env::temp_dir()).unwrap();
    let tools = servers.tools().await.unwrap();
    let (harness, model) = harness(&tools);
    Some(FakeTree {
        mark,
        servers,
        harness,
        model,
    })
}
