//! The input gate of one activation: the one place where its monitor and
//! the senders to its child agree on whether a message lands in this
//! activation or goes to a later resume. A sender holds a permit (shared)
//! across its check and its send; the monitor closes the gate only while
//! no permit is out and only if no delivery landed since it found the
//! child quiet, so no message is ever accepted unseen by an activation
//! that has decided to retire.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::{RwLock, RwLockReadGuard};

/// Whether an activation takes input, and what its monitor last saw.
#[derive(Default)]
pub(crate) struct InputGate {
    closed: AtomicBool,
    /// Shared by every permit; taken exclusively to close the gate.
    permits: RwLock<()>,
    /// Deliveries that landed so far.
    delivered: AtomicU64,
}

/// The deliveries an [`InputGate`] had seen at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen(u64);

/// Leave to deliver one message while the gate stays open; the gate cannot
/// close until it is dropped.
pub(crate) struct InputPermit<'a> {
    gate: &'a InputGate,
    _shared: RwLockReadGuard<'a, ()>,
}

impl InputPermit<'_> {
    /// The message landed: a monitor deciding to retire sees it.
    pub(crate) fn delivered(self) {
        self.gate.delivered.fetch_add(1, Ordering::SeqCst);
    }
}

impl InputGate {
    /// A permit to deliver one message, or `None` once the gate is closed
    /// (the message goes to a later resume).
    ///
    /// # Cancel safety
    /// Cancel safe: dropped while waiting, it took nothing.
    pub(crate) async fn admit(&self) -> Option<InputPermit<'_>> {
        let shared = self.permits.read().await;
        (!self.is_closed()).then_some(InputPermit {
            gate: self,
            _shared: shared,
        })
    }

    /// Close the gate if no delivery landed since `seen` (waiting for the
    /// permits out to be dropped first). Returns whether it closed.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped while waiting, it changed nothing.
    pub(crate) async fn retire_if_quiet(&self, seen: Seen) -> bool {
        let _exclusive = self.permits.write().await;
        let quiet = self.delivered.load(Ordering::SeqCst) == seen.0;
        if quiet {
            self.closed.store(true, Ordering::SeqCst);
        }
        quiet
    }

    /// The deliveries landed so far, to pass to
    /// [`InputGate::retire_if_quiet`] once the child is found quiet.
    pub(crate) fn seen(&self) -> Seen {
        Seen(self.delivered.load(Ordering::SeqCst))
    }

    /// Close the gate whatever is in flight (the activation is stopping or
    /// its run ended on its own).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether the gate is closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn a_delivery_since_the_monitor_looked_keeps_the_gate_open() {
        let gate = InputGate::default();
        let seen = gate.seen();
        let permit = gate.admit().now_or_never().flatten().unwrap();
        // A permit out holds the monitor off.
        assert!(
            Box::pin(gate.retire_if_quiet(seen))
                .now_or_never()
                .is_none()
        );
        permit.delivered();
        assert_eq!(gate.retire_if_quiet(seen).now_or_never(), Some(false));
        assert!(!gate.is_closed());
        let seen = gate.seen();
        assert_eq!(gate.retire_if_quiet(seen).now_or_never(), Some(true));
        assert!(gate.is_closed());
        assert!(gate.admit().now_or_never().unwrap().is_none());
    }
}
