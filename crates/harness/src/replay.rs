//! Deterministic replay (B59): every turn of a session driven again from
//! its own log through the [`TurnMachine`], which must write the same
//! events. The log supplies the machine's inputs and nothing else: the
//! replies the model gave (its text, calls, usage, and a finish reason read
//! from how the step ended), the tools' outputs, which pending messages a
//! claim took, whether steering woke the turn or a cancel cut it, the step
//! limit a turn ran into, and every event's time. What the machine derives
//! from those (the turn and step numbers, each claimed message copied from
//! the inbox item it claims, every step's start, the results of cut calls,
//! each turn's end and why) is compared event by event with the log, and
//! the first that differs is reported. Events other writers append (inbox
//! arrivals and discards, extensions) are taken as they are and fold into
//! the inbox the claims read. A turn a crash cut is replayed up to the cut;
//! the repair a resume wrote after it must be exactly what
//! [`close_interrupted_turn`] writes. This module must never write to a
//! store.

use std::collections::{HashMap, HashSet, VecDeque};

use dsh_core::projection::{PendingItem, PendingItemsFold};
use dsh_core::session::TurnEnd;
use dsh_core::{
    ContentBlock, EventPayload, FinishReason, SessionEvent, SessionHeader, SessionId, SessionStore,
    StopReason, StoreError, ToolOutput, Usage,
};

use crate::turn::{
    CANCELLED_TOOL_CALL, Check, Effect, INTERRUPTED_TOOL_CALL, INTERRUPTED_TURN, Input,
    ModelOutcome, ModelReply, TurnMachine, close_interrupted_turn,
};

/// The first event where a replay and the log part.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// The session.
    pub session: SessionId,
    /// The seq where they part.
    pub seq: u64,
    /// What the log has there (`None`: the log ends).
    pub expected: Option<SessionEvent>,
    /// What the replay wrote there (`None`: it wrote nothing, the turn
    /// being over or none running).
    pub got: Option<SessionEvent>,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let line = |event: &Option<SessionEvent>| match event {
            Some(event) => event.to_json_line(),
            None => "nothing".to_owned(),
        };
        write!(
            f,
            "{} diverges at seq {}: expected {}, got {}",
            self.session,
            self.seq,
            line(&self.expected),
            line(&self.got)
        )
    }
}

/// How one session's replay went.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Every event the turns wrote came out the same.
    Identical {
        /// The turns replayed.
        turns: u64,
    },
    /// The first difference.
    Diverged(Box<Divergence>),
}

/// One session of a replayed tree.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionReplay {
    /// The session.
    pub id: SessionId,
    /// How it went.
    pub verdict: Verdict,
}

/// Replay one session from its header and log.
pub fn replay_session(header: &SessionHeader, events: &[SessionEvent]) -> Verdict {
    let seed = usize::try_from(header.seed_len)
        .unwrap_or(usize::MAX)
        .min(events.len());
    let mut replay = Replay {
        session: &header.id,
        events,
        cursor: seed,
        inbox: PendingItemsFold::new(),
        turns: events[..seed].iter().filter(|e| is_turn_start(e)).count() as u64,
    };
    match replay.run() {
        Ok(()) => Verdict::Identical {
            turns: replay.turns,
        },
        Err(divergence) => Verdict::Diverged(divergence),
    }
}

/// Replay every session of the tree rooted at `root` (every session in
/// `store` when `None`), parents before their children. A create a crash
/// cut short (no whole header) is passed over.
///
/// # Errors
/// A session that cannot be listed or loaded.
///
/// # Cancel safety
/// Reads only: dropped, nothing is left behind.
pub async fn replay_tree(
    store: &dyn SessionStore,
    root: Option<&SessionId>,
) -> Result<Vec<SessionReplay>, StoreError> {
    let mut ids = store.list().await?;
    ids.sort();
    let mut headers = Vec::with_capacity(ids.len());
    for header in store.header_many(&ids).await {
        match header {
            Ok(header) => headers.push(header),
            // A create a crash cut before its header was whole is no
            // session yet: there is nothing of it to replay.
            Err(StoreError::TornCreate { .. }) => {}
            Err(err) => return Err(err),
        }
    }
    replay_headers(store, &headers, root).await
}

