//! `dsh.Session/{id}/run_turn`'s host of the harness's
//! [`TurnMachine`]: one turn, every effect journaled so that a retry on
//! another worker replays what was recorded and runs only what was not.
//!
//! - the clock: each write's time is a journaled clock read: the one the
//!   model's or the step's last tool's `ctx.run` took at its end for the
//!   write right after it, or the inbox's at the claim or check the write
//!   follows (in its journaled answer), else a `ctx.run("now")` of its own;
//! - input: `dsh.Inbox/{id}.claim_turn` and `.pending`, calls between
//!   objects (exactly once); the claimed items are written to the log as
//!   `inbox/accepted` right before the machine's claim names them;
//! - the tool specs offered: read inside the model's step and journaled
//!   with its reply whenever they differ from the last ones journaled (at
//!   each turn's first step, and when they change);
//! - the model: `ctx.run("model:{turn}:{step}")`, at most
//!   [`MODEL_ATTEMPTS`] attempts when it fails; a step whose reply is
//!   journaled is never asked again, one cut by a worker's death is asked
//!   again (at most twice in all when the cut is once);
//! - each tool call: `ctx.run("tool:{call id}")`. A tool that is not
//!   [`idempotent`](dsh_core::Tool::idempotent) first journals a
//!   `started:{call id}` marker; a retry that finds the marker and no
//!   result knows the worker died mid-call and answers
//!   [`WORKER_STOPPED_TOOL_CALL`] instead of running it twice;
//! - appends: `ctx.set` of the log's chunks and head (state is journaled
//!   with the steps).
//!
//! - the engine's own tools, offered as the local ones are (`specs`):
//!   calls between objects, not a `ctx.run`: `subagent` and `fork`
//!   (`delegate`, with a child's settlement when its turn ends idle),
//!   `list_agents` (`agents`), `send_message` (`message`), `wait` and
//!   `interrupt_agent` (`interrupt`), over the tree as `tree` reads it.
//!
//! An interrupt parks the inbox; the turn learns of it at each of the
//! machine's checks (`IsCancelled`), so it ends `aborted` at the next one.
//! One call per step boundary serves the boundary's checks: the claim
//! answers whether the agent is parked (`claim_turn`), and after a step's
//! tools that claim is made at the check itself (a parked agent claims
//! nothing and the turn ends there); a check with only log writes since
//! the claim answers what the claim said (an interrupt that lands in
//! between is one that lands right after the check, which it always could:
//! the turn's next check sees it). Any other check asks the inbox once for
//! the park and for waking steering (`look`), and the steering look right
//! after it answers from that. A model step or a tool call in flight is
//! not cut (the SDK cannot cancel a running `ctx.run`): the turn stops
//! after it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dsh_core::message::Transcript;
use dsh_core::options::DEFAULT_MAX_TURN_STEPS;
use dsh_core::projection::{PendingItem, Projection, TranscriptProjection};
use dsh_core::session::InboxAccepted;
use dsh_core::{
    AgentStatus, CancellationToken, ContentBlock, EventPayload, FinishReason, InboxTarget,
    ModelEvent, ModelRequest, SessionEvent, SessionHeader, ToolCall, ToolOutput, ToolSpec, Usage,
};
use dsh_harness::ScopedTools;
use dsh_harness::ToolRegistry;
use dsh_harness::turn::{Check, Effect, Input, ModelOutcome, ModelReply, TurnMachine};
use futures::StreamExt;
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

mod agents;
mod control;
mod delegate;
mod interrupt;
mod message;
mod specs;
mod tree;
mod wait;

use super::inbox::{InboxClient, millis_now};
use super::view::TurnView;
use crate::state::inbox::{TurnClaim, TurnLook};
use crate::state::log::{self, CHUNK_EVENTS, HEAD_KEY, HEADER_KEY, LogHead};
use crate::worker::{Composed, WorkerEnv};

