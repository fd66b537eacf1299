//! Fixtures shared by the harness integration tests: tools that record their
//! calls, a harness builder over either store, and log queries; waits and
//! request queries come from `dsh-test-support`.

#![allow(
    dead_code,
    unused_imports,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use dsh_core::{
    Agent, AgentHandle, CallId, CancellationToken, CreateAgent, EventPayload, ResumeAgent,
    SessionEvent, SessionHeader, SessionId, SessionStore, Tool, ToolContext, ToolError, ToolOutput,
};
use dsh_harness::{Harness, ScriptedModel};
pub use dsh_test_support::logs::stop_reasons;
pub use dsh_test_support::requests::{last_user_text, message_text};
pub use dsh_test_support::wait::{bounded, until};
use serde_json::{Value, json};

/// A tool that counts its executions and echoes its `text` argument.
pub struct Echo {
    pub name: &'static str,
    pub calls: AtomicUsize,
    pub end_turn: bool,
}

impl Echo {
    pub fn new(name: &'static str) -> Arc<Self> {
        Arc::new(Self {
            name,
            calls: AtomicUsize::new(0),
            end_turn: false,
        })
    }

    pub fn ending_turn(name: &'static str) -> Arc<Self> {
        Arc::new(Self {
            name,
            calls: AtomicUsize::new(0),
            end_turn: true,
        })
    }

    pub fn count(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        self.name
    }

    fn description(&self) -> String {
        format!("Echo `text` back ({}).", self.name)
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
        self.calls.fetch_add(1, Ordering::SeqCst);
        let text = input["text"].as_str().unwrap_or_default();
        Ok(ToolOutput {
            end_turn: self.end_turn,
            ..ToolOutput::text(format!("echo: {text}"))
        })
    }
}

pub fn id(text: &str) -> SessionId {
    SessionId::new(text).unwrap()
}

pub fn harness(store: Arc<dyn SessionStore>, model: Arc<ScriptedModel>) -> Harness {
    Harness::builder(store).model(model).build().unwrap()
}

pub fn create_spec(name: &str) -> CreateAgent {
    CreateAgent {
        header: SessionHeader::new(id(name), "/work/project"),
        seed: Vec::new(),
        setup: Default::default(),
        cancel: CancellationToken::new(),
    }
}

pub fn resume_spec(name: &str) -> ResumeAgent {
    ResumeAgent {
        id: id(name),
        setup: Default::default(),
        cancel: CancellationToken::new(),
    }
}

pub async fn create(harness: &Harness, name: &str) -> AgentHandle {
    use dsh_core::AgentFactory;
    harness.create(create_spec(name)).await.unwrap()
}

/// The event types of a log, in order.
pub fn kinds(events: &[SessionEvent]) -> Vec<String> {
    events.iter().map(|e| e.payload.kind().to_owned()).collect()
}

/// Wait until the agent is idle and has no driver, bounded so a bug fails
/// instead of hanging.
pub async fn settle(agent: &Arc<dyn Agent>) {
    bounded(agent.wait_idle()).await;
}

/// Send `text` as a follow-up, wait (bounded) until the agent is idle, and
/// return its log.
pub async fn turn(agent: &Arc<dyn Agent>, text: &str) -> Vec<SessionEvent> {
    agent
        .followup(dsh_core::UserMessage::user_text(text))
        .await
        .unwrap();
    bounded(agent.wait_idle()).await;
    agent.events()
}

/// Events carrying `payloads`, seqs from 0.
pub fn numbered(payloads: Vec<EventPayload>) -> Vec<SessionEvent> {
    payloads
        .into_iter()
        .enumerate()
        .map(|(seq, payload)| SessionEvent {
            seq: seq as u64,
            time: 0,
            payload,
        })
        .collect()
}

/// Every line of the JSONL file at `path` is a whole JSON value.
pub fn every_line_parses(path: &std::path::Path) {
    let text = std::fs::read_to_string(path).unwrap();
    for (n, line) in text.lines().enumerate() {
        serde_json::from_str::<Value>(line)
            .unwrap_or_else(|err| panic!("{}:{}: {err}: {line}", path.display(), n + 1));
    }
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{}: a torn last line",
        path.display()
    );
}

/// Every tool call has exactly one result, after it and before the turn's
/// end (B53): what every model API requires of a transcript.
pub fn assert_every_call_answered(events: &[SessionEvent], what: &str) {
    let mut open: Vec<&CallId> = Vec::new();
    for event in events {
        match &event.payload {
            EventPayload::ToolCall(call) => open.push(&call.call_id),
            EventPayload::ToolResult(result) => {
                let before = open.len();
                open.retain(|id| **id != result.call_id);
                assert_eq!(before, open.len() + 1, "{what}: a result without its call");
            }
            EventPayload::TurnEnd(_) | EventPayload::UserMessage(_) => {
                assert!(open.is_empty(), "{what}: calls left unanswered: {open:?}");
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "{what}: calls left unanswered: {open:?}");
}
