//! Messages: identified inbox input with the source that supplied it, the
//! role-based conversation a model sees, tool calls and usage. The
//! [`MessageSource`] set is open: kinds this crate does not define (a team
//! message, say) round-trip as [`MessageSource::Other`] with every field kept.
//!
//! Past 800 lines with its unit tests (about 240). The model-visible
//! `Transcript` (a persistent chunked vector) could stand in a file of its
//! own; it is here because it is built only from these message types.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::attachment::AttachmentRef;
use crate::codec::BorrowedStr;
use crate::content::ContentBlock;
use crate::id::{CallId, MessageId, SessionId};
use crate::json_text::JsonText;
use crate::stop::StopReason;

/// Who or what supplied an inbox message. Durable: it is written with the
/// message and shapes how a transcript attributes it.
#[derive(Debug, Clone, PartialEq)]
pub enum MessageSource {
    /// The user, or a trusted host acting for the user.
    User,
    /// The user through a client that said more about the message (a
    /// runtime `prompt`): the time zone it was written in, the attachments
    /// it carries. Written with kind `user`, so every reader that knows
    /// only [`MessageSource::User`] still attributes it to the user.
    UserPrompt(PromptProvenance),
    /// Content another agent chose to send (the `relay` form).
    AgentMessage {
        /// Session id of the agent whose tool call produced the message.
        sender_session_id: SessionId,
    },
    /// The runtime's own account of a child settling (the `notice` form);
    /// deliberately not an agent message: the child did not write it.
    SubagentSettled {
        /// One line saying how the child ended.
        summary: String,
        /// The exact stop reason; absent only on historical notices.
        stop_reason: Option<StopReason>,
        /// Session id of the child that settled.
        sender_session_id: SessionId,
    },
    /// A kind defined elsewhere; `fields` holds everything but `kind`.
    Other {
        /// The kind tag, for example `team-message`.
        kind: String,
        /// The remaining fields, kept verbatim.
        fields: Map<String, Value>,
    },
}

impl MessageSource {
    /// The `kind` tag as written to the log.
    pub fn kind(&self) -> &str {
        match self {
            Self::User | Self::UserPrompt(_) => "user",
            Self::AgentMessage { .. } => "agent-message",
            Self::SubagentSettled { .. } => "subagent-settled",
            Self::Other { kind, .. } => kind,
        }
    }

    /// One line saying who wrote a user-role message the user did not, for
    /// model clients whose wire format has no place for the source: a
    /// relayed agent message names its sender's session, another kind its
    /// tag. `None` for the user, and for a settlement notice, whose text
    /// already says which child ended and how.
    pub fn heading(&self) -> Option<String> {
        match self {
            Self::User | Self::UserPrompt(_) | Self::SubagentSettled { .. } => None,
            Self::AgentMessage { sender_session_id } => Some(format!(
                "[message from the agent of session {sender_session_id}]"
            )),
            Self::Other { kind, .. } => Some(format!("[{kind}]")),
        }
    }

    /// The session id of the agent or child this message is attributed to, if any.
    pub fn sender(&self) -> Option<&SessionId> {
        match self {
            Self::AgentMessage { sender_session_id } => Some(sender_session_id),
            Self::SubagentSettled {
                sender_session_id, ..
            } => Some(sender_session_id),
            Self::User | Self::UserPrompt(_) | Self::Other { .. } => None,
        }
    }
}

