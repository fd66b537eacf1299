//! The request body a [`ModelRequest`] becomes on the chat-completions wire:
//! the system prompt as a `system` message, user, assistant and tool
//! messages, images as `image_url` data URLs, tools as `function` tools, and
//! `stream: true` with `stream_options.include_usage`. Text-only content is
//! sent as a plain string (some compatible servers, DeepSeek among them,
//! reject content arrays); content with images is sent as parts. This module
//! does no I/O.

use std::borrow::Cow;

use dsh_core::content::ContentBlock;
use dsh_core::{Message, MessageSource, ModelRequest, ToolCall, ToolInput, ToolSpec};
use serde::Serialize;
use serde_json::Value;

/// Which request field carries the output-token cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenLimitField {
    /// `max_tokens`: what DeepSeek, vLLM, Ollama and older OpenAI models read.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: what OpenAI's reasoning models require.
    MaxCompletionTokens,
}

/// The JSON body of one streamed chat-completions request.
#[derive(Debug, Serialize)]
pub(crate) struct Body<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
    stream: bool,
    stream_options: StreamOptions,
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Debug, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: WireContent<'a>,
    },
    Assistant {
        content: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: String,
    },
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum WireContent<'a> {
    Text(String),
    Parts(Vec<Part<'a>>),
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Debug, Serialize)]
struct ImageUrl {
    url: String,
}

#[derive(Debug, Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: Cow<'a, str>,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// The separator put between the text blocks of one message sent as a string.
const BLOCK_SEPARATOR: &str = "\n\n";

/// The text blocks of `content`, joined with a blank line.
fn text_of(content: &[ContentBlock]) -> String {
    let mut text = String::new();
    for block in content.iter().filter_map(ContentBlock::as_text) {
        if !text.is_empty() && !block.is_empty() {
            text.push_str(BLOCK_SEPARATOR);
        }
        text.push_str(block);
    }
    text
}

fn image_part<'a>(media_type: &str, data: &str) -> Part<'a> {
    Part::ImageUrl {
        image_url: ImageUrl {
            url: format!("data:{media_type};base64,{data}"),
        },
    }
}

/// User content: a string, or parts when there are images.
/// A user message's content, headed by who wrote it when that was not the
/// user ([`MessageSource::heading`]): the wire has no field for the source.
fn user_content<'a>(content: &'a [ContentBlock], source: &MessageSource) -> WireContent<'a> {
    let heading = source.heading();
    if !content.iter().any(ContentBlock::is_image) {
        let text = text_of(content);
        return WireContent::Text(match heading {
            Some(heading) => format!("{heading}{BLOCK_SEPARATOR}{text}"),
            None => text,
        });
    }
    let heading = heading.map(|text| Part::Text {
        text: Cow::Owned(text),
    });
    WireContent::Parts(
        heading
            .into_iter()
            .chain(content.iter().map(|block| match block {
                ContentBlock::Text { text } => Part::Text {
                    text: Cow::Borrowed(text),
                },
                ContentBlock::Image { media_type, data } => image_part(media_type, data),
            }))
            .collect(),
    )
}

/// Arguments as the wire carries them: JSON text, which the call keeps, so
/// it is sent as it is. Arguments kept as a JSON string because they were
/// not valid JSON go back exactly as the model wrote them.
fn arguments(input: &ToolInput) -> Cow<'_, str> {
    let text = input.get();
    if text.starts_with('"')
        && let Ok(raw) = input.parse::<String>()
    {
        return Cow::Owned(raw);
    }
    Cow::Borrowed(text)
}

fn wire_call(call: &ToolCall) -> WireCall<'_> {
    WireCall {
        id: call.call_id.as_str(),
        kind: "function",
        function: WireFunctionCall {
            name: &call.name,
            arguments: arguments(&call.input),
        },
    }
}

fn wire_tool(spec: &ToolSpec) -> WireTool<'_> {
    WireTool {
        kind: "function",
        function: WireFunction {
            name: &spec.name,
            description: &spec.description,
            parameters: &spec.input_schema,
        },
    }
}

/// The prefix of a tool result that reports a failure (the wire has no flag for it).
pub(crate) const TOOL_ERROR_PREFIX: &str = "Error: ";

/// The wire messages for `request`.
///
/// Tool messages carry text only on this API: the images of a run of
/// consecutive tool results follow the run as one user message, after every
/// result of the run (a tool message must directly follow its call's
/// assistant message or another tool message).
fn messages(request: &ModelRequest) -> Vec<WireMessage<'_>> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        out.push(WireMessage::System {
            content: &request.system,
        });
    }
    let mut tool_images: Vec<Part<'_>> = Vec::new();
    for message in request.messages.iter() {
        if !matches!(message, Message::Tool { .. }) && !tool_images.is_empty() {
            out.push(WireMessage::User {
                content: WireContent::Parts(std::mem::take(&mut tool_images)),
            });
        }
        match message {
            Message::User { content, source } => out.push(WireMessage::User {
                content: user_content(content, source),
            }),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let text = text_of(content);
                out.push(WireMessage::Assistant {
                    content: if text.is_empty() && !tool_calls.is_empty() {
                        None
                    } else {
                        Some(text)
                    },
                    tool_calls: tool_calls.iter().map(wire_call).collect(),
                });
            }
            Message::Tool {
                call_id,
                content,
                is_error,
            } => {
                let mut text = text_of(content);
                if *is_error {
                    text.insert_str(0, TOOL_ERROR_PREFIX);
                }
                let images: Vec<Part<'_>> = content
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::Image { media_type, data } => {
                            Some(image_part(media_type, data))
                        }
                        ContentBlock::Text { .. } => None,
                    })
                    .collect();
                if !images.is_empty() {
                    if text.is_empty() {
                        text.push_str("(the result is the image below)");
                    }
                    tool_images.push(Part::Text {
                        text: Cow::Owned(format!("The image result of tool call `{call_id}`:")),
                    });
                    tool_images.extend(images);
                }
                out.push(WireMessage::Tool {
                    tool_call_id: call_id.as_str(),
                    content: text,
                });
            }
        }
    }
    if !tool_images.is_empty() {
        out.push(WireMessage::User {
            content: WireContent::Parts(tool_images),
        });
    }
    out
}

/// The body for `request`, asking `model` unless the request names its own.
pub(crate) fn body<'a>(
    request: &'a ModelRequest,
    model: &'a str,
    limit_field: TokenLimitField,
) -> Body<'a> {
    let (max_tokens, max_completion_tokens) = match limit_field {
        TokenLimitField::MaxTokens => (request.max_output_tokens, None),
        TokenLimitField::MaxCompletionTokens => (None, request.max_output_tokens),
    };
    Body {
        model: request.model.as_deref().unwrap_or(model),
        messages: messages(request),
        tools: request.tools.iter().map(wire_tool).collect(),
        max_tokens,
        max_completion_tokens,
        reasoning_effort: request.reasoning_effort.as_deref(),
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
    }
}
