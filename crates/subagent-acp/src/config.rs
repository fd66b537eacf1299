//! What an operator configures: the agent program, its environment and
//! directory, how permission prompts are answered, and the time limits of
//! startup and shutdown. Validated once, when the provider is built, so a
//! bad configuration never reaches a start.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use dsh_process::DEFAULT_INHERITED_ENV;

/// The default [`AcpConfig::answered_grace`]: how long an agent that has
/// already answered may take to exit after stdin EOF before SIGTERM.
pub const DEFAULT_ANSWERED_GRACE: Duration = Duration::from_millis(100);

/// How the provider answers an agent's `session/request_permission`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionPolicy {
    /// Decline: pick a `reject_once` (else `reject_always`) option, or
    /// answer `cancelled` when the agent offers none.
    #[default]
    Reject,
    /// Approve once: pick an `allow_once` (else `allow_always`) option;
    /// when the agent offers none, decline as [`PermissionPolicy::Reject`]
    /// does.
    #[serde(alias = "allow_once")]
    Allow,
    /// Approve for good: pick an `allow_always` (else `allow_once`) option;
    /// when the agent offers none, decline.
    AllowAlways,
    /// Ask the host's [`PermissionAsker`] (set with [`AcpConfig::ask_with`])
    /// for each request, naming the agent and the requested action.
    Ask,
}

impl PermissionPolicy {
    /// The policy's name as configured (`reject`, `allow`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Reject => "reject",
            Self::Allow => "allow",
            Self::AllowAlways => "allow_always",
            Self::Ask => "ask",
        }
    }
}

/// What a [`PermissionAsker`] is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionQuestion {
    /// The ACP provider's registry name (the agent asking).
    pub agent: String,
    /// The asking child's session id in the tree (its run's id), so a
    /// host can name it by its path rather than by its provider.
    pub session: dsh_core::SessionId,
    /// The requested action: the tool call's title as the agent wrote it
    /// (one bounded line), else its id.
    pub action: String,
    /// The tool call's kind (`execute`, `edit`, ...) when the agent gave one.
    pub kind: Option<String>,
}

/// A host's answer to a [`PermissionQuestion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionAnswer {
    /// Allow this once.
    AllowOnce,
    /// Allow this and what the agent groups with it from now on.
    AllowAlways,
    /// Refuse.
    Reject,
}

/// The host's side of [`PermissionPolicy::Ask`]: a terminal prompt, a UI.
#[async_trait::async_trait]
pub trait PermissionAsker: Send + Sync + std::fmt::Debug {
    /// Answer one question.
    ///
    /// # Cancel safety
    /// The future is dropped when the run is disposed while it waits; the
    /// agent is then answered `cancelled`. It must leave nothing behind
    /// that a drop would corrupt.
    async fn ask(&self, question: PermissionQuestion) -> PermissionAnswer;
}

/// A shared [`PermissionAsker`]; equal only to itself (the same `Arc`).
#[derive(Debug, Clone)]
pub struct Asker(pub std::sync::Arc<dyn PermissionAsker>);

impl PartialEq for Asker {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Asker {}

/// The configuration of one ACP provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpConfig {
    /// The registry name (default `acp`).
    pub name: String,
    /// The program to run for each child (a path, or a name looked up on
    /// the `PATH` passed to the child).
    pub command: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set for the child, after the inherited ones (so a value
    /// here wins).
    pub env: BTreeMap<String, String>,
    /// Names of variables copied from this process when set; everything
    /// else is scrubbed. Defaults to [`DEFAULT_INHERITED_ENV`].
    pub inherit_env: Vec<String>,
    /// A fixed working directory for every child (absolute, existing);
    /// `None` uses the child's resolved directory. It is both the process's
    /// cwd and the ACP session's.
    pub cwd: Option<PathBuf>,
    /// How permission prompts are answered.
    pub permission: PermissionPolicy,
    /// Who answers under [`PermissionPolicy::Ask`] (required by it).
    pub asker: Option<Asker>,
    /// How long `initialize` and `session/new` together may take.
    pub startup_timeout: Duration,
    /// After stdin is closed mid-turn (a dispose before the agent
    /// answered), how long the agent may take to exit by itself.
    pub eof_grace: Duration,
    /// After stdin is closed once the run has settled (the agent answered
    /// its turn, or failed), how long the agent may take to exit by itself
    /// before SIGTERM. Short, because some agents ignore stdin EOF and
    /// nothing they could still do matters to the result.
    pub answered_grace: Duration,
    /// After SIGTERM to the process group, how long before SIGKILL.
    pub term_grace: Duration,
}

impl AcpConfig {
    /// A configuration running `command` with the defaults: name `acp`, no
    /// arguments, no extra variables, the child's own directory, `reject`,
    /// a 30 s startup timeout, 3 s after EOF mid-turn, 100 ms after EOF
    /// once the run has settled, and 2 s after SIGTERM.
    pub fn new(command: impl Into<PathBuf>) -> Self {
        Self {
            name: "acp".to_owned(),
            command: command.into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            inherit_env: DEFAULT_INHERITED_ENV
                .iter()
                .map(|name| (*name).to_owned())
                .collect(),
            cwd: None,
            permission: PermissionPolicy::Reject,
            asker: None,
            startup_timeout: Duration::from_secs(30),
            eof_grace: Duration::from_secs(3),
            answered_grace: DEFAULT_ANSWERED_GRACE,
            term_grace: Duration::from_secs(2),
        }
    }

