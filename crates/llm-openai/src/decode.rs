//! Turning a chat-completions event stream into [`ModelEvent`]s, in the
//! order the agent loop consumes them: text deltas as they arrive; then, once
//! the stream is over (`[DONE]`, or a clean end after a finish reason), every
//! assembled tool call in index order, the usage (once, the last figures the
//! server sent), and the finish reason last. The loop stops reading at
//! [`ModelEvent::Finish`], so nothing may follow it, and OpenAI sends usage in
//! a chunk after the one carrying the finish reason: that is why the finish is
//! held back until the end. This module does no I/O.

use std::collections::BTreeMap;

use dsh_core::{
    CallId, FinishReason, ModelError, ModelErrorKind, ModelEvent, ToolCall, ToolInput, Usage,
};
use serde::Deserialize;
use serde_json::Value;

use crate::sse::{SseEvent, SseParser};

/// Decodes one streamed chat-completions response body.
///
/// Feed it the body's bytes as they arrive with [`StreamDecoder::feed`]; call
/// [`StreamDecoder::end`] if the body ends before [`StreamDecoder::is_done`].
/// Events go to the caller's queue; after an error or the finish, the decoder
/// is spent.
#[derive(Debug, Default)]
pub struct StreamDecoder {
    sse: SseParser,
    events: Vec<SseEvent>,
    calls: BTreeMap<u64, PartialCall>,
    usage: Option<Usage>,
    finish: Option<String>,
    refused: bool,
    reasoning_chars: usize,
    done: bool,
}

/// A tool call being assembled from fragments.
#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    index: u64,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    /// Absent (or `null`) on servers without a prompt cache.
    #[serde(default)]
    prompt_tokens_details: Option<WirePromptDetails>,
    /// Absent (or `null`) on servers that report no reasoning.
    #[serde(default)]
    completion_tokens_details: Option<WireCompletionDetails>,
}

#[derive(Deserialize)]
struct WireCompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct WirePromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

fn protocol(message: impl Into<String>) -> ModelError {
    ModelError::new(ModelErrorKind::Protocol, message)
}

