//! The reference agent loop. A [`LoopAgent`] owns one session: an inbox of
//! two ordered lists (next turn, next step) whose every change is a durable
//! event, and a driver task that runs turns while waking input is pending.
//! A turn claims its input, asks the model, runs the tools it calls, appends
//! every model-visible fact to the log, and repeats step by step until the
//! model stops; steering joins at the next step boundary. What a turn
//! writes is decided by the [`TurnMachine`](crate::turn::TurnMachine); this
//! module owns the agent's state and its host (`local`, the
//! [`Effects`](crate::turn::Effects) of the agent's log, inbox, model, tools
//! and the harness's clock). The agent never
//! acknowledges input before its `inbox/accepted` event is written, and no
//! driver outlives [`LoopAgent::dispose`]. Once begun, a write and its
//! application to memory finish together (in the caller's future, and on
//! the agent's task tracker if that is dropped), so a dropped caller can
//! never leave memory and the log disagreeing; a failed
//! write ends the turn as `error` and is kept as the agent's
//! [`fault`](Agent::fault), never only logged.

use std::any::Any;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use async_trait::async_trait;
use dsh_core::message::Transcript;
use dsh_core::projection::{PendingItem, Projection, TranscriptProjection};
use dsh_core::session::{InboxAccepted, InboxIds, TurnEnd, TurnStart};
use dsh_core::{
    Agent, AgentError, AgentHandle, AgentOptions, AgentStatus, CancelCause, CancelOptions,
    CancellationToken, ContentBlock, Dispose, Epoch, EpochClaim, EventPayload, ExtensionPayload,
    InboxArrival, InboxTarget, MessageId, Model, SessionEvent, SessionHeader, SessionId,
    SessionLog, StopReason, StoreError, Usage, UserMessage,
};
use tokio::sync::{broadcast, watch};

use crate::chunked::Chunked;
use crate::finish::Finish;
use crate::harness::{Composed, Shared};
use crate::tools::ScopedTools;
use crate::turn::{self, open_turn};

mod local;

use local::Local;

/// How many inbox arrivals an observer may fall behind before it misses some.
const ARRIVAL_BUFFER: usize = 64;

/// State rebuilt from a log before an agent goes live.
pub(crate) struct Restored {
    pub(crate) events: Vec<SessionEvent>,
    pub(crate) pending: Vec<PendingItem>,
    pub(crate) turns: u64,
}

struct State {
    /// The log: the one copy of it the agent keeps, in chunks so that a
    /// write never copies the history.
    events: Chunked<SessionEvent>,
    /// The model-visible conversation, projected from `events` when the
    /// first turn of this activation starts and from then on kept up to
    /// date by each write, so no step or turn replays the history; shared
    /// in chunks with each model request. `None` until the first turn, so
    /// an agent that never runs holds its log once.
    transcript: Option<Transcript>,
    next_turn: VecDeque<PendingItem>,
    next_step: VecDeque<PendingItem>,
    /// A driver task exists (running turns or about to).
    driver: bool,
    /// Pending input waits for a waking send (after a keep-inbox cancel).
    parked: bool,
    disposed: bool,
    /// The store failed; the log may no longer match memory.
    broken: Option<StoreError>,
    /// Ids a discarding cancel took out of the inbox whose `inbox/discarded`
    /// is not written yet: the next write (or disposal) writes it first, so
    /// nothing later in the log can precede it.
    discards: Vec<MessageId>,
    turn_cancel: Option<CancellationToken>,
    turns: u64,
    usage: Usage,
}

impl State {
    fn has_waking_input(&self) -> bool {
        self.next_turn
            .iter()
            .chain(&self.next_step)
            .any(|item| item.wake)
    }

    /// Take all next-step input plus, at a turn boundary, one next-turn item.
    fn claim(&mut self, turn_boundary: bool) -> Vec<PendingItem> {
        let mut batch: Vec<PendingItem> = self.next_step.drain(..).collect();
        if turn_boundary && let Some(item) = self.next_turn.pop_front() {
            batch.push(item);
        }
        batch
    }
}

