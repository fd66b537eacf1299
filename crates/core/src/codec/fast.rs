//! The fast path of a line's read: a line exactly as this crate writes it
//! (`{"seq":N,"time":N,"type":"..","payload":..}`, no whitespace, numbers
//! in their shortest form, a type without escapes) has its envelope read by
//! hand, and the commonest payloads too. Everything here answers `None` for
//! anything outside that form, and the general path then reads or refuses
//! the line; this module must never decide that a line is bad. Replaying a
//! log spent most of its time in serde's visitors for these small objects.

use serde::Deserialize;
use serde::de::{DeserializeSeed, IgnoredAny};

use super::general::PayloadSeed;
use super::written::{closing_quote, number, string, unescaped};
use super::{RecentIds, Skimmed, written_payload};
use crate::content::ContentBlock;
use crate::message::{InboxTarget, MessageSource, ToolCall, ToolInput, Usage, UserMessage};
use crate::session::{
    AssistantEntry, EventPayload, InboxAccepted, InboxIds, SessionEvent, StepStart,
    ToolResultEntry, TurnEnd, TurnStart, UserEntry,
};
use crate::stop::StopReason;

/// A written line's seq, time, type and payload text.
fn envelope(line: &str) -> Option<(u64, u64, &str, &str)> {
    let (seq, rest) = number(line.strip_prefix(r#"{"seq":"#)?)?;
    let (time, rest) = number(rest.strip_prefix(r#","time":"#)?)?;
    let rest = rest.strip_prefix(r#","type":""#)?;
    // The type is short: a plain loop beats a `memchr` call's set-up.
    let end = rest
        .bytes()
        .position(|byte| byte == b'"' || byte == b'\\' || byte < 0x20)?;
    let (kind, rest) = rest.split_at(end);
    let payload = rest.strip_prefix(r#"","payload":"#)?.strip_suffix('}')?;
    Some((seq, time, kind, payload))
}

/// The payload `text` of type `kind`: read by hand when it is in its
/// written form, else by serde alone (any payload, checked to be exactly
/// one value).
fn payload(kind: &str, text: &str, recent: &mut RecentIds) -> Option<EventPayload> {
    if let Some(payload) = written_payload(kind, text, recent) {
        return Some(payload);
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let payload = PayloadSeed(kind).deserialize(&mut deserializer).ok()?;
    deserializer.end().ok()?;
    Some(payload)
}

/// The event on a written line.
pub(super) fn event(line: &str, recent: &mut RecentIds) -> Option<SessionEvent> {
    let (seq, time, kind, text) = envelope(line)?;
    let payload = payload(kind, text, recent)?;
    Some(SessionEvent { seq, time, payload })
}

/// A written line skimmed: the payload built when its type is wanted,
/// otherwise only checked to be JSON.
pub(super) fn skim(line: &str, wanted: &[&str]) -> Option<Skimmed> {
    let (seq, time, kind, text) = envelope(line)?;
    if !wanted.contains(&kind) {
        serde_json::from_str::<IgnoredAny>(text).ok()?;
        return Some(Skimmed { seq, event: None });
    }
    // The wanted types are extensions (a catalog's): their text is kept as
    // it is, with no built-in type to try first.
    let payload = if EventPayload::is_builtin_kind(kind) {
        payload(kind, text, &mut RecentIds::default())?
    } else {
        EventPayload::Extension {
            kind: kind.to_owned(),
            payload: serde_json::from_str(text).ok()?,
        }
    };
    let event = SessionEvent { seq, time, payload };
    Some(Skimmed {
        seq,
        event: Some(event),
    })
}

/// `value`, when all that is left of its payload's text, `rest`, is the
/// closing `}`.
fn closed<T>(rest: &str, value: T) -> Option<T> {
    (rest == "}").then_some(value)
}

pub(super) fn turn_start(text: &str, _: &mut RecentIds) -> Option<TurnStart> {
    let (turn, rest) = number(text.strip_prefix(r#"{"turn":"#)?)?;
    closed(rest, TurnStart { turn })
}

pub(super) fn step_start(text: &str, _: &mut RecentIds) -> Option<StepStart> {
    let (turn, rest) = number(text.strip_prefix(r#"{"turn":"#)?)?;
    let (step, rest) = number(rest.strip_prefix(r#","step":"#)?)?;
    closed(rest, StepStart { turn, step })
}

/// A turn's end without a diagnostic.
pub(super) fn turn_end(text: &str, _: &mut RecentIds) -> Option<TurnEnd> {
    let (turn, rest) = number(text.strip_prefix(r#"{"turn":"#)?)?;
    let (reason, rest) = string(rest.strip_prefix(r#","stop_reason":""#)?)?;
    let de = serde::de::value::BorrowedStrDeserializer::<serde_json::Error>::new(reason);
    let stop_reason = StopReason::deserialize(de).ok()?;
    closed(
        rest,
        TurnEnd {
            turn,
            stop_reason,
            diagnostic: None,
        },
    )
}

/// Usage without the optional counts.
pub(super) fn usage(text: &str, _: &mut RecentIds) -> Option<Usage> {
    let (input_tokens, rest) = number(text.strip_prefix(r#"{"input_tokens":"#)?)?;
    let (output_tokens, rest) = number(rest.strip_prefix(r#","output_tokens":"#)?)?;
    closed(
        rest,
        Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        },
    )
}

pub(super) fn assistant_message(text: &str, _: &mut RecentIds) -> Option<AssistantEntry> {
    let (content, rest) = written_content(text.strip_prefix(r#"{"content":"#)?)?;
    closed(rest, AssistantEntry { content })
}

pub(super) fn user_message(text: &str, recent: &mut RecentIds) -> Option<UserEntry> {
    let (message, rest) = written_message(text.strip_prefix(r#"{"message":"#)?, recent)?;
    closed(rest, UserEntry { message })
}

pub(super) fn inbox_accepted(text: &str, recent: &mut RecentIds) -> Option<InboxAccepted> {
    let (message, rest) = written_message(text.strip_prefix(r#"{"message":"#)?, recent)?;
    let rest = rest.strip_prefix(r#","target":""#)?;
    let (target, rest) = if let Some(rest) = rest.strip_prefix(r#"next-turn""#) {
        (InboxTarget::NextTurn, rest)
    } else {
        (InboxTarget::NextStep, rest.strip_prefix(r#"next-step""#)?)
    };
    let wake = match rest {
        r#","wake":true}"# => true,
        r#","wake":false}"# => false,
        _ => return None,
    };
    Some(InboxAccepted {
        message,
        target,
        wake,
    })
}

/// Inbox ids without escapes (claimed or discarded).
pub(super) fn inbox_ids(text: &str, recent: &mut RecentIds) -> Option<InboxIds> {
    let mut rest = text.strip_prefix(r#"{"message_ids":["#)?;
    let mut message_ids = Vec::new();
    if let Some(after) = rest.strip_prefix(']') {
        rest = after;
    } else {
        loop {
            let (id, after) = string(rest.strip_prefix('"')?)?;
            message_ids.push(recent.message(id));
            if let Some(after) = after.strip_prefix(',') {
                rest = after;
            } else {
                rest = after.strip_prefix(']')?;
                break;
            }
        }
    }
    closed(rest, InboxIds { message_ids })
}

pub(super) fn tool_result(text: &str, recent: &mut RecentIds) -> Option<ToolResultEntry> {
    let (call_id, rest) = string(text.strip_prefix(r#"{"call_id":""#)?)?;
    let (name, rest) = string(rest.strip_prefix(r#","name":""#)?)?;
    let (content, rest) = written_content(rest.strip_prefix(r#","content":"#)?)?;
    let is_error = match rest {
        "}" => false,
        r#","is_error":true}"# => true,
        _ => return None,
    };
    Some(ToolResultEntry {
        call_id: recent.call(call_id),
        name: name.to_owned(),
        content,
        is_error,
    })
}

pub(super) fn tool_call(text: &str, recent: &mut RecentIds) -> Option<ToolCall> {
    let (call_id, rest) = string(text.strip_prefix(r#"{"call_id":""#)?)?;
    let (name, rest) = string(rest.strip_prefix(r#","name":""#)?)?;
    // The input is the rest of the object: serde checks it as it would
    // inside it, and refuses anything after it. It is kept as text, never
    // parsed into a value tree.
    let input = rest.strip_prefix(r#","input":"#)?.strip_suffix('}')?;
    Some(ToolCall {
        call_id: recent.call(call_id),
        name: name.to_owned(),
        input: ToolInput::from_json(input).ok()?,
    })
}

/// Content blocks as written, text only (`[{"type":"text","text":".."},..]`),
/// and the text after the closing `]`.
fn written_content(text: &str) -> Option<(Vec<ContentBlock>, &str)> {
    let mut rest = text.strip_prefix('[')?;
    let mut content = Vec::with_capacity(1);
    if let Some(after) = rest.strip_prefix(']') {
        return Some((content, after));
    }
    loop {
        let (block, after) = escaped_string(rest.strip_prefix(r#"{"type":"text","text":"#)?)?;
        content.push(ContentBlock::text(block));
        let after = after.strip_prefix('}')?;
        if let Some(after) = after.strip_prefix(',') {
            rest = after;
        } else {
            return Some((content, after.strip_prefix(']')?));
        }
    }
}

/// A JSON string at the start of `text` (its opening quote included),
/// escapes and all, and the text after it: decoded by hand
/// ([`unescaped`]) into a string allocated once. A surrogate escape is left
/// to serde, which reads the string's slice alone to the same text it reads
/// in place (a slice it refuses, such as a lone surrogate, is `None`).
fn escaped_string(text: &str) -> Option<(String, &str)> {
    let body = text.strip_prefix('"')?;
    if let Some(decoded) = unescaped(body) {
        return Some(decoded);
    }
    let end = closing_quote(body)?;
    // Both ends are ASCII quotes, so character boundaries.
    let quoted = text.get(..end + 2)?;
    let rest = text.get(end + 2..)?;
    Some((serde_json::from_str(quoted).ok()?, rest))
}

/// A user message as written with the user as its source
/// (`{"id":"..","content":[..],"source":{"kind":"user"}}`), and the text
/// after it.
fn written_message<'t>(text: &'t str, recent: &mut RecentIds) -> Option<(UserMessage, &'t str)> {
    let (id, rest) = string(text.strip_prefix(r#"{"id":""#)?)?;
    let (content, rest) = written_content(rest.strip_prefix(r#","content":"#)?)?;
    let rest = rest.strip_prefix(r#","source":{"kind":"user"}}"#)?;
    let message = UserMessage {
        id: recent.message(id),
        content,
        source: MessageSource::User,
    };
    Some((message, rest))
}

/// See [`super::flat_strings`].
pub(super) fn flat_strings<'t, const N: usize>(
    text: &'t str,
    keys: [&str; N],
) -> Option<[Option<&'t str>; N]> {
    let mut rest = text.strip_prefix('{')?;
    let mut fields: [Option<&str>; N] = [None; N];
    loop {
        // A key is matched in place, never scanned on its own; any other
        // key (unknown, escaped) is serde's to read.
        let after = rest.strip_prefix('"')?;
        let (slot, after) = keys.iter().enumerate().find_map(|(slot, key)| {
            Some((slot, after.strip_prefix(key)?.strip_prefix(r#"":""#)?))
        })?;
        let (value, after) = string(after)?;
        // A repeated key is serde's to refuse.
        if fields[slot].replace(value).is_some() {
            return None;
        }
        if after == "}" {
            return Some(fields);
        }
        rest = after.strip_prefix(',')?;
    }
}
