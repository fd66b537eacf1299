//! Every way a `dsh` command fails, as one typed error whose text is the one
//! line the user reads on stderr, and the exit code `main` maps it to. No
//! text here may carry an API key (the model client's errors never do) or a
//! multi-line trace.

use std::path::PathBuf;

use dsh_core::{AgentError, StoreError};
use dsh_subagent::SubagentError;

/// Exit code: bad arguments or configuration (`--model`, a missing key).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: a name, root or session directory that does not exist.
pub const EXIT_NOT_FOUND: u8 = 3;
/// Exit code: a session directory that cannot be read as one.
pub const EXIT_CORRUPT: u8 = 4;
/// Exit code: the model API cannot be reached.
pub const EXIT_UNAVAILABLE: u8 = 5;
/// Exit code: the run was interrupted (Ctrl-C), as shells report SIGINT.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// `--model` (or `DSH_MODEL`) does not name a model this command knows.
    #[error("bad --model `{spec}`: {reason}")]
    BadModel {
        /// What was given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The model client cannot be configured (a missing key, a bad base URL).
    #[error("cannot configure the model: {0}")]
    ModelConfig(String),
    /// Nothing answers at the model API's address.
    #[error("the model API at {address} is unreachable: {reason}")]
    Unreachable {
        /// `scheme://host:port`, never a path, query or credentials.
        address: String,
        /// What the connection attempt said.
        reason: String,
    },
    /// The session directory does not exist.
    #[error("no session directory at {}", .0.display())]
    NoSessionDir(PathBuf),
    /// The session directory holds no root session.
    #[error("no agent sessions in {}", .0.display())]
    NoSessions(PathBuf),
    /// A log in the session directory cannot be read.
    #[error("corrupt session directory: {0}")]
    Corrupt(String),
    /// `--root` names no root session.
    #[error("no root session `{0}` in the session directory")]
    UnknownRoot(String),
    /// The name names no agent of the tree.
    #[error("no agent named `{name}` in the tree of {root} (see `dsh agents`)")]
    UnknownAgent {
        /// What was asked for.
        name: String,
        /// The root session searched.
        root: String,
    },
    /// The agent cannot take the request (`send` to the root, say).
    #[error("{0}")]
    Refused(String),
    /// The session store failed.
    #[error("session store: {0}")]
    Store(StoreError),
    /// An agent operation failed.
    #[error("agent: {0}")]
    Agent(AgentError),
    /// The subagent runtime refused or failed.
    #[error("{0}")]
    Subagent(SubagentError),
    /// The lead ended a turn with an error or refusal.
    #[error("the lead stopped ({reason}){}", .diagnostic.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    LeadStopped {
        /// The stop reason.
        reason: String,
        /// What went wrong, as the loop recorded it.
        diagnostic: Option<String>,
    },
    /// The run was interrupted from the terminal.
    #[error("interrupted; the tree was stopped and its sessions kept")]
    Interrupted,
    /// Writing the output failed.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::BadModel { .. } | Self::ModelConfig(_) => EXIT_USAGE,
            Self::NoSessionDir(_)
            | Self::NoSessions(_)
            | Self::UnknownRoot(_)
            | Self::UnknownAgent { .. } => EXIT_NOT_FOUND,
            Self::Corrupt(_) => EXIT_CORRUPT,
            Self::Store(err) if is_corrupt(err) => EXIT_CORRUPT,
            Self::Unreachable { .. } => EXIT_UNAVAILABLE,
            Self::Interrupted => EXIT_INTERRUPTED,
            Self::Refused(_)
            | Self::Store(_)
            | Self::Agent(_)
            | Self::Subagent(_)
            | Self::LeadStopped { .. }
            | Self::Output(_) => 1,
        }
    }
}

fn is_corrupt(err: &StoreError) -> bool {
    matches!(
        err,
        StoreError::Corrupt { .. } | StoreError::OutOfSequence { .. }
    )
}

impl From<StoreError> for CliError {
    fn from(err: StoreError) -> Self {
        if is_corrupt(&err) {
            Self::Corrupt(err.to_string())
        } else {
            Self::Store(err)
        }
    }
}

impl From<AgentError> for CliError {
    fn from(err: AgentError) -> Self {
        match err {
            AgentError::Store(err) => err.into(),
            err => Self::Agent(err),
        }
    }
}

impl From<SubagentError> for CliError {
    fn from(err: SubagentError) -> Self {
        match err {
            SubagentError::Agent(err) => err.into(),
            err => Self::Subagent(err),
        }
    }
}
