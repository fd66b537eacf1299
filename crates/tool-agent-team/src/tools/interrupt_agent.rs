//! `interrupt_agent` (lead only): cut a teammate's current turn, keeping its
//! pending messages and its tasks; the result names its status before.

use std::sync::Arc;

use dsh_agent_team::Team;
use dsh_core::Agent;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::common::{Refusal, object, parse, string};

/// The description the model reads.
pub(crate) const DESCRIPTION: &str = "Interrupt one teammate's current turn; its pending messages and its tasks are \
                 kept. Team lead only.";

/// The input schema.
pub(crate) fn schema() -> Value {
    object(json!({"target": string("Teammate name.")}), &["target"])
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetInput {
    target: String,
}

/// Run one call.
pub(crate) async fn run(
    team: &Team,
    caller: &Arc<dyn Agent>,
    input: Value,
) -> Result<Value, Refusal> {
    let input: TargetInput = parse(input)?;
    let previous = team.interrupt(caller, &input.target).await?;
    Ok(json!({"target": input.target, "previous_status": previous.as_str()}))
}
