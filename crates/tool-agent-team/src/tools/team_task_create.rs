//! `team_task_create`: put one pending, unowned task on the shared board.

use std::sync::Arc;

use dsh_agent_team::{CreateTask, Team};
use dsh_core::Agent;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::common::{Refusal, object, parse, string, strings, task_json};

/// The description the model reads.
pub(crate) const DESCRIPTION: &str = "Create one unowned pending task on the shared task board.";

/// The input schema.
pub(crate) fn schema() -> Value {
    object(
        json!({
            "subject": string("Concise task title."),
            "description": string("Complete task details and acceptance criteria."),
            "blocked_by": strings("Task ids that must complete first."),
            "write_scopes": strings("Advisory workspace-relative file or directory prefixes this task expects to modify."),
        }),
        &["subject", "description"],
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateInput {
    subject: String,
    description: String,
    #[serde(default)]
    blocked_by: Vec<String>,
    #[serde(default)]
    write_scopes: Vec<String>,
}

/// Run one call.
pub(crate) async fn run(
    team: &Team,
    caller: &Arc<dyn Agent>,
    input: Value,
) -> Result<Value, Refusal> {
    let input: CreateInput = parse(input)?;
    let view = team
        .create_task(
            caller,
            CreateTask {
                subject: input.subject,
                description: input.description,
                blocked_by: input.blocked_by,
                write_scopes: input.write_scopes,
            },
        )
        .await?;
    Ok(json!({"task": task_json(&view)}))
}