/// The result a non-idempotent tool call gets when its worker died while
/// it ran (B60): it is not run a second time.
pub const WORKER_STOPPED_TOOL_CALL: &str =
    "the worker stopped before this call returned; its outcome is unknown";

/// How many times a failing model step is tried before the step fails.
pub const MODEL_ATTEMPTS: u32 = 2;

pub use delegate::UNMETERED;

/// A model step as journaled.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum StepReply {
    Reply {
        text: String,
        calls: Vec<ToolCall>,
        usage: Usage,
        finish: FinishReason,
    },
}

/// A model step as journaled: its reply, and the specs offered when they
/// differ from the last ones journaled in the turn.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Asked {
    reply: StepReply,
    offered: Option<Vec<ToolSpec>>,
}

/// A journaled step's value with the clock read at its end, which the
/// log write that directly follows the step takes as its time.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Timed<T> {
    value: T,
    time: u64,
}

/// A tool's output as journaled.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct JournaledOutput {
    content: Vec<ContentBlock>,
    is_error: bool,
    end_turn: bool,
}

impl From<ToolOutput> for JournaledOutput {
    fn from(output: ToolOutput) -> Self {
        Self {
            content: output.content,
            is_error: output.is_error,
            end_turn: output.end_turn,
        }
    }
}

impl From<JournaledOutput> for ToolOutput {
    fn from(output: JournaledOutput) -> Self {
        Self {
            content: output.content,
            is_error: output.is_error,
            end_turn: output.end_turn,
        }
    }
}

/// A terminal error naming the session (and step, where there is one).
fn terminal(code: &str, message: impl std::fmt::Display) -> TerminalError {
    super::refused(code, message)
}

/// One turn's host: the session's log as loaded, the composition, and the
/// context every effect goes through.
struct Host<'a, 'ctx> {
    ctx: &'a ObjectContext<'ctx>,
    header: SessionHeader,
    composed: Composed,
    tools: ScopedTools,
    view: Arc<TurnView>,
    events: Vec<SessionEvent>,
    transcript: Transcript,
    head: LogHead,
    /// The lines of the partial last chunk (empty at a chunk boundary).
    tail: Vec<u8>,
    /// A journaled clock read by the step just run, for the write that
    /// directly follows it (cleared by any other effect).
    clock: Option<u64>,
    /// The specs last journaled in this turn (with a model step).
    offered: Option<Vec<ToolSpec>>,
    /// What the inbox last answered, while only log writes and the looks
    /// it answers followed it (cleared by a model step or tool calls).
    seen: Option<Seen>,
    /// What a tools check claimed for the step boundary's claim that
    /// follows it.
    claimed: Option<Vec<PendingItem>>,
}

/// What the turn's last call to its inbox answered.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The agent is parked: a check answers it without a call.
    parked: bool,
    /// Whether waiting steering wakes the agent, for the one steering look
    /// right after the check that saw it.
    steering_wakes: Option<bool>,
    /// The inbox's clock at the answer: the time of the writes that follow
    /// it with no journaled step between.
    time: u64,
}

/// Run one turn of the session `ctx.key()` names.
pub(super) async fn run_turn(ctx: &ObjectContext<'_>, env: &dyn WorkerEnv) -> HandlerResult<()> {
    let key = ctx.key().to_owned();
    let (header, composed) = match prepare(ctx, env).await? {
        Ok(prepared) => prepared,
        Err(failed) => {
            // The inbox would otherwise wait for this turn for ever and
            // never schedule another.
            ctx.object_client::<InboxClient>(key)
                .turn_failed()
                .call()
                .await?;
            return Err(failed.into());
        }
    };
    let mut host = Host::load(ctx, header, composed).await?;
    if let Some(turn) = host.head.open_turn {
        // An earlier turn failed for good mid-way (a terminal error): close
        // it as a local resume would (B53) before the next one.
        let time = host.now().await?;
        let closing = dsh_harness::turn::close_interrupted_turn(turn, &host.events, time);
        host.write(closing)?;
    }
    host.drive().await?;
    let again = ctx
        .object_client::<InboxClient>(key)
        .turn_ended()
        .call()
        .await?;
    if !again {
        host.settle().await?;
    }
    Ok(())
}

