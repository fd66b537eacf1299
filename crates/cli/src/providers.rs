//! `dsh providers`: the subagent providers `dsh run` registers under the
//! configuration in force (`spawn`, `fork`, and `acp` when `dsh.toml` or a
//! flag names an agent program), each with its start-time capabilities,
//! whether its children inherit the parent's context and whether it can
//! create continuable children: the `subagent_survey` tool's text, for a
//! person. It makes the providers and nothing else (no store, harness,
//! runtime or tool), starts no agent and no process, and writes nothing.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_subagent::SubagentProvider;
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_tool_subagent::survey::{ProviderDirectory, survey};

use crate::config;
use crate::error::CliError;

/// The providers a run would register, in its order.
struct Providers(Vec<Arc<dyn SubagentProvider>>);

impl ProviderDirectory for Providers {
    fn provider_names(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|provider| provider.name().to_owned())
            .collect()
    }

    fn provider(&self, name: &str) -> Option<Arc<dyn SubagentProvider>> {
        self.0
            .iter()
            .find(|provider| provider.name() == name)
            .cloned()
    }
}

/// Print the survey of the providers a run would have.
///
/// # Errors
/// A configuration that does not load, or an ACP agent it names that
/// cannot be set up (the same refusals as `dsh run`).
///
/// # Cancel safety
/// Dropping it part-way leaves nothing: it runs no agent.
pub async fn providers(config: Option<PathBuf>) -> Result<(), CliError> {
    let settings = config::load(&config::Overrides {
        config,
        ..config::Overrides::default()
    })?;
    let mut providers: Vec<Arc<dyn SubagentProvider>> = vec![
        Arc::new(SpawnProvider::new()),
        Arc::new(ForkProvider::new()),
    ];
    if let Some(acp) = settings.acp {
        providers.push(crate::acp::provider(acp)?);
    }
    println!("{}", survey(&Providers(providers)));
    Ok(())
}
