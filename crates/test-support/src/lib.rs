//! Test doubles shared by the workspace's test suites and benches, so that
//! none carries its own copy: a forwarding agent with taps, which lets a
//! test see (or stall) the moment the code under test reads an agent's
//! pending inbox or its events; session-store wrappers that fail, hold or
//! stop calls ([`store`]); bounded waits ([`wait`]); queries over recorded
//! model requests ([`requests`]) and over a session's events ([`logs`]);
//! the tool-spec checks every tool crate runs ([`specs`]); what a killed
//! process had acknowledged and whether its recovery kept it, once
//! ([`acknowledged`]); with the `world`
//! feature, the one configurable subagent test world
//! (`world::WorldBuilder`), its scripted models and providers, and killing
//! a re-executed test process (`world::process`); a counting allocator for
//! the memory benches ([`alloc`]); the measurements benches record for
//! `cargo xtask bench` ([`bench`](mod@bench)); and with the `replay`
//! feature, the replay workload two benches share (`replay`); with either
//! of those, the check that a suite's sessions replay identical (`replays`,
//! B59); and what a test does when this machine lacks what it needs
//! ([`skip_or_fail`]: fail under CI, say so on stderr elsewhere); with the
//! `restate` feature, a real Restate server, workers, a failover front and
//! a cluster of them in a private network namespace (`restate`, the one
//! harness of `dsh-restate`'s and `dsh`'s suites and of the engine bench).
//! Used only as a dev-dependency; it must never become a dependency of a
//! library crate.

pub mod acknowledged;
pub mod alloc;
pub mod bench;
pub mod logs;
pub mod procs;
#[cfg(feature = "replay")]
pub mod replay;
#[cfg(any(feature = "replay", feature = "world"))]
pub mod replays;
pub mod requests;
#[cfg(feature = "restate")]
pub mod restate;
mod skip;
pub mod specs;
pub mod store;
pub mod wait;
#[cfg(feature = "world")]
pub mod world;

pub use skip::skip_or_fail;

use std::any::Any;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use dsh_core::{
    Agent, AgentError, AgentOptions, AgentStatus, CancelCause, CancelOptions, Epoch,
    ExtensionPayload, InboxArrival, InboxTarget, MessageId, SessionEvent, SessionHeader, SessionId,
    UserMessage,
};
use tokio::sync::{broadcast, watch};

/// A session id from test text.
///
/// # Panics
/// When the text is not a valid id.
#[allow(clippy::expect_used)]
pub fn sid(text: &str) -> SessionId {
    SessionId::new(text).expect("a valid session id")
}

/// A one-shot tap: runs once, on the first read it is armed for.
type OnceTap = Mutex<Option<Box<dyn FnOnce() + Send>>>;

/// A live agent that forwards every call to `inner`, with taps on two
/// reads: `pending()` (every call, after the read) and `events()` (the
/// first call only, after the snapshot is taken). Publish it in place of
/// the real agent to observe or stall code that reads the agent.
pub struct TappedAgent {
    inner: Arc<dyn Agent>,
    on_pending: Option<Box<dyn Fn() + Send + Sync>>,
    on_first_events: OnceTap,
}

impl TappedAgent {
    /// Forward to `inner`, with no taps yet.
    pub fn new(inner: Arc<dyn Agent>) -> Self {
        Self {
            inner,
            on_pending: None,
            on_first_events: Mutex::new(None),
        }
    }

    /// Call `tap` after every `pending()` read.
    #[must_use]
    pub fn on_pending(mut self, tap: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_pending = Some(Box::new(tap));
        self
    }

    /// Call `tap` once, after the first `events()` snapshot is taken.
    #[must_use]
    pub fn on_first_events(self, tap: impl FnOnce() + Send + 'static) -> Self {
        *self
            .on_first_events
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Box::new(tap));
        self
    }
}

#[async_trait]
impl Agent for TappedAgent {
    fn id(&self) -> &SessionId {
        self.inner.id()
    }
    fn epoch(&self) -> Epoch {
        self.inner.epoch()
    }
    fn header(&self) -> &SessionHeader {
        self.inner.header()
    }
    fn options(&self) -> AgentOptions {
        self.inner.options()
    }
    fn cwd(&self) -> PathBuf {
        self.inner.cwd()
    }
    fn accepts_images(&self) -> bool {
        self.inner.accepts_images()
    }
    fn status(&self) -> AgentStatus {
        self.inner.status()
    }
    fn watch_status(&self) -> watch::Receiver<AgentStatus> {
        self.inner.watch_status()
    }
    async fn send(
        &self,
        message: UserMessage,
        target: InboxTarget,
        wake: bool,
    ) -> Result<MessageId, AgentError> {
        self.inner.send(message, target, wake).await
    }
    fn cancel(&self, cause: CancelCause, options: CancelOptions) {
        self.inner.cancel(cause, options);
    }
    async fn wait_idle(&self) {
        self.inner.wait_idle().await;
    }
    fn fault(&self) -> Option<AgentError> {
        self.inner.fault()
    }
    fn observe_inbox(&self) -> broadcast::Receiver<InboxArrival> {
        self.inner.observe_inbox()
    }
    fn pending(&self) -> Vec<MessageId> {
        let pending = self.inner.pending();
        if let Some(tap) = &self.on_pending {
            tap();
        }
        pending
    }
    fn events(&self) -> Vec<SessionEvent> {
        let events = self.inner.events();
        let tap = self
            .on_first_events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(tap) = tap {
            tap();
        }
        events
    }
    async fn record(&self, kind: &str, payload: ExtensionPayload) -> Result<u64, AgentError> {
        self.inner.record(kind, payload).await
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}
