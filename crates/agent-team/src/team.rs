//! The live team of one lead: every operation checks the caller's exact
//! live identity and role, builds a record from the folded state, checks it
//! against that state, appends it to the lead's log through
//! [`Agent::record`] and only then applies it, all under one commit lock, so
//! the live state is always the fold of what was written.
//!
//! Ownership: every public method that writes runs its work as a task on
//! the team's tracker and awaits it, so a caller that goes away never cuts
//! a write sequence in half (a provisioning member always reaches a
//! terminal phase, a queued message is always offered for delivery); the
//! detached work finishes on its own and [`Team::shutdown`] waits for it.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use dsh_core::observe::Subscription;
use dsh_core::{
    Agent, AgentError, AgentStatus, CancellationToken, ContentBlock, EventPayload, InboxTarget,
    MessageId, MessageSource, RegistryEvent, SessionEvent, SessionId, SessionStore, StopReason,
    StoreError, UserMessage,
};
use dsh_subagent::{
    ActivationSpec, ChildMode, Delivery, InterruptAuthority, PromptDelivery, StartRequest,
    SubagentEvent, SubagentRuntime, TrustedHost, fold_catalog,
};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

use crate::config::TeamConfig;
use crate::error::TeamError;
use crate::fold::{Queued, Role, TeamState, fold_team};
use crate::record::{
    DeliveredRecord, DeliveryMode, LEAD_NAME, MemberContext, MemberPhase, MemberRecord,
    MessageRecord, TaskRecord, TaskStatus, TeamEvent, TeamId, task_id,
};
use crate::rules::{normalise_scope, validate_member_name};
use crate::worktree::{WorktreeRecord, WorktreeRemoval, create_planned, plan_for, remove_planned};

/// The shortest [`Team::wait_for_change`] bound.
pub const MIN_WAIT: Duration = Duration::from_secs(10);
/// The longest [`Team::wait_for_change`] bound.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// The message kind a team message keeps in its target's inbox.
pub const TEAM_MESSAGE_SOURCE: &str = "team-message";

/// How many times a delivery races a target's teardown.
const RETRIES: usize = 8;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

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

/// A task with what views add: readiness and scope warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskView {
    /// The latest snapshot.
    pub task: TaskRecord,
    /// Pending with every blocker completed.
    pub ready: bool,
    /// Write-scope overlaps with other in-progress tasks (advisory).
    pub warnings: Vec<String>,
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

/// A message to send.
#[derive(Debug, Clone)]
pub struct SendMessage {
    /// The target's name.
    pub to: String,
    /// The blocks, delivered unchanged after a heading.
    pub content: Vec<ContentBlock>,
    /// Quiet or waking.
    pub delivery: DeliveryMode,
}

/// What a send reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendOutcome {
    /// The durable message id (the target's inbox keeps it).
    pub id: MessageId,
    /// Whether the target's log holds it already; `false` means it stays
    /// queued (a quiet message to an inactive target) and is not a reason
    /// to send it again.
    pub delivered: bool,
}

/// A task to create.
#[derive(Debug, Clone, Default)]
pub struct CreateTask {
    /// One line.
    pub subject: String,
    /// The details.
    pub description: String,
    /// Tasks that must complete first.
    pub blocked_by: Vec<String>,
    /// Advisory write scopes.
    pub write_scopes: Vec<String>,
}

/// A change to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskAction {
    /// Change any of the fields given.
    Edit {
        /// A new subject.
        subject: Option<String>,
        /// A new description.
        description: Option<String>,
        /// New blockers.
        blocked_by: Option<Vec<String>>,
        /// New write scopes.
        write_scopes: Option<Vec<String>>,
    },
    /// Take a ready unowned task for oneself.
    Claim,
    /// Give the task to a member (lead only).
    Assign {
        /// The new owner's name.
        owner: String,
    },
    /// Give the task back (pending, unowned).
    Release,
    /// Mark it done.
    Complete,
    /// Make a completed task pending again.
    Reopen,
    /// Delete it (a tombstone).
    Delete,
}

