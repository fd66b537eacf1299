//! The registry of live agents. It maps each session id to the one agent
//! object live for it, under an epoch minted per publication, so that "the
//! exact live agent" can be checked: a reference is live only while the
//! registry holds the same epoch. Publication and disposal are observable.
//! The registry owns no agent's lifetime; it only records who is live.
//!
//! Publication is a capability. An epoch is minted by the registry as a
//! one-use [`EpochClaim`]; publishing consumes the claim and returns a
//! [`Publication`], the only handle that can withdraw the agent again. So
//! code that holds a reference, or even the agent object, can neither
//! withdraw someone else's agent nor republish an agent under a used epoch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Live agents by session id, hashed with foldhash: the ids are the
/// process's own (random when generated, one per live agent), so the
/// standard library's collision-resistant SipHash buys nothing here, and
/// every hand-off looks the registry up several times.
type Agents = HashMap<SessionId, Arc<dyn Agent>, foldhash::fast::RandomState>;

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
    agents: Mutex<Agents>,
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

    fn agents(&self) -> MutexGuard<'_, Agents> {
        self.inner
            .agents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Mint the epoch for an agent about to be published: build the agent
    /// under [`EpochClaim::epoch`], then hand the claim to
    /// [`AgentRegistry::publish`]. Epochs are unique and increasing within
    /// the process; a claim publishes once, in this registry only.
    pub fn mint_epoch(&self) -> EpochClaim {
        EpochClaim {
            epoch: Epoch::next(),
            registry: Arc::downgrade(&self.inner),
        }
    }

    /// Make `agent` the live agent of its session under the epoch `claim`
    /// holds, and notify listeners. The returned [`Publication`] is the
    /// only way to withdraw the agent again.
    ///
    /// # Errors
    /// - [`AgentError::ForeignEpoch`] when another registry minted `claim`;
    /// - [`AgentError::EpochNotClaimed`] when `agent` reports another epoch
    ///   than the claim's (one already used, or another agent's);
    /// - [`AgentError::AlreadyLive`] when another agent holds the session.
    pub fn publish(
        &self,
        claim: EpochClaim,
        agent: Arc<dyn Agent>,
    ) -> Result<Publication, AgentError> {
        let reference = agent.reference();
        if !std::ptr::eq(claim.registry.as_ptr(), Arc::as_ptr(&self.inner)) {
            return Err(AgentError::ForeignEpoch(reference.id));
        }
        if reference.epoch != claim.epoch {
            return Err(AgentError::EpochNotClaimed {
                id: reference.id,
                reported: reference.epoch,
                claimed: claim.epoch,
            });
        }
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
        Ok(Publication {
            registry: self.clone(),
            reference,
            withdrawn: false,
        })
    }

    /// Remove the agent `reference` names if that exact epoch is live.
    fn withdraw(&self, reference: &AgentRef) -> bool {
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

/// The right to publish one agent under one epoch, minted by
/// [`AgentRegistry::mint_epoch`]. Not `Clone`: [`AgentRegistry::publish`]
/// consumes it, so an epoch is published at most once. Dropping an unused
/// claim costs nothing (the registry keeps no record of it).
#[derive(Debug)]
pub struct EpochClaim {
    epoch: Epoch,
    registry: Weak<Inner>,
}

impl EpochClaim {
    /// The epoch the agent must report ([`Agent::epoch`]).
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }
}

/// One agent's publication in a registry: the only way to withdraw it.
///
/// Not `Clone`, so whoever holds it (the agent itself, for the harness's
/// agents, which withdraw it when they are disposed) is the only one who
/// can make the agent stop being live; a reference, stale or current,
/// cannot. [`Publication::withdraw`] withdraws explicitly. Dropping the
/// publication withdraws too: since nothing else can, a publication lost
/// on an early return or a panic would otherwise leave its agent live for
/// good. Either way [`RegistryEvent::Disposed`] is emitted once.
///
/// A publication cannot be copied:
/// ```compile_fail
/// fn copy(publication: &dsh_core::Publication) -> dsh_core::Publication {
///     publication.clone()
/// }
/// ```
/// and a reference alone withdraws nothing, since the registry offers no
/// way to:
/// ```compile_fail
/// fn withdraw(registry: &dsh_core::AgentRegistry, reference: &dsh_core::AgentRef) {
///     registry.unpublish(reference);
/// }
/// ```
/// nor can an epoch be made outside a registry:
/// ```compile_fail
/// let forged = dsh_core::Epoch(7);
/// ```
#[must_use = "dropping a publication withdraws the agent at once"]
#[derive(Debug)]
pub struct Publication {
    registry: AgentRegistry,
    reference: AgentRef,
    withdrawn: bool,
}

impl Publication {
    /// The exact reference to the published agent.
    pub fn reference(&self) -> &AgentRef {
        &self.reference
    }

    /// Stop the agent being live and notify listeners
    /// ([`RegistryEvent::Disposed`]).
    pub fn withdraw(mut self) {
        self.withdraw_once();
    }

    fn withdraw_once(&mut self) {
        if !self.withdrawn {
            self.withdrawn = true;
            self.registry.withdraw(&self.reference);
        }
    }
}

