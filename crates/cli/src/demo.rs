//! The offline demo: a [`ScriptedModel`] whose responder plays the lead and
//! both children by reading each request, so a newcomer sees every part work
//! without a key or a network. The lead delegates two tasks in the
//! background (`subagent` starts the spawn child `researcher`, `fork` the
//! fork child `reviewer`), lists its agents, messages `researcher` by name,
//! waits for both settlement notices and summarises. The researcher waits
//! (with `wait`) for the lead's message, then greps the workspace it runs
//! in for Markdown headings and reads the first file that has one; the
//! reviewer reads the workspace's `README.md`; both answer from what the
//! real workspace tools returned, and the lead's summary quotes them. Only
//! the model is scripted: its words are fixed and it never reads the task
//! (a typed prompt is still the lead's task, and the first thing the lead
//! says is that the script does not follow it).
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
pub const DEMO_PROMPT: &str = "Give me a short report on this workspace: what its documents are about and whether splitting the work between two agents holds up.";

/// What the researcher greps for: Markdown headings.
const HEADINGS: &str = "^#+ ";

/// The spawn child's task (it identifies the researcher in a request).
pub const RESEARCH_PROMPT: &str =
    "Search the workspace's Markdown files for headings and read the first file that has one.";

/// The fork child's task (it identifies the reviewer in a request).
pub const REVIEW_PROMPT: &str = "Review the plan so far: is splitting this report between a fresh researcher and a forked reviewer sound?";

/// What the lead tells the researcher by name.
const FOCUS_MESSAGE: &str = "Focus on the documents: what do their headings say?";

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

/// The text of the request's latest tool result.
fn last_result(request: &ModelRequest) -> String {
    request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(joined_text(content)),
            _ => None,
        })
        .unwrap_or_default()
}

/// The grep result's `path:line:text` matches: the files, in order.
fn matched_files(result: &str) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for line in result.lines() {
        let Some((path, rest)) = line.split_once(':') else {
            continue;
        };
        let numbered = rest
            .split_once(':')
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if numbered && !files.iter().any(|f| f == path) {
            files.push(path.to_owned());
        }
    }
    files
}

/// The first line of a `read_file` result's text (its lines are numbered
/// `   1\ttext`), or the result itself when it is a refusal.
fn first_line(result: &str) -> String {
    let line = result.lines().next().unwrap_or_default();
    let text = line.split_once('\t').map_or(line, |(_, text)| text);
    crate::observe::compact(text, 80)
}

/// A settlement notice's body (after its heading), on one bounded line.
fn gist(notice: &str) -> String {
    let body = notice.split_once("\n\n").map_or(notice, |(_, body)| body);
    crate::observe::compact(body, 240)
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
    /// Whether it plays the first run's script (else it answers any new
    /// input at once, as later sessions over its logs do).
    first_run: bool,
}

impl Demo {
    /// The demo as a first run plays it (gated), or as later sessions over
    /// its logs do (ungated).
    pub fn new(gated: bool) -> Self {
        Self {
            gates: gated.then(Arc::default),
            first_run: gated,
        }
    }

    /// The first run's script without its gates: a worker's, where each
    /// agent's turns run on the cluster and no local runtime can release
    /// the gates (the order of what arrives is then the cluster's).
    #[cfg(feature = "restate")]
    pub fn ungated_first_run() -> Self {
        Self {
            gates: None,
            first_run: true,
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
                "You asked: \"{}\". I am the demo's scripted researcher: all I did was grep this workspace's Markdown headings and read the first file that had one, as my report says.",
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
            return match last_tool(request).as_deref() {
                // Told what to focus on: search the real workspace.
                Some("wait") => self.gated(
                    |g| &g.researcher_go,
                    calls(
                        vec![("grep", json!({ "pattern": HEADINGS, "globs": ["*.md"] }))],
                        Some("Searching the workspace's Markdown files for headings."),
                    ),
                ),
                Some("grep") => {
                    let grep = last_result(request);
                    match matched_files(&grep).first() {
                        Some(file) => calls(
                            vec![("read_file", json!({ "path": file, "line_count": 5 }))],
                            None,
                        ),
                        None => Scripted::Text(format!(
                            "grep found no Markdown heading in this workspace (it said: \"{}\"), so there is nothing for me to read.",
                            crate::observe::compact(&grep, 120)
                        )),
                    }
                }
                _ => {
                    let headings = request
                        .messages
                        .iter()
                        .filter_map(|m| match m {
                            Message::Tool { content, .. } => Some(joined_text(content)),
                            _ => None,
                        })
                        .find(|text| !matched_files(text).is_empty())
                        .unwrap_or_default();
                    let files = matched_files(&headings);
                    let count = headings
                        .lines()
                        .filter(|line| !matched_files(line).is_empty())
                        .count();
                    Scripted::Text(format!(
                        "grep found {count} Markdown heading(s) in {} file(s) ({}). The first, {}, begins: \"{}\".",
                        files.len(),
                        files.join(", "),
                        files.first().map(String::as_str).unwrap_or("-"),
                        first_line(&last_result(request))
                    ))
                }
            };
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
        if last_tool(request).as_deref() != Some("read_file") {
            return calls(
                vec![("read_file", json!({ "path": "README.md", "line_count": 5 }))],
                Some("Checking the workspace's README first."),
            );
        }
        let readme = last_result(request);
        let seen = if readme.trim_start().starts_with("1\t") {
            format!("its README begins \"{}\"", first_line(&readme))
        } else {
            format!(
                "it has no README I can read ({})",
                crate::observe::compact(&readme, 100)
            )
        };
        self.gated(
            |g| &g.reviewer_go,
            Scripted::Text(format!(
                "The split is sound: a fresh researcher searches without bias, while I share the lead's context and can judge the plan; {seen}. One risk: both answers arrive as notices, so the lead must wait for both before summarising."
            )),
        )
    }

    fn lead(&self, request: &ModelRequest) -> Scripted {
        // Later sessions answer any new input at once, also after a turn a
        // crash cut short: the first run's script is never replayed.
        let resumed = !self.first_run
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
                        "description": "search the documents",
                        "name": "researcher",
                        "prompt": RESEARCH_PROMPT,
                    }),
                )],
                Some(
                    "(Offline demo: my words are scripted and do not follow your task; the tools are real.) I'll split this in two: a fresh researcher searches the workspace, and a forked reviewer checks the plan.",
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
                    let heard = |name: &str| {
                        request
                            .messages
                            .iter()
                            .filter_map(user_text)
                            .find(|(source, text)| {
                                matches!(source, MessageSource::SubagentSettled { .. })
                                    && text.starts_with(&format!("[{name} "))
                            })
                            .map(|(_, text)| gist(&text))
                            .unwrap_or_default()
                    };
                    self.gated(
                        |g| &g.lead_final,
                        Scripted::Text(format!(
                            "Summary: the researcher reports: {} The reviewer: {} Both notices were awaited before this summary.",
                            heard("researcher"),
                            heard("reviewer")
                        )),
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
