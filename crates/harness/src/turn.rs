//! The turn as a state machine over effects, in the sans-IO style of
//! quinn-proto's `Connection`: a [`TurnMachine`] holds where one turn stands
//! (its step, the step's tool calls, how it ends) and decides every event
//! the turn writes, but performs nothing itself. Each call of
//! [`TurnMachine::resume`] takes the answer to the last [`Effect`] it asked
//! for (an [`Input`]) and returns the next one: claim input, ask whether
//! the turn is cancelled or steering wakes, append events, ask the model,
//! run the step's tool calls, or the turn is done. A host drives it: the
//! local loop ([`LoopAgent`](crate::LoopAgent)) through the async
//! [`Effects`] seam and [`drive`], a replay from a recorded log
//! ([`replay`](crate::replay)). The events a turn writes are a function of
//! the inputs alone, so the same inputs produce the same log (B59).
//!
//! Also here: the events that close a turn a crash left open
//! ([`close_interrupted_turn`]), which a resume writes before the session
//! goes on. This module must never touch a clock, a store, a model or a
//! tool: every outside fact enters as an [`Input`].

use std::collections::HashSet;

use dsh_core::projection::PendingItem;
use dsh_core::session::{
    AssistantEntry, InboxIds, StepStart, ToolResultEntry, TurnEnd, TurnStart, UserEntry,
};
use dsh_core::{
    AgentError, CallId, ContentBlock, EventPayload, FinishReason, SessionEvent, StopReason,
    ToolCall, ToolOutput, ToolSpec, Usage,
};

/// The message a tool call left unanswered by a crash is answered with (B53).
pub const INTERRUPTED_TOOL_CALL: &str =
    "The session stopped before this tool call returned; its outcome is unknown.";

/// The result every call of a step gets when the turn is cancelled while
/// its tools run.
pub const CANCELLED_TOOL_CALL: &str = "The tool call was cancelled.";

/// The diagnostic of the `turn/end` a resume writes for a turn a crash cut.
pub const INTERRUPTED_TURN: &str = "the session stopped while this turn was running";

/// What the machine asks its host to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Take the input the turn claims: all next-step input plus, at a turn
    /// boundary, one next-turn item. Answer [`Input::Claimed`].
    Claim {
        /// The turn's start (one next-turn item joins) or a step boundary.
        turn_boundary: bool,
    },
    /// Whether any pending next-step input wakes the agent (a look, not a
    /// claim). Answer [`Input::SteeringWakes`].
    SteeringWakes,
    /// Whether the turn is cancelled now, asked at `Check`. Answer
    /// [`Input::Cancelled`].
    IsCancelled(Check),
    /// Append these events to the log, in one write (the host gives them
    /// their seqs and time). Answer [`Input::Appended`].
    Append(Vec<EventPayload>),
    /// Ask the model for step `step` of turn `turn`, over the conversation
    /// as the log has it and the tool specs offered now. Answer
    /// [`Input::Model`].
    AskModel {
        /// The turn.
        turn: u64,
        /// The step.
        step: u64,
    },
    /// Run the step's tool calls ([`TurnMachine::calls`]). Answer
    /// [`Input::Tools`].
    CallTools,
    /// The turn is over and its `turn/end` is written; nothing more to do
    /// but the turn-boundary checkpoint.
    Done,
}

/// Where a turn asks whether it is cancelled: the points the loop has
/// always looked (a host that infers cancellation, such as a replay,
/// needs to know which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Before the turn's first write (a turn cancelled by now starts no step).
    TurnStart,
    /// Before a step begins.
    StepStart,
    /// After a reply that calls no tool, before it ends the turn.
    Reply,
    /// After the step's tools are answered (or when there were none).
    Tools,
}

/// The answer to the last [`Effect`].
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// What [`Effect::Claim`] took, in claim order.
    Claimed(Vec<PendingItem>),
    /// The answer to [`Effect::SteeringWakes`].
    SteeringWakes(bool),
    /// The answer to [`Effect::IsCancelled`].
    Cancelled(bool),
    /// [`Effect::Append`] is written (a failed write ends the drive instead).
    Appended,
    /// How [`Effect::AskModel`] went.
    Model(ModelOutcome),
    /// The outputs of [`Effect::CallTools`] in call order, or `None` when
    /// the turn was cancelled while they ran.
    Tools(Option<Vec<ToolOutput>>),
}

