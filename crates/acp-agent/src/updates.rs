//! One session's `session/update` notifications, made from what its tree
//! does: the events its agents' logs accepted, and the runtime's start and
//! end of each child. The lead's events go to the root session; each
//! child's to a session of its own whose id is the child's id. A child's
//! start is announced on its creator's session (`subagent_update`, with
//! `_meta.dsh.parentSessionId` and `toolCallId`) and linked to the
//! creator's open tool call that started it: the call's content gains a
//! `session` reference to the child and its `_meta.dsh.run` the child's
//! run info, and the call stays `in_progress` until the child settles,
//! when it is closed with the child's result. A client that knows nothing
//! of child sessions sees, on the root session, tool calls that start
//! children and finish with their results. An external (ACP) child has
//! no log: its progress ([`Updates::progressed`]) streams on its session.
//!
//! Past 800 lines with its tests: the tests drive one `Updates` through
//! whole child lives (and a property of them), which need its private
//! collecting sink.
//!
//! Notifications are sent in the order the calls here are made (the
//! connection queues them): a host that calls from one thread, in the
//! order its tree caused the events, gives the client that order.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    self as acp, ContentChunk, SessionNotification, SessionReference, SessionUpdate,
    SubagentUpdate, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind, UsageUpdate,
};
use dsh_core::{ContentBlock, EventPayload, SessionEvent, SessionId};
use dsh_subagent::{ProgressKind, RunInfo, RunOutcome};
use serde_json::{Value, json};

/// The longest tool call title, in characters.
const TITLE_CHARS: usize = 120;

/// A session's updates; cheap to clone, every clone the same session.
#[derive(Clone)]
pub struct Updates {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where notifications go; `None` collects them (tests).
    to: Sink,
    state: Mutex<State>,
    /// Woken at each announcement of a child.
    announced: tokio::sync::Notify,
}

enum Sink {
    Client(ConnectionTo<Client>),
    #[cfg(test)]
    Collect(Mutex<Vec<SessionNotification>>),
}

/// An open tool call of some session.
struct Open {
    call_id: String,
    /// The child it started, once linked.
    child: Option<SessionId>,
}

#[derive(Default)]
struct State {
    root: Option<SessionId>,
    /// Every started member's path of names.
    names: HashMap<SessionId, String>,
    /// Each session's tool calls without a result yet.
    open: HashMap<SessionId, Vec<Open>>,
    /// A child's creator and the call that started it, until it settles.
    links: HashMap<SessionId, (SessionId, String)>,
    /// Children that settled (a foreground call's result comes after).
    ended: HashSet<SessionId>,
    /// Updates of children not yet announced (a child's log is written
    /// before the runtime says it started), sent right after the
    /// announcement.
    unannounced: HashMap<SessionId, Vec<SessionUpdate>>,
}

impl Updates {
    /// The updates of a session on `connection`.
    pub(crate) fn new(connection: ConnectionTo<Client>) -> Self {
        Self::over(Sink::Client(connection))
    }