/// The session's header and composition, or the terminal error that
/// fails the turn before it starts.
async fn prepare(
    ctx: &ObjectContext<'_>,
    env: &dyn WorkerEnv,
) -> HandlerResult<Result<(SessionHeader, Composed), TerminalError>> {
    let key = ctx.key();
    let Some(header_line) = ctx.get::<String>(HEADER_KEY).await? else {
        return Ok(Err(terminal(
            "NO_SUCH_SESSION",
            format!("session `{key}` does not exist"),
        )));
    };
    let header: SessionHeader = match serde_json::from_str(&header_line) {
        Ok(header) => header,
        Err(bad) => {
            return Ok(Err(terminal(
                "SESSION_CORRUPT",
                format!("{key}: header: {bad}"),
            )));
        }
    };
    Ok(match env.compose(&header) {
        Ok(composed) => Ok((header, composed)),
        Err(why) => Err(terminal("COMPOSE_FAILED", format!("{key}: {why}"))),
    })
}

impl<'a, 'ctx> Host<'a, 'ctx> {
    /// Load the log from state (journaled reads, so a retry sees the same).
    async fn load(
        ctx: &'a ObjectContext<'ctx>,
        header: SessionHeader,
        composed: Composed,
    ) -> HandlerResult<Self> {
        let head = ctx
            .get::<Json<LogHead>>(HEAD_KEY)
            .await?
            .map(Json::into_inner)
            .unwrap_or_default();
        let mut events = Vec::new();
        let mut tail = Vec::new();
        let chunks = head.next_seq.div_ceil(CHUNK_EVENTS);
        for index in 0..chunks {
            let chunk = ctx
                .get::<Vec<u8>>(&log::chunk_key(index))
                .await?
                .unwrap_or_default();
            let text = log::lines_from(index, &chunk, 0)
                .map_err(|bad| terminal("SESSION_CORRUPT", format!("{}: {bad}", header.id)))?;
            for line in text.lines() {
                let event: SessionEvent = serde_json::from_str(line)
                    .map_err(|bad| terminal("SESSION_CORRUPT", format!("{}: {bad}", header.id)))?;
                events.push(event);
            }
            if index + 1 == chunks && !head.next_seq.is_multiple_of(CHUNK_EVENTS) {
                tail = chunk;
            }
        }
        let mut transcript = TranscriptProjection.init(&header);
        for event in &events {
            TranscriptProjection.apply(&mut transcript, event);
        }
        let mut offered = composed.tools.clone();
        offered.extend(specs::engine_tools());
        let tools = ScopedTools::compose(&ToolRegistry::new(), None, None, &offered)
            .map_err(|bad| terminal("COMPOSE_FAILED", format!("{}: {bad}", header.id)))?;
        let view = Arc::new(TurnView {
            header: header.clone(),
            options: composed.options.clone(),
            accepts_images: composed.model.accepts_images(),
            status: tokio::sync::watch::Sender::new(AgentStatus::Running),
        });
        Ok(Self {
            ctx,
            header,
            composed,
            tools,
            view,
            events,
            transcript,
            head,
            tail,
            clock: None,
            offered: None,
            seen: None,
            claimed: None,
        })
    }

