//! [`Observed`]: a host tool wrapped so the reporter hears each call; it
//! behaves exactly as the tool it wraps.

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::Value;

use super::Reporter;

/// A host tool, wrapped so the reporter hears each call.
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

    fn idempotent(&self) -> bool {
        self.inner.idempotent()
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let agent = ctx.agent.id().clone();
        let name = self.inner.name().to_owned();
        self.reporter.tool_started(&agent, &name, &input);
        let output = self.inner.execute(input.clone(), ctx).await;
        let delivered = matches!(&output, Ok(output) if !output.is_error);
        self.reporter
            .tool_finished(&agent, &name, &input, delivered);
        output
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// What a durable engine asks of a tool (whether a cut call may run
    /// again) is the wrapped tool's answer: read, list and grep yes, the
    /// rest no.
    #[test]
    fn a_wrapped_tool_answers_idempotent_as_the_tool_it_wraps() {
        let dir = tempfile::tempdir().unwrap();
        let reporter = Reporter::with(
            Box::new(super::super::plain::Plain::default()),
            super::super::Output::new(Box::new(std::io::sink()), Box::new(std::io::sink())),
        );
        let tools =
            dsh_tool_workspace::WorkspaceTools::new(dir.path(), Default::default()).unwrap();
        let idempotent: Vec<&str> = tools
            .iter()
            .filter(|tool| Observed::wrap(Arc::clone(tool), &reporter).idempotent())
            .map(|tool| tool.name())
            .collect();
        assert_eq!(idempotent, ["read_file", "list_files", "grep"]);
    }
}
