//! `interrupt_agent`: stop a descendant's current turn under the caller's
//! authority as an exact live ancestor. The runtime decides; this tool says
//! what happened and what did not.

use async_trait::async_trait;
use dsh_core::{AgentStatus, Tool, ToolContext, ToolError, ToolOutput};
use dsh_subagent::DeliveryError;
use dsh_subagent::{InterruptAuthority, SubagentError};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::RuntimeBinding;
use crate::error::ControlError;
use crate::send::resolve;
use crate::tree::is_member;

/// The arguments of `interrupt_agent`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterruptAgentInput {
    /// The agent to interrupt: a name or slash path from list_agents, or a
    /// session id.
    pub to: String,
}

/// The `interrupt_agent` tool.
#[derive(Debug, Clone)]
pub struct InterruptAgentTool {
    binding: RuntimeBinding,
}

impl InterruptAgentTool {
    /// The tool, acting through `binding`'s runtime.
    pub fn new(binding: RuntimeBinding) -> Self {
        Self { binding }
    }
}

#[async_trait]
impl Tool for InterruptAgentTool {
    fn name(&self) -> &str {
        "interrupt_agent"
    }

    fn description(&self) -> String {
        "Stop the current turn of an agent you started, directly or through agents you started, \
         by the name or path list_agents shows (or its session id). Only that turn stops: \
         messages already queued for it wait until you send it a new message, agents it started \
         keep running, and it stays available for send_message. This returns once the stop is \
         requested; the agent may take a moment to stop. Interrupting an agent that is not \
         running changes nothing."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "to": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The agent to interrupt: a name or path from list_agents, or a session id."
                }
            },
            "required": ["to"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let InterruptAgentInput { to } = crate::parse(self.name(), input)?;
        let runtime = self.binding.runtime()?;
        let caller = &ctx.agent;
        let target = resolve(runtime, caller, &to, &ctx.cancel).await?;
        if &target == caller.id() {
            return Err(ControlError::InterruptSelf(to).into());
        }
        let was_running = runtime
            .registry()
            .get(&target)
            .is_some_and(|agent| agent.status() == AgentStatus::Running);
        match runtime
            .interrupt(&target, &InterruptAuthority::Ancestor(caller.clone()))
            .await
        {
            Ok(()) => {}
            Err(SubagentError::Delivery(DeliveryError::NotAncestor(_))) => {
                let known = is_member(runtime, caller, &target, &ctx.cancel).await?;
                return Err(if known {
                    ControlError::NotAncestor(to)
                } else {
                    ControlError::UnknownName(to)
                }
                .into());
            }
            Err(err) => return Err(ControlError::from_runtime(&to, caller.id(), err).into()),
        }
        Ok(ToolOutput::text(interrupted(&to, was_running)))
    }
}

/// What `interrupt_agent` says once it interrupted `to` (named as the
/// model wrote it), which was or was not running.
pub fn interrupted(to: &str, was_running: bool) -> String {
    if was_running {
        format!(
            "Stop requested for `{to}`: its current turn ends shortly. It keeps its queued \
             messages and the agents it started, and stays available for send_message."
        )
    } else {
        format!("`{to}` was not running, so there was nothing to interrupt.")
    }
}
