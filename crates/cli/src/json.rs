//! `--json`: one JSON object per line on stdout for every event of a run,
//! for scripts and CI (the schema is in `docs/cli-json.md`). The events of
//! an agent's conversation (its text, tool calls and results, notices,
//! usage, turn ends) are read where they become durable: the store layer
//! of [`crate::writes::Watched::streaming`] hands every event an agent's
//! log accepted to the [`crate::observe::Reporter`], whose `--json`
//! renderer writes it as a line through [`event_line`]. So
//! a line is printed only for what the log holds, in the log's order, and
//! a write that fails prints nothing. The runtime's start and end events
//! become `agent_started` and `settled`. Nothing else is written to stdout
//! in this mode; the person's lines go to stderr.
//!
//! The read-only commands (`agents`, `show`, `team`) take `--json` too and
//! print one document each, through [`document`], with the same
//! [`SCHEMA_VERSION`] in its `schema` field.

use dsh_core::content::joined_text;
use dsh_core::{EventPayload, MessageSource, SessionEvent, ToolInput};
use serde::Serialize;

/// The version of the line schema, in every `run_started` line.
pub const SCHEMA_VERSION: u32 = 1;

/// One line of the stream. `agent` is the agent's name in its tree
/// (`lead`, `researcher`, `researcher/deep`), `session` its session id.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line<'a> {
    /// The command began.
    RunStarted {
        /// [`SCHEMA_VERSION`].
        schema: u32,
        /// `demo` or `<provider>:<model>`.
        model: &'a str,
        /// The session directory.
        sessions: &'a str,
    },
    /// An agent began working: the lead, or a child its parent started.
    AgentStarted {
        /// Its name.
        agent: &'a str,
        /// Its session id.
        session: &'a str,
        /// Its parent's name; `None` for the lead.
        parent: Option<&'a str>,
        /// The provider that made it (`root` for the lead).
        provider: &'a str,
        /// The lead's task, or the child's label.
        task: &'a str,
    },
    /// A piece of text as the model streams it, before its step is
    /// recorded (not durable: the step's `text` line is the record).
    TextDelta {
        /// The agent.
        agent: &'a str,
        /// Its session id.
        session: &'a str,
        /// The streamed piece.
        text: &'a str,
    },
    /// The text of one model step (whole: the log records a step's text
    /// as one event).
    Text {
        /// The agent.
        agent: &'a str,
        /// Its session id.
        session: &'a str,
        /// What the model said.
        text: String,
    },
    /// The model called a tool.
    ToolCall {
        /// The agent.
        agent: &'a str,
        /// Its session id.
        session: &'a str,
        /// Correlates the call with its result.
        call_id: &'a str,
        /// The tool.
        tool: &'a str,
        /// The arguments as the model wrote them.
        input: &'a ToolInput,
    },
    /// A tool call's result, as the model is shown it.
    ToolResult {
        /// The agent.
        agent: &'a str,
        /// Its session id.
        session: &'a str,
        /// The call it answers.
        call_id: &'a str,
        /// The tool.
        tool: &'a str,
        /// Whether it reports a failure.
        is_error: bool,
        /// The result's text.
        output: String,
    },
    /// A message an agent read that no user typed: a message from another
    /// agent, or a child's settlement notice.
    Notice {
        /// The agent that read it.
        agent: &'a str,
        /// Its session id.
        session: &'a str,
        /// `agent-message`, `subagent-settled` or another source's kind.
        source: &'a str,
        /// The sender's session id, when an agent sent it.
        from: Option<&'a str>,
        /// Its text.
        text: String,
    },
    /// The tokens of one model request.
    Usage {
        /// The agent.
        agent: &'a str,
        /// Its session id.
        session: &'a str,
        /// Prompt tokens.
        input_tokens: u64,
        /// Completion tokens.
        output_tokens: u64,
        /// Of the prompt tokens, those served from the backend's cache.
        cached_input_tokens: u64,
        /// Of the completion tokens, those the model spent reasoning.
        reasoning_tokens: u64,
    },
    /// A turn of an agent ended.
    TurnEnded {
        /// The agent.
        agent: &'a str,
        /// Its session id.
        session: &'a str,
        /// Why (`completed`, `aborted`, `error`, ...).
        stop_reason: &'a str,
        /// Facts about an end that is not `completed`.
        diagnostic: Option<&'a str>,
    },
    /// An agent is done: a child its runtime settled, or the lead when the
    /// whole tree is done.
    Settled {
        /// The agent.
        agent: &'a str,
        /// Its session id.
        session: &'a str,
        /// Its last stop reason; `None` when it failed.
        stop_reason: Option<&'a str>,
        /// Why it failed, when it did.
        error: Option<&'a str>,
    },
    /// A message a person typed (`dsh show --json` only: the run's stream
    /// does not repeat its own prompt).
    Prompt {
        /// The agent that read it.
        agent: &'a str,
        /// Its session id.
        session: &'a str,
        /// Its text.
        text: String,
    },
    /// The tree's spend passed another quarter of a limit.
    Budget {
        /// Tokens used so far.
        tokens: u64,
        /// The tokens the tree may use; `None` when not limited.
        max_tokens: Option<u64>,
        /// Dollars spent so far.
        cost: f64,
        /// The dollars the tree may spend; `None` when not limited.
        max_cost: Option<f64>,
    },
    /// The reply of the child `dsh send` addressed.
    Reply {
        /// The child.
        agent: &'a str,
        /// Its answer.
        text: &'a str,
    },
}

