//! Usage roll-up and budgets. Every activation has a `Ledger` linked to
//! the ledger of the activation that created it: the tokens the activation
//! uses are charged to its own ledger and to every ledger above it, so a
//! ledger's total is the usage of its whole subtree. A start request may
//! set a token budget (its subtree may use at most that many tokens,
//! input plus output) and a wall-clock limit. The runtime meters a local
//! child from its log and an external one from the usage it reports; when a
//! ledger reaches its budget, or its activation runs past its limit, that
//! activation is stopped child-first with its own stop reason
//! (`budget-exhausted`, `timed-out`), its partial output kept. A start whose
//! budget cannot fit in what is left of every budget above it is refused
//! before it runs.
//!
//! Settled usage is durable: when a child settles the runtime writes a
//! `subagent/usage` record into its creator's log (the activation's own
//! usage and its subtree's), which the catalog folds, so a cold listing
//! shows totals; readers that do not know the record skip it.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use dsh_core::{Agent, CancellationToken, EventPayload, SessionId, StopReason, Usage};
use serde::{Deserialize, Serialize};

use crate::AdmissionError;
use crate::activation::Activation;
use crate::error::SubagentError;
use crate::request::Delivery;
use crate::result::{SubagentResult, bound_diagnostic};
use crate::runtime::SubagentRuntime;

/// The event type of a usage record in a creator's log; its payload is the
/// serialised [`UsageRecord`].
pub const USAGE_EVENT: &str = "subagent/usage";

/// What one settled activation used, as its creator's log records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// The child.
    pub child_id: SessionId,
    /// The tokens the activation itself used.
    pub usage: Usage,
    /// The tokens its whole subtree used, its own included.
    pub subtree: Usage,
}

/// A child's usage summed over every activation of it that settled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ChildUsage {
    /// The tokens the child itself used.
    pub own: Usage,
    /// The tokens its subtree used, its own included.
    pub subtree: Usage,
}

impl ChildUsage {
    /// Add one settled activation's record.
    pub fn add(&mut self, record: &UsageRecord) {
        self.own += record.usage;
        self.subtree += record.subtree;
    }

    /// Whether nothing was recorded (or only zeros).
    pub fn is_empty(&self) -> bool {
        self.subtree == Usage::default() && self.own == Usage::default()
    }
}

/// The tokens a usage counts against a budget: input plus output (cached
/// input is part of input).
pub fn budget_tokens(usage: &Usage) -> u64 {
    usage.input_tokens.saturating_add(usage.output_tokens)
}

/// One short account of a usage: `1234 tokens (1000 in, 200 cached, 234
/// out, 80 reasoning)`, the cached and reasoning parts only when there are
/// some (reasoning tokens are part of the output).
pub fn usage_line(usage: &Usage) -> String {
    let cached = if usage.cached_input_tokens > 0 {
        format!(", {} cached", usage.cached_input_tokens)
    } else {
        String::new()
    };
    let reasoning = if usage.reasoning_tokens > 0 {
        format!(", {} reasoning", usage.reasoning_tokens)
    } else {
        String::new()
    };
    format!(
        "{} tokens ({} in{cached}, {} out{reasoning})",
        budget_tokens(usage),
        usage.input_tokens,
        usage.output_tokens
    )
}

/// The usage of a settled activation's subtree from its own events
/// (`events`, the activation's only): its usage events plus the subtree
/// usage its children's records report (an unreadable record counts
/// nothing: the catalog fold reports it).
pub(crate) fn subtree_of(events: &[dsh_core::SessionEvent]) -> Usage {
    let mut total = crate::result::usage_of(events);
    for event in events {
        if let EventPayload::Extension { kind, payload } = &event.payload
            && kind == USAGE_EVENT
            && let Ok(record) = payload.parse::<UsageRecord>()
        {
            total += record.subtree;
        }
    }
    total
}

