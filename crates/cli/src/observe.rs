//! What the user watches while a tree runs. The [`Reporter`] hears the
//! runtime's start/end events, every tool call (through [`Observed`], a
//! transparent wrapper around each host tool) and, in the live view, polls
//! the live agents' logs for status, activity and token usage.
//!
//! Two renderings: on a terminal, a tree of agents redrawn in place with
//! ANSI cursor movement (messages scroll above it); otherwise plain lines,
//! one per event, written at the moment the event happens (a start inside
//! the caller's tool call, a message when its delivery returns, a finish
//! when the runtime settles the child). The reporter only observes: it never
//! acts on an agent, and a write failure is ignored rather than disturbing
//! the run.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use async_trait::async_trait;
use dsh_core::{
    Agent, AgentStatus, EventPayload, SessionId, Tool, ToolContext, ToolError, ToolOutput,
};
use dsh_subagent::{RunOutcome, SubagentEvent, SubagentRuntime, fold_catalog};
use serde_json::Value;

/// How output is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One line per event (stdout is not a terminal).
    Plain,
    /// A live tree redrawn in place.
    Live,
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
    /// Events of the live agent already folded into this row.
    seen: u64,
    /// The live agent, kept until it settles (its events stay readable).
    agent: Option<Arc<dyn Agent>>,
}

#[derive(Default)]
struct State {
    rows: Vec<Row>,
    /// Lines of the tree currently drawn at the bottom of the terminal.
    drawn: usize,
}

/// Hears everything worth showing and renders it.
pub struct Reporter {
    mode: Mode,
    runtime: OnceLock<SubagentRuntime>,
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

impl Reporter {
    /// A reporter rendering in `mode`.
    pub fn new(mode: Mode) -> Arc<Self> {
        Arc::new(Self {
            mode,
            runtime: OnceLock::new(),
            state: Mutex::new(State::default()),
        })
    }

