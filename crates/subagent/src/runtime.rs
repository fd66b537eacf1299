//! The runtime's façade: the provider registry, runtime limits and the
//! components the concerns share, each owning its state behind methods
//! (the live activations, admissions and capacity, the catalog cache and
//! name reservations, resume gates, in-flight run ids, requests and
//! notices, cold facts, the progress bus). `Inner`'s fields are private to
//! this file; other modules reach a component through its accessor. Each
//! concern lives in its own module: admission (every check of a start,
//! capacity, the ticket drains count), start (creation and publication),
//! activation (identity, monitor, settlement), input (the gate between the
//! monitor and senders), notice (settlement notices), recovery (crash
//! debris), names, catalog, resume, compose (a child's header), messaging,
//! drain and tree. The runtime never reaches into a child's loop except
//! through the core traits.

use crate::{AdmissionError, RegistryError};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dsh_core::observe::{EventBus, Subscription};
use dsh_core::{AgentFactory, AgentRegistry, MessageId, SessionId, SessionStore};
use tokio::sync::broadcast;
use tokio_util::task::TaskTracker;

use crate::activation::Activations;
use crate::admission::{Admissions, Capacity, CapacitySlot, Publications};
use crate::catalog::CatalogCache;
use crate::error::SubagentError;
use crate::events::SubagentEvent;
use crate::ids::InFlight;
use crate::provider::{ProviderDescriptor, SubagentProvider};
use crate::request::{DEFAULT_MAX_DEPTH, MaxDepth};

/// The most events a [`SubagentRuntime::subscribe_tree`] stream holds for a
/// receiver that has not read them; older ones are dropped past it.
pub const TREE_EVENTS_BUFFER: usize = 1024;

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

pub(crate) struct Inner {
    factory: Arc<dyn AgentFactory>,
    store: Arc<dyn SessionStore>,
    config: RuntimeConfig,
    providers: Mutex<Vec<Arc<dyn SubagentProvider>>>,
    events: EventBus<SubagentEvent>,
    activations: Activations,
    /// Ids of the live external runs this runtime started (B11): each is
    /// held by its activation, from the provider's start to its drop.
    run_ids: InFlight<SessionId>,
    /// User request ids being delivered, per child.
    requests: InFlight<(SessionId, MessageId)>,
    /// Lost notices being delivered, per creator.
    notices: InFlight<(SessionId, MessageId)>,
    /// One lock per child being resumed, so concurrent resumes coalesce.
    resuming: crate::resume::ResumeGates,
    /// Draining roots and the starts and resumes in flight.
    admissions: Arc<Admissions>,
    /// Catalog order per parent: the order starts were made in.
    publications: Arc<Publications>,
    /// Catalog folds of live parents and the names reserved under them.
    catalogs: CatalogCache,
    /// Immutable facts read from cold logs (`crate::cold`).
    cold: crate::cold::ColdFacts,
    capacity: Capacity,
    tasks: TaskTracker,
    /// The progress bus (`crate::progress`).
    progress: crate::progress::ProgressHub,
    /// The user's depth setting, which a tool without its own limit gets.
    max_depth: AtomicU32,
    /// The host's attachment store, which admits a prompt's attachments.
    attachments: Mutex<Option<Arc<dyn dsh_core::AttachmentStore>>>,
    /// Trees whose notices wake no one (`crate::notice::QuietTree`).
    quiet: crate::notice::QuietTrees,
}

impl Inner {
    /// Remove the provider `matches` picks and tell listeners.
    fn remove_provider(&self, matches: impl Fn(&Arc<dyn SubagentProvider>) -> bool) -> bool {
        let removed = {
            let mut providers = lock(&self.providers);
            let position = providers.iter().position(matches);
            position.map(|at| providers.remove(at))
        };
        match removed {
            Some(provider) => {
                self.events
                    .emit(&SubagentEvent::ProviderRemoved(provider.name().to_owned()));
                true
            }
            None => false,
        }
    }
}

