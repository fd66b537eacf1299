//! The runtime: the provider registry and the activations it starts. It
//! checks every request before provider code runs, reserves names and
//! capacity with guards that free themselves on any early return, creates a
//! local child through the [`AgentFactory`] (or starts an external run), and
//! publishes it: catalog entry in the parent's log, initial prompt accepted.
//! Before publication the caller's token can stop the start and nothing is
//! left behind; after it the runtime owns the child, its cancellation and
//! its teardown. The runtime never reaches into a child's loop except
//! through the core traits.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dsh_core::observe::EventBus;
use dsh_core::{
    Agent, AgentFactory, AgentHandle, AgentOptions, AgentRef, AgentRegistry, AgentSetup,
    AgentStatus, CancelCause, CancelOptions, CancellationToken, Composition, ContentBlock,
    CreateAgent, MessageId, MessageSource, SessionHeader, SessionId, SessionStore, StopReason,
    UserMessage,
};
use tokio::sync::{Notify, watch};
use tokio_util::task::TaskTracker;

use crate::capture::CaptureTool;
use crate::catalog::{CATALOG_EVENT, CatalogEntry, CatalogFold, ChildMode, catalog_payload};
use crate::error::SubagentError;
use crate::events::{RunInfo, RunOutcome, SubagentEvent};
use crate::names::{NameReservation, NameReservations, ROOT_NAME, validate_name};
use crate::provider::{
    ContinuableCreateRequest, ResolvedStartRequest, SubagentProvider, SubagentRun,
};
use crate::request::{ActivationSpec, Delivery, StartRequest};
use crate::result::{SubagentResult, bound_diagnostic, final_output, last_stop, summary_line};

/// Cached catalog folds beyond which dead parents are swept out.
const CATALOG_SWEEP: usize = 64;

/// Runtime limits.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeConfig {
    /// Live children allowed per tree (B17); reaching it is `CAPACITY`.
    pub max_live_children_per_tree: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            max_live_children_per_tree: 256,
        }
    }
}

/// Model-facing names of one live tree member and its direct creator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberNames {
    /// `lead` for the root, the slash path for a named descendant, else the session id.
    pub self_name: String,
    /// The direct creator's name by the same rule; `None` for the root.
    pub parent: Option<String>,
}

type Settlement = Option<Result<SubagentResult, SubagentError>>;

enum Execution {
    Local {
        handle: AgentHandle,
        /// Events before this seq belong to earlier activations or a seed.
        start_seq: u64,
        capture: Option<Arc<CaptureTool>>,
    },
    External {
        run: Arc<dyn SubagentRun>,
    },
}

/// One live activation, as the runtime tracks it.
pub(crate) struct Activation {
    info: RunInfo,
    pub(crate) child_id: SessionId,
    /// The full model-facing name, when every creator below the root is named.
    path: Option<String>,
    name: String,
    pub(crate) parent: AgentRef,
    pub(crate) root: SessionId,
    delivery: Delivery,
    execution: Execution,
    /// Activations this child created, which it owns until they settle.
    owned: Mutex<HashSet<SessionId>>,
    owned_changed: Notify,
    /// Set by `dispose`: stop and settle.
    pub(crate) stop: CancellationToken,
    /// Set by an interrupt: the idle child stays resident (its input
    /// parked) until something wakes it again.
    pub(crate) parked: AtomicBool,
    pub(crate) settled: watch::Sender<Settlement>,
    /// The tree's capacity slot, freed when the activation retires (before
    /// its result settles, so a caller can start the next child at once).
    slot: Mutex<Option<CapacitySlot>>,
}

impl Activation {
    /// A fresh activation; its model-facing name is `path`, or the child id
    /// when some level of the path is unnamed.
    fn new(
        info: RunInfo,
        path: Option<String>,
        parent: AgentRef,
        root: SessionId,
        delivery: Delivery,
        execution: Execution,
        slot: CapacitySlot,
    ) -> Self {
        let child_id = info.child_id.clone();
        Self {
            name: path.clone().unwrap_or_else(|| child_id.to_string()),
            child_id,
            info,
            path,
            parent,
            root,
            delivery,
            execution,
            owned: Mutex::new(HashSet::new()),
            owned_changed: Notify::new(),
            stop: CancellationToken::new(),
            parked: AtomicBool::new(false),
            settled: watch::Sender::new(None),
            slot: Mutex::new(Some(slot)),
        }
    }

