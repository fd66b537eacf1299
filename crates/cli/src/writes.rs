//! A write to the session directory that fails must reach the person (B56):
//! a full disk, a medium error or a lost permission breaks the log of the
//! agent that wrote, and the loop's own report of it goes to whoever waits
//! on that agent, which for a child is the runtime, not the command.
//! [`Watched`] is a transparent layer over the session store, in the style
//! of a tower layer: it behaves exactly as the store it wraps, and records
//! the first failed write (an append, a checkpoint, or a create the medium
//! refused) in a shared [`WriteFaults`] that `dsh run` and `dsh send` await
//! next to their agents, so a failed write stops the command with the OS
//! error instead of leaving it waiting for a turn that cannot be recorded.
//! It never retries, hides or changes a result. With `--json` it also
//! hands every event a log accepted to the reporter
//! ([`Watched::streaming`]), so the stream holds exactly what the logs do.

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{
    LoadedSession, LogLayer, SessionEvent, SessionHeader, SessionId, SessionLog, SessionStore,
    StoreError, StoreLayer,
};
use tokio::sync::watch;

use crate::observe::Reporter;

/// The first write that failed, shared by every log of one command.
#[derive(Debug)]
pub struct WriteFaults {
    first: watch::Sender<Option<StoreError>>,
}

impl WriteFaults {
    /// No failure yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            first: watch::Sender::new(None),
        })
    }

    /// Record `err` unless an earlier failure is already recorded.
    fn record(&self, err: &StoreError) {
        self.first.send_if_modified(|first| {
            let unset = first.is_none();
            if unset {
                *first = Some(err.clone());
            }
            unset
        });
    }

    /// The first failure, if any.
    pub fn first(&self) -> Option<StoreError> {
        self.first.borrow().clone()
    }

    /// Wait for the first failure.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only watches; dropping it loses nothing (the failure
    /// stays recorded for [`WriteFaults::first`]).
    pub async fn failed(&self) -> StoreError {
        let mut seen = self.first.subscribe();
        loop {
            // The sender lives in `self`, so the wait cannot fail while
            // this borrow lasts; a failure would only mean "look again".
            if let Ok(first) = seen.wait_for(Option::is_some).await
                && let Some(err) = first.clone()
            {
                return err;
            }
        }
    }
}

/// Whether a failed create is the medium's refusal (not a logical one such
/// as an existing id).
fn medium(err: &StoreError) -> bool {
    matches!(err, StoreError::Io { .. })
}

/// A session store that reports its failed writes to [`WriteFaults`].
pub struct Watched {
    inner: Arc<dyn SessionStore>,
    faults: Arc<WriteFaults>,
    reporter: Option<Arc<Reporter>>,
}

impl Watched {
    /// Wrap `inner`, reporting to `faults`.
    pub fn wrap(inner: Arc<dyn SessionStore>, faults: &Arc<WriteFaults>) -> Arc<dyn SessionStore> {
        Arc::new(Self {
            inner,
            faults: Arc::clone(faults),
            reporter: None,
        })
    }

    /// Wrap `inner` as [`Watched::wrap`] does, and hand every event a log
    /// accepted to `reporter` (`--json`); a fork's seed is history already
    /// shown, so only what a log appends is handed on.
    pub fn streaming(
        inner: Arc<dyn SessionStore>,
        faults: &Arc<WriteFaults>,
        reporter: &Arc<Reporter>,
    ) -> Arc<dyn SessionStore> {
        Arc::new(Self {
            inner,
            faults: Arc::clone(faults),
            reporter: Some(Arc::clone(reporter)),
        })
    }

    fn log(&self, id: &SessionId, inner: Arc<dyn SessionLog>) -> Arc<dyn SessionLog> {
        Arc::new(WatchedLog {
            id: id.clone(),
            inner,
            faults: Arc::clone(&self.faults),
            reporter: self.reporter.clone(),
        })
    }
}

#[async_trait]
impl StoreLayer for Watched {
    fn wrapped(&self) -> &dyn SessionStore {
        &*self.inner
    }

    async fn create(
        &self,
        header: &SessionHeader,
        seed: &[SessionEvent],
    ) -> Result<Arc<dyn SessionLog>, StoreError> {
        match self.inner.create(header, seed).await {
            Ok(log) => Ok(self.log(&header.id, log)),
            Err(err) => {
                if medium(&err) {
                    self.faults.record(&err);
                }
                Err(err)
            }
        }
    }

    async fn open(
        &self,
        id: &SessionId,
    ) -> Result<(LoadedSession, Arc<dyn SessionLog>), StoreError> {
        let (loaded, log) = self.inner.open(id).await?;
        Ok((loaded, self.log(id, log)))
    }

    async fn flush(&self) -> Result<(), StoreError> {
        let result = self.inner.flush().await;
        if let Err(err) = &result {
            self.faults.record(err);
        }
        result
    }
}

