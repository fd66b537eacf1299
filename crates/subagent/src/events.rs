//! Lifecycle observation: provider registration and the start/end pair of
//! every published activation. Observation only: listeners run on the
//! runtime's bus, isolated from the runtime and from each other.

use dsh_core::{SessionId, StopReason};

/// The identity of one published activation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// The provider that made it.
    pub provider: String,
    /// The child's id (its session id for a local child).
    pub child_id: SessionId,
    /// The direct creator's session id.
    pub parent_session_id: SessionId,
    /// Whether the child is a local agent (resolvable in the registry during
    /// the `subagent/start` notification).
    pub local: bool,
}

/// How an activation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// It settled with this stop reason.
    Settled(StopReason),
    /// Teardown or an infrastructure fault failed it.
    Error(String),
}

/// A runtime observation event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubagentEvent {
    /// `subagent/provider-added`
    ProviderAdded(String),
    /// `subagent/provider-removed`
    ProviderRemoved(String),
    /// `subagent/start`: a child was published.
    Start(RunInfo),
    /// `subagent/end`: a published child settled; exactly one per start.
    End(RunInfo, RunOutcome),
}

impl SubagentEvent {
    /// The event's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::ProviderAdded(_) => "subagent/provider-added",
            Self::ProviderRemoved(_) => "subagent/provider-removed",
            Self::Start(_) => "subagent/start",
            Self::End(..) => "subagent/end",
        }
    }
}
