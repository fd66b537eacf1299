//! The offline demo's team scenario (`dsh run --team` with the demo
//! model): a [`ScriptedModel`] whose responder plays a lead and two
//! teammates over the real team service and tools, the real runtime and
//! the real JSONL logs. The lead puts three tasks on the board (the third
//! blocked by the other two), spawns `surveyor` and `reviewer`, and waits
//! for both to settle; each teammate claims its task, the surveyor sends
//! the reviewer its findings (a quiet peer message, delivered at once to
//! the waiting reviewer), the reviewer thanks the surveyor once it has
//! settled (so that message stays queued for it), and each completes its
//! task; the lead then claims the now ready third task, completes it and
//! summarises. Every result the agents see is a real tool result.
//!
//! As in the plain demo ([`crate::demo`]), the order in which things
//! become visible is fixed by gates that causally earlier events release
//! (the reviewer's decision to wait, the lead's first wait, the surveyor's
//! `subagent/end`, the lead seeing the surveyor's notice, the reviewer's
//! `subagent/end`),
//! never by timing, so the output and every log are the same on every
//! run. Nothing here sleeps, spawns a task or reads a clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use dsh_core::{Message, MessageSource, ModelRequest};
use dsh_harness::{Scripted, ScriptedModel};
use dsh_subagent::{SubagentEvent, SubagentRuntime};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::demo::{calls, child_name, first_time, last_tool, said, user_text};

/// The task the team demo's lead is given when the user names none.
pub const TEAM_DEMO_PROMPT: &str = "With a small team, write up this workspace: survey its crates, review the subagent runtime against the survey, then put the report together.";

/// The surveyor's first task (it identifies the surveyor in a request).
const SURVEY_PROMPT: &str = "You are the surveyor. Claim task-1, survey the workspace's crates, send reviewer your findings, then complete task-1.";

/// The reviewer's first task (it identifies the reviewer in a request).
const REVIEW_PROMPT: &str = "You are the reviewer. Claim task-2, wait for the surveyor's findings, review the subagent runtime against them, then complete task-2.";

/// The surveyor's peer message to the reviewer.
const FINDINGS: &str = "Findings: core holds the vocabulary, harness runs agents over JSONL logs, subagent owns every child from publication to settlement. Look hardest at that ownership.";

/// The reviewer's peer message back, sent once the surveyor has settled.
const THANKS: &str = "Thanks: reviewed the runtime against your findings; ownership holds up.";

/// Which agent a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Lead,
    Surveyor,
    Reviewer,
}

fn role(request: &ModelRequest) -> Role {
    if said(request, SURVEY_PROMPT) {
        Role::Surveyor
    } else if said(request, REVIEW_PROMPT) {
        Role::Reviewer
    } else {
        Role::Lead
    }
}

/// How many tool calls the agent made so far in the request's history.
fn calls_made(request: &ModelRequest) -> usize {
    request
        .messages
        .iter()
        .map(|message| match message {
            Message::Assistant { tool_calls, .. } => tool_calls.len(),
            _ => 0,
        })
        .sum()
}

/// How many settlement notices the request's history holds.
fn notices(request: &ModelRequest) -> usize {
    request
        .messages
        .iter()
        .filter_map(user_text)
        .filter(|(source, _)| matches!(source, MessageSource::SubagentSettled { .. }))
        .count()
}

/// A `team_task_update` call.
fn update(task: &str, revision: u64, action: &str) -> Scripted {
    calls(
        vec![(
            "team_task_update",
            json!({"task_id": task, "expected_revision": revision, "action": action}),
        )],
        None,
    )
}

/// A quiet peer message.
fn message(target: &str, text: &str) -> Scripted {
    calls(
        vec![("send_message", json!({"target": target, "message": text}))],
        None,
    )
}

/// An inbox wait that outlasts the demo.
fn wait(text: Option<&str>) -> Scripted {
    calls(vec![("wait", json!({ "timeout_ms": 600_000 }))], text)
}

