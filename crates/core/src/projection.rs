//! Projections: named, replayable folds over a session log. A projection
//! sees the header and then each event in order and builds a state from
//! nothing else, so replaying the same log always yields the same state. Two
//! folds every agent loop needs live here: the model-visible transcript and
//! the pending inbox.

use std::collections::{BTreeMap, HashMap};

use crate::id::MessageId;
use crate::message::{InboxTarget, Message, Transcript, UserMessage};
use crate::session::{EventPayload, SessionEvent, SessionHeader};

/// A named fold over a session log.
pub trait Projection {
    /// The state it builds.
    type State;

    /// A stable name (for catalogues and diagnostics).
    fn name(&self) -> &'static str;

    /// The state before any event.
    fn init(&self, header: &SessionHeader) -> Self::State;

    /// Fold one event into the state.
    fn apply(&self, state: &mut Self::State, event: &SessionEvent);
}

/// Fold a whole log.
pub fn replay<P: Projection>(
    projection: &P,
    header: &SessionHeader,
    events: &[SessionEvent],
) -> P::State {
    let mut state = projection.init(header);
    for event in events {
        projection.apply(&mut state, event);
    }
    state
}

/// The conversation a model is shown, derived from the log: user messages,
/// assistant messages with their tool calls, and tool results.
#[derive(Debug, Clone, Copy, Default)]
pub struct TranscriptProjection;

impl Projection for TranscriptProjection {
    type State = Transcript;

    fn name(&self) -> &'static str {
        "transcript"
    }

    fn init(&self, _header: &SessionHeader) -> Self::State {
        Transcript::new()
    }

    fn apply(&self, messages: &mut Self::State, event: &SessionEvent) {
        match &event.payload {
            EventPayload::UserMessage(entry) => messages.push(Message::User {
                content: entry.message.content.clone(),
                source: entry.message.source.clone(),
            }),
            EventPayload::AssistantMessage(entry) => messages.push(Message::Assistant {
                content: entry.content.clone(),
                tool_calls: Vec::new(),
            }),
            EventPayload::ToolCall(call) => {
                // Looked at before it is opened for change: amending is
                // the rarer path, and opening a sealed chunk copies it.
                if matches!(messages.last(), Some(Message::Assistant { .. })) {
                    if let Some(Message::Assistant { tool_calls, .. }) = messages.last_mut() {
                        tool_calls.push(call.clone());
                    }
                } else {
                    messages.push(Message::Assistant {
                        content: Vec::new(),
                        tool_calls: vec![call.clone()],
                    });
                }
            }
            EventPayload::ToolResult(result) => messages.push(Message::Tool {
                call_id: result.call_id.clone(),
                content: result.content.clone(),
                is_error: result.is_error,
            }),
            _ => {}
        }
    }
}

/// One pending inbox item.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingItem {
    /// The message.
    pub message: UserMessage,
    /// Its list.
    pub target: InboxTarget,
    /// Whether it may wake the agent.
    pub wake: bool,
}

/// The pending inbox: accepted minus claimed minus discarded, in acceptance
/// order. A `user/message` carrying a pending message's id claims it too:
/// a loop writes a message before the claim that names it, so a batch torn
/// between the two leaves the message delivered once, never twice and
/// never lost.
#[derive(Debug, Clone, Default)]
pub struct PendingInbox {
    items: BTreeMap<u64, PendingItem>,
    /// Message ids hashed with a fast seeded hasher: ids are short and
    /// every accept and claim hashes one.
    index: HashMap<MessageId, u64, foldhash::fast::RandomState>,
}

impl PendingInbox {
    /// Pending items in acceptance order.
    pub fn items(&self) -> impl Iterator<Item = &PendingItem> {
        self.items.values()
    }

    /// How many items are pending.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Take every pending item out, in acceptance order.
    pub fn into_items(self) -> Vec<PendingItem> {
        self.items.into_values().collect()
    }
}