/// The finish reason a wire `finish_reason` maps to.
///
/// `stop` is the end of the answer ([`FinishReason::ToolUse`] when tool calls
/// were made, as some servers say `stop` there), `tool_calls` and the legacy
/// `function_call` are tool use, `length` is the token cap, `content_filter`
/// is a refusal; anything else is kept as [`FinishReason::Other`].
pub fn finish_reason(wire: &str, has_calls: bool, refused: bool) -> FinishReason {
    match wire {
        "stop" if refused => FinishReason::Refusal,
        "stop" if has_calls => FinishReason::ToolUse,
        "stop" => FinishReason::EndTurn,
        "tool_calls" | "function_call" => FinishReason::ToolUse,
        "length" => FinishReason::MaxTokens,
        "content_filter" => FinishReason::Refusal,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// The message of an in-band `{"error": ...}` object, or its JSON text.
pub(crate) fn error_message(error: &Value) -> String {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| error.as_str().map(str::to_owned))
        .unwrap_or_else(|| error.to_string());
    let tag = ["code", "type"]
        .iter()
        .find_map(|key| error.get(key).and_then(Value::as_str));
    match tag {
        Some(tag) if !message.contains(tag) => format!("{message} ({tag})"),
        _ => message,
    }
}

impl StreamDecoder {
    /// A decoder at the start of a response body.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the response is over (its finish was queued) and nothing more should be read.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// How many characters of reasoning (DeepSeek's `reasoning_content`) were
    /// received; the core vocabulary has no event for them, so they are not
    /// shown to the loop.
    pub fn reasoning_chars(&self) -> usize {
        self.reasoning_chars
    }

    /// Decode `bytes`, pushing the events they complete onto `out`.
    ///
    /// # Errors
    /// A [`ModelErrorKind::Protocol`] error for a malformed stream, a
    /// [`ModelErrorKind::Api`] error when the server reports one in-band. The
    /// message never quotes the server's bytes beyond its own error text.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        if self.done {
            return Ok(());
        }
        let mut events = std::mem::take(&mut self.events);
        let parsed = self
            .sse
            .feed(bytes, &mut events)
            .map_err(|err| protocol(format!("bad event stream: {err}")));
        let mut result = parsed;
        for event in events.drain(..) {
            if result.is_err() || self.done {
                break;
            }
            result = self.event(&event, out);
        }
        self.events = events;
        result
    }

    /// The body ended cleanly: finish the response if a finish reason came.
    ///
    /// # Errors
    /// A [`ModelErrorKind::Protocol`] error when the body ended before the
    /// response did (no finish reason): a truncated response is never passed
    /// off as a complete one.
    pub fn end(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        if self.done {
            return Ok(());
        }
        if self.finish.is_some() {
            // Some servers close without `[DONE]`; the finish reason already said it was over.
            self.complete(out);
            Ok(())
        } else {
            self.done = true;
            Err(protocol(
                "the response ended before the model finished (no finish reason)",
            ))
        }
    }

    fn event(&mut self, event: &SseEvent, out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
        let data = event.data.trim();
        if event.event == "error" {
            self.done = true;
            let message = match serde_json::from_str::<Value>(data) {
                Ok(value) => error_message(value.get("error").unwrap_or(&value)),
                Err(_) => data.to_owned(),
            };
            return Err(ModelError::new(
                ModelErrorKind::Api,
                format!("the server reported an error mid-stream: {message}"),
            ));
        }
        if data == "[DONE]" {
            self.complete(out);
            return Ok(());
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|err| {
            self.done = true;
            protocol(format!(
                "a stream chunk is not a chat-completion chunk: {err}"
            ))
        })?;
        if let Some(error) = &chunk.error {
            self.done = true;
            return Err(ModelError::new(
                ModelErrorKind::Api,
                format!(
                    "the server reported an error mid-stream: {}",
                    error_message(error)
                ),
            ));
        }
        if let Some(usage) = chunk.usage {
            // Servers that report usage on every chunk report running totals: keep the last.
            self.usage = Some(Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
                cached_input_tokens: usage
                    .prompt_tokens_details
                    .and_then(|details| details.cached_tokens)
                    .unwrap_or(0),
                reasoning_tokens: usage
                    .completion_tokens_details
                    .and_then(|details| details.reasoning_tokens)
                    .unwrap_or(0),
            });
        }
        for choice in chunk.choices {
            if choice.index != 0 {
                // Only one choice is requested; others are not ours to show.
                continue;
            }
            if let Some(delta) = choice.delta {
                self.delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish = Some(reason);
            }
        }
        Ok(())
    }

    fn delta(&mut self, delta: Delta, out: &mut Vec<ModelEvent>) {
        if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
            out.push(ModelEvent::TextDelta(text));
        }
        if let Some(refusal) = delta.refusal.filter(|text| !text.is_empty()) {
            self.refused = true;
            out.push(ModelEvent::TextDelta(refusal));
        }
        if let Some(reasoning) = delta.reasoning_content {
            self.reasoning_chars += reasoning.chars().count();
        }
        for fragment in delta.tool_calls.into_iter().flatten() {
            self.fragment(fragment);
        }
    }

    /// Fold one tool-call fragment in. Fragments are keyed by `index`; a
    /// server that omits it gets a new call for each new id and the last call
    /// otherwise. The id and name are taken from the first fragment that
    /// carries them; argument fragments are concatenated.
    fn fragment(&mut self, fragment: ToolCallDelta) {
        let id = fragment.id.filter(|id| !id.is_empty());
        let key = match fragment.index {
            Some(index) => index,
            None => {
                let last = self.calls.last_key_value();
                match (&id, last) {
                    (_, None) => 0,
                    (Some(id), Some((&key, call))) if call.id.as_deref() != Some(id.as_str()) => {
                        key + 1
                    }
                    (_, Some((&key, _))) => key,
                }
            }
        };
        let call = self.calls.entry(key).or_default();
        if call.id.is_none() {
            call.id = id;
        }
        if let Some(function) = fragment.function {
            if let Some(name) = function.name.filter(|name| !name.is_empty())
                && call.name.is_empty()
            {
                call.name = name;
            }
            if let Some(arguments) = function.arguments {
                call.arguments.push_str(&arguments);
            }
        }
    }

    /// Queue the assembled calls, the usage and the finish.
    fn complete(&mut self, out: &mut Vec<ModelEvent>) {
        self.done = true;
        let calls = std::mem::take(&mut self.calls);
        let wire = self.finish.take().unwrap_or_else(|| "stop".to_owned());
        let finish = finish_reason(&wire, !calls.is_empty(), self.refused);
        for (index, call) in calls {
            out.push(ModelEvent::ToolCall(assemble(index, call)));
        }
        if let Some(usage) = self.usage.take() {
            out.push(ModelEvent::Usage(usage));
        }
        out.push(ModelEvent::Finish(finish));
    }
}

