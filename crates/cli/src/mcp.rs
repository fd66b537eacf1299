//! MCP servers in `dsh`: the `[mcp.servers.NAME]` tables of `dsh.toml` and
//! the `--mcp NAME=COMMAND` flags resolved into server configurations
//! ([`resolve`]), and `dsh mcp`, which starts each enabled server, lists its
//! state and tools (as text, or as JSON with `--json`) and stops it again
//! ([`list`]). The servers of a run are started by the session
//! ([`crate::world::World::start_mcp`]); this module only reads and shows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_mcp::{McpServerConfig, McpServers};
use serde::Deserialize;

use crate::error::CliError;

/// The `[mcp]` table.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    /// The servers, by name: each one's tools are offered to every agent
    /// as `mcp__<name>__<tool>`.
    #[serde(default)]
    pub servers: BTreeMap<String, McpServerSection>,
}

/// One `[mcp.servers.NAME]` table: `command` (with `args`, `pass_env`,
/// `env`) or `url` (with `headers`).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerSection {
    /// The server program (a path, or a name on `PATH`), speaking MCP over
    /// its stdin and stdout.
    pub command: Option<PathBuf>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables passed through from `dsh`'s environment when set, besides
    /// the default few (`PATH`, `HOME`, ...); everything else is scrubbed.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// Variables set for it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A streamable-HTTP server's URL, in place of `command`.
    pub url: Option<String>,
    /// Headers sent with every request to the `url`, by name; `${VAR}` in
    /// a value is that variable of `dsh`'s environment, so that a secret
    /// stays out of the file (`Authorization = "Bearer ${API_TOKEN}"`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// `false` keeps the server configured but neither started nor offered.
    pub enabled: Option<bool>,
    /// Seconds one tool call may take (default 120).
    pub timeout: Option<u64>,
    /// Seconds the server may take to start and list its tools (default 30).
    pub startup_timeout: Option<u64>,
}

/// The servers of the file's `[mcp]` table and the `--mcp` flags (a flag
/// replaces the file's server of the same name), checked.
///
/// # Errors
/// A bad key of `source` ([`CliError::Config`]), or a bad `--mcp` flag
/// ([`CliError::BadFlag`]).
pub fn resolve(
    source: &Path,
    section: Option<McpSection>,
    flags: &[String],
) -> Result<Vec<McpServerConfig>, CliError> {
    let bad = |key: String, reason: &str| CliError::Config {
        file: source.to_owned(),
        key,
        reason: reason.to_owned(),
    };
    let mut servers = BTreeMap::new();
    for (name, table) in section.unwrap_or_default().servers {
        let key = format!("mcp.servers.{name}");
        if let Some(reason) = dsh_mcp::check_server_name(&name) {
            return Err(bad(key, reason));
        }
        let mut config = match (table.command, table.url) {
            (Some(command), None) => {
                let mut config = McpServerConfig::command(&name, command).args(table.args);
                for var in table.pass_env {
                    if let Err(reason) = crate::config::check_var(&var) {
                        return Err(bad(format!("{key}.pass_env"), &reason));
                    }
                    config = config.pass_env(var);
                }
                if let dsh_mcp::Endpoint::Command { env, .. } = &mut config.endpoint {
                    *env = table.env;
                }
                if !table.headers.is_empty() {
                    return Err(bad(
                        format!("{key}.headers"),
                        "`headers` are for a `url`, not a `command`",
                    ));
                }
                config
            }
            (None, Some(url)) => {
                if !table.args.is_empty() || !table.pass_env.is_empty() || !table.env.is_empty() {
                    return Err(bad(
                        format!("{key}.url"),
                        "`args`, `pass_env` and `env` are for a `command`, not a `url`",
                    ));
                }
                let mut config = McpServerConfig::url(&name, url);
                // A disabled server's variables need not be set.
                if table.enabled != Some(false) {
                    for (header, value) in table.headers {
                        let key = format!("{key}.headers.{header}");
                        let value = from_env(&value, |var| std::env::var(var).ok())
                            .map_err(|reason| bad(key.clone(), &reason))?;
                        if let Some(reason) = dsh_mcp::check_header(&header, &value) {
                            return Err(bad(key, reason));
                        }
                        config = config.header(header, value);
                    }
                }
                config
            }
            (Some(_), Some(_)) => {
                return Err(bad(
                    format!("{key}.url"),
                    "give `command` or `url`, not both",
                ));
            }
            (None, None) => {
                return Err(bad(
                    format!("{key}.command"),
                    "missing: a server needs its `command` (or a `url`)",
                ));
            }
        };
        config.enabled = table.enabled.unwrap_or(true);
        for (field, value, slot) in [
            ("timeout", table.timeout, &mut config.call_timeout),
            (
                "startup_timeout",
                table.startup_timeout,
                &mut config.startup_timeout,
            ),
        ] {
            match value {
                Some(0) => return Err(bad(format!("{key}.{field}"), "must be positive")),
                Some(secs) => *slot = Duration::from_secs(secs),
                None => {}
            }
        }
        servers.insert(name, config);
    }
    for flag in flags {
        let config = flag_server(flag)
            .map_err(|reason| CliError::BadFlag(format!("--mcp {flag}: {reason}")))?;
        servers.insert(config.name.clone(), config);
    }
    Ok(servers.into_values().collect())
}