/// The gates that fix what becomes visible when.
#[derive(Debug)]
struct Gates {
    /// Released when the reviewer decides to wait: the surveyor may send.
    reviewer_waiting: Arc<Semaphore>,
    reviewer_waiting_once: AtomicBool,
    /// Released when the lead, both teammates spawned, decides to wait: the
    /// surveyor may settle. Without it a loaded machine could let the
    /// surveyor settle while the lead's `spawn_teammate` for the reviewer
    /// was still returning; the lead then met the notice in its first wait
    /// request, never made the second that tells the reviewer to answer,
    /// and waited for the reviewer for ever.
    lead_waiting: Arc<Semaphore>,
    lead_waiting_once: AtomicBool,
    /// Released when the surveyor has settled: the reviewer may thank it
    /// (the message then stays queued for an inactive member).
    surveyor_gone: Arc<Semaphore>,
    /// Released when the surveyor has settled and the lead has seen its
    /// notice: the reviewer may answer.
    reviewer_go: Arc<Semaphore>,
    reviewer_marks: AtomicU8,
    surveyor_ended: AtomicBool,
    lead_saw_surveyor: AtomicBool,
    /// Released when the reviewer has settled: the lead may summarise.
    lead_final: Arc<Semaphore>,
}

impl Gates {
    fn new() -> Self {
        let closed = || Arc::new(Semaphore::new(0));
        Self {
            reviewer_waiting: closed(),
            reviewer_waiting_once: AtomicBool::new(false),
            lead_waiting: closed(),
            lead_waiting_once: AtomicBool::new(false),
            surveyor_gone: closed(),
            reviewer_go: closed(),
            reviewer_marks: AtomicU8::new(0),
            surveyor_ended: AtomicBool::new(false),
            lead_saw_surveyor: AtomicBool::new(false),
            lead_final: closed(),
        }
    }

    fn mark_reviewer(&self, flag: &AtomicBool) {
        if first_time(flag) && self.reviewer_marks.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
            self.reviewer_go.add_permits(1);
        }
    }
}

/// The team demo's scripted model and the gates it answers by.
#[derive(Debug, Clone)]
pub struct TeamDemo {
    gates: Arc<Gates>,
}

