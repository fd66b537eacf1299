//! `list_agents`: the caller's tree (the root and every reachable
//! continuable descendant) with names, labels, activity and diagnostics,
//! rendered as compact text. Activity comes from the live registry and says
//! only whether an agent is working right now.

use async_trait::async_trait;
use dsh_core::{AgentStatus, SessionId, Tool, ToolContext, ToolError, ToolOutput};
use dsh_subagent::{ChildMode, RowDiagnostic, SubagentRuntime};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::RuntimeBinding;
use crate::tree::TreeView;

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

fn diagnostic_text(diagnostic: RowDiagnostic) -> &'static str {
    match diagnostic {
        RowDiagnostic::Corrupt => "its own subagents could not be listed: its log is corrupt",
        RowDiagnostic::Unavailable => {
            "its own subagents could not be listed: its log could not be read"
        }
        RowDiagnostic::Unsupported => "its kind is not supported here",
    }
}

#[async_trait]
impl Tool for ListAgentsTool {
    fn name(&self) -> &str {
        "list_agents"
    }

    fn description(&self) -> String {
        "List the agents in your tree: `lead` (the root) and every subagent that can be messaged, \
         each by the name to use with send_message and interrupt_agent, with its task label and \
         its activity. Activity is `running` when the agent is working right now and `inactive` \
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

/// The listing as the model reads it.
fn render(runtime: &SubagentRuntime, view: &TreeView, caller: &SessionId) -> String {
    let you = |id: &SessionId| if id == caller { " (you)" } else { "" };
    let mut lines = vec![
        "Agents in your tree (activity is whether an agent is working right now, not whether its \
         task is done; every agent listed can be messaged):"
            .to_owned(),
        format!(
            "- lead{}: {}",
            you(&view.root),
            activity(runtime, &view.root)
        ),
    ];
    let mut omitted = 0usize;
    for row in &view.rows {
        if row.entry.mode != ChildMode::CONTINUABLE {
            omitted += 1;
            continue;
        }
        let id = &row.entry.child_id;
        let mut line = format!(
            "- {}{}: {} — {}",
            view.name_of(id),
            you(id),
            activity(runtime, id),
            row.entry.label
        );
        if let Some(diagnostic) = row.diagnostic {
            line.push_str(&format!(" [{}]", diagnostic_text(diagnostic)));
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
