//! Progress: what an external run streams while it works, for a parent or a
//! UI to observe through [`AcpProvider::progress`](crate::AcpProvider::progress)
//! and, mapped onto the runtime's own event type ([`runtime_kinds`]),
//! through the runtime's progress bus (`SubagentRuntime::progress`).
//! Agent message text is also the run's output; thoughts, tool calls, plans
//! and permission decisions are progress only and never reach the result.
//! Progress is observation: listeners cannot disturb the run.

use agent_client_protocol::v1::schema::{self as acp, SessionUpdate};
use dsh_core::SessionId;
use dsh_subagent::progress::{ContextUsage, PlanEntry, ProgressKind};
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
    /// The agent reported how full its context window is.
    Usage {
        /// Tokens currently in context.
        used: u64,
        /// The window's size in tokens.
        size: u64,
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
        SessionUpdate::UsageUpdate(usage) => ProgressUpdate::Usage {
            used: usage.used,
            size: usage.size,
        },
        _ => return None,
    })
}

/// Whether a tool-call status (wire name) is final, and if so whether it
/// failed.
fn finished(status: &str) -> Option<bool> {
    match status {
        "completed" => Some(false),
        "failed" => Some(true),
        _ => None,
    }
}

/// What `update` is on the runtime's progress bus. `titles` holds the
/// titles of the tool calls still open (a call's update need not repeat
/// its title), by call id.
pub fn runtime_kinds(
    update: &ProgressUpdate,
    titles: &mut std::collections::HashMap<String, String>,
) -> Vec<ProgressKind> {
    match update {
        ProgressUpdate::Message { text } if !text.is_empty() => {
            vec![ProgressKind::TextDelta { text: text.clone() }]
        }
        ProgressUpdate::Thought { text } if !text.is_empty() => {
            vec![ProgressKind::Thought { text: text.clone() }]
        }
        ProgressUpdate::Message { .. }
        | ProgressUpdate::Thought { .. }
        | ProgressUpdate::Permission { .. } => Vec::new(),
        ProgressUpdate::ToolCall {
            id, title, status, ..
        } => {
            let mut kinds = vec![ProgressKind::ToolCallStarted {
                id: id.clone(),
                name: title.clone(),
            }];
            match finished(status) {
                Some(failed) => kinds.push(ProgressKind::ToolCallFinished {
                    id: id.clone(),
                    name: title.clone(),
                    failed,
                }),
                None => {
                    titles.insert(id.clone(), title.clone());
                }
            }
            kinds
        }
        ProgressUpdate::ToolCallUpdate { id, title, status } => {
            if let Some(title) = title
                && let Some(open) = titles.get_mut(id)
            {
                open.clone_from(title);
            }
            match status.as_deref().and_then(finished) {
                Some(failed) => {
                    let name = titles
                        .remove(id)
                        .or_else(|| title.clone())
                        .unwrap_or_else(|| id.clone());
                    vec![ProgressKind::ToolCallFinished {
                        id: id.clone(),
                        name,
                        failed,
                    }]
                }
                None => Vec::new(),
            }
        }
        ProgressUpdate::Plan { entries } => vec![ProgressKind::Plan {
            entries: entries
                .iter()
                .map(|step| PlanEntry {
                    content: step.content.clone(),
                    status: step.status.clone(),
                    priority: step.priority.clone(),
                })
                .collect(),
        }],
        ProgressUpdate::Usage { used, size } => vec![ProgressKind::Usage {
            tokens: dsh_core::Usage::default(),
            context: Some(ContextUsage {
                used: *used,
                size: *size,
            }),
        }],
    }
}
