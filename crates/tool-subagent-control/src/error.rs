//! Why a control tool refused or failed, as sentences the model can act on.
//! Every runtime error code a control tool can meet is mapped here to
//! wording that names the agent as the model wrote it and says what to do
//! next; the stable [`ControlError::code`] is for hosts and tests.

use dsh_core::ToolError;
use dsh_subagent::{AdmissionError, DeliveryError, SubagentError};

/// A control tool's refusal or failure. Its `Display` text is what the model
/// reads (as an error tool result).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// The tools were installed before a runtime was bound to them.
    #[error(
        "Subagent control is not available in this session (no subagent runtime is attached). Continue without it."
    )]
    Unbound,
    /// The calling agent is not the exact live agent (disposed or replaced).
    #[error("You are no longer a live agent in this tree, so nothing was done.")]
    NotLive,
    /// The tree's root is no longer live, so nothing can be delivered in it.
    #[error("The lead agent of this tree is no longer running, so nothing can be delivered.")]
    RootGone,
    /// A name that names no member of the caller's tree.
    #[error(
        "There is no agent called `{0}` in your tree. Call list_agents to see the names, then try again with one of them."
    )]
    UnknownName(String),
    /// `send_message` addressed to the caller itself.
    #[error(
        "`{0}` is you: an agent cannot send a message to itself. Address another agent from list_agents."
    )]
    MessageToSelf(String),
    /// `interrupt_agent` addressed to the caller itself.
    #[error("`{0}` is you: you cannot interrupt yourself. To stop, finish your turn.")]
    InterruptSelf(String),
    /// The target is an external run: a leaf that takes no follow-up messages.
    #[error(
        "`{0}` is an external agent: it cannot receive follow-up messages. Wait for its completion notice, or start a new agent for more work."
    )]
    External(String),
    /// The target's mode does not accept messages (one-shot, unknown).
    #[error(
        "`{0}` cannot receive messages (it is not a continuable agent). Start a new agent for more work."
    )]
    NotMessageable(String),
    /// The caller is not an ancestor of the interrupt's target.
    #[error(
        "You may interrupt only agents you started, directly or through agents you started; `{0}` is not one of them. Send it a message instead if it needs to change course."
    )]
    NotAncestor(String),
    /// The target exists but cannot be resumed; retrying will not help.
    #[error(
        "`{name}` cannot be resumed ({reason}), so the message was not delivered. Do not retry; start a new agent for the work instead."
    )]
    NotResumable {
        /// The target as the model named it.
        name: String,
        /// Why, as the runtime said it.
        reason: String,
    },
    /// The target is cold and the tree is at its live-agent limit.
    #[error(
        "`{0}` cannot take messages right now: the tree is at its live-agent limit. Wait for some agents to finish (call wait), then try again."
    )]
    DeliveryUnavailable(String),
    /// The tree is shutting down and admits no new work.
    #[error("The agent tree is shutting down; no new work is admitted. Finish your turn.")]
    Draining,
    /// The call was cancelled before it took effect.
    #[error("The call was cancelled before it took effect.")]
    Cancelled,
    /// The target refused the input itself (images for a text-only model).
    #[error("`{name}` refused the message: {reason}. Send text it can accept.")]
    Rejected {
        /// The target as the model named it.
        name: String,
        /// Why, as the target said it.
        reason: String,
    },
    /// `report` called by an agent that has no parent.
    #[error(
        "report is only for subagents, and you have no parent agent. Give your answer in your reply instead."
    )]
    NoParent,
    /// `report` called by a child that is not continuable.
    #[error(
        "report is only for continuable subagents; your result reaches the agent that started you when you finish. Give your answer in your reply."
    )]
    NotContinuable,
    /// A message or report with no text.
    #[error("The message is empty. Write the text to deliver and call the tool again.")]
    EmptyMessage,
    /// A `wait` timeout outside the allowed range.
    #[error(
        "timeout_ms must be between {min} and {max} milliseconds; {got} is out of range. Call wait again with a timeout in range."
    )]
    TimeoutOutOfRange {
        /// The value asked for.
        got: u64,
        /// The smallest allowed value.
        min: u64,
        /// The largest allowed value.
        max: u64,
    },
    /// `wait` was cancelled before anything arrived.
    #[error("The wait was cancelled before anything arrived.")]
    WaitCancelled,
    /// The caller's inbox stopped reporting arrivals (the agent is going away).
    #[error("Your inbox closed while waiting (this agent is shutting down). Finish your turn.")]
    InboxClosed,
    /// An infrastructure failure (a store error, an unreadable catalog).
    #[error("The operation failed: {0}. Nothing was changed; you may try again later.")]
    Failed(String),
}

