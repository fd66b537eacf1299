//! The `[acp]` table of `dsh.toml` and the `--acp-*` flags: the default ACP
//! agent and the named ones, each with its environment passed through and
//! its teardown grace; refused by name in a `dsh` built without the `acp`
//! feature.

use std::path::Path;

#[cfg(feature = "acp")]
use dsh_subagent_acp::AcpConfig;

use super::{AcpSection, Overrides};
#[cfg(feature = "acp")]
use super::{bad, check_var};
#[cfg(feature = "acp")]
use crate::acp::PermissionPolicy;
use crate::error::CliError;

/// Refuse an `[acp]` table or an `--acp-*` flag: this `dsh` was built
/// without the `acp` feature, so nothing could run the agent.
#[cfg(not(feature = "acp"))]
pub(super) fn no_acp(
    source: &Path,
    section: Option<&AcpSection>,
    overrides: &Overrides,
) -> Result<(Vec<crate::acp::AcpConfig>, Option<crate::acp::AcpConfig>), CliError> {
    if section.is_some() {
        return Err(crate::acp::disabled(format!(
            "the `[acp]` table of {}",
            source.display()
        )));
    }
    let flags = [
        ("--acp-command", overrides.acp_command.is_some()),
        ("--acp-arg", !overrides.acp_args.is_empty()),
        ("--acp-env", !overrides.acp_env.is_empty()),
        ("--acp-permission", overrides.acp_permission.is_some()),
    ];
    match flags.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(crate::acp::disabled(*flag)),
        None => Ok((Vec::new(), None)),
    }
}

/// The ACP agent from the `[acp]` table and the flags.
#[cfg(feature = "acp")]
pub(super) fn acp(
    source: &Path,
    section: Option<AcpSection>,
    overrides: &Overrides,
) -> Result<Option<AcpConfig>, CliError> {
    if let Some(section) = &section
        && section.command.is_none()
        && section.agents.is_empty()
    {
        return Err(bad(
            source,
            "acp.command",
            "missing: the `[acp]` table needs the agent's command (or only `[acp.agents.<name>]` tables)",
        ));
    }
    let command = overrides
        .acp_command
        .clone()
        .or_else(|| section.as_ref().and_then(|s| s.command.clone()));
    let Some(command) = command else {
        if let Some(section) = &section
            && (!section.args.is_empty() || !section.pass_env.is_empty())
        {
            return Err(bad(
                source,
                "acp.command",
                "missing: `acp.args` and `acp.pass_env` are for the agent `acp.command` names",
            ));
        }
        return Ok(None);
    };
    let (file_args, mut pass_env, permission, grace) = match section {
        Some(section) => (
            section.args,
            section.pass_env,
            section.permission,
            section.teardown_grace_ms,
        ),
        None => (Vec::new(), Vec::new(), PermissionPolicy::default(), None),
    };
    for var in &pass_env {
        check_var(var).map_err(|reason| bad(source, "acp.pass_env", reason))?;
    }
    for var in &overrides.acp_env {
        check_var(var)
            .map_err(|reason| CliError::BadFlag(format!("--acp-env `{var}`: {reason}")))?;
    }
    pass_env.extend(overrides.acp_env.iter().cloned());
    let args = if overrides.acp_args.is_empty() {
        file_args
    } else {
        overrides.acp_args.clone()
    };
    let mut config = AcpConfig::new(command)
        .args(args)
        .permission(overrides.acp_permission.unwrap_or(permission));
    passed_through(&mut config, pass_env, grace);
    Ok(Some(config))
}

/// Add `pass_env` to what `config` inherits, and set its teardown grace.
#[cfg(feature = "acp")]
fn passed_through(config: &mut AcpConfig, pass_env: Vec<String>, grace_ms: Option<u64>) {
    for var in pass_env {
        if !config.inherit_env.contains(&var) {
            config.inherit_env.push(var);
        }
    }
    if let Some(ms) = grace_ms {
        config.eof_grace = std::time::Duration::from_millis(ms);
        config.term_grace = std::time::Duration::from_millis(ms);
    }
}

/// Names an agent table cannot take: the `acp` agent's, the other
/// providers', and the tools every agent already has.
#[cfg(feature = "acp")]
const RESERVED_AGENT_NAMES: &[&str] = &[
    "acp",
    "spawn",
    "fork",
    "subagent",
    "wait",
    "send_message",
    "list_agents",
    "report",
    "interrupt",
    "read_file",
    "list_files",
    "grep",
    "edit_file",
    "write_file",
    "shell",
];

/// The `[acp.agents.<name>]` tables, each as the configuration of the
/// provider (and tool) of that name.
#[cfg(feature = "acp")]
pub(super) fn named_agents(
    source: &Path,
    section: Option<&AcpSection>,
) -> Result<Vec<AcpConfig>, CliError> {
    let Some(section) = section else {
        return Ok(Vec::new());
    };
    let mut agents = Vec::new();
    for (name, agent) in &section.agents {
        let key = format!("acp.agents.{name}");
        let well_formed = name.len() <= 32
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !well_formed {
            return Err(bad(
                source,
                &key,
                "an agent's name is 1-32 lower-case letters, digits, `-` or `_`, starting with a letter",
            ));
        }
        if RESERVED_AGENT_NAMES.contains(&name.as_str()) {
            return Err(bad(
                source,
                &key,
                format!("`{name}` is already a provider or tool of dsh; name the agent otherwise"),
            ));
        }
        for var in &agent.pass_env {
            check_var(var).map_err(|reason| bad(source, &format!("{key}.pass_env"), reason))?;
        }
        let mut config = AcpConfig::new(agent.command.clone())
            .name(name.clone())
            .args(agent.args.clone())
            .permission(agent.permission);
        passed_through(&mut config, agent.pass_env.clone(), agent.teardown_grace_ms);
        agents.push(config);
    }
    Ok(agents)
}
