//! `interrupt_agent` on the cluster: stop the current turn of an agent the
//! caller started, directly or through agents it started, by parking its
//! inbox (`dsh.Inbox/{id}.interrupt`, a call between objects, exactly
//! once). The target's turn sees the park at its next check and ends
//! `aborted`; its waiting input stays until a new message unparks it
//! (as locally). Texts are the local tool's.

use dsh_core::{ToolCall, ToolOutput};
use dsh_tool_subagent_control::{ControlError, InterruptAgentInput, interrupted};
use restate_sdk::prelude::*;

use super::Host;
use super::control::{input, refused};
use crate::object::inbox::InboxClient;

impl Host<'_, '_> {
    /// Run one call of `interrupt_agent`.
    pub(super) async fn interrupt_agent(&mut self, call: &ToolCall) -> HandlerResult<ToolOutput> {
        let InterruptAgentInput { to } = match input(call) {
            Ok(input) => input,
            Err(output) => return Ok(output),
        };
        let tree = self.tree().await?;
        let Some(target) = tree.resolve(&to) else {
            return Ok(refused(ControlError::UnknownName(to)));
        };
        if target == self.header.id {
            return Ok(refused(ControlError::InterruptSelf(to)));
        }
        if !tree.is_ancestor(&self.header.id, &target) {
            return Ok(refused(ControlError::NotAncestor(to)));
        }
        let inbox = self.ctx.object_client::<InboxClient>(target.to_string());
        let status = inbox.status().call().await?.into_inner();
        let was_running = status.turn_scheduled && !status.parked;
        inbox.interrupt().call().await?;
        Ok(ToolOutput::text(interrupted(&to, was_running)))
    }
}
