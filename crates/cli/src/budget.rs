//! The whole tree's budget (`--max-tokens`, `--max-cost`, `[limits]`):
//! [`Metered`] is a transparent layer over the session store that hands
//! every model usage a local log of the tree records to the
//! [`TreeMeter`], priced at the model of the agent that wrote it; when a
//! limit is reached the meter says so once, and the run stops the tree
//! children first (the runtime's drain) and then the lead, and ends with
//! one line naming the budget that stopped it. A child's own budget and
//! time limit are the runtime's (the delegation tools' defaults); this
//! module only meters what no activation owns, the lead and the tree as a
//! whole, and hears which children the runtime stopped at their own limits
//! ([`ChildLimits`]), for a line each at the end of the run.
//!
//! An external (ACP) child keeps its own log elsewhere: the meter hears
//! what it reported from the runtime's end events instead
//! ([`TreeMeter::track`]), its tokens against the token budget and, priced
//! at `[prices.<agent>]` (the agent's registry name: dsh does not know the
//! model behind it), against the cost budget. An agent that reports no
//! usage, or has no price under a cost limit, is said once: the budget
//! cannot see what it spends, and nothing pretends it was zero.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use dsh_core::{
    EventPayload, LoadedSession, LogLayer, SessionEvent, SessionHeader, SessionId, SessionLog,
    SessionStore, StopReason, StoreError, StoreLayer, Usage,
};
use dsh_subagent::budget::budget_tokens;
use dsh_subagent::{RunInfo, RunOutcome};
use tokio::sync::watch;

use crate::config::{Budgets, Price};
use crate::model::ModelChoice;

/// Which limit was reached, and at what spend.
#[derive(Debug, Clone, PartialEq)]
pub enum Spent {
    /// The tokens: used, of the limit.
    Tokens(u64, u64),
    /// The dollars: spent, of the limit.
    Cost(f64, f64),
}

impl Spent {
    /// The run's last line: which budget stopped the tree.
    pub fn end_line(&self) -> String {
        let (what, used) = match self {
            Self::Tokens(used, limit) => {
                (format!("token budget of {limit}"), format!("{used} tokens"))
            }
            Self::Cost(spent, limit) => (
                format!("cost budget of ${limit:.4}"),
                format!("${spent:.4}"),
            ),
        };
        format!(
            "budget: the tree's {what} was spent ({used} used), so the tree was stopped, children first, then the lead"
        )
    }
}

/// What the tree used so far, against its limits.
#[derive(Debug, Default)]
struct Account {
    tokens: u64,
    cost: f64,
    /// Each agent's price (`None`: the offline demo, which costs nothing).
    prices: HashMap<SessionId, Option<Price>>,
    /// The last quarter of the nearest limit that was announced.
    announced: u8,
    /// The external agents said to report no usage.
    unmetered: HashSet<String>,
    /// The external agents said to have no price.
    unpriced: HashSet<String>,
}

/// Hears the spend each time it passes another quarter of a limit.
pub type Announce = Box<dyn Fn(Spend) + Send + Sync>;

/// The tree's spend against its limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spend {
    /// Tokens used.
    pub tokens: u64,
    /// The tokens the tree may use, if limited.
    pub max_tokens: Option<u64>,
    /// Dollars spent.
    pub cost: f64,
    /// The dollars the tree may spend, if limited.
    pub max_cost: Option<f64>,
}

impl Spend {
    /// `1200 of 5000 tokens, $0.0012 of $0.5000`: the parts that have a
    /// limit.
    pub fn line(&self) -> String {
        let mut parts = Vec::new();
        if let Some(limit) = self.max_tokens {
            parts.push(format!("{} of {limit} tokens", self.tokens));
        }
        if let Some(limit) = self.max_cost {
            parts.push(format!("${:.4} of ${limit:.4}", self.cost));
        }
        parts.join(", ")
    }
}

/// Meters the tree's usage against its budgets.
pub struct TreeMeter {
    budgets: Budgets,
    prices: BTreeMap<String, Price>,
    /// The run's model id, for an agent whose header names none.
    default_model: Option<String>,
    account: Mutex<Account>,
    spent: watch::Sender<Option<Spent>>,
    announce: Option<Announce>,
}

impl TreeMeter {
    /// A meter for `budgets`, pricing each agent's model from `prices`
    /// (the run's `model` for an agent that names none), telling
    /// `announce` the spend each time it passes another quarter of a
    /// limit.
    pub fn new(
        budgets: Budgets,
        prices: BTreeMap<String, Price>,
        model: &ModelChoice,
        announce: Option<Announce>,
    ) -> Arc<Self> {
        Arc::new(Self {
            budgets,
            prices,
            default_model: match model {
                ModelChoice::Demo => None,
                ModelChoice::Api(api) => Some(api.model.clone()),
            },
            account: Mutex::new(Account::default()),
            spent: watch::Sender::new(None),
            announce,
        })
    }

