//! Results: what a child run ends with, and the rules that derive it from
//! the child's log (the output is the last non-empty assistant message) and
//! bound what a provider may say about a failure (a diagnostic of at most
//! 4096 UTF-8 bytes, cut on a character boundary).

use dsh_core::{ContentBlock, EventPayload, SessionEvent, StopReason, Usage};
use serde_json::Value;

/// The most bytes a diagnostic may hold.
pub const MAX_DIAGNOSTIC_BYTES: usize = 4096;

/// The marker that ends a cut diagnostic.
pub const TRUNCATION_MARKER: &str = " [diagnostic truncated]";

/// The marker that ends a cut output (in an outcome record or a notice).
pub(crate) const OUTPUT_CUT: &str = " [output truncated]";

/// How a child run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct SubagentResult {
    /// The child's final assistant output (see [`final_output`]).
    pub output: Vec<ContentBlock>,
    /// The structured value, when an output schema was requested and met.
    pub structured: Option<Value>,
    /// Provider-written facts about a non-completed end; never assistant text.
    pub diagnostic: Option<String>,
    /// Why it ended; anything but `completed` means `output` may be partial.
    pub stop_reason: StopReason,
    /// The tokens this activation used, as its model or agent reported
    /// them (zero when nothing was reported).
    pub usage: Usage,
    /// The tokens this activation's whole subtree used: its own usage and
    /// that of every activation below it that settled while it ran. Equal
    /// to `usage` for a leaf; filled in by the runtime.
    pub subtree_usage: Usage,
}

impl SubagentResult {
    /// A result with this stop reason and nothing else.
    pub fn stopped(stop_reason: StopReason) -> Self {
        Self {
            output: Vec::new(),
            structured: None,
            diagnostic: None,
            stop_reason,
            usage: Usage::default(),
            subtree_usage: Usage::default(),
        }
    }

    /// The reply: the text of [`SubagentResult::output`] (its text blocks
    /// joined), without the summary, structured value or diagnostic a
    /// settlement notice adds around it.
    pub fn output_text(&self) -> String {
        dsh_core::content::joined_text(&self.output)
    }

    /// Attach a diagnostic, bounded by [`bound_diagnostic`].
    #[must_use]
    pub fn with_diagnostic(mut self, diagnostic: impl Into<String>) -> Self {
        self.diagnostic = Some(bound_diagnostic(diagnostic.into()));
        self
    }
}

/// Cut `text` to [`MAX_DIAGNOSTIC_BYTES`] on a character boundary, ending
/// with [`TRUNCATION_MARKER`] when anything was cut.
pub fn bound_diagnostic(text: String) -> String {
    bound_text(text, MAX_DIAGNOSTIC_BYTES, TRUNCATION_MARKER)
}

/// Cut `text` to `max` bytes on a character boundary, ending with
/// `marker` (shorter than `max`) when anything was cut.
pub(crate) fn bound_text(text: String, max: usize, marker: &str) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub(marker.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = text[..end].to_owned();
    cut.push_str(marker);
    cut
}

/// The tokens a run whose events are `events` used: the sum of its usage
/// events. Pass only the run's own events, as for [`final_output`].
pub fn usage_of(events: &[SessionEvent]) -> Usage {
    let mut total = Usage::default();
    for event in events {
        if let EventPayload::Usage(usage) = &event.payload {
            total += *usage;
        }
    }
    total
}

/// The output of a run whose events are `events`: the content of the last
/// assistant message that says something (usage-only and empty messages
/// skipped); else the accumulated assistant text; else nothing. Pass only
/// the run's own events, so a fork never returns text inherited from its
/// parent.
pub fn final_output(events: &[SessionEvent]) -> Vec<ContentBlock> {
    let mut accumulated = String::new();
    let mut last = None;
    for event in events {
        if let EventPayload::AssistantMessage(entry) = &event.payload {
            if !dsh_core::content::is_blank(&entry.content) {
                last = Some(&entry.content);
            }
            accumulated.push_str(&dsh_core::content::joined_text(&entry.content));
        }
    }
    match last {
        Some(content) => content.clone(),
        None if !accumulated.is_empty() => vec![ContentBlock::text(accumulated)],
        None => Vec::new(),
    }
}

/// The stop reason of the last turn in `events`, if any turn ended.
pub fn last_stop(events: &[SessionEvent]) -> Option<(StopReason, Option<String>)> {
    events.iter().rev().find_map(|event| match &event.payload {
        EventPayload::TurnEnd(end) => Some((end.stop_reason.clone(), end.diagnostic.clone())),
        _ => None,
    })
}

/// A one-line account of how a child ended, for notices.
pub fn summary_line(name: &str, result: &SubagentResult) -> String {
    match result.stop_reason.as_str() {
        "completed" => format!("{name} completed"),
        "aborted" => format!("{name} was stopped before finishing"),
        "max-tokens" => format!("{name} ran out of output tokens before finishing"),
        "refusal" => format!("{name} declined the task"),
        "error" => format!("{name} failed"),
        "budget-exhausted" => format!("{name} used up its token budget before finishing"),
        "timed-out" => format!("{name} ran out of time before finishing"),
        other => format!("{name} ended ({other})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::session::AssistantEntry;

    fn assistant(seq: u64, text: &str) -> SessionEvent {
        SessionEvent {
            seq,
            time: 0,
            payload: EventPayload::AssistantMessage(AssistantEntry {
                content: if text.is_empty() {
                    Vec::new()
                } else {
                    vec![ContentBlock::text(text)]
                },
            }),
        }
    }

    #[test]
    fn output_is_the_last_message_that_says_something() {
        let events = [
            assistant(0, "first"),
            assistant(1, "second"),
            assistant(2, ""),
        ];
        assert_eq!(final_output(&events), [ContentBlock::text("second")]);
        assert!(final_output(&[assistant(0, "")]).is_empty());
        assert!(final_output(&[]).is_empty());
    }

    #[test]
    fn diagnostics_are_bounded_on_a_character_boundary() {
        let long = "é".repeat(3000); // 6000 bytes
        let cut = bound_diagnostic(long);
        assert!(cut.len() <= MAX_DIAGNOSTIC_BYTES);
        assert!(cut.ends_with(TRUNCATION_MARKER));
        assert_eq!(bound_diagnostic("short".into()), "short");
        let exact = "a".repeat(MAX_DIAGNOSTIC_BYTES);
        assert_eq!(bound_diagnostic(exact.clone()), exact);
    }
}
