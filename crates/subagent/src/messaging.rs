//! Messaging within one tree: an agent's message to another member
//! (delivered to a running target at its next step, to an idle one as a new
//! turn, to a cold one after resuming it under the live root), and
//! interrupts under user or exact-ancestor authority. Authority is checked
//! on facts (the registry's exact epochs, the headers' lineage), never on
//! what a name resolved to.

use crate::{AdmissionError, DeliveryError, InfraError};
use std::sync::Arc;

use dsh_core::{
    Agent, AgentError, AgentRef, AgentStatus, AttachmentId, CancelCause, CancelOptions,
    CancellationToken, ContentBlock, EventPayload, InboxTarget, MessageId, MessageSource,
    SessionId, StoreError, UserMessage,
};

use crate::catalog::{CatalogEntry, ChildMode};
use crate::error::SubagentError;
use crate::ids::Claim;
use crate::runtime::SubagentRuntime;

/// How far up a lineage the runtime walks before calling it a cycle.
pub(crate) const MAX_LINEAGE: usize = 256;

/// How many times a delivery races a target's teardown before giving up.
const RETRIES: usize = 8;

/// How long a delivery waits for a target's teardown to finish.
const DEPARTURE_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

/// A user request id being delivered, released on drop.
pub(crate) struct RequestInFlight {
    _claim: Claim<(SessionId, MessageId)>,
}

impl RequestInFlight {
    /// Hold request `id` for `child`.
    ///
    /// # Errors
    /// `INVALID_REQUEST` when it is being delivered already.
    pub(crate) fn claim(
        runtime: &SubagentRuntime,
        child: &SessionId,
        id: &MessageId,
    ) -> Result<Self, SubagentError> {
        runtime
            .requests()
            .claim((child.clone(), id.clone()))
            .map(|claim| Self { _claim: claim })
            .ok_or_else(|| {
                SubagentError::Admission(AdmissionError::InvalidRequest(format!(
                    "request `{id}` for `{child}` is already being delivered"
                )))
            })
    }
}

/// The provider of a member whose creator's catalog cannot be read.
pub(crate) fn unknown_provider() -> String {
    "unknown".into()
}

/// Decides whether a remote caller may act on a session (the user-authored
/// prompt and interrupt are checked on the child's own session, before any
/// work).
pub trait SessionAuthoriser: Send + Sync {
    /// Allow or refuse; the text says why a refusal happened.
    ///
    /// # Errors
    /// The refusal.
    fn authorise(&self, session: &SessionId) -> Result<(), String>;
}

/// An authoriser for a trusted local host: everything is allowed.
#[derive(Debug, Clone, Copy, Default)]
pub struct TrustedHost;

impl SessionAuthoriser for TrustedHost {
    fn authorise(&self, _session: &SessionId) -> Result<(), String> {
        Ok(())
    }
}

/// Which inbox list a user-authored prompt joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptDelivery {
    /// A later turn.
    Queue,
    /// The nearest step of a running turn (or a new turn when idle).
    Steer,
}

/// A user-authored message to one child of a tree.
#[derive(Debug, Clone)]
pub struct UserPrompt {
    /// The child's session.
    pub child: SessionId,
    /// The caller-minted id the accepted message keeps.
    pub request_id: MessageId,
    /// What the user says; its image parts are admitted through the
    /// runtime's attachment store.
    pub content: Vec<ContentBlock>,
    /// Objects the client uploaded to the attachment store for this
    /// message, shown after the content.
    pub attachments: Vec<AttachmentId>,
    /// The IANA time zone the client sampled for this prompt (`UTC` or an
    /// `Area/Location` name), validated and recorded on the message.
    pub client_time_zone: Option<String>,
    /// Queue or steer.
    pub delivery: PromptDelivery,
}

impl From<PromptDelivery> for InboxTarget {
    fn from(delivery: PromptDelivery) -> Self {
        match delivery {
            PromptDelivery::Queue => Self::NextTurn,
            PromptDelivery::Steer => Self::NextStep,
        }
    }
}

/// Under whose authority an interrupt is made.
#[derive(Clone)]
pub enum InterruptAuthority {
    /// A trusted host operation on the user's behalf.
    User,
    /// An exact live agent in the target's creation ancestry.
    Ancestor(Arc<dyn Agent>),
}

