//! Every way a `dsh` command fails, as one typed error whose text is the one
//! line the user reads on stderr, and the exit code `main` maps it to. No
//! text here may carry an API key (the model client's errors never do) or a
//! multi-line trace, nor a sentence written for a model: the runtime's
//! errors are worded for the agent that called a tool ("Do not retry; start
//! a new agent instead"), so [`person`] words each of them again for the
//! person at the terminal.

use dsh_subagent::{AdmissionError, DeliveryError, RegistryError};
use std::path::PathBuf;

use dsh_core::{AgentError, StoreError};
use dsh_subagent::SubagentError;

/// Exit code: bad arguments or configuration (`--model`, a bad `dsh.toml`,
/// a missing key).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: a name, root or session directory that does not exist.
pub const EXIT_NOT_FOUND: u8 = 3;
/// Exit code: a session directory that cannot be read as one.
pub const EXIT_CORRUPT: u8 = 4;
/// Exit code: the model API cannot be reached.
pub const EXIT_UNAVAILABLE: u8 = 5;
/// Exit code base for a run stopped by a signal: `128 + n`, as shells
/// report it (130 for SIGINT, 129 for SIGHUP, 143 for SIGTERM).
pub const EXIT_SIGNAL_BASE: u8 = 128;

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
    /// The configuration file has a bad key or value, or one it names (an
    /// API key variable) is unset.
    #[error("{}: {}{reason}", .file.display(), if .key.is_empty() { String::new() } else { format!("{}: ", .key) })]
    Config {
        /// The file.
        file: PathBuf,
        /// The key's dotted path (`limits.max_depth`); empty for the file.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A flag's value is unusable (the text names the flag).
    #[error("bad {0}")]
    BadFlag(String),
    /// A configuration key or flag asks for what this build left out.
    #[cfg(any(not(feature = "acp"), not(feature = "restate")))]
    #[error(
        "{what} needs the `{feature}` feature, which this dsh was built without (build dsh-cli with `--features {feature}`)"
    )]
    FeatureDisabled {
        /// What asked for it (`dsh.toml's [acp]`, `--acp-command`).
        what: String,
        /// The cargo feature of dsh-cli that provides it.
        feature: &'static str,
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
    /// The Restate server does not answer at `url` (or answers with an
    /// error).
    #[cfg(feature = "restate")]
    #[error("the Restate server at {url} did not answer: {reason}")]
    EngineUnavailable {
        /// The URL asked.
        url: String,
        /// What the call said.
        reason: String,
    },
    /// No worker of the Restate cluster answered a call in time (the
    /// client's error, one line).
    #[cfg(feature = "restate")]
    #[error("{0}")]
    NoWorker(String),
    /// The session does not exist on the Restate cluster.
    #[cfg(feature = "restate")]
    #[error("no session `{0}` on the Restate cluster (see `dsh agents --engine restate`)")]
    NotOnCluster(String),
    /// The session directory does not exist.
    #[error("no session directory at {}", .0.display())]
    NoSessionDir(PathBuf),
    /// The session directory holds no root session.
    #[error("no agent sessions in {}", .0.display())]
    NoSessions(PathBuf),
    /// A log the command needs is corrupt (the text names file and line).
    #[error("{0}")]
    Corrupt(String),
    /// `--root` names no root session of the place read (a session
    /// directory, or the Restate cluster at a URL).
    #[error("no root session `{root}` in {}", .place.display())]
    UnknownRoot {
        /// The root asked for.
        root: String,
        /// Where it was looked for.
        place: PathBuf,
    },
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
    /// Another process holds a log the command needs (a `dsh run` or
    /// `dsh send` working in the same tree), and it was not released in
    /// the time the command waited.
    #[error("`{name}` is held by another process{}{}; try again when it is done", .pid.map(|pid| format!(" (pid {pid})")).unwrap_or_default(), if *.waited > 0 { format!(" (waited {} s)", .waited) } else { String::new() })]
    Held {
        /// The agent, as the person named it.
        name: String,
        /// The holder's process id, when the system says.
        pid: Option<u32>,
        /// How long the command waited for it, in seconds.
        waited: u64,
    },
    /// The session store failed.
    #[error("session store: {0}")]
    Store(StoreError),
    /// An agent operation failed.
    #[error("agent: {0}")]
    Agent(AgentError),
    /// The subagent runtime refused or failed.
    #[error("{}", person(.0))]
    Subagent(SubagentError),
    /// A write to the session directory failed while the command ran (a
    /// full disk, a medium error, a permission): the command stopped its
    /// agents and reports no answer.
    #[error("cannot write the sessions: {0}; the agents were stopped")]
    WriteFailed(StoreError),
    /// The lead ended a turn with an error or refusal.
    #[error("the lead stopped ({reason}){}", .diagnostic.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    LeadStopped {
        /// The stop reason.
        reason: String,
        /// What went wrong, as the loop recorded it.
        diagnostic: Option<String>,
    },
    /// The tree's budget was spent, so the tree was stopped (the text is
    /// the run's end line, naming the budget).
    #[error("{0}")]
    BudgetSpent(String),
    /// The command was stopped by a signal (Ctrl-C, SIGTERM, SIGHUP).
    #[error("{}; the tree was stopped and its sessions kept", signal_text(*.0))]
    Interrupted(i32),
    /// A second signal came while the tree was stopping: the command quit
    /// at once; what had not stopped was killed with the process.
    #[error("{} again; quit at once without waiting for the tree to stop (its sessions are kept)", signal_text(*.0))]
    Forced(i32),
    /// The signal handlers could not be installed.
    #[error("cannot install the signal handlers: {0}")]
    Signals(std::io::Error),
    /// Writing the output failed.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::BadModel { .. }
            | Self::ModelConfig(_)
            | Self::Config { .. }
            | Self::BadFlag(_) => EXIT_USAGE,
            #[cfg(any(not(feature = "acp"), not(feature = "restate")))]
            Self::FeatureDisabled { .. } => EXIT_USAGE,
            Self::NoSessionDir(_)
            | Self::NoSessions(_)
            | Self::UnknownRoot { .. }
            | Self::UnknownAgent { .. } => EXIT_NOT_FOUND,
            Self::Corrupt(_) => EXIT_CORRUPT,
            Self::Store(err) if is_corrupt(err) => EXIT_CORRUPT,
            Self::Unreachable { .. } => EXIT_UNAVAILABLE,
            #[cfg(feature = "restate")]
            Self::EngineUnavailable { .. } | Self::NoWorker(_) => EXIT_UNAVAILABLE,
            #[cfg(feature = "restate")]
            Self::NotOnCluster(_) => EXIT_NOT_FOUND,
            Self::Interrupted(signal) | Self::Forced(signal) => {
                EXIT_SIGNAL_BASE.saturating_add(u8::try_from(*signal).unwrap_or(0))
            }
            Self::Refused(_)
            | Self::Held { .. }
            | Self::WriteFailed(_)
            | Self::Store(_)
            | Self::Agent(_)
            | Self::Subagent(_)
            | Self::LeadStopped { .. }
            | Self::BudgetSpent(_)
            | Self::Signals(_)
            | Self::Output(_) => 1,
        }
    }
}

