//! The turn machine on its own (B59): driven by a scripted host, with no
//! runtime, clock or store. Examples pin the effect sequence of the common
//! turns; properties drive arbitrary sequences of model replies, tool
//! results, steering arrivals and a cancellation at any point, and check
//! what every turn's log must be: one start and one end, steps numbered in
//! order within the limit, every call answered in order, every claim
//! written as its messages and then their ids, streamed text kept, a
//! cancellation always ending the turn aborted, and the same inputs giving
//! the same log.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;

use dsh_core::projection::PendingItem;
use dsh_core::session::{
    AssistantEntry, InboxIds, StepStart, ToolResultEntry, TurnEnd, TurnStart, UserEntry,
};
use dsh_core::{
    CallId, ContentBlock, EventPayload, FinishReason, InboxTarget, SessionEvent, StopReason,
    ToolCall, ToolInput, ToolOutput, Usage, UserMessage,
};
use dsh_harness::turn::{
    CANCELLED_TOOL_CALL, Check, Effect, INTERRUPTED_TOOL_CALL, INTERRUPTED_TURN, Input,
    ModelOutcome, ModelReply, TurnMachine, close_interrupted_turn,
};
use proptest::prelude::*;

/// A host that answers every effect from a script and records what the
/// machine asked and wrote.
#[derive(Clone, Debug, Default)]
struct Host {
    next_turn: VecDeque<PendingItem>,
    next_step: VecDeque<PendingItem>,
    /// Steering that arrives before the n-th effect is answered.
    arrivals: Vec<(usize, PendingItem)>,
    replies: VecDeque<ModelOutcome>,
    /// Per tool step: `None` when the turn is cut while its tools run;
    /// otherwise the flags (`end_turn`, `is_error`) given to each call in turn.
    tools: VecDeque<Option<Vec<(bool, bool)>>>,
    /// Cancelled from this cancellation question on.
    cancel_from: Option<usize>,
    questions: usize,
    /// Every write, in order.
    writes: Vec<Vec<EventPayload>>,
    /// Every effect, in order.
    trace: Vec<Effect>,
    /// The effect index at which a cancellation was first answered `true`.
    cancelled_at: Option<usize>,
}

fn item(text: &str, target: InboxTarget, wake: bool) -> PendingItem {
    PendingItem {
        message: UserMessage::user_text(text),
        target,
        wake,
    }
}

fn call(id: &str) -> ToolCall {
    ToolCall {
        call_id: CallId::new(id),
        name: "read".into(),
        input: ToolInput::empty_object(),
    }
}

fn reply(text: &str, calls: Vec<ToolCall>, finish: FinishReason) -> ModelOutcome {
    ModelOutcome::Reply(ModelReply {
        text: text.into(),
        calls,
        usage: Usage::default(),
        finish,
    })
}

impl Host {
    /// Drive turn `turn` (limit `limit`) to its end.
    fn run(&mut self, turn: u64, limit: u64) -> TurnMachine {
        let (mut machine, mut effect) = TurnMachine::start(turn, limit);
        for index in 0.. {
            assert!(index < 10_000, "the turn never ends");
            self.trace.push(effect.clone());
            let (arrived, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.arrivals)
                .into_iter()
                .partition(|(at, _)| *at <= index);
            self.arrivals = later;
            self.next_step
                .extend(arrived.into_iter().map(|(_, item)| item));
            let input =
                match effect {
                    Effect::Claim { turn_boundary } => {
                        let mut batch: Vec<PendingItem> = self.next_step.drain(..).collect();
                        if turn_boundary && let Some(item) = self.next_turn.pop_front() {
                            batch.push(item);
                        }
                        Input::Claimed(batch)
                    }
                    Effect::SteeringWakes => {
                        Input::SteeringWakes(self.next_step.iter().any(|item| item.wake))
                    }
                    Effect::IsCancelled(_) => {
                        let cancelled = self.cancel_from.is_some_and(|from| self.questions >= from);
                        self.questions += 1;
                        if cancelled {
                            self.cancelled_at.get_or_insert(index);
                        }
                        Input::Cancelled(cancelled)
                    }
                    Effect::Append(payloads) => {
                        self.writes.push(payloads);
                        Input::Appended
                    }
                    Effect::AskModel { .. } => Input::Model(
                        self.replies
                            .pop_front()
                            .unwrap_or_else(|| reply("", Vec::new(), FinishReason::EndTurn)),
                    ),
                    Effect::CallTools => {
                        let calls = machine.calls().len();
                        Input::Tools(self.tools.pop_front().unwrap_or(Some(Vec::new())).map(
                            |flags| {
                                (0..calls)
                                    .map(|n| {
                                        let (end_turn, is_error) =
                                            flags.get(n).copied().unwrap_or((false, false));
                                        ToolOutput {
                                            content: vec![ContentBlock::text(format!("out {n}"))],
                                            is_error,
                                            end_turn,
                                        }
                                    })
                                    .collect()
                            },
                        ))
                    }
                    Effect::Done => return machine,
                };
            effect = machine
                .resume(input)
                .expect("the host answers what was asked");
        }
        unreachable!()
    }

