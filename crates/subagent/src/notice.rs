//! Settlement notices (B28): the runtime's own account of a child ending,
//! sent to its still-live direct creator. A creator whose tree is draining
//! gets it injected (it must not wake); an idle one gets a turn; a running
//! one sees it at its next step.

use dsh_core::{AgentStatus, ContentBlock, MessageSource, UserMessage};

use crate::activation::Activation;
use crate::request::Delivery;
use crate::result::{SubagentResult, summary_line};
use crate::runtime::SubagentRuntime;

impl SubagentRuntime {
    /// The B28 notice: to a still-live direct creator, for parent delivery.
    pub(crate) async fn notify_parent(&self, activation: &Activation, result: &SubagentResult) {
        if activation.delivery != Delivery::Parent {
            return;
        }
        let Some(parent) = self.registry().resolve(&activation.parent) else {
            return;
        };
        let summary = summary_line(&activation.name, result);
        let message = UserMessage::new(
            render_notice(&summary, result),
            MessageSource::SubagentSettled {
                summary,
                stop_reason: Some(result.stop_reason.clone()),
                sender_session_id: activation.child_id.clone(),
            },
        );
        let sent = if self.is_stopping(&activation.parent) {
            parent.inject(message).await
        } else {
            match parent.status() {
                AgentStatus::Idle => parent.followup(message).await,
                AgentStatus::Running => parent.steer(message).await,
            }
        };
        if let Err(err) = sent {
            tracing::warn!(child = %activation.child_id, "the settlement notice was not delivered: {err}");
        }
    }

    /// Whether the exact live agent `agent` is a child being stopped or
    /// taking no more input, or a root whose tree is draining (its notices
    /// must not wake it).
    fn is_stopping(&self, agent: &dsh_core::AgentRef) -> bool {
        let stopping = self
            .inner
            .activations
            .of_agent(agent)
            .is_some_and(|activation| activation.stop.is_cancelled() || activation.input_closed());
        stopping || self.inner.admissions.is_draining(self.registry(), agent)
    }
}

/// The text of a settlement notice: the summary, then what the child produced.
pub(crate) fn render_notice(summary: &str, result: &SubagentResult) -> Vec<ContentBlock> {
    let mut text = format!("[{summary}; stop reason: {}]", result.stop_reason);
    let output = dsh_core::content::joined_text(&result.output);
    if !output.is_empty() {
        text.push_str("\n\n");
        text.push_str(&output);
    }
    if let Some(structured) = &result.structured {
        text.push_str("\n\nStructured result: ");
        text.push_str(&structured.to_string());
    }
    if let Some(diagnostic) = &result.diagnostic {
        text.push_str("\n\nDiagnostic: ");
        text.push_str(diagnostic);
    }
    vec![ContentBlock::text(text)]
}
