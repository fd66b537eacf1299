//! The ACP side of `dsh`, behind the `acp` cargo feature (on by default):
//! what the rest of the command uses of `dsh-subagent-acp`, so that a build
//! without the feature has neither that crate nor `agent-client-protocol`
//! in its tree. Built without it, [`AcpConfig`] and [`PermissionPolicy`]
//! are empty enums, so no ACP agent can exist and the code that would
//! install one is statically unreachable; a `dsh.toml` with an `[acp]`
//! table or an `--acp-*` flag is refused by name (`disabled`) before
//! anything runs. This module never starts an agent itself.

use std::sync::Arc;

use dsh_core::Tool;
use dsh_subagent::{SubagentProvider, SubagentRuntime};

use crate::ask::Prompter;
use crate::error::CliError;

#[cfg(feature = "acp")]
pub use dsh_subagent_acp::{AcpConfig, PermissionPolicy};

/// The name of the cargo feature that builds the ACP provider in.
#[cfg(not(feature = "acp"))]
pub const FEATURE: &str = "acp";

/// An ACP agent's configuration. This `dsh` was built without the `acp`
/// feature, so there is none: the type has no value.
#[cfg(not(feature = "acp"))]
#[derive(Debug, Clone)]
pub enum AcpConfig {}

/// How an ACP agent's permission requests are answered. This `dsh` was
/// built without the `acp` feature, so there is no policy to pick.
#[cfg(not(feature = "acp"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionPolicy {}

/// The refusal of `what` (an `[acp]` table, an `--acp-*` flag) by a `dsh`
/// built without the `acp` feature.
#[cfg(not(feature = "acp"))]
pub fn disabled(what: impl Into<String>) -> CliError {
    CliError::FeatureDisabled {
        what: what.into(),
        feature: FEATURE,
    }
}

/// The `--acp-permission` value as a policy (clap admits only `reject`,
/// `allow` and `ask`).
///
/// # Errors
/// None in this build (the `acp` feature is on).
#[cfg(feature = "acp")]
pub fn permission_flag(value: &str) -> Result<PermissionPolicy, CliError> {
    Ok(match value {
        "allow" => PermissionPolicy::Allow,
        "ask" => PermissionPolicy::Ask,
        _ => PermissionPolicy::Reject,
    })
}

/// The `--acp-permission` value as a policy.
///
/// # Errors
/// Always: this `dsh` was built without the `acp` feature.
#[cfg(not(feature = "acp"))]
pub fn permission_flag(_value: &str) -> Result<PermissionPolicy, CliError> {
    Err(disabled("--acp-permission"))
}

/// The ACP provider `acp` configures, named as its configuration is.
///
/// # Errors
/// [`CliError::Refused`] when it cannot be set up.
#[cfg(feature = "acp")]
pub fn provider(acp: AcpConfig) -> Result<Arc<dyn SubagentProvider>, CliError> {
    dsh_subagent_acp::AcpProvider::new(acp)
        .map(|provider| Arc::new(provider) as Arc<dyn SubagentProvider>)
        .map_err(crate::world::install_error)
}

/// The ACP provider `acp` configures.
///
/// # Errors
/// None: without the `acp` feature there is no configuration.
#[cfg(not(feature = "acp"))]
pub fn provider(acp: AcpConfig) -> Result<Arc<dyn SubagentProvider>, CliError> {
    match acp {}
}

/// Register the ACP provider `acp` configures and install its tool, named
/// as the provider is.
///
/// # Errors
/// [`CliError::Refused`] when the provider or the tool cannot be installed.
#[cfg(feature = "acp")]
pub fn tool(runtime: &SubagentRuntime, acp: AcpConfig) -> Result<Arc<dyn Tool>, CliError> {
    use dsh_tool_subagent::{MaxDepth, SubagentTool, SubagentToolConfig};
    let name = acp.name.clone();
    runtime.register(provider(acp)?)?;
    // An external agent manages its own recursion: no depth flag.
    SubagentTool::install(
        runtime,
        SubagentToolConfig {
            tool_name: name.clone(),
            max_depth: Some(MaxDepth::ProviderManaged),
            ..SubagentToolConfig::new(name)
        },
    )
    .map(|tool| tool as Arc<dyn Tool>)
    .map_err(crate::world::install_error)
}

/// Register the ACP provider `acp` configures and install its tool.
///
/// # Errors
/// None: without the `acp` feature there is no configuration to install.
#[cfg(not(feature = "acp"))]
pub fn tool(_runtime: &SubagentRuntime, acp: AcpConfig) -> Result<Arc<dyn Tool>, CliError> {
    match acp {}
}

/// `acp` with `prompter` as its asker when its permission is `ask`; without
/// one, such an agent rejects (and dsh says so on stderr).
#[cfg(feature = "acp")]
pub fn asked(acp: AcpConfig, prompter: Option<&Arc<Prompter>>) -> AcpConfig {
    if acp.permission != PermissionPolicy::Ask {
        return acp;
    }
    match prompter {
        Some(prompter) => acp.ask_with(prompter.acp()),
        None => {
            eprintln!(
                "dsh: warning: the permission of the ACP agent `{}` is `ask` but nothing asks (no terminal, or --no-ask): its permission requests are rejected",
                acp.name
            );
            acp.permission(PermissionPolicy::Reject)
        }
    }
}

/// `acp` with `prompter` as its asker.
#[cfg(not(feature = "acp"))]
pub fn asked(acp: AcpConfig, _prompter: Option<&Arc<Prompter>>) -> AcpConfig {
    match acp {}
}
