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
//!
//! Foreground external children. The seed leaves a caller-delivered
//! external run's membership and result to its caller; here the runtime
//! keeps both for it in the creator's log, in two extension events an
//! older reader skips: [`FOREGROUND_EVENT`] at creation (the same
//! identity, name, label, provider and `external` mode a catalog entry
//! carries, so the catalog fold lists the child as an external leaf and
//! its name stays unique among its siblings) and [`OUTCOME_EVENT`] when it
//! settles (its stop reason, its output and its diagnostic, each bounded),
//! which is what `dsh show` prints of it since no notice carries it.

use std::sync::Arc;

use dsh_core::{
    Agent, AgentHandle, AgentRef, CancellationToken, ContentBlock, EventPayload, MessageId,
    MessageSource, SessionEvent, SessionId, StopReason,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::activation::{Activation, Execution, NewActivation};
use crate::error::{DeliveryError, SubagentError};
use crate::events::RunInfo;
use crate::notice::render_notice;
use crate::provider::{ResolvedStartRequest, StartExternal, SubagentProvider, SubagentRun};
use crate::request::Delivery;
use crate::result::{SubagentResult, bound_diagnostic, bound_text, summary_line};
use crate::runtime::SubagentRuntime;
use crate::tree::DescendantRow;

/// The event type of a continuable external child's resume token, in its
/// creator's log: `{"child_id": ..., "resume": <provider data>}`.
pub const RESUME_EVENT: &str = "subagent/external-session";

/// The event type of a foreground (caller-delivered) external child's
/// membership, in its creator's log, written when it starts: a
/// [`CatalogEntry`](crate::CatalogEntry) of mode `external`. The catalog
/// fold reads it as an entry; a reader that knows only
/// [`CATALOG_EVENT`](crate::CATALOG_EVENT) skips it.
pub const FOREGROUND_EVENT: &str = "subagent/foreground-child";

/// The event type of what a foreground external child settled with, in
/// its creator's log: an [`ExternalOutcome`].
pub const OUTCOME_EVENT: &str = "subagent/external-outcome";

/// The most bytes of output an [`OUTCOME_EVENT`] keeps.
pub const MAX_OUTCOME_OUTPUT_BYTES: usize = 16 * 1024;

/// What a foreground external child settled with, as its creator's log
/// keeps it (its caller got the whole result).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalOutcome {
    /// The child's id.
    pub child_id: SessionId,
    /// Why it ended.
    pub stop_reason: StopReason,
    /// Its output's text, at most [`MAX_OUTCOME_OUTPUT_BYTES`].
    pub output: String,
    /// Its diagnostic, bounded as every diagnostic is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<String>,
}

impl ExternalOutcome {
    /// The bounded record of `result`, the result of `child`.
    pub fn of(child: &SessionId, result: &SubagentResult) -> Self {
        Self {
            child_id: child.clone(),
            stop_reason: result.stop_reason.clone(),
            output: bound_text(
                result.output_text(),
                MAX_OUTCOME_OUTPUT_BYTES,
                crate::result::OUTPUT_CUT,
            ),
            diagnostic: result.diagnostic.clone().map(bound_diagnostic),
        }
    }

    /// The text a settlement notice from `name` with this outcome would
    /// carry: the summary and stop reason, the output, the diagnostic.
    pub fn render(&self, name: &str) -> String {
        let mut result = SubagentResult::stopped(self.stop_reason.clone());
        if !self.output.is_empty() {
            result.output = vec![ContentBlock::text(self.output.clone())];
        }
        result.diagnostic.clone_from(&self.diagnostic);
        dsh_core::content::joined_text(&render_notice(&summary_line(name, &result), &result))
    }
}

/// What the creator whose log is `events` heard from its external child
/// `child` (called `name`), in log order: the text of each settlement
/// notice (a background child's) and of each [`OUTCOME_EVENT`] (a
/// foreground child's), rendered alike.
pub fn heard_from(events: &[SessionEvent], child: &SessionId, name: &str) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::InboxAccepted(accepted) => match &accepted.message.source {
                MessageSource::SubagentSettled {
                    sender_session_id, ..
                } if sender_session_id == child => {
                    Some(dsh_core::content::joined_text(&accepted.message.content))
                }
                _ => None,
            },
            EventPayload::Extension { kind, payload } if kind == OUTCOME_EVENT => payload
                .parse::<ExternalOutcome>()
                .ok()
                .filter(|outcome| &outcome.child_id == child)
                .map(|outcome| outcome.render(name)),
            _ => None,
        })
        .collect()
}

