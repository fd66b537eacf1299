//! The harness: the reference [`AgentFactory`]. It owns what every agent of a
//! host shares (the session store, the live-agent registry, the model routes,
//! the host tools, the presets, the system prompt and the task tracker every
//! driver runs on) and composes each agent from it. Creation is a
//! transaction: nothing is left behind when it fails or is cancelled before
//! publication.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use async_trait::async_trait;
use dsh_core::projection::{PendingItem, PendingItemsFold};
use dsh_core::session::completed_turn_prefix;
use dsh_core::{
    AgentError, AgentFactory, AgentHandle, AgentOptions, AgentRegistry, AgentSetup, Clock,
    Composition, CreateAgent, EventPayload, IdSource, Model, PresetCatalog, RandomIds, ResumeAgent,
    SessionEvent, SessionHeader, SessionStore, SystemClock, Tool,
};
use tokio_util::task::TaskTracker;

use crate::agent::{LoopAgent, Restored};
use crate::prompt::SystemPrompt;
use crate::tools::{ScopedTools, ToolRegistry, ToolRegistryError};
use crate::turn::{close_interrupted_turn, open_turn};

/// The models a host can route to, by provider name.
#[derive(Clone, Default)]
pub struct ModelRoutes {
    routes: BTreeMap<String, Arc<dyn Model>>,
    default: Option<String>,
}

impl std::fmt::Debug for ModelRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRoutes")
            .field("routes", &self.routes.keys().collect::<Vec<_>>())
            .field("default", &self.default)
            .finish()
    }
}

impl ModelRoutes {
    /// No routes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a route; the first one added is the default.
    #[must_use]
    pub fn route(mut self, provider: impl Into<String>, model: Arc<dyn Model>) -> Self {
        let provider = provider.into();
        self.default.get_or_insert_with(|| provider.clone());
        self.routes.insert(provider, model);
        self
    }

    /// Make `provider` the route used when an agent names none.
    #[must_use]
    pub fn default_route(mut self, provider: impl Into<String>) -> Self {
        self.default = Some(provider.into());
        self
    }

    /// The model for `provider`, or the default route's for `None`.
    pub fn resolve(&self, provider: Option<&str>) -> Option<&Arc<dyn Model>> {
        self.routes.get(provider.or(self.default.as_deref())?)
    }

    /// The default provider name.
    pub fn default_provider(&self) -> Option<&str> {
        self.default.as_deref()
    }
}

/// What an agent is built from once its composition is resolved.
pub(crate) struct Composed {
    pub(crate) model: Arc<dyn Model>,
    pub(crate) options: AgentOptions,
    pub(crate) tools: ScopedTools,
    pub(crate) system: String,
}

/// Shared state of one harness.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) registry: AgentRegistry,
    pub(crate) tasks: TaskTracker,
    models: ModelRoutes,
    /// Host tools; agents composed after [`Harness::add_tool`] see the addition.
    tools: RwLock<ToolRegistry>,
    presets: PresetCatalog,
    prompt: SystemPrompt,
    defaults: AgentOptions,
    pub(crate) text_observer: Option<Arc<dyn TextObserver>>,
    /// Where every event time comes from.
    pub(crate) clock: Arc<dyn Clock>,
    /// Where ids minted for this harness's agents come from.
    ids: Arc<dyn IdSource>,
}

/// Hears the model's text as it streams, before a step's text is recorded:
/// for a live view or a `--json` stream that shows text as it arrives.
///
/// The deltas are not durable: a step's whole text is recorded in the log
/// once the step ends (or is cut), and a delta heard here may belong to a
/// step whose record never lands (a crash, a failed write). The observer
/// is called on the agent's own task, in stream order, so it must not
/// block: hand the text on and return.
pub trait TextObserver: Send + Sync {
    /// `agent`'s model streamed `delta`.
    fn text_delta(&self, agent: &dsh_core::SessionId, delta: &str);
}

