//! Admission: the checks a start or a resume passes before any provider or
//! store work, and the ticket that counts it as in flight. A ticket is taken
//! under the drain lock, so a drain either sees it (and waits for it, after
//! cancelling what it has not published yet) or refuses it; nothing is
//! admitted into a tree that is draining. Capacity slots free themselves on
//! drop.

use crate::AdmissionError;
use crate::ids::{IdMap, IdSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dsh_core::{AgentRef, AgentRegistry, CancellationToken, SessionId};
use tokio::sync::Notify;

use crate::error::SubagentError;
use crate::runtime::lock;

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
#[derive(Default)]
pub(crate) struct Publications {
    queues: Mutex<IdMap<AgentRef, std::collections::BTreeSet<u64>>>,
    changed: Notify,
    next: AtomicU64,
}

/// One start's place in its parent's publication order; dropping it (after
/// the record, or on any failure) lets the next one go.
pub(crate) struct PublishTurn {
    publications: Arc<Publications>,
    parent: AgentRef,
    ticket: u64,
}

impl Publications {
    /// The next turn under `parent`.
    pub(crate) fn take(self: &Arc<Self>, parent: &AgentRef) -> PublishTurn {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.queues)
            .entry(parent.clone())
            .or_default()
            .insert(ticket);
        PublishTurn {
            publications: self.clone(),
            parent: parent.clone(),
            ticket,
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
            let changed = self.publications.changed.notified();
            let first = lock(&self.publications.queues)
                .get(&self.parent)
                .and_then(|queue| queue.first().copied());
            if first.is_none_or(|first| first == self.ticket) {
                return;
            }
            changed.await;
        }
    }
}

impl Drop for PublishTurn {
    fn drop(&mut self) {
        {
            let mut queues = lock(&self.publications.queues);
            if let Some(queue) = queues.get_mut(&self.parent) {
                queue.remove(&self.ticket);
                if queue.is_empty() {
                    queues.remove(&self.parent);
                }
            }
        }
        self.publications.changed.notify_waiters();
    }
}
