//! Scripted subagent providers for the runtime suites, each configured with
//! builder methods: [`LocalProvider`] (local continuable creation, counting
//! its preparations and optionally held on a gate), [`ExternalProvider`]
//! (external runs that end at once, fail, or are held until the test
//! settles them through their [`RunControl`] or the runtime disposes them),
//! [`Probe`] (records that its code was reached, and refuses) and [`Bare`]
//! (no execution path at all).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use dsh_core::{AgentOptions, SessionId, StopReason};
use dsh_subagent::{
    AgentRoute, ContinuableCreateRequest, ContinuableCreateSpec, InfraError, PrepareContinuable,
    ResolvedStartRequest, StartExternal, SubagentCapabilities, SubagentError, SubagentProvider,
    SubagentResult, SubagentRun,
};
use tokio::sync::{Semaphore, watch};

/// The error a provider reports when its gate was closed under it.
fn gate_closed(provider: &str) -> SubagentError {
    SubagentError::Infra(InfraError::Provider {
        provider: provider.to_owned(),
        message: "the test closed the provider's gate".into(),
    })
}

/// Wait for one permit of `gate` (if any) and consume it.
async fn pass(gate: Option<&Arc<Semaphore>>, provider: &str) -> Result<(), SubagentError> {
    if let Some(gate) = gate {
        gate.acquire()
            .await
            .map_err(|_| gate_closed(provider))?
            .forget();
    }
    Ok(())
}

/// The builder methods [`LocalProvider`] and [`ExternalProvider`] share
/// (each has `caps`, `route` and `gate` fields); `$call` names what the gate
/// holds.
macro_rules! shared_setters {
    ($call:literal) => {
        /// It claims these capabilities instead of all of them.
        #[must_use]
        pub fn with_capabilities(mut self, caps: SubagentCapabilities) -> Self {
            self.caps = caps;
            self
        }

        /// It offers this default route.
        #[must_use]
        pub fn with_route(mut self, route: AgentRoute) -> Self {
            self.route = Some(route);
            self
        }

        #[doc = concat!("Each ", $call, " waits for (and consumes) one permit of `gate`.")]
        #[must_use]
        pub fn gated(mut self, gate: Arc<Semaphore>) -> Self {
            self.gate = Some(gate);
            self
        }
    };
}

/// The identity half of [`SubagentProvider`] for a provider with `name`,
/// `caps` and `inherits` fields.
macro_rules! identity {
    () => {
        fn name(&self) -> &str {
            self.name
        }

        fn capabilities(&self) -> SubagentCapabilities {
            self.caps
        }

        fn inherits_parent_context(&self) -> bool {
            self.inherits
        }
    };
}

/// Local continuable creation with an empty seed: every capability, no
/// inherited context and no default route unless configured; counts its
/// preparations and, when gated, holds each until the gate gets a permit.
#[derive(Debug)]
pub struct LocalProvider {
    name: &'static str,
    caps: SubagentCapabilities,
    inherits: bool,
    route: Option<AgentRoute>,
    prepared: AtomicUsize,
    gate: Option<Arc<Semaphore>>,
}