/// How one model call went. Its streamed text is kept whatever happens
/// (B13).
#[derive(Debug, Clone, PartialEq)]
pub enum ModelOutcome {
    /// A complete reply.
    Reply(ModelReply),
    /// The turn was cancelled during the call; `text` is what streamed.
    Cancelled {
        /// The text streamed before the cut.
        text: String,
    },
    /// The call failed; `diagnostic` says how (the model error's text).
    Failed {
        /// The text streamed before the failure.
        text: String,
        /// The failure, as the turn's end reports it.
        diagnostic: String,
    },
}

/// A model's complete reply to one step.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    /// The text it streamed.
    pub text: String,
    /// The tool calls it made, in order.
    pub calls: Vec<ToolCall>,
    /// The usage it reported, summed.
    pub usage: Usage,
    /// Why it stopped.
    pub finish: FinishReason,
}

/// Where a turn stands: which answer it waits for, and what it does with it.
#[derive(Debug, Clone)]
enum Phase {
    /// Waits for the turn's claim.
    Claim,
    /// Waits to know whether the turn is cancelled before its first write.
    StartCheck(Vec<PendingItem>),
    /// The turn's first write is under way (`started`: with step 0's start).
    TurnStarted { started: bool },
    /// Waits to know whether the step begins cancelled.
    StepCheck { started: bool },
    /// The step's `step/start` is under way.
    StepStarted,
    /// Waits for the model.
    Asking,
    /// A reply that calls nothing: waits to know whether the turn is
    /// cancelled, then whether steering wakes.
    ReplyCheck(Vec<EventPayload>),
    /// As `ReplyCheck`, waiting for the steering answer.
    ReplySteering(Vec<EventPayload>),
    /// The reply's events are under way.
    ReplyWritten(FinishReason),
    /// Waits for the tools.
    Tools,
    /// The results are under way (`aborted`: the tools were cut;
    /// `end_turn`: a tool asked to end the turn).
    ResultsWritten { aborted: bool, end_turn: bool },
    /// After the tools: waits to know whether the turn is cancelled.
    ToolsCheck,
    /// At the step boundary with no call to answer: does steering wake?
    BoundarySteering,
    /// At the step boundary: waits for the claim.
    BoundaryClaim,
    /// The boundary's claim is under way.
    ClaimWritten,
    /// Text a failed or cut step streamed is under way; then the turn ends.
    TextWritten(StopReason, Option<String>),
    /// The `turn/end` is under way (or written with the step's last events).
    Ending,
    /// Done.
    Over,
}

/// One turn as a state machine. Start it with [`TurnMachine::start`], then
/// perform each [`Effect`] and hand its answer to [`TurnMachine::resume`]
/// until [`Effect::Done`]. A host that cannot perform an effect (a failed
/// write, a log that is gone) stops driving: the machine holds no resource.
#[derive(Debug, Clone)]
pub struct TurnMachine {
    turn: u64,
    limit: u64,
    step: u64,
    phase: Phase,
    /// The step's tool calls, from the reply to the step boundary.
    calls: Vec<ToolCall>,
}

/// The machine was handed an input it did not ask for: a host's bug.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("turn {turn} got {input} while it waited for {waited}")]
pub struct UnexpectedInput {
    /// The turn.
    pub turn: u64,
    /// What it got.
    pub input: &'static str,
    /// What it waited for.
    pub waited: &'static str,
}

impl TurnMachine {
    /// Turn `turn`, with at most `step_limit` steps (at least one). The
    /// first effect is the turn's claim.
    pub fn start(turn: u64, step_limit: u64) -> (Self, Effect) {
        let machine = Self {
            turn,
            limit: step_limit.max(1),
            step: 0,
            phase: Phase::Claim,
            calls: Vec::new(),
        };
        (
            machine,
            Effect::Claim {
                turn_boundary: true,
            },
        )
    }

    /// The turn's number.
    pub fn turn(&self) -> u64 {
        self.turn
    }

    /// The step under way.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The calls [`Effect::CallTools`] runs.
    pub fn calls(&self) -> &[ToolCall] {
        &self.calls
    }

