//! The durable session vocabulary: the header that opens every log and the
//! events that follow it. A log is the single source of truth for an agent;
//! every other view (the transcript, the pending inbox, a catalog) is a fold
//! over these events. The JSON shape here is a contract with every later
//! release: change it only by adding optional fields or new event types.
//! How a line becomes these values and back is [`crate::codec`]'s.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::content::ContentBlock;
use crate::id::{CallId, MessageId, SessionId};
use crate::json_text::JsonText;
use crate::message::{InboxTarget, ToolCall, Usage, UserMessage};
use crate::options::Composition;
use crate::stop::StopReason;

/// The version of the durable format this crate writes, and the newest it
/// reads. It counts breaking changes only: a change that an older reader can
/// safely ignore (an optional field, a new event type) keeps the number, so
/// a log whose header names a greater `format` is one this build must not
/// read; stores refuse it with [`crate::StoreError::UnsupportedFormat`],
/// naming both versions.
pub const FORMAT_VERSION: u32 = 1;

/// The first line of every session log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionHeader {
    /// Durable format version ([`FORMAT_VERSION`]).
    pub format: u32,
    /// The session's identity.
    pub id: SessionId,
    /// The session that created this one, for a child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<SessionId>,
    /// The project this session belongs to (a child keeps its parent's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Delegation depth: 0 for a root, parent + 1 for a child.
    #[serde(default)]
    pub delegation_depth: u32,
    /// The working directory the session started in.
    pub cwd: PathBuf,
    /// How many events at the start of the log are a seed copied from another
    /// log (a fork's inherited prefix) rather than this session's own.
    #[serde(default)]
    pub seed_len: u64,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_at: u64,
    /// The composition the agent runs with, restored on resume.
    #[serde(default)]
    pub composition: Composition,
    /// Open metadata for other crates; unknown keys are kept.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extensions: serde_json::Map<String, Value>,
}

impl SessionHeader {
    /// A root-session header with the current time.
    pub fn new(id: SessionId, cwd: impl Into<PathBuf>) -> Self {
        Self {
            format: FORMAT_VERSION,
            id,
            parent_session: None,
            origin: None,
            delegation_depth: 0,
            cwd: cwd.into(),
            seed_len: 0,
            created_at: now_millis(),
            composition: Composition::default(),
            extensions: serde_json::Map::new(),
        }
    }
}

/// Milliseconds since the Unix epoch, by the system clock.
pub fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// One entry of a session log: a contiguous sequence number from 0, a time,
/// and a typed payload. On disk: `{"seq":..,"time":..,"type":..,"payload":{..}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionEvent {
    /// Position in the log; the first event is 0 and there are no gaps.
    pub seq: u64,
    /// When it was appended, milliseconds since the Unix epoch.
    pub time: u64,
    /// What happened.
    pub payload: EventPayload,
}

/// Input opened a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnStart {
    /// Turn number within the session, from 0.
    pub turn: u64,
}

/// A turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnEnd {
    /// The turn that ended.
    pub turn: u64,
    /// Why.
    pub stop_reason: StopReason,
    /// Facts about a non-completed end (a model error's kind, say); never
    /// tool inputs, file contents or credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<String>,
}

/// A step (one model request and the tools it called) began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepStart {
    /// The turn it belongs to.
    pub turn: u64,
    /// Step number within the turn, from 0.
    pub step: u64,
}

/// A message was accepted into the inbox. Written before acceptance is
/// acknowledged to the sender.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxAccepted {
    /// The message.
    pub message: UserMessage,
    /// Which list it joined.
    pub target: InboxTarget,
    /// Whether it may wake the agent.
    pub wake: bool,
}

/// Messages left the inbox: claimed by a turn, or discarded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxIds {
    /// The messages, in order.
    pub message_ids: Vec<MessageId>,
}

/// A model-visible user-role message entered the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserEntry {
    /// The message as claimed from the inbox.
    pub message: UserMessage,
}