impl Serialize for MessageSource {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // A sorted map, not `serde_json::Map`: that one keeps insertion
        // order when a dependency turns on serde_json's `preserve_order`,
        // and the durable bytes must not depend on what else is linked.
        let mut map = std::collections::BTreeMap::<String, Value>::new();
        map.insert("kind".into(), Value::from(self.kind()));
        match self {
            Self::User => {}
            Self::UserPrompt(provenance) => {
                if let Some(zone) = &provenance.client_time_zone {
                    map.insert("client_time_zone".into(), zone.as_str().into());
                }
                if !provenance.attachments.is_empty() {
                    let attachments = provenance.attachments.iter().map(attachment_value);
                    map.insert("attachments".into(), Value::Array(attachments.collect()));
                }
            }
            Self::AgentMessage { sender_session_id } => {
                map.insert("form".into(), "relay".into());
                map.insert(
                    "sender_session_id".into(),
                    sender_session_id.as_str().into(),
                );
            }
            Self::SubagentSettled {
                summary,
                stop_reason,
                sender_session_id,
            } => {
                map.insert("form".into(), "notice".into());
                map.insert("summary".into(), summary.as_str().into());
                if let Some(reason) = stop_reason {
                    map.insert("stop_reason".into(), reason.as_str().into());
                }
                map.insert(
                    "sender_session_id".into(),
                    sender_session_id.as_str().into(),
                );
            }
            Self::Other { fields, .. } => {
                for (key, value) in fields {
                    if key != "kind" {
                        map.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        map.serialize(serializer)
    }
}

/// An attachment reference as the log holds it, keys inserted in sorted
/// order so the bytes are the same with serde_json's `preserve_order` on
/// or off.
fn attachment_value(reference: &AttachmentRef) -> Value {
    let mut object = Map::new();
    object.insert("bytes".into(), reference.bytes.into());
    object.insert("id".into(), reference.id.as_str().into());
    object.insert("media_type".into(), reference.media_type.as_str().into());
    if let Some(name) = &reference.name {
        object.insert("name".into(), name.as_str().into());
    }
    Value::Object(object)
}

// One pass, no intermediate map: a source is parsed on every replayed
// message, so this sits on the log's hot path.
impl<'de> Deserialize<'de> for MessageSource {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(SourceVisitor)
    }
}

struct SourceVisitor;

impl<'de> serde::de::Visitor<'de> for SourceVisitor {
    type Value = MessageSource;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a message source object with a `kind`")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<MessageSource, A::Error> {
        // Keys and the kind are borrowed from the input: the common source
        // (`{"kind":"user"}`) then allocates nothing.
        let mut kind: Option<std::borrow::Cow<'de, str>> = None;
        let mut fields = Map::new();
        while let Some(BorrowedStr(key)) = map.next_key::<BorrowedStr<'de>>()? {
            if key == "kind" {
                kind = Some(map.next_value::<BorrowedStr<'de>>()?.0);
            } else {
                fields.insert(key.into_owned(), map.next_value()?);
            }
        }
        let kind = kind.ok_or_else(|| A::Error::missing_field("kind"))?;
        let sender = |fields: &mut Map<String, Value>| -> Result<SessionId, A::Error> {
            let value = fields
                .remove("sender_session_id")
                .ok_or_else(|| A::Error::missing_field("sender_session_id"))?;
            match value {
                Value::String(id) => SessionId::new(id).map_err(A::Error::custom),
                _ => Err(A::Error::custom("`sender_session_id` must be a string")),
            }
        };
        Ok(match &*kind {
            "user" => {
                let client_time_zone = match fields.remove("client_time_zone") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(zone)) => Some(zone),
                    Some(_) => return Err(A::Error::custom("`client_time_zone` must be a string")),
                };
                let attachments: Vec<AttachmentRef> = match fields.remove("attachments") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(value) => serde_json::from_value(value).map_err(A::Error::custom)?,
                };
                // A log written before prompts said more reads as it did.
                if client_time_zone.is_none() && attachments.is_empty() {
                    MessageSource::User
                } else {
                    MessageSource::UserPrompt(PromptProvenance {
                        client_time_zone,
                        attachments,
                    })
                }
            }
            "agent-message" => MessageSource::AgentMessage {
                sender_session_id: sender(&mut fields)?,
            },
            "subagent-settled" => MessageSource::SubagentSettled {
                summary: match fields.remove("summary") {
                    Some(Value::String(summary)) => summary,
                    _ => return Err(A::Error::missing_field("summary")),
                },
                stop_reason: match fields.remove("stop_reason") {
                    Some(Value::String(reason)) => Some(StopReason::new(reason)),
                    None | Some(Value::Null) => None,
                    Some(_) => return Err(A::Error::custom("`stop_reason` must be a string")),
                },
                sender_session_id: sender(&mut fields)?,
            },
            _ => MessageSource::Other {
                kind: kind.into_owned(),
                fields,
            },
        })
    }
}

