//! Admission: the checks a start or a resume passes before any provider or
//! store work ([`SubagentRuntime::admit_start`] makes every check of a
//! start, in order: provider, capabilities, liveness, drain, depth, budget,
//! directory, tool filter, capacity, name, run id), and the ticket that
//! counts it as in flight. A ticket is taken
//! under the drain lock, so a drain either sees it (and waits for it, after
//! cancelling what it has not published yet) or refuses it; nothing is
//! admitted into a tree that is draining. Capacity slots free themselves on
//! drop.

use crate::ids::{IdMap, IdSet};
use crate::{AdmissionError, DeliveryError, InfraError, RegistryError};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dsh_core::{AgentRef, AgentRegistry, CancellationToken, SessionId};
use tokio::sync::Notify;

use dsh_core::Agent;

use crate::compose::{check_capabilities, narrow_tools, resolve_cwd};
use crate::error::SubagentError;
use crate::names::NameReservation;
use crate::provider::SubagentProvider;
use crate::request::ActivationSpec;
use crate::runtime::{SubagentRuntime, lock};

/// The admission state of one runtime: draining roots and the starts and
/// resumes in flight per tree root.
#[derive(Default)]
pub(crate) struct Admissions {
    /// Roots whose trees are draining: admission below them is closed until
    /// that exact root leaves the registry.
    draining: Mutex<IdSet<AgentRef>>,
    /// Tickets in flight per root, each with the token that stops its work.
    in_flight: Mutex<IdMap<SessionId, IdMap<u64, CancellationToken>>>,
    changed: Notify,
    next: AtomicU64,
}

/// Counts one start or resume in flight below a root until dropped.
pub(crate) struct AdmissionTicket {
    admissions: Arc<Admissions>,
    root: SessionId,
    serial: u64,
}

impl std::fmt::Debug for AdmissionTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionTicket")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Drop for AdmissionTicket {
    fn drop(&mut self) {
        {
            let mut in_flight = lock(&self.admissions.in_flight);
            if let Some(tickets) = in_flight.get_mut(&self.root) {
                tickets.remove(&self.serial);
                if tickets.is_empty() {
                    in_flight.remove(&self.root);
                }
            }
        }
        self.admissions.changed.notify_waiters();
    }
}

impl Admissions {
    /// Refuse new work below a draining root (while that exact root is live).
    pub(crate) fn check(
        &self,
        registry: &AgentRegistry,
        root: &SessionId,
    ) -> Result<(), SubagentError> {
        let mut draining = lock(&self.draining);
        draining.retain(|reference| registry.is_live(reference));
        if draining.iter().any(|reference| &reference.id == root) {
            return Err(SubagentError::Admission(AdmissionError::Draining));
        }
        Ok(())
    }

    /// Admit one start or resume below `root`; a drain cancels `stop`.
    ///
    /// # Errors
    /// `DRAINING`.
    pub(crate) fn admit(
        self: &Arc<Self>,
        registry: &AgentRegistry,
        root: &SessionId,
        stop: CancellationToken,
    ) -> Result<AdmissionTicket, SubagentError> {
        let mut draining = lock(&self.draining);
        draining.retain(|reference| registry.is_live(reference));
        if draining.iter().any(|reference| &reference.id == root) {
            return Err(SubagentError::Admission(AdmissionError::Draining));
        }
        let serial = self.next.fetch_add(1, Ordering::Relaxed);
        // Counted while the drain lock is held: a drain that starts after
        // this line sees the ticket.
        lock(&self.in_flight)
            .entry(root.clone())
            .or_default()
            .insert(serial, stop);
        drop(draining);
        Ok(AdmissionTicket {
            admissions: self.clone(),
            root: root.clone(),
            serial,
        })
    }

    /// Close admission below `roots` and cancel their work in flight.
    pub(crate) fn close(&self, roots: &[AgentRef]) {
        let mut draining = lock(&self.draining);
        draining.extend(roots.iter().cloned());
        let in_flight = lock(&self.in_flight);
        for root in roots {
            for stop in in_flight.get(&root.id).into_iter().flat_map(IdMap::values) {
                stop.cancel();
            }
        }
    }

    /// Wait until nothing is in flight below `root`.
    pub(crate) async fn settled(&self, root: &SessionId) {
        loop {
            let changed = self.changed.notified();
            if !lock(&self.in_flight).contains_key(root) {
                return;
            }
            changed.await;
        }
    }

    /// Whether the exact live agent `agent` is a root whose tree is draining.
    pub(crate) fn is_draining(&self, registry: &AgentRegistry, agent: &AgentRef) -> bool {
        lock(&self.draining).contains(agent) && registry.is_live(agent)
    }
}

/// Live children per tree root (B17).
#[derive(Default)]
pub(crate) struct Capacity {
    counts: Arc<Mutex<IdMap<SessionId, usize>>>,
}

/// Frees a tree's capacity slot on drop.
pub(crate) struct CapacitySlot {
    counts: Arc<Mutex<IdMap<SessionId, usize>>>,
    root: SessionId,
}