/// Where an agent stands with the registry.
enum Publication {
    /// Built, not yet published: the claim on its epoch.
    Claimed(EpochClaim),
    /// Live: the only handle that withdraws it.
    Live(dsh_core::Publication),
    /// Withdrawn, or never to be published.
    Over,
}

/// The log handle, behind the lock that orders writes.
type LogSlot = Arc<tokio::sync::Mutex<Option<Arc<dyn SessionLog>>>>;

/// The reference [`Agent`]: a session driven by the harness loop.
pub struct LoopAgent {
    header: SessionHeader,
    epoch: Epoch,
    /// The claim on `epoch` until publication, then the publication, which
    /// only disposal withdraws.
    publication: Mutex<Publication>,
    shared: Arc<Shared>,
    model: Arc<dyn Model>,
    options: AgentOptions,
    tools: ScopedTools,
    system: String,
    state: Mutex<State>,
    /// Serialises appends so that seqs reach the store in order; a commit
    /// hands its guard to the task that writes.
    log: LogSlot,
    status: watch::Sender<AgentStatus>,
    /// Created by the first observer, so an unobserved agent pays nothing.
    arrivals: std::sync::OnceLock<broadcast::Sender<InboxArrival>>,
    /// Cancelled on disposal; every turn's token is its child.
    lifetime: CancellationToken,
    this: Weak<LoopAgent>,
}

impl std::fmt::Debug for LoopAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopAgent")
            .field("id", &self.header.id)
            .field("epoch", &self.epoch)
            .field("status", &*self.status.borrow())
            .finish_non_exhaustive()
    }
}