    fn account(&self) -> std::sync::MutexGuard<'_, Account> {
        self.account.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remember the price of the agent `header` describes.
    fn opened(&self, header: &SessionHeader) {
        let model = header
            .composition
            .options
            .model
            .clone()
            .or_else(|| self.default_model.clone());
        let price = model.and_then(|model| self.prices.get(&model).copied());
        self.account().prices.insert(header.id.clone(), price);
    }

    /// Charge the usage among `events`, which `session`'s log accepted.
    fn charge(&self, session: &SessionId, events: &[SessionEvent]) {
        let mut usage = Usage::default();
        for event in events {
            if let EventPayload::Usage(used) = &event.payload {
                usage += *used;
            }
        }
        let price = self.account().prices.get(session).copied().flatten();
        self.charge_usage(usage, price);
    }

    /// Listen to `runtime`'s end events from now on (for as long as the
    /// subscription is kept), charging what each external child reported
    /// at the end of its turn; `say` hears, once per agent, that one
    /// reports no usage or, under a cost limit, has no price.
    pub fn track(
        self: &Arc<Self>,
        runtime: &dsh_subagent::SubagentRuntime,
        say: impl Fn(&str) + Send + Sync + 'static,
    ) -> dsh_core::observe::Subscription {
        let meter = Arc::clone(self);
        runtime.events().listen(move |event| {
            if let dsh_subagent::SubagentEvent::End(info, outcome) = event
                && !info.local
            {
                for line in meter.external(info, outcome) {
                    say(&line);
                }
            }
        })
    }

    /// Charge what the external child `info` settled with; the lines to
    /// say about it (each at most once per agent).
    fn external(&self, info: &RunInfo, outcome: &RunOutcome) -> Vec<String> {
        // Only a turn the agent answered says whether it reports usage: an
        // aborted or failed run reported nothing either way.
        let RunOutcome::Settled(result) = outcome else {
            return Vec::new();
        };
        let agent = &info.provider;
        let mut lines = Vec::new();
        if result.usage == Usage::default() {
            if result.stop_reason == StopReason::COMPLETED
                && self.account().unmetered.insert(agent.clone())
            {
                lines.push(format!(
                    "budget: the ACP agent `{agent}` reports no usage, so the tree's budget cannot see what it spends"
                ));
            }
            return lines;
        }
        let price = self.prices.get(agent).copied();
        if price.is_none()
            && self.budgets.max_cost.is_some()
            && self.account().unpriced.insert(agent.clone())
        {
            lines.push(format!(
                "budget: the ACP agent `{agent}` has no price ([prices.{agent}]), so its tokens count against the token budget only"
            ));
        }
        self.charge_usage(result.usage, price);
        lines
    }

    /// Charge `usage` at `price` (none: it costs nothing that is known).
    fn charge_usage(&self, usage: Usage, price: Option<Price>) {
        if usage == Usage::default() {
            return;
        }
        let (spent, announce) = {
            let mut account = self.account();
            account.tokens = account.tokens.saturating_add(budget_tokens(&usage));
            account.cost += price.map_or(0.0, |price| {
                price.cost(usage.input_tokens, usage.output_tokens)
            });
            #[allow(clippy::cast_precision_loss)]
            let share = [
                self.budgets
                    .max_tokens
                    .map(|limit| account.tokens as f64 / limit as f64),
                self.budgets.max_cost.map(|limit| account.cost / limit),
            ]
            .into_iter()
            .flatten()
            .fold(0.0_f64, f64::max);
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let quarter = (share * 4.0).floor().min(4.0) as u8;
            let announce = quarter > account.announced;
            account.announced = account.announced.max(quarter);
            let spent = match (self.budgets.max_tokens, self.budgets.max_cost) {
                (Some(limit), _) if account.tokens >= limit => {
                    Some(Spent::Tokens(account.tokens, limit))
                }
                (_, Some(limit)) if account.cost >= limit => Some(Spent::Cost(account.cost, limit)),
                _ => None,
            };
            (spent, announce)
        };
        if announce && let Some(announce) = &self.announce {
            announce(self.spend());
        }
        if let Some(spent) = spent {
            self.spent.send_if_modified(|first| {
                let unset = first.is_none();
                if unset {
                    *first = Some(spent);
                }
                unset
            });
        }
    }

    /// The spend against the limits so far.
    pub fn spend(&self) -> Spend {
        let account = self.account();
        Spend {
            tokens: account.tokens,
            max_tokens: self.budgets.max_tokens,
            cost: account.cost,
            max_cost: self.budgets.max_cost,
        }
    }

    /// The limit that was reached first, if one was.
    pub fn spent(&self) -> Option<Spent> {
        self.spent.borrow().clone()
    }

