//! Work that must finish once begun, run without a task hop: the caller's
//! future polls it in place, so a write that completes at once (the
//! in-memory store, a JSONL append without a sync) costs no spawn and no
//! wake-up of another worker; a caller that goes away before it finished
//! hands the rest to the harness's task tracker, where it runs to its end.
//! Nothing begun is ever dropped half done, exactly as if it had been
//! spawned from the start.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tokio_util::task::TaskTracker;

/// A future finished on the tracker when it is dropped unfinished.
pub(crate) struct Finish<T: Send + 'static> {
    work: Option<BoxFuture<'static, T>>,
    tasks: TaskTracker,
}

impl<T: Send + 'static> Finish<T> {
    /// Own `work`; a drop before it is done finishes it on `tasks`.
    pub(crate) fn new(work: impl Future<Output = T> + Send + 'static, tasks: &TaskTracker) -> Self {
        Self {
            work: Some(Box::pin(work)),
            tasks: tasks.clone(),
        }
    }
}

impl<T: Send + 'static> Future for Finish<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(work) = self.work.as_mut() else {
            // Polled after completion: there is nothing more to give.
            return Poll::Pending;
        };
        let output = std::task::ready!(work.as_mut().poll(cx));
        self.work = None;
        Poll::Ready(output)
    }
}

impl<T: Send + 'static> Drop for Finish<T> {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(self.tasks.track_future(async move {
                    let _ = work.await;
                }));
            }
            // No runtime left to finish it on: the process is ending.
            Err(_) => drop(work),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use futures::FutureExt;
    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn work_that_completes_at_once_runs_in_the_callers_poll() {
        let tasks = TaskTracker::new();
        let finish = Finish::new(async { 7 }, &tasks);
        assert_eq!(finish.now_or_never(), Some(7));
        assert!(tasks.is_empty(), "no task was spawned");
    }

    #[tokio::test]
    async fn dropped_at_its_await_the_work_finishes_on_the_tracker() {
        let tasks = TaskTracker::new();
        let (gate, opened) = oneshot::channel::<()>();
        let done = Arc::new(AtomicBool::new(false));
        let mut finish = Box::pin(Finish::new(
            {
                let done = done.clone();
                async move {
                    opened.await.unwrap();
                    done.store(true, Ordering::SeqCst);
                }
            },
            &tasks,
        ));
        // Poll to the gate, then drop: the rest is the tracker's.
        assert!((&mut finish).now_or_never().is_none());
        drop(finish);
        assert_eq!(tasks.len(), 1);
        assert!(!done.load(Ordering::SeqCst));
        gate.send(()).unwrap();
        tasks.close();
        tokio::time::timeout(std::time::Duration::from_secs(10), tasks.wait())
            .await
            .expect("the handed-over work finishes");
        assert!(done.load(Ordering::SeqCst));
    }
}
