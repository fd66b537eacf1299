//! The `Inbox` object's state: what was accepted and not yet claimed, in
//! two ordered lists (queue and steer), the request ids already accepted
//! (so a retried `accept` is acknowledged once), and whether a turn is
//! scheduled, the agent parked or its tree draining.
//!
//! Pure: the object's handlers read the one state entry ([`INBOX_KEY`]),
//! call these methods and write it back, so every change of an `accept` or
//! a `claim` lands in one state write with the handler's journal.

use std::collections::{BTreeMap, VecDeque};

use dsh_core::{InboxTarget, MessageId, UserMessage};
use serde::{Deserialize, Serialize};

/// The state key of the whole [`InboxState`].
pub const INBOX_KEY: &str = "inbox";

/// How many request ids an inbox remembers (the newest ones): a retry of
/// a request older than the last `REQUEST_ID_WINDOW` accepts is accepted
/// again as a new message. Senders retry within seconds (the ingress's own
/// idempotency keys live a day); an agent that takes this many messages
/// between a send and its retry is not a case to pay unbounded state for.
pub const REQUEST_ID_WINDOW: usize = 4096;

/// What a sender asks the inbox to accept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcceptRequest {
    /// The sender's id for this request: a second request with the same id
    /// is the same message (a retry), acknowledged without a second copy.
    pub request_id: String,
    /// The message.
    pub message: UserMessage,
    /// Which list it joins.
    pub target: InboxTarget,
    /// Whether it may wake the agent.
    pub wake: bool,
}

/// A message waiting in the inbox, as a turn claims it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboxItem {
    /// The request that brought it.
    pub request_id: String,
    /// The message.
    pub message: UserMessage,
    /// Whether it may wake the agent.
    pub wake: bool,
}

/// An item a turn claimed, with the list it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimedItem {
    /// Its list.
    pub target: InboxTarget,
    /// The item.
    pub item: InboxItem,
}

/// What a turn's claim answers ([`InboxState::claim_checked`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnClaim {
    /// The agent is parked (interrupted): the turn is cancelled.
    pub parked: bool,
    /// The items claimed, next-step items first.
    pub claimed: Vec<ClaimedItem>,
    /// The inbox's clock at the claim (ms since the epoch): the time of
    /// the turn's writes that follow it.
    pub time: u64,
}

/// What a running turn's checks after a reply or a step's tools see
/// ([`InboxState::look`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnLook {
    /// The agent is parked (interrupted): the turn is cancelled.
    pub parked: bool,
    /// Waiting next-step input wakes the agent.
    pub steering_wakes: bool,
    /// The inbox's clock at the look (ms since the epoch).
    pub time: u64,
}

/// Where an inbox stands, as its `status` handler and the client report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxStatus {
    /// A turn is scheduled or running.
    pub turn_scheduled: bool,
    /// The agent is parked (interrupted).
    pub parked: bool,
    /// The tree drains.
    pub draining: bool,
    /// Items waiting for the next turn.
    pub queued: usize,
    /// Items waiting for the next step.
    pub steering: usize,
}

/// How an accept went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acceptance {
    /// The id of the accepted message: for a repeated request, the first
    /// one's.
    pub message_id: MessageId,
    /// Whether the request id had been accepted before (nothing changed).
    pub duplicate: bool,
    /// Whether this accept scheduled a turn (the caller starts it).
    pub schedule_turn: bool,
}

/// Why an accept was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InboxError {
    /// The agent's tree is draining: it admits no new input.
    #[error("the agent is draining and admits no new input")]
    Draining,
}

impl InboxError {
    /// A stable code for the error, in the runtime's vocabulary.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Draining => "DRAINING",
        }
    }
}

/// The inbox of one agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InboxState {
    /// Next-turn items, oldest first.
    queue: VecDeque<InboxItem>,
    /// Next-step items, oldest first.
    steer: VecDeque<InboxItem>,
    /// The request ids accepted (the newest [`REQUEST_ID_WINDOW`]), with
    /// their messages' ids.
    accepted: BTreeMap<String, MessageId>,
    /// The ids of `accepted`, oldest first, for pruning.
    #[serde(default)]
    accept_order: VecDeque<String>,
    /// Whether a turn was scheduled and has not ended.
    turn_scheduled: bool,
    /// The agent was interrupted: input waits, no turn is scheduled.
    parked: bool,
    /// The tree is draining: input is refused.
    draining: bool,
}

