//! What the user watches while a tree runs. The [`Reporter`] hears the
//! runtime's start/end events, every tool call (through [`Observed`], a
//! transparent wrapper around each host tool) and, in the live view, polls
//! the live agents' logs for status, activity and token usage. A member
//! without a log (an external child) is shown from the runtime's progress
//! bus instead ([`SubagentRuntime::progress`]): its current tool call and
//! the tokens it reported; events the view fell too far behind to read are
//! counted as lost, not treated as an error.
//!
//! Three renderings: on a terminal, a tree of agents redrawn in place with
//! ANSI cursor movement (messages scroll above it); otherwise plain lines,
//! one per event, written at the moment the event happens (a start inside
//! the caller's tool call, a message when its delivery returns, a finish
//! when the runtime settles the child); with `--json`, one JSON object per
//! line for every event (see [`crate::json`]), and the person's lines on
//! stderr. The reporter only observes: it never
//! acts on an agent, and a write failure is ignored rather than disturbing
//! the run.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use dsh_core::{
    Agent, AgentStatus, EventPayload, SessionId, Tool, ToolContext, ToolError, ToolOutput,
};
use dsh_subagent::{
    ProgressItem, ProgressKind, ProgressStream, RunOutcome, SubagentEvent, SubagentRuntime,
    fold_catalog,
};

use crate::config::Price;
use serde_json::Value;

/// How output is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One line per event (stdout is not a terminal).
    Plain,
    /// A live tree redrawn in place.
    Live,
    /// One JSON object per line on stdout (`--json`).
    Json,
}

/// One agent as the live view shows it.
struct Row {
    id: SessionId,
    parent: Option<SessionId>,
    name: String,
    provider: String,
    status: String,
    activity: String,
    input_tokens: u64,
    output_tokens: u64,
    /// Of the input tokens, those served from the backend's prompt cache.
    cached_tokens: u64,
    /// Tool calls in progress, oldest first.
    tools: Vec<Call>,
    /// Events of the live agent already folded into this row.
    seen: u64,
    /// Whether the row follows a log (the lead, a local child); a row
    /// without one (an external child) follows the progress bus.
    from_log: bool,
    /// The live agent, kept until it settles (its events stay readable).
    agent: Option<Arc<dyn Agent>>,
}

/// One tool call in progress, as a row shows it.
struct Call {
    /// The call's id, when the progress bus reported it.
    id: Option<String>,
    /// What the call is.
    label: String,
    /// When it began.
    since: Instant,
}

/// How many progress events of members the view has not seen start yet
/// it keeps (beyond that they count as lost).
const EARLY_PROGRESS: usize = dsh_subagent::PROGRESS_BUFFER;

#[derive(Default)]
struct State {
    rows: Vec<Row>,
    /// Lines of the tree currently drawn at the bottom of the terminal.
    drawn: usize,
    /// A question is up on the terminal (see [`crate::ask`]): the tree is
    /// not drawn, and lines wait in `queued`.
    paused: bool,
    /// Lines that arrived while paused.
    queued: Vec<String>,
    /// `--json` lines of children whose start the runtime has not reported
    /// yet (a child's task is in its log before it is published), printed
    /// right after their `agent_started`.
    held: HashMap<SessionId, Vec<String>>,
    /// Progress of members whose start the view has not heard yet (the
    /// bus and the runtime's events are separate), applied at the start
    /// of a member without a log, dropped at a local one's.
    early: HashMap<SessionId, Vec<ProgressKind>>,
    /// Progress events lost so far (the view fell behind the bus, or held
    /// too many early ones).
    lost: u64,
    /// The agent in focus (the one whose model streamed text last) and
    /// the tail of what it streamed, shown under the live tree.
    focus: Option<(SessionId, String)>,
}

/// How much of the streamed text the live view keeps for its focus line.
const FOCUS_KEEP: usize = 1024;