    fn over(to: Sink) -> Self {
        Self {
            inner: Arc::new(Inner {
                to,
                state: Mutex::new(State::default()),
                announced: tokio::sync::Notify::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Send `update` on `session`, or hold it until the child `session`
    /// is announced.
    fn emit(&self, session: &SessionId, update: SessionUpdate) {
        {
            let mut state = self.state();
            if state.root.as_ref() != Some(session) && !state.names.contains_key(session) {
                state
                    .unannounced
                    .entry(session.clone())
                    .or_default()
                    .push(update);
                return;
            }
        }
        self.send(session, update);
    }

    fn send(&self, session: &SessionId, update: SessionUpdate) {
        let notification = SessionNotification::new(session.to_string(), update);
        match &self.inner.to {
            Sink::Client(connection) => {
                if let Err(err) = connection.send_notification(notification) {
                    tracing::debug!("a session update was not sent: {err}");
                }
            }
            #[cfg(test)]
            Sink::Collect(sent) => sent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(notification),
        }
    }

    /// The tree's root: the session's own id.
    pub fn root(&self, id: &SessionId) {
        self.state().root = Some(id.clone());
    }

    /// `id`'s path of names (`lead` for the root), else its id.
    pub fn name_of(&self, id: &SessionId) -> String {
        let state = self.state();
        if state.root.as_ref() == Some(id) {
            return dsh_subagent::ROOT_NAME.to_owned();
        }
        state
            .names
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.to_string())
    }

    /// Whether `id` is the root or an announced child.
    fn known(&self, id: &SessionId) -> bool {
        let state = self.state();
        state.root.as_ref() == Some(id) || state.names.contains_key(id)
    }

    /// Wait until `id` is the root or an announced child (a child runs,
    /// and may ask, before the runtime says it started).
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub(crate) async fn announced(&self, id: &SessionId) {
        loop {
            let notified = self.inner.announced.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.known(id) {
                return;
            }
            notified.await;
        }
    }

    /// The open call ids of `agent`, newest last.
    pub(crate) fn open_calls(&self, agent: &SessionId) -> Vec<String> {
        self.state()
            .open
            .get(agent)
            .map(|open| open.iter().map(|open| open.call_id.clone()).collect())
            .unwrap_or_default()
    }

    /// Events `session`'s log accepted while the tree runs. The root's
    /// user messages are the client's own prompts and are not echoed.
    pub fn logged(&self, session: &SessionId, events: &[SessionEvent]) {
        let echo = self.state().root.as_ref() != Some(session);
        self.events(session, events, echo);
    }

    /// Events of `session`'s log replayed for `session/load`, user messages
    /// included.
    pub fn replayed(&self, session: &SessionId, events: &[SessionEvent]) {
        self.events(session, events, true);
    }

    fn events(&self, session: &SessionId, events: &[SessionEvent], users: bool) {
        for event in events {
            match &event.payload {
                EventPayload::UserMessage(entry) if users => {
                    for block in &entry.message.content {
                        self.emit(
                            session,
                            SessionUpdate::UserMessageChunk(ContentChunk::new(block_of(block))),
                        );
                    }
                }
                EventPayload::AssistantMessage(entry) => {
                    for block in &entry.content {
                        self.emit(
                            session,
                            SessionUpdate::AgentMessageChunk(ContentChunk::new(block_of(block))),
                        );
                    }
                }
                EventPayload::ToolCall(call) => {
                    let input: Value =
                        serde_json::from_str(call.input.get()).unwrap_or(Value::Null);
                    self.state()
                        .open
                        .entry(session.clone())
                        .or_default()
                        .push(Open {
                            call_id: call.call_id.to_string(),
                            child: None,
                        });
                    self.emit(
                        session,
                        SessionUpdate::ToolCall(
                            acp::ToolCall::new(call.call_id.to_string(), title(&call.name, &input))
                                .kind(kind(&call.name))
                                .status(ToolCallStatus::InProgress)
                                .raw_input(input),
                        ),
                    );
                }
                EventPayload::ToolResult(result) => self.tool_result(session, result),
                EventPayload::Usage(usage) => {
                    let meta = json!({ "dsh": { "usage": usage } });
                    self.emit(
                        session,
                        SessionUpdate::UsageUpdate(
                            UsageUpdate::new(usage.input_tokens + usage.output_tokens, 0)
                                .meta(meta.as_object().cloned()),
                        ),
                    );
                }
                _ => {}
            }
        }
    }

    fn tool_result(&self, session: &SessionId, result: &dsh_core::session::ToolResultEntry) {
        let call_id = result.call_id.to_string();
        let keep_status = {
            let mut state = self.state();
            let State {
                open, ended, links, ..
            } = &mut *state;
            let calls = open.entry(session.clone()).or_default();
            // A call its child's settlement closed already keeps its status.
            let closed = !calls.iter().any(|open| open.call_id == call_id);
            let child = calls
                .iter()
                .find(|open| open.call_id == call_id)
                .and_then(|open| open.child.clone());
            // A background child's call stays open until it settles.
            let keep_status = closed
                || child
                    .as_ref()
                    .is_some_and(|child| !ended.contains(child) && links.contains_key(child));
            if !keep_status {
                calls.retain(|open| open.call_id != call_id);
            }
            keep_status
        };
        let text = dsh_core::content::joined_text(&result.content);
        let mut fields = ToolCallUpdateFields::new()
            .content(vec![ToolCallContent::from(acp::ContentBlock::Text(
                acp::TextContent::new(text),
            ))])
            .raw_output(json!({ "isError": result.is_error }));
        if !keep_status {
            fields = fields.status(if result.is_error {
                ToolCallStatus::Failed
            } else {
                ToolCallStatus::Completed
            });
        }
        self.emit(
            session,
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call_id, fields)),
        );
    }

    /// An external (ACP) child's progress as it comes: its text and
    /// thoughts as chunks, its tool calls opened and closed, on its own
    /// session (held until its announcement). A local child's progress
    /// is not given here: its log's events are.
    pub fn progressed(&self, child: &SessionId, kind: &ProgressKind) {
        let update = match kind {
            ProgressKind::TextDelta { text } => SessionUpdate::AgentMessageChunk(
                ContentChunk::new(acp::ContentBlock::from(text.clone())),
            ),
            ProgressKind::Thought { text } => SessionUpdate::AgentThoughtChunk(ContentChunk::new(
                acp::ContentBlock::from(text.clone()),
            )),
            ProgressKind::ToolCallStarted { id, name } => SessionUpdate::ToolCall(
                acp::ToolCall::new(id.clone(), name.clone()).status(ToolCallStatus::InProgress),
            ),
            ProgressKind::ToolCallFinished { id, failed, .. } => {
                SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    id.clone(),
                    ToolCallUpdateFields::new().status(if *failed {
                        ToolCallStatus::Failed
                    } else {
                        ToolCallStatus::Completed
                    }),
                ))
            }
            _ => return,
        };
        self.emit(child, update);
    }

    /// A child started (or was resumed): announced on its creator's
    /// session and linked to the creator's newest open call not yet linked.
    pub fn started(&self, info: &RunInfo) {
        let call = {
            let mut state = self.state();
            state.names.insert(info.child_id.clone(), info.name.clone());
            state.ended.remove(&info.child_id);
            let call = state
                .open
                .get_mut(&info.parent_session_id)
                .and_then(|open| open.iter_mut().rev().find(|open| open.child.is_none()))
                .map(|open| {
                    open.child = Some(info.child_id.clone());
                    open.call_id.clone()
                });
            if let Some(call) = &call {
                state.links.insert(
                    info.child_id.clone(),
                    (info.parent_session_id.clone(), call.clone()),
                );
            }
            call
        };
        let run = json!({
            "childSessionId": info.child_id.to_string(),
            "parentSessionId": info.parent_session_id.to_string(),
            "toolCallId": call,
            "name": info.name,
            "label": info.label,
            "provider": info.provider,
            "local": info.local,
        });
        let mut update = SubagentUpdate::new(info.child_id.to_string())
            .title(info.name.clone())
            .meta(json!({ "dsh": run.clone() }).as_object().cloned());
        if !info.label.is_empty() {
            update = update.description(info.label.clone());
        }
        self.send(
            &info.parent_session_id,
            SessionUpdate::SubagentUpdate(update),
        );
        if let Some(call) = call {
            let fields = ToolCallUpdateFields::new().content(vec![ToolCallContent::from(
                SessionReference::new(info.child_id.to_string()),
            )]);
            self.send(
                &info.parent_session_id,
                SessionUpdate::ToolCallUpdate(
                    ToolCallUpdate::new(call, fields)
                        .meta(json!({ "dsh": { "run": run } }).as_object().cloned()),
                ),
            );
        }
        let held = self.state().unannounced.remove(&info.child_id);
        for update in held.into_iter().flatten() {
            self.send(&info.child_id, update);
        }
        self.inner.announced.notify_waiters();
    }

    /// A child replayed for `session/load` had settled before: the call
    /// that started it closes with its own result, which the creator's
    /// history holds.
    pub fn settled_earlier(&self, child: &SessionId) {
        let mut state = self.state();
        state.ended.insert(child.clone());
        state.links.remove(child);
    }

    /// A child settled: the call that started it is closed with its result.
    pub fn ended(&self, info: &RunInfo, outcome: &RunOutcome) {
        let link = {
            let mut state = self.state();
            state.ended.insert(info.child_id.clone());
            let link = state.links.remove(&info.child_id);
            if let Some((parent, call)) = &link
                && let Some(open) = state.open.get_mut(parent)
            {
                // A background call's result came already: it is done.
                open.retain(|open| {
                    &open.call_id != call || open.child.as_ref() != Some(&info.child_id)
                });
            }
            link
        };
        let Some((parent, call)) = link else {
            return;
        };
        let (status, text, stop) = match outcome {
            RunOutcome::Settled(result) => {
                let stop = result.stop_reason.to_string();
                let failed = !matches!(stop.as_str(), "completed");
                let mut text = result.output_text();
                if let Some(diagnostic) = result.diagnostic.as_ref().filter(|_| failed) {
                    text = format!("{text}\n({stop}: {diagnostic})");
                }
                let status = if failed {
                    ToolCallStatus::Failed
                } else {
                    ToolCallStatus::Completed
                };
                (status, text, stop)
            }
            RunOutcome::Error(error) => (ToolCallStatus::Failed, error.clone(), "error".to_owned()),
        };
        let fields = ToolCallUpdateFields::new()
            .status(status)
            .content(vec![
                ToolCallContent::from(SessionReference::new(info.child_id.to_string())),
                ToolCallContent::from(acp::ContentBlock::Text(acp::TextContent::new(text.clone()))),
            ])
            .raw_output(json!({
                "childSessionId": info.child_id.to_string(),
                "stopReason": stop,
                "output": text,
            }));
        self.send(
            &parent,
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call, fields)),
        );
    }
}

