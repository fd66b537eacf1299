//! `list_agents`: the roster as the caller sees it, the lead first, with
//! each member's phase, live status, pending messages and owned tasks.

use std::sync::Arc;

use dsh_agent_team::Team;
use dsh_core::Agent;
use serde_json::{Value, json};

use crate::common::{Empty, Refusal, member_json, object, parse};

/// The description the model reads.
pub(crate) const DESCRIPTION: &str = "List the lead and every teammate with its phase, live status (running, idle, \
                 inactive), pending messages and owned tasks.";

/// The input schema.
pub(crate) fn schema() -> Value {
    object(json!({}), &[])
}

/// Run one call.
pub(crate) fn run(team: &Team, caller: &Arc<dyn Agent>, input: Value) -> Result<Value, Refusal> {
    let _: Empty = parse(input)?;
    let rows = team.list_members(caller)?;
    let you = team.role_of(caller)?;
    Ok(json!({
        "team": team.id().to_string(),
        "you": you.name(),
        "members": rows.iter().map(member_json).collect::<Vec<_>>(),
    }))
}