/// A finished call: arguments parsed as JSON (empty arguments are `{}`).
///
/// Arguments that are not valid JSON are kept as they were written, as a JSON
/// string: the tool registry then rejects them against the tool's object
/// schema and the model sees an error result it can correct, instead of the
/// whole turn failing (and a turn that ended on the token cap discards its
/// calls anyway). A call without an id gets one made from its index.
fn assemble(index: u64, call: PartialCall) -> ToolCall {
    let input = if call.arguments.trim().is_empty() {
        ToolInput::empty_object()
    } else {
        match ToolInput::from_json(&call.arguments) {
            Ok(input) => input,
            Err(err) => {
                tracing::warn!(
                    tool = %call.name,
                    "the model's tool-call arguments are not valid JSON ({err}); passing them on as text"
                );
                ToolInput::from(Value::String(call.arguments))
            }
        }
    };
    ToolCall {
        call_id: CallId::new(call.id.unwrap_or_else(|| format!("call_{index}"))),
        name: call.name,
        input,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode(body: &str) -> (Vec<ModelEvent>, Result<(), ModelError>) {
        let mut decoder = StreamDecoder::new();
        let mut out = Vec::new();
        let mut result = decoder.feed(body.as_bytes(), &mut out);
        if result.is_ok() && !decoder.is_done() {
            result = decoder.end(&mut out);
        }
        (out, result)
    }

    fn sse(chunks: &[Value]) -> String {
        let mut body = String::new();
        for chunk in chunks {
            body.push_str(&format!("data: {chunk}\n\n"));
        }
        body.push_str("data: [DONE]\n\n");
        body
    }

    fn delta(delta: Value) -> Value {
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
    }

    fn finish(reason: &str) -> Value {
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    }

    #[test]
    fn finish_reasons_map_onto_the_core_vocabulary() {
        for (wire, calls, refused, expected) in [
            ("stop", false, false, FinishReason::EndTurn),
            ("stop", true, false, FinishReason::ToolUse),
            ("stop", false, true, FinishReason::Refusal),
            ("tool_calls", true, false, FinishReason::ToolUse),
            ("function_call", true, false, FinishReason::ToolUse),
            ("length", true, false, FinishReason::MaxTokens),
            ("content_filter", false, false, FinishReason::Refusal),
            (
                "insufficient_system_resource",
                false,
                false,
                FinishReason::Other("insufficient_system_resource".into()),
            ),
        ] {
            assert_eq!(finish_reason(wire, calls, refused), expected, "{wire}");
        }
    }

    #[test]
    fn calls_without_an_index_split_on_new_ids() {
        let body = sse(&[
            delta(
                json!({"tool_calls": [{"id": "a", "function": {"name": "read", "arguments": "{\"p\":"}}]}),
            ),
            delta(json!({"tool_calls": [{"function": {"arguments": "1}"}}]})),
            delta(
                json!({"tool_calls": [{"id": "b", "function": {"name": "grep", "arguments": ""}}]}),
            ),
            finish("tool_calls"),
        ]);
        let (events, result) = decode(&body);
        result.unwrap();
        assert_eq!(
            events,
            [
                ModelEvent::ToolCall(ToolCall {
                    call_id: CallId::new("a"),
                    name: "read".into(),
                    input: json!({"p": 1}).into()
                }),
                ModelEvent::ToolCall(ToolCall {
                    call_id: CallId::new("b"),
                    name: "grep".into(),
                    input: ToolInput::empty_object()
                }),
                ModelEvent::Finish(FinishReason::ToolUse),
            ]
        );
    }

    #[test]
    fn malformed_arguments_are_kept_as_text() {
        let body = sse(&[
            delta(
                json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "read", "arguments": "{\"p\": "}}]}),
            ),
            finish("tool_calls"),
        ]);
        let (events, result) = decode(&body);
        result.unwrap();
        assert_eq!(
            events[0],
            ModelEvent::ToolCall(ToolCall {
                call_id: CallId::new("a"),
                name: "read".into(),
                input: json!("{\"p\": ").into()
            })
        );
    }

    #[test]
    fn arguments_are_kept_as_written_and_only_line_breaks_between_tokens_go() {
        let body = sse(&[
            delta(
                json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "read", "arguments": "{\"z\": 1, \"a\": [1e400]}"}}]}),
            ),
            delta(
                json!({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "read", "arguments": "{\n  \"p\": \"two\\nlines \\\" {x}\",\n  \"q\": [1, 2]\n}\n"}}]}),
            ),
            finish("tool_calls"),
        ]);
        let (events, result) = decode(&body);
        result.unwrap();
        let inputs: Vec<&str> = events
            .iter()
            .filter_map(|event| match event {
                ModelEvent::ToolCall(call) => Some(call.input.get()),
                _ => None,
            })
            .collect();
        // Key order, spacing and a number no `f64` holds are kept; text
        // across lines loses the whitespace between its tokens, never what
        // is inside a string.
        assert_eq!(
            inputs,
            [
                r#"{"z": 1, "a": [1e400]}"#,
                r#"{"p":"two\nlines \" {x}","q":[1,2]}"#
            ]
        );
    }

    #[test]
    fn a_clean_end_after_a_finish_completes_and_before_one_is_an_error() {
        let body = format!(
            "data: {}\n\ndata: {}\n\n",
            delta(json!({"content": "hi"})),
            finish("stop")
        );
        let (events, result) = decode(&body);
        result.unwrap();
        assert_eq!(
            events,
            [
                ModelEvent::TextDelta("hi".into()),
                ModelEvent::Finish(FinishReason::EndTurn)
            ]
        );
        let body = format!("data: {}\n\n", delta(json!({"content": "hi"})));
        let (events, result) = decode(&body);
        assert_eq!(events, [ModelEvent::TextDelta("hi".into())]);
        assert_eq!(result.unwrap_err().kind, ModelErrorKind::Protocol);
    }

    #[test]
    fn in_band_errors_and_garbage_are_errors() {
        let (_, result) =
            decode("data: {\"error\":{\"message\":\"overloaded\",\"code\":\"server_busy\"}}\n\n");
        let err = result.unwrap_err();
        assert_eq!(err.kind, ModelErrorKind::Api);
        assert!(err.message.contains("overloaded (server_busy)"), "{err}");
        let (_, result) = decode("event: error\ndata: {\"message\":\"boom\"}\n\n");
        assert!(result.unwrap_err().message.contains("boom"));
        let (_, result) = decode("data: not json\n\n");
        assert_eq!(result.unwrap_err().kind, ModelErrorKind::Protocol);
    }

    #[test]
    fn usage_is_reported_once_with_the_last_figures_and_other_choices_are_ignored() {
        let body = sse(&[
            json!({"choices": [{"index": 0, "delta": {"content": "a"}}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}),
            json!({"choices": [{"index": 1, "delta": {"content": "other"}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "b"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}),
            json!({"choices": [], "usage": null}),
        ]);
        let (events, result) = decode(&body);
        result.unwrap();
        assert_eq!(
            events,
            [
                ModelEvent::TextDelta("a".into()),
                ModelEvent::TextDelta("b".into()),
                ModelEvent::Usage(Usage {
                    input_tokens: 5,
                    output_tokens: 2,
                    ..Usage::default()
                }),
                ModelEvent::Finish(FinishReason::EndTurn)
            ]
        );
    }

    #[test]
    fn cached_and_reasoning_tokens_are_read_from_the_details_and_default_to_zero() {
        let usage_of = |usage: serde_json::Value| {
            let body = sse(&[
                json!({"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": "stop"}]}),
                json!({"choices": [], "usage": usage}),
            ]);
            let (events, result) = decode(&body);
            result.unwrap();
            events.into_iter().find_map(|event| match event {
                ModelEvent::Usage(usage) => Some(usage),
                _ => None,
            })
        };
        let cached = usage_of(json!({"prompt_tokens": 100, "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 64}}));
        assert_eq!(
            cached,
            Some(Usage {
                input_tokens: 100,
                output_tokens: 3,
                cached_input_tokens: 64,
                reasoning_tokens: 0,
            })
        );
        // A server without a prompt cache: no details, or null ones.
        for usage in [
            json!({"prompt_tokens": 100, "completion_tokens": 3}),
            json!({"prompt_tokens": 100, "completion_tokens": 3, "prompt_tokens_details": null}),
            json!({"prompt_tokens": 100, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": null}}),
        ] {
            assert_eq!(usage_of(usage).map(|u| u.cached_input_tokens), Some(0));
        }
        // A reasoning model reports the reasoning part of its output.
        let reasoned = usage_of(json!({"prompt_tokens": 100, "completion_tokens": 90,
            "completion_tokens_details": {"reasoning_tokens": 64}}));
        assert_eq!(reasoned.map(|u| u.reasoning_tokens), Some(64));
        for usage in [
            json!({"prompt_tokens": 100, "completion_tokens": 3, "completion_tokens_details": null}),
            json!({"prompt_tokens": 100, "completion_tokens": 3, "completion_tokens_details": {}}),
        ] {
            assert_eq!(usage_of(usage).map(|u| u.reasoning_tokens), Some(0));
        }
    }
}