    /// Take the answer to the last effect and return the next effect.
    ///
    /// # Errors
    /// [`UnexpectedInput`] when `input` does not answer the last effect;
    /// the machine is then unchanged.
    pub fn resume(&mut self, input: Input) -> Result<Effect, UnexpectedInput> {
        let phase = std::mem::replace(&mut self.phase, Phase::Over);
        match (phase, input) {
            (Phase::Claim, Input::Claimed(batch)) => {
                self.phase = Phase::StartCheck(batch);
                Ok(Effect::IsCancelled(Check::TurnStart))
            }
            (Phase::StartCheck(batch), Input::Cancelled(cancelled)) => {
                let mut payloads = vec![EventPayload::TurnStart(TurnStart { turn: self.turn })];
                payloads.extend(claim_payloads(batch));
                // The first step's start goes out with the turn's: one
                // write fewer per turn, and the same log as two writes
                // would leave (a turn already cancelled starts no step).
                let started = !cancelled;
                if started {
                    payloads.push(self.step_start());
                }
                self.phase = Phase::TurnStarted { started };
                Ok(Effect::Append(payloads))
            }
            (Phase::TurnStarted { started }, Input::Appended) => Ok(self.begin_step(started)),
            (Phase::StepCheck { started }, Input::Cancelled(cancelled)) => {
                if cancelled {
                    return Ok(self.end(StopReason::ABORTED, None));
                }
                if started {
                    return Ok(self.ask());
                }
                self.phase = Phase::StepStarted;
                Ok(Effect::Append(vec![self.step_start()]))
            }
            (Phase::StepStarted, Input::Appended) => Ok(self.ask()),
            (Phase::Asking, Input::Model(outcome)) => Ok(self.answered(outcome)),
            (Phase::ReplyCheck(payloads), Input::Cancelled(cancelled)) => {
                if cancelled {
                    return Ok(self.write_reply(payloads, FinishReason::EndTurn));
                }
                self.phase = Phase::ReplySteering(payloads);
                Ok(Effect::SteeringWakes)
            }
            (Phase::ReplySteering(mut payloads), Input::SteeringWakes(wakes)) => {
                if wakes {
                    return Ok(self.write_reply(payloads, FinishReason::EndTurn));
                }
                // A reply that calls no tool ends the turn, in the same
                // write as its events.
                payloads.push(self.turn_end(StopReason::COMPLETED, None));
                self.phase = Phase::Ending;
                Ok(Effect::Append(payloads))
            }
            (Phase::ReplyWritten(finish), Input::Appended) => Ok(self.after_reply(finish)),
            (Phase::Tools, Input::Tools(outputs)) => Ok(self.results(outputs)),
            (Phase::ResultsWritten { aborted, end_turn }, Input::Appended) => {
                if aborted {
                    return Ok(self.end(StopReason::ABORTED, None));
                }
                Ok(self.after_tools(end_turn))
            }
            (Phase::ToolsCheck, Input::Cancelled(cancelled)) => {
                if cancelled {
                    return Ok(self.end(StopReason::ABORTED, None));
                }
                Ok(self.boundary())
            }
            (Phase::BoundarySteering, Input::SteeringWakes(wakes)) => {
                if !wakes {
                    return Ok(self.end(StopReason::COMPLETED, None));
                }
                self.phase = Phase::BoundaryClaim;
                Ok(Effect::Claim {
                    turn_boundary: false,
                })
            }
            (Phase::BoundaryClaim, Input::Claimed(batch)) => {
                if !batch.is_empty() {
                    self.phase = Phase::ClaimWritten;
                    return Ok(Effect::Append(claim_payloads(batch)));
                }
                if self.calls.is_empty() {
                    return Ok(self.end(StopReason::COMPLETED, None));
                }
                Ok(self.next_step())
            }
            (Phase::ClaimWritten, Input::Appended) => Ok(self.next_step()),
            (Phase::TextWritten(reason, diagnostic), Input::Appended) => {
                Ok(self.end(reason, diagnostic))
            }
            (Phase::Ending, Input::Appended) => Ok(Effect::Done),
            (phase, input) => {
                let err = UnexpectedInput {
                    turn: self.turn,
                    input: input_name(&input),
                    waited: phase_wants(&phase),
                };
                self.phase = phase;
                Err(err)
            }
        }
    }

