//! The `--json` rendering: one JSON object per line on stdout for every
//! event (the schema is [`crate::json`]'s), and the person's lines on
//! stderr. A child's own lines (its task, streamed text) can reach the
//! renderer before its start does (a child's task is in its log before it
//! is published): they are held and printed right after its
//! `agent_started`, under its name; lines held for a child that never
//! started (its creation failed) are printed, under its id, when the run
//! ends, so nothing a log accepted is left out.

use std::collections::HashMap;

use dsh_core::{SessionEvent, SessionId};
use dsh_subagent::RunOutcome;

use super::{Names, Output, Renderer, Seen, Wants};
use crate::json::{Line, SCHEMA_VERSION, event_line};

/// A line held for a child not started yet.
enum Held {
    Logged(Vec<SessionEvent>),
    Delta(String),
}

/// One JSON object per line.
#[derive(Default)]
pub struct Json {
    names: Names,
    /// What waits for its agent's start, in arrival order.
    held: HashMap<SessionId, Vec<Held>>,
    /// The sessions with held lines, in the order they first held one.
    order: Vec<SessionId>,
}

impl Json {
    /// Print `held`, `session`'s, under `name`.
    fn write(out: &mut Output, name: &str, session: &SessionId, held: &[Held]) {
        let lines: Vec<String> = held
            .iter()
            .flat_map(|held| match held {
                Held::Logged(events) => events
                    .iter()
                    .filter_map(|event| event_line(name, session.as_str(), event))
                    .map(|line| line.to_json())
                    .collect::<Vec<_>>(),
                Held::Delta(text) => vec![
                    Line::TextDelta {
                        agent: name,
                        session: session.as_str(),
                        text,
                    }
                    .to_json(),
                ],
            })
            .collect();
        if !lines.is_empty() {
            out.lines(&lines);
        }
    }

    /// Print `held` under `session`'s name, or hold it until its start.
    fn agent_lines(&mut self, out: &mut Output, session: SessionId, held: Held) {
        match self.names.get(&session) {
            Some(name) => Self::write(out, &name, &session, &[held]),
            None => {
                let queue = self.held.entry(session.clone()).or_default();
                if queue.is_empty() {
                    self.order.push(session);
                }
                queue.push(held);
            }
        }
    }
}

impl Renderer for Json {
    fn wants(&self) -> Wants {
        Wants {
            logs: true,
            deltas: true,
            ..Wants::default()
        }
    }

    fn show(&mut self, seen: Seen, out: &mut Output) {
        match seen {
            Seen::RunStarted {
                model, sessions, ..
            } => out.lines(&[Line::RunStarted {
                schema: SCHEMA_VERSION,
                model: &model,
                sessions: &sessions,
            }
            .to_json()]),
            Seen::Root(id) => self.names.root = Some(id),
            Seen::Lead { id, prompt, .. } => {
                self.names
                    .insert(id.clone(), dsh_subagent::ROOT_NAME.to_owned());
                out.lines(&[Line::AgentStarted {
                    agent: dsh_subagent::ROOT_NAME,
                    session: id.as_str(),
                    parent: None,
                    provider: "root",
                    task: &prompt,
                }
                .to_json()]);
            }
            Seen::Line(text) => out.err_line(&format!("dsh: {text}")),
            Seen::Budget(spend) => out.lines(&[Line::Budget {
                tokens: spend.tokens,
                max_tokens: spend.max_tokens,
                cost: spend.cost,
                max_cost: spend.max_cost,
            }
            .to_json()]),
            Seen::Started { info, .. } => {
                let parent = self.names.parent_of(&info);
                self.names.insert(info.child_id.clone(), info.name.clone());
                out.lines(&[Line::AgentStarted {
                    agent: &info.name,
                    session: info.child_id.as_str(),
                    parent: Some(&parent),
                    provider: &info.provider,
                    task: &info.label,
                }
                .to_json()]);
                if let Some(held) = self.held.remove(&info.child_id) {
                    self.order.retain(|id| id != &info.child_id);
                    Self::write(out, &info.name, &info.child_id, &held);
                }
            }
            Seen::Ended(info, outcome) => {
                let name = self.names.of(&info.child_id);
                let (stop_reason, error) = match &outcome {
                    RunOutcome::Settled(result) => (Some(result.stop_reason.as_str()), None),
                    RunOutcome::Error(error) => (None, Some(error.as_str())),
                };
                let mut lines = Vec::new();
                // An external child has no log: the usage its agent
                // reported for the turn is its `usage` line.
                if let RunOutcome::Settled(result) = &outcome
                    && !info.local
                    && result.usage != dsh_core::Usage::default()
                {
                    lines.push(
                        Line::Usage {
                            agent: &name,
                            session: info.child_id.as_str(),
                            input_tokens: result.usage.input_tokens,
                            output_tokens: result.usage.output_tokens,
                            cached_input_tokens: result.usage.cached_input_tokens,
                            reasoning_tokens: result.usage.reasoning_tokens,
                        }
                        .to_json(),
                    );
                }
                lines.push(
                    Line::Settled {
                        agent: &name,
                        session: info.child_id.as_str(),
                        stop_reason,
                        error,
                    }
                    .to_json(),
                );
                out.lines(&lines);
            }
            Seen::Logged(session, events) => {
                self.agent_lines(out, session, Held::Logged(events));
            }
            Seen::Delta(session, text) => self.agent_lines(out, session, Held::Delta(text)),
            Seen::Reply { agent, text } => out.lines(&[Line::Reply {
                agent: &agent,
                text: text.trim(),
            }
            .to_json()]),
            Seen::RunEnded {
                lead,
                stop_reason,
                error,
            } => {
                self.finish(out);
                out.lines(&[Line::Settled {
                    agent: dsh_subagent::ROOT_NAME,
                    session: lead.as_str(),
                    stop_reason: stop_reason.as_deref().filter(|_| error.is_none()),
                    error: error.as_deref(),
                }
                .to_json()]);
            }
            // The answers are the stream's `text` lines.
            Seen::Progress(_)
            | Seen::ToolStarted { .. }
            | Seen::ToolFinished { .. }
            | Seen::LeadTurn { .. }
            | Seen::Summary(_)
            | Seen::Refresh => {}
        }
    }

