//! `send_message`: quiet, durable information for another member; it never
//! starts an idle member.

use std::sync::Arc;

use dsh_agent_team::{DeliveryMode, Team};
use dsh_core::Agent;
use serde_json::Value;

use crate::common::{Refusal, message_schema, send};

/// The description the model reads.
pub(crate) const DESCRIPTION: &str = "Send durable information to another team member without starting an idle \
                 member: a live member sees it at its next step, an inactive one when it next \
                 wakes.";

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
    send(team, caller, input, DeliveryMode::Quiet).await
}
