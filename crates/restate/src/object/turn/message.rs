//! `send_message` on the cluster: text to another member of the caller's
//! tree, by name, path or session id, delivered into the member's inbox
//! (`dsh.Inbox/{id}.deliver`, a call between objects, exactly once) with
//! a request id made of the sender, the step's place in its log and the
//! call id, so a replayed turn delivers it once. The inbox puts it where a local agent would: the
//! next step of a running turn, else a new turn. Texts are the local
//! tool's.

use dsh_core::{
    ContentBlock, InboxTarget, MessageId, MessageSource, ToolCall, ToolOutput, UserMessage,
};
use dsh_tool_subagent_control::{ControlError, SendMessageInput};
use restate_sdk::prelude::*;

use super::Host;
use super::control::{input, refused};
use crate::object::inbox::InboxClient;
use crate::state::inbox::AcceptRequest;

impl Host<'_, '_> {
    /// Run one call of `send_message`.
    pub(super) async fn send_message(&mut self, call: &ToolCall) -> HandlerResult<ToolOutput> {
        let SendMessageInput { to, message } = match input(call) {
            Ok(input) => input,
            Err(output) => return Ok(output),
        };
        if message.trim().is_empty() {
            return Ok(refused(ControlError::EmptyMessage));
        }
        let tree = self.tree().await?;
        let Some(target) = tree.resolve(&to) else {
            return Ok(refused(ControlError::UnknownName(to)));
        };
        if target == self.header.id {
            return Ok(refused(ControlError::MessageToSelf(to)));
        }
        let sender = self.header.id.clone();
        let mut text = UserMessage::new(
            vec![ContentBlock::text(message)],
            MessageSource::AgentMessage {
                sender_session_id: sender.clone(),
            },
        );
        // The step's place in the log and the call id name the request:
        // the same on a replay, distinct for every call of the sender.
        let at = self.head.next_seq;
        text.id = MessageId::new(format!("{sender}.message.{at}.{}", call.call_id));
        let delivered = self
            .ctx
            .object_client::<InboxClient>(target.to_string())
            .deliver(Json(AcceptRequest {
                request_id: format!("message:{sender}:{at}:{}", call.call_id),
                message: text,
                target: InboxTarget::NextTurn,
                wake: true,
            }))
            .call()
            .await;
        Ok(match delivered {
            Ok(_) => ToolOutput::text(format!(
                "Message delivered to `{to}`. Any reply will arrive as a message to you."
            )),
            Err(refusal) if refusal.message().starts_with("DRAINING") => {
                refused(ControlError::Draining)
            }
            Err(failed) => return Err(failed.into()),
        })
    }
}