/// The payload of a usage record: `UsageRecord`'s serde form, written by
/// the codec's hand writer (the record is written once per settled child).
pub(crate) fn usage_payload(record: &UsageRecord) -> dsh_core::ExtensionPayload {
    let mut object = dsh_core::codec::ObjectWriter::new();
    object
        .string("child_id", record.child_id.as_str())
        .usage("usage", &record.usage)
        .usage("subtree", &record.subtree);
    object.finish()
}

/// The host's defaults and ceilings for the budgets a delegation tool asks
/// for: the model may ask for less than a ceiling, never more, and a call
/// that asks for nothing gets the default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetPolicy {
    /// The token budget a child gets when the call names none.
    pub default_tokens: Option<u64>,
    /// The largest token budget a call may ask for.
    pub max_tokens: Option<u64>,
    /// The wall-clock limit a child gets when the call names none.
    pub default_time: Option<Duration>,
    /// The longest wall-clock limit a call may ask for.
    pub max_time: Option<Duration>,
}

/// A budget and a limit, resolved against a [`BudgetPolicy`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// The token budget, if any.
    pub tokens: Option<u64>,
    /// The wall-clock limit, if any.
    pub time: Option<Duration>,
}

impl BudgetPolicy {
    /// The limits for a call that asked for `tokens` and `time`: each is
    /// the request, else the default, else the ceiling.
    ///
    /// # Errors
    /// [`AdmissionError::AboveCeiling`] for a request above a ceiling.
    pub fn resolve(
        &self,
        tokens: Option<u64>,
        time: Option<Duration>,
    ) -> Result<Limits, AdmissionError> {
        if let (Some(requested), Some(ceiling)) = (tokens, self.max_tokens)
            && requested > ceiling
        {
            return Err(AdmissionError::AboveCeiling {
                option: "token_budget",
                requested,
                ceiling,
            });
        }
        if let (Some(requested), Some(ceiling)) = (time, self.max_time)
            && requested > ceiling
        {
            return Err(AdmissionError::AboveCeiling {
                option: "timeout_seconds",
                requested: requested.as_secs(),
                ceiling: ceiling.as_secs(),
            });
        }
        Ok(Limits {
            tokens: tokens.or(self.default_tokens).or(self.max_tokens),
            time: time.or(self.default_time).or(self.max_time),
        })
    }
}

/// Why and how an activation was stopped by its limits.
#[derive(Debug, Clone)]
pub(crate) struct Tripped {
    pub(crate) reason: StopReason,
    pub(crate) diagnostic: String,
}

/// One activation's account: the usage of its subtree so far, its budget,
/// and the stop it trips.
#[derive(Debug)]
pub(crate) struct Ledger {
    parent: Option<Arc<Ledger>>,
    budget: Option<u64>,
    /// Whether this ledger or one above it has a budget.
    metered: bool,
    own: Mutex<Usage>,
    subtree: Mutex<Usage>,
    stop: CancellationToken,
    tripped: OnceLock<Tripped>,
}