    pub(crate) fn owned(&self) -> MutexGuard<'_, HashSet<SessionId>> {
        self.owned.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A handle to one activation. Cloning shares it; every holder can await the
/// result.
#[derive(Clone)]
pub struct SubagentActivation {
    child_id: SessionId,
    name: String,
    message_id: Option<MessageId>,
    runtime: SubagentRuntime,
    settled: watch::Receiver<Settlement>,
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
    /// The child's stable identity.
    pub fn child_id(&self) -> &SessionId {
        &self.child_id
    }

    /// The child's full model-facing name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The accepted initial message, for a local child.
    pub fn message_id(&self) -> Option<&MessageId> {
        self.message_id.as_ref()
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
        let mut settled = self.settled.clone();
        match settled.wait_for(Option::is_some).await {
            Ok(value) => value
                .clone()
                .unwrap_or_else(|| Err(SubagentError::Teardown("the activation vanished".into()))),
            Err(_) => Err(SubagentError::Teardown(
                "the activation ended without a result".into(),
            )),
        }
    }

    /// Stop this activation (never a later one of the same child) and wait
    /// until it is torn down. Idempotent.
    ///
    /// # Errors
    /// The teardown failed; a result already captured stands.
    pub async fn dispose(&self) -> Result<(), SubagentError> {
        if !self.disposed.swap(true, Ordering::SeqCst) {
            self.runtime.stop_activation(&self.child_id);
        }
        let _ = self.result().await;
        self.runtime.teardown_of(&self.child_id)
    }
}

/// Counts one start in flight below a root, for drains to wait on.
struct StartingGuard<'a> {
    runtime: &'a SubagentRuntime,
    root: SessionId,
}

impl<'a> StartingGuard<'a> {
    fn new(runtime: &'a SubagentRuntime, root: &SessionId) -> Self {
        *lock(&runtime.inner.starting)
            .entry(root.clone())
            .or_insert(0) += 1;
        Self {
            runtime,
            root: root.clone(),
        }
    }
}

impl Drop for StartingGuard<'_> {
    fn drop(&mut self) {
        let mut starting = lock(&self.runtime.inner.starting);
        if let Some(count) = starting.get_mut(&self.root) {
            *count -= 1;
            if *count == 0 {
                starting.remove(&self.root);
            }
        }
        drop(starting);
        self.runtime.inner.started.notify_waiters();
    }
}

/// Frees a tree's capacity slot on drop.
pub(crate) struct CapacitySlot {
    counts: Arc<Mutex<HashMap<SessionId, usize>>>,
    root: SessionId,
}

impl Drop for CapacitySlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.root) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.root);
            }
        }
    }
}

pub(crate) struct Inner {
    pub(crate) factory: Arc<dyn AgentFactory>,
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) config: RuntimeConfig,
    pub(crate) providers: Mutex<Vec<Arc<dyn SubagentProvider>>>,
    pub(crate) events: EventBus<SubagentEvent>,
    pub(crate) names: NameReservations,
    pub(crate) activations: Mutex<HashMap<SessionId, Arc<Activation>>>,
    /// Teardown outcomes of activations that left the map.
    pub(crate) teardowns: Mutex<HashMap<SessionId, Result<(), SubagentError>>>,
    pub(crate) run_ids: Mutex<HashSet<SessionId>>,
    /// One lock per child being resumed, so concurrent resumes coalesce.
    pub(crate) resuming: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
    /// Roots whose trees are draining: admission below them is closed
    /// until that exact root leaves the registry.
    pub(crate) draining: Mutex<HashSet<AgentRef>>,
    /// Starts in flight, per tree root, and a signal when one finishes.
    pub(crate) starting: Mutex<HashMap<SessionId, usize>>,
    pub(crate) started: Notify,
    /// Catalog folds of live parents, by exact reference, advanced with
    /// only the events each start has not seen yet.
    pub(crate) catalogs: Mutex<HashMap<AgentRef, CatalogFold>>,
    pub(crate) live: Arc<Mutex<HashMap<SessionId, usize>>>,
    pub(crate) tasks: TaskTracker,
}