/// What a client said about a user's prompt beyond its content.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PromptProvenance {
    /// The IANA time zone the client sampled for this prompt, canonical
    /// (validated by whoever accepted the prompt).
    pub client_time_zone: Option<String>,
    /// The attachments admitted for it, in the order the content shows
    /// them.
    pub attachments: Vec<AttachmentRef>,
}

/// One identified piece of input for an agent's inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The message's durable identity.
    pub id: MessageId,
    /// What the message says.
    pub content: Vec<ContentBlock>,
    /// Who supplied it.
    pub source: MessageSource,
}

impl UserMessage {
    /// A message with a fresh id.
    pub fn new(content: Vec<ContentBlock>, source: MessageSource) -> Self {
        Self {
            id: MessageId::generate(),
            content,
            source,
        }
    }

    /// A user-authored text message with a fresh id.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self::new(vec![ContentBlock::text(text)], MessageSource::User)
    }
}

/// Which of the two ordered inbox lists a message joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InboxTarget {
    /// Queue: the message opens (or joins the start of) a later turn.
    NextTurn,
    /// Steer: the message enters the running turn at its next step boundary.
    NextStep,
}

/// A tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Correlates the call with its result.
    pub call_id: CallId,
    /// The tool's registered name.
    pub name: String,
    /// The arguments as the model wrote them, as JSON text.
    pub input: ToolInput,
}

/// A tool call's arguments: the JSON text the model wrote, kept as text.
/// Only whoever acts on the call parses it (the tool registry, to check it
/// against the tool's schema and hand it to the tool); reading a log,
/// folding it and sending the transcript back to a model never build a
/// value tree for it. Two inputs are equal when their texts are.
///
/// The text is valid JSON and holds no line break outside a string (a
/// session log is one event per line): text written across lines is kept
/// without its whitespace between tokens, everything else as it was.
///
/// It serialises as its JSON text through `serde_json` (the log, a
/// model's wire, `serde_json::to_value`). Other serde formats see
/// `serde_json`'s raw-value marker instead, as they do for
/// [`RawValue`](serde_json::value::RawValue): give them
/// [`ToolInput::to_value`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ToolInput(JsonText);

impl ToolInput {
    /// The empty object, `{}`: the input of a call that takes no arguments.
    pub fn empty_object() -> Self {
        Self(JsonText::from_value(&Value::Object(Map::new())))
    }

    /// The input whose JSON text is `text` (without the whitespace around
    /// it).
    ///
    /// # Errors
    /// `text` is not one JSON value.
    pub fn from_json(text: &str) -> serde_json::Result<Self> {
        JsonText::from_json(text).map(Self)
    }

    /// Serialise `value` as an input.
    ///
    /// # Errors
    /// `value`'s `Serialize` implementation failed (a map with non-string
    /// keys, say).
    pub fn new<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Self> {
        JsonText::new(value).map(Self)
    }

    /// The input's JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// Parse the input into `T`.
    ///
    /// # Errors
    /// The text is not a `T`.
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> serde_json::Result<T> {
        self.0.parse()
    }

    /// The input as a JSON value tree.
    ///
    /// # Errors
    /// The text is valid JSON that a [`Value`] cannot hold: a number out of
    /// `f64`'s range, or nesting deeper than 128 levels.
    pub fn to_value(&self) -> serde_json::Result<Value> {
        self.parse()
    }
}

impl Default for ToolInput {
    fn default() -> Self {
        Self::empty_object()
    }
}

