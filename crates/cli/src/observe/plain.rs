//! The plain rendering, for a stdout that is not a terminal: one line per
//! event, written the moment the renderer receives it (a start, a message
//! an agent sent, a finish, the lead's answers, the closing summary).
//! [`Lines`] words those lines; the live view prints the same ones above
//! its tree.

use dsh_subagent::{RunInfo, RunOutcome};
use serde_json::Value;

use super::{Names, Output, Renderer, Seen, Wants, compact};

/// The person's lines for each event, and the names they use.
#[derive(Default)]
pub(super) struct Lines {
    pub(super) names: Names,
}

impl Lines {
    /// The lines `seen` prints (none for what is not a person's line), the
    /// names it teaches kept.
    pub(super) fn of(&mut self, seen: &Seen) -> Vec<String> {
        match seen {
            Seen::RunStarted { banner, .. } => vec![banner.clone()],
            Seen::Root(id) => {
                self.names.root = Some(id.clone());
                Vec::new()
            }
            Seen::Lead { id, prompt, .. } => {
                self.names
                    .insert(id.clone(), dsh_subagent::ROOT_NAME.to_owned());
                vec![format!("lead {id}: {}", compact(prompt, 200))]
            }
            Seen::Line(text) => vec![text.clone()],
            Seen::Budget(spend) => vec![format!("budget: {} used", spend.line())],
            Seen::Started { info, .. } => vec![self.started(info)],
            Seen::Ended(info, outcome) => vec![self.ended(info, outcome)],
            Seen::ToolFinished {
                agent,
                tool,
                input,
                delivered: true,
            } => {
                let text = input.get("message").and_then(Value::as_str);
                match (tool.as_str(), text) {
                    ("send_message", Some(text)) => vec![format!(
                        "message {} -> {}: {}",
                        self.names.of(agent),
                        recipient(input).unwrap_or("?"),
                        compact(text, 200)
                    )],
                    ("report", Some(text)) => vec![format!(
                        "report {} -> its parent: {}",
                        self.names.of(agent),
                        compact(text, 200)
                    )],
                    _ => Vec::new(),
                }
            }
            Seen::LeadTurn {
                stop_reason,
                failed,
                diagnostic,
                answer,
            } => {
                let answer = answer.trim();
                let mut lines = Vec::new();
                if *failed || answer.is_empty() {
                    let diagnostic = diagnostic
                        .as_deref()
                        .map(|d| format!(": {}", compact(d, 200)))
                        .unwrap_or_default();
                    lines.push(format!("lead stopped ({stop_reason}){diagnostic}"));
                }
                if !answer.is_empty() {
                    lines.push(format!("lead: {}", answer.replace('\n', "\n  ")));
                }
                lines
            }
            Seen::Summary(lines) => lines.clone(),
            Seen::Reply { agent, text } => {
                vec![format!("{agent}: {}", text.trim().replace('\n', "\n  "))]
            }
            Seen::Progress(_)
            | Seen::ToolStarted { .. }
            | Seen::ToolFinished { .. }
            | Seen::Logged(..)
            | Seen::Delta(..)
            | Seen::RunEnded { .. }
            | Seen::Refresh => Vec::new(),
        }
    }

    /// `started <name> (<provider>) for <parent>: <label>`, the child's
    /// name kept.
    fn started(&mut self, info: &RunInfo) -> String {
        self.names.insert(info.child_id.clone(), info.name.clone());
        let label = if info.label.is_empty() {
            String::new()
        } else {
            format!(": {}", compact(&info.label, 120))
        };
        format!(
            "started {} ({}) for {}{label}",
            info.name,
            info.provider,
            self.names.parent_of(info)
        )
    }

    /// `finished <name>: <stop reason>` or `failed <name>: <error>`.
    fn ended(&self, info: &RunInfo, outcome: &RunOutcome) -> String {
        let name = self.names.of(&info.child_id);
        match outcome {
            RunOutcome::Settled(result) => format!("finished {name}: {}", result.stop_reason),
            RunOutcome::Error(error) => format!("failed {name}: {}", compact(error, 200)),
        }
    }
}

