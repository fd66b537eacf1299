//! The roster: who is on the team and in what state. A teammate is
//! provisioned in three records (`provisioning`, then the runtime start
//! with the reserved id, then `active` or `failed`), and a member's live
//! status is derived from the registry, never written. Recovery decides a
//! `provisioning` member left by a crash from its own log alone.

use std::sync::Arc;

use dsh_core::{Agent, AgentStatus, CancellationToken, ContentBlock, EventPayload, SessionId};
use dsh_subagent::{ActivationSpec, ChildMode, Delivery, StartRequest, fold_catalog};

use super::board::owned_tasks;
use super::{Recovery, Team};
use crate::error::TeamError;
use crate::fold::TeamState;
use crate::record::{LEAD_NAME, MemberContext, MemberPhase, MemberRecord, TeamEvent};
use crate::rules::validate_member_name;
use crate::worktree::{WorktreeRecord, create_planned, plan_for, remove_planned};

/// A member's live status, derived and never written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberStatus {
    /// Not created yet (or its creation was cut off and not yet recovered).
    Provisioning,
    /// Could not be created.
    Failed,
    /// Live and running a turn.
    Running,
    /// Live and idle.
    Idle,
    /// Active on the roster but not resident: a waking message resumes it.
    Inactive,
}

impl MemberStatus {
    /// The status as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Provisioning => "provisioning",
            Self::Failed => "failed",
            Self::Running => "running",
            Self::Idle => "idle",
            Self::Inactive => "inactive",
        }
    }
}

/// One roster row with its derived status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    /// `lead` or the teammate's name.
    pub name: String,
    /// Its session.
    pub id: SessionId,
    /// What it is for (empty for the lead).
    pub description: String,
    /// The provider that created it (empty for the lead).
    pub provider: String,
    /// Durable phase (the lead is always active).
    pub phase: MemberPhase,
    /// Live status.
    pub status: MemberStatus,
    /// Why it failed.
    pub error: Option<String>,
    /// Messages queued for it and not yet delivered.
    pub pending_messages: usize,
    /// In-progress tasks it owns.
    pub owned_tasks: Vec<String>,
    /// Its own git worktree, when it is isolated.
    pub worktree: Option<WorktreeRecord>,
}

/// A teammate to create.
#[derive(Debug, Clone)]
pub struct SpawnTeammate {
    /// Its immutable name.
    pub name: String,
    /// What it is for.
    pub description: String,
    /// Its first task.
    pub prompt: Vec<ContentBlock>,
    /// Fresh or forked from the lead.
    pub context: MemberContext,
    /// Give it its own git worktree (a branch of the lead's repository) as
    /// its working directory.
    pub worktree: bool,
}

impl Team {
    /// A copy of teammate `name`'s latest record.
    pub(super) fn member_record(&self, name: &str) -> Result<MemberRecord, TeamError> {
        self.inner
            .ledger
            .read(|state| state.member(name).map(|member| member.record.clone()))
            .ok_or_else(|| TeamError::UnknownMember(name.to_owned()))
    }

    pub(super) fn status_of(&self, phase: MemberPhase, id: &SessionId) -> MemberStatus {
        match phase {
            MemberPhase::Provisioning => MemberStatus::Provisioning,
            MemberPhase::Failed => MemberStatus::Failed,
            MemberPhase::Active => match self.inner.runtime.registry().get(id) {
                Some(agent) => match agent.status() {
                    AgentStatus::Running => MemberStatus::Running,
                    AgentStatus::Idle => MemberStatus::Idle,
                },
                None => MemberStatus::Inactive,
            },
        }
    }

    fn view_of(&self, state: &TeamState, name: &str) -> Option<MemberView> {
        let owned = |name: &str| owned_tasks(state, name);
        if name == LEAD_NAME {
            let lead = &self.inner.lead;
            return Some(MemberView {
                name: LEAD_NAME.into(),
                id: lead.id().clone(),
                description: String::new(),
                provider: String::new(),
                phase: MemberPhase::Active,
                status: match lead.status() {
                    AgentStatus::Running => MemberStatus::Running,
                    AgentStatus::Idle => MemberStatus::Idle,
                },
                error: None,
                pending_messages: state.pending_for(LEAD_NAME).count(),
                owned_tasks: owned(LEAD_NAME),
                worktree: None,
            });
        }
        let member = state.member(name)?;
        let record = &member.record;
        Some(MemberView {
            name: record.name.clone(),
            id: record.id.clone(),
            description: record.description.clone(),
            provider: record.provider.clone(),
            phase: record.phase,
            status: self.status_of(record.phase, &record.id),
            error: record.error.clone(),
            pending_messages: state.pending_for(&record.name).count(),
            owned_tasks: owned(&record.name),
            worktree: record.worktree.clone(),
        })
    }

