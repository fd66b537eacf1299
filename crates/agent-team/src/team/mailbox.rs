//! The mailbox: messages between members. A message is written `queued`
//! in the lead's log first, then delivered per target in queue order (one
//! delivery gate per target), and acknowledged `delivered` only once the
//! target's log holds it. A quiet message reaches a live target's next
//! step and waits for an inactive one; a waking message becomes the
//! target's next turn, through the runtime, which resumes a cold target.
//! Recovery re-offers the queued-minus-delivered messages, reading each
//! target's log first so nothing is delivered twice.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use dsh_core::{
    Agent, AgentError, CancellationToken, ContentBlock, EventPayload, InboxTarget, MessageId,
    MessageSource, SessionEvent, SessionId, StoreError, UserMessage,
};
use dsh_subagent::{PromptDelivery, TrustedHost};

use super::{Recovery, Team, lock};
use crate::error::TeamError;
use crate::fold::{Queued, TeamState};
use crate::record::{DeliveredRecord, DeliveryMode, LEAD_NAME, MessageRecord, TeamEvent};

/// The message kind a team message keeps in its target's inbox.
pub const TEAM_MESSAGE_SOURCE: &str = "team-message";

/// How many times a delivery races a target's teardown.
const RETRIES: usize = 8;

/// A message to send.
#[derive(Debug, Clone)]
pub struct SendMessage {
    /// The target's name.
    pub to: String,
    /// The blocks, delivered unchanged after a heading.
    pub content: Vec<ContentBlock>,
    /// Quiet or waking.
    pub delivery: DeliveryMode,
}

/// What a send reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendOutcome {
    /// The durable message id (the target's inbox keeps it).
    pub id: MessageId,
    /// Whether the target's log holds it already; `false` means it stays
    /// queued (a quiet message to an inactive target) and is not a reason
    /// to send it again.
    pub delivered: bool,
}

/// The mailbox's own live state: one delivery gate per target (bounded by
/// the roster) and the messages this process queued and has not offered
/// yet (no target can hold one, so their first delivery skips reading the
/// target's log; each is forgotten once its send returns).
#[derive(Default)]
pub(super) struct Mailbox {
    gates: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    fresh: Mutex<HashSet<MessageId>>,
}

impl Mailbox {
    fn gate(&self, target: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.gates)
            .entry(target.to_owned())
            .or_default()
            .clone()
    }

    /// Whether `id` was queued here and not offered yet; it is not fresh
    /// afterwards.
    fn take_fresh(&self, id: &MessageId) -> bool {
        lock(&self.fresh).remove(id)
    }

    /// Note that `id` was just queued here.
    fn mark_fresh(&self, id: &MessageId) {
        lock(&self.fresh).insert(id.clone());
    }
}

impl Team {
    /// Queue a message from `caller` to another member, then deliver it:
    /// the `queued` record is written first; delivery is serialized per
    /// target in queue order, and `delivered` is written only once the
    /// target's log holds the message. A quiet message reaches a live
    /// target's next step and stays queued for an inactive one; a waking
    /// message becomes the target's next turn, resuming it when it is cold.
    ///
    /// # Errors
    /// `TEAM_NOT_A_MEMBER`, `TEAM_UNKNOWN_MEMBER`, `TEAM_MEMBER_UNAVAILABLE`,
    /// `TEAM_MESSAGE_TOO_LARGE`, `TEAM_MAILBOX_LIMIT`; a delivery failure
    /// after the message was queued (it stays queued for recovery).
    ///
    /// # Cancel safety
    /// The checks run before the first await; queueing and delivery run on
    /// the team's tracker, so a dropped future leaves either nothing or a
    /// queued message that is delivered all the same.
    pub async fn send_message(
        &self,
        caller: &Arc<dyn Agent>,
        request: SendMessage,
    ) -> Result<SendOutcome, TeamError> {
        let from = self.role_of(caller)?.name().to_owned();
        let id = MessageId::generate();
        let bytes = framed_bytes(&id, &from, &request.content);
        let limit = self.inner.config.limits.max_message_bytes;
        if bytes > limit {
            return Err(TeamError::MessageTooLarge { bytes, limit });
        }
        let record = MessageRecord {
            team: self.id(),
            id: id.clone(),
            from,
            to: request.to,
            delivery: request.delivery,
            content: request.content,
        };
        self.inner
            .ledger
            .read(|state| self.check_queue(state, &record))?;
        let team = self.clone();
        self.detach(async move {
            let to = record.to.clone();
            team.commit(|state| {
                team.check_queue(state, &record)?;
                Ok(TeamEvent::Message(record))
            })
            .await?;
            team.inner.mailbox.mark_fresh(&id);
            let flushed = team.flush(to).await;
            // Offered or not, it is no longer this send's to skip a read for.
            team.inner.mailbox.take_fresh(&id);
            flushed?;
            let delivered = team
                .inner
                .ledger
                .read(|state| state.message(&id).is_some_and(|queued| queued.delivered));
            Ok(SendOutcome { id, delivered })
        })
        .await
    }

