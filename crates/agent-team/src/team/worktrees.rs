//! A teammate's own git worktree, as the team sees it: removing it (lead
//! only) once the teammate is no longer resident. The git plumbing is in
//! [`crate::worktree`].

use std::sync::Arc;

use dsh_core::Agent;

use super::Team;
use crate::error::TeamError;
use crate::worktree::{WorktreeRemoval, remove_planned};

impl Team {
    /// Remove a teammate's worktree (lead only), and its branch when it is
    /// merged (an unmerged branch is kept, and the result says so). The
    /// teammate must not be resident.
    ///
    /// # Errors
    /// `TEAM_UNAUTHORIZED`, `TEAM_UNKNOWN_MEMBER`, `TEAM_INVALID_REQUEST`
    /// (no worktree, or the member is resident), `TEAM_WORKTREE`.
    ///
    /// # Cancel safety
    /// Git runs on the blocking pool: a dropped future leaves it running to
    /// completion, so the worktree is removed or left whole.
    pub async fn remove_worktree(
        &self,
        caller: &Arc<dyn Agent>,
        name: &str,
    ) -> Result<WorktreeRemoval, TeamError> {
        self.require_lead(caller, "remove worktrees")?;
        let member = self.member_record(name)?;
        let id = member.id;
        let worktree = member.worktree.ok_or_else(|| {
            TeamError::InvalidRequest(format!("`{name}` has no worktree of its own"))
        })?;
        if self.inner.runtime.registry().get(&id).is_some() {
            return Err(TeamError::InvalidRequest(format!(
                "`{name}` is resident; interrupt it and let it go idle first"
            )));
        }
        remove_planned(worktree).await
    }
}