    fn step_start(&self) -> EventPayload {
        EventPayload::StepStart(StepStart {
            turn: self.turn,
            step: self.step,
        })
    }

    fn turn_end(&self, stop_reason: StopReason, diagnostic: Option<String>) -> EventPayload {
        EventPayload::TurnEnd(TurnEnd {
            turn: self.turn,
            stop_reason,
            diagnostic,
        })
    }

    /// Step `self.step` begins (`started`: its `step/start` is written).
    fn begin_step(&mut self, started: bool) -> Effect {
        self.phase = Phase::StepCheck { started };
        Effect::IsCancelled(Check::StepStart)
    }

    fn ask(&mut self) -> Effect {
        self.phase = Phase::Asking;
        Effect::AskModel {
            turn: self.turn,
            step: self.step,
        }
    }

    /// Write the turn's end.
    fn end(&mut self, reason: StopReason, diagnostic: Option<String>) -> Effect {
        self.calls.clear();
        self.phase = Phase::Ending;
        Effect::Append(vec![self.turn_end(reason, diagnostic)])
    }

    fn answered(&mut self, outcome: ModelOutcome) -> Effect {
        let (text, reason, diagnostic) = match outcome {
            ModelOutcome::Reply(reply) => return self.record_reply(reply),
            ModelOutcome::Cancelled { text } => (text, StopReason::ABORTED, None),
            ModelOutcome::Failed { text, diagnostic } => {
                (text, StopReason::ERROR, Some(diagnostic))
            }
        };
        // Streamed text survives an abort or a failure of the step (B13).
        if text.is_empty() {
            return self.end(reason, diagnostic);
        }
        self.phase = Phase::TextWritten(reason, diagnostic);
        Effect::Append(vec![text_payload(text)])
    }

    /// Record a complete reply: its text, its calls (only when it finished
    /// normally) and its usage.
    fn record_reply(&mut self, reply: ModelReply) -> Effect {
        let normally = finished_normally(&reply.finish);
        self.calls = if normally { reply.calls } else { Vec::new() };
        let mut payloads = Vec::new();
        if !reply.text.is_empty() {
            payloads.push(text_payload(reply.text));
        }
        payloads.extend(self.calls.iter().cloned().map(EventPayload::ToolCall));
        if reply.usage != Usage::default() {
            payloads.push(EventPayload::Usage(reply.usage));
        }
        if normally && self.calls.is_empty() {
            // Ends the turn in this write unless the turn is cancelled or
            // waking steering is pending (the check the step boundary
            // makes, made first).
            self.phase = Phase::ReplyCheck(payloads);
            return Effect::IsCancelled(Check::Reply);
        }
        self.write_reply(payloads, reply.finish)
    }

    fn write_reply(&mut self, payloads: Vec<EventPayload>, finish: FinishReason) -> Effect {
        self.phase = Phase::ReplyWritten(finish);
        Effect::Append(payloads)
    }

    fn after_reply(&mut self, finish: FinishReason) -> Effect {
        if !finished_normally(&finish) {
            let diagnostic = match &finish {
                FinishReason::Other(reason) => Some(format!("the model stopped: {reason}")),
                _ => None,
            };
            return self.end(finish.stop_reason(), diagnostic);
        }
        if self.calls.is_empty() {
            return self.after_tools(false);
        }
        self.phase = Phase::Tools;
        Effect::CallTools
    }

    fn results(&mut self, outputs: Option<Vec<ToolOutput>>) -> Effect {
        let aborted = outputs.is_none();
        let mut end_turn = false;
        let results = match outputs {
            Some(outputs) => self
                .calls
                .iter()
                .zip(outputs)
                .map(|(call, output)| {
                    end_turn |= output.end_turn;
                    result_payload(call, output.content, output.is_error)
                })
                .collect(),
            // Every call gets a result, so the transcript stays well formed.
            None => self
                .calls
                .iter()
                .map(|call| {
                    result_payload(call, vec![ContentBlock::text(CANCELLED_TOOL_CALL)], true)
                })
                .collect(),
        };
        self.phase = Phase::ResultsWritten { aborted, end_turn };
        Effect::Append(results)
    }