    fn check_queue(&self, state: &TeamState, record: &MessageRecord) -> Result<(), TeamError> {
        state.check(&TeamEvent::Message(record.clone()))?;
        let limit = self.inner.config.limits.max_pending_per_member;
        if state.pending_for(&record.to).count() >= limit {
            return Err(TeamError::Limit {
                what: "pending message",
                limit,
            });
        }
        Ok(())
    }

    /// Deliver `target`'s queued messages in queue order, one target at a time.
    pub(super) async fn flush(&self, target: String) -> Result<usize, TeamError> {
        let gate = self.inner.mailbox.gate(&target);
        let _turn = gate.lock().await;
        let session = self.session_of(&target)?;
        let mut acknowledged = 0;
        let mut retries = 0;
        loop {
            let (next, wakeup_follows) = self.inner.ledger.read(|state| {
                let mut pending = state.pending_for(&target);
                let next = pending.next().cloned();
                let wakeup_follows = pending.any(|q| q.record.delivery == DeliveryMode::Wakeup);
                (next, wakeup_follows)
            });
            let Some(queued) = next else {
                return Ok(acknowledged);
            };
            let live = self.inner.runtime.registry().get(&session);
            let fresh = self.inner.mailbox.take_fresh(&queued.record.id);
            if fresh
                || !self
                    .holds(live.as_ref(), &session, &queued.record.id)
                    .await?
            {
                let outcome = self
                    .hand_over(live.as_ref(), &session, &queued, wakeup_follows)
                    .await;
                match outcome {
                    Ok(true) => {}
                    Ok(false) => return Ok(acknowledged),
                    Err(TeamError::Agent(AgentError::Disposed(_))) if retries < RETRIES => {
                        // Torn down while we delivered: it is cold now.
                        retries += 1;
                        tokio::task::yield_now().await;
                        continue;
                    }
                    Err(err) => return Err(err),
                }
            }
            let ack = DeliveredRecord {
                team: self.id(),
                id: queued.record.id.clone(),
                to: target.clone(),
            };
            self.commit(|_| Ok(TeamEvent::Delivered(ack))).await?;
            acknowledged += 1;
        }
    }

    /// Flush every target that has queued messages, in the order of their
    /// first queued message, counting what was delivered into `recovery`.
    pub(super) async fn flush_all(&self, recovery: &mut Recovery) {
        let targets: Vec<String> = self.inner.ledger.read(|state| {
            let mut targets: Vec<String> = Vec::new();
            for queued in state.pending() {
                if !targets.contains(&queued.record.to) {
                    targets.push(queued.record.to.clone());
                }
            }
            targets
        });
        for target in targets {
            match self.flush(target.clone()).await {
                Ok(count) => recovery.delivered += count,
                Err(err) => recovery.errors.push((target, err.to_string())),
            }
        }
    }

