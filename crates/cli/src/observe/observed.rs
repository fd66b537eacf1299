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
