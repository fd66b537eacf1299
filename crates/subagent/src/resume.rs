//! Resuming. One cold member at a time: its resume gate (concurrent resumes
//! of one child coalesce), the resume itself, its installation as an
//! activation of its creator and its adoption (launched, owed notices
//! delivered); a message that finds its target cold goes through here.
//!
//! And a whole tree in one call: after a restart, [`SubagentRuntime::resume_tree`]
//! brings a persisted tree back as it was, reading only logs to decide. The
//! root is resumed (its own restored input wakes it); every cold continuable
//! member is then judged from its log, in the listing's pre-order so that a
//! creator is live before its children are looked at:
//!
//! - **pending**: it holds waking input nobody claimed (queued behind a turn
//!   the kill cut off, or sent just before it): resumed as an activation of
//!   its creator, and the restored input runs a turn at once;
//! - **interrupted by the kill**: a turn was open; resumed too, so the turn
//!   is closed as `aborted` and the member settles, and its creator gets
//!   the notice (B54) and can ask it to go on;
//! - **owed notices**: a child's notice was lost to the kill; the member is
//!   resumed so it gets them ([`SubagentRuntime::deliver_lost_notices`]);
//! - **parked**: it was interrupted with its input kept (`interrupt`
//!   records a [`PARKED_EVENT`]) and nothing woke it since: left cold with
//!   its input, which the next message to it wakes, as a resident parked
//!   member would be;
//! - **nothing to do**: left cold.
//!
//! A member that cannot be resumed is reported in its row, never skipped
//! silently; the walk goes on with the others.

use crate::DeliveryError;
use std::sync::{Arc, Mutex};

use dsh_core::projection::{PendingInboxProjection, replay};
use dsh_core::{
    Agent, AgentHandle, AgentRef, AgentSetup, CancellationToken, EventPayload, InboxTarget,
    MessageId, ResumeAgent, SessionEvent, SessionHeader, SessionId, StoreError, UserMessage,
};
use serde::Serialize;

use crate::activation::{Execution, NewActivation};
use crate::admission::{AdmissionTicket, CapacitySlot};
use crate::catalog::ChildMode;
use crate::error::SubagentError;
use crate::events::RunInfo;
use crate::ids::IdMap;
use crate::notice::{ACTIVATION_EVENT, activation_payload};
use crate::request::Delivery;
use crate::runtime::{SubagentRuntime, lock};

/// A child resumed but not yet an activation.
pub(crate) struct Resumed {
    pub(crate) handle: dsh_core::AgentHandle,
    pub(crate) slot: CapacitySlot,
}

/// One lock per child being resumed, so concurrent resumes of one child
/// coalesce (the losers find it live). A lock is kept only while someone
/// holds or waits for it.
#[derive(Default)]
pub(crate) struct ResumeGates {
    gates: Arc<Mutex<IdMap<SessionId, Arc<tokio::sync::Mutex<()>>>>>,
}

/// One resume's hold on its child's gate; the gate goes once nobody else
/// holds or waits for it.
pub(crate) struct ResumeTurn {
    /// Dropped first, so the prune below sees the gate unheld.
    _guard: tokio::sync::OwnedMutexGuard<()>,
    _prune: PruneGate,
}

/// Removes a child's resume gate once nobody else holds it (also when its
/// wait was given up).
struct PruneGate {
    gates: Arc<Mutex<IdMap<SessionId, Arc<tokio::sync::Mutex<()>>>>>,
    target: SessionId,
}

impl Drop for PruneGate {
    fn drop(&mut self) {
        let mut gates = lock(&self.gates);
        if gates
            .get(&self.target)
            .is_some_and(|gate| Arc::strong_count(gate) == 1)
        {
            gates.remove(&self.target);
        }
    }
}