impl TeamDemo {
    /// The team demo as a first run plays it.
    pub fn new() -> Self {
        Self {
            gates: Arc::new(Gates::new()),
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

    /// Release the gates that wait on teammates settling.
    pub fn attach(&self, runtime: &SubagentRuntime) -> dsh_core::observe::Subscription {
        let gates = Arc::clone(&self.gates);
        let names = runtime.clone();
        runtime.events().listen(move |event| {
            if let SubagentEvent::End(info, _) = event {
                let name = child_name(&names, &info.parent_session_id, &info.child_id);
                match name.as_deref() {
                    Some("surveyor") => {
                        gates.surveyor_gone.add_permits(1);
                        gates.mark_reviewer(&gates.surveyor_ended);
                    }
                    Some("reviewer") => gates.lead_final.add_permits(1),
                    _ => {}
                }
            }
        })
    }

    fn gated(gate: &Arc<Semaphore>, then: Scripted) -> Scripted {
        Scripted::Gated {
            gate: Arc::clone(gate),
            then: Box::new(then),
        }
    }

    fn respond(&self, request: &ModelRequest) -> Scripted {
        match role(request) {
            Role::Surveyor => self.surveyor(request),
            Role::Reviewer => self.reviewer(request),
            Role::Lead => self.lead(request),
        }
    }

    fn surveyor(&self, request: &ModelRequest) -> Scripted {
        match calls_made(request) {
            0 => update("task-1", 1, "claim"),
            1 => Self::gated(
                &self.gates.reviewer_waiting,
                message("reviewer", FINDINGS),
            ),
            2 => update("task-1", 2, "complete"),
            _ => Self::gated(
                &self.gates.lead_waiting,
                Scripted::Text(
                    "Surveyed: `core` is the vocabulary, `harness` the loop and the JSONL store, `subagent` the runtime that owns children; the reviewer has my findings and task-1 is complete.".to_owned(),
                ),
            ),
        }
    }

    fn reviewer(&self, request: &ModelRequest) -> Scripted {
        match calls_made(request) {
            0 => update("task-2", 1, "claim"),
            1 => {
                if first_time(&self.gates.reviewer_waiting_once) {
                    self.gates.reviewer_waiting.add_permits(1);
                }
                wait(Some("Waiting for the surveyor's findings."))
            }
            2 => Self::gated(
                &self.gates.surveyor_gone,
                message("surveyor", THANKS),
            ),
            3 => update("task-2", 2, "complete"),
            _ => Self::gated(
                &self.gates.reviewer_go,
                Scripted::Text(
                    "Reviewed: the runtime owns each child from its catalog entry to its settlement, as the survey says; task-2 is complete.".to_owned(),
                ),
            ),
        }
    }

    fn lead(&self, request: &ModelRequest) -> Scripted {
        let task = |subject: &str, description: &str, blocked_by: &[&str], scope: &str| {
            calls(
                vec![(
                    "team_task_create",
                    json!({
                        "subject": subject,
                        "description": description,
                        "blocked_by": blocked_by,
                        "write_scopes": [scope],
                    }),
                )],
                None,
            )
        };
        let spawn = |name: &str, description: &str, prompt: &str| {
            calls(
                vec![(
                    "spawn_teammate",
                    json!({"name": name, "description": description, "prompt": prompt}),
                )],
                None,
            )
        };
        match calls_made(request) {
            0 => {
                return calls(
                    vec![(
                        "team_task_create",
                        json!({
                            "subject": "Survey the crates",
                            "description": "What each crate of the workspace is for.",
                            "write_scopes": ["docs/survey.md"],
                        }),
                    )],
                    Some("I'll put three tasks on the board and give the first two to teammates."),
                );
            }
            1 => {
                return task(
                    "Review the subagent runtime",
                    "Check the runtime's ownership of a child against the survey.",
                    &[],
                    "docs/review.md",
                );
            }
            2 => {
                return task(
                    "Write the report",
                    "Put the survey and the review together.",
                    &["task-1", "task-2"],
                    "docs",
                );
            }
            3 => return spawn("surveyor", "survey the crates", SURVEY_PROMPT),
            4 => return spawn("reviewer", "review the runtime", REVIEW_PROMPT),
            5 => {
                if first_time(&self.gates.lead_waiting_once) {
                    self.gates.lead_waiting.add_permits(1);
                }
                return wait(None);
            }
            _ => {}
        }
        match last_tool(request).as_deref() {
            Some("wait") if notices(request) >= 2 => update("task-3", 1, "claim"),
            Some("wait") => {
                self.gates.mark_reviewer(&self.gates.lead_saw_surveyor);
                wait(Some("The surveyor is done; waiting for the reviewer."))
            }
            Some("team_task_update") if calls_made(request) == 8 => update("task-3", 2, "complete"),
            _ => Self::gated(
                &self.gates.lead_final,
                Scripted::Text(
                    "Report: the workspace layers a pure vocabulary (`core`) under the agent loop and its logs (`harness`) and the subagent runtime, which owns each child from publication to settlement. The surveyor's findings and the reviewer's check agree; all three tasks are complete.".to_owned(),
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use dsh_core::{CallId, ContentBlock, Transcript};

    use super::*;

    /// A request of the agent whose task prompt is `prompt`, after `calls`
    /// tool calls.
    fn request(prompt: &str, calls: usize) -> ModelRequest {
        let mut messages = vec![Message::User {
            content: vec![ContentBlock::text(prompt)],
            source: MessageSource::User,
        }];
        messages.extend((0..calls).map(|n| Message::Assistant {
            content: Vec::new(),
            tool_calls: vec![dsh_core::ToolCall {
                call_id: CallId::new(format!("call-{n}")),
                name: "team_task_update".into(),
                input: json!({}).into(),
            }],
        }));
        ModelRequest {
            model: None,
            system: String::new(),
            messages: Transcript::from(messages),
            tools: Vec::new(),
            max_output_tokens: None,
            reasoning_effort: None,
        }
    }

    // The hang a loaded CI machine found: the surveyor's last answer (whose
    // end sends the lead its notice) waits until the lead, both teammates
    // spawned, has decided to wait, so the notice never lands in the step
    // that spawns the reviewer.
    #[test]
    fn the_surveyor_settles_only_once_the_lead_waits() {
        let demo = TeamDemo::new();
        let Scripted::Gated { gate, .. } = demo.respond(&request(SURVEY_PROMPT, 3)) else {
            panic!("the surveyor's last answer is not gated");
        };
        assert_eq!(gate.available_permits(), 0);
        // The lead spawning the reviewer releases nothing.
        demo.respond(&request(TEAM_DEMO_PROMPT, 4));
        assert_eq!(gate.available_permits(), 0);
        demo.respond(&request(TEAM_DEMO_PROMPT, 5));
        assert_eq!(gate.available_permits(), 1);
        // Asked again (a retried request), it releases no second permit.
        demo.respond(&request(TEAM_DEMO_PROMPT, 5));
        assert_eq!(gate.available_permits(), 1);
    }
}