impl ControlError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unbound => "CONTROL_UNBOUND",
            Self::NotLive => "NOT_LIVE",
            Self::RootGone => "ROOT_GONE",
            Self::UnknownName(_) => "AGENT_NAME_NOT_FOUND",
            Self::MessageToSelf(_) => "MESSAGE_TO_SELF",
            Self::InterruptSelf(_) => "INTERRUPT_SELF",
            Self::External(_) => "EXTERNAL_TARGET",
            Self::NotMessageable(_) => "NOT_MESSAGEABLE",
            Self::NotAncestor(_) => "NOT_ANCESTOR",
            Self::NotResumable { .. } => "NOT_RESUMABLE",
            Self::DeliveryUnavailable(_) => "DELIVERY_UNAVAILABLE",
            Self::Draining => "DRAINING",
            Self::Cancelled => "CANCELLED",
            Self::Rejected { .. } => "INPUT_REJECTED",
            Self::NoParent => "NO_PARENT",
            Self::NotContinuable => "NOT_CONTINUABLE",
            Self::EmptyMessage => "EMPTY_MESSAGE",
            Self::TimeoutOutOfRange { .. } => "TIMEOUT_OUT_OF_RANGE",
            Self::WaitCancelled => "WAIT_CANCELLED",
            Self::InboxClosed => "INBOX_CLOSED",
            Self::Failed(_) => "FAILED",
        }
    }

    /// The wording for a runtime error met while acting on the agent the
    /// model called `name` (`caller` is the calling agent's session). An
    /// interrupt's `UNAUTHORIZED`, which needs the tree to tell a stranger
    /// from an unknown name, is classified by that tool before it gets here;
    /// this is the rest.
    pub(crate) fn from_runtime(
        name: &str,
        caller: &dsh_core::SessionId,
        err: SubagentError,
    ) -> Self {
        match err {
            SubagentError::Delivery(DeliveryError::AgentNameNotFound(_)) => {
                Self::UnknownName(name.to_owned())
            }
            SubagentError::Delivery(DeliveryError::NotResumable { reason, .. }) => {
                Self::NotResumable {
                    name: name.to_owned(),
                    reason,
                }
            }
            SubagentError::Delivery(DeliveryError::DeliveryUnavailable(_))
            | SubagentError::Admission(AdmissionError::Capacity(_)) => {
                Self::DeliveryUnavailable(name.to_owned())
            }
            SubagentError::Delivery(DeliveryError::MessageToSelf) => {
                Self::MessageToSelf(name.to_owned())
            }
            SubagentError::Delivery(DeliveryError::NotInTree(_)) => {
                Self::UnknownName(name.to_owned())
            }
            SubagentError::Delivery(DeliveryError::External(_)) => Self::External(name.to_owned()),
            SubagentError::Delivery(DeliveryError::NotMessageable(_)) => {
                Self::NotMessageable(name.to_owned())
            }
            SubagentError::Admission(AdmissionError::Draining) => Self::Draining,
            SubagentError::Cancelled => Self::Cancelled,
            SubagentError::Delivery(DeliveryError::NotLive(id)) if &id == caller => Self::NotLive,
            SubagentError::Delivery(DeliveryError::NotLive(_)) => Self::RootGone,
            SubagentError::Admission(AdmissionError::InvalidRequest(reason)) => Self::Rejected {
                name: name.to_owned(),
                reason,
            },
            other => Self::Failed(other.to_string()),
        }
    }
}

