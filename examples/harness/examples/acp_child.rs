//! `cargo run --example acp_child [-- PROGRAM [ARGS...]]`: a child run as an
//! external agent program over the Agent Client Protocol. A lead on the
//! reference harness (a scripted model, no network) starts an `acp` child
//! through the subagent runtime, awaits its result and prints it. Without
//! arguments the program is the Python ACP SDK's echo agent that
//! `crates/subagent-acp/peers/install.sh` installs; any ACP agent program
//! can be named instead.

use std::error::Error;
use std::path::Path;
use std::sync::Arc;

use dsh_core::content::joined_text;
use dsh_core::{
    AgentFactory, CancellationToken, ContentBlock, CreateAgent, SessionHeader, SessionId,
    SessionStore,
};
use dsh_harness::{Harness, MemoryStore, Scripted, ScriptedModel};
use dsh_subagent::{ActivationSpec, Delivery, RuntimeConfig, StartRequest, SubagentRuntime};
use dsh_subagent_acp::{AcpConfig, AcpProvider};

/// The agent program and its arguments: the command line's, or the
/// installed SDK echo agent.
fn agent() -> Result<(String, Vec<String>), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    if let Some(program) = args.next() {
        return Ok((program, args.collect()));
    }
    let peers = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/subagent-acp/peers");
    let python = peers.join("venv/bin/python");
    let echo = peers.join("python-examples/0.12.1/echo_agent.py");
    if !python.is_file() || !echo.is_file() {
        return Err(format!(
            "the SDK echo agent is not installed under {}: run crates/subagent-acp/peers/install.sh, \
             or name an ACP agent program: cargo run --example acp_child -- PROGRAM [ARGS...]",
            peers.display()
        )
        .into());
    }
    Ok((
        python.display().to_string(),
        vec![echo.display().to_string()],
    ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let (program, args) = agent()?;
    let store: Arc<dyn SessionStore> = Arc::new(MemoryStore::new());
    let model = Arc::new(ScriptedModel::with_responses([Scripted::Text("ok".into())]));
    let harness = Harness::builder(store.clone()).model(model).build()?;
    let runtime = SubagentRuntime::new(Arc::new(harness.clone()), store, RuntimeConfig::default());
    runtime.register(Arc::new(AcpProvider::new(
        AcpConfig::new(program).args(args),
    )?))?;

    let lead = harness
        .create(CreateAgent {
            header: SessionHeader::new(SessionId::new("lead")?, std::env::current_dir()?),
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await?;
    let child = runtime
        .start_activation(ActivationSpec {
            provider: "acp".into(),
            label: "an external child".into(),
            name: Some("external".into()),
            child_id: None,
            cancel: CancellationToken::new(),
            delivery: Delivery::Caller,
            request: StartRequest::new(
                lead.agent().clone(),
                vec![ContentBlock::text("Hello from the dsh example.")],
            ),
        })
        .await?;
    let result = child.result().await?;
    println!(
        "acp child: {} ({})",
        joined_text(&result.output),
        result.stop_reason.as_str()
    );
    if let Some(diagnostic) = &result.diagnostic {
        println!("diagnostic: {diagnostic}");
    }
    // Returns once the agent's whole process group is gone.
    child.dispose().await?;
    runtime.shutdown().await;
    lead.dispose().await;
    harness.shutdown().await;
    Ok(())
}
