#![doc = include_str!("../README.md")]

use std::sync::{Arc, OnceLock};

use dsh_core::{Tool, ToolSpec};
use dsh_subagent::SubagentRuntime;
use serde::de::DeserializeOwned;
use serde_json::Value;

mod error;
mod interrupt;
mod list;
mod report;
mod send;
mod tree;
mod wait;

pub use error::ControlError;
pub use interrupt::{InterruptAgentInput, InterruptAgentTool, interrupted};
pub use list::{LISTING_HEADING, ListAgentsInput, ListAgentsTool};
pub use report::{ReportInput, ReportTool, report_target};
pub use send::{SendMessageInput, SendMessageTool};
pub use wait::{
    Arrival, DEFAULT_WAIT_MS, MAX_WAIT_MS, MIN_WAIT_MS, WaitInput, WaitTool, arrivals_text,
    nothing_arrived,
};

/// The runtime the control tools act through, bound at most once and shared
/// by every tool made from it. Unbound, every tool refuses with
/// [`ControlError::Unbound`].
#[derive(Clone, Default)]
pub struct RuntimeBinding(Arc<OnceLock<SubagentRuntime>>);

impl std::fmt::Debug for RuntimeBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBinding")
            .field("bound", &self.0.get().is_some())
            .finish()
    }
}

impl RuntimeBinding {
    /// An unbound binding; bind it with [`RuntimeBinding::bind`] once the
    /// runtime exists.
    pub fn new() -> Self {
        Self::default()
    }

    /// A binding to `runtime`.
    pub fn bound(runtime: SubagentRuntime) -> Self {
        let binding = Self::new();
        // A fresh cell is always empty.
        let _ = binding.0.set(runtime);
        binding
    }

    /// Bind `runtime`. Returns `false`, and changes nothing, when a runtime
    /// is already bound.
    pub fn bind(&self, runtime: SubagentRuntime) -> bool {
        self.0.set(runtime).is_ok()
    }

    /// The bound runtime.
    pub fn get(&self) -> Option<&SubagentRuntime> {
        self.0.get()
    }

    /// The bound runtime, or the refusal a tool returns without one.
    pub(crate) fn runtime(&self) -> Result<&SubagentRuntime, ControlError> {
        self.get().ok_or(ControlError::Unbound)
    }
}

/// Builds the five control tools.
#[derive(Debug, Clone, Copy)]
pub struct ControlTools;

impl ControlTools {
    /// The five tools (`list_agents`, `send_message`, `wait`,
    /// `interrupt_agent`, `report`), acting through `runtime`.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(runtime: SubagentRuntime) -> Vec<Arc<dyn Tool>> {
        Self::with_binding(&RuntimeBinding::bound(runtime))
    }

    /// The five tools, acting through whatever runtime `binding` holds when
    /// they are called (register them in a harness, build the runtime over
    /// the harness, then bind it).
    ///
    /// `report` is among them, though only continuable children may use it:
    /// a root calling it gets [`ControlError::NoParent`]. A host that
    /// composes per-agent tool scopes can hide it from roots (a
    /// [`ToolRestriction`](dsh_core::ToolRestriction) on the root's
    /// composition) and use [`report_target`] to decide for a child.
    pub fn with_binding(binding: &RuntimeBinding) -> Vec<Arc<dyn Tool>> {
        Self::all(binding)
    }

    /// The five tools' specs as the model is shown them (name, description,
    /// input schema), for a host that runs them elsewhere (a Restate
    /// worker) and must offer them alike.
    pub fn specs() -> Vec<ToolSpec> {
        Self::all(&RuntimeBinding::new())
            .iter()
            .map(|tool| ToolSpec {
                name: tool.name().to_owned(),
                description: tool.description(),
                input_schema: tool.input_schema(),
            })
            .collect()
    }

    fn all(binding: &RuntimeBinding) -> Vec<Arc<dyn Tool>> {
        vec![
            Arc::new(ListAgentsTool::new(binding.clone())),
            Arc::new(SendMessageTool::new(binding.clone())),
            Arc::new(WaitTool::new(binding.clone())),
            Arc::new(InterruptAgentTool::new(binding.clone())),
            Arc::new(ReportTool::new(binding.clone())),
        ]
    }
}

/// Parse validated tool input into its struct. The harness validated it
/// against the published schema already, so a failure here means the
/// schema and the struct disagree, or the tool was called directly.
pub(crate) fn parse<T: DeserializeOwned>(
    tool: &str,
    input: Value,
) -> Result<T, dsh_core::ToolError> {
    serde_json::from_value(input).map_err(|err| {
        dsh_core::ToolError::new(format!(
            "Invalid arguments for `{tool}`: {err}. Fix the arguments and call the tool again."
        ))
    })
}

/// The text of a message: refuse a blank one.
pub(crate) fn message_text(text: String) -> Result<String, ControlError> {
    if text.trim().is_empty() {
        Err(ControlError::EmptyMessage)
    } else {
        Ok(text)
    }
}