impl InboxState {
    /// Accept `request` unless its request id was accepted before (then
    /// acknowledge the first one again). A waking item schedules a turn
    /// when none is scheduled and the agent is neither parked nor draining.
    ///
    /// # Errors
    /// [`InboxError::Draining`] while the tree drains (a repeated request
    /// is still acknowledged: it was accepted before the drain).
    pub fn accept(&mut self, request: AcceptRequest) -> Result<Acceptance, InboxError> {
        if let Some(message_id) = self.accepted.get(&request.request_id) {
            return Ok(Acceptance {
                message_id: message_id.clone(),
                duplicate: true,
                schedule_turn: false,
            });
        }
        if self.draining {
            return Err(InboxError::Draining);
        }
        Ok(self.admit(request))
    }

    /// Accept a child's settlement notice: as [`InboxState::accept`], but
    /// admitted while the tree drains too (without waking the agent then),
    /// as a local parent that is stopping still takes its children's
    /// notices.
    pub fn accept_notice(&mut self, mut request: AcceptRequest) -> Acceptance {
        if let Some(message_id) = self.accepted.get(&request.request_id) {
            return Acceptance {
                message_id: message_id.clone(),
                duplicate: true,
                schedule_turn: false,
            };
        }
        request.wake &= !self.draining;
        self.admit(request)
    }

    /// Admit a new request.
    fn admit(&mut self, request: AcceptRequest) -> Acceptance {
        let message_id = request.message.id.clone();
        self.accepted
            .insert(request.request_id.clone(), message_id.clone());
        self.accept_order.push_back(request.request_id.clone());
        while self.accept_order.len() > REQUEST_ID_WINDOW {
            if let Some(oldest) = self.accept_order.pop_front() {
                self.accepted.remove(&oldest);
            }
        }
        let schedule_turn = request.wake && !self.turn_scheduled && !self.parked;
        self.turn_scheduled |= schedule_turn;
        let item = InboxItem {
            request_id: request.request_id,
            message: request.message,
            wake: request.wake,
        };
        self.list_mut(request.target).push_back(item);
        Acceptance {
            message_id,
            duplicate: false,
            schedule_turn,
        }
    }

    /// Take every item of one list, oldest first. A claimed item is never
    /// claimed again.
    pub fn claim(&mut self, target: InboxTarget) -> Vec<InboxItem> {
        self.list_mut(target).drain(..).collect()
    }

    /// What a turn claims at once: every next-step item and, at a turn
    /// boundary, the oldest next-turn item, in that order (the local
    /// loop's claim).
    pub fn claim_batch(&mut self, turn_boundary: bool) -> Vec<ClaimedItem> {
        let mut batch: Vec<ClaimedItem> = self
            .steer
            .drain(..)
            .map(|item| ClaimedItem {
                target: InboxTarget::NextStep,
                item,
            })
            .collect();
        if turn_boundary && let Some(item) = self.queue.pop_front() {
            batch.push(ClaimedItem {
                target: InboxTarget::NextTurn,
                item,
            });
        }
        batch
    }

    /// A turn's claim and the cancellation check beside it in one look:
    /// whether the agent is parked and what the turn claims. At a turn
    /// boundary the batch is claimed whatever (the turn writes it before
    /// it ends aborted); at a step boundary a parked agent claims nothing
    /// (its turn ends aborted before the step boundary's claim). `time` is
    /// the clock the answer carries.
    pub fn claim_checked(&mut self, turn_boundary: bool, time: u64) -> TurnClaim {
        let claimed = if turn_boundary || !self.parked {
            self.claim_batch(turn_boundary)
        } else {
            Vec::new()
        };
        TurnClaim {
            parked: self.parked,
            claimed,
            time,
        }
    }

    /// What a turn's cancellation check and the steering look after it
    /// see at once, at the clock `time`.
    pub fn look(&self, time: u64) -> TurnLook {
        TurnLook {
            parked: self.parked,
            steering_wakes: self.steer.iter().any(|item| item.wake),
            time,
        }
    }

    /// Drop the waiting items with these message ids (from either list).
    /// Their request ids stay accepted, so a retry does not bring them back.
    pub fn discard(&mut self, ids: &[MessageId]) {
        self.queue.retain(|item| !ids.contains(&item.message.id));
        self.steer.retain(|item| !ids.contains(&item.message.id));
    }