/// `value` with each `${VAR}` replaced by what `lookup` says of `VAR`
/// (`dsh`'s environment); the reason names the variable, never a value.
fn from_env(value: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut expanded = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        expanded.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err("a `${` without its `}`".to_owned());
        };
        let var = &after[..end];
        crate::config::check_var(var).map_err(|reason| format!("`${{{var}}}`: {reason}"))?;
        let Some(found) = lookup(var) else {
            return Err(format!("`${{{var}}}` is not set in dsh's environment"));
        };
        expanded.push_str(&found);
        rest = &after[end + 1..];
    }
    expanded.push_str(rest);
    Ok(expanded)
}

/// `NAME=COMMAND [ARG...]`, split at whitespace (no shell quoting: an
/// argument with a space needs `dsh.toml`).
fn flag_server(flag: &str) -> Result<McpServerConfig, String> {
    let Some((name, command)) = flag.split_once('=') else {
        return Err("expected NAME=COMMAND".to_owned());
    };
    if let Some(reason) = dsh_mcp::check_server_name(name) {
        return Err(reason.to_owned());
    }
    let mut words = command.split_whitespace();
    let Some(program) = words.next() else {
        return Err("the command is empty".to_owned());
    };
    Ok(McpServerConfig::command(name, program).args(words))
}

/// The set of `configs`, to be started in `cwd`; a server reached by an
/// `https` URL has its certificate checked as the model providers' are
/// (`dsh_llm_openai::tls_config`: a certificate not trusted fails its start
/// at once).
///
/// # Errors
/// A server name that cannot be used, or TLS that cannot be set up.
pub(crate) fn server_set(
    configs: Vec<McpServerConfig>,
    cwd: &Path,
) -> Result<McpServers, CliError> {
    let by_url = configs
        .iter()
        .any(|config| matches!(config.endpoint, dsh_mcp::Endpoint::Url { .. }));
    let servers = McpServers::new(configs, cwd.to_owned())
        .map_err(|err| CliError::Refused(err.to_string()))?;
    if !by_url {
        return Ok(servers);
    }
    let tls = dsh_llm_openai::tls_config().map_err(|err| CliError::Refused(err.to_string()))?;
    Ok(servers.with_tls(tls))
}

