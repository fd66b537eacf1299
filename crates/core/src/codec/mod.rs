//! The log codec: the one place where a session log's lines become values
//! (an event, a header, a skimmed event, a catalog entry's fields) and
//! events become lines. Every reader in the workspace goes through it.
//!
//! Each read has two paths that accept exactly the same lines and give the
//! same values:
//! - the general path, serde over the line (`general.rs`): any key order,
//!   whitespace and unknown keys; a repeated key is refused;
//! - the fast path (`fast.rs`, `header.rs`): a line exactly as this crate
//!   writes it (no whitespace, keys in their written order, numbers in
//!   their shortest form, strings mostly without escapes) read by hand. It
//!   answers `None` for anything else, and the general path then reads or
//!   refuses the line. It never decides that a line is bad.
//!
//! Small payloads a caller writes once per child (a usage record, an
//! activation record) have a hand writer too (`object.rs`,
//! [`ObjectWriter`]), which writes what serde writes for the same struct.
//!
//! The built-in event kinds are one table (`event_kinds!` below). It
//! generates [`EventPayload::kind`]'s and [`EventPayload::is_builtin_kind`]'s
//! answers, the
//! fast path's dispatch, the general path's payload seed and the writer; an
//! [`EventPayload`] variant missing from it does not compile. The hand-read
//! pieces (`written.rs`) are private. This module must never let a fast
//! path accept a line the general path refuses, nor read a line to another
//! value.

mod fast;
mod general;
mod header;
mod object;
mod written;

use serde::de::{DeserializeSeed, Error as _};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::id::{CallId, MessageId, SessionId};
use crate::message::ToolCall;
use crate::message::Usage;
use crate::session::{
    AssistantEntry, EventPayload, InboxAccepted, InboxIds, SessionEvent, SessionHeader, StepStart,
    ToolResultEntry, TurnEnd, TurnStart, UserEntry,
};

pub(crate) use general::BorrowedStr;
pub use object::ObjectWriter;
pub(crate) use written::compact;

use general::{Build, LineVisitor, PayloadSeed};

/// The built-in event kinds, written once: variant, payload type, the
/// `type` tag on disk, and the fast reader of its written payload.
macro_rules! event_kinds {
    ($($variant:ident($payload:ty) = $kind:literal => $fast:path,)*) => {
        /// See [`EventPayload::kind`].
        pub(crate) fn kind_of(payload: &EventPayload) -> &str {
            match payload {
                $(EventPayload::$variant(_) => $kind,)*
                EventPayload::Extension { kind, .. } => kind,
            }
        }

        /// See [`EventPayload::is_builtin_kind`].
        pub(crate) fn is_builtin(kind: &str) -> bool {
            matches!(kind, $($kind)|*)
        }

        /// The fast path's dispatch: the payload of type `kind` read by
        /// hand from its written form, or `None`.
        fn written_payload(
            kind: &str,
            payload: &str,
            recent: &mut RecentIds,
        ) -> Option<EventPayload> {
            match kind {
                $($kind => $fast(payload, recent).map(EventPayload::$variant),)*
                _ => None,
            }
        }

        impl<'de> DeserializeSeed<'de> for PayloadSeed<'_> {
            type Value = EventPayload;

            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<EventPayload, D::Error> {
                Ok(match self.0 {
                    $($kind => EventPayload::$variant(<$payload>::deserialize(d)?),)*
                    other => EventPayload::Extension {
                        kind: other.to_owned(),
                        payload: Deserialize::deserialize(d)?,
                    },
                })
            }
        }

        /// The `payload` field of an event's line.
        fn serialize_payload<S: SerializeStruct>(
            s: &mut S,
            payload: &EventPayload,
        ) -> Result<(), S::Error> {
            match payload {
                $(EventPayload::$variant(p) => s.serialize_field("payload", p),)*
                EventPayload::Extension { payload, .. } => s.serialize_field("payload", payload),
            }
        }
    };
}

event_kinds! {
    TurnStart(TurnStart) = "turn/start" => fast::turn_start,
    TurnEnd(TurnEnd) = "turn/end" => fast::turn_end,
    StepStart(StepStart) = "step/start" => fast::step_start,
    InboxAccepted(InboxAccepted) = "inbox/accepted" => fast::inbox_accepted,
    InboxClaimed(InboxIds) = "inbox/claimed" => fast::inbox_ids,
    InboxDiscarded(InboxIds) = "inbox/discarded" => fast::inbox_ids,
    UserMessage(UserEntry) = "user/message" => fast::user_message,
    AssistantMessage(AssistantEntry) = "assistant/message" => fast::assistant_message,
    ToolCall(ToolCall) = "tool/call" => fast::tool_call,
    ToolResult(ToolResultEntry) = "tool/result" => fast::tool_result,
    Usage(Usage) = "usage" => fast::usage,
}

/// Reads a log's lines into events one after another, as
/// [`SessionEvent::from_json_line`] does, and lets an event share the ids it
/// repeats from the events just before it: an inbox message's id is named
/// by its `inbox/accepted`, `inbox/claimed` and `user/message` events, a
/// tool call's id by its call and its result. A long log read back through
/// one reader holds each such id once (one allocation where there were
/// three), and its events are equal to those read line by line.
#[derive(Debug, Default)]
pub struct LineReader {
    recent: RecentIds,
}