    /// A turn ended: schedule the next one if waking input waits (and the
    /// agent is neither parked nor draining). Returns whether it did.
    pub fn turn_ended(&mut self) -> bool {
        self.turn_scheduled = !self.parked && !self.draining && self.has_waking_input();
        self.turn_scheduled
    }

    /// A scheduled turn failed for good before it started (its session
    /// could not be loaded or composed): nothing is scheduled now, and
    /// what waits stays for the turn the next waking input schedules (a
    /// turn scheduled again at once would fail the same way).
    pub fn turn_failed(&mut self) {
        self.turn_scheduled = false;
    }

    /// Park the agent (an interrupt): input keeps arriving but wakes nothing
    /// until [`InboxState::unpark`].
    pub fn park(&mut self) {
        self.parked = true;
    }

    /// Unpark the agent; returns whether waiting input schedules a turn now.
    pub fn unpark(&mut self) -> bool {
        self.parked = false;
        if !self.turn_scheduled && !self.draining && self.has_waking_input() {
            self.turn_scheduled = true;
            return true;
        }
        false
    }

    /// Refuse new input from now on.
    pub fn drain(&mut self) {
        self.draining = true;
    }

    /// Where the inbox stands.
    pub fn status(&self) -> InboxStatus {
        InboxStatus {
            turn_scheduled: self.turn_scheduled,
            parked: self.parked,
            draining: self.draining,
            queued: self.queue.len(),
            steering: self.steer.len(),
        }
    }

    /// Whether a turn is scheduled.
    pub fn turn_scheduled(&self) -> bool {
        self.turn_scheduled
    }

    /// Whether the agent is parked.
    pub fn parked(&self) -> bool {
        self.parked
    }

    /// Whether the tree is draining.
    pub fn draining(&self) -> bool {
        self.draining
    }

    /// The waiting items of one list, oldest first.
    pub fn pending(&self, target: InboxTarget) -> impl Iterator<Item = &InboxItem> {
        match target {
            InboxTarget::NextTurn => self.queue.iter(),
            InboxTarget::NextStep => self.steer.iter(),
        }
    }

    fn has_waking_input(&self) -> bool {
        self.queue.iter().chain(&self.steer).any(|item| item.wake)
    }