    /// The limit that was reached first, once one is.
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches.
    pub async fn exhausted(&self) -> Spent {
        // Subscribed before the look: a limit reached after it is a change.
        let mut seen = self.spent.subscribe();
        loop {
            if let Some(spent) = self.spent() {
                return spent;
            }
            // The sender lives in `self`: `changed` cannot fail while this
            // borrow lasts; a failure would only mean "look again".
            if seen.changed().await.is_err() {
                continue;
            }
        }
    }
}

/// The children the runtime stopped at their own limits (their token
/// budget or time limit), heard from its end events, for the run's last
/// lines.
#[derive(Debug, Default)]
pub struct ChildLimits {
    stopped: Mutex<Vec<String>>,
}

impl ChildLimits {
    /// Listen to `runtime`'s end events from now on (for as long as the
    /// subscription is kept).
    pub fn track(
        runtime: &dsh_subagent::SubagentRuntime,
    ) -> (Arc<Self>, dsh_core::observe::Subscription) {
        let limits = Arc::new(Self::default());
        let heard = Arc::clone(&limits);
        let subscription = runtime.events().listen(move |event| {
            if let dsh_subagent::SubagentEvent::End(info, outcome) = event {
                let reason = outcome.stop_reason();
                let limit = if reason == dsh_core::StopReason::BUDGET_EXHAUSTED {
                    "token budget"
                } else if reason == dsh_core::StopReason::TIMED_OUT {
                    "time limit"
                } else {
                    return;
                };
                heard
                    .stopped
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(format!(
                        "budget: `{}` was stopped by its {limit}",
                        info.name
                    ));
            }
        });
        (limits, subscription)
    }

    /// One line per child stopped at its own limit, in the order they
    /// stopped.
    pub fn lines(&self) -> Vec<String> {
        self.stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A session store whose logs charge the usage they record to a
/// [`TreeMeter`]; it behaves exactly as the store it wraps.
pub struct Metered {
    inner: Arc<dyn SessionStore>,
    meter: Arc<TreeMeter>,
}

impl Metered {
    /// Wrap `inner`, charging `meter`.
    pub fn wrap(inner: Arc<dyn SessionStore>, meter: &Arc<TreeMeter>) -> Arc<dyn SessionStore> {
        Arc::new(Self {
            inner,
            meter: Arc::clone(meter),
        })
    }

    fn log(&self, id: &SessionId, inner: Arc<dyn SessionLog>) -> Arc<dyn SessionLog> {
        Arc::new(MeteredLog {
            id: id.clone(),
            inner,
            meter: Arc::clone(&self.meter),
        })
    }
}

#[async_trait]
impl StoreLayer for Metered {
    fn wrapped(&self) -> &dyn SessionStore {
        &*self.inner
    }

    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        let log = self.inner.create(header, seed).await?;
        self.meter.opened(header);
        Ok(self.log(&header.id, log))
    }

    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        let (loaded, log) = self.inner.open(id).await?;
        self.meter.opened(&loaded.header);
        Ok((loaded, self.log(id, log)))
    }
}

/// One open log, charging what it records.
struct MeteredLog {
    id: SessionId,
    inner: Arc<dyn SessionLog>,
    meter: Arc<TreeMeter>,
}

#[async_trait]
impl LogLayer for MeteredLog {
    fn wrapped(&self) -> &dyn SessionLog {
        &*self.inner
    }

    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError> {
        self.inner.append(events).await?;
        self.meter.charge(&self.id, events);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn usage(input: u64, output: u64) -> SessionEvent {
        SessionEvent {
            seq: 0,
            time: 0,
            payload: EventPayload::Usage(Usage {
                input_tokens: input,
                output_tokens: output,
                ..Usage::default()
            }),
        }
    }

    #[test]
    fn the_first_limit_reached_is_said_once_and_priced_per_agent() {
        let model = ModelChoice::Api(crate::model::ApiModel {
            provider: "p".into(),
            model: "cheap".into(),
            base_url: "http://x/v1".into(),
            api_key_env: None,
            key_origin: None,
        });
        let prices: BTreeMap<String, Price> = [
            (
                "cheap".to_owned(),
                Price {
                    input: 1.0,
                    output: 1.0,
                },
            ),
            (
                "dear".to_owned(),
                Price {
                    input: 100.0,
                    output: 100.0,
                },
            ),
        ]
        .into_iter()
        .collect();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let hearing = Arc::clone(&heard);
        let meter = TreeMeter::new(
            Budgets {
                max_tokens: Some(100_000),
                max_cost: Some(1.0),
                ..Budgets::default()
            },
            prices,
            &model,
            Some(Box::new(move |spend: Spend| {
                hearing.lock().unwrap().push(spend.line())
            })),
        );
        let lead = SessionHeader::new(SessionId::generate(), "/");
        let mut child = SessionHeader::new(SessionId::generate(), "/");
        child.composition.options.model = Some("dear".into());
        meter.opened(&lead);
        meter.opened(&child);
        meter.charge(&lead.id, &[usage(5_000, 0)]);
        assert_eq!(*meter.spent.borrow(), None);
        meter.charge(&child.id, &[usage(5_000, 5_000)]);
        assert_eq!(
            meter.spend().line(),
            "15000 of 100000 tokens, $1.0050 of $1.0000"
        );
        let first = meter.spent.borrow().clone().unwrap();
        assert!(matches!(first, Spent::Cost(..)), "{first:?}");
        meter.charge(&lead.id, &[usage(100_000, 0)]);
        assert_eq!(meter.spent.borrow().clone(), Some(first));
        // Once on the way up (the child's charge passed every quarter of
        // the cost at once), and not again.
        assert_eq!(
            *heard.lock().unwrap(),
            ["15000 of 100000 tokens, $1.0050 of $1.0000"]
        );
    }

    fn external(provider: &str) -> RunInfo {
        let id = SessionId::generate();
        RunInfo {
            provider: provider.to_owned(),
            name: "helper".to_owned(),
            label: String::new(),
            child_id: SessionId::generate(),
            parent_session_id: id.clone(),
            root: id,
            local: false,
        }
    }

    fn settled(stop: StopReason, input: u64, output: u64) -> RunOutcome {
        let mut result = dsh_subagent::SubagentResult::stopped(stop);
        result.usage = Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        };
        RunOutcome::Settled(result)
    }