impl From<Value> for ToolInput {
    fn from(value: Value) -> Self {
        Self::from(&value)
    }
}

impl From<&Value> for ToolInput {
    fn from(value: &Value) -> Self {
        Self(JsonText::from_value(value))
    }
}

/// Equal when the text parses to `other`.
impl PartialEq<Value> for ToolInput {
    fn eq(&self, other: &Value) -> bool {
        self.to_value().is_ok_and(|value| value == *other)
    }
}

impl std::fmt::Debug for ToolInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Display for ToolInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

/// Token usage reported for one model request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Of the prompt tokens, those the backend served from its prompt
    /// cache (OpenAI's `prompt_tokens_details.cached_tokens`); 0 when it
    /// reports none. Absent in a log written before it existed (read as
    /// 0) and not written when 0, so such a log reads back unchanged.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Of the output tokens, those the model spent reasoning before it
    /// answered (OpenAI's `completion_tokens_details.reasoning_tokens`, an
    /// ACP agent's `thought_tokens`); 0 when it reports none. Like
    /// `cached_input_tokens`: absent in an older log (read as 0) and not
    /// written when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// One message of the conversation a model is shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Input from the user or another source, attributed.
    User {
        /// What it says.
        content: Vec<ContentBlock>,
        /// Who supplied it.
        source: MessageSource,
    },
    /// What the model said and the tools it called.
    Assistant {
        /// The assistant's text.
        content: Vec<ContentBlock>,
        /// The calls it made, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    Tool {
        /// The call this answers.
        call_id: CallId,
        /// The result content.
        content: Vec<ContentBlock>,
        /// Whether the result reports a failure.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// How many messages a sealed chunk of a [`Transcript`] holds.
const CHUNK: usize = 64;

/// The conversation a model is shown, built from shared chunks: cloning it
/// (to put it in a [`ModelRequest`](crate::model::ModelRequest)) costs two
/// reference counts whatever its length, and a loop that keeps appending
/// while a model still holds an older clone copies at most the last
/// partial chunk, never the history. Reads like a slice: [`len`](Self::len),
/// [`iter`](Self::iter), [`last`](Self::last), indexing; serialises as a
/// JSON array of messages.
#[derive(Clone, Default)]
pub struct Transcript {
    /// Full chunks of exactly `CHUNK` messages, never changed once sealed
    /// (a chunk is only reopened, by copy if shared, to amend its last
    /// message).
    sealed: std::sync::Arc<Vec<std::sync::Arc<[Message]>>>,
    /// The messages after the sealed ones: at most `CHUNK`.
    tail: std::sync::Arc<Vec<Message>>,
}

/// An iterator over a [`Transcript`]'s messages, oldest first.
pub type TranscriptIter<'a> = std::iter::Chain<
    std::iter::FlatMap<
        std::slice::Iter<'a, std::sync::Arc<[Message]>>,
        std::slice::Iter<'a, Message>,
        fn(&'a std::sync::Arc<[Message]>) -> std::slice::Iter<'a, Message>,
    >,
    std::slice::Iter<'a, Message>,
>;

impl Transcript {
    /// An empty transcript.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many messages it holds.
    pub fn len(&self) -> usize {
        self.sealed.len() * CHUNK + self.tail.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The messages, oldest first.
    pub fn iter(&self) -> TranscriptIter<'_> {
        let chunk: fn(&std::sync::Arc<[Message]>) -> std::slice::Iter<'_, Message> =
            |chunk| chunk.iter();
        self.sealed.iter().flat_map(chunk).chain(self.tail.iter())
    }

    /// The message at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&Message> {
        let sealed = self.sealed.len() * CHUNK;
        if index < sealed {
            self.sealed
                .get(index / CHUNK)
                .and_then(|chunk| chunk.get(index % CHUNK))
        } else {
            self.tail.get(index - sealed)
        }
    }

    /// The first message.
    pub fn first(&self) -> Option<&Message> {
        self.get(0)
    }

    /// The newest message.
    pub fn last(&self) -> Option<&Message> {
        match self.tail.last() {
            Some(last) => Some(last),
            None => self.sealed.last().and_then(|chunk| chunk.last()),
        }
    }

    /// A copy of every message, in order.
    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }

    /// Append `message`. Copies nothing of the history; if a clone still
    /// shares the unsealed tail, that tail (fewer than 64 messages) is
    /// copied first.
    pub fn push(&mut self, message: Message) {
        if self.tail.len() >= CHUNK {
            let full = std::mem::take(std::sync::Arc::make_mut(&mut self.tail));
            std::sync::Arc::make_mut(&mut self.sealed).push(full.into());
        }
        std::sync::Arc::make_mut(&mut self.tail).push(message);
    }

    /// The newest message, to amend it (a tool call joining the assistant
    /// message it belongs to). Copies at most one chunk, and only if a clone
    /// still shares it.
    pub fn last_mut(&mut self) -> Option<&mut Message> {
        if self.tail.is_empty() {
            let sealed = std::sync::Arc::make_mut(&mut self.sealed);
            if let Some(chunk) = sealed.pop() {
                self.tail = std::sync::Arc::new(chunk.to_vec());
            }
        }
        std::sync::Arc::make_mut(&mut self.tail).last_mut()
    }
}

