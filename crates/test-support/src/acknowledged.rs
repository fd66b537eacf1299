//! What a killed process had acknowledged, read from the session
//! directory it left, and whether what came after (a resume, a send, a
//! restarted world) kept all of it, once. The kill harnesses take an
//! [`OnDisk`] right after each kill and another after the recovery, and
//! fail on whatever [`OnDisk::lost_in`] reports.
//!
//! A SIGKILL keeps the page cache, so every complete line in a log when
//! the process died is something the store had written, and so something
//! the run may have acknowledged: an accepted message, a tool result, a
//! settlement notice (an accepted message too), a team message queued or
//! delivered. Recovery may cut a torn last line and append; it may remove
//! a log no catalog entry names (an orphan, whose creation was never
//! acknowledged); it must not rewrite, drop or repeat anything else.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::Value;

/// The complete lines of every session log of a directory, header first
/// (a torn last line, which the next open cuts, is left out; a log whose
/// header is torn holds no line).
#[derive(Debug, Clone, Default)]
pub struct OnDisk {
    logs: BTreeMap<String, Vec<String>>,
}

/// How much an [`OnDisk`] holds that a recovery must keep, so a harness
/// can show its kills left something to check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    /// Messages accepted by an inbox (notices included).
    pub accepted: usize,
    /// Tool results.
    pub results: usize,
    /// Team messages queued.
    pub team_messages: usize,
}

impl OnDisk {
    /// Every `*.jsonl` of `dir` that is not hidden (a temporary); an empty
    /// set when `dir` does not exist yet.
    ///
    /// # Panics
    /// When a complete line is not JSON (a kill may tear only the last line)
    /// or a log cannot be read.
    #[allow(clippy::expect_used)]
    pub fn read(dir: &Path) -> Self {
        let mut logs = BTreeMap::new();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Self { logs };
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let name = path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            let Some(id) = name
                .strip_suffix(".jsonl")
                .filter(|id| !id.starts_with('.'))
            else {
                continue;
            };
            let bytes = std::fs::read(&path).expect("a session log reads");
            let complete = bytes
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |at| at + 1);
            let lines: Vec<String> = bytes[..complete]
                .split(|b| *b == b'\n')
                .filter(|line| !line.is_empty())
                .enumerate()
                .map(|(index, line)| {
                    if let Err(err) = serde_json::from_slice::<Value>(line) {
                        panic!(
                            "{}:{}: a complete line does not parse: {err}",
                            path.display(),
                            index + 1
                        );
                    }
                    String::from_utf8_lossy(line).into_owned()
                })
                .collect();
            logs.insert(id.to_owned(), lines);
        }
        Self { logs }
    }

    /// How many acknowledged items the logs hold.
    pub fn held(&self) -> Held {
        let mut held = Held::default();
        for event in self.logs.values().flat_map(|lines| events(lines)) {
            match event["type"].as_str() {
                Some("inbox/accepted") => held.accepted += 1,
                Some("tool/result") => held.results += 1,
                Some("team/message") => held.team_messages += 1,
                _ => {}
            }
        }
        held
    }

    /// What `later` (the same directory after a recovery) lost, changed or
    /// repeated of `self`, one line each; empty when it kept everything
    /// once:
    /// - every log is still there, but one no catalog entry (`subagent/child`)
    ///   of `self` or `later` names, which a recovery may remove as an orphan;
    /// - each log's lines are the first lines of its later self, byte for byte;
    /// - in each later log, every accepted message id, every tool result's
    ///   call id and every team message id occurs once.
    pub fn lost_in(&self, later: &Self) -> Vec<String> {
        let mut lost = Vec::new();
        let cataloged: Vec<String> = [self, later]
            .iter()
            .flat_map(|disk| disk.logs.values())
            .flat_map(|lines| events(lines))
            .filter(|event| event["type"] == "subagent/child")
            .filter_map(|event| event["payload"]["child_id"].as_str().map(str::to_owned))
            .collect();
        for (id, lines) in &self.logs {
            let Some(now) = later.logs.get(id) else {
                if cataloged.contains(id) && !lines.is_empty() {
                    lost.push(format!("{id}: the log of a cataloged child is gone"));
                }
                continue;
            };
            if let Some(at) = lines.iter().zip(now).position(|(was, is)| was != is) {
                lost.push(format!(
                    "{id}: line {} was rewritten:\n  was {}\n  is  {}",
                    at + 1,
                    lines[at],
                    now[at]
                ));
            } else if now.len() < lines.len() {
                lost.push(format!(
                    "{id}: {} of its {} lines are gone, from: {}",
                    lines.len() - now.len(),
                    lines.len(),
                    lines[now.len()]
                ));
            }
        }
        for (id, lines) in &later.logs {
            for (what, times) in repeated(lines) {
                lost.push(format!("{id}: {what} is there {times} times"));
            }
        }
        lost
    }
}