    /// Set the arguments.
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Set the registry name.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Add one variable for the child.
    #[must_use]
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Set the permission policy.
    #[must_use]
    pub fn permission(mut self, permission: PermissionPolicy) -> Self {
        self.permission = permission;
        self
    }

    /// Ask `asker` for every permission request ([`PermissionPolicy::Ask`]).
    #[must_use]
    pub fn ask_with(mut self, asker: std::sync::Arc<dyn PermissionAsker>) -> Self {
        self.permission = PermissionPolicy::Ask;
        self.asker = Some(Asker(asker));
        self
    }

    /// Pass variable `name` through from this process's environment (when
    /// it is set there), beside the inherited allow-list.
    #[must_use]
    pub fn pass_env(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        if !self.inherit_env.contains(&name) {
            self.inherit_env.push(name);
        }
        self
    }

    /// Set the startup timeout.
    #[must_use]
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Set both shutdown grace periods (after EOF, after SIGTERM).
    #[must_use]
    pub fn graces(mut self, eof: Duration, term: Duration) -> Self {
        self.eof_grace = eof;
        self.term_grace = term;
        self
    }

    /// Set the grace after EOF once the run has settled.
    #[must_use]
    pub fn answered_grace(mut self, grace: Duration) -> Self {
        self.answered_grace = grace;
        self
    }

    /// Check the configuration.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first problem.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.trim().is_empty() {
            return Err(ConfigError::EmptyName);
        }
        if self.command.as_os_str().is_empty() {
            return Err(ConfigError::EmptyCommand);
        }
        for key in self.env.keys().chain(&self.inherit_env) {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(ConfigError::BadVariable(key.clone()));
            }
        }
        if let Some(cwd) = &self.cwd {
            if !cwd.is_absolute() {
                return Err(ConfigError::Cwd(cwd.clone(), "it is not absolute"));
            }
            if !cwd.is_dir() {
                return Err(ConfigError::Cwd(
                    cwd.clone(),
                    "it is not an existing directory",
                ));
            }
        }
        if self.permission == PermissionPolicy::Ask && self.asker.is_none() {
            return Err(ConfigError::NoAsker);
        }
        for (what, value) in [
            ("startup_timeout", self.startup_timeout),
            ("eof_grace", self.eof_grace),
            ("answered_grace", self.answered_grace),
            ("term_grace", self.term_grace),
        ] {
            if value.is_zero() {
                return Err(ConfigError::ZeroDuration(what));
            }
        }
        Ok(())
    }
}

/// A configuration the provider refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The provider name is empty.
    #[error("the ACP provider name is empty")]
    EmptyName,
    /// The command is empty.
    #[error("the ACP agent command is empty")]
    EmptyCommand,
    /// A variable name cannot be set.
    #[error("`{0}` is not a valid environment variable name")]
    BadVariable(String),
    /// The fixed working directory is unusable.
    #[error("the ACP working directory `{}` is unusable: {}", .0.display(), .1)]
    Cwd(PathBuf, &'static str),
    /// The `ask` policy has no asker.
    #[error("the `ask` permission policy needs an asker (AcpConfig::ask_with)")]
    NoAsker,
    /// A time limit is zero.
    #[error("`{0}` must be longer than zero")]
    ZeroDuration(&'static str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ask_policy_without_an_asker_is_refused() {
        let config = AcpConfig::new("agent").permission(PermissionPolicy::Ask);
        assert_eq!(config.validate(), Err(ConfigError::NoAsker));
    }

    #[test]
    fn policies_read_by_their_configured_names() {
        for (text, policy) in [
            ("\"reject\"", PermissionPolicy::Reject),
            ("\"allow\"", PermissionPolicy::Allow),
            ("\"allow_once\"", PermissionPolicy::Allow),
            ("\"allow_always\"", PermissionPolicy::AllowAlways),
            ("\"ask\"", PermissionPolicy::Ask),
        ] {
            assert_eq!(
                serde_json::from_str::<PermissionPolicy>(text).ok(),
                Some(policy)
            );
        }
    }

    #[test]
    fn a_passed_through_name_is_added_once_and_validated() {
        let config = AcpConfig::new("agent")
            .pass_env("CODEX_HOME")
            .pass_env("CODEX_HOME");
        assert_eq!(
            config
                .inherit_env
                .iter()
                .filter(|n| *n == "CODEX_HOME")
                .count(),
            1
        );
        let bad = AcpConfig::new("agent").pass_env("A=B");
        assert_eq!(bad.validate(), Err(ConfigError::BadVariable("A=B".into())));
    }
}
