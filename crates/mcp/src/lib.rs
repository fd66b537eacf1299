//! `dsh-mcp`: MCP servers as tool sources. The servers configured for a
//! tree ([`McpServerConfig`]: a command started with a scrubbed environment,
//! or a URL) form one [`McpServers`] set, started together on first use and
//! shared by every agent of the tree; each server's tools are offered as
//! `mcp__<server>__<tool>` ([`McpTool`], dsh-core's [`dsh_core::Tool`]) with
//! the server's description and input schema. Which agent sees which of
//! them is the runtime's tool filter: a child's filter can narrow the set
//! and never widen it, as for every host tool.
//!
//! The processes are `dsh-process`'s: each server in its own process group,
//! with the parent-death signal, stopped with its tree by a ladder (stdin
//! closed, SIGTERM, SIGKILL) that returns when no member is left, and
//! SIGKILLed when the set is dropped without it. The protocol is the
//! official `rmcp` SDK's client over the server's pipes.
//!
//! What the model is shown: a tool error the model can act on for a
//! server's own error, a timeout (the call is abandoned) or a crash (the
//! server's tools are then unavailable for the run), each also logged as
//! one warning line for the user. A listed tool whose input schema is not
//! an object schema, or whose full name a model API would refuse, is not
//! offered (the listing says why). A server that sends
//! `notifications/tools/list_changed` is re-listed: a removed tool drops
//! out, a changed one is described and checked as the server now says.
//!
//! A tool a server adds after the tree started is handed to
//! [`McpServers::on_new_tools`]'s sink, which registers it for the agents
//! created after that (an agent's tools are fixed when it is built).
//!
//! A server with a `url` is reached over streamable HTTP (rmcp's client on
//! the workspace's reqwest and rustls; [`McpServers::with_tls`] gives the
//! roots), with its configured headers on every request (an
//! `Authorization`, say; [`check_header`] says which can be sent): an
//! unreachable URL, a header that cannot be sent, a certificate not trusted or an HTTP error
//! fails its start at once with one line naming the URL; a connection lost
//! mid-call is the same tool error as a crashed process.
//!
//! Limits: a server that dies is not restarted within the run.

mod config;
mod server;
mod servers;
mod tool;

pub use config::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_INHERITED_ENV, DEFAULT_STARTUP_TIMEOUT, Endpoint,
    McpServerConfig, check_header, check_server_name,
};
pub use server::ServerState;
pub use servers::{McpServers, ServerStatus, ToolStatus};
pub use tool::McpTool;

/// The name a server's tool is offered by: `mcp__<server>__<tool>`.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("mcp__{server}__{tool}")
}

/// Why the servers could not be set up or started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// A server name that cannot be used.
    #[error("MCP server `{server}`: {reason}")]
    Name {
        /// The name.
        server: String,
        /// Why.
        reason: String,
    },
    /// The server's program could not be started.
    #[error("MCP server `{server}` did not start: {reason}")]
    Spawn {
        /// The server.
        server: String,
        /// Why.
        reason: String,
    },
    /// The server started but did not complete the handshake or its first
    /// listing.
    #[error("MCP server `{server}` did not start: {reason}{}", stderr_suffix(.stderr))]
    Start {
        /// The server.
        server: String,
        /// Why.
        reason: String,
        /// Its stderr's last lines, joined by ` | ` (empty when none).
        stderr: String,
    },
    /// The HTTP client of the URL servers could not be set up.
    #[error("the HTTP client of the MCP servers could not be set up: {reason}")]
    Http {
        /// Why.
        reason: String,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(" (its stderr ended: {stderr})")
    }
}