    /// After the step's tools (if any) are answered: a tool that asked to
    /// end the turn ends it completed, a cancelled turn ends aborted.
    fn after_tools(&mut self, end_turn: bool) -> Effect {
        if end_turn {
            return self.end(StopReason::COMPLETED, None);
        }
        self.phase = Phase::ToolsCheck;
        Effect::IsCancelled(Check::Tools)
    }

    /// The step boundary: steering and injected context join here. With no
    /// tool call to answer, only waking steering continues the turn.
    fn boundary(&mut self) -> Effect {
        if self.calls.is_empty() {
            self.phase = Phase::BoundarySteering;
            return Effect::SteeringWakes;
        }
        self.phase = Phase::BoundaryClaim;
        Effect::Claim {
            turn_boundary: false,
        }
    }

    fn next_step(&mut self) -> Effect {
        self.calls.clear();
        self.step += 1;
        if self.step >= self.limit {
            let limit = self.limit;
            return self.end(
                StopReason::STEP_LIMIT,
                Some(format!(
                    "the turn reached its limit of {limit} steps while the model was still \
                     calling tools"
                )),
            );
        }
        self.begin_step(false)
    }
}

fn finished_normally(finish: &FinishReason) -> bool {
    matches!(finish, FinishReason::EndTurn | FinishReason::ToolUse)
}

fn text_payload(text: String) -> EventPayload {
    EventPayload::AssistantMessage(AssistantEntry {
        content: vec![ContentBlock::text(text)],
    })
}

fn input_name(input: &Input) -> &'static str {
    match input {
        Input::Claimed(_) => "a claim",
        Input::SteeringWakes(_) => "a steering answer",
        Input::Cancelled(_) => "a cancellation answer",
        Input::Appended => "a written append",
        Input::Model(_) => "a model outcome",
        Input::Tools(_) => "tool outputs",
    }
}

fn phase_wants(phase: &Phase) -> &'static str {
    match phase {
        Phase::Claim | Phase::BoundaryClaim => "a claim",
        Phase::ReplySteering(_) | Phase::BoundarySteering => "a steering answer",
        Phase::StartCheck(_)
        | Phase::StepCheck { .. }
        | Phase::ReplyCheck(_)
        | Phase::ToolsCheck => "a cancellation answer",
        Phase::TurnStarted { .. }
        | Phase::StepStarted
        | Phase::ReplyWritten(_)
        | Phase::ResultsWritten { .. }
        | Phase::ClaimWritten
        | Phase::TextWritten(..)
        | Phase::Ending => "a written append",
        Phase::Asking => "a model outcome",
        Phase::Tools => "tool outputs",
        Phase::Over => "nothing (the turn is over)",
    }
}

/// The events of claiming `batch`: each message, then the claim naming
/// them. A batch torn in between leaves a message either pending (not yet
/// in the transcript) or in the transcript, which claims it
/// ([`PendingInboxProjection`](dsh_core::projection::PendingInboxProjection)):
/// delivered exactly once either way.
pub fn claim_payloads(batch: Vec<PendingItem>) -> Vec<EventPayload> {
    if batch.is_empty() {
        return Vec::new();
    }
    let claimed = EventPayload::InboxClaimed(InboxIds {
        message_ids: batch.iter().map(|item| item.message.id.clone()).collect(),
    });
    let mut payloads: Vec<EventPayload> = batch
        .into_iter()
        .map(|item| {
            EventPayload::UserMessage(UserEntry {
                message: item.message,
            })
        })
        .collect();
    payloads.push(claimed);
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

/// The turn that was started and never ended, if any.
pub fn open_turn<'a, I>(events: I) -> Option<u64>
where
    I: IntoIterator<Item = &'a SessionEvent>,
    I::IntoIter: DoubleEndedIterator,
{
    for event in events.into_iter().rev() {
        match &event.payload {
            EventPayload::TurnEnd(_) => return None,
            EventPayload::TurnStart(start) => return Some(start.turn),
            _ => {}
        }
    }
    None
}

/// The events that close turn `turn`, which `events` leave open, stamped
/// `time`: an error result for every tool call of it that has none (so
/// every transcript answers each call, in order, B53), then the turn's end
/// as `aborted`.
pub fn close_interrupted_turn(turn: u64, events: &[SessionEvent], time: u64) -> Vec<SessionEvent> {
    let start = events
        .iter()
        .rposition(|event| matches!(event.payload, EventPayload::TurnStart(_)))
        .unwrap_or(0);
    let answered: HashSet<&CallId> = events[start..]
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::ToolResult(result) => Some(&result.call_id),
            _ => None,
        })
        .collect();
    let mut payloads: Vec<EventPayload> = events[start..]
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::ToolCall(call) if !answered.contains(&call.call_id) => Some(
                result_payload(call, vec![ContentBlock::text(INTERRUPTED_TOOL_CALL)], true),
            ),
            _ => None,
        })
        .collect();
    payloads.push(EventPayload::TurnEnd(TurnEnd {
        turn,
        stop_reason: StopReason::ABORTED,
        diagnostic: Some(INTERRUPTED_TURN.into()),
    }));
    payloads
        .into_iter()
        .enumerate()
        .map(|(offset, payload)| SessionEvent {
            seq: (events.len() + offset) as u64,
            time,
            payload,
        })
        .collect()
}