/// [`replay_tree`] over `headers`, the headers of the store's sessions a
/// caller has already read (a command that scanned the store to pick the
/// tree): the tree is ordered from them, and no header is read again. A
/// session whose header is not among them is not replayed.
///
/// # Errors
/// A session that cannot be loaded.
///
/// # Cancel safety
/// Reads only: dropped, nothing is left behind.
pub async fn replay_headers(
    store: &dyn SessionStore,
    headers: &[SessionHeader],
    root: Option<&SessionId>,
) -> Result<Vec<SessionReplay>, StoreError> {
    let mut sorted: Vec<&SessionHeader> = headers.iter().collect();
    sorted.sort_by(|a, b| a.id.cmp(&b.id));
    let mut children: HashMap<SessionId, Vec<SessionId>> = HashMap::new();
    let mut roots = Vec::new();
    let known: HashSet<&SessionId> = sorted.iter().map(|header| &header.id).collect();
    for header in &sorted {
        match &header.parent_session {
            Some(parent) if known.contains(parent) => {
                children
                    .entry(parent.clone())
                    .or_default()
                    .push(header.id.clone());
            }
            _ => roots.push(header.id.clone()),
        }
    }
    // Breadth first from the root (or from every session without a parent
    // in the store), so a parent is replayed before its children.
    let mut queue: VecDeque<SessionId> = match root {
        Some(root) => VecDeque::from([root.clone()]),
        None => roots.into(),
    };
    let mut order: Vec<SessionId> = Vec::new();
    let mut seen: HashSet<SessionId> = HashSet::new();
    while let Some(id) = queue.pop_front() {
        if !seen.insert(id.clone()) {
            continue;
        }
        queue.extend(children.remove(&id).unwrap_or_default());
        order.push(id);
    }
    let mut replays = Vec::with_capacity(order.len());
    for id in order {
        let loaded = store.load(&id).await?;
        let verdict = replay_session(&loaded.header, &loaded.events);
        replays.push(SessionReplay { id, verdict });
    }
    Ok(replays)
}

/// Written by others than the turn (taken as they are).
fn is_external(event: &SessionEvent) -> bool {
    matches!(
        event.payload,
        EventPayload::InboxAccepted(_)
            | EventPayload::InboxDiscarded(_)
            | EventPayload::Extension { .. }
    )
}

fn is_turn_start(event: &SessionEvent) -> bool {
    matches!(event.payload, EventPayload::TurnStart(_))
}

/// The first event of what a resume writes after a crash cut a turn.
fn is_repair(event: &SessionEvent) -> bool {
    match &event.payload {
        EventPayload::ToolResult(result) => {
            result.is_error && result.content == [ContentBlock::text(INTERRUPTED_TOOL_CALL)]
        }
        EventPayload::TurnEnd(end) => {
            end.stop_reason == StopReason::ABORTED
                && end.diagnostic.as_deref() == Some(INTERRUPTED_TURN)
        }
        _ => false,
    }
}

fn is_plain_abort(event: &SessionEvent) -> bool {
    matches!(&event.payload, EventPayload::TurnEnd(TurnEnd { stop_reason, diagnostic: None, .. })
        if *stop_reason == StopReason::ABORTED)
}

/// Where a turn's replay stopped short of its `Done`.
enum Stop {
    /// The log parts from the machine here.
    Diverged(Box<Divergence>),
    /// The turn was cut (a crash): the log ends, or a resume's repair follows.
    Cut,
}

impl From<Box<Divergence>> for Stop {
    fn from(divergence: Box<Divergence>) -> Self {
        Self::Diverged(divergence)
    }
}

struct Replay<'a> {
    session: &'a SessionId,
    events: &'a [SessionEvent],
    /// The next event not yet matched or taken.
    cursor: usize,
    /// The inbox as the log has it so far (the fold a resume makes).
    inbox: PendingItemsFold<'a>,
    turns: u64,
}