impl LocalProvider {
    /// A provider registered as `name`.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            caps: SubagentCapabilities::ALL,
            inherits: false,
            route: None,
            prepared: AtomicUsize::new(0),
            gate: None,
        }
    }

    shared_setters!("preparation");

    /// It says it inherits the parent's context.
    #[must_use]
    pub fn inheriting(mut self) -> Self {
        self.inherits = true;
        self
    }

    /// How many preparations were started so far (held ones included).
    pub fn prepared(&self) -> usize {
        self.prepared.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl PrepareContinuable for LocalProvider {
    async fn prepare(
        &self,
        _request: ContinuableCreateRequest,
    ) -> Result<ContinuableCreateSpec, SubagentError> {
        self.prepared.fetch_add(1, Ordering::SeqCst);
        pass(self.gate.as_ref(), self.name).await?;
        Ok(ContinuableCreateSpec::default())
    }
}

impl SubagentProvider for LocalProvider {
    identity!();

    fn agent_route_defaults(&self) -> Option<AgentRoute> {
        self.route.clone()
    }

    fn continuable(&self) -> Option<&dyn PrepareContinuable> {
        Some(self)
    }
}

/// How an [`ExternalProvider`]'s runs end.
#[derive(Debug, Clone)]
pub enum RunEnd {
    /// Completed at once.
    Completed,
    /// Failed at once with this infrastructure error.
    Fails(SubagentError),
    /// Held until the test settles the run through its [`RunControl`], or
    /// until it is disposed (it then ends as aborted).
    Held,
}

/// A run's settlement, once it has one.
type Settlement = Option<Result<SubagentResult, SubagentError>>;

/// The test's side of one external run: settle it, and see its disposals.
#[derive(Debug)]
pub struct RunControl {
    id: SessionId,
    settle: watch::Sender<Settlement>,
    dispose_calls: AtomicUsize,
    disposed: AtomicBool,
    effective_disposals: AtomicUsize,
    dispose_error: Option<String>,
}

impl RunControl {
    /// The run's session id.
    pub fn id(&self) -> &SessionId {
        &self.id
    }

    /// Settle the run with `result` (a later settlement replaces it).
    pub fn settle(&self, result: SubagentResult) {
        self.settle.send_replace(Some(Ok(result)));
    }

    /// Settle the run with the error `err`.
    pub fn fail(&self, err: SubagentError) {
        self.settle.send_replace(Some(Err(err)));
    }

    /// How many times `dispose` was called.
    pub fn dispose_calls(&self) -> usize {
        self.dispose_calls.load(Ordering::SeqCst)
    }

    /// How many disposals took effect (at most one).
    pub fn effective_disposals(&self) -> usize {
        self.effective_disposals.load(Ordering::SeqCst)
    }
}

/// One run of an [`ExternalProvider`].
struct ControlledRun(Arc<RunControl>);

#[async_trait]
impl SubagentRun for ControlledRun {
    fn id(&self) -> &SessionId {
        &self.0.id
    }

    async fn result(&self) -> Result<SubagentResult, SubagentError> {
        let mut settled = self.0.settle.subscribe();
        // The run holds the control, and so the sender: the wait cannot
        // fail; an error would still reach the caller.
        let value = settled.wait_for(Option::is_some).await.map_err(|_| {
            SubagentError::Infra(InfraError::Teardown(
                "the run's control went away".to_owned(),
            ))
        })?;
        value.clone().unwrap_or_else(|| {
            Err(SubagentError::Infra(InfraError::Teardown(
                "the run has no settlement".to_owned(),
            )))
        })
    }

    async fn dispose(&self) -> Result<(), SubagentError> {
        self.0.dispose_calls.fetch_add(1, Ordering::SeqCst);
        if !self.0.disposed.swap(true, Ordering::SeqCst) {
            self.0.effective_disposals.fetch_add(1, Ordering::SeqCst);
            // Disposing an unsettled run cancels it: it ends as aborted.
            self.0.settle.send_if_modified(|settled| {
                if settled.is_none() {
                    *settled = Some(Ok(SubagentResult::stopped(StopReason::ABORTED)));
                    true
                } else {
                    false
                }
            });
        }
        match &self.0.dispose_error {
            Some(message) => Err(SubagentError::Infra(InfraError::Teardown(message.clone()))),
            None => Ok(()),
        }
    }
}

/// External execution whose runs end as configured ([`RunEnd`]); it counts
/// its starts, keeps every run's [`RunControl`] and records the agent
/// options of the last start it was given.
#[derive(Debug)]
pub struct ExternalProvider {
    name: &'static str,
    caps: SubagentCapabilities,
    id: Option<SessionId>,
    route: Option<AgentRoute>,
    end: RunEnd,
    start_error: Option<SubagentError>,
    dispose_error: Option<String>,
    gate: Option<Arc<Semaphore>>,
    started: AtomicUsize,
    runs: Mutex<Vec<Arc<RunControl>>>,
    seen: LastRequest,
}

/// The last start request an [`ExternalProvider`] was given (a request
/// holds the parent agent, which has no `Debug`).
#[derive(Default)]
struct LastRequest(Mutex<Option<ResolvedStartRequest>>);

impl std::fmt::Debug for LastRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("LastRequest")
            .field("label", &seen.as_ref().map(|request| request.label.clone()))
            .finish()
    }
}