impl Shared {
    /// Resolve a composition into a model, options, tools and a rendered
    /// system prompt; every failure here is a composition error, raised
    /// before anything is written.
    pub(crate) fn compose(
        &self,
        composition: &Composition,
        setup: &AgentSetup,
    ) -> Result<Composed, AgentError> {
        let preset = match &composition.preset {
            Some(id) => match self.presets.get(id) {
                Some(preset) => Some(preset),
                // An empty preset: nothing of its own to apply.
                None if self.presets.is_open_ended() => None,
                None => {
                    return Err(AgentError::Composition(format!("unknown preset `{id}`")));
                }
            },
            None => None,
        };
        let route = preset.map(|p| p.options.clone()).unwrap_or_default();
        let options = composition
            .options
            .merged_over(&route)
            .merged_over(&self.defaults);
        if options.max_output_tokens == Some(0) {
            return Err(AgentError::Composition(
                "max_output_tokens must be positive".into(),
            ));
        }
        if options.max_turn_steps == Some(0) {
            return Err(AgentError::Composition(
                "max_turn_steps must be positive".into(),
            ));
        }
        let model = self
            .models
            .resolve(options.provider.as_deref())
            .cloned()
            .ok_or_else(|| {
                AgentError::Composition(match &options.provider {
                    Some(provider) => format!("no model route named `{provider}`"),
                    None => "no model route is configured".into(),
                })
            })?;
        let tools = ScopedTools::compose(
            &self.tools.read().unwrap_or_else(PoisonError::into_inner),
            preset.and_then(|p| p.tools.as_ref()),
            composition.tools.as_ref(),
            &setup.tools,
        )
        .map_err(|err: ToolRegistryError| AgentError::Composition(err.to_string()))?;
        let persona = composition
            .persona
            .as_deref()
            .or_else(|| preset.and_then(|p| p.persona.as_deref()));
        let system = self
            .prompt
            .render(persona, &setup.vars)
            .map_err(|err| AgentError::Composition(err.to_string()))?;
        Ok(Composed {
            model,
            options,
            tools,
            system,
        })
    }
}

/// Builds a [`Harness`].
pub struct HarnessBuilder {
    store: Arc<dyn SessionStore>,
    registry: AgentRegistry,
    models: ModelRoutes,
    tools: ToolRegistry,
    presets: PresetCatalog,
    prompt: SystemPrompt,
    defaults: AgentOptions,
    text_observer: Option<Arc<dyn TextObserver>>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdSource>,
}

impl HarnessBuilder {
    /// The clock every event time comes from (the system clock unless
    /// set): a replay or a journaling engine injects its own.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The source of the ids minted for this harness's hosts and tools
    /// ([`Harness::ids`]; the OS random generator unless set).
    #[must_use]
    pub fn ids(mut self, ids: Arc<dyn IdSource>) -> Self {
        self.ids = ids;
        self
    }

    /// Hear every agent's streamed text as it arrives ([`TextObserver`]).
    #[must_use]
    pub fn text_observer(mut self, observer: Arc<dyn TextObserver>) -> Self {
        self.text_observer = Some(observer);
        self
    }

    /// Share an existing registry (several factories publishing into one runtime).
    #[must_use]
    pub fn registry(mut self, registry: AgentRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// The model routes.
    #[must_use]
    pub fn models(mut self, models: ModelRoutes) -> Self {
        self.models = models;
        self
    }

    /// Route every agent to one model (provider name `default`).
    #[must_use]
    pub fn model(self, model: Arc<dyn Model>) -> Self {
        self.models(ModelRoutes::new().route("default", model))
    }

    /// Add a host tool.
    ///
    /// # Errors
    /// A duplicate name or an invalid input schema.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Result<Self, ToolRegistryError> {
        self.tools.register(tool)?;
        Ok(self)
    }

    /// The presets agents may be composed from.
    #[must_use]
    pub fn presets(mut self, presets: PresetCatalog) -> Self {
        self.presets = presets;
        self
    }

    /// The system prompt (its persona section is shadowed per agent).
    #[must_use]
    pub fn prompt(mut self, prompt: SystemPrompt) -> Self {
        self.prompt = prompt;
        self
    }

    /// Options every agent starts from (compositions override them).
    #[must_use]
    pub fn defaults(mut self, defaults: AgentOptions) -> Self {
        self.defaults = defaults;
        self
    }

    /// Finish.
    ///
    /// # Errors
    /// A prompt template that uses an unknown variable.
    pub fn build(self) -> Result<Harness, crate::prompt::PromptError> {
        self.prompt.validate()?;
        Ok(Harness {
            shared: Arc::new(Shared {
                store: self.store,
                registry: self.registry,
                tasks: TaskTracker::new(),
                models: self.models,
                tools: RwLock::new(self.tools),
                presets: self.presets,
                prompt: self.prompt,
                defaults: self.defaults,
                text_observer: self.text_observer,
                clock: self.clock,
                ids: self.ids,
            }),
        })
    }
}