    proptest::proptest! {
        /// Whatever external children report is counted, in tokens and at
        /// their agent's price; an agent that reports nothing, or has no
        /// price under a cost limit, is said once; an aborted or failed run
        /// says nothing.
        #[test]
        fn external_children_are_charged_and_the_unseen_said_once(
            turns in proptest::collection::vec((0..3_usize, 0..4_u8, 1..2_000_u64, 1..2_000_u64), 1..12),
        ) {
            let prices: BTreeMap<String, Price> =
                [("priced".to_owned(), Price { input: 1.0, output: 2.0 })].into_iter().collect();
            let meter = TreeMeter::new(
                Budgets { max_tokens: Some(u64::MAX), max_cost: Some(f64::MAX), ..Budgets::default() },
                prices,
                &ModelChoice::Demo,
                None,
            );
            let agents = ["priced", "unpriced", "silent"];
            let (mut tokens, mut cost, mut said) = (0, 0.0, Vec::new());
            for (agent, how, input, output) in turns {
                let agent = agents[agent];
                let (input, output) = if agent == "silent" { (0, 0) } else { (input, output) };
                let outcome = match how {
                    0 => RunOutcome::Error("teardown".to_owned()),
                    1 => settled(StopReason::ABORTED, 0, 0),
                    _ => settled(StopReason::COMPLETED, input, output),
                };
                said.extend(meter.external(&external(agent), &outcome));
                if how >= 2 {
                    tokens += input + output;
                    if agent == "priced" {
                        cost += Price { input: 1.0, output: 2.0 }.cost(input, output);
                    }
                }
            }
            proptest::prop_assert_eq!(meter.spend().tokens, tokens);
            proptest::prop_assert!((meter.spend().cost - cost).abs() < 1e-9);
            let mut once = said.clone();
            once.sort();
            once.dedup();
            proptest::prop_assert_eq!(once.len(), said.len(), "{:?}", said);
            for line in &said {
                proptest::prop_assert!(
                    line.contains("`silent` reports no usage") || line.contains("`unpriced` has no price"),
                    "{}", line
                );
            }
        }
    }

    #[test]
    fn an_agent_that_reports_no_usage_is_said_once_and_only_after_an_answered_turn() {
        let meter = TreeMeter::new(
            Budgets {
                max_tokens: Some(10),
                ..Budgets::default()
            },
            BTreeMap::new(),
            &ModelChoice::Demo,
            None,
        );
        let acp = external("acp");
        assert!(
            meter
                .external(&acp, &settled(StopReason::ABORTED, 0, 0))
                .is_empty()
        );
        assert_eq!(
            meter.external(&acp, &settled(StopReason::COMPLETED, 0, 0)),
            [
                "budget: the ACP agent `acp` reports no usage, so the tree's budget cannot see what it spends"
            ]
        );
        assert!(
            meter
                .external(&acp, &settled(StopReason::COMPLETED, 0, 0))
                .is_empty()
        );
        // Without a cost limit a missing price is no news; the tokens spend
        // the token budget.
        assert!(
            meter
                .external(&acp, &settled(StopReason::COMPLETED, 6, 4))
                .is_empty()
        );
        assert_eq!(*meter.spent.borrow(), Some(Spent::Tokens(10, 10)));
    }
}
