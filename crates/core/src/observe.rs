//! Observation event bus: a typed, synchronous fan-out of events to listeners.
//!
//! Emitters call [`EventBus::emit`]; every registered listener sees the event in registration
//! order. The bus must never let a listener disturb the emitter or its peers: a panicking
//! listener is caught, logged and skipped, `emit` never panics, and the internal lock is never
//! held while a listener runs (so listeners may listen, unsubscribe or emit re-entrantly).
//!
//! [`EventBus::subscribe`] is the channel view for async readers. Its buffer is bounded, as the
//! runtime's tree stream (a tokio broadcast of the same size) is: a subscriber that falls
//! [`SUBSCRIBE_BUFFER`] events behind loses the oldest ones it has not read, and
//! [`Events::missed`] says how many. A reader that must see every event of some kind (an end it
//! waits for) uses [`EventBus::listen`], which runs in the emitter and loses nothing.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::sync::Notify;
pub use tokio::sync::mpsc::error::TryRecvError;

/// How many unread events a [`EventBus::subscribe`] channel keeps: past it, the oldest is
/// dropped and counted ([`Events::missed`]). The runtime's tree stream keeps as many.
pub const SUBSCRIBE_BUFFER: usize = 1024;

type Listener<E> = Arc<dyn Fn(&E) + Send + Sync>;

struct Registry<E> {
    next_id: u64,
    listeners: Vec<(u64, Listener<E>)>,
}

fn lock<E>(registry: &Mutex<Registry<E>>) -> MutexGuard<'_, Registry<E>> {
    registry.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Type-erased removal handle so [`Subscription`] need not be generic over the event type.
trait Unlisten: Send + Sync {
    fn unlisten(&self, id: u64);
}

impl<E> Unlisten for Mutex<Registry<E>> {
    fn unlisten(&self, id: u64) {
        let mut registry = lock(self);
        let index = registry.listeners.iter().position(|(lid, _)| *lid == id);
        let removed = index.map(|i| registry.listeners.remove(i));
        drop(registry);
        // Drop the listener outside the lock: its captures may own Subscriptions of this bus.
        drop(removed);
    }
}

/// A typed, synchronous event bus; clones share the same listeners.
pub struct EventBus<E> {
    registry: Arc<Mutex<Registry<E>>>,
}

impl<E> Clone for EventBus<E> {
    fn clone(&self) -> Self {
        Self {
            registry: Arc::clone(&self.registry),
        }
    }
}

impl<E> Default for EventBus<E> {
    fn default() -> Self {
        Self {
            registry: Arc::new(Mutex::new(Registry {
                next_id: 0,
                listeners: Vec::new(),
            })),
        }
    }
}

impl<E> fmt::Debug for EventBus<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let listeners = lock(&self.registry).listeners.len();
        f.debug_struct("EventBus")
            .field("listeners", &listeners)
            .finish()
    }
}

