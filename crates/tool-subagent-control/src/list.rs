//! `list_agents`: the caller's tree (the root, every reachable continuable
//! descendant, and any other child whose row carries a diagnostic, so an
//! unknown kind or an unreadable log is explained, not counted away) with
//! names, labels, activity and diagnostics,
//! rendered as compact text. Activity comes from the live registry and says
//! whether an agent is working right now; a running local child's line adds
//! what it is doing (the tool it is in and for how long, or thinking, and
//! the tokens its activation used so far), read from its log on demand.

use async_trait::async_trait;
use dsh_core::{AgentStatus, SessionId, Tool, ToolContext, ToolError, ToolOutput};
use dsh_subagent::{ChildActivity, ChildMode, CurrentActivity, RowDiagnostic, SubagentRuntime};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::RuntimeBinding;
use crate::tree::TreeView;

/// The first line of a `list_agents` listing.
pub const LISTING_HEADING: &str = "Agents in your tree (activity is whether an agent is working \
     right now, not whether its task is done; every agent listed can be messaged unless its line \
     says otherwise):";

/// The arguments of `list_agents`: none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListAgentsInput {}

/// The `list_agents` tool.
#[derive(Debug, Clone)]
pub struct ListAgentsTool {
    binding: RuntimeBinding,
}

impl ListAgentsTool {
    /// The tool, acting through `binding`'s runtime.
    pub fn new(binding: RuntimeBinding) -> Self {
        Self { binding }
    }
}

/// Whether the live agent of `id` is running a turn now.
fn activity(runtime: &SubagentRuntime, id: &SessionId) -> &'static str {
    match runtime.registry().get(id).map(|agent| agent.status()) {
        Some(AgentStatus::Running) => "running",
        _ => "inactive",
    }
}

fn diagnostic_text(diagnostic: RowDiagnostic, mode: &ChildMode) -> String {
    match diagnostic {
        RowDiagnostic::Corrupt => {
            "its own subagents could not be listed: its log is corrupt".to_owned()
        }
        RowDiagnostic::Unavailable => {
            "its own subagents could not be listed: its log could not be read".to_owned()
        }
        RowDiagnostic::Unsupported => {
            format!("its kind `{mode}` is not one this runtime can use, so it cannot be messaged")
        }
    }
}

/// The activity of a listed child: `running` with what a live child is
/// doing now (the tool it is in and for how long, tokens so far: a local
/// child's from its log, an external run's from what it reported), else
/// `inactive`.
fn row_activity(runtime: &SubagentRuntime, id: &SessionId, activity: ChildActivity) -> String {
    match activity {
        ChildActivity::Running => match runtime.current_activity(id) {
            Some(now) => format!("running ({})", activity_detail(&now)),
            None => "running".to_owned(),
        },
        ChildActivity::Idle | ChildActivity::Inactive => "inactive".to_owned(),
    }
}

/// What a running child is doing, in a few words.
fn activity_detail(now: &CurrentActivity) -> String {
    let doing = match &now.tool {
        Some(tool) => format!("in `{}` for {}s", tool.name, tool.for_ms / 1000),
        None => "thinking".to_owned(),
    };
    format!("{doing}, {} tokens so far", now.tokens)
}

#[async_trait]
impl Tool for ListAgentsTool {
    fn name(&self) -> &str {
        "list_agents"
    }

    fn description(&self) -> String {
        "List the agents in your tree: `lead` (the root), every subagent that can be messaged \
         and any child with a problem to explain (marked on its line), each by the name to use \
         with send_message and interrupt_agent, with its task label and its activity. Activity is `running` when the agent is working right now (with what \
         it is doing: the tool it is in and for how long, or thinking, and the tokens it used so far) and `inactive` \
         otherwise; it is not task completion (you are told when a subagent finishes), and an \
         inactive agent can still be messaged. Use it to recall names, not to poll: call wait to \
         block until something arrives."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {},
            "additionalProperties": false
        })
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let ListAgentsInput {} = crate::parse(self.name(), input)?;
        let runtime = self.binding.runtime()?;
        let view = TreeView::of(runtime, &ctx.agent, &ctx.cancel).await?;
        Ok(ToolOutput::text(render(runtime, &view, ctx.agent.id())))
    }
}

/// What a listed child's settled runs used: its subtree's tokens, and its
/// own share when its subagents used some.
fn usage_column(usage: &dsh_subagent::ChildUsage) -> String {
    let subtree = dsh_subagent::budget::budget_tokens(&usage.subtree);
    let own = dsh_subagent::budget::budget_tokens(&usage.own);
    if own == subtree {
        format!(" (used {subtree} tokens)")
    } else {
        format!(" (used {subtree} tokens with its subagents, {own} itself)")
    }
}

/// The listing as the model reads it.
fn render(runtime: &SubagentRuntime, view: &TreeView, caller: &SessionId) -> String {
    let you = |id: &SessionId| if id == caller { " (you)" } else { "" };
    let mut lines = vec![
        LISTING_HEADING.to_owned(),
        format!(
            "- lead{}: {}",
            you(&view.root),
            activity(runtime, &view.root)
        ),
    ];
    let mut omitted = 0usize;
    for row in &view.rows {
        // External and one-shot children cannot be messaged and have
        // nothing to explain: only counted. A row with a diagnostic (an
        // unknown kind included) is listed, so the model learns why.
        if row.entry.mode != ChildMode::CONTINUABLE && row.diagnostic.is_none() {
            omitted += 1;
            continue;
        }
        let id = &row.entry.child_id;
        let mut line = format!(
            "- {}{}: {} — {}",
            view.name_of(id),
            you(id),
            row_activity(runtime, id, row.activity),
            row.entry.label
        );
        if !row.usage.is_empty() {
            line.push_str(&usage_column(&row.usage));
        }
        if let Some(diagnostic) = row.diagnostic {
            line.push_str(&format!(
                " [{}]",
                diagnostic_text(diagnostic, &row.entry.mode)
            ));
            if row.entry.mode != ChildMode::CONTINUABLE && diagnostic != RowDiagnostic::Unsupported
            {
                line.push_str(&format!(
                    " [a {} child: it cannot be messaged]",
                    row.entry.mode
                ));
            }
        }
        lines.push(line);
    }
    match omitted {
        0 => {}
        1 => lines.push(
            "1 other child is not listed: it is an external or one-shot run and cannot be \
             messaged."
                .to_owned(),
        ),
        n => lines.push(format!(
            "{n} other children are not listed: they are external or one-shot runs and cannot \
             be messaged."
        )),
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_subagent::ToolInProgress;

    #[test]
    fn a_running_childs_detail_names_its_tool_time_and_tokens() {
        let lines = [
            CurrentActivity {
                tool: Some(ToolInProgress {
                    name: "read_file".to_owned(),
                    for_ms: 12_345,
                }),
                tokens: 4_200,
            },
            CurrentActivity {
                tool: None,
                tokens: 0,
            },
        ]
        .iter()
        .map(activity_detail)
        .collect::<Vec<_>>();
        insta::assert_snapshot!(lines.join("\n"));
    }
}