    fn log(&self) -> Vec<EventPayload> {
        self.writes.iter().flatten().cloned().collect()
    }
}

fn text(payload: &EventPayload) -> Option<String> {
    match payload {
        EventPayload::AssistantMessage(AssistantEntry { content }) => match content.as_slice() {
            [ContentBlock::Text { text }] => Some(text.clone()),
            _ => None,
        },
        _ => None,
    }
}

fn end_of(log: &[EventPayload]) -> &TurnEnd {
    match log.last() {
        Some(EventPayload::TurnEnd(end)) => end,
        other => panic!("the log ends with {other:?}"),
    }
}

#[test]
fn a_one_step_turn_asks_in_order_and_ends_in_the_replys_write() {
    let prompt = item("hi", InboxTarget::NextTurn, true);
    let mut host = Host {
        next_turn: VecDeque::from([prompt.clone()]),
        replies: VecDeque::from([ModelOutcome::Reply(ModelReply {
            text: "hello".into(),
            calls: Vec::new(),
            usage: Usage {
                input_tokens: 3,
                output_tokens: 1,
                ..Usage::default()
            },
            finish: FinishReason::EndTurn,
        })]),
        ..Host::default()
    };
    host.run(4, 10);
    let names: Vec<&str> = host
        .trace
        .iter()
        .map(|effect| match effect {
            Effect::Claim { .. } => "claim",
            Effect::SteeringWakes => "steering",
            Effect::IsCancelled(_) => "cancelled?",
            Effect::Append(_) => "append",
            Effect::AskModel { .. } => "model",
            Effect::CallTools => "tools",
            Effect::Done => "done",
        })
        .collect();
    assert_eq!(
        names,
        [
            "claim",
            "cancelled?",
            "append",
            "cancelled?",
            "model",
            "cancelled?",
            "steering",
            "append",
            "done"
        ]
    );
    assert_eq!(
        host.writes,
        [
            vec![
                EventPayload::TurnStart(TurnStart { turn: 4 }),
                EventPayload::UserMessage(UserEntry {
                    message: prompt.message.clone()
                }),
                EventPayload::InboxClaimed(InboxIds {
                    message_ids: vec![prompt.message.id.clone()]
                }),
                EventPayload::StepStart(StepStart { turn: 4, step: 0 }),
            ],
            vec![
                EventPayload::AssistantMessage(AssistantEntry {
                    content: vec![ContentBlock::text("hello")]
                }),
                EventPayload::Usage(Usage {
                    input_tokens: 3,
                    output_tokens: 1,
                    ..Usage::default()
                }),
                EventPayload::TurnEnd(TurnEnd {
                    turn: 4,
                    stop_reason: StopReason::COMPLETED,
                    diagnostic: None,
                }),
            ],
        ]
    );
}