/// What a signal did, for the one line.
fn signal_text(signal: i32) -> String {
    match signal {
        SIGINT => "interrupted".to_owned(),
        SIGTERM => "terminated (SIGTERM)".to_owned(),
        SIGHUP => "hung up (SIGHUP)".to_owned(),
        other => format!("stopped by signal {other}"),
    }
}

/// SIGHUP's number.
pub const SIGHUP: i32 = 1;
/// SIGINT's number.
pub const SIGINT: i32 = 2;
/// SIGTERM's number.
pub const SIGTERM: i32 = 15;

/// A runtime error worded for the person at the terminal: what happened,
/// never what an agent should do about it.
pub fn person(err: &SubagentError) -> String {
    match err {
        SubagentError::Delivery(DeliveryError::NotResumable { id, reason }) => {
            format!("agent {id} cannot be resumed: {reason}")
        }
        SubagentError::Delivery(DeliveryError::DeliveryUnavailable(id)) => {
            format!("agent {id} cannot take a message now: its tree is at its live-agent limit")
        }
        SubagentError::Admission(AdmissionError::Draining) => {
            "the tree is shutting down".to_owned()
        }
        SubagentError::Delivery(DeliveryError::AgentNameNotFound(name)) => {
            format!("no agent named `{name}` in the tree (see `dsh agents`)")
        }
        SubagentError::Admission(AdmissionError::DepthLimit { depth, max }) => {
            format!("a child would be at depth {depth}, deeper than the limit of {max}")
        }
        SubagentError::Admission(AdmissionError::NameTaken(name)) => {
            format!("the name `{name}` is already used by another child of that agent")
        }
        SubagentError::Admission(AdmissionError::Capacity(limit)) => {
            format!("the tree already has its limit of {limit} live agents")
        }
        SubagentError::Registry(RegistryError::DuplicateProvider(name)) => {
            format!("a provider named `{name}` is registered twice")
        }
        SubagentError::Delivery(DeliveryError::Unauthorized(text)) => text.clone(),
        SubagentError::Agent(err) => err.to_string(),
        // The remaining texts say what happened and nothing more.
        other => other.to_string(),
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
            AgentError::LogFailed(err) => Self::WriteFailed(err),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use dsh_core::SessionId;
    use dsh_subagent::InfraError;

    /// Every runtime error the cli can print, as the person reads it.
    #[test]
    fn runtime_errors_are_worded_for_a_person() {
        let id = SessionId::new("s-child").unwrap();
        let errors = vec![
            SubagentError::Registry(RegistryError::DuplicateProvider("spawn".into())),
            SubagentError::Registry(RegistryError::NoProvider("acp".into())),
            SubagentError::Admission(AdmissionError::UnsupportedCapability {
                provider: "acp".into(),
                capability: "fork",
            }),
            SubagentError::Admission(AdmissionError::InvalidRequest("unknown tool `x`".into())),
            SubagentError::Admission(AdmissionError::DepthLimit { depth: 4, max: 3 }),
            SubagentError::Admission(AdmissionError::InvalidName {
                name: "A B".into(),
                reason: "spaces are not allowed",
            }),
            SubagentError::Admission(AdmissionError::NameTaken("researcher".into())),
            SubagentError::Admission(AdmissionError::Capacity(8)),
            SubagentError::Cancelled,
            SubagentError::Delivery(DeliveryError::NotLive(id.clone())),
            SubagentError::Infra(InfraError::DuplicateName {
                parent: id.clone(),
                name: "researcher".into(),
            }),
            SubagentError::Delivery(DeliveryError::AgentNameNotFound("nobody".into())),
            SubagentError::Delivery(DeliveryError::NotMessageable(id.clone())),
            SubagentError::Delivery(DeliveryError::NotResumable {
                id: id.clone(),
                reason: "s/s-child.jsonl:3: corrupt session log: unreadable event".into(),
            }),
            SubagentError::Delivery(DeliveryError::DeliveryUnavailable(id.clone())),
            SubagentError::Admission(AdmissionError::Draining),
            SubagentError::Infra(InfraError::CorruptCatalog {
                parent: id.clone(),
                seq: 7,
                message: "missing field `child_id`".into(),
            }),
            SubagentError::Infra(InfraError::Provider {
                provider: "acp".into(),
                message: "the agent exited".into(),
            }),
            SubagentError::Infra(InfraError::Teardown("the agent did not stop".into())),
        ];
        let text: Vec<String> = errors
            .iter()
            .map(|err| format!("{}: {}", err.code(), CliError::from(err.clone())))
            .collect();
        for line in &text {
            for model_words in [
                "Do not retry",
                "yourself",
                "try again",
                "instead",
                "list_agents",
                "choose",
                "wait for",
            ] {
                assert!(!line.contains(model_words), "{line}");
            }
        }
        insta::assert_snapshot!(text.join("\n"));
    }
}
