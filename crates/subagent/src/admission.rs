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
use std::future::Future;
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
/// when it is admitted, and its catalog entry is written only after every
/// earlier start under that parent wrote its own or gave up. So concurrent
/// starts (parallel tool calls) are cataloged, listed and named in the
/// order they were made, whichever creation finishes first.
///
/// No start waits for its turn to come round to write: a start that is
/// ready leaves its write in its turn ([`PublishTurn::publish`]), and
/// whichever start finds the head of the queue ready writes every ready
/// entry from there in order, in one pass on its own task, until it
/// reaches a start still being created (whose owner carries on when it is
/// ready). A start whose entry another wrote is woken once, with its
/// result; nobody is woken to write one entry and wake the next.
#[derive(Default)]
pub(crate) struct Publications {
    queues: Mutex<IdMap<AgentRef, PublishQueue>>,
    next: AtomicU64,
}

/// One parent's turns, in call order.
#[derive(Default)]
struct PublishQueue {
    turns: std::collections::BTreeMap<u64, Turn>,
    /// Whether a start is writing this queue's ready entries now.
    writing: bool,
}

/// A write left to run in call order; it hands its result to its owner.
type Job = futures::future::BoxFuture<'static, ()>;

struct Turn {
    /// Told when the turn should look again: it may lead.
    woken: Arc<Notify>,
    /// The start's write, once it is ready.
    job: Option<Job>,
}

/// One start's place in its parent's publication order; dropping it
/// before its write was taken lets the next one go.
pub(crate) struct PublishTurn {
    publications: Arc<Publications>,
    parent: AgentRef,
    ticket: u64,
    woken: Arc<Notify>,
}

impl Publications {
    /// The next turn under `parent`.
    pub(crate) fn take(self: &Arc<Self>, parent: &AgentRef) -> PublishTurn {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let woken = Arc::new(Notify::new());
        lock(&self.queues)
            .entry(parent.clone())
            .or_default()
            .turns
            .insert(
                ticket,
                Turn {
                    woken: woken.clone(),
                    job: None,
                },
            );
        PublishTurn {
            publications: self.clone(),
            parent: parent.clone(),
            ticket,
            woken,
        }
    }

    /// How many parents have starts waiting to publish.
    pub(crate) fn len(&self) -> usize {
        lock(&self.queues).len()
    }

    /// Take the lead of `parent`'s queue if its head is ready and nobody
    /// writes it.
    fn lead(&self, parent: &AgentRef) -> bool {
        let mut queues = lock(&self.queues);
        let Some(queue) = queues.get_mut(parent) else {
            return false;
        };
        let ready = queue
            .turns
            .values()
            .next()
            .is_some_and(|head| head.job.is_some());
        if queue.writing || !ready {
            return false;
        }
        queue.writing = true;
        true
    }

    /// Write the ready entries at the head of `parent`'s queue, in order,
    /// until its head is a start still being created or none is left.
    async fn write_ready(&self, parent: &AgentRef) {
        let _leading = Leading {
            publications: self,
            parent,
        };
        loop {
            let job = {
                let mut queues = lock(&self.queues);
                let Some(queue) = queues.get_mut(parent) else {
                    return;
                };
                match queue.turns.first_entry() {
                    Some(head) if head.get().job.is_some() => head.remove().job,
                    _ => return,
                }
            };
            if let Some(job) = job {
                job.await;
            }
        }
    }

    /// After a change at the head of `queue`: a ready head nobody writes
    /// is told to lead; an empty queue goes.
    fn settle_head(queues: &mut IdMap<AgentRef, PublishQueue>, parent: &AgentRef) {
        let Some(queue) = queues.get_mut(parent) else {
            return;
        };
        match queue.turns.values().next() {
            None if !queue.writing => {
                queues.remove(parent);
            }
            Some(head) if !queue.writing && head.job.is_some() => head.woken.notify_one(),
            _ => {}
        }
    }
}

/// Marks a queue as written by one start until dropped (also when that
/// start's future is dropped mid-write, so the queue never stays claimed).
struct Leading<'a> {
    publications: &'a Publications,
    parent: &'a AgentRef,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let mut queues = lock(&self.publications.queues);
        if let Some(queue) = queues.get_mut(self.parent) {
            queue.writing = false;
        }
        Publications::settle_head(&mut queues, self.parent);
    }
}

impl PublishTurn {
    /// Run `write` (the start's catalog entry and what must follow it in
    /// the parent's log) once every earlier start under the same parent
    /// wrote its own or gave up, and return what it returned: this start
    /// writes it, with any ready ones behind it, when its turn is at the
    /// head; otherwise the start ahead does. Until another start took
    /// the write, `cancel` withdraws it: `None` then, and it never runs.
    ///
    /// # Cancel safety
    /// Meant to run as work the runtime owns (`Owned`). Dropped before the
    /// write was taken, it withdraws it; dropped while writing, the write
    /// being run is abandoned (as a dropped `Agent::record` may be) and
    /// the queue goes on.
    pub(crate) async fn publish<T: Send + 'static>(
        self,
        cancel: Option<&CancellationToken>,
        write: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let (done, mut written) = tokio::sync::oneshot::channel();
        {
            let mut queues = lock(&self.publications.queues);
            if let Some(turn) = queues
                .get_mut(&self.parent)
                .and_then(|queue| queue.turns.get_mut(&self.ticket))
            {
                turn.job = Some(Box::pin(async move {
                    // The owner may have gone (a drop): nobody to tell.
                    let _ = done.send(write.await);
                }));
            }
        }
        loop {
            if self.publications.lead(&self.parent) {
                self.publications.write_ready(&self.parent).await;
            }
            let cancelled = async {
                match cancel {
                    Some(cancel) => cancel.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                result = &mut written => return result.ok(),
                () = self.woken.notified() => {}
                () = cancelled => {
                    if self.withdraw() {
                        return None;
                    }
                    // Taken already: it is being written.
                    return written.await.ok();
                }
            }
        }
    }

