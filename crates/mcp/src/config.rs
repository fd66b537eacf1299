//! What one MCP server is: its name (the middle of its tools' names), how
//! it is reached (a command started with a scrubbed environment, or a
//! streamable-HTTP URL), whether it is enabled, and its time bounds. Only
//! data and the checks of a server name; nothing here starts anything.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use dsh_process::DEFAULT_INHERITED_ENV;

/// How long a server may take to start and answer `initialize` and its
/// first `tools/list`, by default.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one tool call may take, by default.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// How a server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A program speaking MCP over its stdin and stdout, started by dsh.
    Command {
        /// The program (a path, or a name looked up on `PATH`).
        command: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// The variables of dsh's environment it inherits, when set: the
        /// [`DEFAULT_INHERITED_ENV`] and those named by `pass_env`.
        inherit_env: Vec<String>,
        /// Variables set for it on top.
        env: BTreeMap<String, String>,
    },
    /// A server already running, reached over streamable HTTP at this URL.
    Url(String),
}

/// One MCP server of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// Its name: the `<server>` of `mcp__<server>__<tool>`.
    pub name: String,
    /// How it is reached.
    pub endpoint: Endpoint,
    /// Whether it is started and offered (`false` keeps it configured but
    /// listed as disabled).
    pub enabled: bool,
    /// How long it may take to start and list its tools.
    pub startup_timeout: Duration,
    /// How long one tool call may take before it is cancelled and the
    /// model told so.
    pub call_timeout: Duration,
}

impl McpServerConfig {
    /// A server started as `command` with no arguments, the default
    /// inherited environment and the default time bounds.
    pub fn command(name: impl Into<String>, command: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            endpoint: Endpoint::Command {
                command: command.into(),
                args: Vec::new(),
                inherit_env: DEFAULT_INHERITED_ENV
                    .iter()
                    .map(|name| (*name).to_owned())
                    .collect(),
                env: BTreeMap::new(),
            },
            enabled: true,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }

    /// Set the command's arguments (no effect on a URL server).
    #[must_use]
    pub fn args<I, S>(mut self, new: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        if let Endpoint::Command { args, .. } = &mut self.endpoint {
            *args = new.into_iter().map(Into::into).collect();
        }
        self
    }

    /// Let the command inherit `name` from dsh's environment too (no effect
    /// on a URL server).
    #[must_use]
    pub fn pass_env(mut self, name: impl Into<String>) -> Self {
        if let Endpoint::Command { inherit_env, .. } = &mut self.endpoint {
            let name = name.into();
            if !inherit_env.contains(&name) {
                inherit_env.push(name);
            }
        }
        self
    }

    /// A server reached over streamable HTTP at `url`.
    pub fn url(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            endpoint: Endpoint::Url(url.into()),
            ..Self::command(name, "")
        }
    }
}

/// Why a server name cannot be used, or `None` when it can: a name is one
/// to 32 ASCII letters, digits, `-` or `_`, and holds no `__` (which
/// separates it from the tool's name).
pub fn check_server_name(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 32 {
        return Some("a server name is 1 to 32 characters long");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Some("a server name holds only ASCII letters, digits, `-` and `_`");
    }
    if name.contains("__") {
        return Some("a server name holds no `__` (it separates the server from the tool)");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_checked() {
        assert_eq!(check_server_name("fs"), None);
        assert_eq!(check_server_name("my-server_2"), None);
        assert!(check_server_name("").is_some());
        assert!(check_server_name("a.b").is_some());
        assert!(check_server_name("a__b").is_some());
        assert!(check_server_name(&"x".repeat(33)).is_some());
    }
}
