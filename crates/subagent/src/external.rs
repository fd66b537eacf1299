//! Continuable external children. A run whose provider can continue its
//! session later ([`SubagentRun::resume_token`]: an ACP agent that
//! advertises `loadSession`, say) has that token recorded in its creator's
//! log next to its catalog entry, as a [`RESUME_EVENT`] (an extension event,
//! so an older reader skips it and the durable format only gains a type).
//! A message to such a child, once its turn has settled, starts a new
//! activation of the same child id through
//! [`StartExternal::resume`](crate::StartExternal::resume) with the message
//! as its prompt, in this process or after a restart; its result reaches
//! the creator as a settlement notice like any other. A message while a
//! turn is still running waits for that turn to settle first. A child with
//! no token keeps the refusal of B42 (`EXTERNAL_TARGET`).

use std::sync::Arc;

use dsh_core::{
    Agent, AgentRef, CancellationToken, ContentBlock, EventPayload, MessageId, SessionId,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::activation::{Execution, NewActivation};
use crate::error::{DeliveryError, SubagentError};
use crate::events::RunInfo;
use crate::provider::{ResolvedStartRequest, SubagentRun};
use crate::request::Delivery;
use crate::runtime::SubagentRuntime;

/// The event type of a continuable external child's resume token, in its
/// creator's log: `{"child_id": ..., "resume": <provider data>}`.
pub const RESUME_EVENT: &str = "subagent/external-session";

#[derive(Serialize, Deserialize)]
struct ResumeRecord {
    child_id: SessionId,
    resume: Value,
}

/// The refusal of a follow-up message to an external child (B42).
pub(crate) fn external_refusal(target: &SessionId) -> SubagentError {
    DeliveryError::External(target.clone()).into()
}

/// The token recorded for `child` in `events` (the creator's own events:
/// a fork seed's are the ancestor's), the latest one winning.
fn token_in(events: &[dsh_core::SessionEvent], seed_len: u64, child: &SessionId) -> Option<Value> {
    events
        .iter()
        .rev()
        .filter(|event| event.seq >= seed_len)
        .filter_map(|event| match &event.payload {
            EventPayload::Extension { kind, payload } if kind == RESUME_EVENT => {
                payload.parse::<ResumeRecord>().ok()
            }
            _ => None,
        })
        .find(|record| &record.child_id == child)
        .map(|record| record.resume)
}

impl SubagentRuntime {
    /// Record `run`'s resume token, if it has one, in its creator's log.
    ///
    /// # Cancel safety
    /// A drop leaves the token recorded or not; without it the child is a
    /// plain external leaf.
    pub(crate) async fn record_resumable(
        &self,
        parent: &Arc<dyn Agent>,
        run: &dyn SubagentRun,
    ) -> Result<(), SubagentError> {
        let Some(resume) = run.resume_token() else {
            return Ok(());
        };
        let record = ResumeRecord {
            child_id: run.id().clone(),
            resume,
        };
        let payload = serde_json::to_value(&record).map_err(|err| {
            SubagentError::Infra(crate::InfraError::Provider {
                provider: String::new(),
                message: format!("the resume token does not serialise: {err}"),
            })
        })?;
        parent.record(RESUME_EVENT, payload).await?;
        Ok(())
    }

    /// The resume token `parent`'s log holds for `child`.
    async fn resume_token_of(&self, parent: &SessionId, child: &SessionId) -> Option<Value> {
        if let Some(agent) = self.registry().get(parent) {
            return token_in(&agent.events(), agent.header().seed_len, child);
        }
        let loaded = self.inner.store.load(parent).await.ok()?;
        token_in(&loaded.events, loaded.header.seed_len, child)
    }

    /// Deliver `content` to the external child `target` of `root`'s tree
    /// as the prompt of its next turn, or refuse it as B42 says when the
    /// child cannot continue.
    ///
    /// # Cancel safety
    /// A drop before the provider's resume returns leaves nothing (the
    /// provider's start is cancel safe); after it, the activation is
    /// installed and monitored without another await.
    pub(crate) async fn continue_external(
        &self,
        sender: &AgentRef,
        root: &SessionId,
        target: &SessionId,
        content: Vec<ContentBlock>,
        cancel: &CancellationToken,
    ) -> Result<MessageId, SubagentError> {
        let rows = self.list_descendants(root, cancel).await?;
        let Some(row) = rows.into_iter().find(|row| &row.entry.child_id == target) else {
            return Err(external_refusal(target));
        };
        let Some(token) = self.resume_token_of(&row.parent_id, target).await else {
            return Err(external_refusal(target));
        };
        let Some(provider) = self.get(&row.entry.provider) else {
            return Err(DeliveryError::DeliveryUnavailable(target.clone()).into());
        };
        let Some(external) = provider.external() else {
            return Err(external_refusal(target));
        };
        let Some(parent) = self.registry().get(&row.parent_id) else {
            return Err(DeliveryError::NotLive(row.parent_id.clone()).into());
        };
        let _turn = self.resume_gate(target, cancel).await?;
        // A turn in flight settles first: the message is its next prompt.
        if let Some(live) = self.inner.activations.get(target) {
            let mut settled = live.settled.subscribe();
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(SubagentError::Cancelled),
                _ = settled.wait_for(Option::is_some) => {}
            }
            // Settled means torn down and out of the map (the monitor
            // uninstalls first).
        }
        if !self.registry().is_live(sender) {
            return Err(DeliveryError::NotLive(sender.id.clone()).into());
        }
        let stop = cancel.child_token();
        let ticket = self
            .inner
            .admissions
            .admit(self.registry(), root, stop.clone())?;
        let slot = self.reserve_capacity(root).map_err(|_| {
            SubagentError::Delivery(DeliveryError::DeliveryUnavailable(target.clone()))
        })?;
        let request = ResolvedStartRequest {
            label: row.entry.label.clone(),
            agent_preset: None,
            cwd: parent.cwd(),
            prompt: content,
            parent: parent.clone(),
            agent_options: None,
            output_schema: None,
            max_depth: None,
            tool_filter: None,
            persona: None,
            cancel: stop.clone(),
        };
        let run = tokio::select! {
            biased;
            () = stop.cancelled() => return Err(SubagentError::Cancelled),
            run = external.resume(target, &token, request) => run?,
        };
        if run.id() != target {
            if let Err(err) = run.dispose().await {
                tracing::warn!(run = %run.id(), "disposing a misnamed resumed run failed: {err}");
            }
            return Err(DeliveryError::NotResumable {
                id: target.clone(),
                reason: format!("the provider resumed it as `{}`", run.id()),
            }
            .into());
        }
        let name = row.entry.name.clone().unwrap_or_else(|| target.to_string());
        let activation = self.install(NewActivation {
            info: RunInfo {
                provider: provider.name().to_owned(),
                child_id: target.clone(),
                parent_session_id: parent.id().clone(),
                root: root.clone(),
                local: false,
            },
            path: self.full_name(parent.id(), &name),
            parent: parent.reference(),
            root: root.clone(),
            delivery: Delivery::Parent,
            execution: Execution::External { run },
            slot,
        });
        self.launch(&activation);
        drop(ticket);
        Ok(MessageId::generate())
    }
}