/// Hears everything worth showing and renders it.
pub struct Reporter {
    mode: Mode,
    runtime: OnceLock<SubagentRuntime>,
    /// The runtime's text feed: local children's progress text, token by
    /// token.
    feed: OnceLock<dsh_subagent::TextFeed>,
    /// The model's price, for the cost column.
    price: OnceLock<Price>,
    /// The progress bus, read at each tick (live view only).
    progress: Mutex<Option<ProgressStream>>,
    state: Mutex<State>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One line: whitespace runs (newlines included) become one space, and the
/// text is cut at `max` characters.
pub fn compact(text: &str, max: usize) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= max {
        joined
    } else {
        let cut: String = joined.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// The terminal width the live view fits its lines to, read again at every
/// redraw (so a resize takes effect at the next one): stdout's terminal
/// size, else `$COLUMNS`, else 100; never under 20.
fn width() -> usize {
    terminal_size::terminal_size_of(std::io::stdout())
        .map(|(terminal_size::Width(w), _)| usize::from(w))
        .or_else(|| {
            std::env::var("COLUMNS")
                .ok()
                .and_then(|c| c.parse::<usize>().ok())
        })
        .unwrap_or(100)
        .max(20)
}

/// The model's streamed text, as `text_delta` lines under `--json`.
impl dsh_harness::TextObserver for Reporter {
    fn text_delta(&self, agent: &SessionId, delta: &str) {
        if let Some(feed) = self.feed.get() {
            feed.delta(agent, delta);
        }
        self.streamed(agent, delta);
    }
}

impl Reporter {
    /// A reporter rendering in `mode`.
    pub fn new(mode: Mode) -> Arc<Self> {
        Arc::new(Self {
            mode,
            runtime: OnceLock::new(),
            feed: OnceLock::new(),
            price: OnceLock::new(),
            progress: Mutex::new(None),
            state: Mutex::new(State::default()),
        })
    }

    /// Attach the runtime (for names) and listen to its events (and, in
    /// the live view, to its progress bus, read at each [`Reporter::tick`]).
    pub fn attach(self: &Arc<Self>, runtime: &SubagentRuntime) -> dsh_core::observe::Subscription {
        let _ = self.runtime.set(runtime.clone());
        let _ = self.feed.set(runtime.text_feed());
        if self.mode == Mode::Live {
            *lock(&self.progress) = Some(runtime.progress());
        }
        let me = Arc::clone(self);
        runtime.events().listen(move |event| me.event(event))
    }

    /// The root of the run.
    pub fn lead(&self, agent: &Arc<dyn Agent>, prompt: &str) {
        let mut state = lock(&self.state);
        state.rows.push(Row {
            id: agent.id().clone(),
            parent: None,
            name: dsh_subagent::ROOT_NAME.to_owned(),
            provider: "root".to_owned(),
            status: "running".to_owned(),
            activity: "starting".to_owned(),
            input_tokens: 0,
            output_tokens: 0,
            cached_tokens: 0,
            tools: Vec::new(),
            seen: 0,
            from_log: true,
            agent: Some(agent.clone()),
        });
        let line = format!("lead {}: {}", agent.id(), compact(prompt, 200));
        self.emit(&mut state, &line);
        drop(state);
        self.json(&crate::json::Line::AgentStarted {
            agent: dsh_subagent::ROOT_NAME,
            session: agent.id().as_str(),
            parent: None,
            provider: "root",
            task: prompt,
        });
    }

    /// Print a line (above the tree in the live view; on stderr with
    /// `--json`).
    pub fn line(&self, text: &str) {
        if self.mode == Mode::Json {
            eprintln!("dsh: {text}");
            return;
        }
        let mut state = lock(&self.state);
        self.emit(&mut state, text);
    }

    /// Show each agent's cost at `price` (the live view's cost column).
    pub fn set_price(&self, price: Price) {
        let _ = self.price.set(price);
    }

    /// How this reporter renders.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Write one JSON line (with `--json` only).
    pub fn json(&self, line: &crate::json::Line<'_>) {
        if self.mode == Mode::Json {
            write_lines(&[line.to_json()]);
        }
    }

    /// The events `session`'s log accepted (through [`crate::writes::Watched::streaming`]).
    pub fn logged(&self, session: &SessionId, events: &[dsh_core::SessionEvent]) {
        self.agent_lines(session, |name| {
            events
                .iter()
                .filter_map(|event| crate::json::event_line(name, session.as_str(), event))
                .map(|line| line.to_json())
                .collect()
        });
    }

    /// One `text_delta` line for `session`'s streamed `delta`: written on
    /// the agent's own task, so it comes before the step's `text` line.
    fn streamed(&self, session: &SessionId, delta: &str) {
        if delta.is_empty() {
            return;
        }
        if self.mode == Mode::Live {
            // Kept for the next redraw (at the tick), not drawn per delta.
            let mut state = lock(&self.state);
            match &mut state.focus {
                Some((id, text)) if id == session => text.push_str(delta),
                focus => *focus = Some((session.clone(), delta.to_owned())),
            }
            if let Some((_, text)) = &mut state.focus {
                let extra = text.chars().count().saturating_sub(FOCUS_KEEP);
                if extra > 0 {
                    *text = text.chars().skip(extra).collect();
                }
            }
            return;
        }
        self.agent_lines(session, |name| {
            vec![
                crate::json::Line::TextDelta {
                    agent: name,
                    session: session.as_str(),
                    text: delta,
                }
                .to_json(),
            ]
        });
    }

    /// Write the `--json` lines `render` makes for `session` under its
    /// name (with `--json` only), or hold them until a child not yet
    /// started has its `agent_started` line.
    fn agent_lines(&self, session: &SessionId, render: impl FnOnce(&str) -> Vec<String>) {
        if self.mode != Mode::Json {
            return;
        }
        // Named before the state is locked (the runtime's lookup takes its
        // own locks), decided and written under it (see the start).
        let fallback = self.name_of(session);
        let mut state = lock(&self.state);
        let known = state
            .rows
            .iter()
            .find(|row| &row.id == session)
            .map(|row| row.name.clone());
        let started = known.is_some();
        let name = known.unwrap_or(fallback);
        let lines = render(&name);
        if lines.is_empty() {
            return;
        }
        // A root resumed as a conduit (`dsh send` to a child) has no start
        // of its own; a child does, later.
        if started || name == dsh_subagent::ROOT_NAME {
            write_lines(&lines);
        } else {
            state.held.entry(session.clone()).or_default().extend(lines);
        }
    }

    /// Print the `--json` lines still held for children that never
    /// started (their creation failed): nothing a log accepted is left out.
    pub fn release_held(&self) {
        let held: Vec<Vec<String>> = lock(&self.state).held.drain().map(|(_, l)| l).collect();
        for lines in held {
            write_lines(&lines);
        }
    }

    fn name_of(&self, id: &SessionId) -> String {
        match self.runtime.get() {
            Some(runtime) => runtime
                .registry()
                .get(id)
                .and_then(|agent| runtime.names_of(&agent).ok())
                .map_or_else(|| id.to_string(), |names| names.self_name),
            None => id.to_string(),
        }
    }

    fn event(&self, event: &SubagentEvent) {
        match event {
            SubagentEvent::Start(info) => {
                let parent_name = self.name_of(&info.parent_session_id);
                let runtime = self.runtime.get();
                let agent = runtime.and_then(|r| r.registry().get(&info.child_id));
                let entry = runtime
                    .and_then(|r| r.registry().get(&info.parent_session_id))
                    .and_then(|parent| fold_catalog(parent.header(), &parent.events()).ok())
                    .and_then(|catalog| catalog.get(&info.child_id).cloned());
                let label = entry.as_ref().map(|e| e.label.clone()).unwrap_or_default();
                let mut name = self.name_of(&info.child_id);
                // A child the runtime cannot name (an external one has no
                // live agent) is named by its creator's catalog.
                if name == info.child_id.as_str()
                    && let Some(own) = entry.as_ref().and_then(|e| e.name.clone())
                {
                    name = if parent_name == dsh_subagent::ROOT_NAME {
                        own
                    } else {
                        format!("{parent_name}/{own}")
                    };
                }
                let mut state = lock(&self.state);
                let row = Row {
                    id: info.child_id.clone(),
                    parent: Some(info.parent_session_id.clone()),
                    name: name.clone(),
                    provider: info.provider.clone(),
                    status: "running".to_owned(),
                    activity: "starting".to_owned(),
                    input_tokens: 0,
                    output_tokens: 0,
                    cached_tokens: 0,
                    tools: Vec::new(),
                    seen: 0,
                    from_log: info.local,
                    agent,
                };
                let early = state.early.remove(&info.child_id).unwrap_or_default();
                let at = match state.rows.iter().position(|r| r.id == info.child_id) {
                    // Resumed: the same child again. A log-driven row reads
                    // its whole log again; one without keeps its totals.
                    Some(at) => {
                        let existing = &mut state.rows[at];
                        let mut row = row;
                        if !row.from_log {
                            row.input_tokens = existing.input_tokens;
                            row.output_tokens = existing.output_tokens;
                            row.cached_tokens = existing.cached_tokens;
                        }
                        *existing = row;
                        at
                    }
                    None => {
                        state.rows.push(row);
                        state.rows.len() - 1
                    }
                };
                // A local child's progress is its log's, already counted.
                if !info.local {
                    for kind in early {
                        progressed(&mut state.rows[at], kind);
                    }
                }
                let label = if label.is_empty() {
                    String::new()
                } else {
                    format!(": {}", compact(&label, 120))
                };
                let line = format!(
                    "started {name} ({}) for {parent_name}{label}",
                    info.provider
                );
                self.emit(&mut state, &line);
                // Under the state lock, so that none of the child's own
                // lines can come before its start or its held lines.
                self.json(&crate::json::Line::AgentStarted {
                    agent: &name,
                    session: info.child_id.as_str(),
                    parent: Some(&parent_name),
                    provider: &info.provider,
                    task: entry.as_ref().map_or("", |e| e.label.as_str()),
                });
                if let Some(lines) = state.held.remove(&info.child_id) {
                    write_lines(&lines);
                }
            }
            SubagentEvent::End(info, outcome) => {
                let mut state = lock(&self.state);
                let mut name = info.child_id.to_string();
                if let Some(row) = state.rows.iter_mut().find(|r| r.id == info.child_id) {
                    refresh(row);
                    row.agent = None;
                    row.tools.clear();
                    name = row.name.clone();
                    match outcome {
                        RunOutcome::Settled(result) => {
                            row.status = "done".to_owned();
                            row.activity = result.stop_reason.to_string();
                        }
                        RunOutcome::Error(error) => {
                            row.status = "failed".to_owned();
                            row.activity = compact(error, 60);
                        }
                    }
                }
                let line = match outcome {
                    RunOutcome::Settled(result) => {
                        format!("finished {name}: {}", result.stop_reason)
                    }
                    RunOutcome::Error(error) => {
                        format!("failed {name}: {}", compact(error, 200))
                    }
                };
                self.emit(&mut state, &line);
                drop(state);
                let (stop_reason, error) = match outcome {
                    RunOutcome::Settled(result) => (Some(result.stop_reason.as_str()), None),
                    RunOutcome::Error(error) => (None, Some(error.as_str())),
                };
                self.json(&crate::json::Line::Settled {
                    agent: &name,
                    session: info.child_id.as_str(),
                    stop_reason,
                    error,
                });
            }
            SubagentEvent::ProviderAdded(_) | SubagentEvent::ProviderRemoved(_) => {}
        }
    }

    /// A tool call began.
    fn tool_started(&self, agent: &SessionId, tool: &str, input: &Value) {
        let mut state = lock(&self.state);
        if let Some(row) = state.rows.iter_mut().find(|r| &r.id == agent) {
            let label = match (tool, recipient(input)) {
                ("wait", _) => "waiting for its inbox".to_owned(),
                (_, Some(to)) => format!("{tool} → {to}"),
                _ => tool.to_owned(),
            };
            row.activity = format!("calling {label}");
            row.tools.push(Call {
                id: None,
                label,
                since: Instant::now(),
            });
        }
        if self.mode == Mode::Live {
            self.redraw(&mut state, &[]);
        }
    }

    /// A tool call returned.
    fn tool_finished(
        &self,
        agent: &SessionId,
        tool: &str,
        input: &Value,
        output: &Result<ToolOutput, ToolError>,
    ) {
        let delivered = matches!(output, Ok(output) if !output.is_error);
        let text = input.get("message").and_then(Value::as_str);
        let line = match (tool, text, delivered) {
            ("send_message", Some(text), true) => {
                let to = recipient(input).unwrap_or("?");
                Some(format!(
                    "message {} -> {to}: {}",
                    self.name_of(agent),
                    compact(text, 200)
                ))
            }
            ("report", Some(text), true) => Some(format!(
                "report {} -> its parent: {}",
                self.name_of(agent),
                compact(text, 200)
            )),
            _ => None,
        };
        let mut state = lock(&self.state);
        if let Some(row) = state.rows.iter_mut().find(|r| &r.id == agent) {
            row.activity = "thinking".to_owned();
            // The earliest call of this tool still running is the one done.
            if let Some(at) = row.tools.iter().position(|Call { label, .. }| {
                label == tool
                    || label.starts_with(&format!("{tool} "))
                    || (tool == "wait" && label.starts_with("waiting"))
            }) {
                row.tools.remove(at);
            }
        }
        match line {
            Some(line) => self.emit(&mut state, &line),
            None if self.mode == Mode::Live => self.redraw(&mut state, &[]),
            None => {}
        }
    }

    /// Refresh every live row from its agent and redraw (live view only).
    pub fn tick(&self) {
        if self.mode != Mode::Live {
            return;
        }
        let mut items = Vec::new();
        if let Some(stream) = lock(&self.progress).as_mut() {
            while let Some(item) = stream.try_next() {
                items.push(item);
            }
        }
        let mut state = lock(&self.state);
        let lines = self.take_progress(&mut state, items);
        for row in &mut state.rows {
            refresh(row);
        }
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        self.redraw(&mut state, &lines);
    }

    /// Fold progress `items` into the rows of members without a log; the
    /// lines to print (events lost).
    fn take_progress(&self, state: &mut State, items: Vec<ProgressItem>) -> Vec<String> {
        let mut lost = 0;
        for item in items {
            match item {
                ProgressItem::Missed(n) => lost += n,
                ProgressItem::Event(event) => {
                    let id = &event.member.child_id;
                    match state.rows.iter_mut().find(|row| &row.id == id) {
                        Some(row) if !row.from_log => progressed(row, event.kind),
                        Some(_) => {}
                        None => {
                            let held: usize = state.early.values().map(Vec::len).sum();
                            if held < EARLY_PROGRESS {
                                state.early.entry(id.clone()).or_default().push(event.kind);
                            } else {
                                lost += 1;
                            }
                        }
                    }
                }
            }
        }
        if lost == 0 {
            return Vec::new();
        }
        state.lost += lost;
        vec![format!(
            "progress: {lost} events lost (the view fell behind; {} so far)",
            state.lost
        )]
    }

    /// Write `line`: at once in plain mode, above the tree in the live view,
    /// not at all with `--json` (its events are lines of their own).
    fn emit(&self, state: &mut State, line: &str) {
        match self.mode {
            Mode::Json => {}
            Mode::Plain => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            Mode::Live => self.redraw(state, &[line]),
        }
    }

    /// Clear the live tree and draw nothing until [`Reporter::resume`]
    /// (a question is up on the terminal); lines wait meanwhile.
    pub fn pause(&self) {
        if self.mode != Mode::Live {
            return;
        }
        let mut state = lock(&self.state);
        if state.drawn > 0 {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\x1b[{}A\r\x1b[J", state.drawn);
            let _ = out.flush();
            state.drawn = 0;
        }
        state.paused = true;
    }

    /// Print the lines that waited and draw the tree again.
    pub fn resume(&self) {
        if self.mode != Mode::Live {
            return;
        }
        let mut state = lock(&self.state);
        state.paused = false;
        let queued = std::mem::take(&mut state.queued);
        let lines: Vec<&str> = queued.iter().map(String::as_str).collect();
        self.redraw(&mut state, &lines);
    }

    /// Clear the tree, print `lines`, draw the tree again.
    fn redraw(&self, state: &mut State, lines: &[&str]) {
        if state.paused {
            state
                .queued
                .extend(lines.iter().map(|line| (*line).to_owned()));
            return;
        }
        let mut text = String::new();
        if state.drawn > 0 {
            text.push_str(&format!("\x1b[{}A\r\x1b[J", state.drawn));
        }
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        let tree = render_tree(
            &state.rows,
            width(),
            Instant::now(),
            self.price.get().copied(),
        );
        state.drawn = tree.len();
        for line in tree {
            text.push_str(&line);
            text.push('\n');
        }
        if let Some((id, streamed)) = &state.focus {
            let name = state
                .rows
                .iter()
                .find(|row| &row.id == id)
                .map_or_else(|| id.to_string(), |row| row.name.clone());
            text.push_str(&focus_line(&name, streamed, width()));
            text.push('\n');
            state.drawn += 1;
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}

/// The live view's last line: the agent in focus and the end of what its
/// model streamed, on one line of at most `width` characters (the start
/// of the text gives way, so the newest words stay in sight).
fn focus_line(name: &str, streamed: &str, width: usize) -> String {
    let head = format!("› {name}: ");
    let room = width.saturating_sub(head.chars().count()).max(1);
    let text = streamed.split_whitespace().collect::<Vec<_>>().join(" ");
    let count = text.chars().count();
    let tail: String = if count <= room {
        text
    } else {
        let kept: String = text.chars().skip(count - room + 1).collect();
        format!("…{kept}")
    };
    let line = format!("{head}{tail}");
    line.chars().take(width.max(1)).collect()
}

/// Whom a messaging call addresses: `to` (the control tool) or `target`
/// (the team tools).
fn recipient(input: &Value) -> Option<&str> {
    input
        .get("to")
        .or_else(|| input.get("target"))
        .and_then(Value::as_str)
}

/// Write `lines` to stdout under one lock: lines of concurrent agents never
/// mix. A write failure is ignored, as every rendering's is.
fn write_lines(lines: &[String]) {
    let mut out = std::io::stdout().lock();
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
}

/// Fold the live agent's new events into its row.
fn refresh(row: &mut Row) {
    let Some(agent) = &row.agent else { return };
    let status = agent.status();
    for event in agent.events_since(row.seen) {
        row.seen = event.seq + 1;
        match &event.payload {
            EventPayload::Usage(usage) => {
                row.input_tokens += usage.input_tokens;
                row.output_tokens += usage.output_tokens;
                row.cached_tokens += usage.cached_input_tokens;
            }
            EventPayload::StepStart(_) => row.activity = "thinking".to_owned(),
            EventPayload::ToolCall(call) => row.activity = format!("calling {}", call.name),
            EventPayload::TurnEnd(end) => row.activity = format!("turn ended: {}", end.stop_reason),
            _ => {}
        }
    }
    if row.status == "running" || row.status == "idle" {
        row.status = match status {
            AgentStatus::Running => "running",
            AgentStatus::Idle => "idle",
        }
        .to_owned();
    }
}

/// Fold one progress event into the row of a member without a log. A
/// settled row takes only usage (a late report still counts).
fn progressed(row: &mut Row, kind: ProgressKind) {
    let settled = row.status == "done" || row.status == "failed";
    match kind {
        ProgressKind::Usage { tokens, .. } => {
            row.input_tokens += tokens.input_tokens;
            row.output_tokens += tokens.output_tokens;
            row.cached_tokens += tokens.cached_input_tokens;
        }
        _ if settled => {}
        ProgressKind::StepStarted { .. } | ProgressKind::Thought { .. } => {
            row.activity = "thinking".to_owned();
        }
        ProgressKind::ToolCallStarted { id, name } => {
            row.activity = format!("calling {name}");
            row.tools.push(Call {
                id: Some(id),
                label: name,
                since: Instant::now(),
            });
        }
        ProgressKind::ToolCallFinished { id, name, failed } => {
            row.tools
                .retain(|call| call.id.as_deref() != Some(id.as_str()));
            row.activity = if failed {
                format!("{name} failed")
            } else {
                "thinking".to_owned()
            };
        }
        ProgressKind::TextDelta { .. } => row.activity = "writing".to_owned(),
        ProgressKind::Plan { entries } => {
            let done = entries.iter().filter(|e| e.status == "completed").count();
            row.activity = format!("plan: {done}/{} done", entries.len());
        }
        _ => {}
    }
}

/// Tokens as the view shows them: exact below 10 000, else `12.3k`,
/// `4.5M`.
fn short(n: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let f = n as f64;
    match n {
        0..10_000 => n.to_string(),
        10_000..1_000_000 => format!("{:.1}k", f / 1_000.0),
        _ => format!("{:.1}M", f / 1_000_000.0),
    }
}

/// What a row is doing at `now`: its oldest tool call in progress with
/// its elapsed seconds (and how many more run), else its last activity.
fn activity(row: &Row, now: Instant) -> String {
    match row.tools.first() {
        Some(Call { label, since, .. }) => {
            let more = match row.tools.len() {
                1 => String::new(),
                n => format!(" +{}", n - 1),
            };
            format!(
                "{label} {}s{more}",
                now.saturating_duration_since(*since).as_secs()
            )
        }
        None => row.activity.clone(),
    }
}

/// Cut `text` to `max` characters, marking the cut with `…`.
fn fit(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// The tree as lines: pre-order from the roots, children in start order;
/// columns agent, provider, status, tokens in/out, cached (when any row has
/// cached tokens), cost (with a `price`) and activity. Every line is
/// shorter than `width`, so none wraps. On a narrow terminal the columns
/// degrade in order (cost, cached, provider, tokens, then status go, the
/// agent column narrows to its longest name, then names and activity are
/// cut with `…`) so that what stays is whole and aligned.
fn render_tree(rows: &[Row], width: usize, now: Instant, price: Option<Price>) -> Vec<String> {
    let mut children: HashMap<Option<&SessionId>, Vec<&Row>> = HashMap::new();
    let known: Vec<&SessionId> = rows.iter().map(|r| &r.id).collect();
    for row in rows {
        // A parent the view never saw is shown as a root.
        let parent = row.parent.as_ref().filter(|p| known.contains(p));
        children.entry(parent).or_default().push(row);
    }
    // Pre-order: each row with its label (tree glyphs and its own name).
    fn walk<'a>(
        row: &'a Row,
        prefix: &str,
        last: bool,
        top: bool,
        children: &HashMap<Option<&SessionId>, Vec<&'a Row>>,
        out: &mut Vec<(String, &'a Row)>,
    ) {
        let branch = if top {
            ""
        } else if last {
            "└─ "
        } else {
            "├─ "
        };
        let name = row.name.rsplit('/').next().unwrap_or(&row.name);
        out.push((format!("{prefix}{branch}{name}"), row));
        let next = if top {
            String::new()
        } else if last {
            format!("{prefix}   ")
        } else {
            format!("{prefix}│  ")
        };
        if let Some(kids) = children.get(&Some(&row.id)) {
            for (i, kid) in kids.iter().enumerate() {
                walk(kid, &next, i + 1 == kids.len(), false, children, out);
            }
        }
    }
    let mut ordered = Vec::new();
    if let Some(roots) = children.get(&None) {
        for root in roots {
            walk(root, "", true, true, &children, &mut ordered);
        }
    }
    // The cells of every optional column, header first.
    let cached = rows.iter().any(|row| row.cached_tokens > 0);
    let mut columns: Vec<(&str, Vec<String>, bool)> = vec![
        (
            "provider",
            ordered
                .iter()
                .map(|(_, row)| row.provider.clone())
                .collect(),
            true,
        ),
        (
            "status",
            ordered.iter().map(|(_, row)| row.status.clone()).collect(),
            true,
        ),
        (
            "tokens in/out",
            ordered
                .iter()
                .map(|(_, row)| format!("{}/{}", short(row.input_tokens), short(row.output_tokens)))
                .collect(),
            true,
        ),
        (
            "cached",
            ordered
                .iter()
                .map(|(_, row)| short(row.cached_tokens))
                .collect(),
            cached,
        ),
        (
            "cost",
            ordered
                .iter()
                .map(|(_, row)| {
                    price.map_or_else(String::new, |price| {
                        format!("${:.4}", price.cost(row.input_tokens, row.output_tokens))
                    })
                })
                .collect(),
            price.is_some(),
        ),
    ];
    let cell_width = |header: &str, cells: &[String]| {
        cells
            .iter()
            .map(|cell| cell.chars().count())
            .chain([header.chars().count()])
            .max()
            .unwrap_or(0)
    };
    let name_width = ordered
        .iter()
        .map(|(label, _)| label.chars().count())
        .chain(["agent".len()])
        .max()
        .unwrap_or(0)
        .min(32);
    // The room a line may take, and the least the activity should keep.
    let room = width.saturating_sub(1);
    const ACTIVITY: usize = 12;
    let used = |columns: &[(&str, Vec<String>, bool)]| {
        name_width
            + columns
                .iter()
                .filter(|(_, _, shown)| *shown)
                .map(|(header, cells, _)| 1 + cell_width(header, cells))
                .sum::<usize>()
            + 2
    };
    for drop in ["cost", "cached", "provider", "tokens in/out", "status"] {
        if used(&columns) + ACTIVITY <= room {
            break;
        }
        if let Some(column) = columns.iter_mut().find(|(header, _, _)| *header == drop) {
            column.2 = false;
        }
    }
    let name_width = name_width.min(
        room.saturating_sub(used(&columns) - name_width + ACTIVITY)
            .max(6),
    );
    let line = |label: &str, cells: Vec<&str>, activity: &str| {
        let mut text = format!("{:<name_width$}", fit(label, name_width));
        for ((header, all, _), cell) in columns.iter().filter(|c| c.2).zip(cells) {
            let w = cell_width(header, all);
            // Numbers right-aligned, words left.
            if matches!(*header, "tokens in/out" | "cached" | "cost") {
                text.push_str(&format!(" {cell:>w$}"));
            } else {
                text.push_str(&format!(" {cell:<w$}"));
            }
        }
        text.push_str("  ");
        let left = room.saturating_sub(text.chars().count());
        text.push_str(&fit(activity, left));
        fit(text.trim_end(), room)
    };
    let mut lines = vec![line(
        "agent",
        columns
            .iter()
            .filter(|c| c.2)
            .map(|(header, _, _)| *header)
            .collect(),
        "activity",
    )];
    for (i, (label, row)) in ordered.iter().enumerate() {
        let cells: Vec<&str> = columns
            .iter()
            .filter(|c| c.2)
            .map(|(_, cells, _)| cells[i].as_str())
            .collect();
        lines.push(line(label, cells, &activity(row, now)));
    }
    lines
}

/// A host tool, wrapped so the reporter hears each call; it behaves exactly
/// as the tool it wraps.
pub struct Observed {
    inner: Arc<dyn Tool>,
    reporter: Arc<Reporter>,
}

impl Observed {
    /// Wrap `inner`.
    pub fn wrap(inner: Arc<dyn Tool>, reporter: &Arc<Reporter>) -> Arc<dyn Tool> {
        Arc::new(Self {
            inner,
            reporter: Arc::clone(reporter),
        })
    }
}

#[async_trait]
impl Tool for Observed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn description(&self) -> String {
        self.inner.description()
    }

    fn input_schema(&self) -> Value {
        self.inner.input_schema()
    }

    fn is_available(&self) -> bool {
        self.inner.is_available()
    }

    fn offered_to(&self, agent: &dyn dsh_core::Agent) -> bool {
        self.inner.offered_to(agent)
    }

    fn concurrency_safe(&self) -> bool {
        self.inner.concurrency_safe()
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let agent = ctx.agent.id().clone();
        let name = self.inner.name().to_owned();
        self.reporter.tool_started(&agent, &name, &input);
        let output = self.inner.execute(input.clone(), ctx).await;
        self.reporter.tool_finished(&agent, &name, &input, &output);
        output
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn row(id: &str, parent: Option<&str>, name: &str, provider: &str, activity: &str) -> Row {
        Row {
            id: SessionId::new(id).unwrap(),
            parent: parent.map(|p| SessionId::new(p).unwrap()),
            name: name.to_owned(),
            provider: provider.to_owned(),
            status: "running".to_owned(),
            activity: activity.to_owned(),
            input_tokens: 12_345,
            output_tokens: 678,
            cached_tokens: 0,
            tools: Vec::new(),
            seen: 0,
            from_log: true,
            agent: None,
        }
    }

    #[test]
    fn the_focus_line_keeps_the_newest_words_in_the_width() {
        let streamed =
            "I read the crate map first.\nThen the runtime:   its admission and drain look sound.";
        let frames: Vec<String> = [20, 40, 80, 120]
            .iter()
            .map(|width| {
                let line = focus_line("researcher", streamed, *width);
                assert!(line.chars().count() <= *width, "{width}: {line}");
                format!("{width:>3} |{line}|")
            })
            .collect();
        insta::assert_snapshot!(frames.join("\n"));
    }

    // A streamed delta in the live view moves the focus and is kept, its
    // tail bounded; it prints nothing by itself.
    #[test]
    fn streamed_text_moves_the_focus_and_keeps_a_bounded_tail() {
        let reporter = Reporter::new(Mode::Live);
        let a = SessionId::new("s-a").unwrap();
        let b = SessionId::new("s-b").unwrap();
        reporter.streamed(&a, "hello ");
        reporter.streamed(&a, "world");
        assert_eq!(
            lock(&reporter.state).focus,
            Some((a.clone(), "hello world".to_owned()))
        );
        reporter.streamed(&b, &"x".repeat(FOCUS_KEEP + 10));
        let focus = lock(&reporter.state).focus.clone().unwrap();
        assert_eq!(focus.0, b);
        assert_eq!(focus.1.chars().count(), FOCUS_KEEP);
    }

    fn call(label: &str, since: Instant) -> Call {
        Call {
            id: None,
            label: label.to_owned(),
            since,
        }
    }

    /// A tree mid-run: the lead waits on two tools, a researcher greps
    /// (for 7 s), a grandchild thinks, a reviewer is done.
    fn tree(now: Instant) -> Vec<Row> {
        let ago = |secs| now - std::time::Duration::from_secs(secs);
        let mut lead = row("s-lead", None, "lead", "root", "calling subagent");
        lead.tools = vec![call("subagent", ago(3)), call("subagent", ago(2))];
        let mut researcher = row(
            "s-a",
            Some("s-lead"),
            "researcher",
            "spawn",
            "calling grep over the whole workspace for every use of the catalog",
        );
        researcher.tools = vec![call("grep", ago(7))];
        researcher.cached_tokens = 8_192;
        let deep = row(
            "s-b",
            Some("s-a"),
            "researcher/deep-reader",
            "fork",
            "thinking",
        );
        let mut reviewer = row(
            "s-c",
            Some("s-lead"),
            "reviewer",
            "acp",
            "turn ended: completed",
        );
        reviewer.status = "done".to_owned();
        reviewer.input_tokens = 2_400_000;
        vec![lead, researcher, deep, reviewer]
    }

    /// Frames of the same tree at fixed widths, with and without a price:
    /// no line reaches the width (so none wraps, and redrawing `drawn`
    /// lines up clears exactly the frame); as the width shrinks, whole
    /// columns go in order (cost, cached, provider, tokens) and what stays
    /// is aligned, never cut mid-column; at 40 columns every agent keeps
    /// its name, status and what it is doing.
    #[test]
    fn the_tree_degrades_column_by_column_and_never_wraps() {
        let now = Instant::now();
        let rows = tree(now);
        let price = Price {
            input: 0.27,
            output: 1.10,
        };
        let mut frames = Vec::new();
        for price in [None, Some(price)] {
            for width in [20, 40, 60, 80, 120] {
                let lines = render_tree(&rows, width, now, price);
                for line in &lines {
                    assert!(line.chars().count() < width, "{width}: {line:?}");
                }
                if width == 40 {
                    assert!(lines[0].starts_with("agent") && lines[0].contains("status"));
                    assert!(lines[2].contains("researcher") && lines[2].contains("grep 7s"));
                    assert!(lines[1].contains("subagent 3s"), "{}", lines[1]);
                }
                frames.push(format!(
                    "width {width}, price {}:\n{}",
                    price.is_some(),
                    lines.join("\n")
                ));
            }
        }
        insta::assert_snapshot!(frames.join("\n\n"));
    }

    /// While a question is up the live view draws nothing: its tree is
    /// cleared, lines wait, and resuming prints them and the tree again.
    #[test]
    fn a_paused_live_view_holds_its_lines_until_it_resumes() {
        let reporter = Reporter::new(Mode::Live);
        lock(&reporter.state)
            .rows
            .push(row("s-lead", None, "lead", "root", "thinking"));
        reporter.line("before");
        assert!(lock(&reporter.state).drawn > 0);
        reporter.pause();
        reporter.line("while asking");
        reporter.tick();
        {
            let state = lock(&reporter.state);
            assert_eq!(state.drawn, 0);
            assert_eq!(state.queued, ["while asking"]);
        }
        reporter.resume();
        let state = lock(&reporter.state);
        assert!(state.queued.is_empty());
        assert!(state.drawn > 0);
    }

    /// An ACP child's progress drives its row: its tool call in progress
    /// (events that came before its start included), its tokens summed
    /// from usage across a resume, events lost reported as a line; a local
    /// child's progress is ignored (its log is already counted).
    #[test]
    fn an_external_childs_row_follows_the_progress_bus() {
        use dsh_subagent::{ProgressEvent, ProgressMember, RunInfo};
        let now = Instant::now();
        let reporter = Reporter::new(Mode::Live);
        let lead = SessionId::new("s-lead").unwrap();
        lock(&reporter.state)
            .rows
            .push(row("s-lead", None, "lead", "root", "calling acp"));
        let start = |id: &str, provider: &str, local: bool| {
            reporter.event(&SubagentEvent::Start(RunInfo {
                provider: provider.to_owned(),
                child_id: SessionId::new(id).unwrap(),
                parent_session_id: lead.clone(),
                root: lead.clone(),
                local,
            }));
        };
        let event = |id: &str, kind: ProgressKind| {
            ProgressItem::Event(ProgressEvent {
                member: Arc::new(ProgressMember {
                    child_id: SessionId::new(id).unwrap(),
                    activation: 1,
                    root: lead.clone(),
                    name: id.to_owned(),
                    provider: "acp".to_owned(),
                }),
                kind,
            })
        };
        let usage = |input, output| ProgressKind::Usage {
            tokens: dsh_core::Usage {
                input_tokens: input,
                output_tokens: output,
                ..Default::default()
            },
            context: None,
        };
        let feed = |items: Vec<ProgressItem>| {
            let mut state = lock(&reporter.state);
            let lines = reporter.take_progress(&mut state, items);
            let frame = render_tree(&state.rows, 100, now, None);
            let above: String = lines.iter().map(|line| format!("{line}\n")).collect();
            format!("{above}{}", frame.join("\n"))
        };
        let mut frames = Vec::new();
        // Progress before the start is held, then applied.
        frames.push(feed(vec![event("run-acp", usage(100, 20))]));
        start("run-acp", "acp", false);
        start("s-local", "spawn", true);
        frames.push(feed(vec![
            event(
                "run-acp",
                ProgressKind::ToolCallStarted {
                    id: "c1".to_owned(),
                    name: "Read README.md".to_owned(),
                },
            ),
            event("run-acp", usage(1_000, 50)),
            event("s-local", usage(5_000, 5_000)),
        ]));
        frames.push(feed(vec![
            event(
                "run-acp",
                ProgressKind::ToolCallFinished {
                    id: "c1".to_owned(),
                    name: "Read README.md".to_owned(),
                    failed: false,
                },
            ),
            ProgressItem::Missed(7),
            event(
                "run-acp",
                ProgressKind::TextDelta {
                    text: "done".to_owned(),
                },
            ),
        ]));
        // A follow-up is a new activation of the same child: totals stay.
        start("run-acp", "acp", false);
        frames.push(feed(vec![event("run-acp", usage(10, 1))]));
        {
            let state = lock(&reporter.state);
            let acp = state
                .rows
                .iter()
                .find(|r| r.id.as_str() == "run-acp")
                .unwrap();
            assert_eq!((acp.input_tokens, acp.output_tokens), (1_110, 71));
            let local = state
                .rows
                .iter()
                .find(|r| r.id.as_str() == "s-local")
                .unwrap();
            assert_eq!((local.input_tokens, local.output_tokens), (0, 0));
            assert_eq!(state.lost, 7);
        }
        insta::assert_snapshot!(frames.join("\n\n"));
    }

    #[test]
    fn token_counts_are_short_and_exact_below_ten_thousand() {
        assert_eq!(short(9_999), "9999");
        assert_eq!(short(12_345), "12.3k");
        assert_eq!(short(2_400_000), "2.4M");
    }
}