/// What a host does for the machine, as async operations: the seam the
/// local loop implements with its log, model and tools, and a journaling
/// engine with its journal. [`drive`] runs a turn over it.
pub trait Effects {
    /// The time events are stamped with, in milliseconds since the epoch.
    fn now(&self) -> u64;

    /// Whether the turn is cancelled now.
    fn is_cancelled(&self) -> bool;

    /// Take what [`Effect::Claim`] asks for.
    fn claim(&mut self, turn_boundary: bool) -> Vec<PendingItem>;

    /// Whether pending next-step input wakes the agent.
    fn steering_wakes(&self) -> bool;

    /// Append `payloads` as events (seqs from the log's length, time
    /// [`now`](Self::now)) in one write, and apply them.
    ///
    /// # Errors
    /// The write failed or the log is gone: the turn cannot go on.
    fn append(
        &mut self,
        payloads: Vec<EventPayload>,
    ) -> impl Future<Output = Result<(), AgentError>> + Send;

    /// The tool specs offered to the model now (a tool's availability and
    /// description may change between steps): asked once per step, before
    /// the model.
    fn tool_specs(&mut self) -> Vec<ToolSpec>;

    /// Ask the model for step `step` of turn `turn`, over the conversation
    /// as the log has it, offering `tools`.
    fn ask_model(
        &mut self,
        turn: u64,
        step: u64,
        tools: Vec<ToolSpec>,
    ) -> impl Future<Output = ModelOutcome> + Send;

    /// Run `calls`; `None` when the turn was cancelled while they ran.
    fn call_tools(
        &mut self,
        calls: &[ToolCall],
    ) -> impl Future<Output = Option<Vec<ToolOutput>>> + Send;
}

/// Run turn `turn` (at most `step_limit` steps) to its end over `effects`.
///
/// # Errors
/// The first failed append: the turn stops there, its end unwritten.
///
/// # Cancel safety
/// Dropped, the turn stops where it awaited (an append, the model or the
/// tools), as the effects' own futures do when dropped.
pub async fn drive<E: Effects + Send>(
    effects: &mut E,
    turn: u64,
    step_limit: u64,
) -> Result<(), AgentError> {
    let (mut machine, mut effect) = TurnMachine::start(turn, step_limit);
    loop {
        let input = match effect {
            Effect::Claim { turn_boundary } => Input::Claimed(effects.claim(turn_boundary)),
            Effect::SteeringWakes => Input::SteeringWakes(effects.steering_wakes()),
            Effect::IsCancelled(_) => Input::Cancelled(effects.is_cancelled()),
            Effect::Append(payloads) => {
                effects.append(payloads).await?;
                Input::Appended
            }
            Effect::AskModel { turn, step } => {
                let tools = effects.tool_specs();
                Input::Model(effects.ask_model(turn, step, tools).await)
            }
            Effect::CallTools => Input::Tools(effects.call_tools(machine.calls()).await),
            Effect::Done => return Ok(()),
        };
        // Cannot fail: every input above answers the effect it follows.
        effect = machine
            .resume(input)
            .map_err(|err| AgentError::InvalidInput(err.to_string()))?;
    }
}
