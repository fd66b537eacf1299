//! The offline demo: a [`ScriptedModel`] whose responder plays the lead and
//! both children by reading each request, so a newcomer sees every part work
//! without a key or a network. The lead delegates two tasks in the
//! background (`subagent` starts the spawn child `researcher`, `fork` the
//! fork child `reviewer`), lists its agents, messages `researcher` by name,
//! waits for both settlement notices and summarises. The researcher waits
//! (with `wait`) for the lead's message before it answers; the reviewer
//! answers once the researcher has settled.
//!
//! The children really run at the same time, but the order in which things
//! become visible is fixed by gates, never by timing: a scripted response
//! may wait on a semaphore that a causally earlier event releases (the
//! researcher's first request, the lead's decision to wait, a child's
//! `subagent/end`). So the demo's output and every log it writes are the
//! same on every run. Nothing here sleeps, spawns a task or reads a clock.
//!
//! Later sessions over the same logs (`dsh send`) use the same responder
//! without gates: every agent answers a user's message directly, and the
//! lead acknowledges a notice that arrives in a later turn, also when a
//! crash cut the agent's last turn short (its history then ends in a tool
//! result, never in an answer): a resumed agent never replays the first
//! run's script (it would wait for a message no one sends).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use dsh_core::content::joined_text;
use dsh_core::{Message, MessageSource, ModelRequest};
use dsh_harness::{Scripted, ScriptedModel};
use dsh_subagent::{SubagentEvent, SubagentRuntime};
use serde_json::json;
use tokio::sync::Semaphore;

/// The task the demo's lead is given when the user names none.
pub const DEMO_PROMPT: &str = "Give me a short report on this workspace: what its crates do and whether the delegation design holds up.";

/// The spawn child's task (it identifies the researcher in a request).
pub const RESEARCH_PROMPT: &str =
    "Survey the workspace's crates and say in two sentences what each layer is for.";

/// The fork child's task (it identifies the reviewer in a request).
pub const REVIEW_PROMPT: &str = "Review the plan so far: is splitting this report between a fresh researcher and a forked reviewer sound?";

/// What the lead tells the researcher by name.
const FOCUS_MESSAGE: &str =
    "Focus on the subagent runtime: who owns a child, and when is it settled?";

/// Which agent a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Lead,
    Researcher,
    Reviewer,
}

pub(crate) fn user_text(message: &Message) -> Option<(&MessageSource, String)> {
    match message {
        Message::User { content, source } => Some((source, joined_text(content))),
        _ => None,
    }
}

/// Whether a user-role message of the request says exactly `prompt` (a
/// child's task names the child).
pub(crate) fn said(request: &ModelRequest, prompt: &str) -> bool {
    request
        .messages
        .iter()
        .filter_map(user_text)
        .any(|(_, text)| text == prompt)
}

fn role(request: &ModelRequest) -> Role {
    if said(request, RESEARCH_PROMPT) {
        Role::Researcher
    } else if said(request, REVIEW_PROMPT) {
        Role::Reviewer
    } else {
        Role::Lead
    }
}

/// The name of the tool whose result is the request's latest tool result.
pub(crate) fn last_tool(request: &ModelRequest) -> Option<String> {
    let call_id = request.messages.iter().rev().find_map(|m| match m {
        Message::Tool { call_id, .. } => Some(call_id.clone()),
        _ => None,
    })?;
    request.messages.iter().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } => tool_calls
            .iter()
            .find(|call| call.call_id == call_id)
            .map(|call| call.name.clone()),
        _ => None,
    })
}

/// Whether the request opens a new turn after an earlier one ended: its last
/// message is user input and the message before that input is the model's
/// final answer (an assistant message without tool calls).
fn later_turn(request: &ModelRequest) -> bool {
    let before_input = request
        .messages
        .iter()
        .rev()
        .find(|m| !matches!(m, Message::User { .. }));
    matches!(request.messages.last(), Some(Message::User { .. }))
        && matches!(before_input, Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty())
}

/// The text of the latest message the user wrote, when it is the last
/// message and not the agent's first: a follow-up after a turn that ended,
/// or after one a crash cut short (whose history ends in a tool result).
fn user_follow_up(request: &ModelRequest) -> Option<String> {
    let first_user = request
        .messages
        .iter()
        .position(|m| matches!(m, Message::User { .. }));
    let last = request.messages.len().checked_sub(1)?;
    match request.messages.last().and_then(user_text) {
        Some((MessageSource::User, text)) if later_turn(request) || first_user < Some(last) => {
            Some(text)
        }
        _ => None,
    }
}

pub(crate) fn calls(calls: Vec<(&str, serde_json::Value)>, text: Option<&str>) -> Scripted {
    Scripted::ToolCalls {
        text: text.map(str::to_owned),
        calls: calls
            .into_iter()
            .map(|(name, input)| (name.to_owned(), input))
            .collect(),
    }
}

