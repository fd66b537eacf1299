//! The test worker's environment: a scripted model whose reply is chosen
//! by session and step (so a step asked again on another worker gets the
//! same reply) and a `count` tool that records each run in a file, so a
//! test can count runs across worker processes. Either can be gated: the
//! step or call then writes a line into `<dir>/<gate>.started` (a FIFO the
//! test reads, so the test knows it is in flight) and waits until it can
//! read a line from `<dir>/<gate>.open` (a FIFO the test writes). Opening
//! a FIFO blocks until the other side opens it: no polling, no sleeps.
//!
//! The script (`--script FILE`, JSON):
//! `{"dir": "/tmp/x", "sessions": {"<id>": [STEP, ...]}, "max_depth": N?,
//! "idempotent": ["count"]?}` where a STEP is
//! `{"text": "..."}` or `{"calls": [{"tool": "count", "input": {...}}]}`,
//! each with an optional `"gate": "name"`. The tools `count` (not
//! idempotent) and `count_idempotent` take `{"label": "x", "gate":
//! "name"?}` and append `label` to `<dir>/runs`. `idempotent` names the
//! tools this worker takes as idempotent besides `count_idempotent`: a
//! worker whose script names `count` stands for a build that changed that
//! tool's contract, so a turn it replays takes another path than the one
//! journaled (a journal mismatch). Each model call appends `<session>
//! <step>` to `<dir>/asks`. A session without a script replies "done".
//! Call ids are `s{step}-call-{n}`, unique in a session.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::message::Message;
use dsh_core::{
    AgentOptions, CallId, CancellationToken, Model, ModelError, ModelErrorKind, ModelEvent,
    ModelRequest, ModelStream, SessionHeader, Tool, ToolContext, ToolError, ToolOutput,
};
use dsh_harness::{Scripted, ScriptedModel};
use dsh_restate::worker::{Composed, WorkerEnv};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

#[derive(Debug, Clone, Default, Deserialize)]
struct Script {
    #[serde(default)]
    dir: PathBuf,
    #[serde(default)]
    sessions: BTreeMap<String, Vec<Step>>,
    /// The delegation depth limit (the local default when absent).
    #[serde(default)]
    max_depth: Option<u32>,
    /// Tools taken as idempotent besides `count_idempotent` (`count`).
    #[serde(default)]
    idempotent: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct Step {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    calls: Vec<Call>,
    #[serde(default)]
    gate: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct Call {
    tool: String,
    input: Value,
}

/// The environment of `--script FILE` (an empty script without one).
pub struct ScriptEnv {
    script: Arc<Script>,
}

impl ScriptEnv {
    /// Read the script.
    pub fn load(path: Option<&Path>) -> Result<Self, String> {
        let script = match path {
            None => Script::default(),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|err| format!("--script {}: {err}", path.display()))?;
                serde_json::from_str(&text)
                    .map_err(|err| format!("--script {}: {err}", path.display()))?
            }
        };
        Ok(Self {
            script: Arc::new(script),
        })
    }
}

impl WorkerEnv for ScriptEnv {
    fn compose(&self, header: &SessionHeader) -> Result<Composed, String> {
        let steps = self
            .script
            .sessions
            .get(header.id.as_str())
            .cloned()
            .unwrap_or_default();
        let model = StepModel {
            session: header.id.to_string(),
            steps,
            dir: self.script.dir.clone(),
        };
        Ok(Composed {
            model: Arc::new(model),
            tools: vec![
                Arc::new(CountTool {
                    dir: self.script.dir.clone(),
                    idempotent: self.script.idempotent.iter().any(|name| name == "count"),
                    name: "count",
                }),
                Arc::new(CountTool {
                    dir: self.script.dir.clone(),
                    idempotent: true,
                    name: "count_idempotent",
                }),
            ],
            system: format!("You are session {}.", header.id),
            options: AgentOptions::default(),
            max_depth: self
                .script
                .max_depth
                .unwrap_or(dsh_subagent::DEFAULT_MAX_DEPTH),
        })
    }
}

/// Append `line` to `<dir>/<file>`.
async fn append(dir: &Path, file: &str, line: &str) -> std::io::Result<()> {
    let mut out = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(file))
        .await?;
    out.write_all(format!("{line}\n").as_bytes()).await
}

/// Wait at gate `name`: announce the start, then wait for the opening.
async fn pass_gate(dir: &Path, name: &str) -> std::io::Result<()> {
    let mut started = tokio::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(format!("{name}.started")))
        .await?;
    started.write_all(b"started\n").await?;
    drop(started);
    let opened = tokio::fs::read(dir.join(format!("{name}.open"))).await?;
    if opened.is_empty() {
        return Err(std::io::Error::other(format!(
            "gate {name} closed without opening"
        )));
    }
    Ok(())
}

/// The scripted model: step `n` of a turn answers with the session's step
/// numbered by the assistant messages already in the conversation.
struct StepModel {
    session: String,
    steps: Vec<Step>,
    dir: PathBuf,
}

#[async_trait]
impl Model for StepModel {
    fn name(&self) -> &str {
        "script"
    }

    async fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        let index = request
            .messages
            .iter()
            .filter(|message| matches!(message, Message::Assistant { .. }))
            .count();
        append(&self.dir, "asks", &format!("{} {index}", self.session))
            .await
            .map_err(|err| ModelError::new(ModelErrorKind::Protocol, err.to_string()))?;
        let scripted = match self.steps.get(index) {
            None => Scripted::Text("done".to_owned()),
            Some(step) => {
                if let Some(gate) = &step.gate {
                    pass_gate(&self.dir, gate).await.map_err(|err| {
                        ModelError::new(ModelErrorKind::Protocol, err.to_string())
                    })?;
                }
                if step.calls.is_empty() {
                    Scripted::Text(step.text.clone().unwrap_or_default())
                } else {
                    Scripted::ToolCalls {
                        text: step.text.clone(),
                        calls: step
                            .calls
                            .iter()
                            .map(|call| (call.tool.clone(), call.input.clone()))
                            .collect(),
                    }
                }
            }
        };
        // Call ids unique in the session, as a real model's are: the
        // step's index names them.
        let stream = ScriptedModel::with_responses([scripted])
            .stream(request, cancel)
            .await?;
        Ok(Box::pin(stream.map(move |event| match event {
            Ok(ModelEvent::ToolCall(mut call)) => {
                call.call_id = CallId::new(format!("s{index}-{}", call.call_id));
                Ok(ModelEvent::ToolCall(call))
            }
            other => other,
        })))
    }
}

/// Appends its input's `label` to `<dir>/runs` each time it runs.
struct CountTool {
    dir: PathBuf,
    idempotent: bool,
    name: &'static str,
}

#[async_trait]
impl Tool for CountTool {
    fn name(&self) -> &str {
        self.name
    }

    fn description(&self) -> String {
        "Counts its runs.".to_owned()
    }

    fn input_schema(&self) -> Value {
        serde_json::json!({"type": "object"})
    }

    fn idempotent(&self) -> bool {
        self.idempotent
    }

    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let label = input["label"].as_str().unwrap_or("run").to_owned();
        append(&self.dir, "runs", &label)
            .await
            .map_err(|err| ToolError::new(err.to_string()))?;
        if let Some(gate) = input["gate"].as_str() {
            pass_gate(&self.dir, gate)
                .await
                .map_err(|err| ToolError::new(err.to_string()))?;
        }
        Ok(ToolOutput::text(format!("counted {label}")))
    }
}