/// The subagent runtime. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct SubagentRuntime {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for SubagentRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentRuntime")
            .field("providers", &self.list())
            .field("live", &lock(&self.inner.activations).len())
            .finish()
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SubagentRuntime {
    /// A runtime creating local children through `factory`, reading cold
    /// logs from `store` (the factory's store).
    pub fn new(
        factory: Arc<dyn AgentFactory>,
        store: Arc<dyn SessionStore>,
        config: RuntimeConfig,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                factory,
                store,
                config,
                providers: Mutex::new(Vec::new()),
                events: EventBus::new(),
                names: NameReservations::new(),
                activations: Mutex::new(HashMap::new()),
                teardowns: Mutex::new(HashMap::new()),
                run_ids: Mutex::new(HashSet::new()),
                resuming: Mutex::new(HashMap::new()),
                draining: Mutex::new(HashSet::new()),
                starting: Mutex::new(HashMap::new()),
                started: Notify::new(),
                catalogs: Mutex::new(HashMap::new()),
                live: Arc::new(Mutex::new(HashMap::new())),
                tasks: TaskTracker::new(),
            }),
        }
    }

    /// The live-agent registry (the factory's).
    pub fn registry(&self) -> &AgentRegistry {
        self.inner.factory.registry()
    }

    /// Lifecycle events.
    pub fn events(&self) -> &EventBus<SubagentEvent> {
        &self.inner.events
    }

    /// The tracker of the runtime's own tasks (one monitor per activation).
    pub fn tasks(&self) -> &TaskTracker {
        &self.inner.tasks
    }

    /// Register a provider under its name.
    ///
    /// # Errors
    /// `DUPLICATE_PROVIDER` (the first stays), or `UNSUPPORTED_CAPABILITY`
    /// for a provider with no execution path, or with a default route but no
    /// `agent_options` support.
    pub fn register(&self, provider: Arc<dyn SubagentProvider>) -> Result<(), SubagentError> {
        let name = provider.name().to_owned();
        if provider.continuable().is_none() && provider.external().is_none() {
            return Err(SubagentError::UnsupportedCapability {
                provider: name,
                capability: "an execution path (continuable creation or start)",
            });
        }
        if provider.agent_route_defaults().is_some() && !provider.capabilities().agent_options {
            return Err(SubagentError::UnsupportedCapability {
                provider: name,
                capability: "agent_options, which a default model route requires",
            });
        }
        {
            let mut providers = lock(&self.inner.providers);
            if providers.iter().any(|p| p.name() == name) {
                return Err(SubagentError::DuplicateProvider(name));
            }
            providers.push(provider);
        }
        self.inner.events.emit(&SubagentEvent::ProviderAdded(name));
        Ok(())
    }

    /// Remove a provider: new starts fail with `NO_PROVIDER`; activations
    /// already handed out are untouched. Returns whether it was registered.
    pub fn remove(&self, name: &str) -> bool {
        let removed = {
            let mut providers = lock(&self.inner.providers);
            let before = providers.len();
            providers.retain(|p| p.name() != name);
            providers.len() != before
        };
        if removed {
            self.inner
                .events
                .emit(&SubagentEvent::ProviderRemoved(name.to_owned()));
        }
        removed
    }

    /// The provider registered under `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn SubagentProvider>> {
        lock(&self.inner.providers)
            .iter()
            .find(|p| p.name() == name)
            .cloned()
    }

    /// Provider names in registration order.
    pub fn list(&self) -> Vec<String> {
        lock(&self.inner.providers)
            .iter()
            .map(|p| p.name().to_owned())
            .collect()
    }

    /// How many activations are live.
    pub fn live_activations(&self) -> usize {
        lock(&self.inner.activations).len()
    }

    /// The root session of `agent`'s tree.
    pub fn root_of(&self, agent: &SessionId) -> SessionId {
        match lock(&self.inner.activations).get(agent) {
            Some(activation) => activation.root.clone(),
            None => agent.clone(),
        }
    }

    /// The model-facing names of a live member and its creator.
    pub fn names_of(&self, agent: &SessionId) -> MemberNames {
        let activations = lock(&self.inner.activations);
        match activations.get(agent) {
            None => MemberNames {
                self_name: ROOT_NAME.to_owned(),
                parent: None,
            },
            Some(activation) => {
                let parent = match activations.get(&activation.parent.id) {
                    Some(parent) => parent.name.clone(),
                    None if activation.parent.id == activation.root => ROOT_NAME.to_owned(),
                    // A cold creator: its name is this path without the last level.
                    None => activation
                        .path
                        .as_deref()
                        .and_then(|path| path.rsplit_once('/'))
                        .map_or_else(
                            || activation.parent.id.to_string(),
                            |(parent, _)| parent.to_owned(),
                        ),
                };
                MemberNames {
                    self_name: activation.name.clone(),
                    parent: Some(parent),
                }
            }
        }
    }

    /// Start a child and return once it is published: for a local child,
    /// once its catalog entry is written and its initial prompt accepted;
    /// for an external one, once its run has started.
    ///
    /// # Errors
    /// Every check fails before any provider code runs; a failure or
    /// cancellation before publication leaves nothing behind.
    pub async fn start_activation(
        &self,
        spec: ActivationSpec,
    ) -> Result<SubagentActivation, SubagentError> {
        let provider = self
            .get(&spec.provider)
            .ok_or_else(|| SubagentError::NoProvider(spec.provider.clone()))?;
        check_capabilities(provider.as_ref(), &spec.request)?;
        let parent = spec.request.parent.clone();
        let parent_ref = parent.reference();
        if !self.registry().is_live(&parent_ref) {
            return Err(SubagentError::NotLive(parent_ref.id));
        }
        let root = self.root_of(parent.id());
        self.check_admission(&root)?;
        let _starting = StartingGuard::new(self, &root);
        let depth = parent.header().delegation_depth + 1;
        if let Some(max) = spec.request.max_depth
            && depth > max
        {
            return Err(SubagentError::DepthLimit { depth, max });
        }
        let cwd = resolve_cwd(&parent.cwd(), spec.request.cwd.as_deref())?;
        let slot = self.reserve_capacity(&root)?;
        let reservation = self.reserve_name(&parent, spec.name.as_deref())?;
        if spec.cancel.is_cancelled() {
            return Err(SubagentError::Cancelled);
        }
        if provider.continuable().is_some() {
            self.start_local(provider, spec, cwd, depth, root, slot, reservation)
                .await
        } else {
            self.start_external(provider, spec, cwd, root, slot, reservation)
                .await
        }
    }

    /// Reserve a child name under a live parent: the requested one or the
    /// first free `agent-N`, checked against the parent's catalog, which is
    /// folded incrementally (only events no earlier start has seen).
    fn reserve_name(
        &self,
        parent: &Arc<dyn Agent>,
        requested: Option<&str>,
    ) -> Result<NameReservation, SubagentError> {
        if let Some(name) = requested {
            validate_name(name)?;
        }
        self.with_live_catalog(parent, |fold| match requested {
            Some(name) => self.inner.names.reserve(parent.id(), name, fold.names()),
            None => Ok(self.inner.names.reserve_default(parent.id(), fold.names())),
        })?
    }

    /// Run `f` on a live agent's catalog, folded incrementally: only the
    /// events no earlier call has seen are copied and folded.
    pub(crate) fn with_live_catalog<R>(
        &self,
        agent: &Arc<dyn Agent>,
        f: impl FnOnce(&CatalogFold) -> R,
    ) -> Result<R, SubagentError> {
        let reference = agent.reference();
        let mut fold = lock(&self.inner.catalogs)
            .remove(&reference)
            .unwrap_or_default();
        let fresh = agent.events_since(fold.next_seq());
        fold.apply(agent.header(), &fresh)?;
        let result = f(&fold);
        let mut catalogs = lock(&self.inner.catalogs);
        // Forget agents that are no longer live, now and then, so the
        // cache stays small without a sweep on every call.
        if catalogs.len() >= CATALOG_SWEEP {
            let registry = self.registry();
            catalogs.retain(|key, _| registry.is_live(key));
        }
        catalogs.insert(reference, fold);
        Ok(result)
    }

    pub(crate) fn reserve_capacity(&self, root: &SessionId) -> Result<CapacitySlot, SubagentError> {
        let mut counts = lock(&self.inner.live);
        let count = counts.entry(root.clone()).or_insert(0);
        if *count >= self.inner.config.max_live_children_per_tree {
            return Err(SubagentError::Capacity(
                self.inner.config.max_live_children_per_tree,
            ));
        }
        *count += 1;
        Ok(CapacitySlot {
            counts: self.inner.live.clone(),
            root: root.clone(),
        })
    }

    fn full_name(&self, parent: &SessionId, name: &str) -> Option<String> {
        match lock(&self.inner.activations).get(parent) {
            None => Some(name.to_owned()),
            Some(parent) => parent.path.as_ref().map(|path| format!("{path}/{name}")),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_local(
        &self,
        provider: Arc<dyn SubagentProvider>,
        spec: ActivationSpec,
        cwd: PathBuf,
        depth: u32,
        root: SessionId,
        slot: CapacitySlot,
        reservation: NameReservation,
    ) -> Result<SubagentActivation, SubagentError> {
        let ActivationSpec {
            label,
            child_id,
            cancel,
            delivery,
            request,
            ..
        } = spec;
        let parent = request.parent.clone();
        let child_id = child_id.unwrap_or_else(SessionId::generate);
        if self.registry().get(&child_id).is_some() || lock(&self.inner.run_ids).contains(&child_id)
        {
            return Err(SubagentError::DuplicateRunId {
                provider: provider.name().to_owned(),
                id: child_id,
            });
        }
        let Some(continuable) = provider.continuable() else {
            return Err(SubagentError::NoProvider(provider.name().to_owned()));
        };
        let prepared = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(SubagentError::Cancelled),
            prepared = continuable.prepare(ContinuableCreateRequest {
                cwd: cwd.clone(),
                session_id: child_id.clone(),
                parent: parent.clone(),
                cancel: cancel.clone(),
            }) => prepared?,
        };

        let capture = request.output_schema.clone().map(CaptureTool::new);
        let mut setup = AgentSetup::default();
        if let Some(capture) = &capture {
            setup.tools.push(capture.clone());
        }
        let header = child_header(&provider, &request, &child_id, &cwd, depth);
        let created = tokio::select! {
            biased;
            () = cancel.cancelled() => Err(SubagentError::Cancelled),
            created = self.inner.factory.create(CreateAgent {
                header,
                seed: prepared.seed,
                setup,
                cancel: cancel.clone(),
            }) => created.map_err(|err| match err {
                dsh_core::AgentError::Composition(message) => SubagentError::InvalidRequest(message),
                other => SubagentError::from(other),
            }),
        };
        let handle = match created {
            Ok(handle) => handle,
            Err(err) => {
                // A create dropped mid-way may have written the log.
                self.discard(&child_id, None).await;
                return Err(err);
            }
        };
        if cancel.is_cancelled() {
            self.discard(&child_id, Some(&handle)).await;
            return Err(SubagentError::Cancelled);
        }

        // Publication. No cancellation point from here on.
        let name = reservation.name().to_owned();
        let entry = CatalogEntry {
            child_id: child_id.clone(),
            name: Some(name.clone()),
            label,
            provider: provider.name().to_owned(),
            mode: ChildMode::CONTINUABLE,
        };
        if let Err(err) = parent.record(CATALOG_EVENT, catalog_payload(&entry)).await {
            self.discard(&child_id, Some(&handle)).await;
            return Err(err.into());
        }
        reservation.commit();
        let path = self.full_name(parent.id(), &name);
        let child = handle.agent().clone();
        let start_seq = child.events().len() as u64;
        let info = RunInfo {
            provider: provider.name().to_owned(),
            child_id: child_id.clone(),
            parent_session_id: parent.id().clone(),
            local: true,
        };
        let activation = self.install(Activation::new(
            info.clone(),
            path,
            parent.reference(),
            root,
            delivery,
            Execution::Local {
                handle,
                start_seq,
                capture,
            },
            slot,
        ));
        self.inner.events.emit(&SubagentEvent::Start(info));
        let prompt = UserMessage::new(
            request.prompt,
            MessageSource::AgentMessage {
                sender_session_id: parent.id().clone(),
            },
        );
        let message_id = match child.followup(prompt).await {
            Ok(id) => Some(id),
            Err(err) => {
                tracing::error!(child = %child_id, "the initial prompt was not accepted: {err}");
                None
            }
        };
        self.spawn_monitor(activation.clone());
        Ok(self.receipt(&activation, message_id))
    }

    async fn start_external(
        &self,
        provider: Arc<dyn SubagentProvider>,
        spec: ActivationSpec,
        cwd: PathBuf,
        root: SessionId,
        slot: CapacitySlot,
        reservation: NameReservation,
    ) -> Result<SubagentActivation, SubagentError> {
        let Some(external) = provider.external() else {
            return Err(SubagentError::NoProvider(provider.name().to_owned()));
        };
        let request = spec.request;
        let parent = request.parent.clone();
        let resolved = ResolvedStartRequest {
            cwd,
            prompt: request.prompt,
            parent: parent.clone(),
            agent_options: request.agent_options,
            output_schema: request.output_schema,
            max_depth: request.max_depth,
            tool_filter: request.tool_filter,
            persona: request.persona,
            cancel: spec.cancel.clone(),
        };
        let run = tokio::select! {
            biased;
            () = spec.cancel.cancelled() => return Err(SubagentError::Cancelled),
            run = external.start(resolved) => run?,
        };
        let child_id = run.id().clone();
        let collides = self.registry().get(&child_id).is_some()
            || !lock(&self.inner.run_ids).insert(child_id.clone());
        if collides {
            if let Err(err) = run.dispose().await {
                tracing::warn!(run = %child_id, "disposing a colliding run failed: {err}");
            }
            return Err(SubagentError::DuplicateRunId {
                provider: provider.name().to_owned(),
                id: child_id,
            });
        }
        let name = reservation.name().to_owned();
        if spec.delivery == Delivery::Parent {
            let entry = CatalogEntry {
                child_id: child_id.clone(),
                name: Some(name.clone()),
                label: spec.label,
                provider: provider.name().to_owned(),
                mode: ChildMode::EXTERNAL,
            };
            if let Err(err) = parent.record(CATALOG_EVENT, catalog_payload(&entry)).await {
                let _ = run.dispose().await;
                return Err(err.into());
            }
            reservation.commit();
        }
        let path = match spec.delivery {
            Delivery::Parent => self.full_name(parent.id(), &name),
            Delivery::Caller => None,
        };
        let info = RunInfo {
            provider: provider.name().to_owned(),
            child_id: child_id.clone(),
            parent_session_id: parent.id().clone(),
            local: false,
        };
        let activation = self.install(Activation::new(
            info.clone(),
            path,
            parent.reference(),
            root,
            spec.delivery,
            Execution::External { run },
            slot,
        ));
        self.inner.events.emit(&SubagentEvent::Start(info));
        self.spawn_monitor(activation.clone());
        Ok(self.receipt(&activation, None))
    }

    /// Make a resumed child a live activation (the monitor settles it like
    /// any other) and return it.
    pub(crate) fn adopt_resumed(
        &self,
        handle: AgentHandle,
        provider: String,
        parent: AgentRef,
        root: SessionId,
        name: String,
        slot: CapacitySlot,
    ) -> Arc<Activation> {
        let child_id = handle.agent().id().clone();
        let start_seq = handle.agent().events().len() as u64;
        let info = RunInfo {
            provider,
            child_id: child_id.clone(),
            parent_session_id: parent.id.clone(),
            local: true,
        };
        let path = (name != child_id.as_str()).then(|| name.clone());
        let activation = self.install(Activation::new(
            info.clone(),
            path,
            parent,
            root,
            Delivery::Parent,
            Execution::Local {
                handle,
                start_seq,
                capture: None,
            },
            slot,
        ));
        self.inner.events.emit(&SubagentEvent::Start(info));
        self.spawn_monitor(activation.clone());
        activation
    }

    fn install(&self, activation: Activation) -> Arc<Activation> {
        let activation = Arc::new(activation);
        lock(&self.inner.run_ids).insert(activation.child_id.clone());
        let mut activations = lock(&self.inner.activations);
        if let Some(owner) = activations.get(&activation.parent.id) {
            owner.owned().insert(activation.child_id.clone());
        }
        activations.insert(activation.child_id.clone(), activation.clone());
        activation
    }

    fn receipt(
        &self,
        activation: &Arc<Activation>,
        message_id: Option<MessageId>,
    ) -> SubagentActivation {
        SubagentActivation {
            child_id: activation.child_id.clone(),
            name: activation.name.clone(),
            message_id,
            runtime: self.clone(),
            settled: activation.settled.subscribe(),
            disposed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Undo an unpublished local child: dispose it and delete its log.
    async fn discard(&self, child: &SessionId, handle: Option<&AgentHandle>) {
        if let Some(handle) = handle {
            handle.dispose().await;
        }
        match self.inner.store.remove(child).await {
            Ok(()) | Err(dsh_core::StoreError::NotFound(_)) => {}
            Err(err) => {
                tracing::error!(child = %child, "could not remove an unpublished child: {err}")
            }
        }
    }

    fn stop_activation(&self, child: &SessionId) {
        if let Some(activation) = lock(&self.inner.activations).get(child) {
            activation.stop.cancel();
        }
    }

    /// How the teardown of `child`'s last activation went (`Ok` while none failed).
    pub(crate) fn teardown_of(&self, child: &SessionId) -> Result<(), SubagentError> {
        lock(&self.inner.teardowns)
            .get(child)
            .cloned()
            .unwrap_or(Ok(()))
    }

    fn spawn_monitor(&self, activation: Arc<Activation>) {
        let runtime = self.clone();
        self.inner.tasks.spawn(async move {
            runtime.monitor(activation).await;
        });
    }

    /// Watch one activation until it ends, then notify, tear down and settle.
    async fn monitor(&self, activation: Arc<Activation>) {
        // An external run stopped early is disposed once, here; its outcome
        // is the teardown's.
        let mut early_teardown = None;
        let result = match &activation.execution {
            Execution::Local {
                handle,
                start_seq,
                capture,
            } => {
                let stopped = self.await_quiescence(&activation, handle.agent()).await;
                if stopped {
                    self.stop_tree(&activation, handle.agent()).await;
                }
                Ok(local_result(
                    handle.agent().as_ref(),
                    *start_seq,
                    capture.as_deref(),
                    stopped,
                ))
            }
            Execution::External { run } => {
                let result = tokio::select! {
                    result = run.result() => result,
                    () = activation.stop.cancelled() => {
                        early_teardown = Some(run.dispose().await);
                        run.result().await
                    }
                };
                // Whatever the provider wrote, the bound holds.
                result.map(|mut result| {
                    result.diagnostic = result.diagnostic.take().map(bound_diagnostic);
                    result
                })
            }
        };
        if let Ok(result) = &result {
            self.notify_parent(&activation, result).await;
        }
        let teardown = match (&activation.execution, early_teardown) {
            (Execution::Local { handle, .. }, _) => {
                handle.dispose().await;
                Ok(())
            }
            (Execution::External { .. }, Some(outcome)) => outcome,
            (Execution::External { run }, None) => run.dispose().await,
        };
        self.retire(&activation, teardown.clone());
        let outcome = match (&result, &teardown) {
            (Ok(result), Ok(())) => RunOutcome::Settled(result.stop_reason.clone()),
            (Err(err), _) | (_, Err(err)) => RunOutcome::Error(err.to_string()),
        };
        activation.settled.send_replace(Some(result));
        self.inner
            .events
            .emit(&SubagentEvent::End(activation.info.clone(), outcome));
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
            let owned: Vec<SessionId> = activation.owned().iter().cloned().collect();
            if owned.is_empty() {
                break;
            }
            for id in &owned {
                self.stop_activation(id);
            }
            changed.await;
        }
        child.cancel(CancelCause::Disposed, CancelOptions { keep_inbox: true });
        child.wait_idle().await;
    }

    /// Refuse new work below a draining root (while that exact root is live).
    pub(crate) fn check_admission(&self, root: &SessionId) -> Result<(), SubagentError> {
        let mut draining = lock(&self.inner.draining);
        let registry = self.registry();
        draining.retain(|reference| registry.is_live(reference));
        if draining.iter().any(|reference| &reference.id == root) {
            return Err(SubagentError::Draining);
        }
        Ok(())
    }

    /// Mark a live activation interrupted: it stays resident while idle.
    pub(crate) fn park(&self, child: &SessionId) {
        if let Some(activation) = lock(&self.inner.activations).get(child) {
            activation.parked.store(true, Ordering::SeqCst);
        }
    }

    /// Whether `agent` is a child being stopped, or a root whose tree is
    /// draining (its notices must not wake it).
    fn is_stopping(&self, agent: &SessionId) -> bool {
        lock(&self.inner.activations)
            .get(agent)
            .is_some_and(|activation| activation.stop.is_cancelled())
            || lock(&self.inner.draining)
                .iter()
                .any(|reference| &reference.id == agent)
    }

    /// The B28 notice: to a still-live direct creator, for parent delivery.
    async fn notify_parent(&self, activation: &Activation, result: &SubagentResult) {
        if activation.delivery != Delivery::Parent {
            return;
        }
        let Some(parent) = self.registry().resolve(&activation.parent) else {
            return;
        };
        let summary = summary_line(&activation.name, result);
        let message = UserMessage::new(
            render_notice(&summary, result),
            MessageSource::SubagentSettled {
                summary,
                stop_reason: Some(result.stop_reason.clone()),
                sender_session_id: activation.child_id.clone(),
            },
        );
        let sent = if self.is_stopping(parent.id()) {
            parent.inject(message).await
        } else {
            match parent.status() {
                AgentStatus::Idle => parent.followup(message).await,
                AgentStatus::Running => parent.steer(message).await,
            }
        };
        if let Err(err) = sent {
            tracing::warn!(child = %activation.child_id, "the settlement notice was not delivered: {err}");
        }
    }

    fn retire(&self, activation: &Activation, teardown: Result<(), SubagentError>) {
        drop(lock(&activation.slot).take());
        lock(&self.inner.teardowns).insert(activation.child_id.clone(), teardown);
        let owner = {
            let mut activations = lock(&self.inner.activations);
            activations.remove(&activation.child_id);
            activations.get(&activation.parent.id).cloned()
        };
        if let Some(owner) = owner {
            owner.owned().remove(&activation.child_id);
            owner.owned_changed.notify_waiters();
        }
    }

    /// Wait for every activation and monitor to finish (after disposing them
    /// all when `stop` is set).
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Activation>> = lock(&self.inner.activations).values().cloned().collect();
        for activation in all {
            activation.stop.cancel();
        }
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        self.inner.tasks.reopen();
    }
}

