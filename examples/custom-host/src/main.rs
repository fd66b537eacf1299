//! `cargo run -p dsh-example-custom-host`: the subagent runtime embedded in
//! a host that brings its own agent loop, store and factory, proving that
//! `dsh-subagent` needs nothing of `dsh-harness` (a test in `tests/` checks
//! with `cargo tree` that the harness is not in this package's tree). The
//! agent is an echo: every waking message runs one turn, written to its log
//! as the core events (claimed, user message, assistant message, turn end),
//! whose answer is `echo: <text>`. The store keeps logs in memory. A root
//! starts a `spawn` child through the runtime, the child's result is the
//! echo of its prompt, and the child's settlement notice wakes the root.

use std::any::Any;
use std::collections::HashMap;
use std::error::Error;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use dsh_core::content::joined_text;
use dsh_core::session::{AssistantEntry, InboxAccepted, InboxIds, TurnEnd, TurnStart, UserEntry};
use dsh_core::{
    Agent, AgentError, AgentFactory, AgentHandle, AgentOptions, AgentRegistry, AgentStatus,
    CancelCause, CancelOptions, CancellationToken, ContentBlock, CreateAgent, Dispose, Epoch,
    EpochClaim, EventPayload, InboxArrival, InboxTarget, LoadedSession, MessageId, Publication,
    ResumeAgent, SessionEvent, SessionHeader, SessionId, SessionLog, SessionStore, StopReason,
    StoreError, UserMessage,
};
use dsh_subagent::{ActivationSpec, Delivery, RuntimeConfig, StartRequest, SubagentRuntime};
use dsh_subagent_spawn::SpawnProvider;
use tokio::sync::{broadcast, watch};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Logs in memory: the header and the events of every session.
#[derive(Default)]
struct MemStore {
    sessions: Arc<Mutex<HashMap<SessionId, LoadedSession>>>,
}

/// One session's append handle.
struct MemLog {
    id: SessionId,
    sessions: Arc<Mutex<HashMap<SessionId, LoadedSession>>>,
}

#[async_trait]
impl SessionLog for MemLog {
    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError> {
        let mut sessions = lock(&self.sessions);
        let session = sessions
            .get_mut(&self.id)
            .ok_or_else(|| StoreError::NotFound(self.id.clone()))?;
        session.events.extend_from_slice(events);
        Ok(())
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[async_trait]
impl SessionStore for MemStore {
    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        let mut sessions = lock(&self.sessions);
        if sessions.contains_key(&header.id) {
            return Err(StoreError::Exists(header.id.clone()));
        }
        sessions.insert(
            header.id.clone(),
            LoadedSession {
                header: header.clone(),
                events: seed.to_vec(),
                torn_tail: None,
            },
        );
        Ok(Arc::new(MemLog {
            id: header.id.clone(),
            sessions: self.sessions.clone(),
        }))
    }

    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        let loaded = self.load(id).await?;
        let log = Arc::new(MemLog {
            id: id.clone(),
            sessions: self.sessions.clone(),
        });
        Ok((loaded, log))
    }

    async fn load(&self, id: &SessionId) -> Result<LoadedSession, StoreError> {
        lock(&self.sessions)
            .get(id)
            .cloned()
            .ok_or_else(|| StoreError::NotFound(id.clone()))
    }

    async fn exists(&self, id: &SessionId) -> Result<bool, StoreError> {
        Ok(lock(&self.sessions).contains_key(id))
    }

    async fn list(&self) -> Result<Vec<SessionId>, StoreError> {
        Ok(lock(&self.sessions).keys().cloned().collect())
    }

    async fn remove(&self, id: &SessionId) -> Result<(), StoreError> {
        lock(&self.sessions)
            .remove(id)
            .map(|_| ())
            .ok_or_else(|| StoreError::NotFound(id.clone()))
    }
}

/// What an echo agent holds between calls.
struct EchoState {
    events: Vec<SessionEvent>,
    pending: Vec<UserMessage>,
    turns: u64,
}

/// An agent whose every turn answers `echo: <what it was sent>`.
struct EchoAgent {
    header: SessionHeader,
    epoch: Epoch,
    log: Arc<dyn SessionLog>,
    state: tokio::sync::Mutex<EchoState>,
    /// A copy of the events for the synchronous readers.
    events: Mutex<Vec<SessionEvent>>,
    status: watch::Sender<AgentStatus>,
    inbox: broadcast::Sender<InboxArrival>,
}