#[test]
fn a_turn_cancelled_before_it_starts_writes_no_step() {
    let mut host = Host {
        next_turn: VecDeque::from([item("hi", InboxTarget::NextTurn, true)]),
        cancel_from: Some(0),
        ..Host::default()
    };
    host.run(0, 10);
    let log = host.log();
    assert!(!log.iter().any(|p| matches!(p, EventPayload::StepStart(_))));
    assert_eq!(end_of(&log).stop_reason, StopReason::ABORTED);
    assert!(
        !host
            .trace
            .iter()
            .any(|e| matches!(e, Effect::AskModel { .. }))
    );
}

#[test]
fn the_step_limit_ends_the_turn_with_its_diagnostic() {
    let mut host = Host {
        replies: (0..5)
            .map(|n| reply("", vec![call(&format!("c{n}"))], FinishReason::ToolUse))
            .collect(),
        ..Host::default()
    };
    host.run(0, 3);
    let log = host.log();
    let end = end_of(&log);
    assert_eq!(end.stop_reason, StopReason::STEP_LIMIT);
    assert_eq!(
        end.diagnostic.as_deref(),
        Some("the turn reached its limit of 3 steps while the model was still calling tools")
    );
    let steps = log
        .iter()
        .filter(|p| matches!(p, EventPayload::StepStart(_)))
        .count();
    assert_eq!(steps, 3);
}

#[test]
fn tools_cut_by_a_cancel_each_get_the_cancelled_result() {
    let mut host = Host {
        replies: VecDeque::from([reply("", vec![call("a"), call("b")], FinishReason::ToolUse)]),
        tools: VecDeque::from([None]),
        ..Host::default()
    };
    host.run(0, 10);
    let results: Vec<_> = host
        .log()
        .into_iter()
        .filter_map(|p| match p {
            EventPayload::ToolResult(result) => Some(result),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2);
    for (result, id) in results.iter().zip(["a", "b"]) {
        assert_eq!(result.call_id.as_str(), id);
        assert!(result.is_error);
        assert_eq!(
            result.content,
            vec![ContentBlock::text(CANCELLED_TOOL_CALL)]
        );
    }
    assert_eq!(end_of(&host.log()).stop_reason, StopReason::ABORTED);
}

#[test]
fn an_input_that_answers_nothing_asked_is_refused_and_changes_nothing() {
    let (mut machine, effect) = TurnMachine::start(2, 5);
    assert_eq!(
        effect,
        Effect::Claim {
            turn_boundary: true
        }
    );
    let err = machine.resume(Input::Appended).unwrap_err();
    assert_eq!(err.turn, 2);
    assert_eq!(err.waited, "a claim");
    // Still waiting for the claim.
    assert_eq!(
        machine.resume(Input::Claimed(Vec::new())),
        Ok(Effect::IsCancelled(Check::TurnStart))
    );
}

#[test]
fn a_resume_answers_each_unanswered_call_of_the_open_turn_in_order() {
    let event = |seq: u64, payload| SessionEvent {
        seq,
        time: seq,
        payload,
    };
    let events = vec![
        event(0, EventPayload::TurnStart(TurnStart { turn: 0 })),
        event(1, EventPayload::ToolCall(call("old"))),
        event(
            2,
            EventPayload::TurnEnd(TurnEnd {
                turn: 0,
                stop_reason: StopReason::COMPLETED,
                diagnostic: None,
            }),
        ),
        event(3, EventPayload::TurnStart(TurnStart { turn: 1 })),
        event(4, EventPayload::ToolCall(call("x"))),
        event(5, EventPayload::ToolCall(call("y"))),
        event(
            6,
            EventPayload::ToolResult(ToolResultEntry {
                call_id: CallId::new("x"),
                name: "read".into(),
                content: vec![ContentBlock::text("done")],
                is_error: false,
            }),
        ),
    ];
    let repair = close_interrupted_turn(1, &events, 99);
    let seqs: Vec<u64> = repair.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [7, 8]);
    assert!(repair.iter().all(|e| e.time == 99));
    assert_eq!(
        repair[0].payload,
        EventPayload::ToolResult(ToolResultEntry {
            call_id: CallId::new("y"),
            name: "read".into(),
            content: vec![ContentBlock::text(INTERRUPTED_TOOL_CALL)],
            is_error: true,
        })
    );
    assert_eq!(
        repair[1].payload,
        EventPayload::TurnEnd(TurnEnd {
            turn: 1,
            stop_reason: StopReason::ABORTED,
            diagnostic: Some(INTERRUPTED_TURN.into()),
        })
    );
}