impl std::fmt::Debug for Transcript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Transcript {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl std::ops::Index<usize> for Transcript {
    type Output = Message;

    /// # Panics
    /// When `index` is out of bounds, like a slice.
    fn index(&self, index: usize) -> &Message {
        match self.get(index) {
            Some(message) => message,
            None => panic!(
                "index {index} out of bounds for a transcript of {}",
                self.len()
            ),
        }
    }
}

impl<'a> IntoIterator for &'a Transcript {
    type Item = &'a Message;
    type IntoIter = TranscriptIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl FromIterator<Message> for Transcript {
    fn from_iter<I: IntoIterator<Item = Message>>(messages: I) -> Self {
        let mut transcript = Self::new();
        for message in messages {
            transcript.push(message);
        }
        transcript
    }
}

impl From<Vec<Message>> for Transcript {
    fn from(messages: Vec<Message>) -> Self {
        messages.into_iter().collect()
    }
}

impl Serialize for Transcript {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Transcript {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<Message>::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user message as logs before `prompt` carried provenance wrote it
    /// reads as the plain user source and is written back byte for byte; a
    /// prompt's time zone and attachments round-trip under kind `user`.
    #[test]
    fn user_prompt_provenance_is_additive_to_the_durable_format() {
        let old =
            r#"{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}"#;
        let message: UserMessage = serde_json::from_str(old).unwrap();
        assert_eq!(message.source, MessageSource::User);
        assert_eq!(serde_json::to_string(&message).unwrap(), old);
        let prompted = UserMessage {
            source: MessageSource::UserPrompt(PromptProvenance {
                client_time_zone: Some("Europe/Paris".into()),
                attachments: vec![AttachmentRef {
                    id: crate::AttachmentId::new("sha256:ab"),
                    media_type: "image/png".into(),
                    bytes: 8,
                    name: None,
                }],
            }),
            ..message
        };
        let text = serde_json::to_string(&prompted).unwrap();
        assert_eq!(
            text,
            r#"{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"attachments":[{"bytes":8,"id":"sha256:ab","media_type":"image/png"}],"client_time_zone":"Europe/Paris","kind":"user"}}"#
        );
        let back: UserMessage = serde_json::from_str(&text).unwrap();
        assert_eq!(back, prompted);
        assert_eq!(back.source.kind(), "user");
        assert_eq!(back.source.heading(), None);
        let bad = r#"{"kind":"user","attachments":[{"id":"x"}]}"#;
        assert!(serde_json::from_str::<MessageSource>(bad).is_err());
    }

