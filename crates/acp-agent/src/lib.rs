//! dsh as an Agent Client Protocol agent. [`serve`] answers one client
//! over one connection (stdio for `dsh acp`): `initialize`, `session/new`,
//! `session/load`, `session/prompt` and `session/cancel`, for any [`Host`]
//! (a program that opens a subagent tree for a working directory and runs
//! turns of its lead). The host shows its tree through the session's
//! [`Updates`], which turns log events and the runtime's start and end
//! events into `session/update` notifications: the lead's on the root
//! session, every child's on a child session of its own, announced on its
//! creator's session (`subagent_update`) and linked to the tool call that
//! started it (the call's `session` content and `_meta.dsh`). The host's
//! asker is the session's [`Approvals`]: an action above the sandbox level
//! becomes a `session/request_permission` to the client. The stdio and HTTP MCP
//! servers a client passes with a session reach the host as dsh-mcp
//! configurations ([`Client::mcp_servers`]); a tree that offers a choice
//! of models ([`Tree::models`]) has it as the session's `model` config
//! option.
//!
//! The crate owns the protocol side only: it never builds an agent, reads
//! a log or decides a policy. Nothing but protocol frames is written to
//! the connection; diagnostics go to `tracing`.

mod approvals;
mod mcp;
mod server;
mod updates;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{ContentBlock, SessionId};

pub use approvals::Approvals;
pub use server::serve;
pub use updates::Updates;

/// The version of the protocol crate's schema this crate speaks.
pub use agent_client_protocol::schema::ProtocolVersion;

/// What a host could not do, as the client hears it (a JSON-RPC error).
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// No tree of that id exists (an `invalid_params` error).
    #[error("no session `{0}`")]
    UnknownSession(String),
    /// The request cannot be served as asked (an `invalid_request` error).
    #[error("{0}")]
    Refused(String),
    /// The tree failed (an internal error).
    #[error("{0}")]
    Failed(String),
}

/// How a turn of the lead ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd {
    /// The lead ended its turn and the tree is done.
    EndTurn,
    /// The client cancelled it (`session/cancel`).
    Cancelled,
    /// The lead used up its model requests for the turn.
    MaxTurnRequests,
    /// The model refused.
    Refusal,
    /// The tree's token or cost budget is spent (the host stopped the
    /// tree, children first); ACP's `max_tokens`.
    BudgetSpent,
}

/// The models a tree offers its client as the session's `model` option
/// (`session/set_config_option`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Models {
    /// The model the next turn uses.
    pub current: String,
    /// Every model it may be switched to, `current` among them.
    pub choices: Vec<String>,
}

/// What a tree is given of its client: where its updates go, who
/// answers its approvals, and the MCP servers it passed for the session.
#[derive(Clone)]
pub struct Client {
    /// The session's updates.
    pub updates: Updates,
    /// The session's permission requests.
    pub approvals: Approvals,
    /// The stdio and streamable-HTTP MCP servers the client passed in `session/new` or
    /// `session/load`: the tree starts them as its own (one set per tree,
    /// stopped with it), beside any the host configures.
    pub mcp_servers: Vec<dsh_mcp::McpServerConfig>,
}

/// A program whose trees are served: it builds a tree for a session and
/// brings a persisted one back.
#[async_trait]
pub trait Host: Send + Sync + 'static {
    /// Whether prompts may hold images (the model takes them).
    fn images(&self) -> bool;

    /// A new tree whose workspace root is `cwd`; its lead has not run yet.
    /// Its root id names the session. It tells `client.updates` its root
    /// before anything else.
    ///
    /// # Cancel safety
    /// Not meant to be dropped: the server awaits it whole.
    async fn open(&self, cwd: PathBuf, client: Client) -> Result<Arc<dyn Tree>, HostError>;

    /// The persisted tree of root `id`, with its whole history replayed to
    /// `client.updates` ([`Updates::replayed`]) before it returns.
    ///
    /// # Cancel safety
    /// Not meant to be dropped: the server awaits it whole.
    async fn load(
        &self,
        id: &str,
        cwd: PathBuf,
        client: Client,
    ) -> Result<Arc<dyn Tree>, HostError>;
}

/// One served tree.
#[async_trait]
pub trait Tree: Send + Sync + 'static {
    /// Its root's id, the session's id.
    fn id(&self) -> SessionId;

    /// Run a turn of the lead on `content` until the lead ended its turn
    /// and the whole tree is done, or the turn was cancelled. Everything
    /// the turn showed has reached [`Updates`] when it returns.
    ///
    /// # Cancel safety
    /// Not meant to be dropped: [`Tree::cancel`] stops a turn.
    async fn prompt(&self, content: Vec<ContentBlock>) -> Result<TurnEnd, HostError>;

    /// The models the session may switch between, or `None` when it
    /// offers no choice (the session then has no config option).
    fn models(&self) -> Option<Models> {
        None
    }

    /// Use `model`, one of [`Tree::models`]'s choices, from the next turn
    /// on (a running turn keeps its model).
    ///
    /// # Errors
    /// [`HostError::Refused`] when the tree offers no such model.
    fn set_model(&self, model: &str) -> Result<(), HostError> {
        Err(HostError::Refused(format!(
            "this session offers no model choice (`{model}`)"
        )))
    }

    /// Stop the running turn, children first; the turn then ends
    /// [`TurnEnd::Cancelled`]. Nothing when no turn runs.
    ///
    /// # Cancel safety
    /// A drop part-way leaves the tree stopping; the turn still ends.
    async fn cancel(&self);

    /// Stop whatever runs and shut the tree down; what was written stays.
    ///
    /// # Cancel safety
    /// A drop part-way leaves what is not yet stopped running.
    async fn close(&self);
}