    /// Attach the runtime (for names) and listen to its events.
    pub fn attach(self: &Arc<Self>, runtime: &SubagentRuntime) -> dsh_core::observe::Subscription {
        let _ = self.runtime.set(runtime.clone());
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
            seen: 0,
            agent: Some(agent.clone()),
        });
        let line = format!("lead {}: {}", agent.id(), compact(prompt, 200));
        self.emit(&mut state, &line);
    }

    /// Print a line (above the tree in the live view).
    pub fn line(&self, text: &str) {
        let mut state = lock(&self.state);
        self.emit(&mut state, text);
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
                    seen: 0,
                    agent,
                };
                match state.rows.iter_mut().find(|r| r.id == info.child_id) {
                    // Resumed: the same child again.
                    Some(existing) => *existing = row,
                    None => state.rows.push(row),
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
            }
            SubagentEvent::End(info, outcome) => {
                let mut state = lock(&self.state);
                let mut name = info.child_id.to_string();
                if let Some(row) = state.rows.iter_mut().find(|r| r.id == info.child_id) {
                    refresh(row);
                    row.agent = None;
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
            }
            SubagentEvent::ProviderAdded(_) | SubagentEvent::ProviderRemoved(_) => {}
        }
    }

    /// A tool call began.
    fn tool_started(&self, agent: &SessionId, tool: &str, input: &Value) {
        let mut state = lock(&self.state);
        if let Some(row) = state.rows.iter_mut().find(|r| &r.id == agent) {
            row.activity = match (tool, input.get("to").and_then(Value::as_str)) {
                ("wait", _) => "waiting for its inbox".to_owned(),
                (_, Some(to)) => format!("{tool} → {to}"),
                _ => format!("calling {tool}"),
            };
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
                let to = input.get("to").and_then(Value::as_str).unwrap_or("?");
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
        let mut state = lock(&self.state);
        for row in &mut state.rows {
            refresh(row);
        }
        self.redraw(&mut state, &[]);
    }

    /// Write `line`: at once in plain mode, above the tree in the live view.
    fn emit(&self, state: &mut State, line: &str) {
        match self.mode {
            Mode::Plain => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            Mode::Live => self.redraw(state, &[line]),
        }
    }

    /// Clear the tree, print `lines`, draw the tree again.
    fn redraw(&self, state: &mut State, lines: &[&str]) {
        let mut text = String::new();
        if state.drawn > 0 {
            text.push_str(&format!("\x1b[{}A\r\x1b[J", state.drawn));
        }
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        let tree = render_tree(&state.rows, width());
        state.drawn = tree.len();
        for line in tree {
            text.push_str(&line);
            text.push('\n');
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
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

/// The tree as lines: pre-order from the roots, children in start order.
fn render_tree(rows: &[Row], width: usize) -> Vec<String> {
    let mut children: HashMap<Option<&SessionId>, Vec<&Row>> = HashMap::new();
    let known: Vec<&SessionId> = rows.iter().map(|r| &r.id).collect();
    for row in rows {
        // A parent the view never saw is shown as a root.
        let parent = row.parent.as_ref().filter(|p| known.contains(p));
        children.entry(parent).or_default().push(row);
    }
    let mut lines = vec![format!(
        "{:<32} {:<8} {:<8} {:>14}  activity",
        "agent", "provider", "status", "tokens in/out"
    )];
    fn walk(
        row: &Row,
        prefix: &str,
        last: bool,
        top: bool,
        children: &HashMap<Option<&SessionId>, Vec<&Row>>,
        lines: &mut Vec<String>,
    ) {
        let branch = if top {
            ""
        } else if last {
            "└─ "
        } else {
            "├─ "
        };
        let name = row.name.rsplit('/').next().unwrap_or(&row.name);
        let label = format!("{prefix}{branch}{name}");
        let tokens = format!("{}/{}", row.input_tokens, row.output_tokens);
        lines.push(format!(
            "{label:<32} {:<8} {:<8} {tokens:>14}  {}",
            row.provider, row.status, row.activity
        ));
        let next = if top {
            String::new()
        } else if last {
            format!("{prefix}   ")
        } else {
            format!("{prefix}│  ")
        };
        if let Some(kids) = children.get(&Some(&row.id)) {
            for (i, kid) in kids.iter().enumerate() {
                walk(kid, &next, i + 1 == kids.len(), false, children, lines);
            }
        }
    }
    if let Some(roots) = children.get(&None) {
        for root in roots {
            walk(root, "", true, true, &children, &mut lines);
        }
    }
    lines
        .into_iter()
        .map(|line| {
            if line.chars().count() >= width {
                line.chars().take(width - 1).collect()
            } else {
                line
            }
        })
        .collect()
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
            seen: 0,
            agent: None,
        }
    }

    /// Frames of the same tree at fixed widths: no line reaches the width
    /// (so none wraps, and redrawing `drawn` lines up clears exactly the
    /// frame), tree glyphs and columns kept.
    #[test]
    fn the_tree_fits_every_width_without_wrapping() {
        let rows = vec![
            row("s-lead", None, "lead", "root", "calling subagent"),
            row(
                "s-a",
                Some("s-lead"),
                "researcher",
                "spawn",
                "calling grep over the whole workspace for every use of the catalog",
            ),
            row("s-b", Some("s-a"), "researcher/deep", "fork", "thinking"),
            row(
                "s-c",
                Some("s-lead"),
                "reviewer",
                "acp",
                "turn ended: completed",
            ),
        ];
        let mut frames = Vec::new();
        for width in [20, 40, 80, 120] {
            let lines = render_tree(&rows, width);
            for line in &lines {
                assert!(line.chars().count() < width, "{width}: {line:?}");
            }
            frames.push(format!("width {width}:\n{}", lines.join("\n")));
        }
        insta::assert_snapshot!(frames.join("\n\n"));
    }
}
