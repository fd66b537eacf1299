//! The reference agent loop. A [`LoopAgent`] owns one session: an inbox of
//! two ordered lists (next turn, next step) whose every change is a durable
//! event, and a driver task that runs turns while waking input is pending.
//! A turn claims its input, asks the model, runs the tools it calls, appends
//! every model-visible fact to the log, and repeats step by step until the
//! model stops; steering joins at the next step boundary. The agent never
//! acknowledges input before its `inbox/accepted` event is written, and no
//! driver outlives [`LoopAgent::dispose`].

use std::any::Any;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use async_trait::async_trait;
use dsh_core::message::Message;
use dsh_core::projection::{PendingItem, Projection, TranscriptProjection};
use dsh_core::session::{
    AssistantEntry, InboxAccepted, InboxIds, StepStart, ToolResultEntry, TurnEnd, TurnStart,
    UserEntry, now_millis,
};
use dsh_core::{
    Agent, AgentError, AgentHandle, AgentOptions, AgentStatus, CancelCause, CancelOptions,
    CancellationToken, ContentBlock, Dispose, Epoch, EventPayload, FinishReason, InboxArrival,
    InboxTarget, MessageId, Model, ModelError, ModelErrorKind, ModelEvent, ModelRequest,
    SessionEvent, SessionHeader, SessionId, SessionLog, StopReason, ToolCall, Usage, UserMessage,
};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::{broadcast, watch};

use crate::harness::{Composed, Shared};
use crate::tools::ScopedTools;

/// How many inbox arrivals an observer may fall behind before it misses some.
const ARRIVAL_BUFFER: usize = 64;

/// State rebuilt from a log before an agent goes live.
pub(crate) struct Restored {
    pub(crate) events: Vec<SessionEvent>,
    pub(crate) transcript: Vec<Message>,
    pub(crate) pending: Vec<PendingItem>,
    pub(crate) turns: u64,
}