impl<E: Send + Sync + 'static> EventBus<E> {
    /// Create a bus with no listeners.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a listener; it stays until the returned [`Subscription`] is dropped (or
    /// [`detach`](Subscription::detach)ed).
    pub fn listen(&self, listener: impl Fn(&E) + Send + Sync + 'static) -> Subscription {
        let mut registry = lock(&self.registry);
        let id = registry.next_id;
        registry.next_id += 1;
        registry.listeners.push((id, Arc::new(listener)));
        drop(registry);
        let weak: Weak<Mutex<Registry<E>>> = Arc::downgrade(&self.registry);
        Subscription {
            id,
            bus: Some(weak),
        }
    }

    /// Call every listener in registration order with `event`.
    ///
    /// The listener list is snapshotted first, so listeners registered during this call do not
    /// see this event and listeners removed during it may still see it. A panicking listener is
    /// logged and skipped; `emit` itself never panics.
    pub fn emit(&self, event: &E) {
        let snapshot: Vec<(u64, Listener<E>)> = lock(&self.registry).listeners.clone();
        Self::deliver(snapshot, event);
    }

    /// [`emit`](Self::emit) the event `build` makes, calling `build` only
    /// when a listener is registered: an emitter whose event costs copies
    /// (ids, names, a result) pays nothing while nobody listens. Listeners
    /// are snapshotted as by `emit`, before `build` runs.
    pub fn emit_with(&self, build: impl FnOnce() -> E) {
        let snapshot: Vec<(u64, Listener<E>)> = lock(&self.registry).listeners.clone();
        if snapshot.is_empty() {
            return;
        }
        Self::deliver(snapshot, &build());
    }

    fn deliver(snapshot: Vec<(u64, Listener<E>)>, event: &E) {
        for (id, listener) in snapshot {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| listener(event))) {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "<non-string panic payload>".to_owned());
                tracing::error!(listener = id, panic = %message, "event listener panicked; skipped");
            }
        }
    }

    /// A channel view: every event emitted after this call is cloned into the returned
    /// [`Events`], which keeps the newest [`SUBSCRIBE_BUFFER`] it has not read; older ones are
    /// dropped for it and counted ([`Events::missed`]), so a slow reader never makes the bus
    /// grow without bound nor slows the emitter.
    ///
    /// Delivery stops when the returned [`Subscription`] is dropped (or the bus is); the
    /// receiver then reads what it holds and ends.
    pub fn subscribe(&self) -> (Subscription, Events<E>)
    where
        E: Clone,
    {
        let channel = Arc::new(Channel {
            queue: Mutex::new(Queue {
                events: VecDeque::new(),
                missed: 0,
                closed: false,
            }),
            ready: Notify::new(),
        });
        let feed = Feed(Arc::clone(&channel));
        let subscription = self.listen(move |event: &E| feed.push(event.clone()));
        (subscription, Events { channel })
    }

    /// The number of currently registered listeners.
    pub fn listener_count(&self) -> usize {
        lock(&self.registry).listeners.len()
    }
}

/// What a [`EventBus::subscribe`] channel holds.
struct Queue<E> {
    /// Unread events, oldest first; at most [`SUBSCRIBE_BUFFER`].
    events: VecDeque<E>,
    /// Events dropped unread since the subscription began.
    missed: u64,
    /// The listener is gone: nothing more arrives.
    closed: bool,
}

/// The state a subscription's listener and its [`Events`] share.
struct Channel<E> {
    queue: Mutex<Queue<E>>,
    /// Wakes the (single) reader after a push or the close.
    ready: Notify,
}

fn queue<E>(channel: &Channel<E>) -> MutexGuard<'_, Queue<E>> {
    channel.queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The listener's end of a channel: dropping it (with the listener) closes the channel.
struct Feed<E>(Arc<Channel<E>>);

impl<E> Feed<E> {
    fn push(&self, event: E) {
        let mut queue = queue(&self.0);
        if queue.events.len() >= SUBSCRIBE_BUFFER {
            queue.events.pop_front();
            queue.missed += 1;
        }
        queue.events.push_back(event);
        drop(queue);
        self.0.ready.notify_one();
    }
}

impl<E> Drop for Feed<E> {
    fn drop(&mut self) {
        queue(&self.0).closed = true;
        self.0.ready.notify_one();
    }
}

/// The reading end of [`EventBus::subscribe`]: the events emitted since, oldest first, but for
/// those dropped because it fell [`SUBSCRIBE_BUFFER`] behind ([`missed`](Self::missed)).
pub struct Events<E> {
    channel: Arc<Channel<E>>,
}

impl<E> Events<E> {
    /// The next unread event; `None` once the subscription (or the bus) is gone and every
    /// event it delivered was read. Events dropped while this reader lagged are skipped
    /// (counted by [`missed`](Self::missed)).
    ///
    /// # Cancel safety
    /// Cancel safe: an event is taken only when it is returned.
    pub async fn recv(&mut self) -> Option<E> {
        loop {
            match self.try_recv() {
                Ok(event) => return Some(event),
                Err(TryRecvError::Disconnected) => return None,
                // A push after this check leaves a permit, so the wait cannot miss it.
                Err(TryRecvError::Empty) => self.channel.ready.notified().await,
            }
        }
    }

