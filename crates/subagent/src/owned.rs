//! Work the runtime owns once it has begun: the caller's future polls it,
//! so it runs in the caller's order with no extra task, but a caller that
//! goes away does not abandon it. Dropping an unfinished [`Owned`] cancels
//! its token (so work not yet published rolls back) and hands the rest to
//! the runtime's task tracker, where it finishes: rolled back, or published
//! and monitored. Nothing is ever left half done by a drop.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use dsh_core::CancellationToken;
use futures::future::BoxFuture;
use tokio_util::task::TaskTracker;

/// A future finished on the tracker when it is dropped unfinished.
pub(crate) struct Owned<T: Send + 'static> {
    work: Option<BoxFuture<'static, T>>,
    tasks: TaskTracker,
    cancel: CancellationToken,
}

impl<T: Send + 'static> Owned<T> {
    /// Own `work`; a drop cancels `cancel` and finishes it on `tasks`.
    pub(crate) fn new(
        work: impl Future<Output = T> + Send + 'static,
        tasks: &TaskTracker,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            work: Some(Box::pin(work)),
            tasks: tasks.clone(),
            cancel,
        }
    }
}

impl<T: Send + 'static> Future for Owned<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(work) = self.work.as_mut() else {
            // Polled after completion: there is nothing more to give.
            return Poll::Pending;
        };
        match work.as_mut().poll(cx) {
            Poll::Ready(output) => {
                self.work = None;
                Poll::Ready(output)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: Send + 'static> Drop for Owned<T> {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        self.cancel.cancel();
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

impl crate::runtime::SubagentRuntime {
    /// `work` (given a clone of the runtime) as work this runtime owns: a
    /// drop of the returned future cancels `stop` and finishes the work on
    /// the runtime's tracker.
    pub(crate) fn own<T, F>(
        &self,
        stop: CancellationToken,
        work: impl FnOnce(crate::runtime::SubagentRuntime) -> F,
    ) -> Owned<T>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        Owned::new(work(self.clone()), self.tasks(), stop)
    }
}