/// One provider's registration, returned by
/// [`SubagentRuntime::register_provider`]: the seed's disposer.
///
/// [`ProviderRegistration::remove`] or a drop unregisters the provider it
/// registered, and only that one: once it is gone and another provider is
/// registered under the same name, this registration removes nothing.
/// Activations already handed out are untouched either way.
/// [`ProviderRegistration::keep`] gives the registration up, leaving the
/// provider for the runtime's life.
#[must_use = "dropping the registration removes the provider at once"]
pub struct ProviderRegistration {
    runtime: std::sync::Weak<Inner>,
    provider: Arc<dyn SubagentProvider>,
    done: bool,
}

impl std::fmt::Debug for ProviderRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderRegistration")
            .field("provider", &self.provider.name())
            .field("done", &self.done)
            .finish()
    }
}

impl ProviderRegistration {
    /// The registered provider's name.
    pub fn name(&self) -> &str {
        self.provider.name()
    }

    /// Unregister the provider (`subagent/provider-removed`). Returns
    /// whether it was still registered.
    pub fn remove(mut self) -> bool {
        self.remove_once()
    }

    /// Keep the provider registered for the runtime's life; only
    /// [`SubagentRuntime::remove`] removes it then.
    pub fn keep(mut self) {
        self.done = true;
    }

    fn remove_once(&mut self) -> bool {
        if std::mem::replace(&mut self.done, true) {
            return false;
        }
        let Some(runtime) = self.runtime.upgrade() else {
            return false;
        };
        let ours = Arc::as_ptr(&self.provider).cast::<()>();
        runtime.remove_provider(|p| std::ptr::eq(Arc::as_ptr(p).cast::<()>(), ours))
    }
}

impl Drop for ProviderRegistration {
    fn drop(&mut self) {
        self.remove_once();
    }
}

