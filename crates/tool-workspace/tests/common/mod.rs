//! Shared test scaffolding: a real harness with the real JSONL store, live
//! agents with a chosen cwd, and a tool call made as the loop makes it
//! (`execute` with the agent and a cancellation token).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_core::{
    Agent, AgentFactory, CallId, CancellationToken, CreateAgent, Durability, SessionHeader,
    SessionId, Tool, ToolContext, ToolError, ToolOutput,
};
use dsh_harness::{Harness, JsonlStore, ScriptedModel};
use dsh_tool_workspace::{Level, Policy, WorkspaceTools};
use serde_json::Value;

/// How long any single wait may take before the test fails instead of hanging.
pub const BOUND: Duration = Duration::from_secs(30);

/// A workspace on disk: `root` inside a temporary directory (outside it
/// the test may put files the tools must not reach), a harness and a lead.
pub struct World {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub harness: Harness,
    pub lead: Arc<dyn Agent>,
    n: std::sync::atomic::AtomicUsize,
}

impl World {
    /// A world in the system temporary directory.
    pub async fn new() -> Self {
        Self::in_dir(tempfile::tempdir().unwrap()).await
    }

    /// A world whose temporary directory is under `parent` (for Landlock
    /// tests that need a place outside both the root and `/tmp`).
    pub async fn new_in(parent: &Path) -> Self {
        Self::in_dir(tempfile::tempdir_in(parent).unwrap()).await
    }

    async fn in_dir(dir: tempfile::TempDir) -> Self {
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        let root = std::fs::canonicalize(root).unwrap();
        let store =
            Arc::new(JsonlStore::new(dir.path().join("sessions"), Durability::None).unwrap());
        let harness = Harness::builder(store)
            .model(Arc::new(ScriptedModel::new()))
            .build()
            .unwrap();
        let lead = create(&harness, "lead", &root).await;
        Self {
            dir,
            root,
            harness,
            lead,
            n: Default::default(),
        }
    }

    /// Another live agent with `cwd`.
    pub async fn agent(&self, cwd: &Path) -> Arc<dyn Agent> {
        let n = self.n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        create(&self.harness, &format!("agent-{n}"), cwd).await
    }

    /// Write `text` at `rel` under the root, making parents.
    pub fn file(&self, rel: &str, text: impl AsRef<[u8]>) {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// The six tools at `level` with `policy`'s asker.
    pub fn tools(&self, policy: Policy) -> Vec<Arc<dyn Tool>> {
        WorkspaceTools::new(&self.root, policy).unwrap()
    }

    /// One tool by name at `level`, no asker.
    pub fn tool(&self, level: Level, name: &str) -> Arc<dyn Tool> {
        pick(self.tools(Policy::new(level, None)), name)
    }
}

async fn create(harness: &Harness, id: &str, cwd: &Path) -> Arc<dyn Agent> {
    harness
        .create(CreateAgent {
            header: SessionHeader::new(SessionId::new(id).unwrap(), cwd),
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap()
        .agent()
        .clone()
}

/// The tool called `name`.
pub fn pick(tools: Vec<Arc<dyn Tool>>, name: &str) -> Arc<dyn Tool> {
    tools.into_iter().find(|t| t.name() == name).unwrap()
}

/// A context for `agent`'s call.
pub fn ctx(agent: &Arc<dyn Agent>) -> ToolContext {
    ToolContext {
        agent: agent.clone(),
        call_id: CallId::new("call-1"),
        cancel: CancellationToken::new(),
    }
}

/// Call `tool` as `agent`, bounded.
pub async fn call(
    tool: &Arc<dyn Tool>,
    agent: &Arc<dyn Agent>,
    input: Value,
) -> Result<ToolOutput, ToolError> {
    tokio::time::timeout(BOUND, tool.execute(input, ctx(agent)))
        .await
        .expect("tool call timed out")
}

/// The text of an output.
pub fn text(output: &ToolOutput) -> String {
    output
        .content
        .iter()
        .filter_map(|b| b.as_text())
        .collect::<Vec<_>>()
        .join("")
}

/// The text of a successful call.
pub async fn ok(tool: &Arc<dyn Tool>, agent: &Arc<dyn Agent>, input: Value) -> String {
    let output = call(tool, agent, input.clone())
        .await
        .unwrap_or_else(|e| panic!("{} {input} failed: {e}", tool.name()));
    assert!(
        !output.is_error,
        "{} {input}: {}",
        tool.name(),
        text(&output)
    );
    text(&output)
}

/// The refusal text of a failed call.
pub async fn refused(tool: &Arc<dyn Tool>, agent: &Arc<dyn Agent>, input: Value) -> String {
    match call(tool, agent, input.clone()).await {
        Ok(output) => panic!("{} {input} succeeded: {}", tool.name(), text(&output)),
        Err(err) => err.to_string(),
    }
}
