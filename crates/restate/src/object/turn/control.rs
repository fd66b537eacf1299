//! What the control tools on the cluster share: their input parsed as the
//! local tools parse it, and a refusal as the error result the local tools
//! give ([`ControlError`]'s sentences).

use dsh_core::{ToolCall, ToolOutput};
use dsh_tool_subagent_control::ControlError;
use serde::de::DeserializeOwned;

/// The input of `call`, or the local tools' error result for input that
/// does not fit their struct.
pub(super) fn input<T: DeserializeOwned>(call: &ToolCall) -> Result<T, ToolOutput> {
    call.input.parse().map_err(|bad| {
        ToolOutput::error(format!(
            "Invalid arguments for `{}`: {bad}. Fix the arguments and call the tool again.",
            call.name
        ))
    })
}

/// A refusal as the model reads it.
pub(super) fn refused(error: ControlError) -> ToolOutput {
    ToolOutput::error(error.to_string())
}
