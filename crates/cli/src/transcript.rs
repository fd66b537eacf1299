//! Reading a session's events for people: the transcript `dsh show` prints
//! (user, assistant and tool messages, turn ends), token totals, the tools
//! an agent called, and each finished turn's answer. Pure functions over
//! events; nothing here touches a store.

use dsh_core::content::joined_text;
use dsh_core::session::TurnEnd;
use dsh_core::{
    EventPayload, MessageId, MessageSource, SessionEvent, SessionId, StopReason, Usage,
};

/// Token totals of a log (every `usage` event).
pub fn tokens(events: &[SessionEvent]) -> Usage {
    let mut total = Usage::default();
    for event in events {
        if let EventPayload::Usage(usage) = &event.payload {
            total += *usage;
        }
    }
    total
}

/// The tools called, in order of first call, with counts (`wait×2`).
pub fn tool_calls(events: &[SessionEvent]) -> String {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for event in events {
        if let EventPayload::ToolCall(call) = &event.payload {
            match seen.iter_mut().find(|(name, _)| *name == call.name) {
                Some((_, count)) => *count += 1,
                None => seen.push((call.name.clone(), 1)),
            }
        }
    }
    seen.into_iter()
        .map(|(name, count)| {
            if count == 1 {
                name
            } else {
                format!("{name}×{count}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One finished turn.
#[derive(Debug, Clone)]
pub struct FinishedTurn {
    /// The turn's end event.
    pub end: TurnEnd,
    /// Its final answer (the last assistant text of the turn).
    pub answer: String,
}

/// Every turn that ended in `events` from `from` on (events are whole turns
/// from a turn start), with its answer.
pub fn finished_turns(events: &[SessionEvent]) -> Vec<FinishedTurn> {
    let mut turns = Vec::new();
    let mut start = 0;
    for (index, event) in events.iter().enumerate() {
        match &event.payload {
            EventPayload::TurnStart(_) => start = index,
            EventPayload::TurnEnd(end) => {
                let output = dsh_subagent::result::final_output(&events[start..index]);
                turns.push(FinishedTurn {
                    end: end.clone(),
                    answer: joined_text(&output),
                });
            }
            _ => {}
        }
    }
    turns
}

/// The finished turn that claimed message `id` (the turn whose start or a
/// later step took it from the inbox), with its answer; `None` when no
/// recorded turn claimed it, or that turn has not ended in `events`.
pub fn turn_claiming(events: &[SessionEvent], id: &MessageId) -> Option<FinishedTurn> {
    let claimed = events.iter().position(|event| {
        matches!(&event.payload, EventPayload::InboxClaimed(ids) if ids.message_ids.contains(id))
    })?;
    let start = events[..claimed]
        .iter()
        .rposition(|event| matches!(event.payload, EventPayload::TurnStart(_)))?;
    let end = claimed
        + events[claimed..]
            .iter()
            .position(|event| matches!(event.payload, EventPayload::TurnEnd(_)))?;
    let EventPayload::TurnEnd(turn_end) = &events[end].payload else {
        return None;
    };
    let output = dsh_subagent::result::final_output(&events[start..end]);
    Some(FinishedTurn {
        end: turn_end.clone(),
        answer: joined_text(&output),
    })
}

/// Who a user-role message is from, for the transcript.
fn speaker(source: &MessageSource, name: &dyn Fn(&SessionId) -> String) -> String {
    match source {
        MessageSource::User | MessageSource::UserPrompt(_) => "user".to_owned(),
        MessageSource::AgentMessage { sender_session_id } => {
            format!("message from {}", name(sender_session_id))
        }
        MessageSource::SubagentSettled {
            sender_session_id, ..
        } => format!("notice from {}", name(sender_session_id)),
        other => other.kind().to_owned(),
    }
}

/// Indent every line after the first by `indent` spaces.
fn hang(text: &str, indent: usize) -> String {
    let pad = " ".repeat(indent);
    text.trim_end()
        .lines()
        .enumerate()
        .map(|(i, line)| {
            if i == 0 || line.is_empty() {
                line.to_owned()
            } else {
                format!("{pad}{line}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The transcript as text: `seed_len` inherited events summarised in one
/// line, then one entry per message, tool call, tool result and turn end.
pub fn render(
    events: &[SessionEvent],
    seed_len: u64,
    name: &dyn Fn(&SessionId) -> String,
) -> String {
    let mut out = String::new();
    let seed = usize::try_from(seed_len)
        .unwrap_or(usize::MAX)
        .min(events.len());
    if seed > 0 {
        out.push_str(&format!(
            "(inherited from the parent: {seed} events of its completed turns)\n"
        ));
    }
    for event in &events[seed..] {
        let entry = match &event.payload {
            EventPayload::UserMessage(entry) => {
                let who = speaker(&entry.message.source, name);
                Some(format!(
                    "{who}: {}",
                    hang(&joined_text(&entry.message.content), 2)
                ))
            }
            EventPayload::AssistantMessage(entry) => {
                let text = joined_text(&entry.content);
                (!text.trim().is_empty()).then(|| format!("assistant: {}", hang(&text, 2)))
            }
            EventPayload::ToolCall(call) => Some(format!("  -> {} {}", call.name, call.input)),
            EventPayload::ToolResult(result) => {
                let flag = if result.is_error { " (error)" } else { "" };
                Some(format!(
                    "  <- {}{flag}: {}",
                    result.name,
                    hang(&joined_text(&result.content), 6)
                ))
            }
            EventPayload::TurnEnd(end) => Some(format!(
                "-- turn {} ended: {}{}",
                end.turn,
                end.stop_reason,
                end.diagnostic
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            )),
            _ => None,
        };
        if let Some(entry) = entry {
            out.push_str(&entry);
            out.push('\n');
        }
    }
    let pending = events[seed..]
        .iter()
        .filter(|e| matches!(e.payload, EventPayload::InboxAccepted(_)))
        .count()
        .saturating_sub(
            events[seed..]
                .iter()
                .filter_map(|e| match &e.payload {
                    EventPayload::InboxClaimed(ids) | EventPayload::InboxDiscarded(ids) => {
                        Some(ids.message_ids.len())
                    }
                    _ => None,
                })
                .sum(),
        );
    if pending > 0 {
        out.push_str(&format!(
            "({pending} message(s) waiting in the inbox for the next turn)\n"
        ));
    }
    out
}

/// Whether a stop reason means the turn did not finish its work: an
/// error, a refusal, or the step limit (`limits.max_turn_steps`) reached
/// while the model was still calling tools.
pub fn failed(reason: &StopReason) -> bool {
    reason == &StopReason::ERROR
        || reason == &StopReason::REFUSAL
        || reason == &StopReason::STEP_LIMIT
}

#[cfg(test)]
mod tests {
    use dsh_core::ContentBlock;
    use dsh_core::session::{AssistantEntry, InboxIds, TurnStart};

    use super::*;

    fn log(payloads: Vec<EventPayload>) -> Vec<SessionEvent> {
        payloads
            .into_iter()
            .enumerate()
            .map(|(seq, payload)| SessionEvent {
                seq: seq as u64 + 1,
                time: 0,
                payload,
            })
            .collect()
    }

    fn turn(turn: u64, claims: &[&MessageId], answer: &str) -> Vec<EventPayload> {
        vec![
            EventPayload::TurnStart(TurnStart { turn }),
            EventPayload::InboxClaimed(InboxIds {
                message_ids: claims.iter().map(|id| (*id).clone()).collect(),
            }),
            EventPayload::AssistantMessage(AssistantEntry {
                content: vec![ContentBlock::text(answer)],
            }),
            EventPayload::TurnEnd(TurnEnd {
                turn,
                stop_reason: StopReason::COMPLETED,
                diagnostic: None,
            }),
        ]
    }

    /// The reply to a message is the turn that claimed it, never the last
    /// turn of the log (B56: a turn that could not be recorded must not
    /// leave the previous answer to be printed as the reply).
    #[test]
    fn the_reply_is_the_turn_that_claimed_the_message() {
        let (old, mine, other) = (
            MessageId::generate(),
            MessageId::generate(),
            MessageId::generate(),
        );
        let mut payloads = turn(0, &[&old], "the old answer");
        let events = log(payloads.clone());
        assert!(turn_claiming(&events, &mine).is_none());
        assert_eq!(
            turn_claiming(&events, &old).map(|t| t.answer).as_deref(),
            Some("the old answer")
        );
        // Claimed, but the turn has not ended: no reply yet.
        payloads.extend(turn(1, &[&mine], "mine").into_iter().take(3));
        let events = log(payloads.clone());
        assert!(turn_claiming(&events, &mine).is_none());
        payloads.push(EventPayload::TurnEnd(TurnEnd {
            turn: 1,
            stop_reason: StopReason::COMPLETED,
            diagnostic: None,
        }));
        payloads.extend(turn(2, &[&other], "a later answer"));
        let events = log(payloads);
        assert_eq!(
            turn_claiming(&events, &mine).map(|t| t.answer).as_deref(),
            Some("mine")
        );
    }
}
