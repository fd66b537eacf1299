//! The client driving the reference agent loop (`dsh-harness`) against the
//! loopback server: a tool call streamed in fragments is executed and its
//! result goes back on the wire in the next request; a stream that fails
//! ends the turn as `error` with a diagnostic free of the key; interrupting
//! the agent mid-stream aborts the turn and closes the connection.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::{
    Agent, AgentFactory, AgentHandle, CancelCause, CancelOptions, CancellationToken, CreateAgent,
    EventPayload, SessionEvent, SessionHeader, SessionId, SessionStore, Tool, ToolContext,
    ToolError, ToolOutput, UserMessage,
};
use dsh_harness::{Harness, MemoryStore};
use dsh_llm_openai::{OpenAiModel, RetryPolicy};
use serde_json::{Value, json};
use support::*;

/// Echoes its `text` argument.
struct Echo;

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }

    fn description(&self) -> String {
        "Echo `text` back.".into()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": false
        })
    }

    async fn execute(&self, input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(format!(
            "echo: {}",
            input["text"].as_str().unwrap_or_default()
        )))
    }
}

/// An SSE body from chat-completion chunk objects, ending in `[DONE]`.
fn sse(chunks: &[Value]) -> String {
    let mut body = String::new();
    for chunk in chunks {
        body.push_str(&format!("data: {chunk}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    body
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    })
}

fn usage(prompt: u64, completion: u64) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})
}

async fn agent_on(server: &Server) -> (Harness, AgentHandle) {
    let model = OpenAiModel::builder("m")
        .base_url(server.base_url())
        .api_key(KEY.to_owned())
        .retry(RetryPolicy::never())
        .build()
        .unwrap();
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let harness = Harness::builder(store)
        .model(Arc::new(model))
        .tool(Arc::new(Echo))
        .unwrap()
        .build()
        .unwrap();
    let handle = harness
        .create(CreateAgent {
            header: SessionHeader::new(SessionId::new("lead").unwrap(), "/work/project"),
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
    (harness, handle)
}

async fn settle(agent: &Arc<dyn Agent>) {
    tokio::time::timeout(Duration::from_secs(10), agent.wait_idle())
        .await
        .expect("the agent did not become idle");
}

fn kinds(events: &[SessionEvent]) -> Vec<&str> {
    events.iter().map(|e| e.payload.kind()).collect()
}

fn turn_ends(events: &[SessionEvent]) -> Vec<(String, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::TurnEnd(end) => {
                Some((end.stop_reason.to_string(), end.diagnostic.clone()))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_streamed_tool_call_runs_and_its_result_goes_back_on_the_wire() {
    let call = sse(&[
        chunk(json!({"role": "assistant", "content": null}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_echo1", "type": "function",
                "function": {"name": "echo", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"text\""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": ": \"ping\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        usage(20, 9),
    ]);
    let answer = sse(&[
        chunk(json!({"content": "pong "}), None),
        chunk(json!({"content": "received"}), None),
        chunk(json!({}), Some("stop")),
        usage(40, 3),
    ]);
    let server =
        Server::start([Reply::Stream(events(&call)), Reply::Stream(events(&answer))]).await;
    let (_harness, handle) = agent_on(&server).await;
    let agent = handle.agent().clone();
    agent
        .followup(UserMessage::user_text("say ping"))
        .await
        .unwrap();
    settle(&agent).await;

    let log = agent.events();
    assert_eq!(
        kinds(&log),
        [
            "inbox/accepted",
            "turn/start",
            "user/message",
            "inbox/claimed",
            "step/start",
            "tool/call",
            "usage",
            "tool/result",
            "step/start",
            "assistant/message",
            "usage",
            "turn/end"
        ]
    );
    assert_eq!(turn_ends(&log), [("completed".to_owned(), None)]);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let second = requests[1].json();
    let messages = second["messages"].as_array().unwrap();
    // The arguments go back byte for byte as the model streamed them.
    assert_eq!(
        messages[messages.len() - 2..],
        [
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_echo1",
                "type": "function", "function": {"name": "echo", "arguments": "{\"text\": \"ping\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "call_echo1", "content": "echo: ping"}),
        ]
    );
    assert_eq!(second["tools"][0]["function"]["name"], "echo");
    handle.dispose().await;
}

#[tokio::test]
async fn a_failed_stream_ends_the_turn_as_error_with_a_keyless_diagnostic() {
    let body = fixture("error_midstream.sse").replace("{KEY}", KEY);
    let server = Server::start([Reply::Stream(events(&body))]).await;
    let (_harness, handle) = agent_on(&server).await;
    let agent = handle.agent().clone();
    agent.followup(UserMessage::user_text("hi")).await.unwrap();
    settle(&agent).await;
    let ends = turn_ends(&agent.events());
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0].0, "error");
    let diagnostic = ends[0].1.clone().unwrap();
    assert!(
        diagnostic.starts_with("API error: the server reported an error mid-stream"),
        "{diagnostic}"
    );
    assert_no_key(&diagnostic, &diagnostic);
    handle.dispose().await;
}

#[tokio::test]
async fn interrupting_the_agent_mid_stream_aborts_and_closes_the_connection() {
    let first = sse(&[chunk(json!({"content": "thinking"}), None)]);
    let first: Vec<Vec<u8>> = events(&first).into_iter().take(1).collect();
    let server = Server::start([Reply::StreamThenStall(first)]).await;
    let (_harness, handle) = agent_on(&server).await;
    let agent = handle.agent().clone();
    agent.followup(UserMessage::user_text("hi")).await.unwrap();
    server.wait_for_requests(1).await;
    agent.cancel(CancelCause::User, CancelOptions::default());
    server.closed().await;
    settle(&agent).await;
    assert_eq!(turn_ends(&agent.events()), [("aborted".to_owned(), None)]);
    handle.dispose().await;
}