/// The reference agent factory. Cheap to clone.
#[derive(Clone)]
pub struct Harness {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("registry", &self.shared.registry)
            .field("models", &self.shared.models)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// Start building a harness over `store`.
    pub fn builder(store: Arc<dyn SessionStore>) -> HarnessBuilder {
        HarnessBuilder {
            store,
            registry: AgentRegistry::new(),
            models: ModelRoutes::new(),
            tools: ToolRegistry::new(),
            presets: PresetCatalog::new(),
            prompt: SystemPrompt::new(),
            defaults: AgentOptions::default(),
            text_observer: None,
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
        }
    }

    /// The clock every event time comes from.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    /// The source ids are minted from ([`HarnessBuilder::ids`]).
    pub fn ids(&self) -> &Arc<dyn IdSource> {
        &self.shared.ids
    }

    /// Add a host tool after the harness is built: for tools that need the
    /// harness themselves (the `subagent` tool needs a runtime built over
    /// it). Agents created or resumed afterwards see it; agents already live
    /// keep the tool set they were composed with.
    ///
    /// # Errors
    /// A duplicate name or an invalid input schema; the tools are unchanged.
    pub fn add_tool(&self, tool: Arc<dyn Tool>) -> Result<(), ToolRegistryError> {
        self.shared
            .tools
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .register(tool)
    }

    /// The session store.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.shared.store
    }

    /// The tracker every driver task runs on; `tasks().len()` counts live tasks.
    pub fn tasks(&self) -> &TaskTracker {
        &self.shared.tasks
    }

    /// Dispose every live agent this harness published and wait for every task.
    ///
    /// # Cancel safety
    /// Each disposal, once begun, finishes on the tracker (see
    /// [`LoopAgent::dispose`]); dropped between two of them, the agents not
    /// reached yet stay live and the tracker stays open. Call it again.
    pub async fn shutdown(&self) {
        for reference in self.shared.registry.list() {
            if let Some(agent) = self.shared.registry.resolve(&reference)
                && let Some(agent) = agent.as_any().downcast_ref::<LoopAgent>()
            {
                agent.dispose().await;
            }
        }
        self.shared.tasks.close();
        self.shared.tasks.wait().await;
        self.shared.tasks.reopen();
    }
}

fn check_seed(seed: &[SessionEvent]) -> Result<(), AgentError> {
    if let Some((index, event)) = seed
        .iter()
        .enumerate()
        .find(|(index, event)| event.seq != *index as u64)
    {
        return Err(AgentError::InvalidSeed(format!(
            "event {index} has seq {}; a seed is contiguous from 0",
            event.seq
        )));
    }
    if completed_turn_prefix(seed).len() != seed.len() {
        return Err(AgentError::InvalidSeed(
            "a seed must end with a completed turn".into(),
        ));
    }
    Ok(())
}

#[async_trait]
impl AgentFactory for Harness {
    async fn create(&self, spec: CreateAgent) -> Result<AgentHandle, AgentError> {
        let CreateAgent {
            mut header,
            seed,
            setup,
            cancel,
        } = spec;
        check_seed(&seed)?;
        header.seed_len = seed.len() as u64;
        let composed = self.shared.compose(&header.composition, &setup)?;
        if cancel.is_cancelled() {
            return Err(AgentError::Cancelled);
        }
        if self.shared.registry.get(&header.id).is_some() {
            return Err(AgentError::AlreadyLive(header.id));
        }
        let log = self.shared.store.create(&header, &seed).await?;
        let restored = Restored {
            turns: count_turns(&seed),
            pending: Vec::new(),
            events: seed,
        };
        let id = header.id.clone();
        let agent = LoopAgent::new(self.shared.clone(), header, composed, log, restored);
        if cancel.is_cancelled() {
            return Err(self.roll_back(agent, AgentError::Cancelled).await);
        }
        match agent.publish() {
            Ok(handle) => Ok(handle),
            Err(err) => {
                tracing::debug!(session = %id, "creation rolled back: {err}");
                Err(self.roll_back(agent, err).await)
            }
        }
    }