/// The subagent runtime. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct SubagentRuntime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SubagentRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentRuntime")
            .field("providers", &self.list())
            .field("live", &self.inner.activations.len())
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
                activations: Activations::default(),
                run_ids: InFlight::default(),
                requests: InFlight::default(),
                notices: InFlight::default(),
                resuming: crate::resume::ResumeGates::default(),
                admissions: Arc::default(),
                publications: Arc::default(),
                catalogs: CatalogCache::default(),
                cold: crate::cold::ColdFacts::default(),
                capacity: Capacity::default(),
                tasks: TaskTracker::new(),
                progress: crate::progress::ProgressHub::default(),
                max_depth: AtomicU32::new(DEFAULT_MAX_DEPTH),
                attachments: Mutex::new(None),
                quiet: crate::notice::QuietTrees::default(),
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

    /// Listen to the `subagent/start` and `subagent/end` events of the
    /// tree rooted at `root` only (seed 002: lifecycle listeners scoped by
    /// tree). The listener runs on the bus, isolated like any other.
    pub fn listen_tree(
        &self,
        root: &SessionId,
        listener: impl Fn(&SubagentEvent) + Send + Sync + 'static,
    ) -> Subscription {
        let root = root.clone();
        self.inner.events.listen(move |event: &SubagentEvent| {
            if event.root() == Some(&root) {
                listener(event);
            }
        })
    }

    /// [`SubagentRuntime::listen_tree`] as a stream: the tree's start and
    /// end events, in emission order, until the subscription is dropped.
    ///
    /// The stream is bounded: it holds at most [`TREE_EVENTS_BUFFER`]
    /// events not yet received. A receiver that falls further behind loses
    /// the oldest ones and learns how many from its next `recv`
    /// (`RecvError::Lagged(n)`), then reads on from the oldest kept; the
    /// runtime never waits for it and never holds more for it.
    pub fn subscribe_tree(
        &self,
        root: &SessionId,
    ) -> (Subscription, broadcast::Receiver<SubagentEvent>) {
        let (tx, rx) = broadcast::channel(TREE_EVENTS_BUFFER);
        let subscription = self.listen_tree(root, move |event| {
            // No receiver left: nothing to keep.
            let _ = tx.send(event.clone());
        });
        (subscription, rx)
    }

    /// The tracker of the runtime's own tasks (one monitor per activation).
    pub fn tasks(&self) -> &TaskTracker {
        &self.inner.tasks
    }

    /// Register a provider under its name for the runtime's life (until
    /// [`SubagentRuntime::remove`]): [`SubagentRuntime::register_provider`]
    /// with the registration kept.
    ///
    /// # Errors
    /// As [`SubagentRuntime::register_provider`].
    pub fn register(&self, provider: Arc<dyn SubagentProvider>) -> Result<(), SubagentError> {
        self.register_provider(provider)
            .map(ProviderRegistration::keep)
    }

    /// Register a provider under its name and return the seed's disposer:
    /// the [`ProviderRegistration`], whose [`remove`](ProviderRegistration::remove)
    /// or drop unregisters exactly this provider (not a later one under the
    /// same name).
    ///
    /// # Errors
    /// `DUPLICATE_PROVIDER` (the first stays), or `UNSUPPORTED_CAPABILITY`
    /// for a provider with no execution path, or with a default route but no
    /// `agent_options` support.
    pub fn register_provider(
        &self,
        provider: Arc<dyn SubagentProvider>,
    ) -> Result<ProviderRegistration, SubagentError> {
        let name = provider.name().to_owned();
        if provider.continuable().is_none() && provider.external().is_none() {
            return Err(SubagentError::Admission(
                AdmissionError::UnsupportedCapability {
                    provider: name,
                    capability: "an execution path (continuable creation or start)",
                },
            ));
        }
        if provider.agent_route_defaults().is_some() && !provider.capabilities().agent_options {
            return Err(SubagentError::Admission(
                AdmissionError::UnsupportedCapability {
                    provider: name,
                    capability: "agent_options, which a default model route requires",
                },
            ));
        }
        {
            let mut providers = lock(&self.inner.providers);
            if providers.iter().any(|p| p.name() == name) {
                return Err(SubagentError::Registry(RegistryError::DuplicateProvider(
                    name,
                )));
            }
            providers.push(provider.clone());
        }
        self.inner
            .events
            .emit(&SubagentEvent::ProviderAdded(ProviderDescriptor::of(
                provider.as_ref(),
            )));
        Ok(ProviderRegistration {
            runtime: Arc::downgrade(&self.inner),
            provider,
            done: false,
        })
    }

    /// Remove a provider: new starts fail with `NO_PROVIDER`; activations
    /// already handed out are untouched. Returns whether it was registered.
    pub fn remove(&self, name: &str) -> bool {
        self.inner.remove_provider(|p| p.name() == name)
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

    /// The user's current depth setting ([`DEFAULT_MAX_DEPTH`] until set).
    pub fn max_depth(&self) -> u32 {
        self.inner.max_depth.load(Ordering::SeqCst)
    }

    /// Change the user's depth setting. Takes effect for the next
    /// [`SubagentRuntime::resolve_max_depth`]; starts already admitted
    /// keep the cap they were admitted under.
    pub fn set_max_depth(&self, max_depth: u32) {
        self.inner.max_depth.store(max_depth, Ordering::SeqCst);
    }

    /// Resolve a delegation tool's depth policy against the current user
    /// setting: an explicit [`MaxDepth::Limit`] is kept as it is, omitted
    /// takes [`SubagentRuntime::max_depth`], and
    /// [`MaxDepth::ProviderManaged`] gives `None` (the provider enforces
    /// depth). The result goes in [`StartRequest::max_depth`](crate::StartRequest::max_depth).
    pub fn resolve_max_depth(&self, configured: Option<MaxDepth>) -> Option<u32> {
        match configured {
            None => Some(self.max_depth()),
            Some(MaxDepth::Limit(limit)) => Some(limit),
            Some(MaxDepth::ProviderManaged) => None,
        }
    }

    /// How many activations are live.
    pub fn live_activations(&self) -> usize {
        self.inner.activations.len()
    }

    /// The root session of the tree `agent` (a session id) belongs to, by
    /// the live activations: a session with none is taken as a root.
    pub(crate) fn root_id(&self, agent: &SessionId) -> SessionId {
        match self.inner.activations.get(agent) {
            Some(activation) => activation.root().clone(),
            None => agent.clone(),
        }
    }

    pub(crate) fn reserve_capacity(&self, root: &SessionId) -> Result<CapacitySlot, SubagentError> {
        self.inner
            .capacity
            .reserve(root, self.inner.config.max_live_children_per_tree)
    }

    /// Refuse new work below a draining root (while that exact root is live).
    pub(crate) fn check_admission(&self, root: &SessionId) -> Result<(), SubagentError> {
        self.inner.admissions.check(self.registry(), root)
    }

    /// Mark a live activation interrupted: it stays resident while idle.
    pub(crate) fn park(&self, child: &SessionId) {
        if let Some(activation) = self.inner.activations.get(child) {
            activation.park();
        }
    }

    /// Stop every activation and wait for every task of the runtime (starts,
    /// resumes and monitors) to finish.
    ///
    /// # Cancel safety
    /// The stops are requested before the first await; dropping the future
    /// only stops the waiting.
    pub async fn shutdown(&self) {
        for activation in self.inner.activations.all() {
            activation.stop().cancel();
        }
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        self.inner.tasks.reopen();
    }
}

