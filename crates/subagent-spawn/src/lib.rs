#![doc = include_str!("../README.md")]

use async_trait::async_trait;
use dsh_subagent::{
    ContinuableCreateRequest, ContinuableCreateSpec, PrepareContinuable, SubagentCapabilities,
    SubagentError, SubagentProvider,
};

/// The `spawn` provider.
#[derive(Debug, Clone)]
pub struct SpawnProvider {
    name: String,
}

impl Default for SpawnProvider {
    fn default() -> Self {
        Self::new()
    }
}

impl SpawnProvider {
    /// The provider under its usual name, `spawn`.
    pub fn new() -> Self {
        Self::named("spawn")
    }

    /// The provider under another name.
    pub fn named(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }
}

#[async_trait]
impl PrepareContinuable for SpawnProvider {
    async fn prepare(
        &self,
        request: ContinuableCreateRequest,
    ) -> Result<ContinuableCreateSpec, SubagentError> {
        if request.cancel.is_cancelled() {
            return Err(SubagentError::Cancelled);
        }
        Ok(ContinuableCreateSpec::default())
    }
}

impl SubagentProvider for SpawnProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities::ALL
    }

    fn inherits_parent_context(&self) -> bool {
        false
    }

    fn continuable(&self) -> Option<&dyn PrepareContinuable> {
        Some(self)
    }
}
