//! Progress: what an external run streams while it works, for a parent or a
//! UI to observe through [`AcpProvider::progress`](crate::AcpProvider::progress).
//! Agent message text is also the run's output; thoughts, tool calls, plans
//! and permission decisions are progress only and never reach the result.
//! Progress is observation: listeners cannot disturb the run.

use agent_client_protocol::v1::schema::{self as acp, SessionUpdate};
use dsh_core::SessionId;
use serde::Serialize;

/// One progress event of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AcpProgress {
    /// The run's id (the child id of its activation).
    pub run_id: SessionId,
    /// What happened.
    pub update: ProgressUpdate,
}

/// What an agent reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProgressUpdate {
    /// A chunk of the agent's message (it is appended to the output too).
    Message {
        /// The text of the chunk (empty for a non-text chunk).
        text: String,
    },
    /// A chunk of the agent's reasoning.
    Thought {
        /// The text of the chunk.
        text: String,
    },
    /// A tool call started.
    ToolCall {
        /// The agent's id for the call.
        id: String,
        /// Its human-readable title.
        title: String,
        /// Its kind (`read`, `edit`, `execute`, ...).
        tool_kind: String,
        /// Its status (`pending`, `in_progress`, ...).
        status: String,
    },
    /// A tool call changed.
    ToolCallUpdate {
        /// The agent's id for the call.
        id: String,
        /// A new title, if any.
        title: Option<String>,
        /// A new status, if any.
        status: Option<String>,
    },
    /// The agent's plan, complete each time.
    Plan {
        /// The steps.
        entries: Vec<PlanStep>,
    },
    /// A permission request was answered by the configured policy.
    Permission {
        /// The tool call it was about.
        tool_call_id: String,
        /// Whether an allow option was chosen.
        granted: bool,
    },
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanStep {
    /// What the step is.
    pub content: String,
    /// Its status.
    pub status: String,
    /// Its priority.
    pub priority: String,
}

/// The wire name of a serialisable ACP enum value (`"in_progress"`).
fn wire_name(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "unknown".to_owned(),
    }
}

/// The text of a content block; other kinds contribute nothing.
pub(crate) fn block_text(block: &acp::ContentBlock) -> &str {
    match block {
        acp::ContentBlock::Text(text) => &text.text,
        _ => "",
    }
}

/// The progress an update makes, if it is one this crate reports.
pub(crate) fn progress_of(update: &SessionUpdate) -> Option<ProgressUpdate> {
    Some(match update {
        SessionUpdate::AgentMessageChunk(chunk) => ProgressUpdate::Message {
            text: block_text(&chunk.content).to_owned(),
        },
        SessionUpdate::AgentThoughtChunk(chunk) => ProgressUpdate::Thought {
            text: block_text(&chunk.content).to_owned(),
        },
        SessionUpdate::ToolCall(call) => ProgressUpdate::ToolCall {
            id: call.tool_call_id.to_string(),
            title: call.title.clone(),
            tool_kind: wire_name(&call.kind),
            status: wire_name(&call.status),
        },
        SessionUpdate::ToolCallUpdate(update) => ProgressUpdate::ToolCallUpdate {
            id: update.tool_call_id.to_string(),
            title: update.fields.title.clone(),
            status: update.fields.status.as_ref().map(wire_name),
        },
        SessionUpdate::Plan(plan) => ProgressUpdate::Plan {
            entries: plan
                .entries
                .iter()
                .map(|entry| PlanStep {
                    content: entry.content.clone(),
                    status: wire_name(&entry.status),
                    priority: wire_name(&entry.priority),
                })
                .collect(),
        },
        _ => return None,
    })
}
