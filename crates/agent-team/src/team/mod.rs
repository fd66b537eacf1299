//! The live team of one lead, as a façade over one module per concept:
//! the ledger (`ledger.rs`: folded state, commit lock, change counter), the
//! roster and provisioning (`roster.rs`), the mailbox (`mailbox.rs`), the
//! task board (`board.rs`), waits (`wait.rs`), interrupt and stop
//! (`interrupt.rs`), worktrees (`worktrees.rs`) and the runtime listener
//! (`listener.rs`). Each keeps its state private.
//!
//! Every operation checks the caller's exact live identity and role,
//! builds a record from the folded state, checks it against that state,
//! appends it to the lead's log through [`Agent::record`] and only then
//! applies it, all under one commit lock, so the live state is always the
//! fold of what was written.
//!
//! Ownership: every public method that writes runs its work as a task on
//! the team's tracker and awaits it, so a caller that goes away never cuts
//! a write sequence in half (a provisioning member always reaches a
//! terminal phase, a queued message is always offered for delivery); the
//! detached work finishes on its own and [`Team::shutdown`] waits for it.

mod board;
mod interrupt;
mod ledger;
mod listener;
mod mailbox;
mod roster;
mod wait;
mod worktrees;

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dsh_core::{Agent, SessionId, SessionStore};
use dsh_subagent::SubagentRuntime;
use tokio_util::task::TaskTracker;

pub use board::{CreateTask, TaskAction, TaskView, UpdateTask};
pub use mailbox::{SendMessage, SendOutcome, TEAM_MESSAGE_SOURCE, heading, log_holds};
pub use roster::{MemberStatus, MemberView, SpawnTeammate};
pub use wait::{MAX_WAIT, MIN_WAIT, WaitOutcome};

use crate::config::TeamConfig;
use crate::error::TeamError;
use crate::fold::{Role, TeamState, fold_team};
use crate::record::{MemberPhase, TeamEvent, TeamId};
use ledger::Ledger;
use listener::Listener;
use mailbox::Mailbox;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What recovery did when a team was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Provisioning members proven created, now active.
    pub activated: Vec<String>,
    /// Provisioning members not proven, now failed.
    pub failed: Vec<String>,
    /// Messages acknowledged (delivered, or found already held by their target).
    pub delivered: usize,
    /// Targets whose mailbox could not be flushed, and why.
    pub errors: Vec<(String, String)>,
}

struct Inner {
    lead: Arc<dyn Agent>,
    runtime: SubagentRuntime,
    store: Arc<dyn SessionStore>,
    config: TeamConfig,
    ledger: Arc<Ledger>,
    mailbox: Mailbox,
    tasks: TaskTracker,
    listener: Listener,
}

/// The team of one live lead. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Team {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("team", &self.id())
            .finish_non_exhaustive()
    }
}

impl Team {
    /// Open the team of the live root `lead`: fold its log, then recover
    /// (decide every `provisioning` member by its own log, and deliver the
    /// queued-minus-delivered mailbox in queue order, checking each
    /// target's log first). A team costs nothing until its first record.
    ///
    /// # Errors
    /// The lead is not a live root of `runtime`'s registry, or a recovery
    /// record could not be written. Mailbox delivery failures do not fail
    /// the open; they are reported in the [`Recovery`].
    ///
    /// # Cancel safety
    /// Recovery runs on the team's tracker: dropping the future leaves it
    /// running to completion, and every record it writes is whole.
    pub async fn open(
        lead: Arc<dyn Agent>,
        runtime: SubagentRuntime,
        store: Arc<dyn SessionStore>,
        config: TeamConfig,
    ) -> Result<(Self, Recovery), TeamError> {
        if !runtime.registry().is_live(&lead.reference()) {
            return Err(TeamError::NotAMember(lead.id().to_string()));
        }
        if lead.header().parent_session.is_some() {
            return Err(TeamError::Unauthorized(format!(
                "`{}` is not a root; only a root leads a team",
                lead.id()
            )));
        }
        let team = TeamId(lead.id().clone());
        let state = fold_team(&team, &lead.events());
        let team = Self {
            inner: Arc::new(Inner {
                lead,
                runtime,
                store,
                config,
                ledger: Arc::new(Ledger::new(state)),
                mailbox: Mailbox::default(),
                tasks: TaskTracker::new(),
                listener: Listener::default(),
            }),
        };
        team.listen();
        let recovering = team.clone();
        let recovery = team
            .detach(async move { recovering.recover().await })
            .await?;
        Ok((team, recovery))
    }

    /// The team's id (the lead's session id).
    pub fn id(&self) -> TeamId {
        TeamId(self.inner.lead.id().clone())
    }

