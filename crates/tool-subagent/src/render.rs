//! What the model reads back from a call: the background-start line, a
//! refused start as a sentence it can act on, and a settled foreground
//! result (the output, or a headline for the stop reason with the
//! diagnostic, usage and partial output). Model-visible: snapshot-tested.

use dsh_core::content::joined_text;
use dsh_core::{ContentBlock, StopReason, ToolOutput, Usage};
use dsh_subagent::budget::usage_line;
use dsh_subagent::{AdmissionError, RegistryError, SubagentError, SubagentResult};

/// What a background start tells the model.
pub fn started_in_background(name: &str, continuable: bool) -> String {
    let follow_up = if continuable {
        format!(" It keeps its conversation afterwards, so you can address it later as `{name}`.")
    } else {
        " It is an external agent: it cannot take follow-up messages.".to_owned()
    };
    format!(
        "Started subagent `{name}` in the background. Its result will arrive in your inbox as a notice when it finishes.{follow_up}"
    )
}

/// A start the runtime refused, as a sentence the model can act on.
pub fn refusal(err: &SubagentError) -> String {
    match err {
        SubagentError::Admission(AdmissionError::DepthLimit { .. })
        | SubagentError::Admission(AdmissionError::Capacity(_))
        | SubagentError::Admission(AdmissionError::Draining) => {
            format!("No subagent was started: {}.", sentence(err))
        }
        SubagentError::Admission(AdmissionError::NameTaken(name)) => format!(
            "No subagent was started: the name `{name}` is already taken by another of your subagents. Choose a different name, or leave `name` out."
        ),
        SubagentError::Admission(AdmissionError::InvalidName { name, reason }) => format!(
            "No subagent was started: `{name}` cannot be used as a name ({reason}). Choose another name, or leave `name` out."
        ),
        SubagentError::Registry(RegistryError::NoProvider(provider)) => format!(
            "No subagent was started: the `{provider}` provider is not available right now. Do the task yourself or try again later."
        ),
        SubagentError::Cancelled => "The subagent start was cancelled.".to_owned(),
        other => format!("No subagent was started: {}.", sentence(other)),
    }
}

/// An error's message without its closing full stop, to end a sentence with.
fn sentence(err: &SubagentError) -> String {
    err.to_string().trim_end_matches('.').to_owned()
}

/// A settled foreground result as the model sees it: the child's output when
/// it completed; otherwise an error result with a headline for the stop
/// reason, the diagnostic and any partial output.
pub fn render_result(name: &str, result: &SubagentResult) -> ToolOutput {
    if result.stop_reason == StopReason::COMPLETED {
        let mut content = result.output.clone();
        if let Some(structured) = &result.structured {
            content.push(ContentBlock::text(format!(
                "Structured output:\n{}",
                serde_json::to_string_pretty(structured).unwrap_or_default()
            )));
        }
        if content.is_empty() {
            content.push(ContentBlock::text(format!(
                "The subagent `{name}` finished without a final message."
            )));
        }
        return ToolOutput {
            content,
            is_error: false,
            end_turn: false,
        };
    }
    let mut text = headline(name, &result.stop_reason);
    if let Some(diagnostic) = &result.diagnostic {
        text.push_str("\nDiagnostic: ");
        text.push_str(diagnostic);
    }
    if result.subtree_usage != Usage::default() {
        text.push_str("\nUsage: ");
        text.push_str(&usage_line(&result.subtree_usage));
    }
    let partial = joined_text(&result.output);
    if !partial.is_empty() {
        text.push_str("\nPartial output before it ended:\n");
        text.push_str(&partial);
    }
    ToolOutput::error(text)
}

/// One sentence on how a child that did not complete ended.
fn headline(name: &str, reason: &StopReason) -> String {
    match reason.as_str() {
        "aborted" => format!("The subagent `{name}` was stopped before it finished."),
        "error" => format!("The subagent `{name}` failed."),
        "max-tokens" => {
            format!("The subagent `{name}` ran out of output tokens before it finished.")
        }
        "refusal" => format!("The subagent `{name}` declined the task."),
        "budget-exhausted" => {
            format!("The subagent `{name}` used up its token budget before it finished.")
        }
        "timed-out" => format!("The subagent `{name}` ran out of time before it finished."),
        other => format!("The subagent `{name}` ended without finishing (`{other}`)."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(reason: &str, output: &str, diagnostic: Option<&str>) -> SubagentResult {
        SubagentResult {
            output: if output.is_empty() {
                Vec::new()
            } else {
                vec![ContentBlock::text(output)]
            },
            structured: None,
            diagnostic: diagnostic.map(str::to_owned),
            stop_reason: StopReason::new(reason.to_owned()),
            usage: Default::default(),
            subtree_usage: Default::default(),
        }
    }

    #[test]
    fn every_stop_reason_renders_a_headline_with_diagnostic_and_partial_output() {
        let rendered: Vec<(String, bool, String)> = [
            ("completed", "All done.", None),
            ("completed", "", None),
            ("aborted", "half of it", None),
            ("error", "", Some("model error: rate-limited")),
            (
                "max-tokens",
                "the first part",
                Some("output limit 100 reached"),
            ),
            ("refusal", "I will not do that.", None),
            ("timed-out", "", Some("the agent took too long")),
            (
                "budget-exhausted",
                "what it found so far",
                Some("the subagent's subtree used 120 tokens of its budget of 100"),
            ),
        ]
        .into_iter()
        .map(|(reason, output, diagnostic)| {
            let mut result = result(reason, output, diagnostic);
            if reason == "budget-exhausted" || output == "All done." {
                result.subtree_usage = Usage {
                    input_tokens: 100,
                    output_tokens: 20,
                    cached_input_tokens: 40,
                    reasoning_tokens: 0,
                };
            }
            let out = render_result("scout", &result);
            (reason.to_owned(), out.is_error, joined_text(&out.content))
        })
        .collect();
        insta::assert_debug_snapshot!(rendered);
    }

    #[test]
    fn refusals_are_sentences() {
        let refusals: Vec<String> = [
            SubagentError::Admission(AdmissionError::DepthLimit { depth: 4, max: 3 }),
            SubagentError::Admission(AdmissionError::Capacity(8)),
            SubagentError::Admission(AdmissionError::NameTaken("scout".into())),
            SubagentError::Admission(AdmissionError::InvalidName {
                name: "Scout".into(),
                reason: "a name starts with a lower-case letter",
            }),
            SubagentError::Registry(RegistryError::NoProvider("fork".into())),
            SubagentError::Admission(AdmissionError::Draining),
            SubagentError::Admission(AdmissionError::OverBudget {
                requested: 5000,
                remaining: 1200,
            }),
            SubagentError::Admission(AdmissionError::BudgetSpent),
            SubagentError::Admission(AdmissionError::AboveCeiling {
                option: "timeout_seconds",
                requested: 7200,
                ceiling: 3600,
            }),
            SubagentError::Cancelled,
        ]
        .iter()
        .map(refusal)
        .collect();
        insta::assert_debug_snapshot!(refusals);
    }
}
