//! The model seam: a request built from the conversation, answered by a
//! stream of text deltas, tool calls, usage and a finish reason. Clients for
//! real APIs and the scripted test model implement [`Model`]; nothing here
//! performs I/O.

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::message::{ToolCall, Transcript, Usage};
use crate::stop::StopReason;

/// A tool as the model is shown it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
}

/// Everything a model is asked with for one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The model id from the agent's options, if one is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The rendered system prompt.
    pub system: String,
    /// The conversation so far, shared with the loop that built the
    /// request in chunks: a request costs no copy of the conversation, and
    /// a model that keeps it makes the loop copy at most the newest partial
    /// chunk on its next write, never the history.
    pub messages: Transcript,
    /// The tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Output-token cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Reasoning effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
}

/// Why the model stopped producing one response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// It finished its answer.
    EndTurn,
    /// It stopped to have its tool calls run.
    ToolUse,
    /// It ran out of output tokens.
    MaxTokens,
    /// It declined.
    Refusal,
    /// Anything else the backend reported; treated as a failure.
    Other(String),
}

impl FinishReason {
    /// The turn stop reason this finish maps to when the turn ends on it.
    pub fn stop_reason(&self) -> StopReason {
        match self {
            Self::EndTurn | Self::ToolUse => StopReason::COMPLETED,
            Self::MaxTokens => StopReason::MAX_TOKENS,
            Self::Refusal => StopReason::REFUSAL,
            Self::Other(_) => StopReason::ERROR,
        }
    }
}

/// One item of a streamed response.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    /// More assistant text.
    TextDelta(String),
    /// A complete tool call.
    ToolCall(ToolCall),
    /// Token usage (may come more than once; the consumer adds them up).
    Usage(Usage),
    /// The response is over. Nothing follows it.
    Finish(FinishReason),
}

/// A failed model request or stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ModelError {
    /// The class of failure, for diagnostics and retries.
    pub kind: ModelErrorKind,
    /// What happened, free of credentials and request content.
    pub message: String,
}

/// Classes of model failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelErrorKind {
    /// The connection failed or dropped.
    Transport,
    /// The API answered with an error status.
    Api,
    /// The response did not follow the protocol.
    Protocol,
    /// The request was cancelled.
    Cancelled,
    /// The model or route is not configured.
    Unavailable,
}

impl std::fmt::Display for ModelErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Transport => "transport error",
            Self::Api => "API error",
            Self::Protocol => "protocol error",
            Self::Cancelled => "cancelled",
            Self::Unavailable => "model unavailable",
        })
    }
}

impl ModelError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// A streamed model response.
pub type ModelStream = BoxStream<'static, Result<ModelEvent, ModelError>>;

/// A language model behind some API.
///
/// # Cancel safety
/// Dropping the stream, or cancelling `cancel`, must abandon the request at
/// once; an implementation must not keep work running after either.
#[async_trait]
pub trait Model: Send + Sync + 'static {
    /// A name for logs and diagnostics.
    fn name(&self) -> &str;

    /// Whether the model accepts image content.
    fn accepts_images(&self) -> bool {
        false
    }

    /// Start one response.
    ///
    /// # Errors
    /// The request could not be started; failures after that arrive in the stream.
    async fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError>;
}