    /// The lead.
    pub fn lead(&self) -> &Arc<dyn Agent> {
        &self.inner.lead
    }

    /// The configuration.
    pub fn config(&self) -> &TeamConfig {
        &self.inner.config
    }

    /// A copy of the folded state.
    pub fn state(&self) -> TeamState {
        self.inner.ledger.read(TeamState::clone)
    }

    /// Wait until every piece of detached team work has finished.
    ///
    /// # Cancel safety
    /// Dropping the future only stops the waiting.
    pub async fn shutdown(&self) {
        // Detaching the listener closes its doorbell, which ends its task.
        self.inner.listener.detach();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }

    /// Whether detached team work (a start, a delivery, a release) is in
    /// flight, beyond the runtime listener.
    pub fn is_busy(&self) -> bool {
        let listener = usize::from(self.inner.listener.is_attached());
        self.inner.tasks.len() > listener
    }

    /// Run `work` on the team's tracker and await it.
    async fn detach<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, TeamError>> + Send + 'static,
    ) -> Result<T, TeamError> {
        if self.inner.tasks.is_closed() {
            return Err(TeamError::Interrupted("the team is shut down".into()));
        }
        self.inner
            .tasks
            .spawn(work)
            .await
            .map_err(|err| TeamError::Interrupted(err.to_string()))?
    }

    /// Check, append and apply one record built from the current state.
    async fn commit(
        &self,
        build: impl FnOnce(&TeamState) -> Result<TeamEvent, TeamError>,
    ) -> Result<TeamEvent, TeamError> {
        self.inner
            .ledger
            .commit(self.inner.lead.as_ref(), build)
            .await
    }

    /// The exact live caller's role.
    ///
    /// # Errors
    /// [`TeamError::NotAMember`] for a stale reference, an agent outside
    /// the roster, or a member that is not active.
    pub fn role_of(&self, caller: &Arc<dyn Agent>) -> Result<Role, TeamError> {
        let not_a_member = || TeamError::NotAMember(caller.id().to_string());
        if !self.inner.runtime.registry().is_live(&caller.reference()) {
            return Err(not_a_member());
        }
        if caller.reference() == self.inner.lead.reference() {
            return Ok(Role::Lead);
        }
        let member = self.inner.ledger.read(|state| {
            state
                .member_by_session(caller.id())
                .filter(|member| member.record.phase == MemberPhase::Active)
                .map(|member| member.record.name.clone())
        });
        match member {
            Some(name) if caller.header().parent_session.as_ref() == Some(self.inner.lead.id()) => {
                Ok(Role::Member(name))
            }
            _ => Err(not_a_member()),
        }
    }

    /// The role a session holds in this team, without a liveness check
    /// (for deciding which tools an agent is offered): the lead's session,
    /// or a teammate's that is active or still provisioning. A teammate
    /// runs its first step as soon as the runtime published it, before
    /// its `active` record is written, so a provisioning member is offered
    /// the tools too; [`Team::provisioned`] waits for its terminal phase
    /// before it acts.
    pub fn role_of_session(&self, id: &SessionId) -> Option<Role> {
        if id == self.inner.lead.id() {
            return Some(Role::Lead);
        }
        self.inner.ledger.read(|state| {
            state
                .member_by_session(id)
                .filter(|member| member.record.phase != MemberPhase::Failed)
                .map(|member| Role::Member(member.record.name.clone()))
        })
    }

    /// Wait until the member whose session is `id` is no longer
    /// `provisioning` (at once for the lead, an active or failed member, or
    /// a session outside the roster). A teammate's first step can run
    /// before its start has written `active`; its team calls wait here, so
    /// its records follow that one in the lead's log.
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches the state.
    pub async fn provisioned(&self, id: &SessionId) {
        let mut version = self.inner.ledger.subscribe();
        loop {
            let provisioning = self.inner.ledger.read(|state| {
                state
                    .member_by_session(id)
                    .is_some_and(|member| member.record.phase == MemberPhase::Provisioning)
            });
            if !provisioning || version.changed().await.is_err() {
                return;
            }
        }
    }

    fn require_lead(&self, caller: &Arc<dyn Agent>, what: &str) -> Result<(), TeamError> {
        match self.role_of(caller)? {
            Role::Lead => Ok(()),
            Role::Member(name) => Err(TeamError::Unauthorized(format!(
                "only the lead may {what}; `{name}` is a teammate"
            ))),
        }
    }

    /// Decide provisioning members and flush every mailbox.
    async fn recover(&self) -> Result<Recovery, TeamError> {
        let mut recovery = Recovery::default();
        self.decide_provisioning(&mut recovery).await?;
        self.flush_all(&mut recovery).await;
        Ok(recovery)
    }
}
