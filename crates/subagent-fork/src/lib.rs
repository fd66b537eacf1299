#![doc = include_str!("../README.md")]

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