impl Line<'_> {
    /// The line's JSON text (no newline).
    pub fn to_json(&self) -> String {
        // Every field is a string, number, bool or JSON value: this cannot
        // fail; a failure would print an empty object rather than nothing.
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }
}

/// The JSON text of a read-only command's `--json` document (`dsh agents`,
/// `dsh show`, `dsh team`), with its newline: one document on stdout.
pub fn document(value: &impl Serialize) -> String {
    // Strings, numbers, bools and maps with string keys only: this cannot
    // fail; a failure would print an empty object rather than nothing.
    let mut text = serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned());
    text.push('\n');
    text
}

/// The line of one durable event of `agent`'s log, when it is one the
/// stream shows (the user's own messages, step starts and extension
/// events are not).
pub fn event_line<'a>(
    agent: &'a str,
    session: &'a str,
    event: &'a SessionEvent,
) -> Option<Line<'a>> {
    match &event.payload {
        EventPayload::AssistantMessage(entry) => {
            let text = joined_text(&entry.content);
            (!text.trim().is_empty()).then_some(Line::Text {
                agent,
                session,
                text,
            })
        }
        EventPayload::ToolCall(call) => Some(Line::ToolCall {
            agent,
            session,
            call_id: call.call_id.as_str(),
            tool: &call.name,
            input: &call.input,
        }),
        EventPayload::ToolResult(result) => Some(Line::ToolResult {
            agent,
            session,
            call_id: result.call_id.as_str(),
            tool: &result.name,
            is_error: result.is_error,
            output: joined_text(&result.content),
        }),
        EventPayload::UserMessage(entry) => {
            let source = &entry.message.source;
            let from = match source {
                MessageSource::User | MessageSource::UserPrompt(_) => return None,
                MessageSource::AgentMessage { sender_session_id }
                | MessageSource::SubagentSettled {
                    sender_session_id, ..
                } => Some(sender_session_id.as_str()),
                MessageSource::Other { .. } => None,
            };
            Some(Line::Notice {
                agent,
                session,
                source: source.kind(),
                from,
                text: joined_text(&entry.message.content),
            })
        }
        EventPayload::Usage(usage) => Some(Line::Usage {
            agent,
            session,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cached_input_tokens: usage.cached_input_tokens,
            reasoning_tokens: usage.reasoning_tokens,
        }),
        EventPayload::TurnEnd(end) => Some(Line::TurnEnded {
            agent,
            session,
            stop_reason: end.stop_reason.as_str(),
            diagnostic: end.diagnostic.as_deref(),
        }),
        _ => None,
    }
}

/// The line of one event of a transcript (`dsh show --json`): the stream's
/// line, or for a message a person typed, a `prompt` line.
pub fn transcript_line<'a>(
    agent: &'a str,
    session: &'a str,
    event: &'a SessionEvent,
) -> Option<Line<'a>> {
    match &event.payload {
        EventPayload::UserMessage(entry)
            if matches!(
                entry.message.source,
                MessageSource::User | MessageSource::UserPrompt(_)
            ) =>
        {
            Some(Line::Prompt {
                agent,
                session,
                text: joined_text(&entry.message.content),
            })
        }
        _ => event_line(agent, session, event),
    }
}