/// A content block in ACP terms.
fn block_of(block: &ContentBlock) -> acp::ContentBlock {
    match block {
        ContentBlock::Image { media_type, data } => {
            acp::ContentBlock::Image(acp::ImageContent::new(data.clone(), media_type.clone()))
        }
        block => acp::ContentBlock::Text(acp::TextContent::new(
            block.as_text().unwrap_or_default().to_owned(),
        )),
    }
}

/// A call's kind, by the tool's name.
fn kind(tool: &str) -> ToolKind {
    match tool {
        "read_file" => ToolKind::Read,
        "write_file" | "edit_file" => ToolKind::Edit,
        "shell" => ToolKind::Execute,
        "grep" | "list_files" => ToolKind::Search,
        _ => ToolKind::Other,
    }
}

/// A call's title: the tool, and what it acts on when the input says.
pub(crate) fn title(tool: &str, input: &Value) -> String {
    let subject = ["command", "path", "pattern", "description", "name"]
        .iter()
        .find_map(|key| input.get(key).and_then(Value::as_str));
    let title = match subject {
        Some(subject) => format!("{tool}: {subject}"),
        None => tool.to_owned(),
    };
    let line = title.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= TITLE_CHARS {
        line
    } else {
        let cut: String = line.chars().take(TITLE_CHARS - 1).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
impl Updates {
    /// Updates collected instead of sent.
    pub(crate) fn collecting() -> Self {
        Self::over(Sink::Collect(Mutex::new(Vec::new())))
    }

    /// What was collected, as JSON.
    pub(crate) fn sent(&self) -> Vec<Value> {
        match &self.inner.to {
            Sink::Collect(sent) => sent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|n| serde_json::to_value(n).unwrap_or(Value::Null))
                .collect(),
            Sink::Client(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use dsh_core::session::{AssistantEntry, ToolResultEntry};
    use dsh_core::{CallId, StopReason, ToolCall, ToolInput};
    use dsh_subagent::SubagentResult;

    use super::*;

    fn event(payload: EventPayload) -> SessionEvent {
        SessionEvent {
            seq: 0,
            time: 0,
            payload,
        }
    }

    fn call(id: &str, tool: &str, input: &Value) -> SessionEvent {
        event(EventPayload::ToolCall(ToolCall {
            call_id: CallId::new(id),
            name: tool.to_owned(),
            input: ToolInput::new(input).unwrap(),
        }))
    }

    fn result(id: &str, tool: &str, text: &str) -> SessionEvent {
        event(EventPayload::ToolResult(ToolResultEntry {
            call_id: CallId::new(id),
            name: tool.to_owned(),
            content: vec![ContentBlock::text(text)],
            is_error: false,
        }))
    }

    fn said(text: &str) -> SessionEvent {
        event(EventPayload::AssistantMessage(AssistantEntry {
            content: vec![ContentBlock::text(text)],
        }))
    }

    fn info(root: &SessionId, child: &SessionId) -> RunInfo {
        RunInfo {
            provider: "spawn".to_owned(),
            name: "researcher".to_owned(),
            label: "search".to_owned(),
            child_id: child.clone(),
            parent_session_id: root.clone(),
            root: root.clone(),
            local: true,
        }
    }

    /// (session, kind, tool call id, status) of each update sent.
    fn digest(sent: &[Value]) -> Vec<(String, String, String, String)> {
        sent.iter()
            .map(|n| {
                let field = |key: &str| n["update"][key].as_str().unwrap_or("").to_owned();
                (
                    n["sessionId"].as_str().unwrap_or("").to_owned(),
                    field("sessionUpdate"),
                    field("toolCallId"),
                    field("status"),
                )
            })
            .collect()
    }

    /// An ACP child's progress before its announcement waits for it, then
    /// streams on its own session: text as chunks, a tool call opened and
    /// closed; a step's start is not shown.
    #[test]
    fn an_acp_childs_progress_streams_on_its_session_after_its_announcement() {
        let updates = Updates::collecting();
        let root = SessionId::generate();
        let child = SessionId::generate();
        updates.root(&root);
        updates.progressed(
            &child,
            &ProgressKind::TextDelta {
                text: "on it".to_owned(),
            },
        );
        assert!(updates.sent().is_empty());
        updates.started(&RunInfo {
            provider: "acp".to_owned(),
            local: false,
            ..info(&root, &child)
        });
        updates.progressed(&child, &ProgressKind::StepStarted { turn: 0, step: 0 });
        updates.progressed(
            &child,
            &ProgressKind::ToolCallStarted {
                id: "t-1".to_owned(),
                name: "Read a file".to_owned(),
            },
        );
        updates.progressed(
            &child,
            &ProgressKind::ToolCallFinished {
                id: "t-1".to_owned(),
                name: "Read a file".to_owned(),
                failed: true,
            },
        );
        let on_child: Vec<_> = digest(&updates.sent())
            .into_iter()
            .filter(|(session, ..)| *session == child.to_string())
            .map(|(_, kind, call, status)| (kind, call, status))
            .collect();
        let row = |kind: &str, call: &str, status: &str| {
            (kind.to_owned(), call.to_owned(), status.to_owned())
        };
        assert_eq!(
            on_child,
            vec![
                row("agent_message_chunk", "", ""),
                row("tool_call", "t-1", "in_progress"),
                row("tool_call_update", "t-1", "failed"),
            ]
        );
    }

    /// A background child: its log's first updates wait for its
    /// announcement on the lead's session; the lead's call that started it
    /// gains the child's session and stays open past its own result, and
    /// the child's settlement closes it with the child's answer.
    #[test]
    fn a_background_child_is_announced_linked_and_closes_the_call_that_started_it() {
        let updates = Updates::collecting();
        let root = SessionId::generate();
        let child = SessionId::generate();
        updates.root(&root);
        updates.logged(
            &root,
            &[call("c-1", "subagent", &json!({ "name": "researcher" }))],
        );
        // The child's log is written before the runtime's start.
        updates.logged(&child, &[said("looking")]);
        updates.started(&info(&root, &child));
        updates.logged(&root, &[result("c-1", "subagent", "started")]);
        let mut settled = SubagentResult::stopped(StopReason::COMPLETED);
        settled.output = vec![ContentBlock::text("found it")];
        updates.ended(&info(&root, &child), &RunOutcome::Settled(settled));
        let sent = updates.sent();
        let (root, child) = (root.to_string(), child.to_string());
        let row = |s: &str, kind: &str, call: &str, status: &str| {
            (
                s.to_owned(),
                kind.to_owned(),
                call.to_owned(),
                status.to_owned(),
            )
        };
        assert_eq!(
            digest(&sent),
            vec![
                row(&root, "tool_call", "c-1", "in_progress"),
                row(&root, "subagent_update", "", ""),
                row(&root, "tool_call_update", "c-1", ""),
                row(&child, "agent_message_chunk", "", ""),
                row(&root, "tool_call_update", "c-1", ""),
                row(&root, "tool_call_update", "c-1", "completed"),
            ]
        );
        assert_eq!(sent[1]["update"]["sessionId"], child.as_str());
        assert_eq!(
            sent[1]["update"]["_meta"]["dsh"]["parentSessionId"],
            root.as_str()
        );
        assert_eq!(sent[1]["update"]["_meta"]["dsh"]["toolCallId"], "c-1");
        assert_eq!(sent[2]["update"]["content"][0]["sessionId"], child.as_str());
        assert_eq!(sent[5]["update"]["rawOutput"]["output"], "found it");
    }

    /// A foreground child settles before its call returns: the call's own
    /// result closes it afterwards, and the lead's own user message (the
    /// client's prompt) is not echoed while a child's task is.
    #[test]
    fn a_foreground_call_closes_on_its_result_after_the_child_settled() {
        let updates = Updates::collecting();
        let root = SessionId::generate();
        let child = SessionId::generate();
        updates.root(&root);
        let prompt = |text: &str| {
            event(EventPayload::UserMessage(dsh_core::session::UserEntry {
                message: dsh_core::UserMessage::user_text(text),
            }))
        };
        updates.logged(&root, &[prompt("hi"), call("c-1", "subagent", &json!({}))]);
        updates.started(&info(&root, &child));
        updates.logged(&child, &[prompt("task")]);
        updates.ended(&info(&root, &child), &RunOutcome::Error("gone".to_owned()));
        updates.logged(&root, &[result("c-1", "subagent", "failed")]);
        let digest = digest(&updates.sent());
        let kinds: Vec<_> = digest
            .iter()
            .map(|(_, kind, _, status)| (kind.as_str(), status.as_str()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("tool_call", "in_progress"),
                ("subagent_update", ""),
                ("tool_call_update", ""),
                ("user_message_chunk", ""),
                ("tool_call_update", "failed"),
                ("tool_call_update", ""),
            ]
        );
        assert_eq!(digest[3].0, child.to_string());
    }

    /// One child's life as the host reports it: its creator's call, its
    /// log events (`before` of them written before the runtime's start),
    /// its settlement, and the call's own result before it (background)
    /// or after it (foreground).
    #[derive(Debug, Clone)]
    struct Life {
        events: usize,
        before: usize,
        background: bool,
        failed: bool,
    }

    fn life() -> impl proptest::strategy::Strategy<Value = Life> {
        use proptest::prelude::*;
        (0usize..5, 0usize..5, any::<bool>(), any::<bool>()).prop_map(
            |(events, before, background, failed)| Life {
                events,
                before: before.min(events),
                background,
                failed,
            },
        )
    }

    proptest::proptest! {
        /// For any children, in any of those orders: no update of a child
        /// session is sent before its announcement, none is lost, and each
        /// call that started a child gets exactly one final status, which
        /// is its child's.
        #[test]
        fn children_are_announced_first_lose_nothing_and_close_their_call_once(
            lives in proptest::collection::vec(life(), 1..5),
        ) {
            let updates = Updates::collecting();
            let root = SessionId::generate();
            updates.root(&root);
            let mut children = Vec::new();
            for (n, life) in lives.iter().enumerate() {
                let child = SessionId::generate();
                let call_id = format!("c-{n}");
                updates.logged(&root, &[call(&call_id, "subagent", &json!({}))]);
                let said: Vec<_> = (0..life.events).map(|k| said(&format!("{n}.{k}"))).collect();
                updates.logged(&child, &said[..life.before]);
                updates.started(&info(&root, &child));
                updates.logged(&child, &said[life.before..]);
                let outcome = if life.failed {
                    RunOutcome::Error("failed".to_owned())
                } else {
                    RunOutcome::Settled(SubagentResult::stopped(StopReason::COMPLETED))
                };
                if life.background {
                    updates.logged(&root, &[result(&call_id, "subagent", "started")]);
                    updates.ended(&info(&root, &child), &outcome);
                } else {
                    updates.ended(&info(&root, &child), &outcome);
                    updates.logged(&root, &[result(&call_id, "subagent", "done")]);
                }
                children.push((child.to_string(), call_id, life.clone()));
            }
            let sent = updates.sent();
            for (child, call_id, life) in &children {
                let announced = sent.iter().position(|n| {
                    n["update"]["sessionUpdate"] == "subagent_update"
                        && n["update"]["sessionId"] == child.as_str()
                });
                let announced = announced.expect("announced");
                let own: Vec<usize> = sent
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| n["sessionId"] == child.as_str())
                    .map(|(at, _)| at)
                    .collect();
                proptest::prop_assert!(own.iter().all(|at| *at > announced));
                proptest::prop_assert_eq!(own.len(), life.events);
                let statuses: Vec<Value> = sent
                    .iter()
                    .filter(|n| {
                        n["sessionId"] == root.to_string().as_str()
                            && n["update"]["toolCallId"] == call_id.as_str()
                            && n["update"]["sessionUpdate"] == "tool_call_update"
                    })
                    .filter_map(|n| n["update"].get("status").cloned())
                    .collect();
                let expected = if life.failed { "failed" } else { "completed" };
                proptest::prop_assert_eq!(statuses, vec![json!(expected)]);
            }
        }
    }
}