    /// The next unread event if there is one now.
    ///
    /// # Errors
    /// [`TryRecvError::Empty`] when nothing is unread, [`TryRecvError::Disconnected`] when,
    /// besides, nothing more will arrive.
    pub fn try_recv(&mut self) -> Result<E, TryRecvError> {
        let mut queue = queue(&self.channel);
        match queue.events.pop_front() {
            Some(event) => Ok(event),
            None if queue.closed => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// How many events this reader lost since it subscribed, dropped unread because it was
    /// [`SUBSCRIBE_BUFFER`] behind.
    pub fn missed(&self) -> u64 {
        queue(&self.channel).missed
    }
}

impl<E> fmt::Debug for Events<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let queue = queue(&self.channel);
        f.debug_struct("Events")
            .field("unread", &queue.events.len())
            .field("missed", &queue.missed)
            .field("closed", &queue.closed)
            .finish()
    }
}

/// Keeps a listener registered; dropping it removes the listener (a dropped bus is fine).
#[must_use = "dropping a Subscription immediately removes its listener; call `detach` to keep it"]
pub struct Subscription {
    id: u64,
    bus: Option<Weak<dyn Unlisten>>,
}

impl Subscription {
    /// Keep the listener registered for the bus's lifetime.
    pub fn detach(mut self) {
        self.bus = None;
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("attached", &self.bus.is_some())
            .finish()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(bus) = self.bus.take().and_then(|weak| weak.upgrade()) {
            bus.unlisten(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn recorder(bus: &EventBus<u32>, log: &Arc<Mutex<Vec<String>>>, tag: &str) -> Subscription {
        let (log, tag) = (Arc::clone(log), tag.to_owned());
        bus.listen(move |e| log.lock().unwrap().push(format!("{tag}{e}")))
    }

    #[test]
    fn delivers_in_registration_order() {
        let bus = EventBus::new();
        let log = Arc::new(Mutex::new(Vec::new()));
        let _a = recorder(&bus, &log, "a");
        let _b = recorder(&bus, &log, "b");
        let _c = recorder(&bus, &log, "c");
        bus.emit(&1);
        assert_eq!(*log.lock().unwrap(), ["a1", "b1", "c1"]);
        assert_eq!(format!("{bus:?}"), "EventBus { listeners: 3 }");
    }

    #[test]
    fn emit_with_builds_the_event_only_for_a_listener() {
        let bus = EventBus::new();
        let built = AtomicUsize::new(0);
        let build = || {
            built.fetch_add(1, Ordering::SeqCst);
            5
        };
        bus.emit_with(build);
        assert_eq!(built.load(Ordering::SeqCst), 0, "nobody listens");
        let log = Arc::new(Mutex::new(Vec::new()));
        let a = recorder(&bus, &log, "a");
        let b = recorder(&bus, &log, "b");
        bus.emit_with(build);
        assert_eq!(built.load(Ordering::SeqCst), 1, "built once for both");
        assert_eq!(*log.lock().unwrap(), ["a5", "b5"]);
        drop(a);
        drop(b);
        bus.emit_with(build);
        assert_eq!(built.load(Ordering::SeqCst), 1, "nobody listens again");
    }

    #[test]
    fn panicking_listener_is_isolated() {
        let bus = EventBus::new();
        let log = Arc::new(Mutex::new(Vec::new()));
        let _a = recorder(&bus, &log, "a");
        let _p = bus.listen(|e: &u32| panic!("boom {e}"));
        let _s = bus.listen(|_: &u32| std::panic::panic_any(7_u8));
        let _b = recorder(&bus, &log, "b");
        bus.emit(&1);
        bus.emit(&2);
        assert_eq!(*log.lock().unwrap(), ["a1", "b1", "a2", "b2"]);
    }

    #[test]
    fn dropping_subscription_stops_delivery_and_detach_keeps_it() {
        let bus = EventBus::new();
        let log = Arc::new(Mutex::new(Vec::new()));
        let a = recorder(&bus, &log, "a");
        recorder(&bus, &log, "b").detach();
        bus.emit(&1);
        drop(a);
        assert_eq!(bus.listener_count(), 1);
        bus.emit(&2);
        assert_eq!(*log.lock().unwrap(), ["a1", "b1", "b2"]);
        let orphan = recorder(&bus, &log, "c");
        drop(bus);
        drop(orphan); // bus already gone: no panic
    }

    #[test]
    fn reentrant_emit_listen_and_unsubscribe() {
        let bus = EventBus::new();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (inner, log2) = (bus.clone(), Arc::clone(&log));
        let _r = bus.listen(move |e: &u32| {
            if *e < 3 {
                inner.emit(&(e + 1));
            }
            let late = recorder(&inner, &log2, "late");
            drop(late);
        });
        let _a = recorder(&bus, &log, "a");
        bus.emit(&1);
        assert_eq!(*log.lock().unwrap(), ["a3", "a2", "a1"]);
        assert_eq!(bus.listener_count(), 2);
    }

    #[test]
    fn dropping_a_listener_that_owns_a_subscription_does_not_deadlock() {
        let bus = EventBus::<u32>::new();
        let inner = bus.listen(|_| {});
        let outer = bus.listen(move |_| {
            let _keep = &inner;
        });
        assert_eq!(bus.listener_count(), 2);
        drop(outer);
        assert_eq!(bus.listener_count(), 0);
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<EventBus<u32>>();
        check::<Subscription>();
    }

    #[test]
    fn listener_registered_during_emit_misses_that_event() {
        let bus = EventBus::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let (inner, calls2) = (bus.clone(), Arc::clone(&calls));
        let _r = bus.listen(move |_: &u32| {
            let calls3 = Arc::clone(&calls2);
            inner
                .listen(move |_| {
                    calls3.fetch_add(1, Ordering::SeqCst);
                })
                .detach();
        });
        bus.emit(&1);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        bus.emit(&2);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    proptest::proptest! {
        /// However many events a reader leaves unread, the channel keeps at most
        /// `SUBSCRIBE_BUFFER` of them (the newest, in order), and the reader learns how many
        /// it lost; what it read before falling behind is not counted.
        #[test]
        fn a_slow_subscriber_keeps_the_newest_and_counts_the_rest(
            read_first in 0_u32..64,
            unread in 0_usize..3 * SUBSCRIBE_BUFFER,
        ) {
            let bus = EventBus::<u32>::new();
            let (_sub, mut rx) = bus.subscribe();
            for event in 0..read_first {
                bus.emit(&event);
                proptest::prop_assert_eq!(rx.try_recv(), Ok(event));
            }
            let total = read_first + u32::try_from(unread).unwrap();
            for event in read_first..total {
                bus.emit(&event);
            }
            let kept = unread.min(SUBSCRIBE_BUFFER);
            {
                let queue = queue(&rx.channel);
                proptest::prop_assert_eq!(queue.events.len(), kept);
                proptest::prop_assert!(queue.events.capacity() <= 2 * SUBSCRIBE_BUFFER);
            }
            proptest::prop_assert_eq!(rx.missed(), u64::try_from(unread - kept).unwrap());
            let mut seen = Vec::new();
            while let Ok(event) = rx.try_recv() {
                seen.push(event);
            }
            let newest: Vec<u32> = (total - u32::try_from(kept).unwrap()..total).collect();
            proptest::prop_assert_eq!(seen, newest);
            proptest::prop_assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        }
    }

    #[tokio::test]
    async fn a_waiting_reader_wakes_for_an_event_and_for_the_close() {
        let bus = EventBus::<u32>::new();
        let (sub, mut rx) = bus.subscribe();
        let reader = tokio::spawn(async move {
            let first = rx.recv().await;
            let second = rx.recv().await;
            (first, second, rx.missed())
        });
        tokio::task::yield_now().await;
        bus.emit(&7);
        drop(sub);
        assert_eq!(reader.await.unwrap(), (Some(7), None, 0));
    }

    #[tokio::test]
    async fn subscribe_channel_receives_events() {
        let bus = EventBus::new();
        bus.emit(&String::from("before"));
        let (sub, mut rx) = bus.subscribe();
        bus.emit(&String::from("x"));
        bus.emit(&String::from("y"));
        assert_eq!(rx.recv().await.as_deref(), Some("x"));
        assert_eq!(rx.recv().await.as_deref(), Some("y"));
        drop(sub);
        bus.emit(&String::from("z"));
        assert_eq!(rx.recv().await, None);
    }
}
