//! Observation event bus: a typed, synchronous fan-out of events to listeners.
//!
//! Emitters call [`EventBus::emit`]; every registered listener sees the event in registration
//! order. The bus must never let a listener disturb the emitter or its peers: a panicking
//! listener is caught, logged and skipped, `emit` never panics, and the internal lock is never
//! held while a listener runs (so listeners may listen, unsubscribe or emit re-entrantly).

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::sync::mpsc;

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

    /// A channel view: every event emitted after this call is cloned into an unbounded receiver.
    ///
    /// Delivery stops when the returned [`Subscription`] is dropped; a dropped receiver is ignored.
    pub fn subscribe(&self) -> (Subscription, mpsc::UnboundedReceiver<E>)
    where
        E: Clone,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let subscription = self.listen(move |event: &E| {
            let _ = tx.send(event.clone());
        });
        (subscription, rx)
    }

    /// The number of currently registered listeners.
    pub fn listener_count(&self) -> usize {
        lock(&self.registry).listeners.len()
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