/// Folds the pending inbox, the set a resume must still deliver.
#[derive(Debug, Clone, Copy, Default)]
pub struct PendingInboxProjection;

impl Projection for PendingInboxProjection {
    type State = PendingInbox;

    fn name(&self) -> &'static str {
        "pending-inbox"
    }

    fn init(&self, _header: &SessionHeader) -> Self::State {
        PendingInbox::default()
    }

    fn apply(&self, state: &mut Self::State, event: &SessionEvent) {
        match &event.payload {
            EventPayload::InboxAccepted(accepted) => {
                state.index.insert(accepted.message.id.clone(), event.seq);
                state.items.insert(
                    event.seq,
                    PendingItem {
                        message: accepted.message.clone(),
                        target: accepted.target,
                        wake: accepted.wake,
                    },
                );
            }
            EventPayload::UserMessage(entry) => {
                if let Some(seq) = state.index.remove(&entry.message.id) {
                    state.items.remove(&seq);
                }
            }
            EventPayload::InboxClaimed(ids) | EventPayload::InboxDiscarded(ids) => {
                for id in &ids.message_ids {
                    if let Some(seq) = state.index.remove(id) {
                        state.items.remove(&seq);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The pending inbox of a whole log, as [`PendingInboxProjection`] folds
/// it, in one borrowed pass: only the items still pending at the end are
/// cloned, where the fold clones every accepted message and drops most of
/// them again. For a resume, which needs the end state only.
pub fn pending_items(events: &[SessionEvent]) -> Vec<PendingItem> {
    let mut fold = PendingItemsFold::new();
    for event in events {
        fold.apply(event);
    }
    fold.finish()
}

/// [`pending_items`] as a fold its caller drives event by event, so that
/// one pass over a long log can gather other things as well (a log of
/// 100,000 events is 12.8 MB of [`SessionEvent`]s: each pass over it costs
/// a read of them all). It borrows the events until [`finish`](Self::finish),
/// which clones only what is still pending.
#[derive(Debug, Default)]
pub struct PendingItemsFold<'a> {
    /// Accepted and not yet claimed, by the seq that accepted them.
    pending: BTreeMap<u64, &'a crate::session::InboxAccepted>,
    /// The seq that accepted each pending message.
    index: HashMap<&'a MessageId, u64, foldhash::fast::RandomState>,
}

impl<'a> PendingItemsFold<'a> {
    /// Nothing pending yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Take in the next event of the log.
    pub fn apply(&mut self, event: &'a SessionEvent) {
        match &event.payload {
            EventPayload::InboxAccepted(accepted) => {
                self.index.insert(&accepted.message.id, event.seq);
                self.pending.insert(event.seq, accepted);
            }
            // Nothing pending (the usual state between turns): no id to
            // hash.
            _ if self.index.is_empty() => {}
            EventPayload::UserMessage(entry) => {
                if let Some(seq) = self.index.remove(&entry.message.id) {
                    self.pending.remove(&seq);
                }
            }
            EventPayload::InboxClaimed(ids) | EventPayload::InboxDiscarded(ids) => {
                for id in &ids.message_ids {
                    if let Some(seq) = self.index.remove(id) {
                        self.pending.remove(&seq);
                    }
                }
            }
            _ => {}
        }
    }

    /// The item accepted as `id`, while it is still pending.
    pub fn get(&self, id: &MessageId) -> Option<PendingItem> {
        let seq = self.index.get(id)?;
        self.pending.get(seq).map(|accepted| pending_item(accepted))
    }

    /// What is pending after the events taken in, in acceptance order.
    pub fn finish(self) -> Vec<PendingItem> {
        self.pending.into_values().map(pending_item).collect()
    }
}

/// The pending item an `inbox/accepted` event recorded.
fn pending_item(accepted: &crate::session::InboxAccepted) -> PendingItem {
    PendingItem {
        message: accepted.message.clone(),
        target: accepted.target,
        wake: accepted.wake,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::ContentBlock;
    use crate::id::{CallId, SessionId};
    use crate::message::{MessageSource, ToolCall};
    use crate::session::{AssistantEntry, InboxAccepted, InboxIds, ToolResultEntry, UserEntry};

    fn log(payloads: Vec<EventPayload>) -> Vec<SessionEvent> {
        payloads
            .into_iter()
            .enumerate()
            .map(|(seq, payload)| SessionEvent {
                seq: seq as u64,
                time: 0,
                payload,
            })
            .collect()
    }

    fn accepted(id: &str, target: InboxTarget) -> EventPayload {
        EventPayload::InboxAccepted(InboxAccepted {
            message: UserMessage {
                id: MessageId::new(id),
                content: vec![ContentBlock::text(id)],
                source: MessageSource::User,
            },
            target,
            wake: true,
        })
    }

    #[test]
    fn pending_is_accepted_minus_claimed_minus_discarded() {
        let header = SessionHeader::new(SessionId::new("s").unwrap(), "/");
        let events = log(vec![
            accepted("a", InboxTarget::NextTurn),
            accepted("b", InboxTarget::NextStep),
            accepted("c", InboxTarget::NextTurn),
            accepted("d", InboxTarget::NextTurn),
            EventPayload::InboxClaimed(InboxIds {
                message_ids: vec![MessageId::new("a")],
            }),
            EventPayload::InboxDiscarded(InboxIds {
                message_ids: vec![MessageId::new("c")],
            }),
        ]);
        let pending = replay(&PendingInboxProjection, &header, &events);
        let ids: Vec<&str> = pending
            .items()
            .map(|item| item.message.id.as_str())
            .collect();
        assert_eq!(ids, ["b", "d"]);
        assert_eq!(pending_items(&events), pending.into_items());
    }

    // A batch torn after the message and before its claim: the message is
    // in the transcript, so it is no longer pending.
    #[test]
    fn a_user_message_claims_its_pending_item() {
        let header = SessionHeader::new(SessionId::new("s").unwrap(), "/");
        let message = UserMessage {
            id: MessageId::new("a"),
            content: vec![ContentBlock::text("a")],
            source: MessageSource::User,
        };
        let events = log(vec![
            accepted("a", InboxTarget::NextTurn),
            accepted("b", InboxTarget::NextTurn),
            EventPayload::UserMessage(UserEntry { message }),
        ]);
        let pending = replay(&PendingInboxProjection, &header, &events);
        let ids: Vec<&str> = pending
            .items()
            .map(|item| item.message.id.as_str())
            .collect();
        assert_eq!(ids, ["b"]);
        assert_eq!(pending_items(&events), pending.into_items());
    }

    #[test]
    fn transcript_attaches_tool_calls_to_their_assistant_message() {
        let header = SessionHeader::new(SessionId::new("s").unwrap(), "/");
        let call = ToolCall {
            call_id: CallId::new("c1"),
            name: "read".into(),
            input: serde_json::json!({}).into(),
        };
        let events = log(vec![
            EventPayload::UserMessage(UserEntry {
                message: UserMessage::user_text("hi"),
            }),
            EventPayload::AssistantMessage(AssistantEntry {
                content: vec![ContentBlock::text("let me look")],
            }),
            EventPayload::ToolCall(call.clone()),
            EventPayload::ToolResult(ToolResultEntry {
                call_id: CallId::new("c1"),
                name: "read".into(),
                content: vec![ContentBlock::text("data")],
                is_error: false,
            }),
        ]);
        let messages = replay(&TranscriptProjection, &header, &events);
        assert_eq!(messages.len(), 3);
        assert!(
            matches!(&messages[1], Message::Assistant { tool_calls, .. } if tool_calls == &vec![call])
        );
    }
}
