//! `team_task_list`: the tasks that are not deleted, filtered by status,
//! owner (`unowned` for none) and readiness.

use std::sync::Arc;

use dsh_agent_team::Team;
use dsh_core::Agent;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::common::{Refusal, object, parse, string, task_json};

/// The description the model reads.
pub(crate) const DESCRIPTION: &str = "List the shared tasks that are not deleted, with readiness, owner, revision, \
                 blockers and write-scope warnings.";

/// The input schema.
pub(crate) fn schema() -> Value {
    object(
        json!({
            "status": {
                "type": "string",
                "enum": ["pending", "in_progress", "completed"],
                "description": "Optional exact status filter.",
            },
            "owner": string("Optional member-name filter; unowned for tasks without an owner."),
            "ready": {"type": "boolean", "description": "Optional readiness filter."},
        }),
        &[],
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListInput {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    ready: Option<bool>,
}

/// Run one call.
pub(crate) fn run(team: &Team, caller: &Arc<dyn Agent>, input: Value) -> Result<Value, Refusal> {
    let input: ListInput = parse(input)?;
    let tasks: Vec<Value> = team
        .list_tasks(caller)?
        .iter()
        .filter(|view| {
            input
                .status
                .as_deref()
                .is_none_or(|status| view.task.status.as_str() == status)
                && input
                    .owner
                    .as_deref()
                    .is_none_or(|owner| match &view.task.owner {
                        Some(name) => name == owner,
                        None => owner == "unowned",
                    })
                && input.ready.is_none_or(|ready| view.ready == ready)
        })
        .map(task_json)
        .collect();
    Ok(json!({"tasks": tasks}))
}
