//! `cargo run --example subagent_survey`: seed 003's survey of the
//! registered subagent providers, as a model would read it through the
//! `subagent_survey` tool. A runtime over the reference harness gets the
//! `spawn` and `fork` providers and an `acp` provider (its agent program is
//! never started: the survey only reads the providers), is surveyed, loses
//! `fork`, is surveyed again, and gets `fork` back at the end of the list.

use std::error::Error;
use std::sync::Arc;

use dsh_core::SessionStore;
use dsh_harness::{Harness, MemoryStore, ScriptedModel};
use dsh_subagent::{RuntimeConfig, SubagentRuntime};
use dsh_subagent_acp::{AcpConfig, AcpProvider};
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_tool_subagent::survey::survey;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    // The model is never asked: the survey starts no agent.
    let harness = Harness::builder(store.clone())
        .model(Arc::new(ScriptedModel::new()))
        .build()?;
    let runtime = SubagentRuntime::new(Arc::new(harness.clone()), store, RuntimeConfig::default());
    runtime.register(Arc::new(SpawnProvider::new()))?;
    runtime.register(Arc::new(ForkProvider::new()))?;
    runtime.register(Arc::new(AcpProvider::new(AcpConfig::new("/bin/true"))?))?;

    println!("== every provider\n{}\n", survey(&runtime));
    runtime.remove("fork");
    println!("== fork removed\n{}\n", survey(&runtime));
    runtime.register(Arc::new(ForkProvider::new()))?;
    println!("== fork registered again\n{}", survey(&runtime));

    runtime.shutdown().await;
    harness.shutdown().await;
    Ok(())
}
