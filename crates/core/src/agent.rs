//! The agent seam: a live agent driving one session, the factory that creates
//! and resumes agents, and the handle that owns one. Everything the subagent
//! runtime needs from an agent loop is here, so it works with any loop that
//! implements these traits. Nothing here performs I/O.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::id::{MessageId, SessionId};
use crate::message::{InboxTarget, UserMessage};
use crate::options::{AgentOptions, Composition};
use crate::session::{ExtensionPayload, SessionEvent, SessionHeader};
use crate::store::StoreError;
use crate::tool::Tool;

/// One activation of a session as a live agent. Each publication of an agent
/// in an [`AgentRegistry`](crate::registry::AgentRegistry) gets a fresh epoch;
/// a session resumed later is the same session under a new epoch.
///
/// An epoch can be read ([`Epoch::get`]), compared, hashed and displayed,
/// but only a registry mints one ([`AgentRegistry::mint_epoch`]), and the
/// registry publishes an agent only under an epoch it minted for that
/// publication. Epochs are unique within the process, across registries.
/// They live only in memory: no durable record carries one.
///
/// [`AgentRegistry::mint_epoch`]: crate::registry::AgentRegistry::mint_epoch
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(u64);

impl Epoch {
    /// The epoch no registry mints: a reference under it is never live.
    /// It names a session that has no live agent (a creator that is not
    /// live, say), and an agent object that is never published.
    pub const NONE: Epoch = Epoch(0);

    /// Mint the next epoch of the process. Only the registry calls this.
    pub(crate) fn next() -> Epoch {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Epoch(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// The epoch's number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A reference to one exact live agent: its session id AND the epoch it was
/// live in. It is live only while the registry holds that same epoch; kept
/// from an earlier epoch it is stale, though the session id matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AgentRef {
    /// The session.
    pub id: SessionId,
    /// The activation.
    pub epoch: Epoch,
}

impl fmt::Display for AgentRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.id, self.epoch)
    }
}

/// Whether an agent's driver is active.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    /// No turn is running.
    Idle,
    /// A turn (or a run of consecutive turns) is being driven.
    Running,
}

/// Why an agent's current activity was cancelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelCause {
    /// The user (or a trusted host for the user) interrupted.
    User,
    /// The agent's creator stopped it.
    Parent,
    /// A hook or policy stopped it, for the reason given.
    Hook(String),
    /// The agent is being disposed.
    Disposed,
}

/// Options for [`Agent::cancel`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CancelOptions {
    /// Keep pending inbox items, parked until a waking send arrives.
    /// Otherwise they are discarded (an `inbox/discarded` event).
    pub keep_inbox: bool,
}

/// An inbox item arrived; observers see this without consuming the item.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxArrival {
    /// The accepted message's id.
    pub message_id: MessageId,
    /// Its list.
    pub target: InboxTarget,
    /// Whether it may wake the agent.
    pub wake: bool,
    /// The source's kind tag (`user`, `agent-message`, `subagent-settled`, ...).
    pub source_kind: String,
    /// The sender the source names, if any.
    pub sender: Option<SessionId>,
}

/// Why an agent operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AgentError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A live agent already holds this session.
    #[error("session `{0}` already has a live agent")]
    AlreadyLive(SessionId),
    /// The operation was cancelled before it took effect.
    #[error("cancelled before the agent was published")]
    Cancelled,
    /// The agent has been disposed.
    #[error("agent `{0}` has been disposed")]
    Disposed(SessionId),
    /// The composition could not be built (unknown preset or tool, bad template).
    #[error("cannot compose agent: {0}")]
    Composition(String),
    /// The input cannot be accepted (images for a text-only model, say).
    #[error("input rejected: {0}")]
    InvalidInput(String),
    /// A seed that is not a contiguous, balanced prefix from seq 0.
    #[error("invalid seed: {0}")]
    InvalidSeed(String),
    /// An extension event reused a built-in type.
    #[error("event type `{0}` is reserved")]
    ReservedEventType(String),
    /// An earlier write to this agent's log failed (or its outcome is
    /// unknown), so memory and the log may disagree and the agent accepts
    /// nothing more. Carries that first store error; resume the session to
    /// go on.
    #[error("the session log failed earlier: {0}")]
    LogFailed(StoreError),
    /// [`AgentRegistry::publish`](crate::registry::AgentRegistry::publish)
    /// was handed an epoch claim another registry minted.
    #[error("agent `{0}`: the epoch was minted by another registry")]
    ForeignEpoch(SessionId),
    /// The agent to publish does not report the epoch its claim holds: an
    /// epoch already used by an earlier publication, or one taken from
    /// another agent.
    #[error("agent `{id}` reports epoch {reported}, not the epoch {claimed} minted for it")]
    EpochNotClaimed {
        /// The agent's session.
        id: SessionId,
        /// The epoch the agent reports.
        reported: Epoch,
        /// The epoch the claim holds.
        claimed: Epoch,
    },
}

