//! Bounded waiting for tests: [`until`] waits for a condition and
//! [`bounded`] awaits a future, each under one generous wall-clock deadline
//! ([`DEADLINE`]) that panics with the caller's location instead of hanging
//! the suite. Neither is a timing assertion: a test that passes does so
//! however slow the machine; only a wait that would never end fails. Both
//! measure the deadline on the wall clock, so they also work under tokio's
//! paused time, and [`bounded`] arms no tokio timer at all (it cannot make a
//! paused clock advance).

use std::future::Future;
use std::panic::Location;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// How long [`until`] and [`bounded`] wait before they fail the test. Far
/// longer than any correct wait takes, on any machine this runs on.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// How long [`until`] sleeps between two looks at its condition, after
/// yielding to the scheduler first.
const POLL: Duration = Duration::from_millis(2);

/// Wait until `cond` returns true, looking again after every yield and a
/// short sleep; panic, naming the caller, if it is still false after
/// [`DEADLINE`].
///
/// Use it for a state that another task or thread reaches (a status, a file
/// that appears, a counter); prefer awaiting a signal where the code under
/// test offers one. Under tokio's paused time each sleep advances the
/// virtual clock by a couple of milliseconds when the runtime is idle.
///
/// # Cancel safety
/// Dropping the future only stops waiting; `cond` is never called again.
#[track_caller]
pub fn until(mut cond: impl FnMut() -> bool) -> impl Future<Output = ()> {
    let caller = Location::caller();
    async move {
        let start = Instant::now();
        loop {
            if cond() {
                return;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{caller}: the condition did not hold within {DEADLINE:?}"
            );
            tokio::task::yield_now().await;
            if cond() {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Let every other task run until all of them wait on something no task can
/// give them (a gate, a channel, a timer): for an absence check that can
/// fail. It needs paused time (`#[tokio::test(start_paused = true)]`, a
/// current-thread runtime): the virtual clock jumps to this sleep's end only
/// when no task can run and no blocking task (a JSONL store's I/O) is in
/// flight, so a task that could still finish has finished when it returns.
/// Timers of the code under test that end sooner fire first.
///
/// # Cancel safety
/// Dropping the future only stops waiting.
pub async fn settle() {
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

/// Await `fut`; panic, naming the caller, if it has not finished after
/// [`DEADLINE`] of wall-clock time.
///
/// The deadline is kept by a plain thread, not a tokio timer, so awaiting
/// under paused time does not advance the virtual clock; the thread ends as
/// soon as `fut` does.
///
/// # Cancel safety
/// Dropping the future drops `fut` where it stands and ends the deadline
/// thread.
#[track_caller]
pub fn bounded<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    let caller = Location::caller();
    async move {
        let (fire, fired) = oneshot::channel::<()>();
        let (done, finished) = mpsc::channel::<()>();
        // The thread fires only if nobody hung up on it within the deadline;
        // when `done` is dropped (this future finished or was dropped) it
        // wakes at once and exits. If it cannot start, the wait is unbounded
        // rather than failed.
        let _deadline = std::thread::Builder::new()
            .name("dsh-test-deadline".into())
            .spawn(move || {
                if let Err(RecvTimeoutError::Timeout) = finished.recv_timeout(DEADLINE) {
                    // The receiver is gone only if the future finished.
                    let _ = fire.send(());
                }
            });
        tokio::pin!(fut);
        let output = tokio::select! {
            biased;
            output = &mut fut => output,
            Ok(()) = fired => panic!("{caller}: the future did not finish within {DEADLINE:?}"),
        };
        drop(done);
        output
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn until_returns_once_another_task_sets_the_flag() {
        let flag = Arc::new(AtomicBool::new(false));
        let setter = Arc::clone(&flag);
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            setter.store(true, Ordering::SeqCst);
        });
        until(|| flag.load(Ordering::SeqCst)).await;
        assert!(flag.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_does_not_advance_a_paused_clock() {
        let before = tokio::time::Instant::now();
        let value = bounded(async { 7 }).await;
        assert_eq!(value, 7);
        assert_eq!(tokio::time::Instant::now(), before);
    }

    #[tokio::test]
    async fn bounded_returns_the_output_of_a_pending_then_ready_future() {
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            let _ = tx.send(3);
        });
        assert_eq!(bounded(rx).await, Ok(3));
    }
}