/// A one-shot flag.
pub(crate) fn first_time(flag: &AtomicBool) -> bool {
    !flag.swap(true, Ordering::SeqCst)
}

/// The gates that fix what becomes visible when.
#[derive(Debug)]
struct Gates {
    /// Released by the researcher's first request: the lead may message it.
    researcher_ready: Arc<Semaphore>,
    researcher_ready_once: AtomicBool,
    /// Released when the lead decides to wait: the researcher may answer.
    researcher_go: Arc<Semaphore>,
    researcher_go_once: AtomicBool,
    /// Released when both the researcher has settled and the lead has seen
    /// its notice: the reviewer may answer.
    reviewer_go: Arc<Semaphore>,
    reviewer_marks: AtomicU8,
    researcher_ended: AtomicBool,
    lead_saw_researcher: AtomicBool,
    /// Released when the reviewer has settled: the lead may summarise.
    lead_final: Arc<Semaphore>,
}

impl Default for Gates {
    fn default() -> Self {
        let closed = || Arc::new(Semaphore::new(0));
        Self {
            researcher_ready: closed(),
            researcher_ready_once: AtomicBool::new(false),
            researcher_go: closed(),
            researcher_go_once: AtomicBool::new(false),
            reviewer_go: closed(),
            reviewer_marks: AtomicU8::new(0),
            researcher_ended: AtomicBool::new(false),
            lead_saw_researcher: AtomicBool::new(false),
            lead_final: closed(),
        }
    }
}

impl Gates {
    fn mark_reviewer(&self, flag: &AtomicBool) {
        if first_time(flag) && self.reviewer_marks.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
            self.reviewer_go.add_permits(1);
        }
    }
}

/// The demo's scripted model and, for a first run, the gates it answers by.
#[derive(Debug, Clone)]
pub struct Demo {
    gates: Option<Arc<Gates>>,
}

impl Demo {
    /// The demo as a first run plays it (gated), or as later sessions over
    /// its logs do (ungated).
    pub fn new(gated: bool) -> Self {
        Self {
            gates: gated.then(Arc::default),
        }
    }

    /// The model.
    pub fn model(&self) -> Arc<ScriptedModel> {
        let demo = self.clone();
        Arc::new(
            ScriptedModel::new()
                .named("demo")
                .without_recording()
                .responder(move |request| demo.respond(request)),
        )
    }

    /// Release the gates that wait on children settling.
    pub fn attach(&self, runtime: &SubagentRuntime) -> Option<dsh_core::observe::Subscription> {
        let gates = self.gates.clone()?;
        let names = runtime.clone();
        Some(runtime.events().listen(move |event| {
            if let SubagentEvent::End(info, _) = event {
                // Settled activations have left the runtime; their name is
                // the catalog's. Only the demo's two children matter here.
                let name = child_name(&names, &info.parent_session_id, &info.child_id);
                match name.as_deref() {
                    Some("researcher") => gates.mark_reviewer(&gates.researcher_ended),
                    Some("reviewer") => gates.lead_final.add_permits(1),
                    _ => {}
                }
            }
        }))
    }

    /// Hold `then` behind `gate` on a first run.
    fn gated(&self, gate: impl Fn(&Gates) -> &Arc<Semaphore>, then: Scripted) -> Scripted {
        match &self.gates {
            Some(gates) => Scripted::Gated {
                gate: gate(gates).clone(),
                then: Box::new(then),
            },
            None => then,
        }
    }

    fn with_gates(&self, f: impl FnOnce(&Gates)) {
        if let Some(gates) = &self.gates {
            f(gates);
        }
    }

    fn respond(&self, request: &ModelRequest) -> Scripted {
        match role(request) {
            Role::Researcher => self.researcher(request),
            Role::Reviewer => self.reviewer(request),
            Role::Lead => self.lead(request),
        }
    }

    fn researcher(&self, request: &ModelRequest) -> Scripted {
        if let Some(text) = user_follow_up(request) {
            return Scripted::Text(format!(
                "You asked: \"{}\". From my survey: `core` holds the vocabulary and seams, `harness` runs agents over JSONL logs, `subagent` owns every child from publication to settlement, and the tool crates turn that into tools a model can call.",
                text.trim()
            ));
        }
        let told = request
            .messages
            .iter()
            .filter_map(user_text)
            .any(|(source, text)| {
                matches!(source, MessageSource::AgentMessage { .. }) && text == FOCUS_MESSAGE
            });
        if told {
            return self.gated(
                |g| &g.researcher_go,
                Scripted::Text(
                    "The workspace layers cleanly: `core` defines sessions, agents and tools without I/O; `harness` runs agents over durable JSONL logs; `subagent` checks, starts and settles children; `subagent-spawn` and `subagent-fork` provide fresh and forked children; the tool crates expose all of it to models. On your focus: the runtime owns a child from the moment its catalog entry is written, and settles it once the child is idle with no children of its own, sending the parent a notice before teardown.".to_owned(),
                ),
            );
        }
        self.with_gates(|gates| {
            if first_time(&gates.researcher_ready_once) {
                gates.researcher_ready.add_permits(1);
            }
        });
        calls(
            vec![("wait", json!({ "timeout_ms": 600_000 }))],
            Some("Before I write this up, I'll wait a moment in case the lead narrows the task."),
        )
    }

