#![doc = include_str!("../README.md")]

mod config;
mod model_selection;
mod render;
mod role;
mod spec;
pub mod survey;
mod tool;

pub use config::{InstallError, SubagentToolConfig};
pub use model_selection::{
    ModelSelectionError, ModelSelectionSettings, SubagentModelSelectionConfig,
};
pub use render::{refusal, render_result, started_in_background};
pub use role::{SubagentRole, SubagentRoles};
pub use spec::tool_spec;
pub use survey::{SURVEY_TOOL_NAME, SurveyTool};
pub use tool::SubagentTool;

/// The tool name used when the configuration names none.
pub const DEFAULT_TOOL_NAME: &str = "subagent";

/// The depth cap the runtime's user setting starts at.
pub use dsh_subagent::DEFAULT_MAX_DEPTH;

/// How deep the children started through the tool may nest.
pub use dsh_subagent::MaxDepth;