/// The events of a log's lines (its header left out).
fn events(lines: &[String]) -> impl Iterator<Item = Value> + '_ {
    lines
        .iter()
        .skip(1)
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
}

/// The identities of a log that must occur once, with their counts where
/// above one.
fn repeated(lines: &[String]) -> Vec<(String, usize)> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for event in events(lines) {
        let identity = match event["type"].as_str() {
            Some("inbox/accepted") => event["payload"]["message"]["id"]
                .as_str()
                .map(|id| format!("accepted message {id}")),
            Some("tool/result") => event["payload"]["call_id"]
                .as_str()
                .map(|id| format!("result of call {id}")),
            Some("team/message") => event["payload"]["id"]
                .as_str()
                .map(|id| format!("team message {id}")),
            _ => None,
        };
        if let Some(identity) = identity {
            *counts.entry(identity).or_default() += 1;
        }
    }
    let mut repeated: Vec<(String, usize)> =
        counts.into_iter().filter(|(_, times)| *times > 1).collect();
    repeated.sort();
    repeated
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logs by id, each as its lines.
    type Logs<'a> = &'a [(&'a str, &'a [&'a str])];

    fn disk(logs: Logs<'_>) -> OnDisk {
        OnDisk {
            logs: logs
                .iter()
                .map(|(id, lines)| {
                    (
                        (*id).to_owned(),
                        lines.iter().map(|line| (*line).to_owned()).collect(),
                    )
                })
                .collect(),
        }
    }

    const HEADER: &str = r#"{"id":"a"}"#;
    const ACCEPTED: &str = r#"{"type":"inbox/accepted","payload":{"message":{"id":"m-1"}}}"#;
    const RESULT: &str = r#"{"type":"tool/result","payload":{"call_id":"c-1"}}"#;
    const CHILD: &str = r#"{"type":"subagent/child","payload":{"child_id":"b"}}"#;

    #[test]
    fn a_recovery_that_only_appends_keeps_everything() {
        let before = disk(&[("a", &[HEADER, ACCEPTED]), ("orphan", &[HEADER])]);
        let after = disk(&[("a", &[HEADER, ACCEPTED, RESULT])]);
        assert_eq!(before.lost_in(&after), Vec::<String>::new());
        assert_eq!(
            after.held(),
            Held {
                accepted: 1,
                results: 1,
                team_messages: 0
            }
        );
    }

    #[test]
    fn a_dropped_rewritten_or_repeated_event_or_a_cataloged_log_gone_is_reported() {
        let before = disk(&[("a", &[HEADER, ACCEPTED, CHILD]), ("b", &[HEADER])]);
        let cases: [(Logs<'_>, &str); 4] = [
            (&[("a", &[HEADER, CHILD]), ("b", &[HEADER])], "rewritten"),
            (&[("a", &[HEADER, ACCEPTED]), ("b", &[HEADER])], "gone"),
            (
                &[("a", &[HEADER, ACCEPTED, CHILD])],
                "cataloged child is gone",
            ),
            (
                &[
                    ("a", &[HEADER, ACCEPTED, CHILD, ACCEPTED]),
                    ("b", &[HEADER]),
                ],
                "accepted message m-1 is there 2 times",
            ),
        ];
        for (after, says) in cases {
            let lost = before.lost_in(&disk(after));
            assert_eq!(lost.len(), 1, "{lost:?}");
            assert!(lost[0].contains(says), "{lost:?}");
        }
    }
}
