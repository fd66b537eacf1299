//! The configuration of one `subagent` tool instance, and the install-time
//! errors for a configuration the provider cannot honour.

use dsh_core::{AgentOptions, ToolRestriction};
use dsh_subagent::{BudgetPolicy, MaxDepth, SubagentProvider};

use crate::role::SubagentRoles;
use crate::{DEFAULT_TOOL_NAME, SubagentModelSelectionConfig};

/// The configuration of one `subagent` tool instance.
#[derive(Debug, Clone, PartialEq)]
pub struct SubagentToolConfig {
    /// The model-facing tool name; unique among an agent's tools.
    pub tool_name: String,
    /// The registered provider the tool starts children on.
    pub provider: String,
    /// The depth cap sent with every start, resolved at each call by
    /// [`SubagentRuntime::resolve_max_depth`](dsh_subagent::SubagentRuntime::resolve_max_depth): `None` follows the runtime's
    /// current user setting.
    pub max_depth: Option<MaxDepth>,
    /// Agent options for every child (needs the `agent_options` capability).
    pub agent_options: Option<AgentOptions>,
    /// A persona for every child (needs the `persona` capability).
    pub persona: Option<String>,
    /// A tool restriction for every child (needs the `tool_filter`
    /// capability); it must name at least one tool.
    pub tool_filter: Option<ToolRestriction>,
    /// Whether the model may run children in the background (and does by
    /// default); when off, every call waits for its child.
    pub background: bool,
    /// The host's model-selection setting (seed 002's
    /// `ctx.subagentModelSelection`): with it, the tool takes `provider`
    /// and `model`, and a top-level session may choose its child's route
    /// among the routes it was allowed when the tool was first offered to
    /// it (needs the `agent_options` capability).
    pub model_selection: Option<SubagentModelSelectionConfig>,
    /// The host's defaults and ceilings for a child's token budget and
    /// time limit: a call may ask for less than a ceiling, never more, and
    /// one that asks for nothing gets the default. A token budget needs the
    /// provider's `token_budget` capability; a time limit needs none.
    pub budget: BudgetPolicy,
    /// The roles the model may start a child as (the `agent` argument);
    /// with none, the tool has no `agent` argument. Each is sent as the
    /// request's preset, so the provider needs the `agent_preset`
    /// capability (and a child that does not inherit its parent's
    /// conversation).
    pub roles: SubagentRoles,
}

impl SubagentToolConfig {
    /// The defaults for `provider`: tool name `subagent`, the runtime's
    /// depth setting, no child options, background mode on.
    pub fn new(provider: impl Into<String>) -> Self {
        Self {
            tool_name: DEFAULT_TOOL_NAME.to_owned(),
            provider: provider.into(),
            max_depth: None,
            agent_options: None,
            persona: None,
            tool_filter: None,
            background: true,
            model_selection: None,
            budget: BudgetPolicy::default(),
            roles: SubagentRoles::new(),
        }
    }
}

/// A configuration that cannot work, refused when the tool is installed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    /// The tool name is empty.
    #[error("the subagent tool needs a non-empty tool name")]
    EmptyToolName,
    /// The provider name is empty.
    #[error("the subagent tool `{0}` names no provider")]
    EmptyProvider(String),
    /// The tool filter names no tool, so it either hides every tool or
    /// changes nothing.
    #[error(
        "the subagent tool `{0}` has a tool filter that names no tool; remove the filter or name the tools it allows or denies"
    )]
    EmptyToolFilter(String),
    /// The provider lacks a capability the configuration needs.
    #[error(
        "the subagent tool `{tool}` needs the `{capability}` capability, which provider `{provider}` does not have{hint}"
    )]
    MissingCapability {
        /// The tool.
        tool: String,
        /// The provider.
        provider: String,
        /// The capability, by its flag name.
        capability: &'static str,
        /// What to change, when there is an obvious fix.
        hint: &'static str,
    },
}

impl InstallError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::EmptyToolName => "EMPTY_TOOL_NAME",
            Self::EmptyProvider(_) => "EMPTY_PROVIDER",
            Self::EmptyToolFilter(_) => "EMPTY_TOOL_FILTER",
            Self::MissingCapability { .. } => "MISSING_CAPABILITY",
        }
    }
}

/// Refuse a configuration the provider cannot honour.
pub(crate) fn check_capabilities(
    config: &SubagentToolConfig,
    provider: &dyn SubagentProvider,
) -> Result<(), InstallError> {
    let caps = provider.capabilities();
    let missing = |capability: &'static str, hint: &'static str| InstallError::MissingCapability {
        tool: config.tool_name.clone(),
        provider: config.provider.clone(),
        capability,
        hint,
    };
    if config.max_depth != Some(MaxDepth::ProviderManaged) && !caps.depth_limit {
        return Err(missing(
            "depth_limit",
            "; set the depth to provider-managed to leave recursion to the provider",
        ));
    }
    if (config.agent_options.is_some() || config.model_selection.is_some()) && !caps.agent_options {
        return Err(missing("agent_options", ""));
    }
    if config.persona.is_some() && !caps.persona {
        return Err(missing("persona", ""));
    }
    if config.tool_filter.is_some() && !caps.tool_filter {
        return Err(missing("tool_filter", ""));
    }
    if !config.roles.is_empty() {
        if !caps.agent_preset || provider.inherits_parent_context() {
            return Err(missing(
                "agent_preset",
                "; roles need a provider whose children start fresh (not a fork)",
            ));
        }
        let roles = config.roles.values();
        if roles.clone().any(|role| role.persona.is_some()) && !caps.persona {
            return Err(missing("persona", ""));
        }
        if roles.clone().any(|role| role.tool_filter.is_some()) && !caps.tool_filter {
            return Err(missing("tool_filter", ""));
        }
        if roles.clone().any(|role| role.options.is_some()) && !caps.agent_options {
            return Err(missing("agent_options", ""));
        }
        if roles.clone().any(|role| role.token_budget.is_some()) && !caps.token_budget {
            return Err(missing(
                "token_budget",
                "; remove the token budget from the roles",
            ));
        }
    }
    if (config.budget.default_tokens.is_some() || config.budget.max_tokens.is_some())
        && !caps.token_budget
    {
        return Err(missing(
            "token_budget",
            "; remove the token budget from the tool's settings",
        ));
    }
    Ok(())
}