impl Drop for CapacitySlot {
    fn drop(&mut self) {
        let mut counts = lock(&self.counts);
        if let Some(count) = counts.get_mut(&self.root) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.root);
            }
        }
    }
}

impl Capacity {
    /// Take one of `limit` slots of `root`'s tree.
    ///
    /// # Errors
    /// `CAPACITY` when the tree is full.
    pub(crate) fn reserve(
        &self,
        root: &SessionId,
        limit: usize,
    ) -> Result<CapacitySlot, SubagentError> {
        let mut counts = lock(&self.counts);
        let count = counts.entry(root.clone()).or_insert(0);
        if *count >= limit {
            return Err(SubagentError::Admission(AdmissionError::Capacity(limit)));
        }
        *count += 1;
        Ok(CapacitySlot {
            counts: self.counts.clone(),
            root: root.clone(),
        })
    }
}

/// Catalog order is call order: each start under a parent takes a turn
/// when it is admitted, and records its catalog entry only once every
/// earlier start under that parent recorded its own or gave up. So
/// concurrent starts (parallel tool calls) are cataloged, listed and named
/// in the order they were made, whichever creation finishes first.
///
/// Each turn has a wake-up of its own, and a turn that leaves the head of
/// its queue wakes only the turn behind it: N concurrent starts cost N
/// wake-ups, not one per waiter per publication (N²/2, which made 6,000
/// concurrent children cost a millisecond each).
#[derive(Default)]
pub(crate) struct Publications {
    queues: Mutex<IdMap<AgentRef, std::collections::BTreeMap<u64, Arc<Notify>>>>,
    next: AtomicU64,
}

/// One start's place in its parent's publication order; dropping it (after
/// the record, or on any failure) lets the next one go.
pub(crate) struct PublishTurn {
    publications: Arc<Publications>,
    parent: AgentRef,
    ticket: u64,
    /// Told when this turn reaches the head of its queue.
    reached: Arc<Notify>,
}

impl Publications {
    /// The next turn under `parent`.
    pub(crate) fn take(self: &Arc<Self>, parent: &AgentRef) -> PublishTurn {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let reached = Arc::new(Notify::new());
        lock(&self.queues)
            .entry(parent.clone())
            .or_default()
            .insert(ticket, reached.clone());
        PublishTurn {
            publications: self.clone(),
            parent: parent.clone(),
            ticket,
            reached,
        }
    }
}

impl PublishTurn {
    /// Wait until every earlier start under the same parent is done.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub(crate) async fn wait(&self) {
        loop {
            let first = lock(&self.publications.queues)
                .get(&self.parent)
                .and_then(|queue| queue.keys().next().copied());
            if first.is_none_or(|first| first == self.ticket) {
                return;
            }
            // A turn ahead that leaves between the check and here has
            // stored its wake-up (`notify_one` keeps a permit).
            self.reached.notified().await;
        }
    }
}

impl Drop for PublishTurn {
    fn drop(&mut self) {
        let next = {
            let mut queues = lock(&self.publications.queues);
            let mut next = None;
            if let Some(queue) = queues.get_mut(&self.parent) {
                let was_first = queue.keys().next() == Some(&self.ticket);
                queue.remove(&self.ticket);
                if was_first {
                    next = queue.values().next().cloned();
                }
                if queue.is_empty() {
                    queues.remove(&self.parent);
                }
            }
            next
        };
        // Only a new head can go; everyone behind it stays asleep.
        if let Some(next) = next {
            next.notify_one();
        }
    }
}

/// A start that passed every synchronous check.
pub(crate) struct Admitted {
    pub(crate) provider: Arc<dyn SubagentProvider>,
    pub(crate) spec: ActivationSpec,
    pub(crate) cwd: PathBuf,
    pub(crate) depth: u32,
    pub(crate) root: SessionId,
    pub(crate) slot: CapacitySlot,
    pub(crate) reservation: NameReservation,
    /// Counts the start as in flight until it published or rolled back.
    pub(crate) ticket: AdmissionTicket,
    /// Its place in the parent's catalog order.
    pub(crate) turn: PublishTurn,
    /// Stops the unpublished work: the caller's token, a drain, or the
    /// caller going away.
    pub(crate) cancel: CancellationToken,
}