fn finish() -> impl Strategy<Value = FinishReason> {
    prop_oneof![
        6 => Just(FinishReason::EndTurn),
        6 => Just(FinishReason::ToolUse),
        1 => Just(FinishReason::MaxTokens),
        1 => Just(FinishReason::Refusal),
        1 => Just(FinishReason::Other("odd".into())),
    ]
}

fn outcome(step: usize) -> impl Strategy<Value = ModelOutcome> {
    let reply = (any::<bool>(), 0..3usize, 0..3u64, finish()).prop_map(
        move |(has_text, calls, tokens, finish)| {
            ModelOutcome::Reply(ModelReply {
                text: if has_text {
                    format!("text {step}")
                } else {
                    String::new()
                },
                calls: (0..calls).map(|n| call(&format!("c-{step}-{n}"))).collect(),
                usage: Usage {
                    input_tokens: tokens,
                    ..Usage::default()
                },
                finish,
            })
        },
    );
    prop_oneof![
        12 => reply,
        1 => any::<bool>().prop_map(move |t| ModelOutcome::Cancelled {
            text: if t { format!("cut {step}") } else { String::new() },
        }),
        1 => any::<bool>().prop_map(move |t| ModelOutcome::Failed {
            text: if t { format!("partial {step}") } else { String::new() },
            diagnostic: "API error: boom".into(),
        }),
    ]
}

fn host() -> impl Strategy<Value = (Host, u64)> {
    let replies = (0..8usize)
        .map(outcome)
        .collect::<Vec<_>>()
        .prop_map(VecDeque::from);
    let tools = proptest::collection::vec(
        proptest::option::weighted(
            0.9,
            proptest::collection::vec((proptest::bool::weighted(0.1), any::<bool>()), 0..3),
        ),
        0..8,
    )
    .prop_map(VecDeque::from);
    let items = |target| {
        proptest::collection::vec(any::<bool>(), 0..3).prop_map(move |wakes| {
            wakes
                .into_iter()
                .enumerate()
                .map(|(n, wake)| item(&format!("{target:?} {n}"), target, wake))
                .collect::<VecDeque<_>>()
        })
    };
    let arrivals = proptest::collection::vec((0..40usize, any::<bool>()), 0..4).prop_map(|list| {
        list.into_iter()
            .map(|(at, wake)| {
                (
                    at,
                    item(&format!("steer at {at}"), InboxTarget::NextStep, wake),
                )
            })
            .collect::<Vec<_>>()
    });
    (
        replies,
        tools,
        items(InboxTarget::NextTurn),
        items(InboxTarget::NextStep),
        arrivals,
        proptest::option::weighted(0.3, 0..12usize),
        1..6u64,
    )
        .prop_map(
            |(replies, tools, next_turn, next_step, arrivals, cancel_from, limit)| {
                let host = Host {
                    next_turn,
                    next_step,
                    arrivals,
                    replies,
                    tools,
                    cancel_from,
                    ..Host::default()
                };
                (host, limit)
            },
        )
}

