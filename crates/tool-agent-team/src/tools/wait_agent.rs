//! `wait_agent`: wait for the next roster, task, mailbox or live-status
//! change, or `no_progress` at once when no other member is working.

use std::sync::Arc;
use std::time::Duration;

use dsh_agent_team::{Team, WaitOutcome};
use dsh_core::{Agent, ToolContext};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::DEFAULT_WAIT_MS;
use crate::common::{Refusal, object, parse};

/// The description the model reads.
pub(crate) const DESCRIPTION: &str = "Wait for the next teammate status, mailbox or task change after this call \
                 starts. It never wakes inactive members and returns no_progress at once when no \
                 other member is running or provisioning. Re-list after it returns instead of \
                 polling.";

/// The input schema.
pub(crate) fn schema() -> Value {
    object(
        json!({
            "timeout_ms": {
                "type": "integer",
                "description": "Wait bound in milliseconds, from 10000 through 3600000. Defaults to 30000.",
            },
        }),
        &[],
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitInput {
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// Run one call.
pub(crate) async fn run(
    team: &Team,
    caller: &Arc<dyn Agent>,
    input: Value,
    ctx: &ToolContext,
) -> Result<Value, Refusal> {
    let input: WaitInput = parse(input)?;
    let timeout = Duration::from_millis(input.timeout_ms.unwrap_or(DEFAULT_WAIT_MS));
    let outcome = team.wait_for_progress(caller, timeout, &ctx.cancel).await?;
    Ok(match outcome {
        WaitOutcome::NoProgress => json!({
            "outcome": "no_progress",
            "note": "No other member is running or provisioning, so nothing will change by waiting. Re-list with list_agents and give an inactive member work with followup_task.",
        }),
        WaitOutcome::Changed | WaitOutcome::TimedOut => json!({
            "outcome": if outcome == WaitOutcome::Changed { "changed" } else { "timed_out" },
            "note": "Earlier changes are not replayed: re-read with list_agents or team_task_list.",
        }),
    })
}
