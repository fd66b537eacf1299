//! Activations: one live execution of a child (a local agent or an external
//! run), with an identity of its own. Stop, teardown, ownership and
//! settlement are keyed by the activation, never by the child's session id,
//! so an old handle never reaches a later resume of the same child. The
//! monitor watches one activation until it ends, then notifies its
//! creator, tears it down, frees its capacity slot and settles it.

use crate::InfraError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use dsh_core::{
    Agent, AgentHandle, AgentRef, AgentStatus, CancelCause, CancelOptions, CancellationToken,
    MessageId, SessionId, StopReason,
};
use tokio::sync::{Notify, watch};

use crate::admission::CapacitySlot;
use crate::budget::{Ledger, Limits, LocalMeter, enforce};
use crate::capture::CaptureTool;
use crate::error::SubagentError;
use crate::events::{RunInfo, RunOutcome, SubagentEvent};
use crate::ids::IdMap;
use crate::input::{InputGate, InputPermit};
use crate::provider::SubagentRun;
use crate::request::Delivery;
use crate::result::{SubagentResult, bound_diagnostic, final_output, last_stop};
use crate::runtime::{SubagentRuntime, lock};

/// Serials of activations, unique for the life of the process.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

/// How an activation ended: its result, and how its teardown went.
#[derive(Debug, Clone)]
pub(crate) struct Settled {
    pub(crate) result: Result<SubagentResult, SubagentError>,
    pub(crate) teardown: Result<(), SubagentError>,
}

pub(crate) enum Execution {
    Local {
        handle: AgentHandle,
        /// Events before this seq belong to earlier activations or a seed.
        start_seq: u64,
        capture: Option<Arc<CaptureTool>>,
    },
    External {
        run: Arc<dyn SubagentRun>,
        /// The run's id, held while the activation lives (a follow-up of
        /// a cataloged run holds none: the catalog and the resume gate
        /// keep it unique).
        _claim: Option<crate::ids::Claim<SessionId>>,
    },
}

/// One live activation, as the runtime tracks it.
pub(crate) struct Activation {
    serial: u64,
    info: RunInfo,
    child_id: SessionId,
    /// The full model-facing name, when every creator below the root is named.
    path: Option<String>,
    name: String,
    parent: AgentRef,
    root: SessionId,
    delivery: Delivery,
    execution: Execution,
    /// Activations this child created, which it owns until they settle.
    owned: Mutex<IdMap<u64, Weak<Activation>>>,
    owned_changed: Notify,
    /// Set by `dispose` or a drain: stop and settle.
    stop: CancellationToken,
    /// Set by an interrupt: the idle child stays resident (its input
    /// parked) until something wakes it again.
    parked: AtomicBool,
    /// Closed when the activation stops taking input (before its notice).
    input: InputGate,
    settled: watch::Sender<Option<Settled>>,
    /// The tree's capacity slot, freed when the activation retires (before
    /// its result settles, so a caller can start the next child at once).
    slot: Mutex<Option<CapacitySlot>>,
    /// The usage of its subtree so far and its budget, linked to its
    /// owner's (see [`crate::budget`]).
    ledger: Arc<Ledger>,
    /// What an external run reported so far (unused for a local child,
    /// whose log says it).
    external_activity: Arc<Mutex<crate::progress::ExternalActivity>>,
    /// The longest it may run.
    time_limit: Option<std::time::Duration>,
}

/// What a new activation is made of.
pub(crate) struct NewActivation {
    pub(crate) info: RunInfo,
    pub(crate) path: Option<String>,
    pub(crate) parent: AgentRef,
    pub(crate) root: SessionId,
    pub(crate) delivery: Delivery,
    pub(crate) execution: Execution,
    pub(crate) slot: CapacitySlot,
}

impl Activation {
    /// The child's id.
    pub(crate) fn child_id(&self) -> &SessionId {
        &self.child_id
    }