/// One open log, reporting its failed writes (and, streaming, what it
/// accepted).
struct WatchedLog {
    id: SessionId,
    inner: Arc<dyn SessionLog>,
    faults: Arc<WriteFaults>,
    reporter: Option<Arc<Reporter>>,
}

#[async_trait]
impl LogLayer for WatchedLog {
    fn wrapped(&self) -> &dyn SessionLog {
        &*self.inner
    }

    async fn append(&self, events: &[SessionEvent]) -> Result<(), StoreError> {
        let result = self.inner.append(events).await;
        match (&result, &self.reporter) {
            (Err(err), _) => self.faults.record(err),
            (Ok(()), Some(reporter)) => reporter.logged(&self.id, events),
            (Ok(()), None) => {}
        }
        result
    }

    async fn checkpoint(&self) -> Result<(), StoreError> {
        let result = self.inner.checkpoint().await;
        if let Err(err) = &result {
            self.faults.record(err);
        }
        result
    }

    async fn sync(&self) -> Result<(), StoreError> {
        let result = self.inner.sync().await;
        if let Err(err) = &result {
            self.faults.record(err);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::PathBuf;

    use dsh_harness::MemoryStore;

    use super::*;

    fn full_disk() -> StoreError {
        StoreError::Io {
            path: PathBuf::from("s/x.jsonl"),
            source: Arc::new(std::io::Error::from_raw_os_error(28)),
        }
    }

    /// A log whose appends fail as a full disk does.
    struct FullDisk;

    #[async_trait]
    impl SessionLog for FullDisk {
        async fn append(&self, _: &[SessionEvent]) -> Result<(), StoreError> {
            Err(full_disk())
        }

        async fn checkpoint(&self) -> Result<(), StoreError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_good_create_records_nothing_and_a_logical_refusal_is_not_a_fault() {
        let faults = WriteFaults::new();
        let store = Watched::wrap(Arc::new(MemoryStore::new()), &faults);
        let header = SessionHeader::new(SessionId::generate(), PathBuf::from("/"));
        let log = store.create(&header, &[]).await.unwrap();
        log.checkpoint().await.unwrap();
        let exists = store.create(&header, &[]).await.err().unwrap();
        assert_eq!(exists.code(), "SESSION_EXISTS");
        assert!(faults.first().is_none());
    }

    #[tokio::test]
    async fn the_first_failed_append_is_recorded_and_wakes_the_waiter() {
        let faults = WriteFaults::new();
        let waiter = {
            let faults = Arc::clone(&faults);
            tokio::spawn(async move { faults.failed().await })
        };
        let broken = WatchedLog {
            id: dsh_core::SessionId::generate(),
            inner: Arc::new(FullDisk),
            faults: Arc::clone(&faults),
            reporter: None,
        };
        let err = SessionLog::append(&broken, &[]).await.unwrap_err();
        assert!(err.to_string().contains("No space left on device"), "{err}");
        let seen = tokio::time::timeout(std::time::Duration::from_secs(30), waiter)
            .await
            .expect("the waiter was never woken")
            .unwrap();
        assert!(
            seen.to_string().contains("No space left on device"),
            "{seen}"
        );
        // A later failure does not replace the first.
        faults.record(&StoreError::NotFound(SessionId::generate()));
        assert!(faults.first().unwrap().to_string().contains("No space"));
    }

    /// A waiter dropped while pending loses nothing: the failure is still
    /// recorded, and a later waiter sees it at once.
    #[tokio::test]
    async fn a_dropped_waiter_loses_nothing() {
        let faults = WriteFaults::new();
        {
            let waiting = faults.failed();
            tokio::pin!(waiting);
            assert!(futures_poll(waiting.as_mut()).is_none(), "no failure yet");
        }
        faults.record(&full_disk());
        assert!(faults.first().is_some());
        let seen = tokio::time::timeout(std::time::Duration::from_secs(30), faults.failed())
            .await
            .expect("a recorded failure is seen at once");
        assert!(seen.to_string().contains("No space left on device"));
    }

    /// `Watched` is transparent: every method reaches the store it wraps,
    /// so the runtime's cold catalog reads (`load_kind_many`) and header
    /// scans (`header_many`) reach the JSONL store's own batched readers.
    #[tokio::test]
    async fn every_method_reaches_the_wrapped_store() {
        use dsh_test_support::store::{ProbeStore, call_every_method};
        let probe = ProbeStore::new();
        let faults = WriteFaults::new();
        let watched = Watched::wrap(Arc::new(probe.clone()), &faults);
        call_every_method(&*watched).await;
        assert!(probe.missed().is_empty(), "missed {:?}", probe.missed());
    }

    /// Poll `future` once.
    fn futures_poll<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        match future.poll(&mut cx) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        }
    }
}
