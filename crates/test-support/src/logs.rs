//! Queries over a session's events, as the crash-point harnesses check
//! them after a reopen: the pending inbox the log implies, the messages it
//! holds as conversation, and the tool calls it left without a result; and
//! as the suites read a log: the stop reason of every turn, and the
//! messages other agents relayed to it. Read-only helpers, so that suites
//! stop carrying their own copies; and one builder, [`conversation`], of a
//! history to seed an agent with.

use std::collections::BTreeSet;

use dsh_core::content::joined_text;
use dsh_core::session::{
    AssistantEntry, EventPayload, SessionEvent, TurnEnd, TurnStart, UserEntry,
};
use dsh_core::{ContentBlock, MessageId, MessageSource, StopReason, UserMessage};

/// A log of `messages` messages (rounded down to even) as completed turns
/// of a short question and its answer, seqs from 0: the seed of an agent
/// with a long history.
pub fn conversation(messages: u64) -> Vec<SessionEvent> {
    (0..messages / 2)
        .flat_map(|turn| {
            [
                EventPayload::TurnStart(TurnStart { turn }),
                EventPayload::UserMessage(UserEntry {
                    message: UserMessage::user_text(format!("question {turn}")),
                }),
                EventPayload::AssistantMessage(AssistantEntry {
                    content: vec![ContentBlock::text(format!("answer {turn}"))],
                }),
                EventPayload::TurnEnd(TurnEnd {
                    turn,
                    stop_reason: StopReason::COMPLETED,
                    diagnostic: None,
                }),
            ]
        })
        .enumerate()
        .map(|(seq, payload)| SessionEvent {
            seq: seq as u64,
            time: 0,
            payload,
        })
        .collect()
}

/// Pending input as the log says: accepted − claimed − discarded, where a
/// `user/message` claims its item too (the loop writes the message before
/// its claim, so a torn batch may hold the message without the claim).
pub fn accepted_minus_claimed(events: &[SessionEvent]) -> BTreeSet<MessageId> {
    let mut pending = BTreeSet::new();
    for event in events {
        match &event.payload {
            EventPayload::InboxAccepted(accepted) => {
                pending.insert(accepted.message.id.clone());
            }
            EventPayload::InboxClaimed(ids) | EventPayload::InboxDiscarded(ids) => {
                for id in &ids.message_ids {
                    pending.remove(id);
                }
            }
            EventPayload::UserMessage(entry) => {
                pending.remove(&entry.message.id);
            }
            _ => {}
        }
    }
    pending
}

/// The ids of the messages a log holds as conversation (`user/message`).
pub fn delivered(events: &[SessionEvent]) -> BTreeSet<MessageId> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::UserMessage(entry) => Some(entry.message.id.clone()),
            _ => None,
        })
        .collect()
}

/// The call ids of the tool calls a log holds without a result, in order.
pub fn unanswered(events: &[SessionEvent]) -> Vec<String> {
    let mut open: Vec<String> = Vec::new();
    for event in events {
        match &event.payload {
            EventPayload::ToolCall(call) => open.push(call.call_id.as_str().to_owned()),
            EventPayload::ToolResult(result) => open.retain(|id| id != result.call_id.as_str()),
            _ => {}
        }
    }
    open
}

/// Every turn end's stop reason, in order.
pub fn stop_reasons(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::TurnEnd(end) => Some(end.stop_reason.to_string()),
            _ => None,
        })
        .collect()
}

/// The messages other agents sent that `events` accepted, in order:
/// `(sender, text)`.
pub fn agent_messages<'a>(
    events: impl IntoIterator<Item = &'a SessionEvent>,
) -> Vec<(String, String)> {
    events
        .into_iter()
        .filter_map(|event| match &event.payload {
            EventPayload::InboxAccepted(accepted) => match &accepted.message.source {
                MessageSource::AgentMessage { sender_session_id } => Some((
                    sender_session_id.to_string(),
                    joined_text(&accepted.message.content),
                )),
                _ => None,
            },
            _ => None,
        })
        .collect()
}