struct State {
    events: Vec<SessionEvent>,
    transcript: Vec<Message>,
    next_turn: VecDeque<PendingItem>,
    next_step: VecDeque<PendingItem>,
    /// A driver task exists (running turns or about to).
    driver: bool,
    /// Pending input waits for a waking send (after a keep-inbox cancel).
    parked: bool,
    disposed: bool,
    /// The store failed; the log no longer matches memory.
    broken: Option<String>,
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

/// The reference [`Agent`]: a session driven by the harness loop.
pub struct LoopAgent {
    header: SessionHeader,
    epoch: Epoch,
    shared: Arc<Shared>,
    model: Arc<dyn Model>,
    options: AgentOptions,
    tools: ScopedTools,
    system: String,
    state: Mutex<State>,
    /// Serialises appends so that seqs reach the store in order.
    log: tokio::sync::Mutex<Option<Arc<dyn SessionLog>>>,
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

enum StepOutcome {
    Continue,
    End(StopReason, Option<String>),
}

struct ModelReply {
    text: String,
    calls: Vec<ToolCall>,
    usage: Usage,
    finish: FinishReason,
}

impl LoopAgent {
    pub(crate) fn new(
        shared: Arc<Shared>,
        header: SessionHeader,
        composed: Composed,
        log: Arc<dyn SessionLog>,
        restored: Restored,
    ) -> Arc<Self> {
        let epoch = shared.registry.mint_epoch();
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
            shared,
            model: composed.model,
            options: composed.options,
            tools: composed.tools,
            system: composed.system,
            state: Mutex::new(State {
                events: restored.events,
                transcript: restored.transcript,
                next_turn,
                next_step,
                driver: false,
                parked: false,
                disposed: false,
                broken: None,
                turn_cancel: None,
                turns: restored.turns,
                usage: Usage::default(),
            }),
            log: tokio::sync::Mutex::new(Some(log)),
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

    /// Publish in the registry and hand out the owner's handle.
    pub(crate) fn publish(self: &Arc<Self>) -> Result<AgentHandle, AgentError> {
        self.shared.registry.publish(self.clone())?;
        Ok(AgentHandle::new(self.clone(), self.clone()))
    }

    /// After a resume: start a turn if restored input may wake the agent.
    pub(crate) fn wake_restored(self: &Arc<Self>) {
        let mut state = self.state();
        if state.has_waking_input() {
            self.start_driver(&mut state);
        }
    }

    /// Drop the log handle (releasing the store's writer lock) without
    /// touching the registry: used when creation is rolled back.
    pub(crate) async fn release_log(&self) {
        self.state().disposed = true;
        self.lifetime.cancel();
        self.log.lock().await.take();
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

    /// Stop the driver, wait for it to exit, release the log and leave the
    /// registry. Idempotent; pending input stays in the log for a resume.
    pub async fn dispose(&self) {
        {
            let mut state = self.state();
            state.disposed = true;
            if let Some(turn) = &state.turn_cancel {
                turn.cancel();
            }
        }
        self.lifetime.cancel();
        self.wait_idle().await;
        self.log.lock().await.take();
        self.shared.registry.unpublish(&self.reference());
    }

    /// Append events built from `payloads`; then, under the same ordering
    /// lock, apply `after` to the state. Appends are serialised so seqs reach
    /// the store in order.
    async fn commit<R>(
        &self,
        payloads: Vec<EventPayload>,
        after: impl FnOnce(&mut State) -> R,
    ) -> Result<R, AgentError> {
        let guard = self.log.lock().await;
        let Some(log) = guard.as_ref() else {
            return Err(AgentError::Disposed(self.header.id.clone()));
        };
        let events: Vec<SessionEvent> = {
            let state = self.state();
            if let Some(reason) = &state.broken {
                return Err(AgentError::Composition(format!(
                    "the session log failed earlier: {reason}"
                )));
            }
            let first = state.events.len() as u64;
            let time = now_millis();
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
        if let Err(err) = log.append(&events).await {
            self.state().broken = Some(err.to_string());
            return Err(err.into());
        }
        let mut state = self.state();
        for event in events {
            TranscriptProjection.apply(&mut state.transcript, &event);
            state.events.push(event);
        }
        Ok(after(&mut state))
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
                tracing::error!(session = %self.header.id, "turn failed: {err}");
            }
        }
    }

    async fn run_turn(&self, cancel: CancellationToken) -> Result<(), AgentError> {
        let (turn, batch) = {
            let mut state = self.state();
            let turn = state.turns;
            state.turns += 1;
            (turn, state.claim(true))
        };
        let mut payloads = vec![EventPayload::TurnStart(TurnStart { turn })];
        payloads.extend(claim_payloads(batch));
        self.commit(payloads, |_| ()).await?;

        let mut step = 0;
        let (stop_reason, diagnostic) = loop {
            match self.run_step(turn, step, &cancel).await? {
                StepOutcome::Continue => step += 1,
                StepOutcome::End(reason, diagnostic) => break (reason, diagnostic),
            }
        };
        let end = EventPayload::TurnEnd(TurnEnd {
            turn,
            stop_reason,
            diagnostic,
        });
        self.commit(vec![end], |state| state.turn_cancel = None)
            .await?;
        if let Some(log) = self.log.lock().await.as_ref() {
            log.checkpoint().await?;
        }
        Ok(())
    }

    async fn run_step(
        &self,
        turn: u64,
        step: u64,
        cancel: &CancellationToken,
    ) -> Result<StepOutcome, AgentError> {
        if cancel.is_cancelled() {
            return Ok(StepOutcome::End(StopReason::ABORTED, None));
        }
        let request = {
            let state = self.state();
            ModelRequest {
                model: self.options.model.clone(),
                system: self.system.clone(),
                messages: state.transcript.clone(),
                tools: self.tools.specs(self),
                max_output_tokens: self.options.max_output_tokens,
                reasoning_effort: self.options.reasoning_effort.clone(),
            }
        };
        self.commit(
            vec![EventPayload::StepStart(StepStart { turn, step })],
            |_| (),
        )
        .await?;
        let reply = tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(StepOutcome::End(StopReason::ABORTED, None)),
            reply = self.ask_model(request, cancel.clone()) => reply,
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(err) if err.kind == ModelErrorKind::Cancelled && cancel.is_cancelled() => {
                return Ok(StepOutcome::End(StopReason::ABORTED, None));
            }
            Err(err) => return Ok(StepOutcome::End(StopReason::ERROR, Some(err.to_string()))),
        };

        let finished_normally =
            matches!(reply.finish, FinishReason::EndTurn | FinishReason::ToolUse);
        let calls = if finished_normally {
            reply.calls
        } else {
            Vec::new()
        };
        let mut payloads = Vec::new();
        if !reply.text.is_empty() {
            payloads.push(EventPayload::AssistantMessage(AssistantEntry {
                content: vec![ContentBlock::text(reply.text)],
            }));
        }
        payloads.extend(calls.iter().cloned().map(EventPayload::ToolCall));
        if reply.usage != Usage::default() {
            payloads.push(EventPayload::Usage(reply.usage));
        }
        self.commit(payloads, |state| state.usage += reply.usage)
            .await?;
        if !finished_normally {
            let diagnostic = match &reply.finish {
                FinishReason::Other(reason) => Some(format!("the model stopped: {reason}")),
                _ => None,
            };
            return Ok(StepOutcome::End(reply.finish.stop_reason(), diagnostic));
        }

        let mut end_turn = false;
        if !calls.is_empty() {
            let agent: Arc<dyn Agent> = match self.this.upgrade() {
                Some(agent) => agent,
                None => return Err(AgentError::Disposed(self.header.id.clone())),
            };
            let outputs = tokio::select! {
                biased;
                () = cancel.cancelled() => None,
                outputs = self.tools.call_all(&calls, agent, cancel.clone()) => Some(outputs),
            };
            let aborted = outputs.is_none();
            let results = match outputs {
                Some(outputs) => calls
                    .iter()
                    .zip(outputs)
                    .map(|(call, output)| {
                        end_turn |= output.end_turn;
                        result_payload(call, output.content, output.is_error)
                    })
                    .collect(),
                // Every call gets a result, so the transcript stays well formed.
                None => calls
                    .iter()
                    .map(|call| {
                        result_payload(
                            call,
                            vec![ContentBlock::text("The tool call was cancelled.")],
                            true,
                        )
                    })
                    .collect(),
            };
            self.commit(results, |_| ()).await?;
            if aborted {
                return Ok(StepOutcome::End(StopReason::ABORTED, None));
            }
        }
        if end_turn || cancel.is_cancelled() {
            let reason = if end_turn {
                StopReason::COMPLETED
            } else {
                StopReason::ABORTED
            };
            return Ok(StepOutcome::End(reason, None));
        }

        // The step boundary: steering and injected context join here. With no
        // tool call to answer, only waking steering continues the turn.
        let batch = {
            let mut state = self.state();
            let steering_wakes = state.next_step.iter().any(|item| item.wake);
            if calls.is_empty() && !steering_wakes {
                Vec::new()
            } else {
                state.claim(false)
            }
        };
        if !batch.is_empty() {
            self.commit(claim_payloads(batch), |_| ()).await?;
            return Ok(StepOutcome::Continue);
        }
        if calls.is_empty() {
            Ok(StepOutcome::End(StopReason::COMPLETED, None))
        } else {
            Ok(StepOutcome::Continue)
        }
    }