fn guard<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Ledger {
    /// A ledger below `parent` with `budget`, whose trip cancels `stop`.
    pub(crate) fn new(
        parent: Option<Arc<Ledger>>,
        budget: Option<u64>,
        stop: CancellationToken,
    ) -> Self {
        let metered = budget.is_some() || parent.as_ref().is_some_and(|parent| parent.metered);
        Self {
            parent,
            budget,
            metered,
            own: Mutex::new(Usage::default()),
            subtree: Mutex::new(Usage::default()),
            stop,
            tripped: OnceLock::new(),
        }
    }

    /// Whether usage must be metered while the activation runs (a budget
    /// here or above).
    pub(crate) fn metered(&self) -> bool {
        self.metered
    }

    /// The tokens left in the tightest budget here and above, if any is set.
    pub(crate) fn remaining(&self) -> Option<u64> {
        let mut remaining: Option<u64> = None;
        let mut node = Some(self);
        while let Some(ledger) = node {
            if let Some(budget) = ledger.budget {
                let left = budget.saturating_sub(budget_tokens(&guard(&ledger.subtree)));
                remaining = Some(remaining.map_or(left, |r| r.min(left)));
            }
            node = ledger.parent.as_deref();
        }
        remaining
    }

    /// Charge `usage` to this activation and every ledger above it,
    /// tripping each one whose budget it reaches.
    pub(crate) fn charge(&self, usage: Usage) {
        if usage == Usage::default() {
            return;
        }
        *guard(&self.own) += usage;
        let mut node = Some(self);
        while let Some(ledger) = node {
            let used = {
                let mut subtree = guard(&ledger.subtree);
                *subtree += usage;
                budget_tokens(&subtree)
            };
            if let Some(budget) = ledger.budget
                && used >= budget
            {
                ledger.trip(
                    StopReason::BUDGET_EXHAUSTED,
                    format!(
                        "the subagent's subtree used {used} tokens of its budget of {budget}, so it was stopped"
                    ),
                );
            }
            node = ledger.parent.as_deref();
        }
    }

    /// Charge what `total` (everything the activation reported) adds to
    /// what was charged already.
    pub(crate) fn charge_up_to(&self, total: Usage) {
        let own = self.own();
        self.charge(Usage {
            input_tokens: total.input_tokens.saturating_sub(own.input_tokens),
            output_tokens: total.output_tokens.saturating_sub(own.output_tokens),
            cached_input_tokens: total
                .cached_input_tokens
                .saturating_sub(own.cached_input_tokens),
            reasoning_tokens: total.reasoning_tokens.saturating_sub(own.reasoning_tokens),
        });
    }

    /// Stop the activation for `reason`, unless it was already tripped.
    pub(crate) fn trip(&self, reason: StopReason, diagnostic: String) {
        if self.tripped.set(Tripped { reason, diagnostic }).is_ok() {
            self.stop.cancel();
        }
    }

    /// Why the limits stopped the activation, if they did.
    pub(crate) fn tripped(&self) -> Option<&Tripped> {
        self.tripped.get()
    }

    /// The activation's own usage so far.
    pub(crate) fn own(&self) -> Usage {
        *guard(&self.own)
    }

    /// Its subtree's usage so far.
    pub(crate) fn subtree(&self) -> Usage {
        *guard(&self.subtree)
    }

    /// `result` with its subtree's usage, and with the reason and
    /// diagnostic of the limit that stopped it (`tripped`), its partial
    /// output kept.
    pub(crate) fn settle(
        &self,
        mut result: SubagentResult,
        tripped: Option<Tripped>,
    ) -> SubagentResult {
        result.subtree_usage = self.subtree();
        if let Some(tripped) = tripped {
            result.stop_reason = tripped.reason;
            result.diagnostic = Some(bound_diagnostic(tripped.diagnostic));
        }
        result
    }
}

impl SubagentRuntime {
    /// Refuse a start under `parent` whose `requested` budget does not fit
    /// in what is left of every budget above it, or when nothing is left.
    pub(crate) fn check_budget(
        &self,
        parent: &dsh_core::AgentRef,
        requested: Option<u64>,
    ) -> Result<(), SubagentError> {
        let Some(remaining) = self
            .activations()
            .of_agent(parent)
            .and_then(|owner| owner.ledger().remaining())
        else {
            return Ok(());
        };
        match requested {
            _ if remaining == 0 => Err(AdmissionError::BudgetSpent.into()),
            Some(requested) if requested > remaining => Err(AdmissionError::OverBudget {
                requested,
                remaining,
            }
            .into()),
            _ => Ok(()),
        }
    }

    /// Write a settled activation's usage into its still-live creator's
    /// log, where the catalog folds it, when the creator catalogs it.
    pub(crate) async fn record_usage(
        &self,
        activation: &Activation,
        result: &Result<SubagentResult, SubagentError>,
    ) {
        let Ok(result) = result else {
            return;
        };
        if activation.agent().is_none() && activation.delivery() != Delivery::Parent {
            return;
        }
        let Some(parent) = self.registry().resolve(activation.parent()) else {
            return;
        };
        let record = UsageRecord {
            child_id: activation.child_id().clone(),
            usage: result.usage,
            subtree: result.subtree_usage,
        };
        match parent.record(USAGE_EVENT, usage_payload(&record)).await {
            Ok(seq) => self.catalogs().written_usage(&parent, seq, &record),
            Err(err) => {
                tracing::warn!(child = %activation.child_id(), "the usage record was not written: {err}");
            }
        }
    }
}

