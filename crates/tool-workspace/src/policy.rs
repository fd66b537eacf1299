//! The permission policy, in the conventions Codex and Claude Code users
//! know: [`Level::ReadOnly`] (the default: read, list, grep),
//! [`Level::WorkspaceWrite`] (also writes inside the root and `shell` with
//! its cwd inside the root, under Landlock where the kernel has it) and
//! [`Level::Full`]. An action above the level is put to an [`Asker`] the
//! host implements (a terminal prompt, say); with no asker it is refused
//! with a sentence the model can act on. [`SerialAsker`] puts concurrent
//! requests (a lead's children) to its inner asker one at a time, in
//! arrival order.

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;
use dsh_core::{CancellationToken, SessionId};

use crate::error::WorkspaceError;

/// How much the workspace tools may do without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Level {
    /// Read, list and grep; anything else asks.
    #[default]
    ReadOnly,
    /// Also write files inside the root and run `shell` with its cwd inside
    /// the root (its writes confined by Landlock where available).
    WorkspaceWrite,
    /// Everything, `shell` unconfined.
    Full,
}

impl Level {
    /// The name users type (`read-only`, `workspace-write`, `full`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
            Self::Full => "full",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A level name that is none of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown permission level `{0}`: use read-only, workspace-write or full")]
pub struct UnknownLevel(pub String);

impl FromStr for Level {
    type Err = UnknownLevel;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read-only" => Ok(Self::ReadOnly),
            "workspace-write" => Ok(Self::WorkspaceWrite),
            "full" => Ok(Self::Full),
            other => Err(UnknownLevel(other.to_owned())),
        }
    }
}

/// What kind of action a tool call is, for the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Reading, listing or searching files inside the root.
    Read,
    /// Creating or changing a file inside the root.
    Write,
    /// Running a command.
    Shell,
}

impl Action {
    /// The lowest level at which the action runs without asking.
    pub fn needs(self) -> Level {
        match self {
            Self::Read => Level::ReadOnly,
            Self::Write | Self::Shell => Level::WorkspaceWrite,
        }
    }
}

/// An action put to the user: who, which tool, and exactly what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The agent whose model made the call.
    pub agent: SessionId,
    /// The tool's name.
    pub tool: String,
    /// The exact path (for writes) or command (for `shell`).
    pub subject: String,
    /// The level in force.
    pub level: Level,
    /// The level the action needs.
    pub needed: Level,
}

/// The user's answer to a [`Request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Do it, this once.
    Allow,
    /// Do not.
    Deny,
}

/// Asks the user about an action above the level. The host implements it
/// (the CLI with a terminal prompt); wrap it in a [`SerialAsker`] so that
/// concurrent requests are asked one at a time.
#[async_trait]
pub trait Asker: Send + Sync + 'static {
    /// Ask about `request` and return the answer.
    ///
    /// # Cancel safety
    /// The tool drops this future when the call is cancelled: an
    /// implementation must leave no prompt pending when dropped.
    async fn ask(&self, request: &Request) -> Answer;
}

/// Serialises an [`Asker`]: one request is asked at a time, the others wait
/// their turn in arrival order (a fair lock).
pub struct SerialAsker<A> {
    inner: A,
    turn: tokio::sync::Mutex<()>,
}

impl<A: Asker> SerialAsker<A> {
    /// Wrap `inner`.
    pub fn new(inner: A) -> Self {
        Self {
            inner,
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// The wrapped asker.
    pub fn inner(&self) -> &A {
        &self.inner
    }
}

impl<A> fmt::Debug for SerialAsker<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SerialAsker").finish_non_exhaustive()
    }
}

#[async_trait]
impl<A: Asker> Asker for SerialAsker<A> {
    /// # Cancel safety
    /// Dropped while waiting its turn, the request leaves the queue and is
    /// never asked; dropped while asking, the inner future is dropped (see
    /// [`Asker::ask`]) and the next request's turn begins.
    async fn ask(&self, request: &Request) -> Answer {
        let _turn = self.turn.lock().await;
        self.inner.ask(request).await
    }
}

/// The level in force and who to ask above it.
#[derive(Clone, Default)]
pub struct Policy {
    /// The level in force.
    pub level: Level,
    /// Who to ask above it; `None` refuses instead.
    pub asker: Option<std::sync::Arc<dyn Asker>>,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("level", &self.level)
            .field("asker", &self.asker.is_some())
            .finish()
    }
}

/// How an allowed action was allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The level allows it.
    Level,
    /// The user approved it.
    Approved,
}

impl Policy {
    /// A policy at `level` with `asker` (or none).
    pub fn new(level: Level, asker: Option<std::sync::Arc<dyn Asker>>) -> Self {
        Self { level, asker }
    }

    /// Decide whether `agent` may do `action` with `tool` on `subject`,
    /// asking when it is above the level.
    ///
    /// # Errors
    /// [`WorkspaceError::NeedsApproval`] above the level with no asker,
    /// [`WorkspaceError::Declined`] when the user says no,
    /// [`WorkspaceError::Cancelled`] when `cancel` fires while asking.
    ///
    /// # Cancel safety
    /// Dropping it while asking drops the asker's future (see
    /// [`Asker::ask`]); nothing has been done.
    pub async fn check(
        &self,
        agent: &SessionId,
        tool: &str,
        action: Action,
        subject: &str,
        cancel: &CancellationToken,
    ) -> Result<Grant, WorkspaceError> {
        let needed = action.needs();
        if self.level >= needed {
            return Ok(Grant::Level);
        }
        let Some(asker) = &self.asker else {
            return Err(WorkspaceError::NeedsApproval {
                tool: tool.to_owned(),
                subject: subject.to_owned(),
                level: self.level,
                needed,
            });
        };
        let request = Request {
            agent: agent.clone(),
            tool: tool.to_owned(),
            subject: subject.to_owned(),
            level: self.level,
            needed,
        };
        let answer = tokio::select! {
            answer = asker.ask(&request) => answer,
            () = cancel.cancelled() => return Err(WorkspaceError::Cancelled),
        };
        match answer {
            Answer::Allow => Ok(Grant::Approved),
            Answer::Deny => Err(WorkspaceError::Declined {
                tool: tool.to_owned(),
                subject: subject.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn levels_read_and_print_as_users_type_them() {
        for level in [Level::ReadOnly, Level::WorkspaceWrite, Level::Full] {
            assert_eq!(level.as_str().parse::<Level>().unwrap(), level);
            assert_eq!(level.to_string(), level.as_str());
        }
        assert_eq!(Level::default(), Level::ReadOnly);
        assert_eq!(
            "danger-full-access"
                .parse::<Level>()
                .unwrap_err()
                .to_string(),
            "unknown permission level `danger-full-access`: use read-only, workspace-write or full"
        );
        assert!(Level::ReadOnly < Level::WorkspaceWrite && Level::WorkspaceWrite < Level::Full);
    }

    #[test]
    fn every_action_needs_its_level() {
        assert_eq!(Action::Read.needs(), Level::ReadOnly);
        assert_eq!(Action::Write.needs(), Level::WorkspaceWrite);
        assert_eq!(Action::Shell.needs(), Level::WorkspaceWrite);
    }
}