    fn list_mut(&mut self, target: InboxTarget) -> &mut VecDeque<InboxItem> {
        match target {
            InboxTarget::NextTurn => &mut self.queue,
            InboxTarget::NextStep => &mut self.steer,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use proptest::prelude::*;

    fn request(n: u8, target: InboxTarget, wake: bool) -> AcceptRequest {
        AcceptRequest {
            request_id: format!("r{n}"),
            message: UserMessage::user_text(format!("m{n}")),
            target,
            wake,
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Accept(u8, bool, bool),
        Claim(bool),
        TurnEnded,
        Park,
        Unpark,
        Drain,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..12, any::<bool>(), any::<bool>()).prop_map(|(n, steer, wake)| Op::Accept(n, steer, wake)),
            2 => any::<bool>().prop_map(Op::Claim),
            1 => Just(Op::TurnEnded),
            1 => Just(Op::Park),
            1 => Just(Op::Unpark),
            1 => Just(Op::Drain),
        ]
    }

    fn target(steer: bool) -> InboxTarget {
        if steer {
            InboxTarget::NextStep
        } else {
            InboxTarget::NextTurn
        }
    }

    proptest! {
        /// Against a model of the two lists: every request id is accepted
        /// once and claimed at most once, each list is claimed in the order
        /// first accepted, a repeat is acknowledged with the first message's
        /// id, and a turn is scheduled only by waking input while neither
        /// parked nor draining. The state survives a JSON round trip at
        /// every step (it is what Restate stores).
        #[test]
        fn accepts_once_and_claims_in_order(ops in proptest::collection::vec(op(), 0..80)) {
            let mut inbox = InboxState::default();
            let mut first: BTreeMap<String, MessageId> = BTreeMap::new();
            let mut model: [Vec<String>; 2] = [Vec::new(), Vec::new()];
            let mut claimed: Vec<String> = Vec::new();
            let mut draining = false;
            for op in ops {
                match op {
                    Op::Accept(n, steer, wake) => {
                        let was_scheduled = inbox.turn_scheduled();
                        let req = request(n, target(steer), wake);
                        let id = req.request_id.clone();
                        match inbox.accept(req.clone()) {
                            Ok(acceptance) => {
                                if let Some(earlier) = first.get(&id) {
                                    prop_assert!(acceptance.duplicate);
                                    prop_assert_eq!(&acceptance.message_id, earlier);
                                    prop_assert!(!acceptance.schedule_turn);
                                } else {
                                    prop_assert!(!draining);
                                    prop_assert!(!acceptance.duplicate);
                                    prop_assert_eq!(&acceptance.message_id, &req.message.id);
                                    prop_assert_eq!(acceptance.schedule_turn, wake && !was_scheduled && !inbox.parked());
                                    first.insert(id.clone(), acceptance.message_id);
                                    model[usize::from(steer)].push(id);
                                }
                            }
                            Err(InboxError::Draining) => {
                                prop_assert!(draining);
                                prop_assert!(!first.contains_key(&id));
                            }
                        }
                    }
                    Op::Claim(steer) => {
                        let got: Vec<String> = inbox.claim(target(steer)).into_iter().map(|item| item.request_id).collect();
                        let want = std::mem::take(&mut model[usize::from(steer)]);
                        prop_assert_eq!(&got, &want);
                        claimed.extend(got);
                    }
                    Op::TurnEnded => {
                        let scheduled = inbox.turn_ended();
                        let waking = inbox.pending(InboxTarget::NextTurn).chain(inbox.pending(InboxTarget::NextStep)).any(|item| item.wake);
                        prop_assert_eq!(scheduled, waking && !inbox.parked() && !draining);
                    }
                    Op::Park => inbox.park(),
                    Op::Unpark => { inbox.unpark(); }
                    Op::Drain => { inbox.drain(); draining = true; }
                }
                let text = serde_json::to_string(&inbox).unwrap();
                prop_assert_eq!(&serde_json::from_str::<InboxState>(&text).unwrap(), &inbox);
            }
            let mut seen = std::collections::BTreeSet::new();
            for id in &claimed {
                prop_assert!(seen.insert(id.clone()), "{} claimed twice", id);
            }
        }
    }

    proptest! {
        /// Only the newest REQUEST_ID_WINDOW request ids are remembered: a
        /// repeat inside the window is a duplicate, one beyond it is new.
        #[test]
        fn request_ids_are_kept_for_a_window(extra in 1usize..40, n in 0usize..80) {
            let mut inbox = InboxState::default();
            let total = REQUEST_ID_WINDOW + extra;
            for n in 0..total {
                let req = AcceptRequest { request_id: format!("r{n}"), ..request(0, InboxTarget::NextTurn, false) };
                prop_assert!(!inbox.accept(req).unwrap().duplicate);
            }
            prop_assert_eq!(inbox.accepted.len(), REQUEST_ID_WINDOW);
            let again = AcceptRequest { request_id: format!("r{n}"), ..request(0, InboxTarget::NextTurn, false) };
            let within = n >= total - REQUEST_ID_WINDOW;
            prop_assert_eq!(inbox.accept(again).unwrap().duplicate, within);
        }
    }

    proptest! {
        /// A turn's claim takes every next-step item, then (at a turn
        /// boundary) the oldest next-turn item; each in acceptance order,
        /// none twice.
        #[test]
        fn a_turn_claims_the_steering_then_one_queued_item(
            accepts in proptest::collection::vec((any::<bool>(), any::<bool>()), 0..30),
            boundaries in proptest::collection::vec(any::<bool>(), 1..10),
        ) {
            let mut inbox = InboxState::default();
            let mut model: [VecDeque<String>; 2] = [VecDeque::new(), VecDeque::new()];
            for (n, (steer, wake)) in (0u8..).zip(accepts) {
                let req = request(n, target(steer), wake);
                model[usize::from(steer)].push_back(req.request_id.clone());
                inbox.accept(req).unwrap();
            }
            for boundary in boundaries {
                let got: Vec<(InboxTarget, String)> = inbox
                    .claim_batch(boundary)
                    .into_iter()
                    .map(|claimed| (claimed.target, claimed.item.request_id))
                    .collect();
                let mut want: Vec<(InboxTarget, String)> = model[1]
                    .drain(..)
                    .map(|id| (InboxTarget::NextStep, id))
                    .collect();
                if boundary && let Some(id) = model[0].pop_front() {
                    want.push((InboxTarget::NextTurn, id));
                }
                prop_assert_eq!(got, want);
            }
        }
    }

    proptest! {
        /// The checked claim answers whether the agent is parked, and
        /// claims as `claim_batch` does except at a step boundary of a
        /// parked agent, where it claims nothing and changes nothing.
        #[test]
        fn a_checked_claim_reports_the_park_and_skips_a_parked_step(
            accepts in proptest::collection::vec((any::<bool>(), any::<bool>()), 0..20),
            parked in any::<bool>(),
            boundary in any::<bool>(),
        ) {
            let mut inbox = InboxState::default();
            for (n, (steer, wake)) in (0u8..).zip(accepts) {
                inbox.accept(request(n, target(steer), wake)).unwrap();
            }
            if parked {
                inbox.park();
            }
            let mut plain = inbox.clone();
            let checked = inbox.claim_checked(boundary, 7);
            prop_assert_eq!(checked.time, 7);
            prop_assert_eq!(checked.parked, parked);
            if parked && !boundary {
                prop_assert!(checked.claimed.is_empty());
                prop_assert_eq!(&inbox, &plain);
            } else {
                prop_assert_eq!(checked.claimed, plain.claim_batch(boundary));
                prop_assert_eq!(&inbox, &plain);
            }
        }
    }

    proptest! {
        /// A turn's look reports the park and whether any waiting
        /// next-step item wakes the agent (next-turn items do not count).
        #[test]
        fn a_look_reports_the_park_and_waking_steering(
            accepts in proptest::collection::vec((any::<bool>(), any::<bool>()), 0..20),
            parked in any::<bool>(),
        ) {
            let mut inbox = InboxState::default();
            let mut wakes = false;
            for (n, (steer, wake)) in (0u8..).zip(accepts) {
                inbox.accept(request(n, target(steer), wake)).unwrap();
                wakes |= steer && wake;
            }
            if parked {
                inbox.park();
            }
            prop_assert_eq!(inbox.look(7), TurnLook { parked, steering_wakes: wakes, time: 7 });
        }
    }

    #[test]
    fn a_draining_inbox_takes_notices_without_waking_and_refuses_the_rest() {
        let mut inbox = InboxState::default();
        inbox.drain();
        let notice = request(1, InboxTarget::NextTurn, true);
        let taken = inbox.accept_notice(notice.clone());
        assert!(!taken.duplicate && !taken.schedule_turn);
        assert!(inbox.accept_notice(notice).duplicate);
        assert_eq!(inbox.pending(InboxTarget::NextTurn).count(), 1);
        assert!(!inbox.pending(InboxTarget::NextTurn).any(|item| item.wake));
        assert_eq!(
            inbox.accept(request(2, InboxTarget::NextTurn, true)),
            Err(InboxError::Draining)
        );
    }

    #[test]
    fn a_turn_that_failed_before_its_start_lets_the_next_input_schedule_one() {
        let mut inbox = InboxState::default();
        let first = inbox
            .accept(request(1, InboxTarget::NextTurn, true))
            .unwrap();
        assert!(first.schedule_turn);
        inbox.turn_failed();
        assert!(!inbox.turn_scheduled());
        let second = inbox
            .accept(request(2, InboxTarget::NextTurn, true))
            .unwrap();
        assert!(second.schedule_turn);
        // Both wait for that turn, in order.
        let claimed: Vec<MessageId> = inbox
            .claim(InboxTarget::NextTurn)
            .into_iter()
            .map(|item| item.message.id)
            .collect();
        assert_eq!(claimed, [first.message_id, second.message_id]);
    }

    #[test]
    fn a_parked_agent_keeps_input_and_wakes_on_unpark() {
        let mut inbox = InboxState::default();
        inbox.park();
        let accepted = inbox
            .accept(request(1, InboxTarget::NextTurn, true))
            .unwrap();
        assert!(!accepted.schedule_turn);
        assert!(inbox.unpark());
        assert!(inbox.turn_scheduled());
    }

    #[test]
    fn discarded_items_are_not_claimed_and_not_accepted_again() {
        let mut inbox = InboxState::default();
        let first = inbox
            .accept(request(1, InboxTarget::NextTurn, true))
            .unwrap();
        inbox.discard(std::slice::from_ref(&first.message_id));
        assert!(inbox.claim(InboxTarget::NextTurn).is_empty());
        assert!(
            inbox
                .accept(request(1, InboxTarget::NextTurn, true))
                .unwrap()
                .duplicate
        );
        assert!(inbox.claim(InboxTarget::NextTurn).is_empty());
    }
}
