//! The local host of the turn machine: [`Local`] performs each
//! [`Effect`](crate::turn::Effect) with the agent's log (through the
//! ordering lock, so seqs reach the store in order), its inbox, its model
//! (streamed, the text kept as it arrives, B13) and its scoped tools, and
//! reads cancellation from the turn's token. This module must never decide
//! what a turn writes: that is the machine's.

use std::sync::Arc;

use dsh_core::projection::PendingItem;
use dsh_core::{
    Agent, AgentError, CancellationToken, EventPayload, FinishReason, ModelError, ModelErrorKind,
    ModelEvent, ModelRequest, ToolCall, ToolOutput, ToolSpec, Usage,
};
use futures::StreamExt;

use super::LoopAgent;
use crate::turn::{Effects, ModelOutcome, ModelReply};

impl LoopAgent {
    /// Ask the model for one step over the shared transcript and `tools`;
    /// streamed text survives an abort or a failure of the step (B13).
    async fn ask(&self, tools: Vec<ToolSpec>, cancel: &CancellationToken) -> ModelOutcome {
        // Shares the transcript: nothing of the conversation is copied.
        let messages = self.state().transcript.clone().unwrap_or_default();
        let request = ModelRequest {
            model: self.options.model.clone(),
            system: self.system.clone(),
            messages,
            tools,
            max_output_tokens: self.options.max_output_tokens,
            reasoning_effort: self.options.reasoning_effort.clone(),
        };
        let mut text = String::new();
        let reply = {
            let asked = self.stream_reply(request, cancel.clone(), &mut text);
            tokio::select! {
                biased;
                () = cancel.cancelled() => None,
                reply = asked => Some(reply),
            }
        };
        match reply {
            None => ModelOutcome::Cancelled { text },
            Some(Err(err)) if err.kind == ModelErrorKind::Cancelled && cancel.is_cancelled() => {
                ModelOutcome::Cancelled { text }
            }
            Some(Err(err)) => ModelOutcome::Failed {
                text,
                diagnostic: err.to_string(),
            },
            Some(Ok((calls, usage, finish))) => ModelOutcome::Reply(ModelReply {
                text,
                calls,
                usage,
                finish,
            }),
        }
    }

    /// Stream one reply: its calls, summed usage and finish reason; its
    /// text goes to `text` as it arrives, so a caller that drops this
    /// future still has what was said.
    async fn stream_reply(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
        text: &mut String,
    ) -> Result<(Vec<ToolCall>, Usage, FinishReason), ModelError> {
        let mut stream = self.model.stream(request, cancel).await?;
        let mut calls = Vec::new();
        let mut usage = Usage::default();
        while let Some(event) = stream.next().await {
            match event? {
                ModelEvent::TextDelta(delta) => {
                    if let Some(observer) = &self.shared.text_observer {
                        observer.text_delta(self.id(), &delta);
                    }
                    text.push_str(&delta);
                }
                ModelEvent::ToolCall(call) => calls.push(call),
                ModelEvent::Usage(more) => usage += more,
                ModelEvent::Finish(finish) => return Ok((calls, usage, finish)),
            }
        }
        Err(ModelError::new(
            ModelErrorKind::Protocol,
            "the response ended without a finish reason",
        ))
    }
}

/// The local host of the turn machine: this agent's log (through the
/// ordering lock), its inbox, model and tools, and the turn's token.
pub(super) struct Local<'a> {
    pub(super) agent: &'a LoopAgent,
    pub(super) cancel: &'a CancellationToken,
}

impl Effects for Local<'_> {
    fn now(&self) -> u64 {
        self.agent.shared.clock.now_millis()
    }

    fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    fn claim(&mut self, turn_boundary: bool) -> Vec<PendingItem> {
        self.agent.state().claim(turn_boundary)
    }

    fn steering_wakes(&self) -> bool {
        self.agent.state().next_step.iter().any(|item| item.wake)
    }

    async fn append(&mut self, payloads: Vec<EventPayload>) -> Result<(), AgentError> {
        let usage = payloads.iter().find_map(|payload| match payload {
            EventPayload::Usage(usage) => Some(*usage),
            _ => None,
        });
        let ends = payloads
            .iter()
            .any(|payload| matches!(payload, EventPayload::TurnEnd(_)));
        self.agent
            .driver_commit(payloads, move |_, state| {
                if let Some(usage) = usage {
                    state.usage += usage;
                }
                if ends {
                    state.turn_cancel = None;
                }
            })
            .await
    }

    fn tool_specs(&mut self) -> Vec<ToolSpec> {
        self.agent.tools.specs(self.agent)
    }

    async fn ask_model(&mut self, _turn: u64, _step: u64, tools: Vec<ToolSpec>) -> ModelOutcome {
        // Boxed, so that the driver task (spawned once per turn) stays
        // small: a task of 1 KiB or more is a large-bin request for
        // glibc's allocator, which then consolidates every free chunk a
        // long history left behind, a cost that grows with the heap. A
        // step's box is small enough to be recycled from the allocator's
        // per-thread cache.
        Box::pin(self.agent.ask(tools, self.cancel)).await
    }

    async fn call_tools(&mut self, calls: &[ToolCall]) -> Option<Vec<ToolOutput>> {
        let agent: Arc<dyn Agent> = self.agent.this.upgrade()?;
        let cancel = self.cancel;
        tokio::select! {
            biased;
            () = cancel.cancelled() => None,
            // Boxed: only a step that calls tools pays for the tools'
            // futures.
            outputs = Box::pin(self.agent.tools.call_all(calls, agent, cancel.clone())) => Some(outputs),
        }
    }
}
