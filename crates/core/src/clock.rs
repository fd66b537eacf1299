//! The clock every event time comes from, as a seam: [`SystemClock`] reads
//! the system clock (what [`now_millis`](crate::session::now_millis) does),
//! and a host that must produce the same times again (a replay, a
//! journaling engine, a test) injects its own [`Clock`]. This module must
//! never read the system clock outside [`SystemClock`].

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// A source of event times, in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The time now.
    fn now_millis(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> u64 {
        crate::session::now_millis()
    }
}

/// A clock that reads what it was set to: for tests and replays, where
/// time is an input.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock reading `now`.
    pub fn new(now: u64) -> Self {
        Self {
            now: AtomicU64::new(now),
        }
    }

    /// Read `now` from here on.
    pub fn set(&self, now: u64) {
        self.now.store(now, Ordering::Relaxed);
    }

    /// Move the clock `millis` forward.
    pub fn advance(&self, millis: u64) {
        self.now.fetch_add(millis, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_reads_what_it_was_set_to() {
        let clock = ManualClock::new(7);
        assert_eq!(clock.now_millis(), 7);
        clock.advance(5);
        assert_eq!(clock.now_millis(), 12);
        clock.set(3);
        assert_eq!(clock.now_millis(), 3);
    }

    #[test]
    fn the_system_clock_is_past_2020() {
        // 2020-01-01 in milliseconds: a clock that read zero or seconds
        // would fail this.
        assert!(SystemClock.now_millis() > 1_577_836_800_000);
    }
}
