//! The runtime's errors, each with a stable code that tools and hosts branch
//! on, and a message that says what to do about it.

use dsh_core::{AgentError, SessionId, StoreError};

/// Why a subagent operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SubagentError {
    /// A provider with this name is already registered.
    #[error(
        "a subagent provider named `{0}` is already registered; remove it first or pick another name"
    )]
    DuplicateProvider(String),
    /// No provider with this name is registered.
    #[error("no subagent provider named `{0}` is registered")]
    NoProvider(String),
    /// The request needs a start-time capability the provider lacks, or the
    /// provider implements neither execution path.
    #[error("provider `{provider}` does not support {capability}")]
    UnsupportedCapability {
        /// The provider.
        provider: String,
        /// The capability, by its flag name.
        capability: &'static str,
    },
    /// The request itself is malformed (an unknown tool in the filter, a
    /// persona with an unknown variable, an unknown preset, a bad cwd).
    #[error("invalid subagent request: {0}")]
    InvalidRequest(String),
    /// The child would be deeper than allowed.
    #[error(
        "delegation depth limit reached: a child here would be at depth {depth}, and the limit is {max}. Solve the task yourself."
    )]
    DepthLimit {
        /// The depth the child would have.
        depth: u32,
        /// The limit.
        max: u32,
    },
    /// The requested name breaks the naming rules.
    #[error("invalid agent name `{name}`: {reason}")]
    InvalidName {
        /// The name asked for.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// Another child of the same parent already has this name.
    #[error(
        "the name `{0}` is already used by another child of this agent; choose a different name"
    )]
    NameTaken(String),
    /// The tree already has as many live children as allowed.
    #[error("too many live subagents in this tree (limit {0}); wait for some to finish")]
    Capacity(usize),
    /// The caller's token fired before the child was published.
    #[error("the subagent start was cancelled before the child was published")]
    Cancelled,
    /// The parent is not the exact live agent it claims to be.
    #[error("agent `{0}` is not live")]
    NotLive(SessionId),
    /// A provider's run id collides with a live run or a local session.
    #[error("provider `{provider}` returned run id `{id}`, which is already in use")]
    DuplicateRunId {
        /// The provider.
        provider: String,
        /// The colliding id.
        id: SessionId,
    },
    /// A persisted catalog names the same child name twice.
    #[error("the subagent catalog of `{parent}` names `{name}` twice")]
    DuplicateName {
        /// The parent session.
        parent: SessionId,
        /// The repeated name.
        name: String,
    },
    /// A name (a slash path, or a token that is not a session id) names no
    /// member of the caller's tree.
    #[error("no agent named `{0}` in this tree; use list_agents to see the names")]
    AgentNameNotFound(String),
    /// The caller may not do this to that agent.
    #[error("{0}")]
    Unauthorized(String),
    /// The child cannot be resumed; retrying will not help.
    #[error("agent `{id}` cannot be resumed: {reason}. Do not retry; start a new agent instead")]
    NotResumable {
        /// The child.
        id: SessionId,
        /// Why.
        reason: String,
    },
    /// The child could be resumed, but the tree has no capacity now.
    #[error(
        "agent `{0}` cannot take messages right now: the tree is at its live-agent limit; try again after some agents finish"
    )]
    DeliveryUnavailable(SessionId),
    /// Admission below this tree is closed while it drains.
    #[error("the tree is shutting down; no new work is admitted")]
    Draining,
    /// A catalog event in a parent's log could not be read.
    #[error("the subagent catalog of `{parent}` is corrupt at seq {seq}: {message}")]
    CorruptCatalog {
        /// The parent session.
        parent: SessionId,
        /// The offending event.
        seq: u64,
        /// What is wrong.
        message: String,
    },
    /// A provider failed to start or prepare a child.
    #[error("provider `{provider}` failed: {message}")]
    Provider {
        /// The provider.
        provider: String,
        /// What went wrong.
        message: String,
    },
    /// Teardown of an activation failed; its result, if any, stands.
    #[error("teardown failed: {0}")]
    Teardown(String),
    /// A local child was created and cataloged but did not accept its
    /// initial prompt; it was torn down without running.
    #[error("child `{child}` did not accept its initial prompt: {reason}")]
    InitialPrompt {
        /// The child.
        child: SessionId,
        /// Why the prompt was refused.
        reason: String,
    },
    /// A live agent is neither a tree root nor the child of a live activation.
    #[error("agent `{0}` is not a member of a live agent tree")]
    NotAMember(SessionId),
    /// The agent layer failed.
    #[error(transparent)]
    Agent(#[from] AgentError),
}

impl From<StoreError> for SubagentError {
    fn from(err: StoreError) -> Self {
        Self::Agent(AgentError::Store(err))
    }
}

impl SubagentError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::DuplicateProvider(_) => "DUPLICATE_PROVIDER",
            Self::NoProvider(_) => "NO_PROVIDER",
            Self::UnsupportedCapability { .. } => "UNSUPPORTED_CAPABILITY",
            Self::InvalidRequest(_) => "INVALID_REQUEST",
            Self::DepthLimit { .. } => "DEPTH_LIMIT",
            Self::InvalidName { .. } => "INVALID_NAME",
            Self::NameTaken(_) => "NAME_TAKEN",
            Self::Capacity(_) => "CAPACITY",
            Self::Cancelled => "CANCELLED",
            Self::NotLive(_) => "NOT_LIVE",
            Self::DuplicateRunId { .. } => "DUPLICATE_RUN_ID",
            Self::DuplicateName { .. } => "DUPLICATE_NAME",
            Self::AgentNameNotFound(_) => "AGENT_NAME_NOT_FOUND",
            Self::Unauthorized(_) => "UNAUTHORIZED",
            Self::NotResumable { .. } => "NOT_RESUMABLE",
            Self::DeliveryUnavailable(_) => "DELIVERY_UNAVAILABLE",
            Self::Draining => "DRAINING",
            Self::CorruptCatalog { .. } => "CORRUPT_CATALOG",
            Self::Provider { .. } => "PROVIDER_FAILED",
            Self::Teardown(_) => "TEARDOWN_FAILED",
            Self::InitialPrompt { .. } => "INITIAL_PROMPT_FAILED",
            Self::NotAMember(_) => "NOT_A_MEMBER",
            Self::Agent(err) => err.code(),
        }
    }
}