/// `dsh mcp`: start every enabled server of the configuration in force,
/// print each one's state and tools, and stop them.
///
/// # Errors
/// A configuration that does not load; after the whole listing is
/// printed, [`CliError::Refused`] when a server did not start (its line
/// says why).
///
/// # Cancel safety
/// Dropping it part-way drops the servers, whose process groups are then
/// SIGKILLed.
pub async fn list(config: Option<PathBuf>, flags: Vec<String>, json: bool) -> Result<(), CliError> {
    let settings = crate::config::load(&crate::config::Overrides {
        config,
        mcp: flags,
        ..crate::config::Overrides::default()
    })?;
    let cwd = std::env::current_dir()?;
    let mut failed = 0;
    let mut statuses = Vec::new();
    // One server at a time, so that one that does not start is reported
    // beside the others.
    for server in settings.mcp {
        let servers = server_set(vec![server], &cwd)?;
        let failure = servers.tools().await.err();
        let mut status = servers.status();
        servers.shutdown().await;
        if let (Some(err), Some(status)) = (failure, status.first_mut()) {
            failed += 1;
            status.state = format!("failed: {err}");
        } else if let Some(status) = status.first_mut()
            && status.state == "stopped"
        {
            status.state = "ready".to_owned();
        }
        statuses.extend(status);
    }
    if json {
        let text = serde_json::to_string_pretty(&statuses)
            .map_err(|err| CliError::Refused(format!("cannot print the listing: {err}")))?;
        println!("{text}");
    } else if statuses.is_empty() {
        println!(
            "no MCP servers are configured ([mcp.servers.NAME] in dsh.toml, or --mcp NAME=COMMAND)"
        );
    } else {
        for status in &statuses {
            println!("{}  {}  ({})", status.name, status.state, status.endpoint);
            for tool in &status.tools {
                println!("  {}  {}", tool.name, crate::one_line(&tool.description));
            }
            for tool in &status.refused {
                println!("  (not offered) {}: {}", tool.name, tool.description);
            }
        }
    }
    if failed > 0 {
        return Err(CliError::Refused(format!(
            "{failed} MCP server(s) did not start"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn servers(text: &str, flags: &[&str]) -> Result<Vec<McpServerConfig>, String> {
        let file = Path::new("/cfg/dsh.toml");
        let flags: Vec<String> = flags.iter().map(|f| (*f).to_owned()).collect();
        crate::config::parse(file, text)
            .and_then(|parsed| resolve(file, parsed.mcp, &flags))
            .map_err(|err| format!("{err} (exit {})", err.exit_code()))
    }

    #[test]
    fn tables_and_flags_resolve_and_a_flag_replaces_its_table() {
        let text = "[mcp.servers.fs]\ncommand = \"node\"\nargs = [\"fs.js\", \"/tmp\"]\npass_env = [\"TOKEN\"]\ntimeout = 5\n\n[mcp.servers.off]\ncommand = \"x\"\nenabled = false\n";
        let resolved = servers(text, &["ev=node ev.js stdio"]).unwrap();
        let names: Vec<&str> = resolved.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ev", "fs", "off"]);
        let fs = &resolved[1];
        assert_eq!(fs.call_timeout, Duration::from_secs(5));
        let dsh_mcp::Endpoint::Command {
            command,
            args,
            inherit_env,
            ..
        } = &fs.endpoint
        else {
            panic!("a command server")
        };
        assert_eq!(command, Path::new("node"));
        assert_eq!(args, &["fs.js", "/tmp"]);
        assert!(
            inherit_env.contains(&"TOKEN".to_owned()) && inherit_env.contains(&"PATH".to_owned())
        );
        assert!(!resolved[2].enabled);
        let replaced = servers(text, &["fs=other"]).unwrap();
        let dsh_mcp::Endpoint::Command { command, args, .. } = &replaced[0].endpoint else {
            panic!("a command server")
        };
        assert_eq!((command.as_path(), args.len()), (Path::new("other"), 0));
    }

    #[test]
    fn bad_tables_and_flags_are_refused_naming_the_key() {
        for (text, flags, expected) in [
            (
                "[mcp.servers.a]\n",
                &[][..],
                "/cfg/dsh.toml: mcp.servers.a.command: missing: a server needs its `command` (or a `url`) (exit 2)",
            ),
            (
                "[mcp.servers.a]\nurl = \"http://h/mcp\"\nargs = [\"x\"]\n",
                &[],
                "/cfg/dsh.toml: mcp.servers.a.url: `args`, `pass_env` and `env` are for a `command`, not a `url` (exit 2)",
            ),
            (
                "[mcp.servers.a]\ncommand = \"x\"\ntimeout = 0\n",
                &[],
                "/cfg/dsh.toml: mcp.servers.a.timeout: must be positive (exit 2)",
            ),
            (
                "[mcp.servers.\"a.b\"]\ncommand = \"x\"\n",
                &[],
                "/cfg/dsh.toml: mcp.servers.a.b: a server name holds only ASCII letters, digits, `-` and `_` (exit 2)",
            ),
            ("[mcp.servers.a]\ncommand = \"x\"\nport = 1\n", &[], ""),
            (
                "",
                &["noequals"],
                "bad --mcp noequals: expected NAME=COMMAND (exit 2)",
            ),
            ("", &["a= "], "bad --mcp a= : the command is empty (exit 2)"),
            (
                "[mcp.servers.a]\ncommand = \"x\"\nheaders = { X-A = \"1\" }\n",
                &[],
                "/cfg/dsh.toml: mcp.servers.a.headers: `headers` are for a `url`, not a `command` (exit 2)",
            ),
            (
                "[mcp.servers.a]\nurl = \"http://h/mcp\"\nheaders = { X-A = \"Bearer ${DSH_TEST_SURELY_UNSET}\" }\n",
                &[],
                "/cfg/dsh.toml: mcp.servers.a.headers.X-A: `${DSH_TEST_SURELY_UNSET}` is not set in dsh's environment (exit 2)",
            ),
            (
                "[mcp.servers.a]\nurl = \"http://h/mcp\"\nheaders = { Mcp-Session-Id = \"1\" }\n",
                &[],
                "/cfg/dsh.toml: mcp.servers.a.headers.Mcp-Session-Id: this header is set by the MCP transport itself (exit 2)",
            ),
            (
                "",
                &["a__b=x"],
                "bad --mcp a__b=x: a server name holds no `__` (it separates the server from the tool) (exit 2)",
            ),
        ] {
            let err = servers(text, flags).unwrap_err();
            if expected.is_empty() {
                assert!(
                    err.contains("mcp.servers.a") && err.ends_with("(exit 2)"),
                    "{err}"
                );
            } else {
                assert_eq!(err, expected);
            }
        }
    }

    #[test]
    fn a_url_servers_headers_take_variables_from_the_environment() {
        let text = "[mcp.servers.web]\nurl = \"http://h/mcp\"\nheaders = { X-Path = \"p=${PATH};\", X-Plain = \"v\" }\n\n[mcp.servers.off]\nurl = \"http://h/mcp\"\nenabled = false\nheaders = { X-A = \"${DSH_TEST_SURELY_UNSET}\" }\n";
        let resolved = servers(text, &[]).unwrap();
        let dsh_mcp::Endpoint::Url { headers, .. } = &resolved[1].endpoint else {
            panic!("a URL server")
        };
        let path = std::env::var("PATH").unwrap();
        assert_eq!(headers["X-Path"], format!("p={path};"));
        assert_eq!(headers["X-Plain"], "v");
    }

    proptest::proptest! {
        /// Literal text stays as it is and each `${VAR}` becomes its value;
        /// an unset one is refused naming it.
        #[test]
        fn variables_are_replaced_and_the_rest_kept(
            parts in proptest::collection::vec(("[a-zA-Z0-9 =;:/.$}-]{0,8}", "[A-Z_]{1,6}", proptest::option::of("[ -~]{0,8}")), 0..5),
            tail in "[a-zA-Z0-9 ]{0,8}",
        ) {
            // A literal part never opens a `${` of its own.
            let parts: Vec<_> = parts
                .into_iter()
                .map(|(literal, var, value)| (literal.replace('$', ""), var, value))
                .collect();
            let vars: BTreeMap<String, Option<String>> =
                parts.iter().map(|(_, var, value)| (var.clone(), value.clone())).collect();
            let value: String = parts.iter().map(|(literal, var, _)| format!("{literal}${{{var}}}")).collect::<String>() + &tail;
            let got = from_env(&value, |var| vars.get(var).cloned().flatten());
            let first_unset = parts.iter().find(|(_, var, _)| vars[var].is_none());
            match first_unset {
                Some((_, var, _)) => proptest::prop_assert_eq!(
                    got,
                    Err(format!("`${{{var}}}` is not set in dsh's environment"))
                ),
                None => {
                    let want: String = parts
                        .iter()
                        .map(|(literal, var, _)| format!("{literal}{}", vars[var].clone().unwrap_or_default()))
                        .collect::<String>()
                        + &tail;
                    proptest::prop_assert_eq!(got, Ok(want));
                }
            }
        }
    }
}