impl SubagentRuntime {
    /// Every check a start makes before provider code runs.
    pub(crate) fn admit_start(&self, spec: ActivationSpec) -> Result<Admitted, SubagentError> {
        let provider = self.get(&spec.provider).ok_or_else(|| {
            SubagentError::Registry(RegistryError::NoProvider(spec.provider.clone()))
        })?;
        check_capabilities(provider.as_ref(), &spec.request)?;
        let parent = spec.request.parent.clone();
        let parent_ref = parent.reference();
        if !self.registry().is_live(&parent_ref) {
            return Err(SubagentError::Delivery(DeliveryError::NotLive(
                parent_ref.id,
            )));
        }
        let root = self.root_id(parent.id());
        let cancel = spec.cancel.child_token();
        let ticket = self
            .admissions()
            .admit(self.registry(), &root, cancel.clone())?;
        let depth = child_depth(parent.as_ref(), spec.request.agent_options.as_ref())?;
        if let Some(max) = spec.request.max_depth
            && depth > max
        {
            return Err(SubagentError::Admission(AdmissionError::DepthLimit {
                depth,
                max,
            }));
        }
        self.check_budget(&parent_ref, spec.request.token_budget)?;
        let cwd = resolve_cwd(&parent.cwd(), spec.request.cwd.as_deref())?;
        let mut spec = spec;
        spec.request.tool_filter = narrow_tools(
            parent.composition().tools.as_ref(),
            spec.request.tool_filter.as_ref(),
        )?;
        let slot = self.reserve_capacity(&root)?;
        let reservation =
            self.catalogs()
                .reserve_name(self.registry(), &parent, spec.name.as_deref())?;
        if let Some(child_id) = &spec.child_id
            && (self.registry().get(child_id).is_some() || self.run_ids().contains(child_id))
        {
            return Err(SubagentError::Infra(InfraError::DuplicateRunId {
                provider: provider.name().to_owned(),
                id: child_id.clone(),
            }));
        }
        if cancel.is_cancelled() {
            return Err(SubagentError::Cancelled);
        }
        let turn = self.publications().take(&parent_ref);
        Ok(Admitted {
            provider,
            spec,
            cwd,
            depth,
            root,
            slot,
            reservation,
            ticket,
            turn,
            cancel,
        })
    }
}

/// A child's delegation depth (B20): one below its parent, where the
/// parent counts as the larger of its header's depth and its options'
/// `subagent_depth`; the request's `subagent_depth` may deepen the child
/// further, never make it shallower.
///
/// # Errors
/// `INVALID_REQUEST` when the depth leaves `u32`.
fn child_depth(
    parent: &dyn Agent,
    options: Option<&dsh_core::AgentOptions>,
) -> Result<u32, SubagentError> {
    let parent_depth = parent
        .header()
        .delegation_depth
        .max(parent.options().subagent_depth.unwrap_or(0));
    let depth = parent_depth.checked_add(1).ok_or_else(|| {
        SubagentError::Admission(AdmissionError::InvalidRequest(
            "the delegation depth overflows".into(),
        ))
    })?;
    Ok(depth.max(options.and_then(|o| o.subagent_depth).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_core::{Epoch, SessionId};
    use futures::FutureExt;
    use std::future::Future;

    #[test]
    fn a_turn_goes_when_every_earlier_one_is_done_and_not_before() {
        let (publications, parent) = queue();
        let first = publications.take(&parent);
        let second = publications.take(&parent);
        let third = publications.take(&parent);
        let mut waiting = Box::pin(third.wait());
        assert!((&mut waiting).now_or_never().is_none());
        // A turn behind the head leaving changes nothing for the others.
        drop(second);
        assert!((&mut waiting).now_or_never().is_none());
        // The head leaving wakes the new head, which goes.
        drop(first);
        assert!((&mut waiting).now_or_never().is_some());
        drop(waiting);
        assert!(first_is(&publications, &parent, third.ticket));
        drop(third);
        assert!(lock(&publications.queues).is_empty());
    }

    /// Empty publications and the parent whose queue a test uses.
    fn queue() -> (Arc<Publications>, AgentRef) {
        let parent = AgentRef {
            id: SessionId::new("p").unwrap(),
            epoch: Epoch::NONE,
        };
        (Arc::default(), parent)
    }

    /// Counts how often it was woken.
    #[derive(Default)]
    struct Woken(std::sync::atomic::AtomicUsize);

    impl futures::task::ArcWake for Woken {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_head_leaving_wakes_only_the_turn_behind_it() {
        let (publications, parent) = queue();
        let head = publications.take(&parent);
        let behind: Vec<PublishTurn> = (0..4).map(|_| publications.take(&parent)).collect();
        let wakers: Vec<Arc<Woken>> = behind.iter().map(|_| Arc::default()).collect();
        let mut waits: Vec<_> = behind.iter().map(|turn| Box::pin(turn.wait())).collect();
        for (wait, woken) in waits.iter_mut().zip(&wakers) {
            let waker = futures::task::waker(woken.clone());
            let mut cx = std::task::Context::from_waker(&waker);
            assert!(wait.as_mut().poll(&mut cx).is_pending());
        }
        drop(head);
        let woken: Vec<usize> = wakers.iter().map(|w| w.0.load(Ordering::SeqCst)).collect();
        assert_eq!(woken, [1, 0, 0, 0]);
    }

    fn first_is(publications: &Publications, parent: &AgentRef, ticket: u64) -> bool {
        lock(&publications.queues)
            .get(parent)
            .and_then(|queue| queue.keys().next().copied())
            == Some(ticket)
    }
}