impl EchoAgent {
    fn new(
        header: SessionHeader,
        epoch: Epoch,
        log: Arc<dyn SessionLog>,
        events: Vec<SessionEvent>,
    ) -> Self {
        let turns = events
            .iter()
            .filter(|e| matches!(e.payload, EventPayload::TurnStart(_)))
            .count() as u64;
        Self {
            header,
            epoch,
            log,
            events: Mutex::new(events.clone()),
            state: tokio::sync::Mutex::new(EchoState {
                events,
                pending: Vec::new(),
                turns,
            }),
            status: watch::channel(AgentStatus::Idle).0,
            inbox: broadcast::channel(64).0,
        }
    }

    /// Append `payloads` to the log, then to the copies.
    async fn commit(
        &self,
        state: &mut EchoState,
        payloads: Vec<EventPayload>,
    ) -> Result<u64, AgentError> {
        let first = state.events.len() as u64;
        let events: Vec<SessionEvent> = payloads
            .into_iter()
            .enumerate()
            .map(|(i, payload)| SessionEvent {
                seq: first + i as u64,
                time: now_ms(),
                payload,
            })
            .collect();
        self.log
            .append(&events)
            .await
            .map_err(AgentError::LogFailed)?;
        state.events.extend_from_slice(&events);
        lock(&self.events).clone_from(&state.events);
        Ok(state.events.len() as u64 - 1)
    }

    /// One turn over every pending message.
    async fn turn(&self, state: &mut EchoState) -> Result<(), AgentError> {
        let claimed = std::mem::take(&mut state.pending);
        let turn = state.turns;
        state.turns += 1;
        self.status.send_replace(AgentStatus::Running);
        let text: Vec<String> = claimed.iter().map(|m| joined_text(&m.content)).collect();
        let mut payloads = vec![
            EventPayload::InboxClaimed(InboxIds {
                message_ids: claimed.iter().map(|m| m.id.clone()).collect(),
            }),
            EventPayload::TurnStart(TurnStart { turn }),
        ];
        payloads.extend(
            claimed
                .into_iter()
                .map(|message| EventPayload::UserMessage(UserEntry { message })),
        );
        payloads.push(EventPayload::AssistantMessage(AssistantEntry {
            content: vec![ContentBlock::text(format!("echo: {}", text.join(" / ")))],
        }));
        payloads.push(EventPayload::TurnEnd(TurnEnd {
            turn,
            stop_reason: StopReason::COMPLETED,
            diagnostic: None,
        }));
        let written = self.commit(state, payloads).await;
        self.status.send_replace(AgentStatus::Idle);
        written.map(|_| ())
    }
}

#[async_trait]
impl Agent for EchoAgent {
    fn id(&self) -> &SessionId {
        &self.header.id
    }

    fn epoch(&self) -> Epoch {
        self.epoch
    }

    fn header(&self) -> &SessionHeader {
        &self.header
    }

    fn options(&self) -> AgentOptions {
        self.header.composition.options.clone()
    }

    fn cwd(&self) -> PathBuf {
        self.header.cwd.clone()
    }

    fn accepts_images(&self) -> bool {
        false
    }

    fn status(&self) -> AgentStatus {
        *self.status.borrow()
    }

    fn watch_status(&self) -> watch::Receiver<AgentStatus> {
        self.status.subscribe()
    }

    async fn send(
        &self,
        message: UserMessage,
        target: InboxTarget,
        wake: bool,
    ) -> Result<MessageId, AgentError> {
        let mut state = self.state.lock().await;
        let id = message.id.clone();
        let source_kind = message.source.kind().to_owned();
        let sender = message.source.sender().cloned();
        self.commit(
            &mut state,
            vec![EventPayload::InboxAccepted(InboxAccepted {
                message: message.clone(),
                target,
                wake,
            })],
        )
        .await?;
        state.pending.push(message);
        let _ = self.inbox.send(InboxArrival {
            message_id: id.clone(),
            target,
            wake,
            source_kind,
            sender,
        });
        if wake {
            self.turn(&mut state).await?;
        }
        Ok(id)
    }

    fn cancel(&self, _cause: CancelCause, _options: CancelOptions) {
        // A turn runs inside `send` and is over when it returns: there is
        // never a running turn to cancel.
    }

    async fn wait_idle(&self) {
        let mut status = self.status.subscribe();
        let _ = status.wait_for(|s| *s == AgentStatus::Idle).await;
    }