impl From<ControlError> for ToolError {
    fn from(err: ControlError) -> Self {
        ToolError::new(err.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use dsh_core::SessionId;
    use dsh_subagent::InfraError;

    /// Every refusal text, as the model reads it.
    #[test]
    fn every_refusal_text() {
        let errors = [
            ControlError::Unbound,
            ControlError::NotLive,
            ControlError::RootGone,
            ControlError::UnknownName("nobody".into()),
            ControlError::MessageToSelf("a".into()),
            ControlError::InterruptSelf("a".into()),
            ControlError::External("ext".into()),
            ControlError::NotMessageable("old".into()),
            ControlError::NotAncestor("b".into()),
            ControlError::NotResumable {
                name: "a".into(),
                reason: "its log is gone".into(),
            },
            ControlError::DeliveryUnavailable("a".into()),
            ControlError::Draining,
            ControlError::Cancelled,
            ControlError::Rejected {
                name: "a".into(),
                reason: "the model `m` does not accept images".into(),
            },
            ControlError::NoParent,
            ControlError::NotContinuable,
            ControlError::EmptyMessage,
            ControlError::TimeoutOutOfRange {
                got: 0,
                min: 1,
                max: 600_000,
            },
            ControlError::WaitCancelled,
            ControlError::InboxClosed,
            ControlError::Failed("the store failed".into()),
        ];
        let texts: Vec<String> = errors
            .iter()
            .map(|err| format!("{}: {err}", err.code()))
            .collect();
        insta::assert_snapshot!(texts.join("\n"));
    }

    /// Runtime codes map to the matching sentence, naming the agent as the
    /// model wrote it.
    #[test]
    fn runtime_codes_map_to_sentences() {
        let caller = SessionId::new("me").unwrap();
        let other = SessionId::new("root").unwrap();
        let cases = [
            (
                SubagentError::Delivery(DeliveryError::AgentNameNotFound("x/y".into())),
                "AGENT_NAME_NOT_FOUND",
            ),
            (
                SubagentError::Delivery(DeliveryError::NotResumable {
                    id: other.clone(),
                    reason: "gone".into(),
                }),
                "NOT_RESUMABLE",
            ),
            (
                SubagentError::Delivery(DeliveryError::DeliveryUnavailable(other.clone())),
                "DELIVERY_UNAVAILABLE",
            ),
            (
                SubagentError::Admission(AdmissionError::Capacity(2)),
                "DELIVERY_UNAVAILABLE",
            ),
            (
                SubagentError::Admission(AdmissionError::Draining),
                "DRAINING",
            ),
            (SubagentError::Cancelled, "CANCELLED"),
            (
                SubagentError::Delivery(DeliveryError::MessageToSelf),
                "MESSAGE_TO_SELF",
            ),
            (
                SubagentError::Delivery(DeliveryError::NotInTree(other.clone())),
                "AGENT_NAME_NOT_FOUND",
            ),
            (
                SubagentError::Delivery(DeliveryError::External(other.clone())),
                "EXTERNAL_TARGET",
            ),
            (
                SubagentError::Delivery(DeliveryError::NotMessageable(other.clone())),
                "NOT_MESSAGEABLE",
            ),
            (
                SubagentError::Delivery(DeliveryError::NotLive(caller.clone())),
                "NOT_LIVE",
            ),
            (
                SubagentError::Delivery(DeliveryError::NotLive(other.clone())),
                "ROOT_GONE",
            ),
            (
                SubagentError::Admission(AdmissionError::InvalidRequest("no images".into())),
                "INPUT_REJECTED",
            ),
            (
                SubagentError::Infra(InfraError::Teardown("x".into())),
                "FAILED",
            ),
        ];
        for (err, code) in cases {
            let mapped = ControlError::from_runtime("x/y", &caller, err);
            assert_eq!(mapped.code(), code, "{mapped}");
        }
    }
}