    /// Drive the machine from its start to its end.
    async fn drive(&mut self) -> HandlerResult<()> {
        let turn = self
            .events
            .iter()
            .filter(|event| matches!(event.payload, EventPayload::TurnStart(_)))
            .count() as u64;
        let limit = self
            .composed
            .options
            .max_turn_steps
            .unwrap_or(DEFAULT_MAX_TURN_STEPS);
        let (mut machine, mut effect) = TurnMachine::start(turn, u64::from(limit));
        loop {
            if !matches!(effect, Effect::Append(_)) {
                self.clock = None;
            }
            if matches!(
                effect,
                Effect::AskModel { .. } | Effect::CallTools | Effect::Done
            ) {
                self.seen = None;
            }
            if self.claimed.is_some()
                && !matches!(
                    effect,
                    Effect::Claim {
                        turn_boundary: false
                    }
                )
            {
                // Items claimed early would be lost: the machine always
                // claims after a tools check that found the turn running.
                return Err(terminal(
                    "TURN_MACHINE",
                    format!(
                        "{}: items claimed at a tools check were not taken by a claim",
                        self.header.id
                    ),
                )
                .into());
            }
            let input = match effect {
                Effect::Claim { turn_boundary } => Input::Claimed(self.claim(turn_boundary).await?),
                Effect::SteeringWakes => Input::SteeringWakes(self.steering_wakes().await?),
                Effect::IsCancelled(check) => {
                    let boundary = check == Check::Tools && !machine.calls().is_empty();
                    Input::Cancelled(self.cancelled(boundary).await?)
                }
                Effect::Append(payloads) => {
                    self.append(payloads).await?;
                    Input::Appended
                }
                Effect::AskModel { turn, step } => Input::Model(self.ask(turn, step).await?),
                Effect::CallTools => Input::Tools(Some(self.call_tools(machine.calls()).await?)),
                Effect::Done => return Ok(()),
            };
            effect = machine
                .resume(input)
                .map_err(|bad| terminal("TURN_MACHINE", format!("{}: {bad}", self.header.id)))?;
        }
    }

    /// The time, journaled.
    async fn now(&self) -> HandlerResult<u64> {
        let millis = self
            .ctx
            .run(|| async { Ok(millis_now().to_string()) })
            .name("now")
            .await?;
        Ok(millis.parse().unwrap_or_default())
    }

    /// Claim from the inbox (exactly once), and write what was claimed as
    /// accepted, so the log holds each message's arrival before its claim.
    /// After a tools check the claim was made already (`cancelled`).
    async fn claim(&mut self, turn_boundary: bool) -> HandlerResult<Vec<PendingItem>> {
        let items = match self.claimed.take() {
            Some(items) => items,
            None => {
                let claim = self.claim_checked(turn_boundary).await?;
                self.seen = Some(Seen {
                    parked: claim.parked,
                    steering_wakes: None,
                    time: claim.time,
                });
                pending_items(claim)
            }
        };
        if !items.is_empty() {
            let accepted = items
                .iter()
                .map(|item| {
                    EventPayload::InboxAccepted(InboxAccepted {
                        message: item.message.clone(),
                        target: item.target,
                        wake: item.wake,
                    })
                })
                .collect();
            self.append(accepted).await?;
        }
        Ok(items)
    }

    /// The inbox's `claim_turn` (exactly once).
    async fn claim_checked(&self, turn_boundary: bool) -> HandlerResult<TurnClaim> {
        Ok(self
            .ctx
            .object_client::<InboxClient>(self.ctx.key().to_owned())
            .claim_turn(turn_boundary)
            .call()
            .await?
            .into_inner())
    }

    /// A cancellation check: what the last claim said when only log
    /// writes followed it; at the tools check before a step boundary's
    /// claim (`boundary`), that claim made now (a parked agent claims
    /// nothing); else a look at the inbox.
    async fn cancelled(&mut self, boundary: bool) -> HandlerResult<bool> {
        if let Some(seen) = self.seen {
            return Ok(seen.parked);
        }
        if boundary {
            let claim = self.claim_checked(false).await?;
            let parked = claim.parked;
            self.seen = Some(Seen {
                parked,
                steering_wakes: None,
                time: claim.time,
            });
            if !parked {
                self.claimed = Some(pending_items(claim));
            }
            return Ok(parked);
        }
        let look: TurnLook = self
            .ctx
            .object_client::<InboxClient>(self.ctx.key().to_owned())
            .look()
            .call()
            .await?
            .into_inner();
        self.seen = Some(Seen {
            parked: look.parked,
            steering_wakes: Some(look.steering_wakes),
            time: look.time,
        });
        Ok(look.parked)
    }