    /// The full model-facing name, when every creator below the root is named.
    pub(crate) fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// The model-facing name: its path, else its id.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Its direct creator, exactly.
    pub(crate) fn parent(&self) -> &AgentRef {
        &self.parent
    }

    /// The root of its tree.
    pub(crate) fn root(&self) -> &SessionId {
        &self.root
    }

    /// Who is told its result.
    pub(crate) fn delivery(&self) -> Delivery {
        self.delivery
    }

    /// Cancelled by `dispose` or a drain: it stops and settles.
    pub(crate) fn stop(&self) -> &CancellationToken {
        &self.stop
    }

    /// Mark it interrupted: it stays resident while idle.
    pub(crate) fn park(&self) {
        self.parked.store(true, Ordering::SeqCst);
    }

    /// Whether it is interrupted and stays resident while idle.
    pub(crate) fn is_parked(&self) -> bool {
        self.parked.load(Ordering::SeqCst)
    }

    /// How it ended, once it has (`None` until then).
    pub(crate) fn settled(&self) -> watch::Receiver<Option<Settled>> {
        self.settled.subscribe()
    }

    /// The usage of its subtree so far and its budget.
    pub(crate) fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// What an external run reported so far.
    pub(crate) fn external_activity(&self) -> &Arc<Mutex<crate::progress::ExternalActivity>> {
        &self.external_activity
    }

    /// A local activation's own events so far (`None` for an external run).
    pub(crate) fn own_events(&self) -> Option<Vec<dsh_core::SessionEvent>> {
        match &self.execution {
            Execution::Local {
                handle, start_seq, ..
            } => Some(handle.agent().events_since(*start_seq)),
            Execution::External { .. } => None,
        }
    }

    fn new(new: NewActivation, limits: Limits, owner: Option<Arc<Ledger>>) -> Self {
        let child_id = new.info.child_id.clone();
        let stop = CancellationToken::new();
        Self {
            ledger: Arc::new(Ledger::new(owner, limits.tokens, stop.clone())),
            time_limit: limits.time,
            external_activity: Arc::default(),
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            name: new.path.clone().unwrap_or_else(|| child_id.to_string()),
            child_id,
            info: new.info,
            path: new.path,
            parent: new.parent,
            root: new.root,
            delivery: new.delivery,
            execution: new.execution,
            owned: Mutex::default(),
            owned_changed: Notify::new(),
            stop,
            parked: AtomicBool::new(false),
            input: InputGate::default(),
            settled: watch::Sender::new(None),
            slot: Mutex::new(Some(new.slot)),
        }
    }

    fn owned(&self) -> MutexGuard<'_, IdMap<u64, Weak<Activation>>> {
        self.owned.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this activation owns live children.
    pub(crate) fn owns_children(&self) -> bool {
        !self.owned().is_empty()
    }

    /// The exact live agent of a local activation.
    pub(crate) fn agent(&self) -> Option<&Arc<dyn Agent>> {
        match &self.execution {
            Execution::Local { handle, .. } => Some(handle.agent()),
            Execution::External { .. } => None,
        }
    }

    /// A permit to deliver one message to this activation's child, or
    /// `None` when it takes no more input: it is retiring, or its child
    /// submitted a valid structured result (B23), which closes this
    /// activation's input. A message then goes to a later resume.
    ///
    /// # Cancel safety
    /// As [`InputGate::admit`].
    pub(crate) async fn admit_input(&self) -> Option<InputPermit<'_>> {
        self.input.admit().await.filter(|_| !self.captured())
    }

    /// Whether the activation takes no more input (see
    /// [`Activation::admit_input`]), without waiting for a permit.
    pub(crate) fn input_closed(&self) -> bool {
        self.input.is_closed() || self.captured()
    }

    /// Whether its child submitted a valid structured result (B23).
    fn captured(&self) -> bool {
        matches!(&self.execution, Execution::Local { capture: Some(capture), .. } if capture.captured().is_some())
    }

    /// Whether this is the activation of the exact agent `reference`.
    pub(crate) fn is_agent(&self, reference: &AgentRef) -> bool {
        self.agent()
            .is_some_and(|agent| &agent.reference() == reference)
    }
}

