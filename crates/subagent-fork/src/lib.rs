//! `dsh-subagent-fork` is the in-process `fork` provider: each child starts
//! from the parent log's balanced completed-turn prefix (every event through
//! the last `turn/end`; a turn in flight is left out; no completed turn means
//! no seed), captured once when the child is created. The child joins the
//! parent's composition, so it cannot take an independent preset. Facts the
//! seed carries (the parent's catalog entries, names, team records) stay the
//! parent's: every projection over the child's log skips the seed. The
//! provider never re-reads the parent after that one capture.

use async_trait::async_trait;
use dsh_subagent::{
    ContinuableCreateRequest, ContinuableCreateSpec, PrepareContinuable, SubagentCapabilities,
    SubagentError, SubagentProvider,
};

/// The `fork` provider.
#[derive(Debug, Clone)]
pub struct ForkProvider {
    name: String,
}

impl Default for ForkProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl ForkProvider {
    /// The provider under its usual name, `fork`.
    pub fn new() -> Self {
        Self::named("fork")
    }

    /// The provider under another name.
    pub fn named(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }
}

#[async_trait]
impl PrepareContinuable for ForkProvider {
    async fn prepare(
        &self,
        request: ContinuableCreateRequest,
    ) -> Result<ContinuableCreateSpec, SubagentError> {
        if request.cancel.is_cancelled() {
            return Err(SubagentError::Cancelled);
        }
        Ok(ContinuableCreateSpec {
            seed: request.parent.completed_prefix(),
        })
    }
}

impl SubagentProvider for ForkProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities {
            agent_preset: false,
            ..SubagentCapabilities::ALL
        }
    }

    fn inherits_parent_context(&self) -> bool {
        true
    }

    fn continuable(&self) -> Option<&dyn PrepareContinuable> {
        Some(self)
    }
}
