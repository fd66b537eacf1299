//! Lifecycle observation: provider registration and the start/end pair of
//! every published activation. Observation only: listeners run on the
//! runtime's bus, isolated from the runtime and from each other.

use dsh_core::{SessionId, StopReason};

use crate::provider::ProviderDescriptor;
use crate::result::SubagentResult;

/// The identity of one published activation, with what an observer needs
/// to show it (its name and label) without reading any log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInfo {
    /// The provider that made it.
    pub provider: String,
    /// Its path of names from the root (`researcher/deep-reader`), or its
    /// id when it has none.
    pub name: String,
    /// The label its creator gave it (its catalog entry's); empty when
    /// none is known.
    pub label: String,
    /// The child's id (its session id for a local child).
    pub child_id: SessionId,
    /// The direct creator's session id.
    pub parent_session_id: SessionId,
    /// The root session of the tree the child belongs to: what a listener
    /// filters on ([`SubagentRuntime::listen_tree`](crate::SubagentRuntime::listen_tree)).
    pub root: SessionId,
    /// Whether the child is a local agent (resolvable in the registry during
    /// the `subagent/start` notification).
    pub local: bool,
}

/// How an activation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// It settled with this result: its final output, structured value,
    /// diagnostic and stop reason.
    Settled(SubagentResult),
    /// Teardown or an infrastructure fault failed it: the failure's message.
    Error(String),
}

impl RunOutcome {
    /// The stop reason: the settled result's, or `error` for a failure.
    pub fn stop_reason(&self) -> StopReason {
        match self {
            Self::Settled(result) => result.stop_reason.clone(),
            Self::Error(_) => StopReason::ERROR,
        }
    }
}

/// A runtime observation event.
#[derive(Debug, Clone, PartialEq)]
// `allow`, not `expect`: whether the lint fires depends on the features
// the workspace build turns on (the variants' sizes do).
#[allow(
    clippy::large_enum_variant,
    reason = "an end carries its settled result by value, as listeners match it; events are delivered by reference"
)]
pub enum SubagentEvent {
    /// `subagent/provider-added`, with what the provider said about itself.
    ProviderAdded(ProviderDescriptor),
    /// `subagent/provider-removed`
    ProviderRemoved(String),
    /// `subagent/start`: a child was published.
    Start(RunInfo),
    /// `subagent/end`: a published child settled; exactly one per start.
    End(RunInfo, RunOutcome),
}

impl SubagentEvent {
    /// The root of the tree a `subagent/start` or `subagent/end` belongs
    /// to; `None` for the provider events, which belong to no tree.
    pub fn root(&self) -> Option<&SessionId> {
        match self {
            Self::Start(info) | Self::End(info, _) => Some(&info.root),
            Self::ProviderAdded(_) | Self::ProviderRemoved(_) => None,
        }
    }

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
