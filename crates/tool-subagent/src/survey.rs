//! The `subagent_survey` tool of seed 003: every registered provider with
//! its start-time capabilities (read from the flags), whether it inherits
//! the parent's context (a plain boolean) and whether it can create
//! continuable children (read by the presence of its accessor), the last
//! two side by side so that the two ways of discovery are both visible. The
//! registry is read as `list` then one `get` per name; a provider removed in
//! between is reported as removed, never as an error. The text is the same
//! whether a model reads it through the tool or a person through
//! `dsh providers`.

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{Tool, ToolContext, ToolError, ToolOutput};
use dsh_subagent::{SubagentCapabilities, SubagentProvider, SubagentRuntime};
use serde_json::{Value, json};

/// The survey tool's model-facing name.
pub const SURVEY_TOOL_NAME: &str = "subagent_survey";

/// Where the survey reads providers from: the names in registration order,
/// then each provider by name (which may have gone in between).
pub trait ProviderDirectory {
    /// The registered provider names, in registration order.
    fn provider_names(&self) -> Vec<String>;
    /// The provider registered under `name` now, if any.
    fn provider(&self, name: &str) -> Option<Arc<dyn SubagentProvider>>;
}

impl ProviderDirectory for SubagentRuntime {
    fn provider_names(&self) -> Vec<String> {
        self.list()
    }

    fn provider(&self, name: &str) -> Option<Arc<dyn SubagentProvider>> {
        self.get(name)
    }
}

/// The names of the start-time capabilities a provider declares, sorted
/// (the same whether or not the build turned on `serde_json`'s
/// `preserve_order`, which would otherwise decide the order).
pub fn capability_names(capabilities: SubagentCapabilities) -> Vec<String> {
    let mut names: Vec<String> = match serde_json::to_value(capabilities) {
        Ok(Value::Object(flags)) => flags
            .into_iter()
            .filter(|(_, on)| on.as_bool() == Some(true))
            .map(|(name, _)| name)
            .collect(),
        _ => Vec::new(),
    };
    names.sort();
    names
}

/// One provider's entry: its name, then one line each for its start-time
/// capabilities, parent context and continuable children.
pub fn describe_provider(name: &str, provider: Option<&dyn SubagentProvider>) -> String {
    let Some(provider) = provider else {
        return format!("{name}: removed while the survey ran");
    };
    let capabilities = capability_names(provider.capabilities());
    let capabilities = if capabilities.is_empty() {
        "(none)".to_owned()
    } else {
        capabilities.join(", ")
    };
    let yes_no = |yes: bool| if yes { "yes" } else { "no" };
    [
        name.to_owned(),
        format!("  start-time capabilities: {capabilities}"),
        format!(
            "  inherits parent context: {}",
            yes_no(provider.inherits_parent_context())
        ),
        format!(
            "  continuable children: {}",
            if provider.continuable().is_some() {
                "supported"
            } else {
                "not supported"
            }
        ),
    ]
    .join("\n")
}

/// The whole survey: every provider's entry, separated by a blank line, or
/// a sentence saying there is none.
pub fn survey(directory: &dyn ProviderDirectory) -> String {
    let names = directory.provider_names();
    if names.is_empty() {
        return "No subagent provider is registered.".to_owned();
    }
    names
        .iter()
        .map(|name| describe_provider(name, directory.provider(name).as_deref()))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The `subagent_survey` tool over a runtime's provider registry. It takes
/// no parameters, never fails and changes nothing.
#[derive(Debug, Clone)]
pub struct SurveyTool {
    runtime: SubagentRuntime,
}

impl SurveyTool {
    /// The tool over `runtime`'s providers.
    pub fn new(runtime: SubagentRuntime) -> Self {
        Self { runtime }
    }
}

#[async_trait]
impl Tool for SurveyTool {
    fn name(&self) -> &str {
        SURVEY_TOOL_NAME
    }

    fn description(&self) -> String {
        "List every subagent provider registered now, with the start-time \
         capabilities each supports (a start asking for one it lacks is refused), \
         whether its children see this conversation, and whether it can create \
         continuable children. Check it before asking a provider for a capability."
            .to_owned()
    }

    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    async fn execute(&self, _input: Value, _ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(survey(&self.runtime)))
    }
}
