//! Interrupting and stopping teammates (lead only): an interrupt cuts a
//! teammate's current turn and keeps its input and tasks; a stop is an
//! interrupt that also gives back every task the teammate owns.

use std::sync::Arc;

use dsh_core::Agent;
use dsh_subagent::InterruptAuthority;

use super::Team;
use super::roster::MemberStatus;
use crate::error::TeamError;

impl Team {
    /// Interrupt a teammate's current turn (lead only). Its pending input
    /// is kept, its tasks stay its own. Returns the status sampled before.
    ///
    /// # Errors
    /// `TEAM_UNAUTHORIZED` for a teammate caller, `TEAM_UNKNOWN_MEMBER`.
    ///
    /// # Cancel safety
    /// As the runtime's interrupt: the awaits are authority reads before
    /// any effect.
    pub async fn interrupt(
        &self,
        caller: &Arc<dyn Agent>,
        name: &str,
    ) -> Result<MemberStatus, TeamError> {
        self.require_lead(caller, "interrupt teammates")?;
        let member = self.member_record(name)?;
        let id = member.id;
        let previous = self.status_of(member.phase, &id);
        self.inner
            .runtime
            .interrupt(&id, &InterruptAuthority::Ancestor(caller.clone()))
            .await?;
        Ok(previous)
    }

    /// Stop a teammate (lead only): interrupt its turn and give back every
    /// task it owns, each with a durable record. Returns the released ids.
    ///
    /// # Errors
    /// As [`Team::interrupt`], or a release record could not be written.
    ///
    /// # Cancel safety
    /// The interrupt happens before the releases; the releases run on the
    /// team's tracker, so a dropped future still writes them all.
    pub async fn stop(
        &self,
        caller: &Arc<dyn Agent>,
        name: &str,
    ) -> Result<Vec<String>, TeamError> {
        self.interrupt(caller, name).await?;
        let team = self.clone();
        let name = name.to_owned();
        self.detach(async move {
            let note = format!("released: the owner `{name}` was stopped");
            team.release_tasks(&name, &note).await
        })
        .await
    }
}