    /// The roster as `caller` sees it: the lead, then teammates in creation
    /// order, with derived live status.
    ///
    /// # Errors
    /// [`TeamError::NotAMember`].
    pub fn list_members(&self, caller: &Arc<dyn Agent>) -> Result<Vec<MemberView>, TeamError> {
        self.role_of(caller)?;
        Ok(self.roster())
    }

    /// The roster, for hosts (no caller check).
    pub fn roster(&self) -> Vec<MemberView> {
        self.inner.ledger.read(|state| {
            std::iter::once(LEAD_NAME.to_owned())
                .chain(state.members().iter().map(|m| m.record.name.clone()))
                .filter_map(|name| self.view_of(state, &name))
                .collect()
        })
    }

    /// Create a teammate: a named continuable direct child of the lead. A
    /// `provisioning` record is written first; the child is then started
    /// through the runtime with the reserved id, and the member becomes
    /// `active` once the child holds its initial message, or `failed`.
    ///
    /// # Errors
    /// `TEAM_UNAUTHORIZED` for a teammate, `TEAM_INVALID_NAME`,
    /// `TEAM_NAME_TAKEN`, `TEAM_MEMBER_LIMIT`, or the runtime's refusal
    /// (the member is then recorded `failed`).
    ///
    /// # Cancel safety
    /// The checks run before the first await; the rest runs on the team's
    /// tracker, so a dropped future leaves either nothing (refused) or a
    /// member that reaches `active` or `failed` all the same.
    pub async fn spawn_teammate(
        &self,
        caller: &Arc<dyn Agent>,
        request: SpawnTeammate,
    ) -> Result<MemberView, TeamError> {
        self.require_lead(caller, "spawn teammates")?;
        validate_member_name(&request.name)?;
        self.inner
            .ledger
            .read(|state| self.check_new_member(state, &request.name))?;
        let team = self.clone();
        self.detach(async move { team.provision(request).await })
            .await
    }

    fn check_new_member(&self, state: &TeamState, name: &str) -> Result<(), TeamError> {
        if state.member(name).is_some() {
            return Err(TeamError::NameTaken(name.to_owned()));
        }
        let limit = self.inner.config.limits.max_members;
        if state.members().len() >= limit {
            return Err(TeamError::Limit {
                what: "member",
                limit,
            });
        }
        Ok(())
    }

    async fn provision(&self, request: SpawnTeammate) -> Result<MemberView, TeamError> {
        let id = SessionId::generate();
        let provider = self.inner.config.provider_for(request.context).to_owned();
        // Refused before anything is written when there is no repository.
        let worktree = if request.worktree {
            Some(plan_for(self.inner.lead.cwd(), self.id(), request.name.clone()).await?)
        } else {
            None
        };
        let record = MemberRecord {
            team: self.id(),
            id: id.clone(),
            name: request.name.clone(),
            description: request.description.clone(),
            provider: provider.clone(),
            context: request.context,
            phase: MemberPhase::Provisioning,
            error: None,
            worktree: worktree.clone(),
        };
        let provisioning = record.clone();
        self.commit(|state| {
            self.check_new_member(state, &provisioning.name)?;
            Ok(TeamEvent::Member(provisioning))
        })
        .await?;
        let label = if request.description.is_empty() {
            request.name.clone()
        } else {
            request.description.clone()
        };
        let mut cwd = None;
        if let Some(planned) = &worktree {
            if let Err(err) = create_planned(planned.clone()).await {
                let failed = MemberRecord {
                    phase: MemberPhase::Failed,
                    error: Some(err.to_string()),
                    ..record
                };
                self.commit(|_| Ok(TeamEvent::Member(failed))).await?;
                return Err(err);
            }
            cwd = Some(planned.path.clone());
        }
        let mut start = StartRequest::new(self.inner.lead.clone(), request.prompt);
        start.cwd = cwd;
        let spec = ActivationSpec {
            provider,
            label,
            // The runtime's own names are shorter; a longer team name
            // leaves the catalog entry unnamed (the roster names it).
            name: dsh_subagent::validate_name(&request.name)
                .is_ok()
                .then(|| request.name.clone()),
            child_id: Some(id),
            cancel: CancellationToken::new(),
            delivery: Delivery::Parent,
            request: start,
        };
        let started = self.inner.runtime.start_activation(spec).await;
        let (phase, error) = match &started {
            Ok(_) => (MemberPhase::Active, None),
            Err(err) => {
                let mut error = err.to_string();
                // A member that never started leaves no worktree behind.
                if let Some(planned) = &worktree
                    && let Err(cleanup) = remove_planned(planned.clone()).await
                {
                    error = format!("{error}; {cleanup}");
                }
                (MemberPhase::Failed, Some(error))
            }
        };
        let terminal = MemberRecord {
            phase,
            error,
            ..record
        };
        self.commit(|_| Ok(TeamEvent::Member(terminal))).await?;
        started?;
        self.inner
            .ledger
            .read(|state| self.view_of(state, &request.name))
            .ok_or_else(|| TeamError::UnknownMember(request.name.clone()))
    }

