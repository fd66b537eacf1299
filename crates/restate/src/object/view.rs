//! [`TurnView`]: the [`Agent`] a tool sees while a turn runs on a worker.
//! A tool gets its session's identity, header, options and working
//! directory from it; input and records go through the session's objects,
//! never through this view, so its `send` and `record` are refused
//! (`ENGINE_UNSUPPORTED`) and it never claims to be live in a registry
//! (its epoch is [`Epoch::NONE`]).

use std::any::Any;
use std::path::PathBuf;

use async_trait::async_trait;
use dsh_core::{
    Agent, AgentError, AgentOptions, AgentStatus, CancelCause, CancelOptions, Epoch,
    ExtensionPayload, InboxArrival, InboxTarget, MessageId, SessionEvent, SessionHeader, SessionId,
    UserMessage,
};
use tokio::sync::{broadcast, watch};

/// The running session as its tools see it.
pub(crate) struct TurnView {
    pub(crate) header: SessionHeader,
    pub(crate) options: AgentOptions,
    pub(crate) accepts_images: bool,
    pub(crate) status: watch::Sender<AgentStatus>,
}

impl TurnView {
    fn unsupported(&self, what: &str) -> AgentError {
        AgentError::InvalidInput(format!(
            "ENGINE_UNSUPPORTED: {what} from a tool of `{}` on a Restate worker",
            self.header.id
        ))
    }
}

#[async_trait]
impl Agent for TurnView {
    fn id(&self) -> &SessionId {
        &self.header.id
    }

    fn epoch(&self) -> Epoch {
        Epoch::NONE
    }

    fn header(&self) -> &SessionHeader {
        &self.header
    }

    fn options(&self) -> AgentOptions {
        self.options.clone()
    }

    fn cwd(&self) -> PathBuf {
        self.header.cwd.clone()
    }

    fn accepts_images(&self) -> bool {
        self.accepts_images
    }

    fn status(&self) -> AgentStatus {
        *self.status.borrow()
    }

    fn watch_status(&self) -> watch::Receiver<AgentStatus> {
        self.status.subscribe()
    }

    async fn send(
        &self,
        _message: UserMessage,
        _target: InboxTarget,
        _wake: bool,
    ) -> Result<MessageId, AgentError> {
        Err(self.unsupported("sending input"))
    }

    fn cancel(&self, _cause: CancelCause, _options: CancelOptions) {}

    async fn wait_idle(&self) {}

    fn observe_inbox(&self) -> broadcast::Receiver<InboxArrival> {
        broadcast::channel(1).1
    }

    fn pending(&self) -> Vec<MessageId> {
        Vec::new()
    }

    fn events(&self) -> Vec<SessionEvent> {
        Vec::new()
    }

    async fn record(&self, _kind: &str, _payload: ExtensionPayload) -> Result<u64, AgentError> {
        Err(self.unsupported("recording an extension"))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