impl ResumeGates {
    /// Hold `target`'s gate, waiting for an earlier resume of it.
    ///
    /// # Errors
    /// `Cancelled` when `cancel` fires first.
    ///
    /// # Cancel safety
    /// Cancel safe: a drop while waiting holds nothing.
    pub(crate) async fn hold(
        &self,
        target: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<ResumeTurn, SubagentError> {
        let prune = PruneGate {
            gates: self.gates.clone(),
            target: target.clone(),
        };
        let gate = lock(&self.gates).entry(target.clone()).or_default().clone();
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(SubagentError::Cancelled),
            guard = gate.lock_owned() => Ok(ResumeTurn { _guard: guard, _prune: prune }),
        }
    }

    /// How many children have a gate (are being resumed).
    pub(crate) fn len(&self) -> usize {
        lock(&self.gates).len()
    }
}

/// Whether a session's own log shows it accepted any input (its task),
/// read borrowed where the agent can lend it.
fn has_taken_a_task(agent: &dyn Agent) -> bool {
    let mut taken = false;
    agent.visit_events_since(agent.header().seed_len, &mut |own| {
        taken = own
            .iter()
            .any(|event| matches!(event.payload, EventPayload::InboxAccepted(_)));
    });
    taken
}

/// The extension event `interrupt` writes into a member's log when it
/// parks it: until a waking message is accepted after it, the member's
/// pending input stays parked, across a restart too.
pub const PARKED_EVENT: &str = "subagent/parked";

/// What [`SubagentRuntime::resume_tree`] did with one member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome", content = "reason")]
pub enum MemberResume {
    /// Resumed as a monitored activation, for the reason given.
    Resumed(ResumeReason),
    /// Left cold with its parked input: the next message wakes it.
    Parked,
    /// Left cold: it had nothing to do.
    Cold,
    /// Already live in this process: left as it is.
    Live,
    /// Not a member this call resumes (external, one-shot or unknown
    /// mode): left as it is.
    NotContinuable,
    /// It had something to do but could not be resumed: why.
    Failed(String),
}

/// Why a member was resumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumeReason {
    /// It held waking input nobody had claimed; it continues with it.
    PendingInput,
    /// A turn was open when the process died; it is closed as `aborted`
    /// and the member settles, telling its creator.
    InterruptedTurn,
    /// A child of it owed it a settlement notice.
    OwedNotices,
}

/// One member of a resumed tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumedMember {
    /// The member.
    pub child_id: SessionId,
    /// Its slash path of names from the root, when every level is named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// What was done with it.
    #[serde(flatten)]
    pub outcome: MemberResume,
}

/// What [`SubagentRuntime::resume_members`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TreeResume {
    /// Every listed member, in the listing's pre-order.
    pub members: Vec<ResumedMember>,
    /// Settlement notices lost to the kill that were delivered to the root
    /// (the members resumed receive theirs as they resume).
    pub root_notices: usize,
}

impl TreeResume {
    /// The members resumed.
    pub fn resumed(&self) -> impl Iterator<Item = &ResumedMember> {
        self.members
            .iter()
            .filter(|member| matches!(member.outcome, MemberResume::Resumed(_)))
    }

    /// The outcome for `child`, when it is listed.
    pub fn outcome(&self, child: &SessionId) -> Option<&MemberResume> {
        self.members
            .iter()
            .find(|member| &member.child_id == child)
            .map(|member| &member.outcome)
    }
}

/// A tree brought back by [`SubagentRuntime::resume_tree`].
#[derive(Debug)]
pub struct ResumedTree {
    /// The root, live: the caller owns it (and disposes it).
    pub root: AgentHandle,
    /// What became of its members.
    pub members: TreeResume,
}

/// What a cold member's log says it has to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    Pending,
    OpenTurn,
    Parked,
    Nothing,
}