    fn finish(&mut self, out: &mut Output) {
        for session in std::mem::take(&mut self.order) {
            if let Some(held) = self.held.remove(&session) {
                Self::write(out, session.as_str(), &session, &held);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use dsh_core::{EventPayload, StopReason};
    use dsh_subagent::{RunInfo, SubagentResult};

    use super::super::testing::output;
    use super::*;

    fn id(text: &str) -> SessionId {
        SessionId::new(text).unwrap()
    }

    fn info(child: &str, name: &str) -> RunInfo {
        RunInfo {
            provider: "spawn".to_owned(),
            name: name.to_owned(),
            label: "survey".to_owned(),
            child_id: id(child),
            parent_session_id: id("s-lead"),
            root: id("s-lead"),
            local: true,
        }
    }

    fn types(text: &str) -> Vec<(String, String)> {
        text.lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).unwrap();
                (
                    value["type"].as_str().unwrap().to_owned(),
                    value["agent"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// Every line is JSON on stdout, the person's lines on stderr; a
    /// child's lines before its start wait for its `agent_started` and
    /// carry its name; the root's are printed at once; lines of a child
    /// that never started come out, under its id, before the lead's
    /// `settled`.
    #[test]
    fn a_childs_lines_wait_for_its_start_and_none_is_lost() {
        let (mut out, stdout, stderr) = output();
        let mut json = Json::default();
        let lead = id("s-lead");
        let text = |session: &SessionId| {
            Seen::Logged(
                session.clone(),
                vec![SessionEvent {
                    seq: 0,
                    time: 0,
                    payload: EventPayload::Usage(dsh_core::Usage {
                        input_tokens: 1,
                        ..Default::default()
                    }),
                }],
            )
        };
        json.show(Seen::Root(lead.clone()), &mut out);
        json.show(text(&lead), &mut out);
        json.show(Seen::Line("a person's line".to_owned()), &mut out);
        json.show(Seen::Delta(id("s-a"), "piece".to_owned()), &mut out);
        json.show(text(&id("s-ghost")), &mut out);
        json.show(
            Seen::Started {
                info: info("s-a", "researcher"),
                agent: None,
            },
            &mut out,
        );
        json.show(
            Seen::Ended(
                info("s-a", "researcher"),
                RunOutcome::Settled(SubagentResult::stopped(StopReason::COMPLETED)),
            ),
            &mut out,
        );
        json.show(
            Seen::RunEnded {
                lead,
                stop_reason: Some("completed".to_owned()),
                error: None,
            },
            &mut out,
        );
        json.finish(&mut out);
        let pairs = |list: &[(&str, &str)]| {
            list.iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            types(&stdout.text()),
            pairs(&[
                ("usage", "lead"),
                ("agent_started", "researcher"),
                ("text_delta", "researcher"),
                ("settled", "researcher"),
                ("usage", "s-ghost"),
                ("settled", "lead"),
            ])
        );
        assert_eq!(stderr.text(), "dsh: a person's line\n");
    }
}