impl LineReader {
    /// A reader that has read nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parse the next line.
    ///
    /// # Errors
    /// The line is not a well-formed event.
    pub fn read(&mut self, line: &str) -> serde_json::Result<SessionEvent> {
        match fast::event(line, &mut self.recent) {
            Some(event) => Ok(event),
            None => general::event(line),
        }
    }
}

/// What [`skim_line`] read of a line.
#[derive(Debug, Clone, PartialEq)]
pub struct Skimmed {
    /// The line's seq.
    pub seq: u64,
    /// The event, when its type is one of those wanted.
    pub event: Option<SessionEvent>,
}

/// Read an event line's envelope, building its payload only when its type
/// is in `wanted`. It accepts the lines [`SessionEvent::from_json_line`]
/// accepts. It also accepts a line whose payload is JSON but not its type's
/// shape when that type is not wanted: such a payload is checked to be JSON
/// and never built. That is the only difference.
///
/// # Errors
/// The line is not a well-formed event envelope, or a wanted payload is
/// not its type's.
pub fn skim_line(line: &str, wanted: &[&str]) -> serde_json::Result<Skimmed> {
    if let Some(skimmed) = fast::skim(line, wanted) {
        return Ok(skimmed);
    }
    general::skim(line, wanted)
}

/// Read a session header line (with or without its `\n`). A line exactly
/// as written that names `id` is read by hand, sharing `known` (an id
/// already validated, a sibling's parent say) when it names it as its
/// parent; any other line (another id, a newer format, another form, or no
/// `id` given) goes through serde. The caller checks the id and format it
/// names.
///
/// # Errors
/// The line is not a session header.
pub fn read_header(
    line: &[u8],
    id: Option<&SessionId>,
    known: Option<&SessionId>,
) -> serde_json::Result<SessionHeader> {
    if let Some(header) = id.and_then(|id| {
        let text = std::str::from_utf8(line).ok()?;
        header::written_header(id, text, known)
    }) {
        return Ok(header);
    }
    serde_json::from_slice(line)
}

/// The string fields `keys` of a flat JSON object in its written form
/// (`{"key":"value",..}`: only the fields of `keys`, each at most once, in
/// any order, string values without escapes, no whitespace), each `None`
/// when absent; `None` for any other text, which serde must then read or
/// refuse. A type whose payload is such an object (a catalog entry) reads
/// its written form through this.
pub fn flat_strings<'t, const N: usize>(
    text: &'t str,
    keys: [&str; N],
) -> Option<[Option<&'t str>; N]> {
    fast::flat_strings(text, keys)
}

impl SessionEvent {
    /// Parse one log line. Faster than going through [`serde_json::Value`]:
    /// the payload is parsed once, straight into its type. It reads a line
    /// exactly as `serde_json::from_str::<SessionEvent>` does.
    ///
    /// # Errors
    /// The line is not a well-formed event.
    pub fn from_json_line(line: &str) -> serde_json::Result<Self> {
        LineReader::new().read(line)
    }

    /// Serialise as one log line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        // Serialising plain data into a String cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl Serialize for SessionEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("SessionEvent", 4)?;
        s.serialize_field("seq", &self.seq)?;
        s.serialize_field("time", &self.time)?;
        s.serialize_field("type", self.payload.kind())?;
        serialize_payload(&mut s, &self.payload)?;
        s.end()
    }
}

/// The general path of [`SessionEvent::from_json_line`]: the same visitor,
/// so both read every line alike.
impl<'de> Deserialize<'de> for SessionEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let line = deserializer.deserialize_map(LineVisitor(Build::All))?;
        let payload = line
            .payload
            .ok_or_else(|| D::Error::custom("a payload was not built"))?;
        Ok(Self {
            seq: line.seq,
            time: line.time,
            payload,
        })
    }
}

/// The last message id and call id a [`LineReader`] read, for the next
/// event naming the same one to share.
#[derive(Debug, Default)]
struct RecentIds {
    message: Option<MessageId>,
    call: Option<CallId>,
}

impl RecentIds {
    /// The message id `id`, shared with the last one read if it is the same.
    fn message(&mut self, id: &str) -> MessageId {
        shared(&mut self.message, id, MessageId::as_str, |id| {
            MessageId::new(id)
        })
    }

    /// The call id `id`, shared with the last one read if it is the same.
    fn call(&mut self, id: &str) -> CallId {
        shared(&mut self.call, id, CallId::as_str, |id| CallId::new(id))
    }
}

/// The id in `last` if its text is `id`; otherwise a new one, kept there.
fn shared<I: Clone>(
    last: &mut Option<I>,
    id: &str,
    text: impl Fn(&I) -> &str,
    make: impl FnOnce(&str) -> I,
) -> I {
    match last {
        Some(recent) if text(recent) == id => recent.clone(),
        _ => last.insert(make(id)).clone(),
    }
}

#[cfg(test)]
mod tests;
