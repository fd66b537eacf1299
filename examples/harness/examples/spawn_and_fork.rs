//! `cargo run --example spawn_and_fork`: a lead on the reference harness
//! (JSONL logs in a temporary directory, a scripted model, no network)
//! starts a `spawn` child, which sees only its prompt, and a `fork` child,
//! which starts from the lead's completed turns, through the subagent
//! runtime; each result is awaited by the caller, printed, and the tree is
//! shut down. The scripted model answers a child with what it can see, so
//! the difference between the two providers is in the output.

use std::error::Error;
use std::sync::Arc;

use dsh_core::content::joined_text;
use dsh_core::{
    AgentFactory, CancellationToken, ContentBlock, CreateAgent, Durability, Message, SessionHeader,
    SessionId, SessionStore, UserMessage,
};
use dsh_harness::{Harness, JsonlStore, Scripted, ScriptedModel};
use dsh_subagent::{ActivationSpec, Delivery, RuntimeConfig, StartRequest, SubagentRuntime};
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let dir = std::env::temp_dir().join(format!("dsh-spawn-and-fork-{}", std::process::id()));
    let store: Arc<dyn SessionStore> =
        Arc::new(JsonlStore::new(dir.join("sessions"), Durability::None)?);
    // Every agent answers with how many user messages it can see and the
    // first one: a spawn child sees its prompt alone, a fork child the
    // lead's conversation before it.
    let model = Arc::new(ScriptedModel::new().responder(|request| {
        let users: Vec<String> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::User { content, .. } => Some(joined_text(content)),
                _ => None,
            })
            .collect();
        Scripted::Text(format!(
            "I see {} user message(s), the first: {:?}",
            users.len(),
            users.first().map_or("", String::as_str)
        ))
    }));
    let harness = Harness::builder(store.clone()).model(model).build()?;
    let runtime = SubagentRuntime::new(Arc::new(harness.clone()), store, RuntimeConfig::default());
    runtime.register(Arc::new(SpawnProvider::new()))?;
    runtime.register(Arc::new(ForkProvider::new()))?;

    let lead = harness
        .create(CreateAgent {
            header: SessionHeader::new(SessionId::new("lead")?, &dir),
            seed: Vec::new(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await?;
    lead.agent()
        .followup(UserMessage::user_text("We are planning the release."))
        .await?;
    lead.agent().wait_idle().await;

    for provider in ["spawn", "fork"] {
        let child = runtime
            .start_activation(ActivationSpec {
                provider: provider.into(),
                label: format!("a {provider} child"),
                name: Some(format!("{provider}-child")),
                child_id: None,
                cancel: CancellationToken::new(),
                delivery: Delivery::Caller,
                request: StartRequest::new(
                    lead.agent().clone(),
                    vec![ContentBlock::text("List the open risks.")],
                ),
            })
            .await?;
        let result = child.result().await?;
        println!(
            "{provider}: {} ({})",
            joined_text(&result.output),
            result.stop_reason.as_str()
        );
        child.dispose().await?;
    }

    runtime.shutdown().await;
    lead.dispose().await;
    harness.shutdown().await;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
