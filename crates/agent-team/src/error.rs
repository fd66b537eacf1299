//! Why a team operation was refused or failed. Every error has a stable
//! `TEAM_*` code (or the code of the runtime or agent error it wraps), so a
//! tool can report it to a model and a test can assert on it.

use dsh_core::AgentError;
use dsh_subagent::SubagentError;

/// A refused or failed team operation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TeamError {
    /// The caller is not an exact live member of this team.
    #[error("`{0}` is not a live member of this team")]
    NotAMember(String),
    /// The caller's role does not allow the operation.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// A member name breaks the naming rules.
    #[error("invalid member name `{name}`: {reason}")]
    InvalidName {
        /// The name asked for.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The name was used before (names are never reused, failed members keep theirs).
    #[error("the name `{0}` is already taken in this team")]
    NameTaken(String),
    /// No member has this name.
    #[error("no member is named `{0}`")]
    UnknownMember(String),
    /// The member exists but cannot take part (provisioning or failed).
    #[error("member `{name}` is {phase}")]
    MemberUnavailable {
        /// The member.
        name: String,
        /// Its roster phase.
        phase: &'static str,
    },
    /// A configured limit was reached.
    #[error("{what} limit reached ({limit})")]
    Limit {
        /// Which limit.
        what: &'static str,
        /// Its value.
        limit: usize,
    },
    /// A message is larger than the configured limit.
    #[error("the message is {bytes} bytes framed; at most {limit} are allowed")]
    MessageTooLarge {
        /// Its framed size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// No task has this id.
    #[error("no task `{0}`")]
    UnknownTask(String),
    /// The expected revision is not the task's current one.
    #[error("task `{id}` is at revision {current}, not {expected}")]
    StaleRevision {
        /// The task.
        id: String,
        /// What the caller expected.
        expected: u64,
        /// What it is.
        current: u64,
    },
    /// A dependency edge is invalid (self, duplicate, unknown or deleted task, cycle).
    #[error("invalid dependency: {0}")]
    InvalidDependency(String),
    /// The task still has a non-deleted dependent.
    #[error("task `{id}` is a blocker of `{dependent}`")]
    HasDependents {
        /// The task.
        id: String,
        /// A task that names it in `blocked_by`.
        dependent: String,
    },
    /// The transition is not allowed from the current state.
    #[error("invalid transition: {0}")]
    InvalidTransition(String),
    /// A write scope is not a workspace-relative path prefix.
    #[error("invalid write scope `{scope}`: {reason}")]
    InvalidScope {
        /// The scope given.
        scope: String,
        /// Why.
        reason: &'static str,
    },
    /// A queue or acknowledgement record repeats or names the wrong message.
    #[error("invalid mailbox record: {0}")]
    InvalidMailbox(String),
    /// The request is malformed (a wait bound out of range, say).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The record belongs to another team.
    #[error("the record belongs to team `{0}`")]
    ForeignTeam(String),
    /// Per-member worktree isolation needs a git repository.
    #[error("worktree isolation is unavailable: {0}")]
    NoGit(String),
    /// Git refused to create or remove a member's worktree.
    #[error("worktree: {0}")]
    Worktree(String),
    /// The lead's log or another agent refused.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The subagent runtime refused or failed.
    #[error(transparent)]
    Subagent(#[from] SubagentError),
    /// The team's own work could not finish (it was shut down).
    #[error("team work did not finish: {0}")]
    Interrupted(String),
}

impl TeamError {
    /// A stable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotAMember(_) => "TEAM_NOT_A_MEMBER",
            Self::Unauthorized(_) => "TEAM_UNAUTHORIZED",
            Self::InvalidName { .. } => "TEAM_INVALID_NAME",
            Self::NameTaken(_) => "TEAM_NAME_TAKEN",
            Self::UnknownMember(_) => "TEAM_UNKNOWN_MEMBER",
            Self::MemberUnavailable { .. } => "TEAM_MEMBER_UNAVAILABLE",
            Self::Limit { what, .. } => match *what {
                "member" => "TEAM_MEMBER_LIMIT",
                "task" => "TEAM_TASK_LIMIT",
                _ => "TEAM_MAILBOX_LIMIT",
            },
            Self::MessageTooLarge { .. } => "TEAM_MESSAGE_TOO_LARGE",
            Self::UnknownTask(_) => "TEAM_TASK_NOT_FOUND",
            Self::StaleRevision { .. } => "TEAM_TASK_STALE_REVISION",
            Self::InvalidDependency(_) => "TEAM_TASK_INVALID_DEPENDENCY",
            Self::HasDependents { .. } => "TEAM_TASK_HAS_DEPENDENTS",
            Self::InvalidTransition(_) => "TEAM_INVALID_TRANSITION",
            Self::InvalidScope { .. } => "TEAM_INVALID_SCOPE",
            Self::InvalidMailbox(_) => "TEAM_INVALID_MAILBOX_RECORD",
            Self::InvalidRequest(_) => "TEAM_INVALID_REQUEST",
            Self::ForeignTeam(_) => "TEAM_FOREIGN_RECORD",
            Self::NoGit(_) => "TEAM_NO_GIT",
            Self::Worktree(_) => "TEAM_WORKTREE",
            Self::Agent(err) => err.code(),
            Self::Subagent(err) => err.code(),
            Self::Interrupted(_) => "TEAM_INTERRUPTED",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_have_their_own_codes() {
        let code = |what| TeamError::Limit { what, limit: 1 }.code();
        assert_eq!(code("member"), "TEAM_MEMBER_LIMIT");
        assert_eq!(code("task"), "TEAM_TASK_LIMIT");
        assert_eq!(code("pending message"), "TEAM_MAILBOX_LIMIT");
        let stale = TeamError::StaleRevision {
            id: "task-1".into(),
            expected: 1,
            current: 2,
        };
        assert_eq!(stale.code(), "TEAM_TASK_STALE_REVISION");
    }
}