fn check_capabilities(
    provider: &dyn SubagentProvider,
    request: &StartRequest,
) -> Result<(), SubagentError> {
    let caps = provider.capabilities();
    let needs: [(bool, bool, &'static str); 6] = [
        (
            request.agent_options.is_some(),
            caps.agent_options,
            "agent_options",
        ),
        (
            request.agent_preset.is_some(),
            caps.agent_preset,
            "agent_preset",
        ),
        (
            request.output_schema.is_some(),
            caps.output_schema,
            "output_schema",
        ),
        (request.max_depth.is_some(), caps.depth_limit, "depth_limit"),
        (
            request.tool_filter.is_some(),
            caps.tool_filter,
            "tool_filter",
        ),
        (request.persona.is_some(), caps.persona, "persona"),
    ];
    for (requested, supported, capability) in needs {
        if requested && !supported {
            return Err(SubagentError::UnsupportedCapability {
                provider: provider.name().to_owned(),
                capability,
            });
        }
    }
    if request.agent_preset.is_some() && provider.inherits_parent_context() {
        return Err(SubagentError::UnsupportedCapability {
            provider: provider.name().to_owned(),
            capability: "agent_preset (the child inherits the parent's context and composition)",
        });
    }
    if let Some(persona) = &request.persona
        && persona.trim().is_empty()
    {
        return Err(SubagentError::InvalidRequest("the persona is empty".into()));
    }
    Ok(())
}

/// Resolve the child's directory: relative to the parent's, and an existing directory.
fn resolve_cwd(parent: &Path, requested: Option<&Path>) -> Result<PathBuf, SubagentError> {
    let cwd = match requested {
        None => parent.to_path_buf(),
        Some(path) if path.is_absolute() => path.to_path_buf(),
        Some(path) => parent.join(path),
    };
    if !cwd.is_absolute() {
        return Err(SubagentError::InvalidRequest(format!(
            "the working directory `{}` is not absolute",
            cwd.display()
        )));
    }
    match std::fs::metadata(&cwd) {
        Ok(meta) if meta.is_dir() => Ok(cwd),
        _ => Err(SubagentError::InvalidRequest(format!(
            "the working directory `{}` is not an existing directory",
            cwd.display()
        ))),
    }
}

/// The child's header: lineage, depth, directory and composition.
fn child_header(
    provider: &Arc<dyn SubagentProvider>,
    request: &StartRequest,
    child_id: &SessionId,
    cwd: &Path,
    depth: u32,
) -> SessionHeader {
    let parent = &request.parent;
    let parent_composition = parent.composition();
    let independent = request.agent_preset.is_some();
    let route = provider
        .agent_route_defaults()
        .map(|route| AgentOptions {
            provider: Some(route.provider),
            model: Some(route.model),
            ..AgentOptions::default()
        })
        .unwrap_or_default();
    let base = if independent {
        AgentOptions::default()
    } else {
        parent_composition.options.clone()
    };
    let options = request
        .agent_options
        .clone()
        .unwrap_or_default()
        .merged_over(&route)
        .merged_over(&base);
    let composition = if independent {
        Composition {
            preset: request.agent_preset.clone(),
            persona: request.persona.clone(),
            tools: request.tool_filter.clone(),
            options,
        }
    } else {
        Composition {
            preset: parent_composition.preset.clone(),
            persona: request
                .persona
                .clone()
                .or_else(|| parent_composition.persona.clone()),
            tools: request
                .tool_filter
                .clone()
                .or_else(|| parent_composition.tools.clone()),
            options,
        }
    };
    let mut header = SessionHeader::new(child_id.clone(), cwd);
    header.parent_session = Some(parent.id().clone());
    header.origin = parent
        .header()
        .origin
        .clone()
        .or_else(|| Some(parent.header().cwd.display().to_string()));
    header.delegation_depth = depth.max(parent.header().delegation_depth + 1);
    header.composition = composition;
    header
}

/// The result of a local activation from the child's own events.
fn local_result(
    child: &dyn Agent,
    start_seq: u64,
    capture: Option<&CaptureTool>,
    stopped: bool,
) -> SubagentResult {
    let events = child.events();
    let from = usize::try_from(start_seq)
        .unwrap_or(usize::MAX)
        .min(events.len());
    let own = &events[from..];
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
    let mut result = SubagentResult {
        output: final_output(own),
        structured,
        diagnostic: None,
        stop_reason,
    };
    if !result.stop_reason.is_completed()
        && let Some(diagnostic) = diagnostic
    {
        result = result.with_diagnostic(diagnostic);
    }
    result
}

/// The text of a settlement notice: the summary, then what the child produced.
fn render_notice(summary: &str, result: &SubagentResult) -> Vec<ContentBlock> {
    let mut text = format!("[{summary}; stop reason: {}]", result.stop_reason);
    let output = dsh_core::content::joined_text(&result.output);
    if !output.is_empty() {
        text.push_str("\n\n");
        text.push_str(&output);
    }
    if let Some(structured) = &result.structured {
        text.push_str("\n\nStructured result: ");
        text.push_str(&structured.to_string());
    }
    if let Some(diagnostic) = &result.diagnostic {
        text.push_str("\n\nDiagnostic: ");
        text.push_str(diagnostic);
    }
    vec![ContentBlock::text(text)]
}