/// A compare-and-set update of one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateTask {
    /// The task.
    pub id: String,
    /// The revision the caller last saw.
    pub expected_revision: u64,
    /// What to do.
    pub action: TaskAction,
}

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
    state: Mutex<TeamState>,
    commit: tokio::sync::Mutex<()>,
    changed: watch::Sender<u64>,
    delivery: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Messages this process queued and has not offered yet: no target can
    /// hold one, so their first delivery skips reading the target's log.
    fresh: Mutex<HashSet<MessageId>>,
    tasks: TaskTracker,
    listener: Mutex<Option<Subscription>>,
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
        let (changed, _) = watch::channel(0);
        let team = Self {
            inner: Arc::new(Inner {
                lead,
                runtime,
                store,
                config,
                state: Mutex::new(state),
                commit: tokio::sync::Mutex::new(()),
                changed,
                delivery: Mutex::new(HashMap::new()),
                fresh: Mutex::new(HashSet::new()),
                tasks: TaskTracker::new(),
                listener: Mutex::new(None),
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
        lock(&self.inner.state).clone()
    }

    /// Wait until every piece of detached team work has finished.
    ///
    /// # Cancel safety
    /// Dropping the future only stops the waiting.
    pub async fn shutdown(&self) {
        // Detaching the listener closes its channel, which ends its task.
        lock(&self.inner.listener).take();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }

    /// Whether detached team work (a start, a delivery, a release) is in
    /// flight, beyond the runtime listener.
    pub fn is_busy(&self) -> bool {
        let listener = usize::from(lock(&self.inner.listener).is_some());
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

    /// Watch the runtime: a member that starts may take its queued quiet
    /// messages; a member whose activation fails gives its tasks back.
    fn listen(&self) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let subscription = self.inner.runtime.events().listen(move |event| {
            let _ = tx.send(event.clone());
        });
        *lock(&self.inner.listener) = Some(subscription);
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        self.inner.tasks.spawn(async move {
            while let Some(event) = rx.recv().await {
                let Some(inner) = weak.upgrade() else { return };
                let team = Team { inner };
                let tasks = team.inner.tasks.clone();
                tasks.spawn(async move { team.on_runtime_event(event).await });
            }
        });
    }

    async fn on_runtime_event(&self, event: SubagentEvent) {
        match event {
            SubagentEvent::Start(info) => {
                let name = self.member_name(&info.child_id);
                if let Some(name) = name {
                    // Errors stay visible: the messages stay queued, and
                    // the next send or recovery retries and reports them.
                    let _ = self.flush(name).await;
                }
            }
            SubagentEvent::End(info, outcome) => {
                let failed = outcome.stop_reason() == StopReason::ERROR;
                if failed && let Some(name) = self.member_name(&info.child_id) {
                    let note = format!("released: the owner `{name}` failed");
                    let _ = self.release_tasks(&name, &note).await;
                }
            }
            SubagentEvent::ProviderAdded(_) | SubagentEvent::ProviderRemoved(_) => {}
        }
    }

    fn member_name(&self, id: &SessionId) -> Option<String> {
        lock(&self.inner.state)
            .member_by_session(id)
            .map(|member| member.record.name.clone())
    }

    /// Check, append and apply one record built from the current state.
    async fn commit(
        &self,
        build: impl FnOnce(&TeamState) -> Result<TeamEvent, TeamError>,
    ) -> Result<TeamEvent, TeamError> {
        let _guard = self.inner.commit.lock().await;
        let event = {
            let state = lock(&self.inner.state);
            let event = build(&state)?;
            state.check(&event)?;
            event
        };
        let payload = event
            .to_payload()
            .map_err(|err| TeamError::InvalidRequest(err.to_string()))?;
        let seq = self.inner.lead.record(event.kind(), payload).await?;
        lock(&self.inner.state).apply(event.clone(), seq);
        self.inner.changed.send_modify(|version| *version += 1);
        Ok(event)
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
        let state = lock(&self.inner.state);
        match state.member_by_session(caller.id()) {
            Some(member)
                if member.record.phase == MemberPhase::Active
                    && caller.header().parent_session.as_ref() == Some(self.inner.lead.id()) =>
            {
                Ok(Role::Member(member.record.name.clone()))
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
        lock(&self.inner.state)
            .member_by_session(id)
            .filter(|member| member.record.phase != MemberPhase::Failed)
            .map(|member| Role::Member(member.record.name.clone()))
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
        let mut version = self.inner.changed.subscribe();
        loop {
            let provisioning = lock(&self.inner.state)
                .member_by_session(id)
                .is_some_and(|member| member.record.phase == MemberPhase::Provisioning);
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

    /// The session of `name` (`lead` or a teammate).
    fn session_of(&self, name: &str) -> Result<SessionId, TeamError> {
        if name == LEAD_NAME {
            return Ok(self.inner.lead.id().clone());
        }
        lock(&self.inner.state)
            .member(name)
            .map(|member| member.record.id.clone())
            .ok_or_else(|| TeamError::UnknownMember(name.to_owned()))
    }

    fn status_of(&self, phase: MemberPhase, id: &SessionId) -> MemberStatus {
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
        let owned = |name: &str| -> Vec<String> {
            state
                .tasks()
                .iter()
                .filter(|task| {
                    task.status == TaskStatus::InProgress && task.owner.as_deref() == Some(name)
                })
                .map(|task| task.id.clone())
                .collect()
        };
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
        let state = lock(&self.inner.state);
        std::iter::once(LEAD_NAME.to_owned())
            .chain(state.members().iter().map(|m| m.record.name.clone()))
            .filter_map(|name| self.view_of(&state, &name))
            .collect()
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
        self.check_new_member(&lock(&self.inner.state), &request.name)?;
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
        self.view_of(&lock(&self.inner.state), &request.name)
            .ok_or_else(|| TeamError::UnknownMember(request.name.clone()))
    }

    /// Queue a message from `caller` to another member, then deliver it:
    /// the `queued` record is written first; delivery is serialized per
    /// target in queue order, and `delivered` is written only once the
    /// target's log holds the message. A quiet message reaches a live
    /// target's next step and stays queued for an inactive one; a waking
    /// message becomes the target's next turn, resuming it when it is cold.
    ///
    /// # Errors
    /// `TEAM_NOT_A_MEMBER`, `TEAM_UNKNOWN_MEMBER`, `TEAM_MEMBER_UNAVAILABLE`,
    /// `TEAM_MESSAGE_TOO_LARGE`, `TEAM_MAILBOX_LIMIT`; a delivery failure
    /// after the message was queued (it stays queued for recovery).
    ///
    /// # Cancel safety
    /// The checks run before the first await; queueing and delivery run on
    /// the team's tracker, so a dropped future leaves either nothing or a
    /// queued message that is delivered all the same.
    pub async fn send_message(
        &self,
        caller: &Arc<dyn Agent>,
        request: SendMessage,
    ) -> Result<SendOutcome, TeamError> {
        let from = self.role_of(caller)?.name().to_owned();
        let id = MessageId::generate();
        let bytes = framed_bytes(&id, &from, &request.content);
        let limit = self.inner.config.limits.max_message_bytes;
        if bytes > limit {
            return Err(TeamError::MessageTooLarge { bytes, limit });
        }
        let record = MessageRecord {
            team: self.id(),
            id: id.clone(),
            from,
            to: request.to,
            delivery: request.delivery,
            content: request.content,
        };
        self.check_queue(&lock(&self.inner.state), &record)?;
        let team = self.clone();
        self.detach(async move {
            let to = record.to.clone();
            team.commit(|state| {
                team.check_queue(state, &record)?;
                Ok(TeamEvent::Message(record))
            })
            .await?;
            lock(&team.inner.fresh).insert(id.clone());
            team.flush(to).await?;
            let delivered = lock(&team.inner.state)
                .message(&id)
                .is_some_and(|queued| queued.delivered);
            Ok(SendOutcome { id, delivered })
        })
        .await
    }

    fn check_queue(&self, state: &TeamState, record: &MessageRecord) -> Result<(), TeamError> {
        state.check(&TeamEvent::Message(record.clone()))?;
        let limit = self.inner.config.limits.max_pending_per_member;
        if state.pending_for(&record.to).count() >= limit {
            return Err(TeamError::Limit {
                what: "pending message",
                limit,
            });
        }
        Ok(())
    }

    /// Deliver `target`'s queued messages in queue order, one target at a time.
    async fn flush(&self, target: String) -> Result<usize, TeamError> {
        let gate = lock(&self.inner.delivery)
            .entry(target.clone())
            .or_default()
            .clone();
        let _turn = gate.lock().await;
        let session = self.session_of(&target)?;
        let mut acknowledged = 0;
        let mut retries = 0;
        loop {
            let (next, wakeup_follows) = {
                let state = lock(&self.inner.state);
                let mut pending = state.pending_for(&target);
                let next = pending.next().cloned();
                let wakeup_follows = pending.any(|q| q.record.delivery == DeliveryMode::Wakeup);
                (next, wakeup_follows)
            };
            let Some(queued) = next else {
                return Ok(acknowledged);
            };
            let live = self.inner.runtime.registry().get(&session);
            let fresh = lock(&self.inner.fresh).remove(&queued.record.id);
            if fresh
                || !self
                    .holds(live.as_ref(), &session, &queued.record.id)
                    .await?
            {
                let outcome = self
                    .hand_over(live.as_ref(), &session, &queued, wakeup_follows)
                    .await;
                match outcome {
                    Ok(true) => {}
                    Ok(false) => return Ok(acknowledged),
                    Err(TeamError::Agent(AgentError::Disposed(_))) if retries < RETRIES => {
                        // Torn down while we delivered: it is cold now.
                        retries += 1;
                        tokio::task::yield_now().await;
                        continue;
                    }
                    Err(err) => return Err(err),
                }
            }
            let ack = DeliveredRecord {
                team: self.id(),
                id: queued.record.id.clone(),
                to: target.clone(),
            };
            self.commit(|_| Ok(TeamEvent::Delivered(ack))).await?;
            acknowledged += 1;
        }
    }

    /// Give one message to its target. `Ok(false)`: it stays queued.
    async fn hand_over(
        &self,
        live: Option<&Arc<dyn Agent>>,
        session: &SessionId,
        queued: &Queued,
        wakeup_follows: bool,
    ) -> Result<bool, TeamError> {
        let record = &queued.record;
        let is_lead = session == self.inner.lead.id();
        match (record.delivery, live) {
            (DeliveryMode::Quiet, Some(agent)) => {
                agent
                    .send(self.user_message(record), InboxTarget::NextStep, false)
                    .await?;
                Ok(true)
            }
            (DeliveryMode::Quiet, None) if !wakeup_follows => Ok(false),
            (DeliveryMode::Wakeup, Some(agent)) if is_lead => {
                agent
                    .send(self.user_message(record), InboxTarget::NextTurn, true)
                    .await?;
                Ok(true)
            }
            (_, None) if is_lead => Err(TeamError::Agent(AgentError::Disposed(session.clone()))),
            _ => {
                // Through the runtime, whole (its `team-message` source
                // kept): it steers clear of a retiring target, resumes a
                // cold one as an activation it owns, and never accepts one
                // message id twice.
                self.inner
                    .runtime
                    .deliver_whole(
                        session,
                        self.user_message(record),
                        PromptDelivery::Queue,
                        &TrustedHost,
                        &CancellationToken::new(),
                    )
                    .await?;
                Ok(true)
            }
        }
    }

    fn user_message(&self, record: &MessageRecord) -> UserMessage {
        let mut fields = serde_json::Map::new();
        fields.insert("team_id".into(), self.id().to_string().into());
        fields.insert("message_id".into(), record.id.as_str().into());
        fields.insert("sender_name".into(), record.from.as_str().into());
        if let Ok(sender) = self.session_of(&record.from) {
            fields.insert("sender_session_id".into(), sender.as_str().into());
        }
        UserMessage {
            id: record.id.clone(),
            content: framed(record),
            source: MessageSource::Other {
                kind: TEAM_MESSAGE_SOURCE.into(),
                fields,
            },
        }
    }

    /// Whether `session`'s log holds message `id` (pending or in history).
    async fn holds(
        &self,
        live: Option<&Arc<dyn Agent>>,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<bool, TeamError> {
        let events = match live {
            Some(agent) => agent.events(),
            None => match self.inner.store.load(session).await {
                Ok(loaded) => loaded.events,
                Err(StoreError::NotFound(_)) => return Ok(false),
                Err(err) => return Err(TeamError::Agent(err.into())),
            },
        };
        Ok(log_holds(&events, id))
    }

    /// Decide provisioning members and flush every mailbox.
    async fn recover(&self) -> Result<Recovery, TeamError> {
        let mut recovery = Recovery::default();
        let provisioning: Vec<MemberRecord> = lock(&self.inner.state)
            .members()
            .iter()
            .filter(|member| member.record.phase == MemberPhase::Provisioning)
            .map(|member| member.record.clone())
            .collect();
        for record in provisioning {
            let proven = self.proven(&record.id).await;
            let name = record.name.clone();
            if !proven
                && let Some(worktree) = record.worktree.clone()
                && let Err(err) = remove_planned(worktree).await
            {
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
        let mut targets: Vec<String> = Vec::new();
        for queued in lock(&self.inner.state).pending() {
            if !targets.contains(&queued.record.to) {
                targets.push(queued.record.to.clone());
            }
        }
        for target in targets {
            match self.flush(target.clone()).await {
                Ok(count) => recovery.delivered += count,
                Err(err) => recovery.errors.push((target, err.to_string())),
            }
        }
        Ok(recovery)
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

    /// Give back every in-progress task `name` owns, with a durable record.
    async fn release_tasks(&self, name: &str, note: &str) -> Result<Vec<String>, TeamError> {
        let owned: Vec<String> = lock(&self.inner.state)
            .tasks()
            .iter()
            .filter(|task| {
                task.status == TaskStatus::InProgress && task.owner.as_deref() == Some(name)
            })
            .map(|task| task.id.clone())
            .collect();
        let mut released = Vec::new();
        for id in owned {
            let event = self
                .commit(|state| {
                    let current = state
                        .task(&id)
                        .ok_or_else(|| TeamError::UnknownTask(id.clone()))?;
                    Ok(TeamEvent::Task(TaskRecord {
                        revision: current.revision + 1,
                        status: TaskStatus::Pending,
                        owner: None,
                        by: LEAD_NAME.into(),
                        note: Some(note.to_owned()),
                        ..current.clone()
                    }))
                })
                .await;
            if event.is_ok() {
                released.push(id);
            }
        }
        Ok(released)
    }

    /// Create a pending, unowned task at revision 1.
    ///
    /// # Errors
    /// `TEAM_NOT_A_MEMBER`, `TEAM_TASK_LIMIT`, `TEAM_INVALID_SCOPE`,
    /// `TEAM_TASK_INVALID_DEPENDENCY`, `TEAM_TASK_NOT_FOUND` (a blocker).
    ///
    /// # Cancel safety
    /// The checks run before the first await; the write runs on the team's
    /// tracker, so a dropped future leaves the task created or not at all.
    pub async fn create_task(
        &self,
        caller: &Arc<dyn Agent>,
        request: CreateTask,
    ) -> Result<TaskView, TeamError> {
        let by = self.role_of(caller)?.name().to_owned();
        let write_scopes = normalise_scopes(&request.write_scopes)?;
        let limit = self.inner.config.limits.max_live_tasks;
        let team = self.clone();
        let build = move |state: &TeamState| {
            if state.live_tasks() >= limit {
                return Err(TeamError::Limit {
                    what: "task",
                    limit,
                });
            }
            Ok(TeamEvent::Task(TaskRecord {
                team: TeamId(state.team().0.clone()),
                id: task_id(state.tasks().len() + 1),
                revision: 1,
                subject: request.subject,
                description: request.description,
                status: TaskStatus::Pending,
                owner: None,
                blocked_by: request.blocked_by,
                write_scopes,
                by,
                note: None,
            }))
        };
        self.detach(async move {
            let event = team.commit(build).await?;
            team.task_view_of(&event)
        })
        .await
    }

    /// Apply one compare-and-set change to a task.
    ///
    /// # Errors
    /// `TEAM_TASK_STALE_REVISION` when `expected_revision` is not current;
    /// `TEAM_UNAUTHORIZED` (not the owner or the lead; assigning as a
    /// teammate); `TEAM_INVALID_TRANSITION`; `TEAM_TASK_INVALID_DEPENDENCY`;
    /// `TEAM_TASK_HAS_DEPENDENTS`; `TEAM_INVALID_SCOPE`.
    ///
    /// # Cancel safety
    /// As [`Team::create_task`].
    pub async fn update_task(
        &self,
        caller: &Arc<dyn Agent>,
        request: UpdateTask,
    ) -> Result<TaskView, TeamError> {
        let by = self.role_of(caller)?.name().to_owned();
        if let TaskAction::Assign { .. } = request.action
            && by != LEAD_NAME
        {
            return Err(TeamError::Unauthorized(
                "only the lead assigns tasks".into(),
            ));
        }
        let scopes = match &request.action {
            TaskAction::Edit {
                write_scopes: Some(scopes),
                ..
            } => Some(normalise_scopes(scopes)?),
            _ => None,
        };
        let team = self.clone();
        self.detach(async move {
            let event = team
                .commit(|state| next_snapshot(state, &request, &by, scopes).map(TeamEvent::Task))
                .await?;
            team.task_view_of(&event)
        })
        .await
    }

    fn task_view_of(&self, event: &TeamEvent) -> Result<TaskView, TeamError> {
        let TeamEvent::Task(task) = event else {
            return Err(TeamError::InvalidRequest("not a task record".into()));
        };
        self.task_view(&task.id)
    }

    fn task_view(&self, id: &str) -> Result<TaskView, TeamError> {
        let state = lock(&self.inner.state);
        let task = state
            .task(id)
            .ok_or_else(|| TeamError::UnknownTask(id.to_owned()))?;
        Ok(TaskView {
            ready: state.is_ready(task),
            warnings: state.scope_warnings(task),
            task: task.clone(),
        })
    }

    /// One task, a tombstone included.
    ///
    /// # Errors
    /// `TEAM_NOT_A_MEMBER`, `TEAM_TASK_NOT_FOUND`.
    pub fn get_task(&self, caller: &Arc<dyn Agent>, id: &str) -> Result<TaskView, TeamError> {
        self.role_of(caller)?;
        self.task_view(id)
    }

    /// Non-deleted tasks in creation order.
    ///
    /// # Errors
    /// `TEAM_NOT_A_MEMBER`.
    pub fn list_tasks(&self, caller: &Arc<dyn Agent>) -> Result<Vec<TaskView>, TeamError> {
        self.role_of(caller)?;
        Ok(self.board())
    }

    /// The board, for hosts (no caller check): non-deleted tasks.
    pub fn board(&self) -> Vec<TaskView> {
        let state = lock(&self.inner.state);
        state
            .tasks()
            .iter()
            .filter(|task| task.status != TaskStatus::Deleted)
            .map(|task| TaskView {
                ready: state.is_ready(task),
                warnings: state.scope_warnings(task),
                task: task.clone(),
            })
            .collect()
    }

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
        let mut version = self.inner.changed.subscribe();
        version.borrow_and_update();
        let (_subscription, mut registry) = self.inner.runtime.registry().events().subscribe();
        let sessions: Vec<SessionId> = lock(&self.inner.state)
            .members()
            .iter()
            .map(|member| member.record.id.clone())
            .collect();
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
                if sessions.contains(&reference.id) {
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
        let (id, phase) = {
            let state = lock(&self.inner.state);
            let member = state
                .member(name)
                .ok_or_else(|| TeamError::UnknownMember(name.to_owned()))?;
            (member.record.id.clone(), member.record.phase)
        };
        let previous = self.status_of(phase, &id);
        self.inner
            .runtime
            .interrupt(&id, &InterruptAuthority::Ancestor(caller.clone()))
            .await?;
        Ok(previous)
    }

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
        let (id, worktree) = {
            let state = lock(&self.inner.state);
            let member = state
                .member(name)
                .ok_or_else(|| TeamError::UnknownMember(name.to_owned()))?;
            (member.record.id.clone(), member.record.worktree.clone())
        };
        let worktree = worktree.ok_or_else(|| {
            TeamError::InvalidRequest(format!("`{name}` has no worktree of its own"))
        })?;
        if self.inner.runtime.registry().get(&id).is_some() {
            return Err(TeamError::InvalidRequest(format!(
                "`{name}` is resident; interrupt it and let it go idle first"
            )));
        }
        remove_planned(worktree).await
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

/// The heading the target sees before the sender's blocks.
pub fn heading(id: &MessageId, sender: &str) -> String {
    format!("Team message {id} from {sender}:")
}

/// The framed content of a message: its heading, then the blocks unchanged.
fn framed(record: &MessageRecord) -> Vec<ContentBlock> {
    std::iter::once(ContentBlock::text(heading(&record.id, &record.from)))
        .chain(record.content.iter().cloned())
        .collect()
}

/// The size a framed message counts against the byte limit.
fn framed_bytes(id: &MessageId, sender: &str, content: &[ContentBlock]) -> usize {
    heading(id, sender).len()
        + content
            .iter()
            .map(|block| match block {
                ContentBlock::Text { text } => text.len(),
                ContentBlock::Image { media_type, data } => media_type.len() + data.len(),
            })
            .sum::<usize>()
}

/// Whether a log holds an accepted message `id`.
pub fn log_holds(events: &[SessionEvent], id: &MessageId) -> bool {
    events.iter().any(|event| match &event.payload {
        EventPayload::InboxAccepted(accepted) => &accepted.message.id == id,
        EventPayload::UserMessage(entry) => &entry.message.id == id,
        _ => false,
    })
}

fn normalise_scopes(scopes: &[String]) -> Result<Vec<String>, TeamError> {
    let mut out: Vec<String> = Vec::new();
    for scope in scopes {
        let scope = normalise_scope(scope)?;
        if !out.contains(&scope) {
            out.push(scope);
        }
    }
    Ok(out)
}

/// The snapshot an update would write.
fn next_snapshot(
    state: &TeamState,
    request: &UpdateTask,
    by: &str,
    scopes: Option<Vec<String>>,
) -> Result<TaskRecord, TeamError> {
    let current = state
        .task(&request.id)
        .ok_or_else(|| TeamError::UnknownTask(request.id.clone()))?;
    if current.revision != request.expected_revision {
        return Err(TeamError::StaleRevision {
            id: current.id.clone(),
            expected: request.expected_revision,
            current: current.revision,
        });
    }
    let mut next = TaskRecord {
        revision: current.revision + 1,
        by: by.to_owned(),
        note: None,
        ..current.clone()
    };
    let refuse = |what: &str| {
        Err(TeamError::InvalidTransition(format!(
            "{} is {}; it cannot {what}",
            current.id,
            current.status.as_str()
        )))
    };
    match &request.action {
        TaskAction::Edit {
            subject,
            description,
            blocked_by,
            ..
        } => {
            if let Some(subject) = subject {
                next.subject = subject.clone();
            }
            if let Some(description) = description {
                next.description = description.clone();
            }
            if let Some(blocked_by) = blocked_by {
                next.blocked_by = blocked_by.clone();
            }
            if let Some(scopes) = scopes {
                next.write_scopes = scopes;
            }
        }
        TaskAction::Claim => {
            if current.status != TaskStatus::Pending || current.owner.is_some() {
                return refuse("be claimed");
            }
            next.status = TaskStatus::InProgress;
            next.owner = Some(by.to_owned());
        }
        TaskAction::Assign { owner } => {
            if !matches!(current.status, TaskStatus::Pending | TaskStatus::InProgress) {
                return refuse("be assigned");
            }
            next.status = TaskStatus::InProgress;
            next.owner = Some(owner.clone());
        }
        TaskAction::Release => {
            if current.status != TaskStatus::InProgress {
                return refuse("be released");
            }
            next.status = TaskStatus::Pending;
            next.owner = None;
        }
        TaskAction::Complete => {
            if !matches!(current.status, TaskStatus::Pending | TaskStatus::InProgress) {
                return refuse("be completed");
            }
            next.status = TaskStatus::Completed;
        }
        TaskAction::Reopen => {
            if current.status != TaskStatus::Completed {
                return refuse("be reopened");
            }
            next.status = TaskStatus::Pending;
            next.owner = None;
        }
        TaskAction::Delete => {
            next.status = TaskStatus::Deleted;
            next.owner = None;
        }
    }
    Ok(next)
}
