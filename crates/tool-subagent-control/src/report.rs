//! `report`: a continuable child hands selected content to its direct parent
//! and keeps working. The content travels as an ordinary tree message from
//! the child to its parent (so the parent reads it once, through its inbox);
//! the child's turn does not end.

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{Agent, CancellationToken, SessionId, Tool, ToolContext, ToolError, ToolOutput};
use dsh_subagent::{ChildMode, MemberNames, SubagentRuntime};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::RuntimeBinding;
use crate::error::ControlError;
use crate::send::deliver;

/// The arguments of `report`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportInput {
    /// The content for the parent.
    pub message: String,
}

/// The `report` tool.
#[derive(Debug, Clone)]
pub struct ReportTool {
    binding: RuntimeBinding,
}

impl ReportTool {
    /// The tool, acting through `binding`'s runtime.
    pub fn new(binding: RuntimeBinding) -> Self {
        Self { binding }
    }
}

/// Whom `agent` may report to: its direct parent, when `agent` is a
/// continuable child in a tree (its parent's catalog records it as
/// `continuable`). This is the check the `report` tool makes; a host that
/// composes per-agent tool scopes can call it to offer `report` only where
/// it works.
///
/// # Errors
/// [`ControlError::NoParent`] for an agent without a parent session (a
/// root); [`ControlError::NotContinuable`] for a child its parent did not
/// record as continuable (or that is not in a tree);
/// [`ControlError::Failed`] or [`ControlError::Cancelled`] when the tree
/// cannot be read.
///
/// # Cancel safety
/// Cancel safe: it only reads the tree (the parent's catalog); a drop at
/// any await leaves nothing changed.
pub async fn report_target(
    runtime: &SubagentRuntime,
    agent: &Arc<dyn Agent>,
    cancel: &CancellationToken,
) -> Result<SessionId, ControlError> {
    locate(runtime, agent, cancel)
        .await
        .map(|(parent, _)| parent)
}

/// [`report_target`], with the parent's model-facing name: one catalog
/// read (the parent's) and the runtime's member names, never a tree walk.
async fn locate(
    runtime: &SubagentRuntime,
    agent: &Arc<dyn Agent>,
    cancel: &CancellationToken,
) -> Result<(SessionId, String), ControlError> {
    let Some(parent) = agent.header().parent_session.clone() else {
        return Err(ControlError::NoParent);
    };
    if cancel.is_cancelled() {
        return Err(ControlError::Cancelled);
    }
    let entry = tokio::select! {
        biased;
        () = cancel.cancelled() => return Err(ControlError::Cancelled),
        entry = runtime.child_entry(&parent, agent.id()) => {
            entry.map_err(|err| ControlError::Failed(err.to_string()))?
        }
    };
    if !entry.is_some_and(|entry| entry.mode == ChildMode::CONTINUABLE) {
        return Err(ControlError::NotContinuable);
    }
    let name = match runtime.names_of(agent) {
        Ok(MemberNames {
            parent: Some(name), ..
        }) => name,
        _ => parent.to_string(),
    };
    Ok((parent, name))
}

#[async_trait]
impl Tool for ReportTool {
    fn name(&self) -> &str {
        "report"
    }

    fn description(&self) -> String {
        "Send content to the agent that started you now, without ending your turn. Your final \
         message already reaches that agent when you finish (as the result it is told of), so \
         never report the final answer too: use this only for findings that change what it \
         should do next while you keep working. It does not see your conversation, tool output \
         or reasoning, so make each report self-contained. Only your direct parent receives it. \
         Available only to subagents that can be messaged; a refusal means nothing was \
         delivered."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "message": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Self-contained content for your parent: conclusions, and the paths of anything it should read."
                }
            },
            "required": ["message"],
            "additionalProperties": false
        })
    }

    fn offered_to(&self, agent: &dyn Agent) -> bool {
        // Only children have a parent to report to; whether this child is
        // continuable is checked when it calls (that needs a catalog read).
        agent.header().parent_session.is_some()
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let ReportInput { message } = crate::parse(self.name(), input)?;
        let runtime = self.binding.runtime()?;
        let text = crate::message_text(message)?;
        let caller = &ctx.agent;
        let (parent, name) = locate(runtime, caller, &ctx.cancel).await?;
        deliver(runtime, caller, &name, &parent, text, &ctx.cancel).await?;
        Ok(ToolOutput::text(format!(
            "Report delivered to `{name}`, the agent that started you. Your turn continues."
        )))
    }
}