/// The live activations of one runtime, by child (at most one each, B16).
#[derive(Default)]
pub(crate) struct Activations {
    map: Mutex<IdMap<SessionId, Arc<Activation>>>,
}

impl Activations {
    fn map(&self) -> MutexGuard<'_, IdMap<SessionId, Arc<Activation>>> {
        lock(&self.map)
    }

    /// The live activation of `child`.
    pub(crate) fn get(&self, child: &SessionId) -> Option<Arc<Activation>> {
        self.map().get(child).cloned()
    }

    /// The live activation of the exact agent `reference`.
    pub(crate) fn of_agent(&self, reference: &AgentRef) -> Option<Arc<Activation>> {
        self.map()
            .get(&reference.id)
            .filter(|activation| activation.is_agent(reference))
            .cloned()
    }

    /// How many are live.
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }

    /// Every live activation.
    pub(crate) fn all(&self) -> Vec<Arc<Activation>> {
        self.map().values().cloned().collect()
    }

    /// The live activations of `root`'s tree.
    pub(crate) fn tree(&self, root: &SessionId) -> Vec<Arc<Activation>> {
        self.map()
            .values()
            .filter(|activation| &activation.root == root)
            .cloned()
            .collect()
    }

    /// Make `new` live, owned by its creator's exact live activation,
    /// whose ledger its usage is charged to as well.
    fn insert(&self, new: NewActivation, limits: Limits) -> Arc<Activation> {
        let mut map = self.map();
        let owner = map
            .get(&new.parent.id)
            .filter(|owner| owner.is_agent(&new.parent))
            .cloned();
        let ledger = owner.as_ref().map(|owner| owner.ledger.clone());
        let activation = Arc::new(Activation::new(new, limits, ledger));
        if let Some(owner) = owner {
            owner
                .owned()
                .insert(activation.serial, Arc::downgrade(&activation));
        }
        map.insert(activation.child_id.clone(), activation.clone());
        activation
    }

    /// Remove exactly `activation` (never a later one of its child) and
    /// tell its owner.
    fn remove(&self, activation: &Activation) {
        let owner = {
            let mut map = self.map();
            if map
                .get(&activation.child_id)
                .is_some_and(|live| live.serial == activation.serial)
            {
                map.remove(&activation.child_id);
            }
            map.get(&activation.parent.id)
                .filter(|owner| owner.is_agent(&activation.parent))
                .cloned()
        };
        if let Some(owner) = owner {
            owner.owned().remove(&activation.serial);
            owner.owned_changed.notify_waiters();
        }
    }
}

/// A handle to one activation. Cloning shares it; every holder can await the
/// result.
#[derive(Clone)]
pub struct SubagentActivation {
    child_id: SessionId,
    name: String,
    message_id: Option<MessageId>,
    activation: Weak<Activation>,
    settled: watch::Receiver<Option<Settled>>,
    disposed: Arc<AtomicBool>,
}

impl std::fmt::Debug for SubagentActivation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentActivation")
            .field("child_id", &self.child_id)
            .field("name", &self.name)
            .field("message_id", &self.message_id)
            .finish_non_exhaustive()
    }
}

