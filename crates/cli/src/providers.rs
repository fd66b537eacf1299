//! `dsh providers`: the subagent providers `dsh run` registers under the
//! configuration in force (`spawn`, `fork`, and `acp` when `dsh.toml` or a
//! flag names an agent program), each with its start-time capabilities,
//! whether its children inherit the parent's context and whether it can
//! create continuable children: the `subagent_survey` tool's text, for a
//! person. It builds the run's world over an in-memory store and a model
//! that is never asked, starts no agent and no process, and writes nothing.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_harness::{MemoryStore, ScriptedModel};
use dsh_tool_subagent::survey::survey;

use crate::config;
use crate::error::CliError;
use crate::world::World;

/// Print the survey of the providers a run would have.
///
/// # Errors
/// A configuration that does not load, or an ACP agent it names that
/// cannot be set up (the same refusals as `dsh run`).
///
/// # Cancel safety
/// Dropping it part-way leaves nothing: the world is in memory and runs no
/// agent.
pub async fn providers(config: Option<PathBuf>) -> Result<(), CliError> {
    let settings = config::load(&config::Overrides {
        config,
        ..config::Overrides::default()
    })?;
    let world = World::build(
        Arc::new(MemoryStore::new()),
        Arc::new(ScriptedModel::new()),
        None,
        settings.acp.clone(),
        settings.limits,
        None,
    )?;
    println!("{}", survey(&world.runtime));
    world.shutdown().await;
    Ok(())
}