    async fn resume(&self, spec: ResumeAgent) -> Result<AgentHandle, AgentError> {
        let ResumeAgent { id, setup, cancel } = spec;
        if cancel.is_cancelled() {
            return Err(AgentError::Cancelled);
        }
        if self.shared.registry.get(&id).is_some() {
            return Err(AgentError::AlreadyLive(id));
        }
        let (loaded, log) = self.shared.store.open(&id).await?;
        let header: SessionHeader = loaded.header;
        let composed = match self.shared.compose(&header.composition, &setup) {
            Ok(composed) => composed,
            Err(err) => {
                log.close().await;
                return Err(err);
            }
        };
        let mut events = loaded.events;
        if let Some(turn) = open_turn(&events) {
            let repair = close_interrupted_turn(turn, &events, self.shared.clock.now_millis());
            if let Err(err) = log.append(&repair).await {
                log.close().await;
                return Err(err.into());
            }
            events.extend(repair);
        }
        let (turns, pending) = fold_restored(&header, &events);
        let restored = Restored {
            turns,
            pending,
            events,
        };
        let agent = LoopAgent::new(self.shared.clone(), header, composed, log, restored);
        if cancel.is_cancelled() {
            agent.release_log().await;
            return Err(AgentError::Cancelled);
        }
        match agent.publish() {
            Ok(handle) => {
                agent.wake_restored();
                Ok(handle)
            }
            Err(err) => {
                agent.release_log().await;
                Err(err)
            }
        }
    }

    fn registry(&self) -> &AgentRegistry {
        &self.shared.registry
    }
}

impl Harness {
    /// Undo a creation that will not be published: release and delete the log.
    async fn roll_back(&self, agent: Arc<LoopAgent>, err: AgentError) -> AgentError {
        let id = agent.header_id();
        agent.release_log().await;
        drop(agent);
        if let Err(remove) = self.shared.store.remove(&id).await {
            tracing::error!(session = %id, "could not remove an unpublished session: {remove}");
        }
        err
    }
}

/// The message a tool call left unanswered by a crash is answered with (B53).
pub use crate::turn::INTERRUPTED_TOOL_CALL;

/// The events this session wrote itself, after any seed.
/// What a resume needs of its log, in one pass over it (a pass over a
/// 100,000-event log reads 12.8 MB): how many turns it started, seed
/// included, and the input still pending, seed excluded (input pending in
/// a seed belongs to the log it was copied from).
fn fold_restored(header: &SessionHeader, events: &[SessionEvent]) -> (u64, Vec<PendingItem>) {
    let seed = usize::try_from(header.seed_len).unwrap_or(usize::MAX);
    let mut turns = 0;
    let mut pending = PendingItemsFold::new();
    for (index, event) in events.iter().enumerate() {
        if matches!(event.payload, EventPayload::TurnStart(_)) {
            turns += 1;
        }
        if index >= seed {
            pending.apply(event);
        }
    }
    (turns, pending.finish())
}

fn count_turns(events: &[SessionEvent]) -> u64 {
    events
        .iter()
        .filter(|event| matches!(event.payload, EventPayload::TurnStart(_)))
        .count() as u64
}

#[cfg(test)]
mod tests {
    use dsh_core::session::{InboxAccepted, InboxIds, TurnStart};
    use dsh_core::{InboxTarget, SessionId, UserMessage};

    use super::*;

    fn event(seq: u64, payload: EventPayload) -> SessionEvent {
        SessionEvent {
            seq,
            time: seq,
            payload,
        }
    }

    fn accepted(seq: u64, text: &str) -> (SessionEvent, UserMessage) {
        let message = UserMessage::user_text(text);
        let payload = EventPayload::InboxAccepted(InboxAccepted {
            message: message.clone(),
            target: InboxTarget::NextTurn,
            wake: true,
        });
        (event(seq, payload), message)
    }

    /// Turns count the seed's too (the next turn's number follows them),
    /// pending input only the log's own, in acceptance order.
    #[test]
    fn a_resume_counts_every_turn_and_keeps_only_its_own_pending_input() {
        let (seed_input, _) = accepted(1, "the parent's, never claimed");
        let (claimed, claimed_message) = accepted(3, "claimed");
        let (first, first_message) = accepted(5, "pending first");
        let (second, second_message) = accepted(6, "pending second");
        let events = vec![
            event(0, EventPayload::TurnStart(TurnStart { turn: 0 })),
            seed_input,
            event(2, EventPayload::TurnStart(TurnStart { turn: 1 })),
            claimed,
            event(
                4,
                EventPayload::InboxClaimed(InboxIds {
                    message_ids: vec![claimed_message.id],
                }),
            ),
            first,
            second,
        ];
        let mut header = SessionHeader::new(SessionId::new("s-fold").unwrap(), "/work");
        header.seed_len = 2;
        let (turns, pending) = fold_restored(&header, &events);
        assert_eq!(turns, 2);
        let ids: Vec<_> = pending.into_iter().map(|item| item.message.id).collect();
        assert_eq!(ids, [first_message.id, second_message.id]);
    }
}