    /// Whether the agent was interrupted (a journaled look at its inbox).
    async fn interrupted(&self) -> HandlerResult<bool> {
        let status = self
            .ctx
            .object_client::<InboxClient>(self.ctx.key().to_owned())
            .status()
            .call()
            .await?
            .into_inner();
        Ok(status.parked)
    }

    /// Whether waiting next-step input wakes the agent (a journaled look,
    /// or what the check right before it saw).
    async fn steering_wakes(&mut self) -> HandlerResult<bool> {
        if let Some(wakes) = self
            .seen
            .as_mut()
            .and_then(|seen| seen.steering_wakes.take())
        {
            return Ok(wakes);
        }
        self.seen = None;
        let waiting = self
            .ctx
            .object_client::<InboxClient>(self.ctx.key().to_owned())
            .pending(Json(InboxTarget::NextStep))
            .call()
            .await?
            .into_inner();
        Ok(waiting.iter().any(|item| item.wake))
    }

    /// Append `payloads` at the journaled time: the clock the step just
    /// run read, or the inbox's last answer's, or a read of its own.
    async fn append(&mut self, payloads: Vec<EventPayload>) -> HandlerResult<()> {
        let time = match (self.clock.take(), self.seen) {
            (Some(time), _) => time,
            (None, Some(seen)) => seen.time,
            (None, None) => self.now().await?,
        };
        let first = self.head.next_seq;
        let events = (first..)
            .zip(payloads)
            .map(|(seq, payload)| SessionEvent { seq, time, payload })
            .collect();
        self.write(events)
    }

    /// Write `events` (seqs continuing the log) to the state and apply them.
    fn write(&mut self, events: Vec<SessionEvent>) -> HandlerResult<()> {
        let writes = log::append(&mut self.head, Some(&self.tail), &events)
            .map_err(|bad| terminal("OUT_OF_SEQUENCE", format!("{}: {bad}", self.header.id)))?;
        for write in writes {
            self.ctx
                .set(&log::chunk_key(write.index), write.lines.clone());
            self.tail = write.lines;
        }
        if self.head.next_seq.is_multiple_of(CHUNK_EVENTS) {
            self.tail.clear();
        }
        self.ctx.set(HEAD_KEY, Json(self.head.clone()));
        for event in &events {
            TranscriptProjection.apply(&mut self.transcript, event);
        }
        self.events.extend(events);
        Ok(())
    }

    /// Step `step`: the specs offered and the model's reply, journaled.
    async fn ask(&mut self, turn: u64, step: u64) -> HandlerResult<ModelOutcome> {
        let tools = self.tools.clone();
        let view = self.view.clone();
        let last = self.offered.clone();
        let mut request = ModelRequest {
            model: self.composed.options.model.clone(),
            system: self.composed.system.clone(),
            messages: self.transcript.clone(),
            tools: Vec::new(),
            max_output_tokens: self.composed.options.max_output_tokens,
            reasoning_effort: self.composed.options.reasoning_effort.clone(),
        };
        let model = self.composed.model.clone();
        let asked = self
            .ctx
            .run(|| async move {
                let specs = tools.specs(view.as_ref());
                request.tools = specs.clone();
                let reply = ask_model(model.as_ref(), request).await?;
                let offered = (last.as_ref() != Some(&specs)).then_some(specs);
                Ok(Json(Timed {
                    value: Asked { reply, offered },
                    time: millis_now(),
                }))
            })
            .name(format!("model:{turn}:{step}"))
            .retry_policy(RunRetryPolicy::new().max_attempts(MODEL_ATTEMPTS))
            .await;
        Ok(match asked {
            Ok(Json(Timed {
                value:
                    Asked {
                        reply:
                            StepReply::Reply {
                                text,
                                calls,
                                usage,
                                finish,
                            },
                        offered,
                    },
                time,
            })) => {
                self.clock = Some(time);
                if offered.is_some() {
                    self.offered = offered;
                }
                ModelOutcome::Reply(ModelReply {
                    text,
                    calls,
                    usage,
                    finish,
                })
            }
            Err(failed) => ModelOutcome::Failed {
                text: String::new(),
                diagnostic: failed.message().to_owned(),
            },
        })
    }