    async fn ask_model(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelReply, ModelError> {
        let mut stream = self.model.stream(request, cancel).await?;
        let mut reply = ModelReply {
            text: String::new(),
            calls: Vec::new(),
            usage: Usage::default(),
            finish: FinishReason::EndTurn,
        };
        while let Some(event) = stream.next().await {
            match event? {
                ModelEvent::TextDelta(delta) => reply.text.push_str(&delta),
                ModelEvent::ToolCall(call) => reply.calls.push(call),
                ModelEvent::Usage(usage) => reply.usage += usage,
                ModelEvent::Finish(finish) => {
                    reply.finish = finish;
                    return Ok(reply);
                }
            }
        }
        Err(ModelError::new(
            ModelErrorKind::Protocol,
            "the response ended without a finish reason",
        ))
    }
}

fn claim_payloads(batch: Vec<PendingItem>) -> Vec<EventPayload> {
    if batch.is_empty() {
        return Vec::new();
    }
    let mut payloads = vec![EventPayload::InboxClaimed(InboxIds {
        message_ids: batch.iter().map(|item| item.message.id.clone()).collect(),
    })];
    payloads.extend(batch.into_iter().map(|item| {
        EventPayload::UserMessage(UserEntry {
            message: item.message,
        })
    }));
    payloads
}

fn result_payload(call: &ToolCall, content: Vec<ContentBlock>, is_error: bool) -> EventPayload {
    EventPayload::ToolResult(ToolResultEntry {
        call_id: call.call_id.clone(),
        name: call.name.clone(),
        content,
        is_error,
    })
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
        self.commit(vec![accepted], |state| {
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
                self.start_driver(state);
            }
        })
        .await?;
        if let Some(arrivals) = self.arrivals.get() {
            // Observers that all went away are fine.
            let _ = arrivals.send(arrival);
        }
        Ok(id)
    }

    fn cancel(&self, cause: CancelCause, options: CancelOptions) {
        let discarded = {
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
                Vec::new()
            } else {
                // Everything pending goes: both lists, whole.
                let mut discarded: Vec<PendingItem> = state.next_step.drain(..).collect();
                discarded.extend(state.next_turn.drain(..));
                discarded
            }
        };
        if discarded.is_empty() {
            return;
        }
        let Some(this) = self.this.upgrade() else {
            return;
        };
        let ids = discarded.into_iter().map(|item| item.message.id).collect();
        self.shared.tasks.spawn(async move {
            let payload = EventPayload::InboxDiscarded(InboxIds { message_ids: ids });
            if let Err(err) = this.commit(vec![payload], |_| ()).await {
                tracing::warn!(session = %this.header.id, "could not record discarded input: {err}");
            }
        });
    }

    async fn wait_idle(&self) {
        let mut status = self.status.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = status.wait_for(|status| *status == AgentStatus::Idle).await;
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
        self.state().events.clone()
    }

    fn completed_prefix(&self) -> Vec<SessionEvent> {
        dsh_core::session::completed_turn_prefix(&self.state().events).to_vec()
    }

    fn events_since(&self, from: u64) -> Vec<SessionEvent> {
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        self.state()
            .events
            .get(from..)
            .map(<[_]>::to_vec)
            .unwrap_or_default()
    }

    async fn record(&self, kind: &str, payload: Value) -> Result<u64, AgentError> {
        if EventPayload::is_builtin_kind(kind) {
            return Err(AgentError::ReservedEventType(kind.to_owned()));
        }
        let payload = EventPayload::Extension {
            kind: kind.to_owned(),
            payload: payload.into(),
        };
        self.commit(vec![payload], |state| state.events.len() as u64 - 1)
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