    /// Leave the queue unless this turn's write was taken; returns whether
    /// it left.
    fn withdraw(&self) -> bool {
        let mut queues = lock(&self.publications.queues);
        let removed = queues
            .get_mut(&self.parent)
            .and_then(|queue| queue.turns.remove(&self.ticket))
            .is_some();
        if removed {
            Publications::settle_head(&mut queues, &self.parent);
        }
        removed
    }
}

impl Drop for PublishTurn {
    fn drop(&mut self) {
        self.withdraw();
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

    /// Empty publications and the parent whose queue a test uses.
    fn queue() -> (Arc<Publications>, AgentRef) {
        let parent = AgentRef {
            id: SessionId::new("p").unwrap(),
            epoch: Epoch::NONE,
        };
        (Arc::default(), parent)
    }

    /// A write that notes its place in `log` and returns it.
    fn noting(log: &Arc<std::sync::Mutex<Vec<u64>>>, n: u64) -> impl Future<Output = u64> + use<> {
        let log = log.clone();
        async move {
            lock(&log).push(n);
            n
        }
    }

    #[test]
    fn entries_are_written_in_call_order_by_the_start_that_finds_the_head_ready() {
        let (publications, parent) = queue();
        let log = Arc::default();
        let turns: Vec<PublishTurn> = (0..4).map(|_| publications.take(&parent)).collect();
        let mut publishing: Vec<_> = turns
            .into_iter()
            .zip(0..)
            .map(|(turn, n)| Box::pin(turn.publish(None, noting(&log, n))))
            .collect();
        // The later ones are ready first: nothing is written before the first.
        for later in publishing.iter_mut().skip(1).rev() {
            assert!(later.as_mut().now_or_never().is_none());
        }
        assert!(lock(&log).is_empty());
        // The first writes its own and every ready one behind it, in one call.
        assert_eq!(publishing[0].as_mut().now_or_never(), Some(Some(0)));
        assert_eq!(*lock(&log), [0, 1, 2, 3]);
        for (n, later) in publishing.iter_mut().enumerate().skip(1) {
            assert_eq!(later.as_mut().now_or_never(), Some(Some(n as u64)));
        }
        drop(publishing);
        assert!(lock(&publications.queues).is_empty());
    }

    #[test]
    fn a_start_that_gives_up_lets_the_ones_behind_it_go_and_a_withdrawn_write_never_runs() {
        let (publications, parent) = queue();
        let log = Arc::default();
        let first = publications.take(&parent);
        let second = publications.take(&parent);
        let third = publications.take(&parent);
        let cancel = CancellationToken::new();
        let mut second = Box::pin(second.publish(Some(&cancel), noting(&log, 1)));
        let mut third = Box::pin(third.publish(None, noting(&log, 2)));
        assert!(second.as_mut().now_or_never().is_none());
        assert!(third.as_mut().now_or_never().is_none());
        // Cancelled while waiting: withdrawn, never written.
        cancel.cancel();
        assert_eq!(second.as_mut().now_or_never(), Some(None));
        // The first gives up: the third, now at the head, writes.
        drop(first);
        assert_eq!(third.as_mut().now_or_never(), Some(Some(2)));
        assert_eq!(*lock(&log), [2]);
        drop((second, third));
        assert!(lock(&publications.queues).is_empty());
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
    fn starts_written_by_another_are_woken_once_each_and_none_to_write() {
        let (publications, parent) = queue();
        let log = Arc::default();
        let head = publications.take(&parent);
        let behind: Vec<PublishTurn> = (0..4).map(|_| publications.take(&parent)).collect();
        let wakers: Vec<Arc<Woken>> = behind.iter().map(|_| Arc::default()).collect();
        let mut waits: Vec<_> = behind
            .into_iter()
            .zip(1..)
            .map(|(turn, n)| Box::pin(turn.publish(None, noting(&log, n))))
            .collect();
        for (wait, woken) in waits.iter_mut().zip(&wakers) {
            let waker = futures::task::waker(woken.clone());
            let mut cx = std::task::Context::from_waker(&waker);
            assert!(wait.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(
            head.publish(None, noting(&log, 0)).now_or_never(),
            Some(Some(0))
        );
        assert_eq!(*lock(&log), [0, 1, 2, 3, 4]);
        let woken: Vec<usize> = wakers.iter().map(|w| w.0.load(Ordering::SeqCst)).collect();
        assert_eq!(woken, [1, 1, 1, 1]);
    }
}
