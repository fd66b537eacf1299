//! What the ten tools share: the schema builders, the input parsing and
//! refusal wording, and the JSON shapes a roster row, a task and a send
//! receipt take in a result. Every string here is model-visible.

use std::sync::Arc;

use dsh_agent_team::{
    DeliveryMode, MemberView, SendMessage, SendOutcome, TaskView, Team, TeamError,
};
use dsh_core::{Agent, ContentBlock, ToolOutput};
use serde::Deserialize;
use serde_json::{Value, json};

/// A string property.
pub(crate) fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

/// An array-of-strings property.
pub(crate) fn strings(description: &str) -> Value {
    json!({"type": "array", "description": description, "items": {"type": "string"}})
}

/// A closed object schema.
pub(crate) fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// An input with no fields.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Empty {}

/// Why a call produced an error result.
pub(crate) enum Refusal {
    /// The input did not parse or names no valid choice.
    Input(String),
    /// The team refused.
    Team(TeamError),
}

impl From<TeamError> for Refusal {
    fn from(err: TeamError) -> Self {
        Self::Team(err)
    }
}

/// Parse a tool input, refusing with the parser's sentence.
pub(crate) fn parse<T: for<'de> Deserialize<'de>>(input: Value) -> Result<T, Refusal> {
    serde_json::from_value(input).map_err(|err| Refusal::Input(err.to_string()))
}

/// A result as the model sees it: pretty JSON.
pub(crate) fn render(value: &Value) -> ToolOutput {
    ToolOutput::text(serde_json::to_string_pretty(value).unwrap_or_default())
}

/// The error result for a refusal: its stable code, then the sentence.
pub(crate) fn refusal_output(refusal: Refusal) -> ToolOutput {
    match refusal {
        Refusal::Input(reason) => ToolOutput::error(format!("TEAM_INVALID_INPUT: {reason}")),
        Refusal::Team(err @ TeamError::StaleRevision { .. }) => ToolOutput::error(format!(
            "{}: {err}. Read the task again (team_task_get) and retry with its current revision.",
            err.code()
        )),
        Refusal::Team(err) => ToolOutput::error(format!("{}: {err}", err.code())),
    }
}

/// A roster row as the model sees it.
pub fn member_json(row: &MemberView) -> Value {
    let mut value = json!({
        "name": row.name,
        "phase": row.phase.as_str(),
        "status": row.status.as_str(),
        "description": row.description,
        "pending_messages": row.pending_messages,
        "owned_tasks": row.owned_tasks,
    });
    if let Some(error) = &row.error {
        value["error"] = json!(error);
    }
    value
}

/// A task as the model sees it.
pub fn task_json(view: &TaskView) -> Value {
    let task = &view.task;
    json!({
        "id": task.id,
        "revision": task.revision,
        "subject": task.subject,
        "description": task.description,
        "status": task.status.as_str(),
        "owner": task.owner,
        "blocked_by": task.blocked_by,
        "write_scopes": task.write_scopes,
        "ready": view.ready,
        "warnings": view.warnings,
        "note": task.note,
    })
}

/// A send receipt as the model sees it.
pub fn receipt_json(target: &str, outcome: &SendOutcome) -> Value {
    json!({
        "message_id": outcome.id.as_str(),
        "target": target,
        "status": if outcome.delivered { "delivered" } else { "queued" },
        "note": if outcome.delivered {
            "The target holds the message."
        } else {
            "Accepted durably; it reaches the target when it next runs. Do not send it again."
        },
    })
}

/// The input of `send_message` and `followup_task`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageInput {
    target: String,
    message: String,
}

/// The schema of `send_message` and `followup_task`.
pub(crate) fn message_schema() -> Value {
    object(
        json!({
            "target": string("Team member name, or lead."),
            "message": string("Self-contained message for the target."),
        }),
        &["target", "message"],
    )
}

/// Send a message the way `delivery` says, and answer with its receipt.
pub(crate) async fn send(
    team: &Team,
    caller: &Arc<dyn Agent>,
    input: Value,
    delivery: DeliveryMode,
) -> Result<Value, Refusal> {
    let input: MessageInput = parse(input)?;
    let outcome = team
        .send_message(
            caller,
            SendMessage {
                to: input.target.clone(),
                content: vec![ContentBlock::text(input.message)],
                delivery,
            },
        )
        .await?;
    Ok(receipt_json(&input.target, &outcome))
}