impl<'a> Replay<'a> {
    fn run(&mut self) -> Result<(), Box<Divergence>> {
        while let Some(at) = self.next_own() {
            if !is_turn_start(&self.events[at]) {
                return Err(self.diverge(at, None));
            }
            let turn = self.turns;
            self.turns += 1;
            match self.turn(turn, self.limit_of(at)) {
                Ok(()) => {}
                Err(Stop::Diverged(divergence)) => return Err(divergence),
                Err(Stop::Cut) => self.repaired(turn)?,
            }
        }
        Ok(())
    }

    /// Take the events others wrote up to the next one a turn wrote, and
    /// return where it is.
    fn next_own(&mut self) -> Option<usize> {
        let events = self.events;
        while let Some(event) = events.get(self.cursor) {
            if !is_external(event) {
                return Some(self.cursor);
            }
            self.inbox.apply(event);
            self.cursor += 1;
        }
        None
    }

    /// The next event a turn wrote from `from` on, passing those of the
    /// kinds `skip` lets by (a look ahead: nothing is taken).
    fn peek(&self, mut from: usize, skip: impl Fn(&EventPayload) -> bool) -> Option<&SessionEvent> {
        while let Some(event) = self.events.get(from) {
            if !is_external(event) && !skip(&event.payload) {
                return Some(event);
            }
            from += 1;
        }
        None
    }

    fn diverge(&self, at: usize, got: Option<SessionEvent>) -> Box<Divergence> {
        let expected = self.events.get(at).cloned();
        let seq = expected
            .as_ref()
            .or(got.as_ref())
            .map_or(self.events.len() as u64, |event| event.seq);
        Box::new(Divergence {
            session: self.session.clone(),
            seq,
            expected,
            got,
        })
    }

    /// The step limit turn at `at` ran into: the steps it ran when it
    /// ended on the limit, otherwise none.
    fn limit_of(&self, at: usize) -> u64 {
        let mut steps = 0;
        for event in &self.events[at + 1..] {
            match &event.payload {
                EventPayload::StepStart(_) => steps += 1,
                EventPayload::TurnEnd(end) if end.stop_reason == StopReason::STEP_LIMIT => {
                    return steps;
                }
                EventPayload::TurnEnd(_) | EventPayload::TurnStart(_) => break,
                _ => {}
            }
        }
        u64::MAX
    }

    fn turn(&mut self, turn: u64, limit: u64) -> Result<(), Stop> {
        let (mut machine, mut effect) = TurnMachine::start(turn, limit);
        loop {
            let input = match effect {
                Effect::Claim { turn_boundary } => Input::Claimed(self.claimed(turn_boundary)?),
                Effect::SteeringWakes => {
                    let from = self.next_own().ok_or(Stop::Cut)?;
                    let next = self.peek(from, |p| {
                        matches!(
                            p,
                            EventPayload::AssistantMessage(_) | EventPayload::Usage(_)
                        )
                    });
                    Input::SteeringWakes(
                        !next.is_some_and(|e| matches!(e.payload, EventPayload::TurnEnd(_))),
                    )
                }
                Effect::IsCancelled(check) => Input::Cancelled(self.cancelled(check)),
                Effect::Append(payloads) => {
                    for payload in payloads {
                        self.matched(payload)?;
                    }
                    Input::Appended
                }
                Effect::AskModel { .. } => Input::Model(self.reply()?),
                Effect::CallTools => Input::Tools(self.outputs(machine.calls().len())?),
                Effect::Done => return Ok(()),
            };
            // Cannot fail: every input above answers the effect it follows.
            effect = machine.resume(input).map_err(|err| {
                tracing::debug!(session = %self.session, "replay: {err}");
                Stop::Diverged(self.diverge(self.cursor, None))
            })?;
        }
    }