    fn observe_inbox(&self) -> broadcast::Receiver<InboxArrival> {
        self.inbox.subscribe()
    }

    fn pending(&self) -> Vec<MessageId> {
        self.state
            .try_lock()
            .map(|state| state.pending.iter().map(|m| m.id.clone()).collect())
            .unwrap_or_default()
    }

    fn events(&self) -> Vec<SessionEvent> {
        lock(&self.events).clone()
    }

    async fn record(
        &self,
        kind: &str,
        payload: dsh_core::ExtensionPayload,
    ) -> Result<u64, AgentError> {
        if EventPayload::is_builtin_kind(kind) {
            return Err(AgentError::ReservedEventType(kind.to_owned()));
        }
        let mut state = self.state.lock().await;
        self.commit(
            &mut state,
            vec![EventPayload::Extension {
                kind: kind.to_owned(),
                payload,
            }],
        )
        .await
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Withdraws an echo agent's publication (it has no task to stop): the
/// publication is the only way to take an agent out of the registry.
struct Unpublish {
    publication: Mutex<Option<Publication>>,
}

#[async_trait]
impl Dispose for Unpublish {
    async fn dispose(&self) {
        if let Some(publication) = lock(&self.publication).take() {
            publication.withdraw();
        }
    }
}

/// Creates and resumes echo agents over the store.
struct EchoFactory {
    store: Arc<MemStore>,
    registry: AgentRegistry,
}

impl EchoFactory {
    fn publish(&self, claim: EpochClaim, agent: EchoAgent) -> Result<AgentHandle, AgentError> {
        let agent: Arc<dyn Agent> = Arc::new(agent);
        let publication = self.registry.publish(claim, agent.clone())?;
        let disposer = Arc::new(Unpublish {
            publication: Mutex::new(Some(publication)),
        });
        Ok(AgentHandle::new(agent, disposer))
    }
}

#[async_trait]
impl AgentFactory for EchoFactory {
    async fn create(&self, spec: CreateAgent) -> Result<AgentHandle, AgentError> {
        if spec.cancel.is_cancelled() {
            return Err(AgentError::Cancelled);
        }
        let mut header = spec.header;
        header.seed_len = spec.seed.len() as u64;
        let log = self.store.create(&header, &spec.seed).await?;
        let claim = self.registry.mint_epoch();
        let agent = EchoAgent::new(header, claim.epoch(), log, spec.seed);
        self.publish(claim, agent)
    }

    async fn resume(&self, spec: ResumeAgent) -> Result<AgentHandle, AgentError> {
        if spec.cancel.is_cancelled() {
            return Err(AgentError::Cancelled);
        }
        let (loaded, log) = self.store.open(&spec.id).await?;
        let claim = self.registry.mint_epoch();
        let agent = EchoAgent::new(loaded.header, claim.epoch(), log, loaded.events);
        self.publish(claim, agent)
    }

    fn registry(&self) -> &AgentRegistry {
        &self.registry
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let store = Arc::new(MemStore::default());
    let factory = Arc::new(EchoFactory {
        store: store.clone(),
        registry: AgentRegistry::new(),
    });
    let runtime = SubagentRuntime::new(factory.clone(), store, RuntimeConfig::default());
    runtime.register(Arc::new(SpawnProvider::new()))?;

    let root = factory
        .create(CreateAgent {
            header: SessionHeader::new(SessionId::new("host-root")?, std::env::temp_dir()),
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await?;
    let child = runtime
        .start_activation(ActivationSpec {
            provider: "spawn".into(),
            label: "echo the logs".into(),
            name: Some("echoer".into()),
            child_id: None,
            cancel: CancellationToken::new(),
            delivery: Delivery::Parent,
            request: StartRequest::new(
                root.agent().clone(),
                vec![ContentBlock::text("summarise the logs")],
            ),
        })
        .await?;
    let result = child.result().await?;
    println!(
        "child echoer: {} ({})",
        joined_text(&result.output),
        result.stop_reason.as_str()
    );
    runtime.shutdown().await;
    // The settlement notice reached the root's inbox and woke it.
    let woke = root.agent().events().iter().any(|event| {
        matches!(&event.payload, EventPayload::UserMessage(entry)
            if entry.message.source.kind() == "subagent-settled")
    });
    println!("root woken by the child's settlement notice: {woke}");
    root.dispose().await;
    Ok(())
}