impl AgentError {
    /// A stable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Store(err) => err.code(),
            Self::AlreadyLive(_) => "ALREADY_LIVE",
            Self::Cancelled => "CANCELLED",
            Self::Disposed(_) => "DISPOSED",
            Self::Composition(_) => "COMPOSITION",
            Self::InvalidInput(_) => "INVALID_INPUT",
            Self::InvalidSeed(_) => "INVALID_SEED",
            Self::ReservedEventType(_) => "RESERVED_EVENT_TYPE",
            Self::LogFailed(_) => "LOG_FAILED",
            Self::ForeignEpoch(_) => "FOREIGN_EPOCH",
            Self::EpochNotClaimed { .. } => "EPOCH_NOT_CLAIMED",
        }
    }
}

/// A live agent driving one session.
///
/// Every method is cheap and non-blocking except the `async` ones, which
/// return once their effect is durable (`send`) or observed (`wait_idle`).
#[async_trait]
pub trait Agent: Send + Sync + 'static {
    /// The session id (the agent's identity).
    fn id(&self) -> &SessionId;

    /// The activation epoch this agent object belongs to.
    fn epoch(&self) -> Epoch;

    /// The exact reference to this activation.
    fn reference(&self) -> AgentRef {
        AgentRef {
            id: self.id().clone(),
            epoch: self.epoch(),
        }
    }

    /// The session header (lineage, depth, composition).
    fn header(&self) -> &SessionHeader;

    /// The options model requests use (composition merged over the host's).
    fn options(&self) -> AgentOptions;

    /// The composition the agent runs with.
    fn composition(&self) -> &Composition {
        &self.header().composition
    }

    /// The current working directory.
    fn cwd(&self) -> PathBuf;

    /// Whether the agent's model accepts images.
    fn accepts_images(&self) -> bool;

    /// The current status.
    fn status(&self) -> AgentStatus;

    /// A receiver that sees every status transition.
    fn watch_status(&self) -> watch::Receiver<AgentStatus>;

    /// Accept `message` into the inbox list `target`, waking the driver when
    /// `wake` is set. Returns once the `inbox/accepted` event is written: the
    /// id is a durable receipt.
    ///
    /// # Errors
    /// The agent is disposed, the input is not acceptable, or the store failed.
    ///
    /// # Cancel safety
    /// Dropping the future before it completes may still accept the
    /// message (the write, once begun, finishes on its own), but never
    /// leaves the agent unusable: a later send works as if this one had
    /// completed or never started.
    async fn send(
        &self,
        message: UserMessage,
        target: InboxTarget,
        wake: bool,
    ) -> Result<MessageId, AgentError>;

    /// Queue a follow-up turn and wake: `send(message, NextTurn, true)`.
    ///
    /// # Errors
    /// As [`Agent::send`].
    ///
    /// # Cancel safety
    /// As [`Agent::send`].
    async fn followup(&self, message: UserMessage) -> Result<MessageId, AgentError> {
        self.send(message, InboxTarget::NextTurn, true).await
    }

    /// Steer the running turn at its next step, or start a turn when idle:
    /// `send(message, NextStep, true)`.
    ///
    /// # Errors
    /// As [`Agent::send`].
    ///
    /// # Cancel safety
    /// As [`Agent::send`].
    async fn steer(&self, message: UserMessage) -> Result<MessageId, AgentError> {
        self.send(message, InboxTarget::NextStep, true).await
    }

    /// Add context for the next step without waking: `send(message, NextStep, false)`.
    ///
    /// # Errors
    /// As [`Agent::send`].
    ///
    /// # Cancel safety
    /// As [`Agent::send`].
    async fn inject(&self, message: UserMessage) -> Result<MessageId, AgentError> {
        self.send(message, InboxTarget::NextStep, false).await
    }

    /// Cancel the current activity. Claimed work is never requeued; pending
    /// items are discarded, or parked until a waking send with
    /// [`CancelOptions::keep_inbox`]. With nothing running this is a no-op.
    fn cancel(&self, cause: CancelCause, options: CancelOptions);

    /// Resolve once no turn is running or about to run. An agent whose log
    /// failed goes idle too (its driver ends the turn as `error` and stops),
    /// so this never hangs on a broken agent: check [`Agent::fault`] after it.
    ///
    /// # Cancel safety
    /// Only observes; dropping it has no effect.
    async fn wait_idle(&self);

    /// The store failure that broke this agent, if one did
    /// ([`AgentError::LogFailed`] with the first error): what a waiter reads
    /// after [`Agent::wait_idle`] to tell a finished turn from a failed
    /// write. Once set it stays set for this activation; the agent then
    /// accepts no input and runs no turn, and its last turn (whose end may
    /// not be on disk) is in [`Agent::events`] as `error` with the store
    /// error as its diagnostic. The default (for agents without a log of
    /// their own) is `None`.
    fn fault(&self) -> Option<AgentError> {
        None
    }

    /// See every inbox arrival from now on.
    fn observe_inbox(&self) -> broadcast::Receiver<InboxArrival>;

    /// The ids of pending (accepted, unclaimed, not discarded) messages, in
    /// delivery order: next-step items first, then next-turn items.
    fn pending(&self) -> Vec<MessageId>;

    /// A copy of the session's events so far.
    fn events(&self) -> Vec<SessionEvent>;

    /// A copy of the events from seq `from` on (empty when there are none):
    /// what an incremental fold needs without copying the whole log.
    fn events_since(&self, from: u64) -> Vec<SessionEvent> {
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        self.events()
            .get(from..)
            .map(<[_]>::to_vec)
            .unwrap_or_default()
    }

    /// Run `visit` once on the events from seq `from` on, borrowed (an
    /// empty slice when there are none): what a reader that only looks
    /// needs, without copying them. The default lends a copy
    /// ([`Agent::events_since`]); an agent that keeps its log in memory
    /// lends the log itself, so `visit` may run while the agent's state is
    /// locked and must not call back into the agent.
    fn visit_events_since(&self, from: u64, visit: &mut dyn FnMut(&[SessionEvent])) {
        visit(&self.events_since(from));
    }

    /// A copy of the log's balanced completed-turn prefix (see
    /// [`completed_turn_prefix`](crate::session::completed_turn_prefix)),
    /// without copying what follows the last turn end.
    fn completed_prefix(&self) -> Vec<SessionEvent> {
        crate::session::completed_turn_prefix(&self.events()).to_vec()
    }

    /// Append an extension event (a type defined outside core) to the log.
    /// Returns its seq once written. The payload is already serialised
    /// ([`ExtensionPayload::new`] from the owning crate's typed record), so
    /// it is written as it is, without a JSON value tree in between.
    ///
    /// # Errors
    /// [`AgentError::ReservedEventType`] for a built-in type, or a store failure.
    ///
    /// # Cancel safety
    /// As [`Agent::send`]: a dropped call may still record the event, and
    /// the agent stays usable either way.
    async fn record(&self, kind: &str, payload: ExtensionPayload) -> Result<u64, AgentError>;

    /// The concrete agent, for hosts that know it.
    fn as_any(&self) -> &dyn Any;
}