    fn reviewer(&self, request: &ModelRequest) -> Scripted {
        if let Some(text) = user_follow_up(request) {
            return Scripted::Text(format!(
                "You asked: \"{}\". My review stands: the split is sound because the researcher starts clean while I keep the lead's context.",
                text.trim()
            ));
        }
        self.gated(
            |g| &g.reviewer_go,
            Scripted::Text(
                "The split is sound: a fresh researcher gives an unbiased survey, while a forked reviewer shares the lead's context and can judge the plan itself. One risk: both answers arrive as notices, so the lead must wait for both before summarising.".to_owned(),
            ),
        )
    }

    fn lead(&self, request: &ModelRequest) -> Scripted {
        // Later sessions answer any new input at once, also after a turn a
        // crash cut short: the first run's script is never replayed.
        let resumed = self.gates.is_none()
            && matches!(request.messages.last(), Some(Message::User { .. }))
            && request
                .messages
                .iter()
                .any(|m| matches!(m, Message::Assistant { .. }));
        if resumed || (later_turn(request) && last_tool(request).is_some()) {
            // A later turn: a user's follow-up, or a notice after the summary.
            let said = request
                .messages
                .last()
                .and_then(user_text)
                .map(|(_, text)| text)
                .unwrap_or_default();
            let first = said.lines().next().unwrap_or_default().trim().to_owned();
            return Scripted::Text(format!("Noted: {first}"));
        }
        match last_tool(request).as_deref() {
            None => calls(
                vec![(
                    "subagent",
                    json!({
                        "description": "survey the crates",
                        "name": "researcher",
                        "prompt": RESEARCH_PROMPT,
                    }),
                )],
                Some(
                    "I'll split this in two: a fresh researcher surveys the crates, and a forked reviewer checks the plan.",
                ),
            ),
            Some("subagent") => calls(
                vec![(
                    "fork",
                    json!({
                        "description": "review the plan",
                        "name": "reviewer",
                        "prompt": REVIEW_PROMPT,
                    }),
                )],
                None,
            ),
            Some("fork") => calls(vec![("list_agents", json!({}))], None),
            Some("list_agents") => self.gated(
                |g| &g.researcher_ready,
                calls(
                    vec![(
                        "send_message",
                        json!({ "to": "researcher", "message": FOCUS_MESSAGE }),
                    )],
                    None,
                ),
            ),
            Some("send_message") => {
                self.with_gates(|gates| {
                    if first_time(&gates.researcher_go_once) {
                        gates.researcher_go.add_permits(1);
                    }
                });
                calls(vec![("wait", json!({ "timeout_ms": 600_000 }))], None)
            }
            Some(_) => {
                let notices = request
                    .messages
                    .iter()
                    .filter_map(user_text)
                    .filter(|(source, _)| matches!(source, MessageSource::SubagentSettled { .. }))
                    .count();
                if notices >= 2 {
                    self.gated(
                        |g| &g.lead_final,
                        Scripted::Text(
                            "Summary: the workspace is layered from a pure vocabulary (`core`) through the agent loop (`harness`) to the subagent runtime and its providers, with tools on top. The researcher confirmed the runtime owns each child from publication to settlement; the reviewer judged the fresh-plus-forked split sound, with the caveat that both notices must be awaited, which they were.".to_owned(),
                        ),
                    )
                } else {
                    if notices == 1 {
                        self.with_gates(|gates| gates.mark_reviewer(&gates.lead_saw_researcher));
                    }
                    calls(
                        vec![("wait", json!({ "timeout_ms": 600_000 }))],
                        Some("One answer is in; waiting for the other."),
                    )
                }
            }
        }
    }
}

/// A settled child's name from its parent's catalog, read from the live
/// parent (the demo's children are the lead's, which stays live).
pub(crate) fn child_name(
    runtime: &SubagentRuntime,
    parent: &dsh_core::SessionId,
    child: &dsh_core::SessionId,
) -> Option<String> {
    let parent = runtime.registry().get(parent)?;
    let catalog = dsh_subagent::fold_catalog(parent.header(), &parent.events()).ok()?;
    catalog.get(child).and_then(|entry| entry.name.clone())
}