    /// The next event a turn wrote, unless a crash cut the turn before it.
    fn own_or_cut(&mut self) -> Result<usize, Stop> {
        match self.next_own() {
            Some(at) if !is_repair(&self.events[at]) => Ok(at),
            _ => Err(Stop::Cut),
        }
    }

    /// Match the machine's next event with the log's.
    fn matched(&mut self, payload: EventPayload) -> Result<(), Stop> {
        let at = self.own_or_cut()?;
        let events = self.events;
        let recorded = &events[at];
        if recorded.payload != payload {
            let got = SessionEvent {
                seq: recorded.seq,
                time: recorded.time,
                payload,
            };
            return Err(self.diverge(at, Some(got)).into());
        }
        self.inbox.apply(recorded);
        self.cursor = at + 1;
        Ok(())
    }

    /// What the claim took: the items its `inbox/claimed` names (or, in a
    /// write a crash tore, the messages written), as the inbox holds them.
    fn claimed(&mut self, turn_boundary: bool) -> Result<Vec<PendingItem>, Stop> {
        let Some(mut at) = self.next_own() else {
            return Err(Stop::Cut);
        };
        if turn_boundary && self.events.get(at).is_some_and(is_turn_start) {
            at += 1;
        }
        let mut ids = Vec::new();
        while let Some(event) = self.peek(at, |_| false) {
            match &event.payload {
                EventPayload::UserMessage(entry) => ids.push(entry.message.id.clone()),
                EventPayload::InboxClaimed(claimed) => {
                    ids.clone_from(&claimed.message_ids);
                    break;
                }
                _ => break,
            }
            at = usize::try_from(event.seq).unwrap_or(usize::MAX) + 1;
        }
        ids.iter()
            .map(|id| match self.inbox.get(id) {
                Some(item) => Ok(item),
                // A claim of a message that is not pending: the first event
                // naming it is where the log parts from any replay.
                None => {
                    let names = |event: &SessionEvent| match &event.payload {
                        EventPayload::UserMessage(entry) => &entry.message.id == id,
                        EventPayload::InboxClaimed(claimed) => claimed.message_ids.contains(id),
                        _ => false,
                    };
                    let at = self.events[self.cursor..]
                        .iter()
                        .position(names)
                        .map_or(self.events.len(), |offset| self.cursor + offset);
                    Err(Stop::Diverged(self.diverge(at, None)))
                }
            })
            .collect()
    }

    /// Whether the turn was cancelled by `check`: the next event the turn
    /// wrote (past those `check` lets by) is a plain `aborted` end.
    fn cancelled(&mut self, check: Check) -> bool {
        let Some(from) = self.next_own() else {
            return false;
        };
        let next = self.peek(from, |p| match check {
            Check::TurnStart => matches!(
                p,
                EventPayload::TurnStart(_)
                    | EventPayload::UserMessage(_)
                    | EventPayload::InboxClaimed(_)
            ),
            Check::Reply => {
                matches!(
                    p,
                    EventPayload::AssistantMessage(_) | EventPayload::Usage(_)
                )
            }
            Check::StepStart | Check::Tools => false,
        });
        next.is_some_and(is_plain_abort)
    }

