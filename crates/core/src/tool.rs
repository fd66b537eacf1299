//! The tool seam: what a tool is to the agent loop and to the model. A tool
//! gets its arguments already validated against its schema, the calling
//! agent and a cancellation token; what it returns is shown to the model.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::content::ContentBlock;
use crate::id::CallId;

/// What a tool call produced, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolOutput {
    /// The result content.
    pub content: Vec<ContentBlock>,
    /// Whether it reports a failure the model should react to.
    pub is_error: bool,
    /// Ask the loop to end the turn after this step (a structured-output
    /// capture, say): no further model request is made in this turn.
    pub end_turn: bool,
}

impl ToolOutput {
    /// A successful text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![ContentBlock::text(text)],
            ..Self::default()
        }
    }

    /// An error text result.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            content: vec![ContentBlock::text(text)],
            is_error: true,
            end_turn: false,
        }
    }
}

/// A tool failure, shown to the model as an error result (never a crash).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl ToolError {
    /// An error with a message for the model.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// What a tool knows about the call it serves.
#[derive(Clone)]
pub struct ToolContext {
    /// The agent whose model made the call.
    pub agent: Arc<dyn Agent>,
    /// The call's id.
    pub call_id: CallId,
    /// Cancelled when the turn is interrupted or the agent disposed.
    pub cancel: CancellationToken,
}

/// A tool the model can call.
///
/// # Cancel safety
/// `execute` may be dropped at any await point when the turn is cancelled;
/// it should also watch `ctx.cancel` for work it hands to other tasks.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls it by; unique within an agent.
    fn name(&self) -> &str;

    /// What it does, for the model.
    fn description(&self) -> String;

    /// JSON Schema of its arguments (compiled once when registered).
    fn input_schema(&self) -> Value;

    /// Whether the tool can be offered right now. A tool backed by something
    /// that comes and goes (a subagent provider, say) returns `false` while
    /// it is gone: it then drops out of the model-visible list and refuses
    /// calls. Asked at every step, together with [`Tool::description`], so a
    /// tool that comes back is offered with its current wording.
    fn is_available(&self) -> bool {
        true
    }

    /// Whether the tool is offered to `agent` at all: a tool meant only for
    /// some agents (`report`, for children) returns `false` for the others,
    /// and the loop then neither shows it to their model nor runs it for
    /// them. Asked at every step, after [`Tool::is_available`].
    fn offered_to(&self, agent: &dyn Agent) -> bool {
        let _ = agent;
        true
    }

    /// Whether it may run at the same time as other safe tools of the same step.
    fn concurrency_safe(&self) -> bool {
        false
    }

    /// Whether running the same call twice does no more than running it
    /// once (reading a file, listing, searching). On a durable engine a
    /// call cut by a worker's death is run again only when this is true;
    /// otherwise it is answered with an error saying its outcome is
    /// unknown. A wrapper must forward it.
    fn idempotent(&self) -> bool {
        false
    }

    /// Run the call. `input` already matches [`Tool::input_schema`].
    ///
    /// # Errors
    /// A [`ToolError`] the model is shown as an error result.
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError>;
}