impl SubagentRuntime {
    /// The parent session of `id`, from its live agent or its stored header.
    pub(crate) async fn parent_of(
        &self,
        id: &SessionId,
    ) -> Result<Option<SessionId>, SubagentError> {
        if let Some(agent) = self.registry().get(id) {
            return Ok(agent.header().parent_session.clone());
        }
        // A header never changes once written: each is read once.
        if let Some(parent) = self.cold().parent(id) {
            return Ok(parent);
        }
        let parent = self.store().header(id).await?.parent_session;
        self.cold().learn_parent(id, parent.clone());
        Ok(parent)
    }

    /// Whether `ancestor` is in `target`'s creation lineage (not `target` itself).
    async fn is_ancestor(
        &self,
        ancestor: &SessionId,
        target: &SessionId,
    ) -> Result<bool, SubagentError> {
        let mut current = target.clone();
        for _ in 0..MAX_LINEAGE {
            match self.parent_of(&current).await? {
                Some(parent) if &parent == ancestor => return Ok(true),
                Some(parent) => current = parent,
                None => return Ok(false),
            }
        }
        Ok(false)
    }

    /// Whether `target` is an external child recorded in a catalog of
    /// `root`'s tree. Only asked when `target` has no session, so the walk
    /// runs on the refusal path alone.
    async fn is_external_member(
        &self,
        root: &SessionId,
        target: &SessionId,
        cancel: &CancellationToken,
    ) -> bool {
        self.list_descendants(root, cancel).await.is_ok_and(|rows| {
            rows.iter()
                .any(|row| &row.entry.child_id == target && row.entry.mode == ChildMode::EXTERNAL)
        })
    }

    /// The mode `target`'s creator recorded for it.
    async fn mode_of(&self, target: &SessionId) -> Result<Option<ChildMode>, SubagentError> {
        let Some(parent) = self.parent_of(target).await? else {
            return Ok(None);
        };
        let entry = self
            .catalog_entry(&parent, target)
            .await
            .map_err(|unreadable| unreadable.error)?;
        Ok(entry.map(|entry| entry.mode))
    }