    /// The durable format stays backward compatible: a usage written
    /// before cached tokens existed reads them as 0, and a usage with none
    /// is written exactly as before.
    #[test]
    fn cached_tokens_are_optional_in_the_durable_format() {
        let old: Usage = serde_json::from_str(r#"{"input_tokens":7,"output_tokens":2}"#).unwrap();
        assert_eq!(old.cached_input_tokens, 0);
        assert_eq!(
            serde_json::to_string(&old).unwrap(),
            r#"{"input_tokens":7,"output_tokens":2}"#
        );
        let cached = Usage {
            cached_input_tokens: 5,
            ..old
        };
        let text = serde_json::to_string(&cached).unwrap();
        assert_eq!(
            text,
            r#"{"input_tokens":7,"output_tokens":2,"cached_input_tokens":5}"#
        );
        assert_eq!(serde_json::from_str::<Usage>(&text).unwrap(), cached);
        let mut sum = old;
        sum += cached;
        assert_eq!((sum.input_tokens, sum.cached_input_tokens), (14, 5));
    }

    #[test]
    fn only_messages_the_user_did_not_write_get_a_heading() {
        let sender = SessionId::new("child-1").unwrap();
        let headings: Vec<Option<String>> = [
            MessageSource::User,
            MessageSource::AgentMessage {
                sender_session_id: sender.clone(),
            },
            MessageSource::SubagentSettled {
                summary: "child-1 completed".into(),
                stop_reason: None,
                sender_session_id: sender,
            },
            MessageSource::Other {
                kind: "team-message".into(),
                fields: Map::new(),
            },
        ]
        .iter()
        .map(MessageSource::heading)
        .collect();
        assert_eq!(
            headings,
            [
                None,
                Some("[message from the agent of session child-1]".to_owned()),
                None,
                Some("[team-message]".to_owned()),
            ]
        );
    }

    #[test]
    fn sources_round_trip_including_unknown_kinds() {
        let sender = SessionId::new("child-1").unwrap();
        let sources = [
            MessageSource::User,
            MessageSource::AgentMessage {
                sender_session_id: sender.clone(),
            },
            MessageSource::SubagentSettled {
                summary: "child-1 completed".into(),
                stop_reason: Some(StopReason::COMPLETED),
                sender_session_id: sender,
            },
            serde_json::from_str(r#"{"kind":"team-message","team":"t1","from":"a"}"#).unwrap(),
        ];
        for source in sources {
            let json = serde_json::to_string(&source).unwrap();
            let back: MessageSource = serde_json::from_str(&json).unwrap();
            assert_eq!(back, source, "{json}");
        }
        let other: MessageSource =
            serde_json::from_str(r#"{"kind":"team-message","team":"t1"}"#).unwrap();
        assert_eq!(other.kind(), "team-message");
        assert_eq!(
            serde_json::to_string(&other).unwrap(),
            r#"{"kind":"team-message","team":"t1"}"#
        );
    }

    fn said(n: usize) -> Message {
        Message::User {
            content: vec![ContentBlock::text(n.to_string())],
            source: MessageSource::User,
        }
    }

    /// A transcript reads like the `Vec` it was built from across chunk
    /// boundaries, serialises the same, and a clone taken for a request
    /// keeps what it saw while the original grows and amends its last
    /// message.
    #[test]
    fn a_transcript_reads_like_a_vec_and_clones_are_snapshots() {
        for n in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5] {
            let all: Vec<Message> = (0..n).map(said).collect();
            let transcript = Transcript::from(all.clone());
            assert_eq!(transcript.len(), n);
            assert_eq!(transcript.to_vec(), all);
            assert!(transcript.iter().rev().eq(all.iter().rev()));
            assert_eq!(transcript.last(), all.last());
            assert_eq!(transcript.first(), all.first());
            assert_eq!(transcript.get(n), None);
            if n > 0 {
                assert_eq!(transcript[n - 1], all[n - 1]);
            }
            assert_eq!(
                serde_json::to_string(&transcript).unwrap(),
                serde_json::to_string(&all).unwrap()
            );
            let back: Transcript =
                serde_json::from_str(&serde_json::to_string(&all).unwrap()).unwrap();
            assert_eq!(back, transcript);
        }
        let mut growing = Transcript::from((0..CHUNK).map(said).collect::<Vec<_>>());
        let request = growing.clone();
        growing.push(Message::Assistant {
            content: Vec::new(),
            tool_calls: Vec::new(),
        });
        if let Some(Message::Assistant { tool_calls, .. }) = growing.last_mut() {
            tool_calls.push(ToolCall {
                call_id: CallId::new("c1"),
                name: "read".into(),
                input: Value::Null.into(),
            });
        }
        assert_eq!(request.len(), CHUNK);
        assert_eq!(request.to_vec(), (0..CHUNK).map(said).collect::<Vec<_>>());
        assert_eq!(growing.len(), CHUNK + 1);
        assert!(matches!(
            growing.last(),
            Some(Message::Assistant { tool_calls, .. }) if tool_calls.len() == 1
        ));
    }

    #[test]
    fn a_relay_without_its_sender_is_rejected() {
        let err = serde_json::from_str::<MessageSource>(r#"{"kind":"agent-message"}"#);
        assert!(err.unwrap_err().to_string().contains("sender_session_id"));
        let bad_id = serde_json::from_str::<MessageSource>(
            r#"{"kind":"agent-message","sender_session_id":"../x"}"#,
        );
        assert!(bad_id.is_err());
    }

    #[test]
    fn a_tool_input_keeps_the_text_it_was_given() {
        let input = ToolInput::from_json(r#"  {"z": 1, "a": [1e400, "x"], "z": 2} "#).unwrap();
        // Key order, duplicate keys, spacing inside and a number no `f64`
        // holds all kept; only the whitespace around the value goes.
        assert_eq!(input.get(), r#"{"z": 1, "a": [1e400, "x"], "z": 2}"#);
        assert_eq!(input.to_string(), input.get());
        assert_eq!(format!("{input:?}"), input.get());
        // The value tree cannot hold 1e400: parsing is where that shows.
        assert!(input.to_value().is_err());
        assert!(ToolInput::from_json(r#"{"a":"#).is_err());
        assert!(ToolInput::from_json("{} {}").is_err());
        assert!(ToolInput::from_json("").is_err());
    }

    #[test]
    fn a_tool_call_read_across_lines_keeps_its_input_on_one_line() {
        let call: ToolCall = serde_json::from_str(
            "{\"call_id\": \"c\", \"name\": \"read\",\n \"input\": {\n  \"p\": \"a\\nb\"\n}\n}",
        )
        .unwrap();
        assert_eq!(call.input.get(), r#"{"p":"a\nb"}"#);
        assert_eq!(call.input, serde_json::json!({"p": "a\nb"}));
    }

    #[test]
    fn tool_inputs_compare_by_text_and_against_a_value_by_value() {
        let spaced = ToolInput::from_json(r#"{"a": 1}"#).unwrap();
        let tight = ToolInput::from(serde_json::json!({"a": 1}));
        assert_eq!(tight.get(), r#"{"a":1}"#);
        assert_ne!(spaced, tight);
        assert_eq!(spaced, serde_json::json!({"a": 1}));
        assert_ne!(spaced, serde_json::json!({"a": 2}));
        assert_eq!(ToolInput::default().get(), "{}");
        assert_eq!(ToolInput::empty_object(), serde_json::json!({}));
        // Through serde_json, the text itself, not a string holding it.
        let call = ToolCall {
            call_id: CallId::new("c"),
            name: "read".into(),
            input: spaced,
        };
        assert_eq!(
            serde_json::to_string(&call).unwrap(),
            r#"{"call_id":"c","name":"read","input":{"a": 1}}"#
        );
        assert_eq!(
            serde_json::to_value(&call).unwrap()["input"],
            serde_json::json!({"a": 1})
        );
    }
}