impl fmt::Debug for dyn Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Agent({})", self.reference())
    }
}

/// Per-agent additions made before the agent is published: tools only this
/// agent gets (a structured-output capture tool, say) and template variables.
#[derive(Clone, Default)]
pub struct AgentSetup {
    /// Extra tools, visible whatever the tool restriction says.
    pub tools: Vec<Arc<dyn Tool>>,
    /// Extra persona template variables.
    pub vars: BTreeMap<String, String>,
}

impl fmt::Debug for AgentSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.tools.iter().map(|tool| tool.name()).collect();
        f.debug_struct("AgentSetup")
            .field("tools", &names)
            .field("vars", &self.vars)
            .finish()
    }
}

/// Everything needed to create a fresh agent.
#[derive(Debug, Clone)]
pub struct CreateAgent {
    /// The header to write (its id is the new agent's identity).
    pub header: SessionHeader,
    /// Events to start the log with (a fork's completed-turn prefix), seqs
    /// from 0; `header.seed_len` is set from it.
    pub seed: Vec<SessionEvent>,
    /// Per-agent additions.
    pub setup: AgentSetup,
    /// Cancels creation until the agent is published; ignored afterwards.
    pub cancel: CancellationToken,
}

/// Everything needed to resume a persisted agent.
#[derive(Debug, Clone)]
pub struct ResumeAgent {
    /// The session to resume.
    pub id: SessionId,
    /// Per-agent additions (not persisted: give them again on every resume).
    pub setup: AgentSetup,
    /// Cancels the resume until the agent is published; ignored afterwards.
    pub cancel: CancellationToken,
}