/// Whether a member's own events leave its input parked: a
/// [`PARKED_EVENT`] with pending input, and no turn and no waking input
/// accepted since.
pub(crate) fn is_parked(own: &[SessionEvent], has_pending: bool) -> bool {
    let Some(parked) = own.iter().rposition(|event| {
        matches!(&event.payload, EventPayload::Extension { kind, .. } if kind == PARKED_EVENT)
    }) else {
        return false;
    };
    has_pending
        && !own[parked..].iter().any(|event| match &event.payload {
            EventPayload::TurnStart(_) => true,
            EventPayload::InboxAccepted(accepted) => accepted.wake,
            _ => false,
        })
}

/// A member's own events (after any fork seed).
pub(crate) fn own_events<'a>(
    header: &SessionHeader,
    events: &'a [SessionEvent],
) -> &'a [SessionEvent] {
    let seed = usize::try_from(header.seed_len).unwrap_or(usize::MAX);
    events.get(seed..).unwrap_or_default()
}

/// Whether a member's log holds any pending input.
pub(crate) fn has_pending(header: &SessionHeader, events: &[SessionEvent]) -> bool {
    !replay(&PendingInboxProjection, header, events).is_empty()
}

/// Judge a cold member from its log.
fn standing(header: &SessionHeader, events: &[SessionEvent]) -> Standing {
    let pending = replay(&PendingInboxProjection, header, events);
    let own = own_events(header, events);
    if is_parked(own, !pending.is_empty()) {
        return Standing::Parked;
    }
    if pending.items().any(|item| item.wake) {
        return Standing::Pending;
    }
    let last = |wanted: fn(&EventPayload) -> bool| own.iter().rposition(|e| wanted(&e.payload));
    let started = last(|payload| matches!(payload, EventPayload::TurnStart(_)));
    let ended = last(|payload| matches!(payload, EventPayload::TurnEnd(_)));
    match (started, ended) {
        (Some(started), Some(ended)) if started > ended => Standing::OpenTurn,
        (Some(_), None) => Standing::OpenTurn,
        _ => Standing::Nothing,
    }
}

impl SubagentRuntime {
    /// Bring the persisted tree of `root` back after a restart: resume the
    /// root with the host's `setup` for it (its restored input wakes it),
    /// then its members as [`SubagentRuntime::resume_members`] does. The
    /// caller owns the root's handle.
    ///
    /// # Errors
    /// `ALREADY_LIVE` when the root is live in this process (use
    /// [`SubagentRuntime::resume_members`]); the factory's resume error;
    /// the listing's errors (the root is disposed again then).
    ///
    /// # Cancel safety
    /// A drop during the root's resume leaves it as the factory says (a
    /// cancelled resume publishes nothing); a drop during the members'
    /// walk disposes the root (on the runtime's tasks, so it is gone
    /// shortly after the drop), leaves every member already handed to the
    /// runtime resumed and monitored by it, and the rest cold.
    pub async fn resume_tree(
        &self,
        root: &SessionId,
        setup: AgentSetup,
        cancel: &CancellationToken,
    ) -> Result<ResumedTree, SubagentError> {
        if self.registry().get(root).is_some() {
            return Err(dsh_core::AgentError::AlreadyLive(root.clone()).into());
        }
        let handle = self
            .factory()
            .resume(ResumeAgent {
                id: root.clone(),
                setup,
                cancel: cancel.clone(),
            })
            .await?;
        // Until the walk returns, the root is this call's: a drop disposes
        // it (on the runtime's tasks), so no live root is left unowned.
        let mut guard = RootGuard {
            runtime: self,
            handle: Some(handle.clone()),
        };
        let walked = self.resume_members(handle.agent(), cancel).await;
        guard.handle = None;
        match walked {
            Ok(members) => Ok(ResumedTree {
                root: handle,
                members,
            }),
            Err(err) => {
                handle.dispose().await;
                Err(err)
            }
        }
    }