impl SubagentActivation {
    pub(crate) fn new(activation: &Arc<Activation>, message_id: Option<MessageId>) -> Self {
        Self {
            child_id: activation.child_id.clone(),
            name: activation.name.clone(),
            message_id,
            activation: Arc::downgrade(activation),
            settled: activation.settled.subscribe(),
            disposed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The child's stable identity.
    pub fn child_id(&self) -> &SessionId {
        &self.child_id
    }

    /// The child's full model-facing name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The accepted initial message, for a local child (always present for
    /// one: a start whose prompt was not accepted fails).
    pub fn message_id(&self) -> Option<&MessageId> {
        self.message_id.as_ref()
    }

    async fn settled(&self) -> Settled {
        let mut settled = self.settled.clone();
        match settled.wait_for(Option::is_some).await {
            Ok(value) => value.clone().unwrap_or_else(vanished),
            Err(_) => vanished(),
        }
    }

    /// Wait for the result: it settles after teardown and after the
    /// completion notice was sent.
    ///
    /// # Errors
    /// An infrastructure fault; a child's failure is a stop reason.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the activation running.
    pub async fn result(&self) -> Result<SubagentResult, SubagentError> {
        self.settled().await.result
    }

    /// Stop this activation (never a later one of the same child) and wait
    /// until it is torn down. Idempotent.
    ///
    /// # Errors
    /// The teardown failed; a result already captured stands.
    ///
    /// # Cancel safety
    /// The stop is requested before the first await; dropping the future
    /// then only stops the waiting, and the runtime finishes the teardown.
    pub async fn dispose(&self) -> Result<(), SubagentError> {
        if !self.disposed.swap(true, Ordering::SeqCst)
            && let Some(activation) = self.activation.upgrade()
        {
            activation.stop.cancel();
        }
        self.settled().await.teardown
    }
}

fn vanished() -> Settled {
    let err = SubagentError::Infra(InfraError::Teardown(
        "the activation ended without a result".into(),
    ));
    Settled {
        result: Err(err.clone()),
        teardown: Err(err),
    }
}

impl SubagentRuntime {
    /// Make `new` a live activation (no event, no monitor yet).
    pub(crate) fn install(&self, new: NewActivation) -> Arc<Activation> {
        self.install_limited(new, Limits::default())
    }

    /// Make `new` a live activation with a token budget and a time limit.
    pub(crate) fn install_limited(&self, new: NewActivation, limits: Limits) -> Arc<Activation> {
        let activation = self.activations().insert(new, limits);
        if let Execution::Local {
            handle, start_seq, ..
        } = &activation.execution
        {
            // Its progress is heard from now on, before its monitor runs.
            self.progress_hub().register(
                self.progress_sink(&activation),
                handle.agent().clone(),
                *start_seq,
                activation.serial,
            );
        }
        activation
    }

    /// Announce and watch an installed activation.
    pub(crate) fn launch(&self, activation: &Arc<Activation>) {
        self.events()
            .emit_with(|| SubagentEvent::Start(activation.info.clone()));
        let runtime = self.clone();
        let activation = activation.clone();
        self.tasks().spawn(async move {
            runtime.monitor(activation).await;
        });
    }

    /// Undo an installed activation that was never launched: it leaves the
    /// map and frees its slot; the caller disposes what it ran.
    pub(crate) fn uninstall(&self, activation: &Arc<Activation>) {
        drop(lock(&activation.slot).take());
        self.progress_hub()
            .unregister(&activation.child_id, activation.serial);
        self.activations().remove(activation);
    }

    /// Watch one activation until it ends, then notify, tear down and settle.
    async fn monitor(&self, activation: Arc<Activation>) {
        // An external run stopped early is disposed once, here; its outcome
        // is the teardown's.
        let mut early_teardown = None;
        // Why the limits stopped it, when they did.
        let mut tripped = None;
        // The seq of the last turn end a local child's notice reports.
        let mut last_turn_end = None;
        let result = match &activation.execution {
            Execution::Local {
                handle,
                start_seq,
                capture,
            } => {
                // Progress is read from the log while the child runs, and
                // once more when it has gone quiet (never slowing it).
                let reporter = self
                    .progress_hub()
                    .reporting(&activation.child_id, activation.serial);
                let watched = async {
                    loop {
                        let seen = activation.input.seen();
                        if self.await_quiescence(&activation, handle.agent()).await {
                            activation.input.close();
                            break true;
                        }
                        // Retire only if no delivery landed since the child was
                        // found quiet; one in flight finishes first.
                        if activation.input.retire_if_quiet(seen).await {
                            break false;
                        }
                    }
                };
                let mut meter = LocalMeter::new(*start_seq);
                let enforced = enforce(
                    &activation.ledger,
                    activation.time_limit,
                    Some((&mut meter, handle.agent().as_ref())),
                );
                let stopped = match &reporter {
                    Some(reporter) => tokio::select! {
                        stopped = watched => stopped,
                        never = reporter.run() => match never {},
                        never = enforced => match never {},
                    },
                    None => tokio::select! {
                        stopped = watched => stopped,
                        never = enforced => match never {},
                    },
                };
                // Only a stop the limits asked for ends with their reason.
                tripped = activation.ledger.tripped().filter(|_| stopped).cloned();
                if stopped {
                    self.stop_tree(&activation, handle.agent()).await;
                }
                if let Some(reporter) = &reporter {
                    reporter.report();
                }
                // One borrowed pass over the activation's own events: the
                // last usage, the result and the turn end its notice names.
                let mut result = None;
                handle.agent().visit_events_since(*start_seq, &mut |own| {
                    meter.charge(own, &activation.ledger);
                    last_turn_end = crate::notice::last_turn_end(own);
                    result = Some(local_result(own, capture.as_deref(), stopped));
                });
                Ok(result.unwrap_or_else(|| local_result(&[], capture.as_deref(), stopped)))
            }
            Execution::External { run, .. } => {
                run.observe(
                    self.progress_sink(&activation)
                        .metered(activation.ledger.clone())
                        .tracking(activation.external_activity.clone()),
                );
                let result = tokio::select! {
                    result = run.result() => result,
                    () = activation.stop.cancelled() => {
                        tripped = activation.ledger.tripped().cloned();
                        early_teardown = Some(run.dispose().await);
                        run.result().await
                    }
                    never = enforce(&activation.ledger, activation.time_limit, None) => match never {},
                };
                if let Ok(result) = &result {
                    activation.ledger.charge_up_to(result.usage);
                }
                activation.input.close();
                // Whatever the provider wrote, the bound holds.
                result.map(|mut result| {
                    result.diagnostic = result.diagnostic.take().map(bound_diagnostic);
                    result
                })
            }
        };
        let result = result.map(|result| activation.ledger.settle(result, tripped));
        self.record_usage(&activation, &result).await;
        // The input is closed now: a reply to the notice goes to a resume.
        // An infrastructure failure is reported too, never swallowed.
        let failed;
        let heard = match &result {
            Ok(result) => result,
            Err(err) => {
                failed = SubagentResult::stopped(StopReason::ERROR)
                    .with_diagnostic(bound_diagnostic(err.to_string()));
                &failed
            }
        };
        if let Err(err) = self.record_outcome(&activation, heard).await {
            tracing::warn!(child = %activation.child_id, "the foreground outcome was not recorded: {err}");
        }
        self.notify_parent(&activation, heard, last_turn_end).await;
        let teardown = match (&activation.execution, early_teardown) {
            (Execution::Local { handle, .. }, _) => {
                handle.dispose().await;
                Ok(())
            }
            (Execution::External { .. }, Some(outcome)) => outcome,
            (Execution::External { run, .. }, None) => run.dispose().await,
        };
        self.uninstall(&activation);
        // Built only for a listener (the result and the info are copied),
        // before the result moves into the settlement, which every
        // listener must be able to see when the end reaches it.
        let end = (self.events().listener_count() > 0).then(|| {
            let outcome = match (&result, &teardown) {
                (Ok(result), Ok(())) => RunOutcome::Settled(result.clone()),
                (Err(err), _) | (_, Err(err)) => RunOutcome::Error(err.to_string()),
            };
            SubagentEvent::End(activation.info.clone(), outcome)
        });
        activation
            .settled
            .send_replace(Some(Settled { result, teardown }));
        if let Some(end) = end {
            self.events().emit(&end);
        }
    }

    /// Where `activation` reports its progress.
    fn progress_sink(&self, activation: &Activation) -> crate::progress::ProgressSink {
        self.progress_hub().sink(crate::progress::ProgressMember {
            child_id: activation.child_id.clone(),
            activation: activation.serial,
            root: activation.root.clone(),
            name: activation.name.clone(),
            provider: activation.info.provider.clone(),
        })
    }

    /// Wait until the child is idle with no owned child left, or a stop was
    /// requested (returns `true` then).
    async fn await_quiescence(&self, activation: &Activation, child: &Arc<dyn Agent>) -> bool {
        loop {
            tokio::select! {
                biased;
                () = activation.stop.cancelled() => return true,
                () = child.wait_idle() => {}
            }
            loop {
                let changed = activation.owned_changed.notified();
                if activation.owned().is_empty() {
                    break;
                }
                tokio::select! {
                    biased;
                    () = activation.stop.cancelled() => return true,
                    () = changed => {}
                }
            }
            if child.status() != AgentStatus::Idle {
                continue;
            }
            if activation.parked.load(Ordering::SeqCst) {
                // Interrupted: stay resident until a waking send runs a turn.
                let mut status = child.watch_status();
                tokio::select! {
                    biased;
                    () = activation.stop.cancelled() => return true,
                    _ = status.wait_for(|status| *status == AgentStatus::Running) => {}
                }
                activation.parked.store(false, Ordering::SeqCst);
                continue;
            }
            return false;
        }
    }

    /// Stop a child and everything it owns, child-first: its current turn
    /// first (so it starts nothing new), then every activation it owns (their
    /// notices reach it without waking it), then the child itself.
    async fn stop_tree(&self, activation: &Activation, child: &Arc<dyn Agent>) {
        child.cancel(CancelCause::Disposed, CancelOptions { keep_inbox: true });
        loop {
            let changed = activation.owned_changed.notified();
            let owned: Vec<Arc<Activation>> = {
                let mut owned = activation.owned();
                owned.retain(|_, member| member.strong_count() > 0);
                owned.values().filter_map(Weak::upgrade).collect()
            };
            if owned.is_empty() {
                break;
            }
            for member in &owned {
                member.stop.cancel();
            }
            changed.await;
        }
        child.cancel(CancelCause::Disposed, CancelOptions { keep_inbox: true });
        child.wait_idle().await;
    }
}

/// The seq an agent's next event takes, which a new activation's own
/// events start at, read without copying its log: the last event past the
/// seed, borrowed where the agent can lend it (a fork child's seed is its
/// parent's whole history, and a new child has only the few events its
/// creation wrote past it).
pub(crate) fn next_seq(agent: &dyn Agent) -> u64 {
    let seed = agent.header().seed_len;
    let mut next = seed;
    agent.visit_events_since(seed, &mut |fresh| {
        if let Some(last) = fresh.last() {
            next = last.seq + 1;
        }
    });
    next
}

/// The result of a local activation from the child's own events (`own`,
/// those from the activation's start on).
fn local_result(
    own: &[dsh_core::SessionEvent],
    capture: Option<&CaptureTool>,
    stopped: bool,
) -> SubagentResult {
    // A stopped activation is aborted whatever its last turn said.
    let (mut stop_reason, mut diagnostic) = last_stop(own)
        .filter(|_| !stopped)
        .unwrap_or((StopReason::ABORTED, None));
    let structured = capture.and_then(CaptureTool::captured);
    if capture.is_some() && structured.is_none() && stop_reason.is_completed() {
        stop_reason = StopReason::ERROR;
        diagnostic = Some(format!(
            "the child finished without submitting a result through `{}`",
            crate::capture::CAPTURE_TOOL
        ));
    }
    let usage = crate::result::usage_of(own);
    let mut result = SubagentResult {
        output: final_output(own),
        structured,
        diagnostic: None,
        stop_reason,
        usage,
        subtree_usage: usage,
    };
    if !result.stop_reason.is_completed()
        && let Some(diagnostic) = diagnostic
    {
        result = result.with_diagnostic(diagnostic);
    }
    result
}