/// Whom a messaging call addresses: `to` (the control tool) or `target`
/// (the team tools).
pub(super) fn recipient(input: &Value) -> Option<&str> {
    input
        .get("to")
        .or_else(|| input.get("target"))
        .and_then(Value::as_str)
}

/// One line per event on stdout.
#[derive(Default)]
pub struct Plain {
    lines: Lines,
}

impl Renderer for Plain {
    fn wants(&self) -> Wants {
        Wants {
            summary: true,
            ..Wants::default()
        }
    }

    fn show(&mut self, seen: Seen, out: &mut Output) {
        let lines = self.lines.of(&seen);
        if !lines.is_empty() {
            out.lines(&lines);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use dsh_core::{SessionId, StopReason};
    use dsh_subagent::SubagentResult;
    use serde_json::json;

    use super::super::testing::output;
    use super::*;

    fn info(id: &str, name: &str, parent: &str, label: &str) -> RunInfo {
        RunInfo {
            provider: "spawn".to_owned(),
            name: name.to_owned(),
            label: label.to_owned(),
            child_id: SessionId::new(id).unwrap(),
            parent_session_id: SessionId::new(parent).unwrap(),
            root: SessionId::new("s-lead").unwrap(),
            local: true,
        }
    }

    /// A run as plain lines: the banner, the lead, starts named by the
    /// event (a grandchild's creator by its own start), a message, a
    /// finish and a failure, the lead's answer; tool starts, logs and
    /// deltas print nothing.
    #[test]
    fn each_event_is_one_line_named_from_the_start_event() {
        let (mut out, stdout, stderr) = output();
        let mut plain = Plain::default();
        let lead = SessionId::new("s-lead").unwrap();
        let a = info("s-a", "researcher", "s-lead", "survey\nthe crates");
        let b = info("s-b", "researcher/deep", "s-a", "");
        for seen in [
            Seen::RunStarted {
                banner: "dsh: banner".to_owned(),
                model: "demo".to_owned(),
                sessions: "dir".to_owned(),
            },
            Seen::Root(lead.clone()),
            Seen::Lead {
                id: lead.clone(),
                agent: None,
                prompt: "do   it".to_owned(),
            },
            Seen::Started {
                info: a.clone(),
                agent: None,
            },
            Seen::Started {
                info: b.clone(),
                agent: None,
            },
            Seen::ToolStarted {
                agent: a.child_id.clone(),
                tool: "send_message".to_owned(),
                input: json!({}),
            },
            Seen::ToolFinished {
                agent: a.child_id.clone(),
                tool: "send_message".to_owned(),
                input: json!({"to": "deep", "message": "hi\nthere"}),
                delivered: true,
            },
            Seen::ToolFinished {
                agent: a.child_id.clone(),
                tool: "send_message".to_owned(),
                input: json!({"to": "deep", "message": "refused"}),
                delivered: false,
            },
            Seen::Delta(lead.clone(), "x".to_owned()),
            Seen::Ended(b, RunOutcome::Error("its log\nfailed".to_owned())),
            Seen::Ended(
                a,
                RunOutcome::Settled(SubagentResult::stopped(StopReason::COMPLETED)),
            ),
            Seen::LeadTurn {
                stop_reason: "completed".to_owned(),
                failed: false,
                diagnostic: None,
                answer: "two\nlines".to_owned(),
            },
            Seen::RunEnded {
                lead,
                stop_reason: Some("completed".to_owned()),
                error: None,
            },
        ] {
            plain.show(seen, &mut out);
        }
        assert_eq!(
            stdout.text(),
            "dsh: banner\n\
             lead s-lead: do it\n\
             started researcher (spawn) for lead: survey the crates\n\
             started researcher/deep (spawn) for researcher\n\
             message researcher -> deep: hi there\n\
             failed researcher/deep: its log failed\n\
             finished researcher: completed\n\
             lead: two\n  lines\n"
        );
        assert_eq!(stderr.text(), "");
    }
}