    /// Resume what the live `root`'s cold members have to do (see the
    /// module documentation): deliver the notices the root is owed, then,
    /// in pre-order, resume each member with pending input, a turn the kill
    /// left open, or owed notices, and leave parked and idle ones cold.
    ///
    /// # Errors
    /// `NOT_LIVE` unless `root` is the exact live agent; the listing's
    /// errors (an unreadable root catalog); `CANCELLED`.
    ///
    /// # Cancel safety
    /// Each member's resume is work the runtime owns: a drop during one
    /// finishes it (the member ends resumed and monitored, or cold); the
    /// members not reached yet stay cold for the next call.
    pub async fn resume_members(
        &self,
        root: &Arc<dyn Agent>,
        cancel: &CancellationToken,
    ) -> Result<TreeResume, SubagentError> {
        let root_notices = self.deliver_lost_notices(root).await?;
        let rows = self.list_descendants(root.id(), cancel).await?;
        let mut members = Vec::with_capacity(rows.len());
        for row in &rows {
            if cancel.is_cancelled() {
                return Err(SubagentError::Cancelled);
            }
            let id = &row.entry.child_id;
            let outcome = if row.entry.mode != ChildMode::CONTINUABLE {
                MemberResume::NotContinuable
            } else if self.registry().get(id).is_some() {
                MemberResume::Live
            } else {
                self.resume_cold(root.id(), id, &rows, cancel).await
            };
            members.push(ResumedMember {
                child_id: id.clone(),
                path: row.path.clone(),
                outcome,
            });
        }
        Ok(TreeResume {
            members,
            root_notices,
        })
    }

    /// Judge one cold member and resume it when it has something to do.
    async fn resume_cold(
        &self,
        root: &SessionId,
        member: &SessionId,
        rows: &[crate::tree::DescendantRow],
        cancel: &CancellationToken,
    ) -> MemberResume {
        let loaded = match self.store().load(member).await {
            Ok(loaded) => loaded,
            Err(err) => return MemberResume::Failed(err.to_string()),
        };
        let reason = match standing(&loaded.header, &loaded.events) {
            Standing::Parked => return MemberResume::Parked,
            Standing::Pending => ResumeReason::PendingInput,
            Standing::OpenTurn => ResumeReason::InterruptedTurn,
            Standing::Nothing => {
                if self.owed_by_children(member, &loaded.events, rows).await {
                    ResumeReason::OwedNotices
                } else {
                    return MemberResume::Cold;
                }
            }
        };
        match self.resume_owned(root, member, cancel).await {
            Ok(()) => MemberResume::Resumed(reason),
            Err(err) => MemberResume::Failed(err.to_string()),
        }
    }

    /// Whether a cold child of `member` owes it a settlement notice that
    /// `member`'s log (`events`) does not hold yet.
    async fn owed_by_children(
        &self,
        member: &SessionId,
        events: &[SessionEvent],
        rows: &[crate::tree::DescendantRow],
    ) -> bool {
        let held = crate::notice::notice_ids(events);
        for row in rows.iter().filter(|row| &row.parent_id == member) {
            let child = &row.entry.child_id;
            if row.entry.mode != ChildMode::CONTINUABLE || self.registry().get(child).is_some() {
                continue;
            }
            if let Ok(loaded) = self.store().load(child).await
                && crate::notice::owed_notice_id(child, &loaded.header, &loaded.events)
                    .is_some_and(|id| !held.contains(&id))
            {
                return true;
            }
        }
        false
    }

    /// Resume `member` as an activation under `root`, as work the runtime
    /// owns.
    async fn resume_owned(
        &self,
        root: &SessionId,
        member: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<(), SubagentError> {
        let stop = cancel.child_token();
        let ticket = self
            .admissions()
            .admit(self.registry(), root, stop.clone())?;
        let (root, member) = (root.clone(), member.clone());
        self.own(stop.clone(), |runtime| async move {
            let (activation, handle) = runtime.resume_installed(&member, &root, &stop).await?;
            runtime
                .adopt_resumed(&activation, handle.agent(), ticket)
                .await;
            Ok(())
        })
        .await
    }
}

/// Disposes a resumed root whose `resume_tree` call was dropped before it
/// could hand the root's handle over.
struct RootGuard<'a> {
    runtime: &'a SubagentRuntime,
    handle: Option<dsh_core::AgentHandle>,
}

