//! What one MCP server is: its name (the middle of its tools' names), how
//! it is reached (a command started with a scrubbed environment, or a
//! streamable-HTTP URL with the headers sent on every request), whether it
//! is enabled, and its time bounds. Only data and the checks of a server
//! name and of a header; nothing here starts anything.

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
    /// A server already running, reached over streamable HTTP.
    Url {
        /// Its URL.
        url: String,
        /// Headers sent with every request (an `Authorization`, say), by
        /// name; their values are never shown in a diagnostic.
        headers: BTreeMap<String, String>,
    },
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

    /// A server reached over streamable HTTP at `url`, with no headers.
    pub fn url(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            endpoint: Endpoint::Url {
                url: url.into(),
                headers: BTreeMap::new(),
            },
            ..Self::command(name, "")
        }
    }

    /// Send the header `name: value` with every request (no effect on a
    /// command server); a later value of the same name replaces it.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Endpoint::Url { headers, .. } = &mut self.endpoint {
            headers.insert(name.into(), value.into());
        }
        self
    }
}

/// The headers the streamable-HTTP transport sets itself, which a server's
/// configuration cannot.
const RESERVED_HEADERS: [&str; 5] = [
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// Why the header `name: value` cannot be sent, or `None` when it can: a
/// name is an HTTP token the transport does not set itself; a value is
/// visible ASCII, spaces and tabs, with no line break. The value is never
/// quoted in the reason.
pub fn check_header(name: &str, value: &str) -> Option<&'static str> {
    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Some("a header name is a non-empty HTTP token (letters, digits and `-`)");
    }
    if RESERVED_HEADERS
        .iter()
        .any(|reserved| name.eq_ignore_ascii_case(reserved))
    {
        return Some("this header is set by the MCP transport itself");
    }
    if value.is_empty()
        || !value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
    {
        return Some("a header value is non-empty visible ASCII (spaces and tabs allowed)");
    }
    None
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

    proptest::proptest! {
        /// A header passes the check exactly when the HTTP client takes it
        /// and the transport does not set it itself.
        #[test]
        fn a_header_passes_exactly_when_it_can_be_sent(
            name in "[A-Za-z0-9_ :-]{0,12}",
            value in "[ -~\t\r\n\u{80}-\u{ff}]{0,12}",
        ) {
            let sendable = reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok()
                && !value.is_empty()
                && value.bytes().all(|b| b != b'\r' && b != b'\n' && b.is_ascii())
                && reqwest::header::HeaderValue::from_str(&value).is_ok();
            let reserved = RESERVED_HEADERS.iter().any(|r| name.eq_ignore_ascii_case(r));
            proptest::prop_assert_eq!(check_header(&name, &value).is_none(), sendable && !reserved);
        }
    }

    #[test]
    fn the_transports_own_headers_are_refused() {
        assert_eq!(check_header("Authorization", "Bearer abc"), None);
        assert!(check_header("Mcp-Session-Id", "x").is_some());
        assert!(check_header("accept", "x").is_some());
        assert!(check_header("X-Token", "").is_some());
        assert!(check_header("X-Token", "a\nb").is_some());
    }
}
