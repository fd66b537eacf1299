//! The tools a turn on the cluster offers besides its composed ones, as
//! the model is shown them: `subagent` and `fork` (the delegation tools,
//! `delegate`) and the control tools `list_agents`, `send_message`,
//! `wait` and `interrupt_agent`. Their names, descriptions and input
//! schemas are the local crates' own (`dsh-tool-subagent`'s
//! [`tool_spec`] and `dsh-tool-subagent-control`'s
//! [`ControlTools::specs`]), so a model sees the same tools on a worker as
//! in a local run; only the tools themselves run differently (calls between
//! objects, `super`'s siblings).

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use dsh_tool_subagent::{SubagentToolConfig, tool_spec};
use dsh_tool_subagent_control::ControlTools;
use serde_json::Value;

/// The spawn tool's name (the local default).
pub(super) const SPAWN_TOOL: &str = "subagent";
/// The fork tool's name.
pub(super) const FORK_TOOL: &str = "fork";
/// The control tools a worker runs (the local `report` is not among them).
pub(super) const LIST_TOOL: &str = "list_agents";
/// See [`LIST_TOOL`].
pub(super) const MESSAGE_TOOL: &str = "send_message";
/// See [`LIST_TOOL`].
pub(super) const WAIT_TOOL: &str = "wait";
/// See [`LIST_TOOL`].
pub(super) const INTERRUPT_TOOL: &str = "interrupt_agent";

/// The local spawn tool's configuration, as `dsh run` installs it.
pub(super) fn spawn_config() -> SubagentToolConfig {
    SubagentToolConfig::new("spawn")
}

/// The local fork tool's configuration, as `dsh run` installs it.
pub(super) fn fork_config() -> SubagentToolConfig {
    SubagentToolConfig {
        tool_name: FORK_TOOL.to_owned(),
        ..SubagentToolConfig::new("fork")
    }
}

/// The specs of the tools the engine runs itself, in no order.
pub(super) fn engine_specs() -> Vec<ToolSpec> {
    let control = [LIST_TOOL, MESSAGE_TOOL, WAIT_TOOL, INTERRUPT_TOOL];
    let mut specs = vec![
        // The spawn provider's child does not see the conversation; the
        // fork's does. Both meter tokens locally, so both take a budget.
        tool_spec(&spawn_config(), false, true),
        tool_spec(&fork_config(), true, true),
    ];
    specs.extend(
        ControlTools::specs()
            .into_iter()
            .filter(|spec| control.contains(&spec.name.as_str())),
    );
    specs
}

/// An engine tool as the turn's tool scope holds it, so that the specs
/// offered and the names an unknown call is told about are a local run's;
/// the engine runs its calls itself (`super::Host::engine_tool`), never
/// through the scope.
struct Offered(ToolSpec);

#[async_trait]
impl Tool for Offered {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn description(&self) -> String {
        self.0.description.clone()
    }

    fn input_schema(&self) -> Value {
        self.0.input_schema.clone()
    }

    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Err(ToolError::new(format!(
            "`{}` is run by the engine, not by the turn's tool scope",
            self.0.name
        )))
    }
}

/// The engine tools, to compose into the turn's tool scope beside the
/// worker's own.
pub(super) fn engine_tools() -> Vec<Arc<dyn Tool>> {
    engine_specs()
        .into_iter()
        .map(|spec| Arc::new(Offered(spec)) as Arc<dyn Tool>)
        .collect()
}

/// Whether the engine runs the tool called `name` itself.
pub(super) fn is_engine_tool(name: &str) -> bool {
    [
        SPAWN_TOOL,
        FORK_TOOL,
        LIST_TOOL,
        MESSAGE_TOOL,
        WAIT_TOOL,
        INTERRUPT_TOOL,
    ]
    .contains(&name)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::Path;

    use serde_json::Value;

    use super::*;

    /// A spec as the local suite snapshots it: `dsh-tool-subagent`'s test
    /// checks the installed tool (its providers registered) against that
    /// file, so the cluster's spec equals the local tool's through it.
    fn snapshotted(file: &str) -> Value {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tool-subagent/tests/snapshots")
            .join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        let json = text.splitn(3, "---").nth(2).unwrap();
        serde_json::from_str(json).unwrap()
    }

    fn spec(name: &str) -> Value {
        let spec = engine_specs()
            .into_iter()
            .find(|spec| spec.name == name)
            .unwrap();
        serde_json::json!({
            "name": spec.name,
            "description": spec.description,
            "input_schema": spec.input_schema,
        })
    }

    #[test]
    fn the_delegation_tools_are_offered_as_a_local_run_offers_them() {
        assert_eq!(
            spec(SPAWN_TOOL),
            snapshotted("subagent_tool__spawn_tool.snap")
        );
        assert_eq!(
            spec(FORK_TOOL),
            snapshotted("subagent_tool__fork_tool.snap")
        );
    }

    #[test]
    fn the_control_tools_are_the_local_ones_and_each_engine_tool_has_a_spec() {
        let local = ControlTools::specs();
        for name in [LIST_TOOL, MESSAGE_TOOL, WAIT_TOOL, INTERRUPT_TOOL] {
            let ours = engine_specs().into_iter().find(|spec| spec.name == name);
            assert_eq!(ours.as_ref(), local.iter().find(|spec| spec.name == name));
        }
        let mut names: Vec<String> = engine_specs().into_iter().map(|spec| spec.name).collect();
        names.sort();
        assert!(names.iter().all(|name| is_engine_tool(name)), "{names:?}");
        assert_eq!(names.len(), 6, "{names:?}");
    }
}
