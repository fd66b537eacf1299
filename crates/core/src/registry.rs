//! The registry of live agents. It maps each session id to the one agent
//! object live for it, under an epoch minted per publication, so that "the
//! exact live agent" can be checked: a reference is live only while the
//! registry holds the same epoch. Publication and disposal are observable.
//! The registry owns no agent's lifetime; it only records who is live.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::agent::{Agent, AgentError, AgentRef, Epoch};
use crate::id::SessionId;
use crate::observe::EventBus;

/// A change in the set of live agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryEvent {
    /// An agent became live; [`AgentRegistry::resolve`] finds it during the notification.
    Published(AgentRef),
    /// An agent stopped being live.
    Disposed(AgentRef),
}

/// The live agents of one runtime. Cheap to clone; clones share state.
#[derive(Clone, Default)]
pub struct AgentRegistry {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    next_epoch: AtomicU64,
    agents: Mutex<HashMap<SessionId, Arc<dyn Agent>>>,
    events: EventBus<RegistryEvent>,
}

impl std::fmt::Debug for AgentRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRegistry")
            .field("live", &self.len())
            .finish()
    }
}

impl AgentRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn agents(&self) -> MutexGuard<'_, HashMap<SessionId, Arc<dyn Agent>>> {
        self.inner
            .agents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Mint the epoch for an agent about to be published. Epochs are unique
    /// and increasing within this registry.
    pub fn mint_epoch(&self) -> Epoch {
        Epoch(self.inner.next_epoch.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Make `agent` the live agent of its session and notify listeners.
    ///
    /// # Errors
    /// [`AgentError::AlreadyLive`] when another agent holds the session.
    pub fn publish(&self, agent: Arc<dyn Agent>) -> Result<AgentRef, AgentError> {
        let reference = agent.reference();
        {
            let mut agents = self.agents();
            if agents.contains_key(&reference.id) {
                return Err(AgentError::AlreadyLive(reference.id));
            }
            agents.insert(reference.id.clone(), agent);
        }
        self.inner
            .events
            .emit(&RegistryEvent::Published(reference.clone()));
        Ok(reference)
    }

    /// Remove the agent `reference` names, if that exact epoch is still live.
    /// Returns whether it was; a stale reference removes nothing.
    pub fn unpublish(&self, reference: &AgentRef) -> bool {
        let removed = {
            let mut agents = self.agents();
            match agents.get(&reference.id) {
                Some(live) if live.epoch() == reference.epoch => {
                    agents.remove(&reference.id);
                    true
                }
                _ => false,
            }
        };
        if removed {
            self.inner
                .events
                .emit(&RegistryEvent::Disposed(reference.clone()));
        }
        removed
    }

    /// The live agent of a session, whatever its epoch.
    pub fn get(&self, id: &SessionId) -> Option<Arc<dyn Agent>> {
        self.agents().get(id).cloned()
    }

    /// The live agent `reference` names, only if it is that exact epoch.
    pub fn resolve(&self, reference: &AgentRef) -> Option<Arc<dyn Agent>> {
        self.agents()
            .get(&reference.id)
            .filter(|live| live.epoch() == reference.epoch)
            .cloned()
    }

    /// Whether `reference` names the exact live agent.
    pub fn is_live(&self, reference: &AgentRef) -> bool {
        self.resolve(reference).is_some()
    }

    /// References to every live agent, sorted by session id.
    pub fn list(&self) -> Vec<AgentRef> {
        let mut refs: Vec<AgentRef> = self.agents().values().map(|a| a.reference()).collect();
        refs.sort_by(|a, b| a.id.cmp(&b.id));
        refs
    }

    /// How many agents are live.
    pub fn len(&self) -> usize {
        self.agents().len()
    }

    /// Whether no agent is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Publication and disposal notifications.
    pub fn events(&self) -> &EventBus<RegistryEvent> {
        &self.inner.events
    }
}
