//! `team_task_get`: the complete latest snapshot of one task, a deleted
//! one included.

use std::sync::Arc;

use dsh_agent_team::Team;
use dsh_core::Agent;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::common::{Refusal, object, parse, string, task_json};

/// The description the model reads.
pub(crate) const DESCRIPTION: &str = "Read the complete latest value of one shared task (deleted ones included) \
                 before changing or executing it.";

/// The input schema.
pub(crate) fn schema() -> Value {
    object(
        json!({"task_id": string("Shared task id (task-<n>).")}),
        &["task_id"],
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetInput {
    task_id: String,
}

/// Run one call.
pub(crate) fn run(team: &Team, caller: &Arc<dyn Agent>, input: Value) -> Result<Value, Refusal> {
    let input: GetInput = parse(input)?;
    Ok(json!({"task": task_json(&team.get_task(caller, &input.task_id)?)}))
}