    /// The model's answer, read from the step's events and how it ended.
    fn reply(&mut self) -> Result<ModelOutcome, Stop> {
        let mut at = self.own_or_cut()?;
        // The reply's events, in whatever order the log has them: the
        // machine writes them in its own, so a reordering shows.
        let mut text = None;
        let mut calls = Vec::new();
        let mut usage = None;
        while let Some(event) = self.events.get(at) {
            match &event.payload {
                EventPayload::AssistantMessage(entry) if text.is_none() => {
                    text = Some(match entry.content.as_slice() {
                        [ContentBlock::Text { text }] => text.clone(),
                        _ => String::new(),
                    });
                }
                EventPayload::ToolCall(call) => calls.push(call.clone()),
                EventPayload::Usage(used) if usage.is_none() => usage = Some(*used),
                _ => break,
            }
            at = self.after(at);
        }
        let text = text.unwrap_or_default();
        let usage = usage.unwrap_or_default();
        let end = match self.events.get(at) {
            Some(event) if is_repair(event) && calls.is_empty() && usage == Usage::default() => {
                // Text alone before a cut: the reply never finished.
                if text.is_empty() {
                    return Err(Stop::Cut);
                }
                None
            }
            Some(SessionEvent {
                payload: EventPayload::TurnEnd(end),
                ..
            }) if calls.is_empty() => Some(end),
            _ => None,
        };
        let finish = match end {
            Some(end) if end.stop_reason == StopReason::ABORTED && usage == Usage::default() => {
                return Ok(ModelOutcome::Cancelled { text });
            }
            Some(end) if end.stop_reason == StopReason::ERROR => {
                let diagnostic = end.diagnostic.clone().unwrap_or_default();
                match diagnostic.strip_prefix("the model stopped: ") {
                    Some(reason) => FinishReason::Other(reason.to_owned()),
                    None => return Ok(ModelOutcome::Failed { text, diagnostic }),
                }
            }
            Some(end) if end.stop_reason == StopReason::MAX_TOKENS => FinishReason::MaxTokens,
            Some(end) if end.stop_reason == StopReason::REFUSAL => FinishReason::Refusal,
            _ if calls.is_empty() => FinishReason::EndTurn,
            _ => FinishReason::ToolUse,
        };
        Ok(ModelOutcome::Reply(ModelReply {
            text,
            calls,
            usage,
            finish,
        }))
    }

    /// The index after `at`, past events others wrote.
    fn after(&self, at: usize) -> usize {
        let mut next = at + 1;
        while self.events.get(next).is_some_and(is_external) {
            next += 1;
        }
        next
    }

    /// The tools' outputs for `calls` calls, read from their results; `None`
    /// when every result is the cancelled one and the turn then aborts.
    fn outputs(&mut self, calls: usize) -> Result<Option<Vec<ToolOutput>>, Stop> {
        let mut at = self.own_or_cut()?;
        let mut outputs = Vec::with_capacity(calls);
        for _ in 0..calls {
            match self.events.get(at) {
                Some(SessionEvent {
                    payload: EventPayload::ToolResult(result),
                    ..
                }) => outputs.push(ToolOutput {
                    content: result.content.clone(),
                    is_error: result.is_error,
                    end_turn: false,
                }),
                // Fewer results than calls (a crash cut them, or the log
                // lost one): the machine's next result is where the cut or
                // the difference shows.
                _ => break,
            }
            at = self.after(at);
        }
        let next = self.events.get(at);
        let cut = outputs.len() == calls
            && calls > 0
            && outputs.iter().all(|output| {
                output.is_error && output.content == [ContentBlock::text(CANCELLED_TOOL_CALL)]
            })
            && next.is_some_and(is_plain_abort);
        if cut {
            return Ok(None);
        }
        // A tool asked to end the turn: it ends completed at once.
        if let Some(SessionEvent {
            payload: EventPayload::TurnEnd(end),
            ..
        }) = next
            && end.stop_reason == StopReason::COMPLETED
            && let Some(last) = outputs.last_mut()
        {
            last.end_turn = true;
        }
        while outputs.len() < calls {
            outputs.push(ToolOutput::default());
        }
        Ok(Some(outputs))
    }

    /// After a cut: the log ends, or a resume's repair follows, exactly as
    /// [`close_interrupted_turn`] writes it.
    fn repaired(&mut self, turn: u64) -> Result<(), Box<Divergence>> {
        let Some(at) = self.next_own() else {
            return Ok(());
        };
        let repair = close_interrupted_turn(turn, &self.events[..at], self.events[at].time);
        let len = repair.len();
        for (offset, expected) in repair.into_iter().enumerate() {
            let index = at + offset;
            if self.events.get(index).map(|e| &e.payload) != Some(&expected.payload) {
                return Err(self.diverge(index, Some(expected)));
            }
        }
        self.cursor = at + len;
        Ok(())
    }
}