impl ExternalProvider {
    /// Runs registered as `name`, with fresh ids, that complete at once.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            caps: SubagentCapabilities::ALL,
            id: None,
            route: None,
            end: RunEnd::Completed,
            start_error: None,
            dispose_error: None,
            gate: None,
            started: AtomicUsize::new(0),
            runs: Mutex::new(Vec::new()),
            seen: LastRequest::default(),
        }
    }

    /// Runs registered as `name` that are held until settled or disposed.
    pub fn held(name: &'static str) -> Self {
        Self::new(name).ending(RunEnd::Held)
    }

    /// Every run carries `id`.
    #[must_use]
    pub fn with_id(mut self, id: SessionId) -> Self {
        self.id = Some(id);
        self
    }

    shared_setters!("start");

    /// Runs end so.
    #[must_use]
    pub fn ending(mut self, end: RunEnd) -> Self {
        self.end = end;
        self
    }

    /// Every start fails with `err` (after it was counted and passed the
    /// gate).
    #[must_use]
    pub fn failing(mut self, err: SubagentError) -> Self {
        self.start_error = Some(err);
        self
    }

    /// Every run's `dispose` reports a teardown failure with `message` (it
    /// still takes effect).
    #[must_use]
    pub fn failing_disposal(mut self, message: &str) -> Self {
        self.dispose_error = Some(message.to_owned());
        self
    }

    /// How many starts were made so far (held and failed ones included).
    pub fn started(&self) -> usize {
        self.started.load(Ordering::SeqCst)
    }

    /// The control of the `index`-th run (0-based).
    ///
    /// # Panics
    /// When there is no such run (a test failure).
    pub fn run(&self, index: usize) -> Arc<RunControl> {
        let runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        match runs.get(index) {
            Some(run) => Arc::clone(run),
            None => panic!("run {index} of {} does not exist", runs.len()),
        }
    }

    /// How many runs were started.
    pub fn run_count(&self) -> usize {
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The agent options of the last start.
    pub fn seen_options(&self) -> Option<AgentOptions> {
        self.seen_request()
            .and_then(|request| request.agent_options)
    }

    /// The last start request it was given.
    pub fn seen_request(&self) -> Option<ResolvedStartRequest> {
        self.seen
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl StartExternal for ExternalProvider {
    async fn start(
        &self,
        request: ResolvedStartRequest,
    ) -> Result<Arc<dyn SubagentRun>, SubagentError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        *self.seen.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(request.clone());
        pass(self.gate.as_ref(), self.name).await?;
        if let Some(err) = &self.start_error {
            return Err(err.clone());
        }
        let settled = match &self.end {
            RunEnd::Completed => Some(Ok(SubagentResult::stopped(StopReason::COMPLETED))),
            RunEnd::Fails(err) => Some(Err(err.clone())),
            RunEnd::Held => None,
        };
        let control = Arc::new(RunControl {
            id: self.id.clone().unwrap_or_else(SessionId::generate),
            settle: watch::Sender::new(settled),
            dispose_calls: AtomicUsize::new(0),
            disposed: AtomicBool::new(false),
            effective_disposals: AtomicUsize::new(0),
            dispose_error: self.dispose_error.clone(),
        });
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&control));
        Ok(Arc::new(ControlledRun(control)))
    }
}

impl SubagentProvider for ExternalProvider {
    fn name(&self) -> &str {
        self.name
    }

    fn capabilities(&self) -> SubagentCapabilities {
        self.caps
    }

    fn inherits_parent_context(&self) -> bool {
        false
    }

    fn agent_route_defaults(&self) -> Option<AgentRoute> {
        self.route.clone()
    }

    fn external(&self) -> Option<&dyn StartExternal> {
        Some(self)
    }
}

/// Records every call into its code and refuses it: a refusal test asserts
/// it was never reached.
#[derive(Debug)]
pub struct Probe {
    name: &'static str,
    caps: SubagentCapabilities,
    inherits: bool,
    external: bool,
    calls: AtomicUsize,
}

impl Probe {
    /// A probe registered as `name`, external or local continuable, with
    /// these capabilities.
    pub fn new(name: &'static str, external: bool, caps: SubagentCapabilities) -> Self {
        Self {
            name,
            caps,
            inherits: false,
            external,
            calls: AtomicUsize::new(0),
        }
    }

    /// It says it inherits the parent's context.
    #[must_use]
    pub fn inheriting(mut self) -> Self {
        self.inherits = true;
        self
    }

    /// How many times its code was reached.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn reached(&self) -> SubagentError {
        self.calls.fetch_add(1, Ordering::SeqCst);
        SubagentError::Infra(InfraError::Provider {
            provider: self.name.to_owned(),
            message: "the probe was reached".into(),
        })
    }
}

#[async_trait]
impl PrepareContinuable for Probe {
    async fn prepare(
        &self,
        _request: ContinuableCreateRequest,
    ) -> Result<ContinuableCreateSpec, SubagentError> {
        Err(self.reached())
    }
}

#[async_trait]
impl StartExternal for Probe {
    async fn start(
        &self,
        _request: ResolvedStartRequest,
    ) -> Result<Arc<dyn SubagentRun>, SubagentError> {
        Err(self.reached())
    }
}

impl SubagentProvider for Probe {
    identity!();

    fn continuable(&self) -> Option<&dyn PrepareContinuable> {
        (!self.external).then_some(self as &dyn PrepareContinuable)
    }

    fn external(&self) -> Option<&dyn StartExternal> {
        self.external.then_some(self as &dyn StartExternal)
    }
}

/// A provider `bare` that implements neither execution path.
#[derive(Debug)]
pub struct Bare;

impl SubagentProvider for Bare {
    fn name(&self) -> &str {
        "bare"
    }

    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities::ALL
    }

    fn inherits_parent_context(&self) -> bool {
        false
    }
}