impl Drop for RootGuard<'_> {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            self.runtime.tasks().spawn(async move {
                handle.dispose().await;
            });
        }
    }
}

/// Resuming one cold member: the gate, the resume, its installation as an
/// activation and its adoption.
impl SubagentRuntime {
    /// Hold `target`'s resume gate: one resume of a child at a time.
    ///
    /// # Cancel safety
    /// As [`ResumeGates::hold`].
    pub(crate) async fn resume_gate(
        &self,
        target: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<ResumeTurn, SubagentError> {
        self.resume_gates().hold(target, cancel).await
    }

    /// Resume a cold member; concurrent resumes of one child coalesce (the
    /// losers find it live in the registry).
    pub(crate) async fn resume_member(
        &self,
        target: &SessionId,
        root: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<Resumed, SubagentError> {
        let _turn = self.resume_gate(target, cancel).await?;
        if self.registry().get(target).is_some() {
            return Err(SubagentError::Agent(dsh_core::AgentError::AlreadyLive(
                target.clone(),
            )));
        }
        let slot = self.reserve_capacity(root).map_err(|_| {
            SubagentError::Delivery(DeliveryError::DeliveryUnavailable(target.clone()))
        })?;
        let resumed = self
            .factory()
            .resume(ResumeAgent {
                id: target.clone(),
                setup: Default::default(),
                cancel: cancel.clone(),
            })
            .await;
        match resumed {
            Ok(handle) => Ok(Resumed { handle, slot }),
            Err(dsh_core::AgentError::Cancelled) => Err(SubagentError::Cancelled),
            Err(
                err @ (dsh_core::AgentError::AlreadyLive(_)
                | dsh_core::AgentError::Store(StoreError::Busy(_) | StoreError::Locked(_))),
            ) => Err(SubagentError::Agent(err)),
            Err(err) => Err(SubagentError::Delivery(DeliveryError::NotResumable {
                id: target.clone(),
                reason: err.to_string(),
            })),
        }
    }

    /// Resume a cold `target` and deliver `message` to it, as work the
    /// runtime owns (counted as admitted below `root`): a caller that goes
    /// away cancels what is not done yet and the runtime finishes the rest.
    /// The resumed child becomes an activation only when the message was
    /// accepted; otherwise it is disposed.
    pub(crate) async fn resume_and_deliver(
        &self,
        target: &SessionId,
        root: &SessionId,
        message: UserMessage,
        into: Option<InboxTarget>,
        sender: Option<&AgentRef>,
        cancel: &CancellationToken,
    ) -> Result<MessageId, SubagentError> {
        let stop = cancel.child_token();
        let ticket = self
            .admissions()
            .admit(self.registry(), root, stop.clone())?;
        let (target, root, sender) = (target.clone(), root.clone(), sender.cloned());
        self.own(stop.clone(), |runtime| async move {
            let (activation, handle) = runtime.resume_installed(&target, &root, &stop).await?;
            let agent = handle.agent().clone();
            match runtime
                .deliver(sender.as_ref(), &root, &agent, message, into, &stop)
                .await
            {
                Ok(id) => {
                    runtime.adopt_resumed(&activation, &agent, ticket).await;
                    Ok(id)
                }
                Err(err) => {
                    // Not delivered: the resume is undone, nobody is notified.
                    runtime.uninstall(&activation);
                    handle.dispose().await;
                    Err(err)
                }
            }
        })
        .await
    }

    /// Resume a cold member as an installed (not yet launched) activation
    /// whose delivery record is written; a member that never accepted its
    /// task is refused (B54) and disposed.
    ///
    /// # Cancel safety
    /// Meant to run as work the runtime owns (`Owned`), which a caller's
    /// drop does not reach; `stop` cancels it, and every failure after the
    /// resume disposes the resumed agent, so nothing is left installed.
    pub(crate) async fn resume_installed(
        &self,
        target: &SessionId,
        root: &SessionId,
        stop: &CancellationToken,
    ) -> Result<(Arc<crate::activation::Activation>, dsh_core::AgentHandle), SubagentError> {
        let resumed = self.resume_member(target, root, stop).await?;
        let handle = resumed.handle.clone();
        let agent = handle.agent().clone();
        if !has_taken_a_task(agent.as_ref()) {
            // Cataloged, never given its task (B54): it must not take the
            // next message as one. Its creator gets the failure as a notice.
            handle.dispose().await;
            return Err(SubagentError::Delivery(DeliveryError::NotResumable {
                id: target.clone(),
                reason: "it was created but never accepted its task".into(),
            }));
        }
        let activation = self.install_resumed(target, root, resumed).await;
        self.record_resumed(&activation, &handle).await?;
        Ok((activation, handle))
    }

    /// Write an installed resumed activation's delivery record into its
    /// child's log; when that fails, the resume is undone (uninstalled and
    /// disposed).
    ///
    /// # Cancel safety
    /// Meant to run as work the runtime owns, as [`SubagentRuntime::resume_installed`].
    pub(crate) async fn record_resumed(
        &self,
        activation: &Arc<crate::activation::Activation>,
        handle: &AgentHandle,
    ) -> Result<(), SubagentError> {
        let recorded = handle
            .agent()
            .record(ACTIVATION_EVENT, activation_payload(Delivery::Parent))
            .await;
        if let Err(err) = recorded {
            self.uninstall(activation);
            handle.dispose().await;
            return Err(err.into());
        }
        Ok(())
    }

    /// Announce and monitor an installed resumed activation, let its
    /// admission go, and deliver the notices its own children owe it.
    pub(crate) async fn adopt_resumed(
        &self,
        activation: &Arc<crate::activation::Activation>,
        agent: &Arc<dyn Agent>,
        ticket: AdmissionTicket,
    ) {
        self.launch(activation);
        drop(ticket);
        // Its own tree is live again: notices its children owe it.
        if let Err(err) = self.deliver_lost_notices(agent).await {
            tracing::warn!(member = %agent.id(), "lost notices were not delivered: {err}");
        }
    }

    /// Install the resumed member `target` of `root`'s tree as an activation
    /// (not launched), named by its place in the tree and owned by its
    /// creator's exact live activation, if any.
    ///
    /// # Cancel safety
    /// A drop during the catalog reads leaves nothing installed; the
    /// resumed agent is the caller's to dispose.
    pub(crate) async fn install_resumed(
        &self,
        target: &SessionId,
        root: &SessionId,
        resumed: Resumed,
    ) -> Arc<crate::activation::Activation> {
        let (name, provider, label) = self.member_identity(target, root).await;
        let Resumed { handle, slot } = resumed;
        let agent = handle.agent().clone();
        // This activation's own events start here, whatever runs next.
        let start_seq = crate::activation::next_seq(agent.as_ref());
        let creator = agent.header().parent_session.clone();
        let parent = creator
            .as_ref()
            .and_then(|creator| self.registry().get(creator))
            .map(|creator| creator.reference())
            .unwrap_or_else(|| AgentRef {
                id: creator.unwrap_or_else(|| root.clone()),
                epoch: dsh_core::Epoch::NONE,
            });
        self.install(NewActivation {
            info: RunInfo {
                provider,
                name: name.clone(),
                label,
                child_id: target.clone(),
                parent_session_id: parent.id.clone(),
                root: root.clone(),
                local: true,
            },
            path: (name != target.as_str()).then(|| name.clone()),
            parent,
            root: root.clone(),
            delivery: Delivery::Parent,
            execution: Execution::Local {
                handle,
                start_seq,
                capture: None,
            },
            slot,
        })
    }
}
