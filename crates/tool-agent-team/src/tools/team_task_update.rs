//! `team_task_update`: one compare-and-set change of a task, named by the
//! model's action word and mapped onto the board's [`TaskAction`]s.

use std::sync::Arc;

use dsh_agent_team::{TaskAction, Team, TeamError, UpdateTask};
use dsh_core::Agent;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::common::{Refusal, object, parse, string, strings, task_json};

/// The description the model reads.
pub(crate) const DESCRIPTION: &str = "Compare-and-set one task change using the latest revision from team_task_get \
                 or team_task_list. The owner or the lead may edit, release, complete, reopen \
                 or delete; any member may claim a ready unowned task; only the lead reassigns.";

/// The input schema.
pub(crate) fn schema() -> Value {
    object(
        json!({
            "task_id": string("Shared task id (task-<n>)."),
            "expected_revision": {
                "type": "integer",
                "description": "The task's current revision: the compare-and-set precondition.",
            },
            "action": {
                "type": "string",
                "enum": ["claim", "release", "edit", "set_dependencies", "complete", "reopen", "reassign", "delete"],
                "description": "The change to make.",
            },
            "subject": string("Replacement title, for edit."),
            "description": string("Replacement details, for edit."),
            "blocked_by": strings("The complete blocker list, for set_dependencies."),
            "write_scopes": strings("Replacement advisory write scopes, for edit."),
            "owner": string("Member name, for the lead-only reassign; omit to unassign."),
        }),
        &["task_id", "expected_revision", "action"],
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateInput {
    task_id: String,
    expected_revision: u64,
    action: String,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    blocked_by: Option<Vec<String>>,
    #[serde(default)]
    write_scopes: Option<Vec<String>>,
    #[serde(default)]
    owner: Option<String>,
}

/// Run one call.
pub(crate) async fn run(
    team: &Team,
    caller: &Arc<dyn Agent>,
    input: Value,
) -> Result<Value, Refusal> {
    let input: UpdateInput = parse(input)?;
    let action = match input.action.as_str() {
        "claim" => TaskAction::Claim,
        "release" => TaskAction::Release,
        "edit" => TaskAction::Edit {
            subject: input.subject,
            description: input.description,
            blocked_by: None,
            write_scopes: input.write_scopes,
        },
        "set_dependencies" => TaskAction::Edit {
            subject: None,
            description: None,
            blocked_by: Some(input.blocked_by.unwrap_or_default()),
            write_scopes: None,
        },
        "complete" => TaskAction::Complete,
        "reopen" => TaskAction::Reopen,
        "reassign" => match input.owner {
            Some(owner) => TaskAction::Assign { owner },
            None => TaskAction::Release,
        },
        "delete" => TaskAction::Delete,
        other => return Err(Refusal::Input(format!("unknown action `{other}`"))),
    };
    if input.action == "reassign" && !team.role_of(caller)?.is_lead() {
        return Err(TeamError::Unauthorized("only the lead reassigns tasks".into()).into());
    }
    let view = team
        .update_task(
            caller,
            UpdateTask {
                id: input.task_id,
                expected_revision: input.expected_revision,
                action,
            },
        )
        .await?;
    Ok(json!({"task": task_json(&view)}))
}