impl Drop for Publication {
    fn drop(&mut self) {
        self.withdraw_once();
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use async_trait::async_trait;
    use tokio::sync::{broadcast, watch};

    use super::*;
    use crate::agent::{AgentStatus, CancelCause, CancelOptions, InboxArrival};
    use crate::id::MessageId;
    use crate::message::{InboxTarget, UserMessage};
    use crate::options::AgentOptions;
    use crate::session::{SessionEvent, SessionHeader};

    /// The least agent a host could write: it reports a session and an
    /// epoch and accepts nothing.
    struct Bare {
        header: SessionHeader,
        epoch: Epoch,
    }

    fn bare(id: &str, epoch: Epoch) -> Arc<dyn Agent> {
        let id = SessionId::new(id).unwrap();
        Arc::new(Bare {
            header: SessionHeader::new(id, "/"),
            epoch,
        })
    }

    #[async_trait]
    impl Agent for Bare {
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
            AgentOptions::default()
        }
        fn cwd(&self) -> PathBuf {
            self.header.cwd.clone()
        }
        fn accepts_images(&self) -> bool {
            false
        }
        fn status(&self) -> AgentStatus {
            AgentStatus::Idle
        }
        fn watch_status(&self) -> watch::Receiver<AgentStatus> {
            watch::channel(AgentStatus::Idle).1
        }
        async fn send(
            &self,
            _: UserMessage,
            _: InboxTarget,
            _: bool,
        ) -> Result<MessageId, AgentError> {
            Err(AgentError::Disposed(self.header.id.clone()))
        }
        fn cancel(&self, _: CancelCause, _: CancelOptions) {}
        async fn wait_idle(&self) {}
        fn observe_inbox(&self) -> broadcast::Receiver<InboxArrival> {
            broadcast::channel(1).1
        }
        fn pending(&self) -> Vec<MessageId> {
            Vec::new()
        }
        fn events(&self) -> Vec<SessionEvent> {
            Vec::new()
        }
        async fn record(
            &self,
            _: &str,
            _: crate::session::ExtensionPayload,
        ) -> Result<u64, AgentError> {
            Err(AgentError::Disposed(self.header.id.clone()))
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    fn seen(events: &mut crate::observe::Events<RegistryEvent>) -> Vec<RegistryEvent> {
        let mut seen = Vec::new();
        while let Ok(event) = events.try_recv() {
            seen.push(event);
        }
        seen
    }

    #[test]
    fn a_claim_publishes_once_and_only_in_its_own_registry() {
        let registry = AgentRegistry::new();
        let other = AgentRegistry::new();

        let foreign = other.mint_epoch();
        let err = registry
            .publish(foreign, bare("a", Epoch::NONE))
            .unwrap_err();
        assert_eq!(err.code(), "FOREIGN_EPOCH");

        let claim = registry.mint_epoch();
        let forged = bare("a", Epoch::NONE);
        let err = registry.publish(claim, forged).unwrap_err();
        assert_eq!(err.code(), "EPOCH_NOT_CLAIMED");
        assert!(registry.is_empty(), "nothing refused is live");

        // An agent published and withdrawn cannot come back under its epoch,
        // whatever fresh claim it is handed.
        let claim = registry.mint_epoch();
        let used = claim.epoch();
        let first = registry.publish(claim, bare("a", used)).unwrap();
        first.withdraw();
        let err = registry
            .publish(registry.mint_epoch(), bare("a", used))
            .unwrap_err();
        assert!(
            matches!(err, AgentError::EpochNotClaimed { reported, .. } if reported == used),
            "{err}"
        );
        assert!(registry.is_empty());
    }

    #[test]
    fn epochs_are_unique_across_registries_and_never_none() {
        let a = AgentRegistry::new().mint_epoch().epoch();
        let b = AgentRegistry::new().mint_epoch().epoch();
        assert_ne!(a, b);
        assert!(a.get() > 0 && b.get() > 0);
        assert_ne!(a, Epoch::NONE);
        assert_eq!(Epoch::NONE.get(), 0);
    }

    #[test]
    fn only_the_publication_withdraws_and_disposed_fires_once_in_order() {
        let registry = AgentRegistry::new();
        let (_sub, mut events) = registry.events().subscribe();

        let claim = registry.mint_epoch();
        let first_epoch = claim.epoch();
        let first = registry.publish(claim, bare("a", first_epoch)).unwrap();
        let stale = first.reference().clone();
        assert!(registry.is_live(&stale));
        // A second agent under the same session is refused while the first
        // is live, and its refusal withdraws nothing.
        let claim = registry.mint_epoch();
        let epoch = claim.epoch();
        let err = registry.publish(claim, bare("a", epoch)).unwrap_err();
        assert_eq!(err.code(), "ALREADY_LIVE");
        assert!(registry.is_live(&stale));

        first.withdraw();
        assert!(!registry.is_live(&stale));

        let claim = registry.mint_epoch();
        let epoch = claim.epoch();
        let second = registry.publish(claim, bare("a", epoch)).unwrap();
        let live = second.reference().clone();
        assert_ne!(live, stale);
        assert!(!registry.is_live(&stale), "an earlier epoch is stale");
        assert!(registry.is_live(&live));

        // Dropping the publication withdraws, once.
        drop(second);
        assert!(registry.is_empty());

        assert_eq!(
            seen(&mut events),
            [
                RegistryEvent::Published(stale.clone()),
                RegistryEvent::Disposed(stale),
                RegistryEvent::Published(live.clone()),
                RegistryEvent::Disposed(live),
            ]
        );
    }
}
