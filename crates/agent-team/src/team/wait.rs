//! Waits: a member blocks until something on the team changes (a record
//! is applied, a member's live status moves, a member is published or
//! disposed), a bound passes, or its cancel fires. A wait never replays
//! an earlier change; the waiter re-reads the state afterwards.

use std::sync::Arc;
use std::time::Duration;

use dsh_core::{Agent, AgentError, AgentStatus, CancellationToken, RegistryEvent, SessionId};
use tokio::sync::watch;

use super::Team;
use super::roster::MemberStatus;
use crate::error::TeamError;

/// The shortest [`Team::wait_for_change`] bound.
pub const MIN_WAIT: Duration = Duration::from_secs(10);
/// The longest [`Team::wait_for_change`] bound.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// A roster, task, mailbox or live-status edge happened.
    Changed,
    /// The bound passed first.
    TimedOut,
    /// Nothing would change: no other member is running or provisioning.
    NoProgress,
}

impl Team {
    /// Wait for one roster, task, mailbox or live-status edge that happens
    /// after the call, for at most `timeout` (10 s to 1 h). It does not
    /// replay an earlier change: re-read the state afterwards.
    ///
    /// # Errors
    /// `TEAM_NOT_A_MEMBER`; `TEAM_INVALID_REQUEST` for a bound out of
    /// range; `CANCELLED` when `cancel` fires.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting has no effect.
    pub async fn wait_for_change(
        &self,
        caller: &Arc<dyn Agent>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<WaitOutcome, TeamError> {
        self.wait(caller, timeout, cancel, false).await
    }

    /// As [`Team::wait_for_change`], except that it returns
    /// [`WaitOutcome::NoProgress`] at once when no member other than the
    /// caller is running or provisioning (nothing would change by
    /// waiting). The check is made after the wait is registered, so an
    /// edge between the two is never missed.
    ///
    /// # Errors
    /// As [`Team::wait_for_change`].
    ///
    /// # Cancel safety
    /// Cancel safe: waiting has no effect.
    pub async fn wait_for_progress(
        &self,
        caller: &Arc<dyn Agent>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<WaitOutcome, TeamError> {
        self.wait(caller, timeout, cancel, true).await
    }

    async fn wait(
        &self,
        caller: &Arc<dyn Agent>,
        timeout: Duration,
        cancel: &CancellationToken,
        require_progress: bool,
    ) -> Result<WaitOutcome, TeamError> {
        let you = self.role_of(caller)?;
        if !(MIN_WAIT..=MAX_WAIT).contains(&timeout) {
            return Err(TeamError::InvalidRequest(format!(
                "a wait lasts from 10 s to 1 h, not {} ms",
                timeout.as_millis()
            )));
        }
        let mut version = self.inner.ledger.subscribe();
        version.borrow_and_update();
        let (_subscription, mut registry) = self.inner.runtime.registry().events().subscribe();
        let sessions: Vec<SessionId> = self.inner.ledger.read(|state| {
            state
                .members()
                .iter()
                .map(|member| member.record.id.clone())
                .collect()
        });
        let mut statuses: Vec<watch::Receiver<AgentStatus>> = sessions
            .iter()
            .filter_map(|id| self.inner.runtime.registry().get(id))
            .chain(std::iter::once(self.inner.lead.clone()))
            .map(|agent| {
                let mut status = agent.watch_status();
                status.borrow_and_update();
                status
            })
            .collect();
        if require_progress {
            let others_working = self.roster().iter().any(|row| {
                row.name != you.name()
                    && matches!(
                        row.status,
                        MemberStatus::Running | MemberStatus::Provisioning
                    )
            });
            if !others_working {
                return Ok(WaitOutcome::NoProgress);
            }
        }
        let status_edge = async {
            if statuses.is_empty() {
                return std::future::pending().await;
            }
            let changes = statuses.iter_mut().map(|status| Box::pin(status.changed()));
            let _ = futures::future::select_all(changes).await;
        };
        let membership_edge = async {
            while let Some(event) = registry.recv().await {
                let (RegistryEvent::Published(reference) | RegistryEvent::Disposed(reference)) =
                    event;
                // Events lost while this wait lagged may have been a
                // member's: count it as a change (the caller reads again).
                if sessions.contains(&reference.id) || registry.missed() > 0 {
                    return;
                }
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(TeamError::Agent(AgentError::Cancelled)),
            _ = version.changed() => Ok(WaitOutcome::Changed),
            () = status_edge => Ok(WaitOutcome::Changed),
            () = membership_edge => Ok(WaitOutcome::Changed),
            () = tokio::time::sleep(timeout) => Ok(WaitOutcome::TimedOut),
        }
    }
}