/// Meters a local child from its log, from `cursor` on.
pub(crate) struct LocalMeter {
    cursor: u64,
}

impl LocalMeter {
    pub(crate) fn new(start_seq: u64) -> Self {
        Self { cursor: start_seq }
    }

    /// Charge the usage the log gained since the last call.
    pub(crate) fn sync(&mut self, child: &dyn Agent, ledger: &Ledger) {
        child.visit_events_since(self.cursor, &mut |fresh| self.charge(fresh, ledger));
    }

    /// Charge the usage among `events` (a run of the child's log) that no
    /// earlier call charged.
    pub(crate) fn charge(&mut self, events: &[dsh_core::SessionEvent], ledger: &Ledger) {
        let fresh = events.partition_point(|event| event.seq < self.cursor);
        for event in &events[fresh..] {
            self.cursor = event.seq + 1;
            if let EventPayload::Usage(usage) = &event.payload {
                ledger.charge(*usage);
            }
        }
    }
}

/// Enforce an activation's limits until they trip, then wait forever: the
/// wall-clock `limit`, and for a metered local child (`local`) its budget,
/// read from the log every [`crate::progress::LOCAL_POLL`].
///
/// # Cancel safety
/// Cancel safe: a drop leaves the meter's cursor where the last read left
/// it, and the next [`LocalMeter::sync`] continues from there.
pub(crate) async fn enforce(
    ledger: &Ledger,
    limit: Option<Duration>,
    local: Option<(&mut LocalMeter, &dyn Agent)>,
) -> std::convert::Infallible {
    let deadline = async {
        match limit {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    let metering = async {
        match local {
            Some((meter, child)) if ledger.metered() => {
                let mut tick = tokio::time::interval(crate::progress::LOCAL_POLL);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    meter.sync(child, ledger);
                }
            }
            _ => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = deadline => {
            let seconds = limit.map_or(0, |limit| limit.as_secs_f64().ceil() as u64);
            ledger.trip(
                StopReason::TIMED_OUT,
                format!("the subagent ran past its time limit of {seconds} s, so it was stopped"),
            );
        }
        () = metering => {}
    }
    std::future::pending().await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    fn count() -> impl Strategy<Value = u64> {
        prop_oneof![Just(0_u64), 0_u64..100_000, any::<u64>()]
    }

    fn any_usage() -> impl Strategy<Value = Usage> {
        (count(), count(), count(), count()).prop_map(|(input, output, cached, reasoning)| Usage {
            input_tokens: input,
            output_tokens: output,
            cached_input_tokens: cached,
            reasoning_tokens: reasoning,
        })
    }

    proptest! {
        /// The hand-written usage record is serde's bytes for the record,
        /// and reads back to it.
        #[test]
        fn a_usage_payload_is_the_records_serde_form(
            id in "[a-zA-Z0-9_.:-]{1,40}",
            usage in any_usage(),
            subtree in any_usage(),
        ) {
            let child_id = SessionId::new(&id);
            prop_assume!(child_id.is_ok());
            let record = UsageRecord {
                child_id: child_id.unwrap(),
                usage,
                subtree,
            };
            let payload = usage_payload(&record);
            prop_assert_eq!(payload.get(), serde_json::to_string(&record).unwrap());
            prop_assert_eq!(payload.parse::<UsageRecord>().unwrap(), record);
        }
    }

    fn used(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        }
    }

    #[test]
    fn usage_counts_against_every_budget_above_and_trips_the_one_it_reaches() {
        let root = Arc::new(Ledger::new(None, Some(100), CancellationToken::new()));
        let middle = Arc::new(Ledger::new(
            Some(root.clone()),
            None,
            CancellationToken::new(),
        ));
        let leaf = Ledger::new(Some(middle.clone()), Some(30), CancellationToken::new());
        assert!(leaf.metered() && middle.metered());
        assert_eq!(leaf.remaining(), Some(30));
        leaf.charge(used(10, 10));
        assert_eq!(leaf.remaining(), Some(10));
        assert_eq!(middle.remaining(), Some(80));
        middle.charge(used(50, 0));
        assert_eq!(
            leaf.remaining(),
            Some(10),
            "the leaf's own budget is tighter"
        );
        assert!(leaf.tripped().is_none());
        leaf.charge(used(5, 5));
        let tripped = leaf.tripped().unwrap();
        assert_eq!(tripped.reason, StopReason::BUDGET_EXHAUSTED);
        assert!(leaf.stop.is_cancelled() && !root.stop.is_cancelled());
        assert_eq!(root.subtree(), used(65, 15));
        assert_eq!(middle.own(), used(50, 0));
        leaf.charge(used(20, 0));
        assert_eq!(root.tripped().unwrap().reason, StopReason::BUDGET_EXHAUSTED);
        assert_eq!(leaf.remaining(), Some(0));
    }

    #[test]
    fn charging_up_to_a_total_adds_only_what_was_not_charged() {
        let ledger = Ledger::new(None, None, CancellationToken::new());
        assert!(!ledger.metered() && ledger.remaining().is_none());
        ledger.charge(used(4, 1));
        ledger.charge_up_to(used(10, 3));
        assert_eq!(ledger.own(), used(10, 3));
        ledger.charge_up_to(used(2, 2));
        assert_eq!(ledger.subtree(), used(10, 3));
    }

    #[test]
    fn the_policy_fills_defaults_and_refuses_what_is_above_a_ceiling() {
        let policy = BudgetPolicy {
            default_tokens: Some(1000),
            max_tokens: Some(5000),
            default_time: None,
            max_time: Some(Duration::from_secs(600)),
        };
        let limits = policy.resolve(None, None).unwrap();
        assert_eq!(limits.tokens, Some(1000));
        assert_eq!(limits.time, Some(Duration::from_secs(600)));
        assert_eq!(policy.resolve(Some(20), None).unwrap().tokens, Some(20));
        let err = policy.resolve(Some(5001), None).unwrap_err();
        assert_eq!(err.code(), "ABOVE_CEILING");
        let err = policy
            .resolve(None, Some(Duration::from_secs(601)))
            .unwrap_err();
        assert!(err.to_string().contains("timeout_seconds"), "{err}");
        assert_eq!(
            BudgetPolicy::default().resolve(None, None).unwrap(),
            Limits::default()
        );
    }

    #[test]
    fn a_cold_subtree_adds_the_records_of_its_children_to_its_own_usage() {
        let record = UsageRecord {
            child_id: SessionId::new("c").unwrap(),
            usage: used(3, 1),
            subtree: used(7, 2),
        };
        let events = [
            dsh_core::SessionEvent {
                seq: 0,
                time: 0,
                payload: EventPayload::Usage(used(10, 5)),
            },
            dsh_core::SessionEvent {
                seq: 1,
                time: 0,
                payload: EventPayload::Extension {
                    kind: USAGE_EVENT.into(),
                    payload: usage_payload(&record),
                },
            },
        ];
        assert_eq!(subtree_of(&events), used(17, 7));
    }

    #[test]
    fn a_usage_line_is_short() {
        assert_eq!(
            usage_line(&used(1000, 234)),
            "1234 tokens (1000 in, 234 out)"
        );
        let cached = Usage {
            cached_input_tokens: 200,
            ..used(1000, 234)
        };
        assert_eq!(
            usage_line(&cached),
            "1234 tokens (1000 in, 200 cached, 234 out)"
        );
        let reasoned = Usage {
            reasoning_tokens: 80,
            ..cached
        };
        assert_eq!(
            usage_line(&reasoned),
            "1234 tokens (1000 in, 200 cached, 234 out, 80 reasoning)"
        );
        let mut sum = reasoned;
        sum += reasoned;
        assert_eq!(sum.reasoning_tokens, 160, "reasoning adds up the tree");
    }
}