#[derive(Serialize, Deserialize)]
struct ResumeRecord {
    child_id: SessionId,
    resume: Value,
}

/// A follow-up to a continuable external child, past its checks: the work
/// the runtime owns.
struct FollowUp {
    sender: AgentRef,
    root: SessionId,
    target: SessionId,
    content: Vec<ContentBlock>,
    row: DescendantRow,
    token: Value,
    provider: Arc<dyn SubagentProvider>,
    stop: CancellationToken,
}

/// A follow-up's creator: live, or resumed for it (installed, not yet
/// launched).
struct Creator {
    agent: Arc<dyn Agent>,
    resumed: Option<(Arc<Activation>, AgentHandle)>,
}

/// A fault of the runtime's own records about an external child.
fn provider_fault(message: &str) -> SubagentError {
    SubagentError::Infra(crate::InfraError::Provider {
        provider: String::new(),
        message: message.to_owned(),
    })
}

/// The refusal of a follow-up message to an external child (B42).
pub(crate) fn external_refusal(target: &SessionId) -> SubagentError {
    DeliveryError::External(target.clone()).into()
}

/// The token recorded for `child` in `events` (the creator's own events:
/// a fork seed's are the ancestor's), the latest one winning.
fn token_in(events: &[SessionEvent], seed_len: u64, child: &SessionId) -> Option<Value> {
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
        let payload = dsh_core::ExtensionPayload::new(&record).map_err(|err| {
            provider_fault(&format!("the resume token does not serialise: {err}"))
        })?;
        parent.record(RESUME_EVENT, payload).await?;
        Ok(())
    }

    /// The resume token `parent`'s log holds for `child`.
    async fn resume_token_of(&self, parent: &SessionId, child: &SessionId) -> Option<Value> {
        if let Some(agent) = self.registry().get(parent) {
            return token_in(&agent.events(), agent.header().seed_len, child);
        }
        let loaded = self.store().load(parent).await.ok()?;
        token_in(&loaded.events, loaded.header.seed_len, child)
    }

    /// Record what the foreground external `activation` settled with in
    /// its creator's log ([`OUTCOME_EVENT`]); nothing for any other
    /// activation, or when its creator is no longer live.
    ///
    /// # Errors
    /// The creator's log refused the record.
    ///
    /// # Cancel safety
    /// A drop leaves the record written or not.
    pub(crate) async fn record_outcome(
        &self,
        activation: &Activation,
        result: &SubagentResult,
    ) -> Result<(), SubagentError> {
        if activation.delivery() != Delivery::Caller || activation.agent().is_some() {
            return Ok(());
        }
        let Some(parent) = self.registry().resolve(activation.parent()) else {
            return Ok(());
        };
        let payload =
            dsh_core::ExtensionPayload::new(&ExternalOutcome::of(activation.child_id(), result))
                .map_err(|err| provider_fault(&format!("the outcome does not serialise: {err}")))?;
        parent.record(OUTCOME_EVENT, payload).await?;
        Ok(())
    }

    /// Deliver `content` to the external child `target` of `root`'s tree
    /// as the prompt of its next turn, or refuse it as B42 says when the
    /// child cannot continue. A cold creator is resumed under the live
    /// root for it (as a cold target of `send_message` is): it owns the
    /// follow-up, hears its notice and settles once it is quiet again.
    ///
    /// # Cancel safety
    /// The checks (catalog and log reads) have no effect. From the resume
    /// gate on, the runtime owns the work: a drop cancels what is not
    /// published (a creator resumed for it is disposed again, the
    /// provider's start abandoned) and the runtime's tracker finishes the
    /// rest, so what is left is nothing or an installed, monitored
    /// activation.
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
        if provider.external().is_none() {
            return Err(external_refusal(target));
        }
        let stop = cancel.child_token();
        let work = FollowUp {
            sender: sender.clone(),
            root: root.clone(),
            target: target.clone(),
            content,
            row,
            token,
            provider,
            stop: stop.clone(),
        };
        self.own(stop, |runtime| async move { runtime.follow_up(work).await })
            .await
    }

    async fn follow_up(&self, work: FollowUp) -> Result<MessageId, SubagentError> {
        let FollowUp {
            sender,
            root,
            target,
            content,
            row,
            token,
            provider,
            stop,
        } = work;
        let Some(external) = provider.external() else {
            return Err(external_refusal(&target));
        };
        let _turn = self.resume_gate(&target, &stop).await?;
        // A turn in flight settles first: the message is its next prompt.
        if let Some(live) = self.activations().get(&target) {
            let mut settled = live.settled();
            tokio::select! {
                biased;
                () = stop.cancelled() => return Err(SubagentError::Cancelled),
                _ = settled.wait_for(Option::is_some) => {}
            }
            // Settled means torn down and out of the map (the monitor
            // uninstalls first).
        }
        if !self.registry().is_live(&sender) {
            return Err(DeliveryError::NotLive(sender.id.clone()).into());
        }
        let ticket = self
            .admissions()
            .admit(self.registry(), &root, stop.clone())?;
        let slot = self.reserve_capacity(&root).map_err(|_| {
            SubagentError::Delivery(DeliveryError::DeliveryUnavailable(target.clone()))
        })?;
        let creator = self.creator(&row.parent_id, &root, &stop).await?;
        let started = self
            .start_follow_up(external, &target, &row, &token, content, &creator, &stop)
            .await;
        let run = match started {
            Ok(run) => run,
            Err(err) => {
                // A creator resumed for nothing goes cold again.
                if let Some((resumed, handle)) = &creator.resumed {
                    self.uninstall(resumed);
                    handle.dispose().await;
                }
                return Err(err);
            }
        };
        let parent = &creator.agent;
        let name = row.entry.name.clone().unwrap_or_else(|| target.to_string());
        let path = self.full_name(parent.id(), &name);
        let activation = self.install(NewActivation {
            info: RunInfo {
                provider: provider.name().to_owned(),
                name: path.clone().unwrap_or_else(|| target.to_string()),
                label: row.entry.label.clone(),
                child_id: target.clone(),
                parent_session_id: parent.id().clone(),
                root: root.clone(),
                local: false,
            },
            path,
            parent: parent.reference(),
            root: root.clone(),
            delivery: Delivery::Parent,
            execution: Execution::External { run, _claim: None },
            slot,
        });
        // The resumed creator is launched once it owns the follow-up, so
        // it stays until that settles and its notice is handled.
        if let Some((resumed, _)) = &creator.resumed {
            self.launch(resumed);
        }
        self.launch(&activation);
        drop(ticket);
        if creator.resumed.is_some()
            && let Err(err) = self.deliver_lost_notices(parent).await
        {
            tracing::warn!(creator = %parent.id(), "lost notices were not delivered: {err}");
        }
        Ok(MessageId::generate())
    }

    /// The live creator `id` of a follow-up, resumed under `root` when it
    /// is cold (installed as an activation, not launched).
    async fn creator(
        &self,
        id: &SessionId,
        root: &SessionId,
        stop: &CancellationToken,
    ) -> Result<Creator, SubagentError> {
        if let Some(agent) = self.registry().get(id) {
            return Ok(Creator {
                agent,
                resumed: None,
            });
        }
        let resumed = self
            .resume_member(id, root, stop)
            .await
            .map_err(|err| match err {
                SubagentError::Delivery(DeliveryError::NotResumable { reason, .. }) => {
                    DeliveryError::NotResumable {
                        id: id.clone(),
                        reason: format!("its creator cannot be resumed: {reason}"),
                    }
                    .into()
                }
                err => err,
            })?;
        let handle = resumed.handle.clone();
        let activation = self.install_resumed(id, root, resumed).await;
        let agent = handle.agent().clone();
        self.record_resumed(&activation, &handle).await?;
        Ok(Creator {
            agent,
            resumed: Some((activation, handle)),
        })
    }

    /// The provider's run of a follow-up under `creator`, checked to be the
    /// same child.
    #[allow(clippy::too_many_arguments)]
    async fn start_follow_up(
        &self,
        external: &dyn StartExternal,
        target: &SessionId,
        row: &DescendantRow,
        token: &Value,
        content: Vec<ContentBlock>,
        creator: &Creator,
        stop: &CancellationToken,
    ) -> Result<Arc<dyn SubagentRun>, SubagentError> {
        let request = ResolvedStartRequest {
            label: row.entry.label.clone(),
            agent_preset: None,
            cwd: creator.agent.cwd(),
            prompt: content,
            parent: creator.agent.clone(),
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
            run = external.resume(target, token, request) => run?,
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
        Ok(run)
    }
}
