//! Agent roles: named specialists a host configures (from files or its
//! settings) and the model picks by name with the tool's `agent` argument.
//! A role only maps onto what a start request already carries: a persona,
//! a tool filter (narrowed over the caller's by the runtime, never
//! widened), a model route, a token budget, a time limit and a depth cap;
//! and its name goes out as the request's preset, so the child's header
//! records it (`composition.preset`) and listings can name it. The host
//! registers a preset of each role's name with its harness.

use std::collections::BTreeMap;
use std::time::Duration;

use dsh_core::{AgentOptions, ToolRestriction};

/// One role, as the host resolved and checked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubagentRole {
    /// What the role is for, listed in the tool's description.
    pub description: String,
    /// The role's instructions, the child's persona.
    pub persona: Option<String>,
    /// The tools the role's agents may use (narrowed over the caller's).
    pub tool_filter: Option<ToolRestriction>,
    /// The model route (`provider` and `model`) of the role's agents.
    pub options: Option<AgentOptions>,
    /// The deepest the role's agents, and every agent they start, may be.
    pub max_depth: Option<u32>,
    /// The token budget of a role's child when the call names none.
    pub token_budget: Option<u64>,
    /// The time limit of a role's child when the call names none.
    pub time_limit: Option<Duration>,
}

impl SubagentRole {
    /// A role with `description` and nothing else: a general subagent
    /// listed under the role's name.
    pub fn new(description: impl Into<String>) -> Self {
        Self {
            description: description.into(),
            persona: None,
            tool_filter: None,
            options: None,
            max_depth: None,
            token_budget: None,
            time_limit: None,
        }
    }
}

/// The roles a tool offers, by name (sorted, so the listing is stable).
pub type SubagentRoles = BTreeMap<String, SubagentRole>;

/// The description's paragraph listing `roles`, or nothing without any.
pub(crate) fn listing(roles: &SubagentRoles) -> String {
    if roles.is_empty() {
        return String::new();
    }
    let mut text = String::from(
        " Set `agent` to start the subagent as one of these roles (its instructions, tools and model come with it; leave it out for a general subagent):",
    );
    for (name, role) in roles {
        text.push_str(&format!("\n- {name}: {}", role.description));
    }
    text
}

/// The sentence refusing an unknown role, naming the ones there are.
pub(crate) fn unknown(asked: &str, roles: &SubagentRoles) -> String {
    let names: Vec<&str> = roles.keys().map(String::as_str).collect();
    format!(
        "No subagent was started: there is no role `{asked}`. The roles are: {}.",
        names.join(", ")
    )
}