/// Disposal of an owned agent.
#[async_trait]
pub trait Dispose: Send + Sync {
    /// Stop the agent, wait for its driver to exit, and unpublish it.
    /// Idempotent.
    ///
    /// # Cancel safety
    /// An implementation must leave the agent either still live and usable
    /// or stopped; dispose again to finish.
    async fn dispose(&self);
}

/// An owned live agent: the holder alone can dispose it. Dropping the handle
/// does not dispose the agent.
#[derive(Clone)]
pub struct AgentHandle {
    agent: Arc<dyn Agent>,
    disposer: Arc<dyn Dispose>,
}

impl AgentHandle {
    /// Pair an agent with its disposer.
    pub fn new(agent: Arc<dyn Agent>, disposer: Arc<dyn Dispose>) -> Self {
        Self { agent, disposer }
    }

    /// The agent.
    pub fn agent(&self) -> &Arc<dyn Agent> {
        &self.agent
    }

    /// Dispose the agent (idempotent).
    ///
    /// # Cancel safety
    /// As [`Dispose::dispose`].
    pub async fn dispose(&self) {
        self.disposer.dispose().await;
    }
}

impl fmt::Debug for AgentHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AgentHandle({})", self.agent.reference())
    }
}

/// Creates and resumes agents; the seam between the subagent runtime and an
/// agent loop.
#[async_trait]
pub trait AgentFactory: Send + Sync + 'static {
    /// Create a fresh agent and its log, and publish it in the registry.
    /// If `spec.cancel` fires or any step fails before publication, nothing
    /// is left behind: no log, no registry entry, no task.
    ///
    /// # Errors
    /// [`AgentError::Cancelled`], a composition or seed error, or a store failure.
    ///
    /// # Cancel safety
    /// Dropping the future before it returns must leave no live agent; a
    /// log it had already written may remain (cancel through `spec.cancel`
    /// to have it rolled back).
    async fn create(&self, spec: CreateAgent) -> Result<AgentHandle, AgentError>;

    /// Resume a persisted agent under a new epoch. Pending inbox items
    /// (accepted minus claimed minus discarded) are restored; if any may
    /// wake, a turn starts after publication. A turn that was in flight when
    /// the log stopped is closed as `aborted`.
    ///
    /// # Errors
    /// [`AgentError::AlreadyLive`], [`AgentError::Cancelled`], or a store failure.
    ///
    /// # Cancel safety
    /// Dropping the future before it returns must leave no live agent and
    /// the log closed (reopenable); a repair it had begun to write (closing
    /// the interrupted turn) may be on disk, and is idempotent.
    async fn resume(&self, spec: ResumeAgent) -> Result<AgentHandle, AgentError>;

    /// The registry agents are published in.
    fn registry(&self) -> &crate::registry::AgentRegistry;
}