    /// Decide every `provisioning` member left by an interrupted start:
    /// `active` when its own log proves it was created, `failed` otherwise,
    /// with its planned worktree removed and, when the start stopped
    /// between creating the member's log file and writing its header, that
    /// torn file too (nobody's session, which no later create of the
    /// reserved id would ever replace). Both go before the `failed` record,
    /// so a stop in between leaves the member `provisioning` for the next
    /// recovery to decide again.
    pub(super) async fn decide_provisioning(
        &self,
        recovery: &mut Recovery,
    ) -> Result<(), TeamError> {
        let provisioning: Vec<MemberRecord> = self.inner.ledger.read(|state| {
            state
                .members()
                .iter()
                .filter(|member| member.record.phase == MemberPhase::Provisioning)
                .map(|member| member.record.clone())
                .collect()
        });
        for record in provisioning {
            let proven = self.proven(&record.id).await;
            let name = record.name.clone();
            if !proven
                && let Some(worktree) = record.worktree.clone()
                && let Err(err) = remove_planned(worktree).await
            {
                recovery.errors.push((name.clone(), err.to_string()));
            }
            // Removed only if still torn and held by no writer.
            if !proven && let Err(err) = self.inner.store.remove_torn(&record.id).await {
                recovery.errors.push((name.clone(), err.to_string()));
            }
            let terminal = MemberRecord {
                phase: if proven {
                    MemberPhase::Active
                } else {
                    MemberPhase::Failed
                },
                error: (!proven).then(|| {
                    "its creation was interrupted before it held its initial message".to_owned()
                }),
                ..record
            };
            self.commit(|_| Ok(TeamEvent::Member(terminal))).await?;
            if proven {
                recovery.activated.push(name);
            } else {
                recovery.failed.push(name);
            }
        }
        Ok(())
    }

    /// Whether a provisioning member's own log proves it was created: the
    /// lead is its direct parent, the lead's catalog has it continuable,
    /// and it accepted its initial message.
    async fn proven(&self, id: &SessionId) -> bool {
        let lead = &self.inner.lead;
        let cataloged = fold_catalog(lead.header(), &lead.events()).is_ok_and(|catalog| {
            catalog
                .get(id)
                .is_some_and(|entry| entry.mode == ChildMode::CONTINUABLE)
        });
        if !cataloged {
            return false;
        }
        let (header, events) = match self.inner.runtime.registry().get(id) {
            Some(agent) => (agent.header().clone(), agent.events()),
            None => match self.inner.store.load(id).await {
                Ok(loaded) => (loaded.header, loaded.events),
                Err(_) => return false,
            },
        };
        let own = usize::try_from(header.seed_len).unwrap_or(usize::MAX);
        header.parent_session.as_ref() == Some(lead.id())
            && events
                .get(own..)
                .unwrap_or_default()
                .iter()
                .any(|event| matches!(event.payload, EventPayload::InboxAccepted(_)))
    }
}