/// The components of the runtime, for the modules that implement its
/// façade. Each owns its state; none hands out a lock or a raw map.
impl SubagentRuntime {
    /// The factory local children are created and resumed through.
    pub(crate) fn factory(&self) -> &Arc<dyn AgentFactory> {
        &self.inner.factory
    }

    /// The store cold logs are read from (the factory's).
    pub(crate) fn store(&self) -> &Arc<dyn SessionStore> {
        &self.inner.store
    }

    /// The live activations.
    pub(crate) fn activations(&self) -> &Activations {
        &self.inner.activations
    }

    /// Draining roots and the starts and resumes in flight.
    pub(crate) fn admissions(&self) -> &Arc<Admissions> {
        &self.inner.admissions
    }

    /// The catalog order of starts per parent.
    pub(crate) fn publications(&self) -> &Arc<Publications> {
        &self.inner.publications
    }

    /// Catalog folds of live parents and the names reserved under them.
    pub(crate) fn catalogs(&self) -> &CatalogCache {
        &self.inner.catalogs
    }

    /// Immutable facts read from cold logs.
    pub(crate) fn cold(&self) -> &crate::cold::ColdFacts {
        &self.inner.cold
    }

    /// The progress bus.
    pub(crate) fn progress_hub(&self) -> &crate::progress::ProgressHub {
        &self.inner.progress
    }

    /// Trees whose notices wake no one.
    pub(crate) fn quiet_trees(&self) -> &crate::notice::QuietTrees {
        &self.inner.quiet
    }

    /// The ids of the live external runs this runtime started.
    pub(crate) fn run_ids(&self) -> &InFlight<SessionId> {
        &self.inner.run_ids
    }

    /// User request ids being delivered, per child.
    pub(crate) fn requests(&self) -> &InFlight<(SessionId, MessageId)> {
        &self.inner.requests
    }

    /// Lost notices being delivered, per creator.
    pub(crate) fn notices(&self) -> &InFlight<(SessionId, MessageId)> {
        &self.inner.notices
    }

    /// The resume gate of each child being resumed.
    pub(crate) fn resume_gates(&self) -> &crate::resume::ResumeGates {
        &self.inner.resuming
    }

    /// The host's attachment store, if one was set.
    pub(crate) fn attachment_store(&self) -> Option<Arc<dyn dsh_core::AttachmentStore>> {
        lock(&self.inner.attachments).clone()
    }

    /// Admit prompts' attachments through `store` from now on (the host's
    /// `ctx.attachments`). Without one, a prompt with an image part or an
    /// uploaded attachment is refused with `ATTACHMENT_STORE_FAILED`.
    pub fn set_attachment_store(&self, store: Arc<dyn dsh_core::AttachmentStore>) {
        *lock(&self.inner.attachments) = Some(store);
    }
}