    /// The catalog entry of `target` as a member of `root`'s tree, found
    /// without listing the tree: from `root`'s own catalog for a direct
    /// child, else from the catalog of the creator its stored header names,
    /// once its lineage is seen to reach `root`. The reads grow with the
    /// target's depth, never with the tree's size. `None` when `target` is
    /// `root`, or provably not a cataloged member (its lineage ends
    /// elsewhere, or its creator's catalog does not list it).
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND` when `target` has no session of its own and is
    /// not a direct child of `root` (an external child deeper down, or an
    /// unknown id: only the catalogs know those); the store or catalog
    /// error of a header or catalog that cannot be read; `LINEAGE_CYCLE`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads headers and catalogs.
    pub async fn member_entry(
        &self,
        root: &SessionId,
        target: &SessionId,
    ) -> Result<Option<CatalogEntry>, SubagentError> {
        if target == root {
            return Ok(None);
        }
        if let Some(entry) = self.child_entry(root, target).await? {
            return Ok(Some(entry));
        }
        let Some(creator) = self.parent_of(target).await? else {
            return Ok(None);
        };
        if &creator == root || !self.is_ancestor(root, &creator).await? {
            return Ok(None);
        }
        self.child_entry(&creator, target).await
    }

    /// Deliver a model-authored message from `sender` to another member of
    /// its tree. Returns the accepted message's id. The caller's token
    /// governs only the work before the target's inbox accepts the message.
    ///
    /// # Errors
    /// `NOT_LIVE` (sender), `MESSAGE_TO_SELF`, `NOT_IN_TREE`,
    /// `EXTERNAL_TARGET`, `NOT_MESSAGEABLE` (a one-shot target),
    /// `NOT_RESUMABLE`, `DELIVERY_UNAVAILABLE`, `CANCELLED`.
    ///
    /// # Cancel safety
    /// The checks (registry, lineage and catalog reads) have no effect, so a
    /// drop during them leaves nothing. A drop during delivery to a live
    /// target may still leave the message accepted (as `Agent::send` says).
    /// A drop during a cold target's resume cancels it: the runtime then
    /// finishes the work it owns, and the child is either cold again with
    /// no message, or resumed, holding the message, and monitored.
    pub async fn send_message(
        &self,
        sender: &Arc<dyn Agent>,
        target: &SessionId,
        content: Vec<ContentBlock>,
        cancel: &CancellationToken,
    ) -> Result<MessageId, SubagentError> {
        let sender_ref = sender.reference();
        if !self.registry().is_live(&sender_ref) {
            return Err(SubagentError::Delivery(DeliveryError::NotLive(
                sender_ref.id,
            )));
        }
        if target == sender.id() {
            return Err(DeliveryError::MessageToSelf.into());
        }
        let root = self.root_id(sender.id());
        self.check_admission(&root)?;
        if target != &root {
            // A direct child of the root is known, with its mode, from the
            // root's own catalog (in memory while the root is live): its
            // header need not be read.
            let mode = match self.child_entry(&root, target).await? {
                Some(entry) => entry.mode,
                None => self.deeper_member_mode(&root, target, cancel).await?,
            };
            match mode.as_str() {
                "continuable" => {}
                "external" => {
                    return self
                        .continue_external(&sender_ref, &root, target, content, cancel)
                        .await;
                }
                _ => {
                    return Err(DeliveryError::NotMessageable(target.clone()).into());
                }
            }
        }
        if cancel.is_cancelled() {
            return Err(SubagentError::Cancelled);
        }
        let message = UserMessage::new(
            content,
            MessageSource::AgentMessage {
                sender_session_id: sender.id().clone(),
            },
        );
        self.deliver_with_resume(target, &root, message, None, Some(&sender_ref), cancel)
            .await
    }

    /// The mode of `target`, a member of `root`'s tree below the root's
    /// direct children: its lineage (stored headers) must reach `root`, and
    /// its creator's catalog gives the mode. An external child has no
    /// session, so only a listing of the tree finds it (`external`).
    ///
    /// # Errors
    /// `NOT_IN_TREE` when the lineage ends elsewhere; `NOT_MESSAGEABLE`
    /// when the creator's catalog does not list it; a store or catalog
    /// error along the way.
    async fn deeper_member_mode(
        &self,
        root: &SessionId,
        target: &SessionId,
        cancel: &CancellationToken,
    ) -> Result<ChildMode, SubagentError> {
        let member = match self.is_ancestor(root, target).await {
            Ok(member) => member,
            Err(SubagentError::Agent(dsh_core::AgentError::Store(StoreError::NotFound(_)))) => {
                // An external child has no session of its own: only its
                // creator's catalog knows it, so the lineage walk cannot.
                if self.is_external_member(root, target, cancel).await {
                    return Ok(ChildMode::EXTERNAL);
                }
                false
            }
            Err(err) => return Err(err),
        };
        if !member {
            return Err(DeliveryError::NotInTree(target.clone()).into());
        }
        self.mode_of(target)
            .await?
            .ok_or_else(|| DeliveryError::NotMessageable(target.clone()).into())
    }

    /// Hand `message` to `target`, resuming it under `root` when it is cold.
    /// `into` picks the inbox list; `None` steers a running target and
    /// queues for an idle one. A target torn down while we deliver is cold
    /// a moment later: try again a few times before giving up.
    pub(crate) async fn deliver_with_resume(
        &self,
        target: &SessionId,
        root: &SessionId,
        message: UserMessage,
        into: Option<InboxTarget>,
        sender: Option<&AgentRef>,
        cancel: &CancellationToken,
    ) -> Result<MessageId, SubagentError> {
        let mut last = None;
        for _ in 0..RETRIES {
            let outcome = match self.registry().get(target) {
                Some(agent) => {
                    let activation = self.activations().get(target);
                    let permit = match &activation {
                        Some(activation) => match activation.admit_input().await {
                            Some(permit) => Some(permit),
                            None => {
                                // It takes no more input; its resume will.
                                self.wait_for_departure(target).await;
                                continue;
                            }
                        },
                        None => None,
                    };
                    let outcome = self
                        .deliver(sender, root, &agent, message.clone(), into, cancel)
                        .await;
                    if outcome.is_ok()
                        && let Some(permit) = permit
                    {
                        permit.delivered();
                    }
                    outcome
                }
                None => {
                    self.resume_and_deliver(target, root, message.clone(), into, sender, cancel)
                        .await
                }
            };
            match outcome {
                Err(SubagentError::Agent(err @ AgentError::AlreadyLive(_))) => {
                    // Someone else resumed it: deliver to that one.
                    last = Some(SubagentError::Agent(err));
                }
                Err(SubagentError::Agent(
                    err @ (AgentError::Disposed(_)
                    | AgentError::Store(StoreError::Busy(_) | StoreError::Locked(_))),
                )) => {
                    last = Some(SubagentError::Agent(err));
                    self.wait_for_departure(target).await;
                }
                outcome => return outcome,
            }
        }
        Err(last.unwrap_or_else(|| {
            SubagentError::Delivery(DeliveryError::DeliveryUnavailable(target.clone()))
        }))
    }

    /// Wait (bounded) until an agent being torn down has left the registry,
    /// which happens only after it released its log.
    async fn wait_for_departure(&self, target: &SessionId) {
        let (_subscription, mut events) = self.registry().events().subscribe();
        let gone = async {
            while self.registry().get(target).is_some() {
                if events.recv().await.is_none() {
                    return;
                }
            }
        };
        // The bound only turns a stuck teardown into a delivery error.
        let _ = tokio::time::timeout(DEPARTURE_BOUND, gone).await;
        tokio::task::yield_now().await;
    }

    /// Recheck the sender and the root, then hand the message to the target.
    pub(crate) async fn deliver(
        &self,
        sender: Option<&AgentRef>,
        root: &SessionId,
        agent: &Arc<dyn Agent>,
        message: UserMessage,
        into: Option<InboxTarget>,
        cancel: &CancellationToken,
    ) -> Result<MessageId, SubagentError> {
        if let Some(sender) = sender
            && !self.registry().is_live(sender)
        {
            return Err(SubagentError::Delivery(DeliveryError::NotLive(
                sender.id.clone(),
            )));
        }
        if self.registry().get(root).is_none() {
            return Err(SubagentError::Delivery(DeliveryError::NotLive(
                root.clone(),
            )));
        }
        if cancel.is_cancelled() {
            return Err(SubagentError::Cancelled);
        }
        let into = into.unwrap_or(match agent.status() {
            AgentStatus::Running => InboxTarget::NextStep,
            AgentStatus::Idle => InboxTarget::NextTurn,
        });
        match agent.send(message, into, true).await {
            Ok(id) => Ok(id),
            Err(dsh_core::AgentError::InvalidInput(reason)) => Err(SubagentError::Admission(
                AdmissionError::InvalidRequest(reason),
            )),
            Err(err) => Err(err.into()),
        }
    }

    /// The root of the tree `member` belongs to, by its stored lineage.
    async fn lineage_root(&self, member: &SessionId) -> Result<SessionId, SubagentError> {
        let mut current = member.clone();
        for _ in 0..MAX_LINEAGE {
            match self.parent_of(&current).await? {
                Some(parent) => current = parent,
                None => return Ok(current),
            }
        }
        Err(InfraError::LineageCycle(member.clone()).into())
    }

    /// Deliver a whole host-built message (its own id, content and source,
    /// a `team-message` say) to a continuable child, with exactly the
    /// admission, authority and idempotency of [`SubagentRuntime::prompt`]:
    /// authorised on the child's session before any work, through its live
    /// tree root, the message id an idempotency key (a message the child's
    /// log already holds is not delivered again; one in flight is refused),
    /// resuming the child as an activation the runtime owns when it is
    /// cold. `prompt` is this with a `user` source.
    ///
    /// # Errors
    /// As [`SubagentRuntime::prompt`].
    ///
    /// # Cancel safety
    /// As [`SubagentRuntime::prompt`]: the awaits before delivery are reads
    /// (lineage, catalog, the child's log) with no effect, so a drop there
    /// leaves nothing; a drop while a live child accepts the message may
    /// leave it accepted (as `Agent::send` says); a drop during a cold
    /// child's resume cancels it, and the runtime then either undoes the
    /// resume (the child cold again, without the message) or finishes it
    /// (resumed, holding the message once, and monitored).
    pub async fn deliver_whole(
        &self,
        child: &SessionId,
        message: UserMessage,
        delivery: PromptDelivery,
        authoriser: &dyn SessionAuthoriser,
        cancel: &CancellationToken,
    ) -> Result<MessageId, SubagentError> {
        let root = self.check_user_delivery(child, authoriser).await?;
        // The message id is an idempotency key: a repeat of an accepted
        // message is not delivered again, and one in flight is refused.
        let _in_flight = RequestInFlight::claim(self, child, &message.id)?;
        if self.was_accepted(child, &message.id).await? {
            return Ok(message.id);
        }
        self.deliver_with_resume(child, &root, message, Some(delivery.into()), None, cancel)
            .await
    }

    /// The checks of a user-authored delivery to `child`, before any work:
    /// authorised on its session, a child (not a root) of a live root that
    /// is not draining, and continuable. Returns the root.
    pub(crate) async fn check_user_delivery(
        &self,
        child: &SessionId,
        authoriser: &dyn SessionAuthoriser,
    ) -> Result<SessionId, SubagentError> {
        authoriser
            .authorise(child)
            .map_err(|text| SubagentError::from(DeliveryError::Unauthorized(text)))?;
        let root = self.lineage_root(child).await?;
        if &root == child {
            return Err(DeliveryError::NotAChild(child.clone()).into());
        }
        if self.registry().get(&root).is_none() {
            return Err(SubagentError::Delivery(DeliveryError::NotLive(root)));
        }
        self.check_admission(&root)?;
        match self.mode_of(child).await?.as_ref().map(ChildMode::as_str) {
            Some("continuable") => Ok(root),
            _ => Err(DeliveryError::NotMessageable(child.clone()).into()),
        }
    }

    /// Whether `child`'s log already holds an accepted message `id`.
    pub(crate) async fn was_accepted(
        &self,
        child: &SessionId,
        id: &MessageId,
    ) -> Result<bool, SubagentError> {
        let events = match self.registry().get(child) {
            Some(agent) => agent.events(),
            None => self.store().load(child).await?.events,
        };
        Ok(events.iter().any(|event| {
            matches!(&event.payload, EventPayload::InboxAccepted(accepted) if &accepted.message.id == id)
        }))
    }

    /// Interrupt a child for the user, authorised on its session first.
    ///
    /// # Errors
    /// `UNAUTHORIZED` when the authoriser refuses.
    ///
    /// # Cancel safety
    /// As [`SubagentRuntime::interrupt`].
    pub async fn interrupt_by_user(
        &self,
        child: &SessionId,
        authoriser: &dyn SessionAuthoriser,
    ) -> Result<(), SubagentError> {
        authoriser
            .authorise(child)
            .map_err(|text| SubagentError::from(DeliveryError::Unauthorized(text)))?;
        self.interrupt(child, &InterruptAuthority::User).await
    }

    /// Interrupt one member's current execution. Returns before the target
    /// stops; pending input stays parked, and the activation and its
    /// descendants are kept. An absent or settled target is a no-op.
    ///
    /// # Errors
    /// `UNAUTHORIZED` unless the authority is the user or an exact live
    /// ancestor of the target (checked even when the target is absent).
    ///
    /// # Cancel safety
    /// The lineage reads of the authority check come before any effect; a
    /// drop there interrupts nothing. The interrupt itself is synchronous;
    /// a drop during the [`crate::PARKED_EVENT`] record written after it
    /// leaves the member interrupted and parked in this process, parked
    /// across a restart only if the record landed.
    ///
    /// # Errors (the record)
    /// The store error when the [`crate::PARKED_EVENT`] record cannot be
    /// written (the interrupt took effect).
    pub async fn interrupt(
        &self,
        target: &SessionId,
        authority: &InterruptAuthority,
    ) -> Result<(), SubagentError> {
        let cause = match authority {
            InterruptAuthority::User => CancelCause::User,
            InterruptAuthority::Ancestor(agent) => {
                let reference = agent.reference();
                let authorised = self.registry().is_live(&reference)
                    && &reference.id != target
                    && matches!(self.is_ancestor(&reference.id, target).await, Ok(true));
                if !authorised {
                    return Err(DeliveryError::NotAncestor(target.clone()).into());
                }
                CancelCause::Parent
            }
        };
        if let Some(agent) = self.registry().get(target) {
            self.park(target);
            agent.cancel(cause, CancelOptions { keep_inbox: true });
            // Parked across a restart too (`resume_tree` leaves it parked).
            agent
                .record(crate::resume::PARKED_EVENT, serde_json::json!({}).into())
                .await?;
        }
        Ok(())
    }
}
