//! The live view, on a terminal: a tree of agents redrawn in place with
//! ANSI cursor movement, the person's lines (the plain rendering's,
//! [`super::plain::Lines`]) scrolling above it, and under it the focus
//! line: the agent whose model streamed text last and the tail of that
//! text. A row follows its agent's log (status, activity, token usage,
//! read incrementally at each tick) or, for a member without a log (an
//! external child), the runtime's progress bus: its current tool call and
//! the tokens it reported; events the view fell too far behind to read are
//! counted as lost, not treated as an error. While a question is up on the
//! terminal ([`crate::ask`]) nothing is drawn and lines wait.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dsh_core::{AgentStatus, EventPayload, SessionId};
use dsh_subagent::{ProgressItem, ProgressKind, ProgressStream, RunInfo, RunOutcome};

use super::plain::{Lines, recipient};
use super::tree::{Call, Row, focus_line, render_tree};
use super::{Output, Renderer, Seen, Wants, compact};
use crate::config::Price;

/// How often the view refreshes from the agents' logs.
const TICK: Duration = Duration::from_millis(100);

/// How many progress events of members the view has not seen start yet
/// it keeps (beyond that they count as lost).
const EARLY_PROGRESS: usize = dsh_subagent::PROGRESS_BUFFER;

/// How much of the streamed text the view keeps for its focus line.
const FOCUS_KEEP: usize = 1024;

/// The terminal width the view fits its lines to, read again at every
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

/// The live tree and what it draws from.
pub struct Live {
    lines: Lines,
    /// The model's price, for the cost column.
    price: Option<Price>,
    /// The progress bus, read at each tick.
    progress: Option<ProgressStream>,
    rows: Vec<Row>,
    /// Lines of the tree currently drawn at the bottom of the terminal.
    drawn: usize,
    /// A question is up: the tree is not drawn, and lines wait in
    /// `queued`.
    paused: bool,
    /// Lines that arrived while paused.
    queued: Vec<String>,
    /// Progress of members whose start the view has not heard yet (the
    /// bus and the runtime's events are separate), applied at the start
    /// of a member without a log, dropped at a local one's.
    early: HashMap<SessionId, Vec<ProgressKind>>,
    /// Progress events lost so far (the view fell behind the bus, or held
    /// too many early ones).
    lost: u64,
    /// The agent in focus and the tail of what it streamed.
    focus: Option<(SessionId, String)>,
}

impl Live {
    /// A view with the cost column at `price`.
    pub fn new(price: Option<Price>) -> Self {
        Self {
            lines: Lines::default(),
            price,
            progress: None,
            rows: Vec::new(),
            drawn: 0,
            paused: false,
            queued: Vec::new(),
            early: HashMap::new(),
            lost: 0,
            focus: None,
        }
    }

    /// A new row for an agent that began.
    fn row(
        id: SessionId,
        parent: Option<SessionId>,
        name: String,
        provider: String,
        from_log: bool,
        agent: Option<std::sync::Arc<dyn dsh_core::Agent>>,
    ) -> Row {
        Row {
            id,
            parent,
            name,
            provider,
            status: "running".to_owned(),
            activity: "starting".to_owned(),
            input_tokens: 0,
            output_tokens: 0,
            cached_tokens: 0,
            tools: Vec::new(),
            seen: 0,
            from_log,
            agent,
        }
    }

    /// A child started (or was resumed: its row again, a row without a
    /// log keeping its totals).
    fn started(&mut self, info: RunInfo, agent: Option<std::sync::Arc<dyn dsh_core::Agent>>) {
        let mut row = Self::row(
            info.child_id.clone(),
            Some(info.parent_session_id),
            info.name,
            info.provider,
            info.local,
            agent,
        );
        let early = self.early.remove(&info.child_id).unwrap_or_default();
        let at = match self.rows.iter().position(|r| r.id == info.child_id) {
            Some(at) => {
                let existing = &mut self.rows[at];
                if !row.from_log {
                    row.input_tokens = existing.input_tokens;
                    row.output_tokens = existing.output_tokens;
                    row.cached_tokens = existing.cached_tokens;
                }
                *existing = row;
                at
            }
            None => {
                self.rows.push(row);
                self.rows.len() - 1
            }
        };
        // A local child's progress is its log's, already counted.
        if !info.local {
            for kind in early {
                progressed(&mut self.rows[at], kind);
            }
        }
    }