impl LoopAgent {
    pub(crate) fn new(
        shared: Arc<Shared>,
        header: SessionHeader,
        composed: Composed,
        log: Arc<dyn SessionLog>,
        restored: Restored,
    ) -> Arc<Self> {
        let claim = shared.registry.mint_epoch();
        let epoch = claim.epoch();
        let mut next_turn = VecDeque::new();
        let mut next_step = VecDeque::new();
        for item in restored.pending {
            match item.target {
                InboxTarget::NextTurn => next_turn.push_back(item),
                InboxTarget::NextStep => next_step.push_back(item),
            }
        }
        Arc::new_cyclic(|this| Self {
            header,
            epoch,
            publication: Mutex::new(Publication::Claimed(claim)),
            shared,
            model: composed.model,
            options: composed.options,
            tools: composed.tools,
            system: composed.system,
            state: Mutex::new(State {
                events: Chunked::from(restored.events),
                transcript: None,
                next_turn,
                next_step,
                driver: false,
                parked: false,
                disposed: false,
                broken: None,
                discards: Vec::new(),
                turn_cancel: None,
                turns: restored.turns,
                usage: Usage::default(),
            }),
            log: Arc::new(tokio::sync::Mutex::new(Some(log))),
            status: watch::Sender::new(AgentStatus::Idle),
            arrivals: std::sync::OnceLock::new(),
            lifetime: CancellationToken::new(),
            this: this.clone(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn header_id(&self) -> SessionId {
        self.header.id.clone()
    }

    /// Publish in the registry and hand out the owner's handle. The agent
    /// keeps the publication; disposal withdraws it.
    pub(crate) fn publish(self: &Arc<Self>) -> Result<AgentHandle, AgentError> {
        let mut slot = self.publication();
        let Publication::Claimed(claim) = std::mem::replace(&mut *slot, Publication::Over) else {
            return Err(AgentError::Disposed(self.header.id.clone()));
        };
        let publication = self.shared.registry.publish(claim, self.clone())?;
        *slot = Publication::Live(publication);
        drop(slot);
        Ok(AgentHandle::new(self.clone(), self.clone()))
    }

    fn publication(&self) -> MutexGuard<'_, Publication> {
        self.publication
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// After a resume: start a turn if restored input may wake the agent.
    pub(crate) fn wake_restored(self: &Arc<Self>) {
        let mut state = self.state();
        if state.has_waking_input() {
            self.start_driver(&mut state);
        }
    }

    /// Release the log (the store's writer lock included, awaited through
    /// [`SessionLog::close`]) without touching the registry: used when
    /// creation or a resume is rolled back.
    pub(crate) async fn release_log(&self) {
        self.state().disposed = true;
        self.lifetime.cancel();
        let log = self.log.lock().await.take();
        if let Some(log) = log {
            log.close().await;
        }
    }

    /// Total token usage of this activation.
    pub fn usage(&self) -> Usage {
        self.state().usage
    }

    /// The model-visible system prompt.
    pub fn system_prompt(&self) -> &str {
        &self.system
    }

    /// The tools this agent's model is shown.
    pub fn tools(&self) -> &ScopedTools {
        &self.tools
    }

    /// Stop the driver, wait for it to exit, write what a discarding
    /// interrupt left unwritten, close the log (the store's writer lock is
    /// released when this returns) and leave the registry. Idempotent;
    /// pending input stays in the log for a resume. A failure to write the
    /// discards is kept as the agent's [`fault`](Agent::fault).
    ///
    /// # Cancel safety
    /// The work runs in this future's poll (no task hop, so an idle agent is
    /// disposed without waking another worker), and dropping the future at
    /// any await hands the rest to the harness's task tracker, where it
    /// goes on to its end: the agent is then gone (or about to be) exactly
    /// as if this had returned; calling `dispose` again waits for it.
    pub async fn dispose(&self) {
        {
            let mut state = self.state();
            state.disposed = true;
            if let Some(turn) = &state.turn_cancel {
                turn.cancel();
            }
        }
        self.lifetime.cancel();
        match self.this.upgrade() {
            // In place, and finished on the tracker if this is dropped.
            Some(this) => Finish::new(this.finish_disposal(), &self.shared.tasks).await,
            // Only while the last reference is being dropped; nothing else
            // can observe the agent then.
            None => self.finish_disposal_inline().await,
        }
    }

    async fn finish_disposal(self: Arc<Self>) {
        self.finish_disposal_inline().await;
    }

    async fn finish_disposal_inline(&self) {
        self.wait_idle().await;
        let mut guard = self.log.lock().await;
        if let Some(log) = guard.as_ref() {
            // Errors are kept in `broken`, which `fault` reports.
            let _ = self
                .write_and_apply(log.as_ref(), Vec::new(), |_, _| ())
                .await;
        }
        let log = guard.take();
        drop(guard);
        if let Some(log) = log {
            log.close().await;
        }
        let publication = std::mem::replace(&mut *self.publication(), Publication::Over);
        if let Publication::Live(publication) = publication {
            publication.withdraw();
        }
    }

    /// Append events built from `payloads` (after any pending discard);
    /// then apply them and `after` to the state. Appends are serialised so
    /// seqs reach the store in order.
    ///
    /// # Cancel safety
    /// Dropped while waiting for the ordering lock, nothing happened. Once
    /// the lock is held the write and its application run as one step that
    /// a drop cannot split (in this future, without a task hop, and on the
    /// tracker from the drop on): the events and `after` are then applied
    /// (or the agent is broken) as if the call had returned.
    async fn commit<R: Send + 'static>(
        &self,
        payloads: Vec<EventPayload>,
        after: impl FnOnce(&LoopAgent, &mut State) -> R + Send + 'static,
    ) -> Result<R, AgentError> {
        let guard = self.log.clone().lock_owned().await;
        let Some(this) = self.this.upgrade() else {
            return Err(AgentError::Disposed(self.header.id.clone()));
        };
        // Polled in place (no task hop when the write completes at once);
        // a drop hands the rest to the tracker.
        Finish::new(
            async move {
                let Some(log) = guard.as_ref() else {
                    return Err(AgentError::Disposed(this.header.id.clone()));
                };
                this.write_and_apply(log.as_ref(), payloads, after).await
            },
            &self.shared.tasks,
        )
        .await
    }

    /// [`commit`](Self::commit) for the driver's own writes, without the
    /// task hop: the driver is a task on the tracker that nothing drops
    /// mid-turn (only a runtime shutting down drops it, which would drop a
    /// spawned write just the same), so its write and application already
    /// run as one step that no caller can split.
    ///
    /// # Cancel safety
    /// Only the driver calls it; dropped while waiting for the ordering
    /// lock, nothing happened, and after that the driver is not dropped.
    async fn driver_commit<R>(
        &self,
        payloads: Vec<EventPayload>,
        after: impl FnOnce(&LoopAgent, &mut State) -> R,
    ) -> Result<R, AgentError> {
        let guard = self.log.lock().await;
        let Some(log) = guard.as_ref() else {
            return Err(AgentError::Disposed(self.header.id.clone()));
        };
        self.write_and_apply(log.as_ref(), payloads, after).await
    }

    /// The write-and-apply step; the caller holds the ordering lock.
    async fn write_and_apply<R>(
        &self,
        log: &dyn SessionLog,
        mut payloads: Vec<EventPayload>,
        after: impl FnOnce(&LoopAgent, &mut State) -> R,
    ) -> Result<R, AgentError> {
        let events: Vec<SessionEvent> = {
            let mut state = self.state();
            if let Some(err) = &state.broken {
                return Err(AgentError::LogFailed(err.clone()));
            }
            if !state.discards.is_empty() {
                let message_ids = std::mem::take(&mut state.discards);
                payloads.insert(0, EventPayload::InboxDiscarded(InboxIds { message_ids }));
            }
            let first = state.events.len() as u64;
            let time = self.shared.clock.now_millis();
            payloads
                .into_iter()
                .enumerate()
                .map(|(offset, payload)| SessionEvent {
                    seq: first + offset as u64,
                    time,
                    payload,
                })
                .collect()
        };
        if !events.is_empty()
            && let Err(err) = log.append(&events).await
        {
            self.state().broken = Some(err.clone());
            return Err(err.into());
        }
        let mut state = self.state();
        let state = &mut *state;
        state.events.reserve(events.len());
        for event in events {
            if let Some(transcript) = &mut state.transcript
                && is_conversation(&event.payload)
            {
                // Copies at most the newest partial chunk, and only if a
                // model still holds the last request.
                TranscriptProjection.apply(transcript, &event);
            }
            state.events.push(event);
        }
        Ok(after(self, state))
    }

    /// The turn-boundary sync; a failure breaks the agent like a failed append.
    async fn checkpoint(&self) -> Result<(), AgentError> {
        let guard = self.log.lock().await;
        let Some(log) = guard.as_ref() else {
            return Err(AgentError::Disposed(self.header.id.clone()));
        };
        if let Err(err) = log.checkpoint().await {
            self.state().broken = Some(err.clone());
            return Err(err.into());
        }
        Ok(())
    }

    fn start_driver(&self, state: &mut State) {
        if state.driver || state.disposed || state.parked || state.broken.is_some() {
            return;
        }
        let Some(this) = self.this.upgrade() else {
            return;
        };
        state.driver = true;
        self.status.send_replace(AgentStatus::Running);
        self.shared.tasks.spawn(this.drive());
    }

    /// The driver: run turns while waking input is pending.
    async fn drive(self: Arc<Self>) {
        loop {
            let cancel = {
                let mut state = self.state();
                if state.disposed
                    || state.parked
                    || state.broken.is_some()
                    || !state.has_waking_input()
                {
                    state.driver = false;
                    state.turn_cancel = None;
                    self.status.send_replace(AgentStatus::Idle);
                    return;
                }
                let cancel = self.lifetime.child_token();
                state.turn_cancel = Some(cancel.clone());
                cancel
            };
            if let Err(err) = self.run_turn(cancel).await {
                // A broken log is reported by `fault`; anything else is a
                // turn that could not even be recorded as failed.
                if self.state().broken.is_none() {
                    tracing::error!(session = %self.header.id, "turn failed: {err}");
                }
            }
        }
    }

    /// Run one turn: the [`TurnMachine`](crate::turn::TurnMachine) over
    /// this agent's log, model and tools ([`Local`]), then the
    /// turn-boundary checkpoint.
    async fn run_turn(&self, cancel: CancellationToken) -> Result<(), AgentError> {
        let turn = {
            let mut state = self.state();
            let turn = state.turns;
            state.turns += 1;
            if state.transcript.is_none() {
                let mut transcript = TranscriptProjection.init(&self.header);
                for event in &state.events {
                    TranscriptProjection.apply(&mut transcript, event);
                }
                state.transcript = Some(transcript);
            }
            turn
        };
        let limit = u64::from(self.options.turn_step_limit());
        let mut local = Local {
            agent: self,
            cancel: &cancel,
        };
        if let Err(err) = turn::drive(&mut local, turn, limit).await {
            self.end_turn_in_memory(turn, &err);
            return Err(err);
        }
        self.checkpoint().await
    }

    /// A write of turn `turn` failed: the log is broken, so the turn's end
    /// (`error`, with the store's error as the diagnostic) is kept in memory
    /// only, where [`Agent::events`] and the agent's waiters see it.
    fn end_turn_in_memory(&self, turn: u64, err: &AgentError) {
        let mut state = self.state();
        if state.broken.is_none() {
            return;
        }
        let open = open_turn(&state.events) == Some(turn);
        let time = self.shared.clock.now_millis();
        let push = |state: &mut State, payload| {
            let seq = state.events.len() as u64;
            state.events.push(SessionEvent { seq, time, payload });
        };
        if !open {
            push(&mut state, EventPayload::TurnStart(TurnStart { turn }));
        }
        let diagnostic = match err {
            AgentError::Store(err) | AgentError::LogFailed(err) => err.to_string(),
            other => other.to_string(),
        };
        push(
            &mut state,
            EventPayload::TurnEnd(TurnEnd {
                turn,
                stop_reason: StopReason::ERROR,
                diagnostic: Some(format!(
                    "the session log could not be written: {diagnostic}"
                )),
            }),
        );
        state.turn_cancel = None;
    }
}

/// Whether `payload` changes the model-visible conversation.
fn is_conversation(payload: &EventPayload) -> bool {
    matches!(
        payload,
        EventPayload::UserMessage(_)
            | EventPayload::AssistantMessage(_)
            | EventPayload::ToolCall(_)
            | EventPayload::ToolResult(_)
    )
}

#[async_trait]
impl Agent for LoopAgent {
    fn id(&self) -> &SessionId {
        &self.header.id
    }

    fn epoch(&self) -> Epoch {
        self.epoch
    }

    fn header(&self) -> &SessionHeader {
        &self.header
    }

    fn options(&self) -> AgentOptions {
        self.options.clone()
    }

    fn cwd(&self) -> PathBuf {
        self.header.cwd.clone()
    }

    fn accepts_images(&self) -> bool {
        self.model.accepts_images()
    }

    fn status(&self) -> AgentStatus {
        *self.status.borrow()
    }

    fn watch_status(&self) -> watch::Receiver<AgentStatus> {
        self.status.subscribe()
    }

    async fn send(
        &self,
        message: UserMessage,
        target: InboxTarget,
        wake: bool,
    ) -> Result<MessageId, AgentError> {
        if message.content.iter().any(ContentBlock::is_image) && !self.model.accepts_images() {
            return Err(AgentError::InvalidInput(format!(
                "the model `{}` does not accept images",
                self.model.name()
            )));
        }
        if self.state().disposed {
            return Err(AgentError::Disposed(self.header.id.clone()));
        }
        let arrival = InboxArrival {
            message_id: message.id.clone(),
            target,
            wake,
            source_kind: message.source.kind().to_owned(),
            sender: message.source.sender().cloned(),
        };
        let accepted = EventPayload::InboxAccepted(InboxAccepted {
            message: message.clone(),
            target,
            wake,
        });
        let id = message.id.clone();
        self.commit(vec![accepted], move |agent, state| {
            let item = PendingItem {
                message,
                target,
                wake,
            };
            match target {
                InboxTarget::NextTurn => state.next_turn.push_back(item),
                InboxTarget::NextStep => state.next_step.push_back(item),
            }
            if wake {
                state.parked = false;
                agent.start_driver(state);
            }
            // Announced as it is applied, not after this future resumes: a
            // send dropped mid-write still finishes the write (detached), and
            // its item must still end a `wait` that observes the inbox.
            if let Some(arrivals) = agent.arrivals.get() {
                // Observers that all went away are fine.
                let _ = arrivals.send(arrival);
            }
        })
        .await?;
        Ok(id)
    }

    fn cancel(&self, cause: CancelCause, options: CancelOptions) {
        {
            let mut state = self.state();
            if !state.driver {
                return;
            }
            tracing::debug!(session = %self.header.id, ?cause, "cancelling the current activity");
            if let Some(turn) = &state.turn_cancel {
                turn.cancel();
            }
            if options.keep_inbox {
                state.parked = true;
                return;
            }
            // Everything pending goes: both lists, whole. The record goes
            // out with the next write (the turn's own end, at the latest),
            // or with disposal; the task below covers an idle agent.
            let state = &mut *state;
            let discarded: Vec<MessageId> = state
                .next_step
                .drain(..)
                .chain(state.next_turn.drain(..))
                .map(|item| item.message.id)
                .collect();
            if discarded.is_empty() {
                return;
            }
            state.discards.extend(discarded);
        }
        let Some(this) = self.this.upgrade() else {
            return;
        };
        self.shared.tasks.spawn(async move {
            // A failure is kept in `broken` and reported by `fault`; a
            // disposal that came first wrote the discards itself.
            let _ = this.commit(Vec::new(), |_, _| ()).await;
        });
    }

    async fn wait_idle(&self) {
        let mut status = self.status.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = status.wait_for(|status| *status == AgentStatus::Idle).await;
    }

    fn fault(&self) -> Option<AgentError> {
        self.state().broken.clone().map(AgentError::LogFailed)
    }

    fn observe_inbox(&self) -> broadcast::Receiver<InboxArrival> {
        self.arrivals
            .get_or_init(|| broadcast::Sender::new(ARRIVAL_BUFFER))
            .subscribe()
    }

    fn pending(&self) -> Vec<MessageId> {
        let state = self.state();
        state
            .next_step
            .iter()
            .chain(&state.next_turn)
            .map(|item| item.message.id.clone())
            .collect()
    }

    fn events(&self) -> Vec<SessionEvent> {
        self.state().events.to_vec()
    }

    fn completed_prefix(&self) -> Vec<SessionEvent> {
        // The same prefix as `completed_turn_prefix`, over the chunks.
        let state = self.state();
        let from_end = state
            .events
            .iter()
            .rev()
            .position(SessionEvent::is_turn_end);
        match from_end {
            Some(from_end) => state.events.prefix_to_vec(state.events.len() - from_end),
            None => Vec::new(),
        }
    }

    fn events_since(&self, from: u64) -> Vec<SessionEvent> {
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        self.state().events.iter_from(from).cloned().collect()
    }

    fn visit_events_since(&self, from: u64, visit: &mut dyn FnMut(&[SessionEvent])) {
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        let state = self.state();
        // Lent in place when the events lie in one chunk (a child's own
        // events mostly do); a range across chunks is lent as a copy.
        match state.events.contiguous_from(from) {
            Some(events) => visit(events),
            None => {
                let events: Vec<SessionEvent> = state.events.iter_from(from).cloned().collect();
                drop(state);
                visit(&events);
            }
        }
    }

    async fn record(&self, kind: &str, payload: ExtensionPayload) -> Result<u64, AgentError> {
        if EventPayload::is_builtin_kind(kind) {
            return Err(AgentError::ReservedEventType(kind.to_owned()));
        }
        let payload = EventPayload::Extension {
            kind: kind.to_owned(),
            payload,
        };
        self.commit(vec![payload], |_, state| state.events.len() as u64 - 1)
            .await
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[async_trait]
impl Dispose for LoopAgent {
    async fn dispose(&self) {
        LoopAgent::dispose(self).await;
    }
}