    /// Run the step's calls in order, each its own journaled step.
    async fn call_tools(&mut self, calls: &[ToolCall]) -> HandlerResult<Vec<ToolOutput>> {
        let mut outputs = Vec::with_capacity(calls.len());
        for call in calls {
            // Only the last call's clock is the results' time.
            self.clock = None;
            if specs::is_engine_tool(&call.name) {
                outputs.push(self.engine_tool(call).await?);
                continue;
            }
            let idempotent = self
                .composed
                .tools
                .iter()
                .find(|tool| tool.name() == call.name)
                .is_none_or(|tool| tool.idempotent());
            let resumed = if idempotent {
                false
            } else {
                let fresh = Arc::new(AtomicBool::new(false));
                let marked = fresh.clone();
                self.ctx
                    .run(|| async move {
                        marked.store(true, Ordering::SeqCst);
                        Ok(())
                    })
                    .name(format!("started:{}", call.call_id))
                    .await?;
                !fresh.load(Ordering::SeqCst)
            };
            let tools = self.tools.clone();
            let agent: Arc<dyn dsh_core::Agent> = self.view.clone();
            let this = call.clone();
            let output: Timed<JournaledOutput> = self
                .ctx
                .run(|| async move {
                    let output = if resumed {
                        ToolOutput::error(WORKER_STOPPED_TOOL_CALL)
                    } else {
                        tools.call(&this, agent, CancellationToken::new()).await
                    };
                    Ok(Json(Timed {
                        value: JournaledOutput::from(output),
                        time: millis_now(),
                    }))
                })
                .name(format!("tool:{}", call.call_id))
                .await?
                .into_inner();
            self.clock = Some(output.time);
            outputs.push(output.value.into());
        }
        Ok(outputs)
    }
}

impl Host<'_, '_> {
    /// Run a call of one of the engine's own tools ([`specs::is_engine_tool`]).
    async fn engine_tool(&mut self, call: &ToolCall) -> HandlerResult<ToolOutput> {
        if let Err(refused) = control::checked(call) {
            return Ok(refused);
        }
        match call.name.as_str() {
            specs::LIST_TOOL => self.list_agents(call).await,
            specs::MESSAGE_TOOL => self.send_message(call).await,
            specs::WAIT_TOOL => self.wait(call).await,
            specs::INTERRUPT_TOOL => self.interrupt_agent(call).await,
            _ => self.delegate(call).await,
        }
    }
}

/// The items of a claim as the machine takes them.
fn pending_items(claim: TurnClaim) -> Vec<PendingItem> {
    claim
        .claimed
        .into_iter()
        .map(|claimed| PendingItem {
            message: claimed.item.message,
            target: claimed.target,
            wake: claimed.item.wake,
        })
        .collect()
}

/// Stream one reply to its end. A failure is an error, so the journaled
/// step retries it (at most [`MODEL_ATTEMPTS`] in all).
async fn ask_model(model: &dyn dsh_core::Model, request: ModelRequest) -> HandlerResult<StepReply> {
    let mut stream = model.stream(request, CancellationToken::new()).await?;
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut usage = Usage::default();
    while let Some(event) = stream.next().await {
        match event? {
            ModelEvent::TextDelta(delta) => text.push_str(&delta),
            ModelEvent::ToolCall(call) => calls.push(call),
            ModelEvent::Usage(more) => usage += more,
            ModelEvent::Finish(finish) => {
                return Ok(StepReply::Reply {
                    text,
                    calls,
                    usage,
                    finish,
                });
            }
        }
    }
    Err(TerminalError::new("the response ended without a finish reason").into())
}