/// The model's text for one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssistantEntry {
    /// What it said (may be empty when it only called tools).
    pub content: Vec<ContentBlock>,
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResultEntry {
    /// The call this answers.
    pub call_id: CallId,
    /// The tool's name.
    pub name: String,
    /// What the model is shown.
    pub content: Vec<ContentBlock>,
    /// Whether it reports a failure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

/// What a session event records. Open: [`EventPayload::Extension`] carries
/// event types defined by other crates (a subagent catalog entry, a team
/// message), kept verbatim.
#[derive(Debug, Clone, PartialEq)]
pub enum EventPayload {
    /// `turn/start`
    TurnStart(TurnStart),
    /// `turn/end`
    TurnEnd(TurnEnd),
    /// `step/start`
    StepStart(StepStart),
    /// `inbox/accepted`
    InboxAccepted(InboxAccepted),
    /// `inbox/claimed`
    InboxClaimed(InboxIds),
    /// `inbox/discarded`
    InboxDiscarded(InboxIds),
    /// `user/message`
    UserMessage(UserEntry),
    /// `assistant/message`
    AssistantMessage(AssistantEntry),
    /// `tool/call`
    ToolCall(ToolCall),
    /// `tool/result`
    ToolResult(ToolResultEntry),
    /// `usage`
    Usage(Usage),
    /// Any other type, defined by another crate.
    Extension {
        /// The event type, `namespace/name` by convention.
        kind: String,
        /// Its payload, as JSON text.
        payload: ExtensionPayload,
    },
}

/// The payload of an extension event, kept as the JSON text it was written
/// as. Reading a log never builds a value tree for a payload: the crate that
/// owns the event type parses it straight into its own type with
/// [`ExtensionPayload::parse`], and everyone else passes it through untouched.
/// Two payloads are equal when their texts are. The text is on one line (a
/// log holds one event per line): text across lines is kept without the
/// whitespace between its tokens.
///
/// It serialises as its JSON text through `serde_json`; other serde
/// formats see `serde_json`'s raw-value marker, as they do for
/// [`RawValue`](serde_json::value::RawValue): give them [`ExtensionPayload::to_value`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExtensionPayload(JsonText);

impl ExtensionPayload {
    /// Serialise `value` as a payload.
    ///
    /// # Errors
    /// `value`'s `Serialize` implementation failed (a map with non-string
    /// keys, say).
    pub fn new<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Self> {
        JsonText::new(value).map(Self)
    }

    /// A payload of text already kept as JSON text (the codec's writer).
    pub(crate) fn from_text(text: JsonText) -> Self {
        Self(text)
    }

    /// The payload's JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// Parse the payload into `T`.
    ///
    /// # Errors
    /// The text is not a `T`.
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> serde_json::Result<T> {
        self.0.parse()
    }

    /// The payload as a JSON value tree ([`Value::Null`] for text no value
    /// tree holds: a number out of `f64`'s range, or nesting deeper than
    /// 128 levels).
    pub fn to_value(&self) -> Value {
        self.parse().unwrap_or(Value::Null)
    }
}

impl From<Value> for ExtensionPayload {
    fn from(value: Value) -> Self {
        Self::from(&value)
    }
}

impl From<&Value> for ExtensionPayload {
    fn from(value: &Value) -> Self {
        Self(JsonText::from_value(value))
    }
}

impl std::fmt::Debug for ExtensionPayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl EventPayload {
    /// The `type` tag written to the log.
    pub fn kind(&self) -> &str {
        crate::codec::kind_of(self)
    }

    /// Whether `kind` names one of the types this crate defines (an
    /// extension must not reuse them).
    pub fn is_builtin_kind(kind: &str) -> bool {
        crate::codec::is_builtin(kind)
    }
}

impl SessionEvent {
    /// Whether this event closes a turn.
    pub fn is_turn_end(&self) -> bool {
        matches!(self.payload, EventPayload::TurnEnd(_))
    }
}

/// The balanced completed-turn prefix of a log: every event up to and
/// including the last `turn/end`, or nothing when no turn has completed. An
/// in-flight turn is excluded, so the prefix replays cleanly as a seed.
pub fn completed_turn_prefix(events: &[SessionEvent]) -> &[SessionEvent] {
    match events.iter().rposition(SessionEvent::is_turn_end) {
        Some(last) => &events[..=last],
        None => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_stops_at_the_last_turn_end() {
        let at = |seq, payload| SessionEvent {
            seq,
            time: 0,
            payload,
        };
        let end = |seq| {
            let end = TurnEnd {
                turn: 0,
                stop_reason: StopReason::COMPLETED,
                diagnostic: None,
            };
            at(seq, EventPayload::TurnEnd(end))
        };
        let start = |seq| at(seq, EventPayload::TurnStart(TurnStart { turn: 0 }));
        let log = vec![start(0), end(1), start(2), end(3), start(4)];
        assert_eq!(completed_turn_prefix(&log).len(), 4);
        assert!(completed_turn_prefix(&log[..1]).is_empty());
    }
}