proptest! {
    // No regression files in the tree: a failure prints its minimal input.
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_turn_writes_a_well_formed_log((script, limit) in host()) {
        let mut host = script.clone();
        let machine = host.run(7, limit);
        let log = host.log();

        // The same inputs write the same log (B59).
        let mut again = script.clone();
        again.run(7, limit);
        prop_assert_eq!(&again.writes, &host.writes);
        prop_assert_eq!(&again.trace, &host.trace);

        // One start, one end, the end last.
        prop_assert_eq!(&log[0], &EventPayload::TurnStart(TurnStart { turn: 7 }));
        let end = end_of(&log).clone();
        prop_assert_eq!(end.turn, 7);
        prop_assert_eq!(log.iter().filter(|p| matches!(p, EventPayload::TurnEnd(_))).count(), 1);
        prop_assert_eq!(host.trace.last(), Some(&Effect::Done));
        prop_assert!(machine.calls().is_empty());

        // Steps in order, within the limit, each started before the model.
        let steps: Vec<u64> = log.iter().filter_map(|p| match p {
            EventPayload::StepStart(StepStart { turn, step }) => {
                assert_eq!(*turn, 7);
                Some(*step)
            }
            _ => None,
        }).collect();
        prop_assert_eq!(&steps, &(0..steps.len() as u64).collect::<Vec<_>>());
        prop_assert!(steps.len() as u64 <= limit);
        let asked = host.trace.iter().filter(|e| matches!(e, Effect::AskModel { .. })).count();
        // Only a cancel between a step's start and its model call leaves
        // a step unasked.
        prop_assert!(
            asked == steps.len() || (asked + 1 == steps.len() && host.cancelled_at.is_some()),
            "{} steps, {} asked", steps.len(), asked
        );

        // Every call answered, in order, before the next step or the end.
        let mut open: VecDeque<CallId> = VecDeque::new();
        for payload in &log {
            match payload {
                EventPayload::ToolCall(call) => open.push_back(call.call_id.clone()),
                EventPayload::ToolResult(result) => {
                    let answered = open.pop_front();
                    prop_assert_eq!(answered.as_ref(), Some(&result.call_id));
                }
                EventPayload::StepStart(_) | EventPayload::TurnEnd(_) => {
                    prop_assert!(open.is_empty(), "a call left unanswered: {:?}", open);
                }
                _ => {}
            }
        }

        // Every claim: its messages, then their ids.
        let mut messages = Vec::new();
        for payload in &log {
            match payload {
                EventPayload::UserMessage(entry) => messages.push(entry.message.id.clone()),
                EventPayload::InboxClaimed(InboxIds { message_ids }) => {
                    prop_assert_eq!(&std::mem::take(&mut messages), message_ids);
                }
                _ => prop_assert!(messages.is_empty()),
            }
        }

        // Streamed text is kept, in order, whatever happened (B13).
        let said: Vec<String> = log.iter().filter_map(text).collect();
        let streamed: Vec<String> = script.replies.iter().take(asked).map(|o| match o {
            ModelOutcome::Reply(r) => r.text.clone(),
            ModelOutcome::Cancelled { text } | ModelOutcome::Failed { text, .. } => text.clone(),
        }).filter(|t| !t.is_empty()).collect();
        prop_assert_eq!(said, streamed);

        // A cancellation seen ends the turn aborted, and nothing is asked
        // of the model or the tools after it.
        if let Some(at) = host.cancelled_at {
            prop_assert_eq!(&end.stop_reason, &StopReason::ABORTED);
            let asks_after = host.trace[at..]
                .iter()
                .any(|e| matches!(e, Effect::AskModel { .. } | Effect::CallTools));
            prop_assert!(!asks_after, "asked the model or the tools after a cancel");
        }

        // The end says why.
        let last = script.replies.iter().take(asked).next_back();
        if end.stop_reason == StopReason::STEP_LIMIT {
            prop_assert_eq!(steps.len() as u64, limit);
            prop_assert_eq!(end.diagnostic, Some(format!(
                "the turn reached its limit of {limit} steps while the model was still calling tools")));
        } else if let Some(ModelOutcome::Failed { diagnostic, .. }) = last {
            prop_assert_eq!(&end.stop_reason, &StopReason::ERROR);
            prop_assert_eq!(end.diagnostic.as_ref(), Some(diagnostic));
        } else if let Some(ModelOutcome::Reply(reply)) = last
            && host.cancelled_at.is_none()
            && !matches!(reply.finish, FinishReason::EndTurn | FinishReason::ToolUse)
        {
            prop_assert_eq!(&end.stop_reason, &reply.finish.stop_reason());
            // Its calls are not run.
            let ran = log
                .iter()
                .any(|p| matches!(p, EventPayload::ToolCall(c) if reply.calls.contains(c)));
            prop_assert!(!ran, "wrote the calls of a reply that did not finish normally");
        }
    }
}