    /// Give one message to its target. `Ok(false)`: it stays queued.
    async fn hand_over(
        &self,
        live: Option<&Arc<dyn Agent>>,
        session: &SessionId,
        queued: &Queued,
        wakeup_follows: bool,
    ) -> Result<bool, TeamError> {
        let record = &queued.record;
        let is_lead = session == self.inner.lead.id();
        match (record.delivery, live) {
            (DeliveryMode::Quiet, Some(agent)) => {
                agent
                    .send(self.user_message(record), InboxTarget::NextStep, false)
                    .await?;
                Ok(true)
            }
            (DeliveryMode::Quiet, None) if !wakeup_follows => Ok(false),
            (DeliveryMode::Wakeup, Some(agent)) if is_lead => {
                agent
                    .send(self.user_message(record), InboxTarget::NextTurn, true)
                    .await?;
                Ok(true)
            }
            (_, None) if is_lead => Err(TeamError::Agent(AgentError::Disposed(session.clone()))),
            _ => {
                // Through the runtime, whole (its `team-message` source
                // kept): it steers clear of a retiring target, resumes a
                // cold one as an activation it owns, and never accepts one
                // message id twice.
                self.inner
                    .runtime
                    .deliver_whole(
                        session,
                        self.user_message(record),
                        PromptDelivery::Queue,
                        &TrustedHost,
                        &CancellationToken::new(),
                    )
                    .await?;
                Ok(true)
            }
        }
    }

    fn user_message(&self, record: &MessageRecord) -> UserMessage {
        let mut fields = serde_json::Map::new();
        fields.insert("team_id".into(), self.id().to_string().into());
        fields.insert("message_id".into(), record.id.as_str().into());
        fields.insert("sender_name".into(), record.from.as_str().into());
        if let Ok(sender) = self.session_of(&record.from) {
            fields.insert("sender_session_id".into(), sender.as_str().into());
        }
        UserMessage {
            id: record.id.clone(),
            content: framed(record),
            source: MessageSource::Other {
                kind: TEAM_MESSAGE_SOURCE.into(),
                fields,
            },
        }
    }

    /// Whether `session`'s log holds message `id` (pending or in history).
    async fn holds(
        &self,
        live: Option<&Arc<dyn Agent>>,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<bool, TeamError> {
        let events = match live {
            Some(agent) => agent.events(),
            None => match self.inner.store.load(session).await {
                Ok(loaded) => loaded.events,
                Err(StoreError::NotFound(_)) => return Ok(false),
                Err(err) => return Err(TeamError::Agent(err.into())),
            },
        };
        Ok(log_holds(&events, id))
    }

    /// The session of `name` (`lead` or a teammate).
    pub(super) fn session_of(&self, name: &str) -> Result<SessionId, TeamError> {
        if name == LEAD_NAME {
            return Ok(self.inner.lead.id().clone());
        }
        self.inner
            .ledger
            .read(|state| state.member(name).map(|member| member.record.id.clone()))
            .ok_or_else(|| TeamError::UnknownMember(name.to_owned()))
    }
}

/// The heading the target sees before the sender's blocks.
pub fn heading(id: &MessageId, sender: &str) -> String {
    format!("Team message {id} from {sender}:")
}

/// The framed content of a message: its heading, then the blocks unchanged.
fn framed(record: &MessageRecord) -> Vec<ContentBlock> {
    std::iter::once(ContentBlock::text(heading(&record.id, &record.from)))
        .chain(record.content.iter().cloned())
        .collect()
}

/// The size a framed message counts against the byte limit.
fn framed_bytes(id: &MessageId, sender: &str, content: &[ContentBlock]) -> usize {
    heading(id, sender).len()
        + content
            .iter()
            .map(|block| match block {
                ContentBlock::Text { text } => text.len(),
                ContentBlock::Image { media_type, data } => media_type.len() + data.len(),
            })
            .sum::<usize>()
}

/// Whether a log holds an accepted message `id`.
pub fn log_holds(events: &[SessionEvent], id: &MessageId) -> bool {
    events.iter().any(|event| match &event.payload {
        EventPayload::InboxAccepted(accepted) => &accepted.message.id == id,
        EventPayload::UserMessage(entry) => &entry.message.id == id,
        _ => false,
    })
}
