//! `followup_task`: a durable follow-up that becomes the target's next
//! turn, resuming it when it is inactive.

use std::sync::Arc;

use dsh_agent_team::{DeliveryMode, Team};
use dsh_core::Agent;
use serde_json::Value;

use crate::common::{Refusal, message_schema, send};

/// The description the model reads.
pub(crate) const DESCRIPTION: &str = "Send a durable follow-up task to another team member; it becomes the member's \
                 next turn, resuming it when it is inactive.";

/// The input schema.
pub(crate) fn schema() -> Value {
    message_schema()
}

/// Run one call.
pub(crate) async fn run(
    team: &Team,
    caller: &Arc<dyn Agent>,
    input: Value,
) -> Result<Value, Refusal> {
    send(team, caller, input, DeliveryMode::Wakeup).await
}
