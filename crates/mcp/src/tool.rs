//! The tool adapter: one MCP tool offered to agents as
//! `mcp__<server>__<tool>` through dsh-core's [`Tool`] trait, with the
//! server's description and input schema. It holds no state of its own but
//! the names: whether it is offered, its current wording and its current
//! schema come from the server's catalog at each step, so a re-listed
//! server's removed tool drops out and a changed one is checked against
//! what the server now says. Tool filters are the runtime's: an agent
//! whose filter leaves this name out neither sees nor runs it.

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::Value;

use crate::server::{Server, ServerState};

/// One MCP tool as a dsh tool.
pub struct McpTool {
    server: Arc<Server>,
    /// Its name on the server.
    tool: String,
    /// `mcp__<server>__<tool>`.
    name: String,
    /// Its description when it was registered (used if it is re-listed away).
    description: String,
    /// Its schema when it was registered (what the registry compiled).
    schema: Value,
}

impl McpTool {
    pub(crate) fn new(server: Arc<Server>, listed: &crate::server::Listed) -> Self {
        Self {
            name: crate::tool_name(server.name(), &listed.name),
            tool: listed.name.clone(),
            description: listed.description.clone(),
            schema: listed.schema.clone(),
            server,
        }
    }
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool").field("name", &self.name).finish()
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> String {
        self.server.listed(&self.tool).map_or_else(
            || self.description.clone(),
            |listed| listed.description.clone(),
        )
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    fn is_available(&self) -> bool {
        self.server.state() == ServerState::Ready && self.server.listed(&self.tool).is_some()
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(listed) = self.server.listed(&self.tool) else {
            return Err(ToolError::new(format!(
                "Tool `{}` is no longer offered by MCP server `{}`.",
                self.name,
                self.server.name()
            )));
        };
        // The registry checked the schema the tool was registered with; a
        // re-listed server may have changed it since.
        if let Err(err) = listed.compiled.validate(&input) {
            return Err(ToolError::new(format!(
                "Invalid arguments for `{}`: {err}. Fix the arguments and call the tool again.",
                self.name
            )));
        }
        let Value::Object(arguments) = input else {
            return Err(ToolError::new(format!(
                "Invalid arguments for `{}`: (root): the arguments must be an object. Fix the arguments and call the tool again.",
                self.name
            )));
        };
        match self.server.call(&self.tool, arguments, &ctx.cancel).await {
            Ok(output) => Ok(output),
            Err(message) => {
                tracing::warn!(tool = %self.name, call_id = %ctx.call_id, "{message}");
                Err(ToolError::new(message))
            }
        }
    }
}
