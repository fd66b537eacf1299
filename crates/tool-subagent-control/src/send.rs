//! `send_message`: deliver text to another member of the caller's tree, by
//! name, path or session id. Resolution and authority are the runtime's;
//! this tool names the agent back as the model wrote it and turns every
//! refusal into a sentence.

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{Agent, ContentBlock, SessionId, Tool, ToolContext, ToolError, ToolOutput};
use dsh_subagent::{DeliveryError, SubagentError, SubagentRuntime};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::RuntimeBinding;
use crate::error::ControlError;

/// The arguments of `send_message`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendMessageInput {
    /// The target: `lead`, a name or slash path from list_agents, or a
    /// session id.
    pub to: String,
    /// The text to deliver.
    pub message: String,
}

/// The `send_message` tool.
#[derive(Debug, Clone)]
pub struct SendMessageTool {
    binding: RuntimeBinding,
}

impl SendMessageTool {
    /// The tool, acting through `binding`'s runtime.
    pub fn new(binding: RuntimeBinding) -> Self {
        Self { binding }
    }
}

/// Resolve `name` in `caller`'s tree.
pub(crate) async fn resolve(
    runtime: &SubagentRuntime,
    caller: &Arc<dyn Agent>,
    name: &str,
    cancel: &dsh_core::CancellationToken,
) -> Result<SessionId, ControlError> {
    runtime
        .resolve_name(caller, name, cancel)
        .await
        .map_err(|err| ControlError::from_runtime(name, caller.id(), err))
}

/// Deliver `text` from `caller` to `target` (named `name` for the model),
/// explaining a refusal.
pub(crate) async fn deliver(
    runtime: &SubagentRuntime,
    caller: &Arc<dyn Agent>,
    name: &str,
    target: &SessionId,
    text: String,
    cancel: &dsh_core::CancellationToken,
) -> Result<(), ControlError> {
    let sent = runtime
        .send_message(caller, target, vec![ContentBlock::text(text)], cancel)
        .await;
    match sent {
        Ok(_) => Ok(()),
        // The runtime judges membership by the target's stored lineage; a
        // cataloged child without a session of its own (a one-shot run) is
        // still in the listing, which says what it is.
        Err(err @ SubagentError::Delivery(DeliveryError::NotInTree(_))) => {
            Err(crate::tree::message_refusal(runtime, caller, name, target, err, cancel).await)
        }
        Err(err) => Err(ControlError::from_runtime(name, caller.id(), err)),
    }
}

#[async_trait]
impl Tool for SendMessageTool {
    fn name(&self) -> &str {
        "send_message"
    }

    fn description(&self) -> String {
        "Send a message to another agent in your tree: `lead`, a subagent by the name or path \
         list_agents shows (`worker`, `worker/helper`), or a session id. A running agent reads \
         it at its next step; an inactive one starts a new turn with it. This returns only \
         whether the message was delivered, never a reply: an answer comes back as a message to \
         you (call wait to block for it). A refusal means the message was NOT delivered."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "to": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The agent to message: `lead`, a name or path from list_agents, or a session id."
                },
                "message": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The text to deliver. Make it self-contained: the agent sees only this text, not your conversation."
                }
            },
            "required": ["to", "message"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let SendMessageInput { to, message } = crate::parse(self.name(), input)?;
        let runtime = self.binding.runtime()?;
        let text = crate::message_text(message)?;
        let caller = &ctx.agent;
        let target = resolve(runtime, caller, &to, &ctx.cancel).await?;
        if &target == caller.id() {
            return Err(ControlError::MessageToSelf(to).into());
        }
        deliver(runtime, caller, &to, &target, text, &ctx.cancel).await?;
        Ok(ToolOutput::text(format!(
            "Message delivered to `{to}`. Any reply will arrive as a message to you."
        )))
    }
}