    /// A child settled.
    fn ended(&mut self, info: &RunInfo, outcome: &RunOutcome) {
        if let Some(row) = self.rows.iter_mut().find(|r| r.id == info.child_id) {
            refresh(row);
            row.agent = None;
            row.tools.clear();
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
    }

    /// A tool call began.
    fn tool_started(&mut self, agent: &SessionId, tool: &str, input: &serde_json::Value) {
        if let Some(row) = self.rows.iter_mut().find(|r| &r.id == agent) {
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
    }

    /// A tool call returned: the earliest call of this tool still running
    /// is the one done.
    fn tool_finished(&mut self, agent: &SessionId, tool: &str) {
        if let Some(row) = self.rows.iter_mut().find(|r| &r.id == agent) {
            row.activity = "thinking".to_owned();
            if let Some(at) = row.tools.iter().position(|Call { label, .. }| {
                label == tool
                    || label.starts_with(&format!("{tool} "))
                    || (tool == "wait" && label.starts_with("waiting"))
            }) {
                row.tools.remove(at);
            }
        }
    }

    /// Keep `delta` as the tail of `session`'s streamed text, bounded.
    fn streamed(&mut self, session: SessionId, delta: &str) {
        match &mut self.focus {
            Some((id, text)) if *id == session => text.push_str(delta),
            focus => *focus = Some((session, delta.to_owned())),
        }
        if let Some((_, text)) = &mut self.focus {
            let extra = text.chars().count().saturating_sub(FOCUS_KEEP);
            if extra > 0 {
                *text = text.chars().skip(extra).collect();
            }
        }
    }

    /// Fold progress `items` into the rows of members without a log; the
    /// lines to print (events lost).
    fn take_progress(&mut self, items: Vec<ProgressItem>) -> Vec<String> {
        let mut lost = 0;
        for item in items {
            match item {
                ProgressItem::Missed(n) => lost += n,
                ProgressItem::Event(event) => {
                    let id = &event.member.child_id;
                    match self.rows.iter_mut().find(|row| &row.id == id) {
                        Some(row) if !row.from_log => progressed(row, event.kind),
                        Some(_) => {}
                        None => {
                            let held: usize = self.early.values().map(Vec::len).sum();
                            if held < EARLY_PROGRESS {
                                self.early.entry(id.clone()).or_default().push(event.kind);
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
        self.lost += lost;
        vec![format!(
            "progress: {lost} events lost (the view fell behind; {} so far)",
            self.lost
        )]
    }

    /// Clear the tree, print `lines`, draw the tree again (or, paused,
    /// keep the lines for later).
    fn redraw(&mut self, out: &mut Output, lines: &[String]) {
        if self.paused {
            self.queued.extend(lines.iter().cloned());
            return;
        }
        let mut text = String::new();
        if self.drawn > 0 {
            text.push_str(&format!("\x1b[{}A\r\x1b[J", self.drawn));
        }
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        let tree = render_tree(&self.rows, width(), Instant::now(), self.price);
        self.drawn = tree.len();
        for line in tree {
            text.push_str(&line);
            text.push('\n');
        }
        if let Some((id, streamed)) = &self.focus {
            let name = self
                .rows
                .iter()
                .find(|row| &row.id == id)
                .map_or_else(|| id.to_string(), |row| row.name.clone());
            text.push_str(&focus_line(&name, streamed, width()));
            text.push('\n');
            self.drawn += 1;
        }
        out.raw(&text);
    }
}

impl Renderer for Live {
    fn wants(&self) -> Wants {
        Wants {
            deltas: true,
            agents: true,
            tool_starts: true,
            summary: true,
            ..Wants::default()
        }
    }

    fn show(&mut self, seen: Seen, out: &mut Output) {
        let lines = self.lines.of(&seen);
        // Whether the tree changed though no line is printed.
        let changed = match seen {
            Seen::Lead { id, agent, .. } => {
                self.rows.push(Self::row(
                    id,
                    None,
                    dsh_subagent::ROOT_NAME.to_owned(),
                    "root".to_owned(),
                    true,
                    agent,
                ));
                true
            }
            Seen::Started { info, agent } => {
                self.started(info, agent);
                true
            }
            Seen::Ended(info, outcome) => {
                self.ended(&info, &outcome);
                true
            }
            Seen::ToolStarted { agent, tool, input } => {
                self.tool_started(&agent, &tool, &input);
                true
            }
            Seen::ToolFinished { agent, tool, .. } => {
                self.tool_finished(&agent, &tool);
                true
            }
            // Kept for the next redraw (at the tick), not drawn per delta.
            Seen::Delta(session, text) => {
                self.streamed(session, &text);
                false
            }
            Seen::Progress(stream) => {
                self.progress = Some(stream);
                false
            }
            Seen::Refresh => {
                self.tick(out);
                false
            }
            Seen::RunStarted { .. }
            | Seen::Root(_)
            | Seen::Line(_)
            | Seen::Budget(_)
            | Seen::Logged(..)
            | Seen::LeadTurn { .. }
            | Seen::Summary(_)
            | Seen::Reply { .. }
            | Seen::RunEnded { .. } => false,
        };
        // One redraw per line, as each line is printed when it comes.
        if lines.is_empty() && changed {
            self.redraw(out, &[]);
        }
        for line in lines {
            self.redraw(out, std::slice::from_ref(&line));
        }
    }

    fn tick_every(&self) -> Option<Duration> {
        Some(TICK)
    }

    /// Refresh every row from its agent and the progress bus, and redraw.
    fn tick(&mut self, out: &mut Output) {
        let mut items = Vec::new();
        if let Some(stream) = self.progress.as_mut() {
            while let Some(item) = stream.try_next() {
                items.push(item);
            }
        }
        let lines = self.take_progress(items);
        for row in &mut self.rows {
            refresh(row);
        }
        self.redraw(out, &lines);
    }

    fn pause(&mut self, out: &mut Output) {
        if self.drawn > 0 {
            out.raw(&format!("\x1b[{}A\r\x1b[J", self.drawn));
            self.drawn = 0;
        }
        self.paused = true;
    }

    fn resume(&mut self, out: &mut Output) {
        self.paused = false;
        let queued = std::mem::take(&mut self.queued);
        self.redraw(out, &queued);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use dsh_core::StopReason;
    use dsh_subagent::SubagentResult;

    use super::super::testing::output;
    use super::super::tree::tests::row;
    use super::*;

    // A streamed delta moves the focus and is kept, its tail bounded; it
    // prints nothing by itself.
    #[test]
    fn streamed_text_moves_the_focus_and_keeps_a_bounded_tail() {
        let (mut out, stdout, _) = output();
        let mut live = Live::new(None);
        let a = SessionId::new("s-a").unwrap();
        let b = SessionId::new("s-b").unwrap();
        live.show(Seen::Delta(a.clone(), "hello ".to_owned()), &mut out);
        live.show(Seen::Delta(a.clone(), "world".to_owned()), &mut out);
        assert_eq!(live.focus, Some((a, "hello world".to_owned())));
        live.show(
            Seen::Delta(b.clone(), "x".repeat(FOCUS_KEEP + 10)),
            &mut out,
        );
        let focus = live.focus.clone().unwrap();
        assert_eq!(focus.0, b);
        assert_eq!(focus.1.chars().count(), FOCUS_KEEP);
        assert_eq!(stdout.text(), "");
    }

    /// While a question is up the view draws nothing: its tree is cleared,
    /// lines wait, and resuming prints them and the tree again.
    #[test]
    fn a_paused_live_view_holds_its_lines_until_it_resumes() {
        let (mut out, stdout, _) = output();
        let mut live = Live::new(None);
        live.rows
            .push(row("s-lead", None, "lead", "root", "thinking"));
        live.show(Seen::Line("before".to_owned()), &mut out);
        assert!(live.drawn > 0);
        live.pause(&mut out);
        let cleared = stdout.text();
        live.show(Seen::Line("while asking".to_owned()), &mut out);
        live.tick(&mut out);
        assert_eq!(live.drawn, 0);
        assert_eq!(live.queued, ["while asking"]);
        assert_eq!(stdout.text(), cleared, "drawn while paused");
        live.resume(&mut out);
        assert!(live.queued.is_empty());
        assert!(live.drawn > 0);
        assert!(stdout.text()[cleared.len()..].starts_with("while asking\n"));
    }

    /// The rows follow the runtime's events: a start adds the child under
    /// its creator, named as the event says; a finish marks it done; the
    /// tree is drawn after each line.
    #[test]
    fn a_start_and_a_finish_draw_the_row_named_by_the_event() {
        let (mut out, stdout, _) = output();
        let mut live = Live::new(None);
        let lead = SessionId::new("s-lead").unwrap();
        live.show(
            Seen::Lead {
                id: lead.clone(),
                agent: None,
                prompt: "go".to_owned(),
            },
            &mut out,
        );
        let info = RunInfo {
            provider: "spawn".to_owned(),
            name: "researcher".to_owned(),
            label: "survey".to_owned(),
            child_id: SessionId::new("s-a").unwrap(),
            parent_session_id: lead.clone(),
            root: lead,
            local: true,
        };
        live.show(
            Seen::Started {
                info: info.clone(),
                agent: None,
            },
            &mut out,
        );
        live.show(
            Seen::Ended(
                info,
                RunOutcome::Settled(SubagentResult::stopped(StopReason::COMPLETED)),
            ),
            &mut out,
        );
        let text = stdout.text();
        assert!(
            text.contains("started researcher (spawn) for lead: survey\n"),
            "{text}"
        );
        assert!(text.contains("finished researcher: completed\n"), "{text}");
        let child = live.rows.iter().find(|r| r.name == "researcher").unwrap();
        assert_eq!(
            (
                child.status.as_str(),
                child.parent.as_ref().map(|p| p.as_str())
            ),
            ("done", Some("s-lead"))
        );
    }

    /// An ACP child's progress drives its row: its tool call in progress
    /// (events that came before its start included), its tokens summed
    /// from usage across a resume, events lost reported as a line; a local
    /// child's progress is ignored (its log is already counted).
    #[test]
    fn an_external_childs_row_follows_the_progress_bus() {
        use dsh_subagent::{ProgressEvent, ProgressMember};
        let now = Instant::now();
        let mut live = Live::new(None);
        let (mut out, _, _) = output();
        let lead = SessionId::new("s-lead").unwrap();
        live.rows
            .push(row("s-lead", None, "lead", "root", "calling acp"));
        let start = |live: &mut Live, out: &mut Output, id: &str, provider: &str, local: bool| {
            live.show(
                Seen::Started {
                    info: RunInfo {
                        provider: provider.to_owned(),
                        name: id.to_owned(),
                        label: String::new(),
                        child_id: SessionId::new(id).unwrap(),
                        parent_session_id: lead.clone(),
                        root: lead.clone(),
                        local,
                    },
                    agent: None,
                },
                out,
            );
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
        let feed = |live: &mut Live, items: Vec<ProgressItem>| {
            let lines = live.take_progress(items);
            let frame = render_tree(&live.rows, 100, now, None);
            let above: String = lines.iter().map(|line| format!("{line}\n")).collect();
            format!("{above}{}", frame.join("\n"))
        };
        let mut frames = Vec::new();
        // Progress before the start is held, then applied.
        frames.push(feed(&mut live, vec![event("run-acp", usage(100, 20))]));
        start(&mut live, &mut out, "run-acp", "acp", false);
        start(&mut live, &mut out, "s-local", "spawn", true);
        frames.push(feed(
            &mut live,
            vec![
                event(
                    "run-acp",
                    ProgressKind::ToolCallStarted {
                        id: "c1".to_owned(),
                        name: "Read README.md".to_owned(),
                    },
                ),
                event("run-acp", usage(1_000, 50)),
                event("s-local", usage(5_000, 5_000)),
            ],
        ));
        frames.push(feed(
            &mut live,
            vec![
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
            ],
        ));
        // A follow-up is a new activation of the same child: totals stay.
        start(&mut live, &mut out, "run-acp", "acp", false);
        frames.push(feed(&mut live, vec![event("run-acp", usage(10, 1))]));
        {
            let acp = live
                .rows
                .iter()
                .find(|r| r.id.as_str() == "run-acp")
                .unwrap();
            assert_eq!((acp.input_tokens, acp.output_tokens), (1_110, 71));
            let local = live
                .rows
                .iter()
                .find(|r| r.id.as_str() == "s-local")
                .unwrap();
            assert_eq!((local.input_tokens, local.output_tokens), (0, 0));
            assert_eq!(live.lost, 7);
        }
        insta::assert_snapshot!(frames.join("\n\n"));
    }
}
