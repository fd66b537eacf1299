//! The durable session vocabulary: the header that opens every log and the
//! events that follow it. A log is the single source of truth for an agent;
//! every other view (the transcript, the pending inbox, a catalog) is a fold
//! over these events. The JSON shape here is a contract with every later
//! release: change it only by adding optional fields or new event types.

use std::borrow::Cow;
use std::path::PathBuf;

use serde::de::Error as _;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::content::ContentBlock;
use crate::id::{CallId, MessageId, SessionId};
use crate::json_text::JsonText;
use crate::message::{InboxTarget, ToolCall, ToolInput, Usage, UserMessage};
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
/// [`RawValue`]: give them [`ExtensionPayload::to_value`].
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
        match self {
            Self::TurnStart(_) => "turn/start",
            Self::TurnEnd(_) => "turn/end",
            Self::StepStart(_) => "step/start",
            Self::InboxAccepted(_) => "inbox/accepted",
            Self::InboxClaimed(_) => "inbox/claimed",
            Self::InboxDiscarded(_) => "inbox/discarded",
            Self::UserMessage(_) => "user/message",
            Self::AssistantMessage(_) => "assistant/message",
            Self::ToolCall(_) => "tool/call",
            Self::ToolResult(_) => "tool/result",
            Self::Usage(_) => "usage",
            Self::Extension { kind, .. } => kind,
        }
    }

    /// Whether `kind` names one of the types this crate defines (an
    /// extension must not reuse them).
    pub fn is_builtin_kind(kind: &str) -> bool {
        matches!(
            kind,
            "turn/start"
                | "turn/end"
                | "step/start"
                | "inbox/accepted"
                | "inbox/claimed"
                | "inbox/discarded"
                | "user/message"
                | "assistant/message"
                | "tool/call"
                | "tool/result"
                | "usage"
        )
    }

    /// The commonest payloads read by hand, when `payload` is exactly as
    /// this crate writes it: a turn's or step's start or end (without a
    /// diagnostic), usage without the optional counts, inbox ids, and
    /// assistant, user and accepted messages of text blocks (a user
    /// message from the user), tool results, and tool calls (whose input
    /// serde checks and keeps as text). Ids, names and kinds must be free
    /// of escapes; a text's escapes are decoded by hand
    /// ([`escaped_string`]). `None` for anything else (another form,
    /// another type, another source), which serde then reads or refuses;
    /// a string with neither an escape nor a control character is the text
    /// serde reads, so both give the same payload. Replaying a log spent
    /// most of its time in serde's visitors for these small objects.
    fn from_written(kind: &str, payload: &str, recent: &mut RecentIds) -> Option<Self> {
        use crate::written::{number, string};
        match kind {
            "step/start" => {
                let (turn, rest) = number(payload.strip_prefix(r#"{"turn":"#)?)?;
                let (step, rest) = number(rest.strip_prefix(r#","step":"#)?)?;
                (rest == "}").then_some(Self::StepStart(StepStart { turn, step }))
            }
            "turn/start" => {
                let (turn, rest) = number(payload.strip_prefix(r#"{"turn":"#)?)?;
                (rest == "}").then_some(Self::TurnStart(TurnStart { turn }))
            }
            "turn/end" => {
                let (turn, rest) = number(payload.strip_prefix(r#"{"turn":"#)?)?;
                let (reason, rest) = string(rest.strip_prefix(r#","stop_reason":""#)?)?;
                let de =
                    serde::de::value::BorrowedStrDeserializer::<serde_json::Error>::new(reason);
                let stop_reason = StopReason::deserialize(de).ok()?;
                (rest == "}").then_some(Self::TurnEnd(TurnEnd {
                    turn,
                    stop_reason,
                    diagnostic: None,
                }))
            }
            "usage" => {
                let (input_tokens, rest) = number(payload.strip_prefix(r#"{"input_tokens":"#)?)?;
                let (output_tokens, rest) = number(rest.strip_prefix(r#","output_tokens":"#)?)?;
                (rest == "}").then_some(Self::Usage(Usage {
                    input_tokens,
                    output_tokens,
                    ..Usage::default()
                }))
            }
            "assistant/message" => {
                let (content, rest) = written_content(payload.strip_prefix(r#"{"content":"#)?)?;
                (rest == "}").then_some(Self::AssistantMessage(AssistantEntry { content }))
            }
            "user/message" => {
                let (message, rest) =
                    written_message(payload.strip_prefix(r#"{"message":"#)?, recent)?;
                (rest == "}").then_some(Self::UserMessage(UserEntry { message }))
            }
            "inbox/accepted" => {
                let (message, rest) =
                    written_message(payload.strip_prefix(r#"{"message":"#)?, recent)?;
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
                Some(Self::InboxAccepted(InboxAccepted {
                    message,
                    target,
                    wake,
                }))
            }
            "inbox/claimed" | "inbox/discarded" => {
                let mut rest = payload.strip_prefix(r#"{"message_ids":["#)?;
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
                if rest != "}" {
                    return None;
                }
                let ids = InboxIds { message_ids };
                Some(if kind == "inbox/claimed" {
                    Self::InboxClaimed(ids)
                } else {
                    Self::InboxDiscarded(ids)
                })
            }
            "tool/result" => {
                let (call_id, rest) = string(payload.strip_prefix(r#"{"call_id":""#)?)?;
                let (name, rest) = string(rest.strip_prefix(r#","name":""#)?)?;
                let (content, rest) = written_content(rest.strip_prefix(r#","content":"#)?)?;
                let is_error = match rest {
                    "}" => false,
                    r#","is_error":true}"# => true,
                    _ => return None,
                };
                Some(Self::ToolResult(ToolResultEntry {
                    call_id: recent.call(call_id),
                    name: name.to_owned(),
                    content,
                    is_error,
                }))
            }
            "tool/call" => {
                let (call_id, rest) = string(payload.strip_prefix(r#"{"call_id":""#)?)?;
                let (name, rest) = string(rest.strip_prefix(r#","name":""#)?)?;
                // The input is the rest of the object: serde checks it as
                // it would inside it, and refuses anything after it. It is
                // kept as text, never parsed into a value tree.
                let input = rest.strip_prefix(r#","input":"#)?.strip_suffix('}')?;
                Some(Self::ToolCall(ToolCall {
                    call_id: recent.call(call_id),
                    name: name.to_owned(),
                    input: ToolInput::from_json(input).ok()?,
                }))
            }
            _ => None,
        }
    }

    fn from_raw(kind: &str, payload: &str) -> serde_json::Result<Self> {
        use serde_json::from_str as parse;
        Ok(match kind {
            "turn/start" => Self::TurnStart(parse(payload)?),
            "turn/end" => Self::TurnEnd(parse(payload)?),
            "step/start" => Self::StepStart(parse(payload)?),
            "inbox/accepted" => Self::InboxAccepted(parse(payload)?),
            "inbox/claimed" => Self::InboxClaimed(parse(payload)?),
            "inbox/discarded" => Self::InboxDiscarded(parse(payload)?),
            "user/message" => Self::UserMessage(parse(payload)?),
            "assistant/message" => Self::AssistantMessage(parse(payload)?),
            "tool/call" => Self::ToolCall(parse(payload)?),
            "tool/result" => Self::ToolResult(parse(payload)?),
            "usage" => Self::Usage(parse(payload)?),
            other => Self::Extension {
                kind: other.to_owned(),
                payload: parse(payload)?,
            },
        })
    }
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
        match SessionEvent::from_written_line(line, &mut self.recent) {
            Some(event) => Ok(event),
            None => SessionEvent::from_any_line(line),
        }
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

impl SessionEvent {
    /// Parse one log line. Faster than going through [`serde_json::Value`]:
    /// the payload is parsed once, straight into its type.
    ///
    /// # Errors
    /// The line is not a well-formed event.
    pub fn from_json_line(line: &str) -> serde_json::Result<Self> {
        LineReader::new().read(line)
    }

    /// The general path of [`from_json_line`](Self::from_json_line): any key
    /// order, whitespace and unknown keys.
    fn from_any_line(line: &str) -> serde_json::Result<Self> {
        let mut deserializer = serde_json::Deserializer::from_str(line);
        let event = serde::Deserializer::deserialize_map(&mut deserializer, LineVisitor)?;
        deserializer.end()?;
        Ok(event)
    }

    /// The fast path of [`from_json_line`](Self::from_json_line), for a
    /// line exactly as [`to_json_line`](Self::to_json_line) writes it:
    /// `{"seq":N,"time":N,"type":"..","payload":..}` with no whitespace, the
    /// numbers in their shortest form and the type without escapes. The
    /// envelope is read by hand and only the payload goes through serde.
    /// `None` for any other line (another key order, whitespace, a bad
    /// payload), which the general path then reads or refuses, so both
    /// accept exactly the same lines.
    fn from_written_line(line: &str, recent: &mut RecentIds) -> Option<Self> {
        let rest = line.strip_prefix(r#"{"seq":"#)?;
        let (seq, rest) = crate::written::number(rest)?;
        let rest = rest.strip_prefix(r#","time":"#)?;
        let (time, rest) = crate::written::number(rest)?;
        let rest = rest.strip_prefix(r#","type":""#)?;
        // The type is short: a plain loop beats a `memchr` call's set-up.
        let end = rest
            .bytes()
            .position(|byte| byte == b'"' || byte == b'\\' || byte < 0x20)?;
        let (kind, rest) = rest.split_at(end);
        let payload = rest.strip_prefix(r#"","payload":"#)?;
        let payload = payload.strip_suffix('}')?;
        let payload = match EventPayload::from_written(kind, payload, recent) {
            Some(payload) => payload,
            None => {
                let mut deserializer = serde_json::Deserializer::from_str(payload);
                let payload =
                    serde::de::DeserializeSeed::deserialize(PayloadSeed(kind), &mut deserializer)
                        .ok()?;
                deserializer.end().ok()?;
                payload
            }
        };
        Some(Self { seq, time, payload })
    }

    /// Serialise as one log line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        // Serialising plain data into a String cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Whether this event closes a turn.
    pub fn is_turn_end(&self) -> bool {
        matches!(self.payload, EventPayload::TurnEnd(_))
    }
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
/// ([`crate::written::unescaped`]) into a string allocated once. A
/// surrogate escape is left to serde, which reads the string's slice alone
/// to the same text it reads in place (a slice it refuses, such as a lone
/// surrogate, is `None`).
fn escaped_string(text: &str) -> Option<(String, &str)> {
    let body = text.strip_prefix('"')?;
    if let Some(decoded) = crate::written::unescaped(body) {
        return Some(decoded);
    }
    let end = crate::written::closing_quote(body)?;
    // Both ends are ASCII quotes, so character boundaries.
    let quoted = text.get(..end + 2)?;
    let rest = text.get(end + 2..)?;
    Some((serde_json::from_str(quoted).ok()?, rest))
}

/// A user message as written with the user as its source
/// (`{"id":"..","content":[..],"source":{"kind":"user"}}`), and the text
/// after it.
fn written_message<'t>(text: &'t str, recent: &mut RecentIds) -> Option<(UserMessage, &'t str)> {
    use crate::written::string;
    let (id, rest) = string(text.strip_prefix(r#"{"id":""#)?)?;
    let (content, rest) = written_content(rest.strip_prefix(r#","content":"#)?)?;
    let rest = rest.strip_prefix(r#","source":{"kind":"user"}}"#)?;
    let message = UserMessage {
        id: recent.message(id),
        content,
        source: crate::message::MessageSource::User,
    };
    Some((message, rest))
}

/// Parses a payload straight into the type its `type` tag names.
struct PayloadSeed<'k>(&'k str);

impl<'de> serde::de::DeserializeSeed<'de> for PayloadSeed<'_> {
    type Value = EventPayload;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<EventPayload, D::Error> {
        Ok(match self.0 {
            "turn/start" => EventPayload::TurnStart(Deserialize::deserialize(d)?),
            "turn/end" => EventPayload::TurnEnd(Deserialize::deserialize(d)?),
            "step/start" => EventPayload::StepStart(Deserialize::deserialize(d)?),
            "inbox/accepted" => EventPayload::InboxAccepted(Deserialize::deserialize(d)?),
            "inbox/claimed" => EventPayload::InboxClaimed(Deserialize::deserialize(d)?),
            "inbox/discarded" => EventPayload::InboxDiscarded(Deserialize::deserialize(d)?),
            "user/message" => EventPayload::UserMessage(Deserialize::deserialize(d)?),
            "assistant/message" => EventPayload::AssistantMessage(Deserialize::deserialize(d)?),
            "tool/call" => EventPayload::ToolCall(Deserialize::deserialize(d)?),
            "tool/result" => EventPayload::ToolResult(Deserialize::deserialize(d)?),
            "usage" => EventPayload::Usage(Deserialize::deserialize(d)?),
            other => EventPayload::Extension {
                kind: other.to_owned(),
                payload: Deserialize::deserialize(d)?,
            },
        })
    }
}

/// The fields of an event line.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum LineField {
    Seq,
    Time,
    #[serde(rename = "type")]
    Kind,
    Payload,
    #[serde(other)]
    Unknown,
}

/// One pass over an event line. Lines this crate writes put `type` before
/// `payload`, so the payload is parsed once, straight into its type; a line
/// with the keys in another order is still read, through a borrowed raw
/// payload.
struct LineVisitor;

impl<'de> serde::de::Visitor<'de> for LineVisitor {
    type Value = SessionEvent;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a session event object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<SessionEvent, A::Error> {
        let mut seq = None;
        let mut time = None;
        let mut kind: Option<Cow<'de, str>> = None;
        let mut payload = None;
        let mut early_payload: Option<&'de RawValue> = None;
        while let Some(field) = map.next_key::<LineField>()? {
            match field {
                LineField::Seq => seq = Some(map.next_value()?),
                LineField::Time => time = Some(map.next_value()?),
                LineField::Kind => kind = Some(map.next_value::<BorrowedStr<'de>>()?.0),
                LineField::Payload => match &kind {
                    Some(kind) => payload = Some(map.next_value_seed(PayloadSeed(kind))?),
                    None => early_payload = Some(map.next_value()?),
                },
                LineField::Unknown => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        let kind = kind.ok_or_else(|| A::Error::missing_field("type"))?;
        let payload = match (payload, early_payload) {
            (Some(payload), _) => payload,
            (None, Some(raw)) => {
                EventPayload::from_raw(&kind, raw.get()).map_err(A::Error::custom)?
            }
            (None, None) => return Err(A::Error::missing_field("payload")),
        };
        Ok(SessionEvent {
            seq: seq.ok_or_else(|| A::Error::missing_field("seq"))?,
            time: time.ok_or_else(|| A::Error::missing_field("time"))?,
            payload,
        })
    }
}

/// A string borrowed from the input when it has no escapes.
pub(crate) struct BorrowedStr<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for BorrowedStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = BorrowedStr<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

impl Serialize for SessionEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("SessionEvent", 4)?;
        s.serialize_field("seq", &self.seq)?;
        s.serialize_field("time", &self.time)?;
        s.serialize_field("type", self.payload.kind())?;
        match &self.payload {
            EventPayload::TurnStart(p) => s.serialize_field("payload", p)?,
            EventPayload::TurnEnd(p) => s.serialize_field("payload", p)?,
            EventPayload::StepStart(p) => s.serialize_field("payload", p)?,
            EventPayload::InboxAccepted(p) => s.serialize_field("payload", p)?,
            EventPayload::InboxClaimed(p) | EventPayload::InboxDiscarded(p) => {
                s.serialize_field("payload", p)?;
            }
            EventPayload::UserMessage(p) => s.serialize_field("payload", p)?,
            EventPayload::AssistantMessage(p) => s.serialize_field("payload", p)?,
            EventPayload::ToolCall(p) => s.serialize_field("payload", p)?,
            EventPayload::ToolResult(p) => s.serialize_field("payload", p)?,
            EventPayload::Usage(p) => s.serialize_field("payload", p)?,
            EventPayload::Extension { payload, .. } => s.serialize_field("payload", payload)?,
        }
        s.end()
    }
}

impl<'de> Deserialize<'de> for SessionEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Owned {
            seq: u64,
            time: u64,
            #[serde(rename = "type")]
            kind: String,
            payload: Value,
        }
        let raw = Owned::deserialize(deserializer)?;
        let payload = serde_json::to_string(&raw.payload).map_err(D::Error::custom)?;
        Ok(Self {
            seq: raw.seq,
            time: raw.time,
            payload: EventPayload::from_raw(&raw.kind, &payload).map_err(D::Error::custom)?,
        })
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
    use crate::message::MessageSource;

    fn event(seq: u64, payload: EventPayload) -> SessionEvent {
        SessionEvent {
            seq,
            time: 1_700_000_000_000 + seq,
            payload,
        }
    }

    #[test]
    fn both_parsers_agree_and_round_trip() {
        let events = [
            event(0, EventPayload::TurnStart(TurnStart { turn: 0 })),
            event(
                1,
                EventPayload::InboxAccepted(InboxAccepted {
                    message: UserMessage {
                        id: MessageId::new("m-1"),
                        content: vec![ContentBlock::text("hi")],
                        source: MessageSource::User,
                    },
                    target: InboxTarget::NextTurn,
                    wake: true,
                }),
            ),
            event(
                2,
                EventPayload::Extension {
                    kind: "subagent/child".into(),
                    payload: serde_json::json!({"name": "a"}).into(),
                },
            ),
        ];
        for ev in events {
            let line = ev.to_json_line();
            assert_eq!(SessionEvent::from_json_line(&line).unwrap(), ev);
            assert_eq!(serde_json::from_str::<SessionEvent>(&line).unwrap(), ev);
        }
    }

    #[test]
    fn lines_with_other_key_orders_and_unknown_keys_still_parse() {
        let line = r#"{"payload":{"turn":3},"extra":[1,2],"type":"turn/start","time":5,"seq":7}"#;
        let event = SessionEvent::from_json_line(line).unwrap();
        assert_eq!(event.seq, 7);
        assert_eq!(
            event.payload,
            EventPayload::TurnStart(TurnStart { turn: 3 })
        );
        let escaped = r#"{"seq":0,"time":0,"type":"x\/y","payload":null}"#;
        assert_eq!(
            SessionEvent::from_json_line(escaped)
                .unwrap()
                .payload
                .kind(),
            "x/y"
        );
        for bad in [
            r#"{"seq":0,"time":0,"payload":{}}"#,
            r#"{"seq":0,"time":0,"type":"turn/start"}"#,
            r#"{"seq":0,"time":0,"type":"turn/start","payload":{"turn":"x"}}"#,
            r#"{"seq":0,"time":0,"type":"usage","payload":{}} trailing"#,
        ] {
            assert!(SessionEvent::from_json_line(bad).is_err(), "{bad}");
        }
    }

    /// The hand-read envelope accepts exactly what the general path does,
    /// with the same result: written lines take it, anything unusual falls
    /// through to the general path, which reads or refuses it.
    #[test]
    fn the_fast_path_agrees_with_the_general_one() {
        let lines = [
            r#"{"seq":0,"time":0,"type":"turn/start","payload":{"turn":0}}"#,
            r#"{"seq":18446744073709551615,"time":1,"type":"usage","payload":{"input_tokens":1,"output_tokens":2}}"#,
            r#"{"seq":18446744073709551616,"time":1,"type":"turn/start","payload":{"turn":0}}"#,
            r#"{"seq":01,"time":1,"type":"turn/start","payload":{"turn":0}}"#,
            r#"{"seq":1.0,"time":1,"type":"turn/start","payload":{"turn":0}}"#,
            r#"{"seq":1e2,"time":1,"type":"turn/start","payload":{"turn":0}}"#,
            r#"{"seq":-1,"time":1,"type":"turn/start","payload":{"turn":0}}"#,
            r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":0} }"#,
            r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":0},"seq":2}"#,
            r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":0}} "#,
            r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":"x"}}"#,
            r#"{"seq":1,"time":1,"type":"turn\/start","payload":{"turn":0}}"#,
            "{\"seq\":1,\"time\":1,\"type\":\"a\tb\",\"payload\":{}}",
            r#"{"seq":1,"time":1,"type":"x/y","payload":{"a":[1,{"b":"}"}]}}"#,
            r#"{"seq":1,"time":1,"type":"x/y","payload":{"a":1}}}"#,
            r#"{"seq":1,"time":1,"type":"x/y","payload":}"#,
            r#"{"seq":1,"time":1,"type":"x/y","payload":{}"#,
            r#"{"seq": 1,"time":1,"type":"turn/start","payload":{"turn":0}}"#,
            // The payloads read by hand, and forms next to theirs.
            r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":18446744073709551615}}"#,
            r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":18446744073709551616}}"#,
            r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":-1}}"#,
            r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":1e400}}"#,
            r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":01}}"#,
            r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":1,"x":2}}"#,
            r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":1,"turn":2}}"#,
            r#"{"seq":1,"time":1,"type":"step/start","payload":{"turn":1,"step":2}}"#,
            r#"{"seq":1,"time":1,"type":"step/start","payload":{"step":2,"turn":1}}"#,
            r#"{"seq":1,"time":1,"type":"step/start","payload":{"turn":1}}"#,
            r#"{"seq":1,"time":1,"type":"step/start","payload":{"turn":1,"step":2.0}}"#,
            r#"{"seq":1,"time":1,"type":"usage","payload":{"input_tokens":4000,"output_tokens":120}}"#,
            r#"{"seq":1,"time":1,"type":"usage","payload":{"input_tokens":4,"output_tokens":1,"cached_input_tokens":3}}"#,
            r#"{"seq":1,"time":1,"type":"usage","payload":{"input_tokens":4,"output_tokens":1,"reasoning_tokens":0}}"#,
            r#"{"seq":1,"time":1,"type":"usage","payload":{"input_tokens":4,"output_tokens":0.1}}"#,
            r#"{"seq":1,"time":1,"type":"usage","payload":{"output_tokens":1,"input_tokens":4}}"#,
            r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"plain"}]}}"#,
            r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":""}]}}"#,
            "{\"seq\":1,\"time\":1,\"type\":\"assistant/message\",\"payload\":{\"content\":[{\"type\":\"text\",\"text\":\"h\u{e9}llo \u{2603} \u{1d11e}\"}]}}",
            r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a\"b\n\u00e9\ud834\udd1e"}]}}"#,
            r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"lone \ud800"}]}}"#,
            "{\"seq\":1,\"time\":1,\"type\":\"assistant/message\",\"payload\":{\"content\":[{\"type\":\"text\",\"text\":\"a\tb\"}]}}",
            "{\"seq\":1,\"time\":1,\"type\":\"assistant/message\",\"payload\":{\"content\":[{\"type\":\"text\",\"text\":\"a\u{7f}b\"}]}}",
            r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}"#,
            r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a","cache":true}]}}"#,
            r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a"}],"x":1}}"#,
            r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a"}]}"#,
            r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a}]}}"#,
            r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"image","text":"a"}]}}"#,
            r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[]}}"#,
            r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a"},]}}"#,
            r#"{"seq":1,"time":1,"type":"turn/end","payload":{"turn":3,"stop_reason":"completed"}}"#,
            r#"{"seq":1,"time":1,"type":"turn/end","payload":{"turn":3,"stop_reason":"a-new-reason"}}"#,
            r#"{"seq":1,"time":1,"type":"turn/end","payload":{"turn":3,"stop_reason":"aborted","diagnostic":"d"}}"#,
            r#"{"seq":1,"time":1,"type":"turn/end","payload":{"turn":3,"stop_reason":"x\u0041"}}"#,
            r#"{"seq":1,"time":1,"type":"turn/end","payload":{"turn":3,"stop_reason":7}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/claimed","payload":{"message_ids":[]}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/claimed","payload":{"message_ids":["m-1"]}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/discarded","payload":{"message_ids":["m-1","m-2",""]}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/claimed","payload":{"message_ids":["m-1",]}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/claimed","payload":{"message_ids":["m-1""m-2"]}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/claimed","payload":{"message_ids":["m-\u00e9"]}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/claimed","payload":{"message_ids":[1]}}"#,
            r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}}}"#,
            r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"},{"type":"text","text":"\u00e9"}],"source":{"kind":"user"}}}}"#,
            r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"id":"m-1","content":[],"source":{"kind":"user"}}}}"#,
            r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user","client_time_zone":"UTC"}}}}"#,
            r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"agent-message","form":"relay","sender_session_id":"s-1"}}}}"#,
            r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"x":1}}"#,
            r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"content":[{"type":"text","text":"hi"}],"id":"m-1","source":{"kind":"user"}}}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/accepted","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"target":"next-turn","wake":true}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/accepted","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"target":"next-step","wake":false}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/accepted","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"target":"later","wake":true}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/accepted","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"target":"next-turn","wake":1}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/accepted","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"target":"next-turn"}}"#,
            r#"{"seq":1,"time":1,"type":"inbox/accepted","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"target":"next-turn","wake":true,"wake":false}}"#,
            r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"fn a() {\n    b(\"x\\y\");\n}\n"}]}}"#,
            r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"\u00e9\ud834\udd1e\/\b\f\r\t"}],"is_error":true}}"#,
            r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"ends in a backslash \\"}]}}"#,
            r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"lone \ud800 surrogate"}]}}"#,
            r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"bad \x escape"}]}}"#,
            r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"cut \u"}]}}"#,
            r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"open \"}]}}"#,
            "{\"seq\":1,\"time\":1,\"type\":\"tool/result\",\"payload\":{\"call_id\":\"c-1\",\"name\":\"read\",\"content\":[{\"type\":\"text\",\"text\":\"raw\ttab \\n\"}]}}",
            r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[],"is_error":false}}"#,
            r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"image","media_type":"image/png","data":"AAAA"}]}}"#,
            r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[],"is_error":true,"x":1}}"#,
            r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-\u0031","name":"read","content":[]}}"#,
            r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{"path":"src/a.rs","offset":0,"limit":200}}}"#,
            r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{"big":18446744073709551616,"neg":-9223372036854775808,"f":0.1,"e":1e-7,"z":-0.0}}}"#,
            r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{"huge":1e400}}}"#,
            r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{"a":1,"a":2,"b":"\ud834\udd1e","c":"\ud800"}}}"#,
            r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{"a":1,"a":2,"b":"\u00e9"}}}"#,
            r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":[[[[[[[[[[[[[[[[{"deep":[null,true,false]}]]]]]]]]]]]]]]]]}}"#,
            r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":"text"}}"#,
            r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{} }}"#,
            r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{}},"x":1}"#,
            r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{},"x":1}}"#,
            r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{}}"#,
            r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read"}}"#,
        ];
        for line in lines {
            let fast = SessionEvent::from_written_line(line, &mut RecentIds::default());
            let general = SessionEvent::from_any_line(line).ok();
            if fast.is_some() {
                assert_eq!(fast, general, "{line}");
            }
            assert_eq!(SessionEvent::from_json_line(line).ok(), general, "{line}");
        }
        let written = event(3, EventPayload::TurnStart(TurnStart { turn: 1 })).to_json_line();
        assert!(SessionEvent::from_written_line(&written, &mut RecentIds::default()).is_some());
    }

    /// The payloads read by hand are read by hand as written (so the hand
    /// path is not dead), to what serde reads.
    #[test]
    fn the_written_payloads_are_read_by_hand() {
        let payloads = [
            EventPayload::TurnStart(TurnStart { turn: 7 }),
            EventPayload::StepStart(StepStart { turn: 7, step: 1 }),
            EventPayload::Usage(Usage {
                input_tokens: 4_000,
                output_tokens: 120,
                ..Usage::default()
            }),
            EventPayload::AssistantMessage(AssistantEntry {
                content: vec![ContentBlock::text(
                    "I will fix it: `parse` (\u{e9}, \u{2603}).",
                )],
            }),
            EventPayload::AssistantMessage(AssistantEntry { content: vec![] }),
            EventPayload::TurnEnd(TurnEnd {
                turn: 2,
                stop_reason: StopReason::COMPLETED,
                diagnostic: None,
            }),
            EventPayload::TurnEnd(TurnEnd {
                turn: 2,
                stop_reason: StopReason::new("made-up"),
                diagnostic: None,
            }),
            EventPayload::InboxClaimed(InboxIds {
                message_ids: vec![MessageId::new("m-1"), MessageId::new("m-2")],
            }),
            EventPayload::InboxDiscarded(InboxIds {
                message_ids: vec![],
            }),
            EventPayload::UserMessage(UserEntry {
                message: UserMessage {
                    id: MessageId::new("m-3"),
                    content: vec![ContentBlock::text("a"), ContentBlock::text("b")],
                    source: MessageSource::User,
                },
            }),
            EventPayload::ToolResult(ToolResultEntry {
                call_id: CallId::new("c-1"),
                name: "read_file".into(),
                content: vec![ContentBlock::text("fn a() {\n    \"\\\u{1}\u{e9}\"\n}")],
                is_error: false,
            }),
            EventPayload::ToolResult(ToolResultEntry {
                call_id: CallId::new("c-2"),
                name: "read_file".into(),
                content: vec![],
                is_error: true,
            }),
            EventPayload::ToolCall(ToolCall {
                call_id: CallId::new("c-3"),
                name: "read_file".into(),
                input:
                    serde_json::json!({"path": "src/list.rs", "offset": 0, "limit": 200, "f": 0.1})
                        .into(),
            }),
            EventPayload::InboxAccepted(InboxAccepted {
                message: UserMessage {
                    id: MessageId::new("m-4"),
                    content: vec![ContentBlock::text("fix the parser")],
                    source: MessageSource::User,
                },
                target: InboxTarget::NextStep,
                wake: false,
            }),
        ];
        for payload in payloads {
            let line = event(9, payload.clone()).to_json_line();
            let (_, text) = line.split_once(r#""payload":"#).unwrap();
            let text = text.strip_suffix('}').unwrap();
            assert_eq!(
                EventPayload::from_written(payload.kind(), text, &mut RecentIds::default()),
                Some(payload.clone()),
                "{line}"
            );
            assert_eq!(SessionEvent::from_any_line(&line).unwrap().payload, payload);
        }
    }

    #[test]
    fn prefix_stops_at_the_last_turn_end() {
        let end = |seq| {
            event(
                seq,
                EventPayload::TurnEnd(TurnEnd {
                    turn: 0,
                    stop_reason: StopReason::COMPLETED,
                    diagnostic: None,
                }),
            )
        };
        let start = |seq| event(seq, EventPayload::TurnStart(TurnStart { turn: 0 }));
        let log = vec![start(0), end(1), start(2), end(3), start(4)];
        assert_eq!(completed_turn_prefix(&log).len(), 4);
        assert!(completed_turn_prefix(&log[..1]).is_empty());
    }
}
