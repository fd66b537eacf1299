//! `dsh send <name> <message>`: the user-authored prompt path (B36). The
//! name is resolved in a persisted tree before anything is written; then
//! the tree's root is resumed (the runtime delivers user prompts through a
//! live root), the runtime resumes the cold child and delivers the message
//! under the user's authority, and the child's reply is printed when that
//! turn ends. The child settles as any resumed child does, so its notice
//! reaches the root, which may take a turn about it; the command returns
//! once that tree work is done too.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_core::{
    AgentFactory, AgentStatus, CancellationToken, ContentBlock, MessageId, Model, ResumeAgent,
};
use dsh_subagent::{ChildMode, PromptDelivery, RunOutcome, SubagentEvent, TrustedHost, UserPrompt};

use crate::demo::Demo;
use crate::error::CliError;
use crate::model::{self, ModelChoice};
use crate::sessions::{self, Member};
use crate::transcript;
use crate::world::World;

/// What `dsh send` was asked.
#[derive(Debug)]
pub struct SendArgs {
    /// The child's name, path or session id.
    pub name: String,
    /// The message.
    pub message: String,
    /// The session directory.
    pub dir: PathBuf,
    /// `--root`.
    pub root: Option<String>,
    /// `--model`.
    pub model: Option<String>,
}

/// Run the command.
pub async fn send(args: SendArgs) -> Result<(), CliError> {
    let choice = model::parse_choice(args.model.as_deref())?;
    if args.message.trim().is_empty() {
        return Err(CliError::Refused("the message is empty".to_owned()));
    }
    let store = sessions::existing_store(&args.dir)?;
    let headers = sessions::headers(store.as_ref()).await?;
    let root = sessions::pick_root(&args.dir, &headers, args.root.as_deref())?;
    let model: Arc<dyn Model> = match &choice {
        ModelChoice::Demo => Demo::new(false).model(),
        ModelChoice::OpenAi { model } => model::openai(model).await?,
    };
    let world = World::build(store, model, None, None)?;
    let outcome = deliver(&world, &root, &args).await;
    world.shutdown().await;
    outcome
}

async fn deliver(
    world: &World,
    root: &dsh_core::SessionId,
    args: &SendArgs,
) -> Result<(), CliError> {
    let row = match sessions::resolve(&world.runtime, root, &args.name).await? {
        Member::Root(_) => {
            return Err(CliError::Refused(format!(
                "`{}` is the root of the tree; `dsh send` talks to its children (`dsh run` starts a new lead)",
                args.name
            )));
        }
        Member::Child(row) => row,
    };
    if row.entry.mode != ChildMode::CONTINUABLE {
        return Err(CliError::Refused(format!(
            "`{}` is a {} child and cannot receive messages",
            args.name,
            row.entry.mode.as_str()
        )));
    }
    let child = row.entry.child_id.clone();
    let name = sessions::display_name(&row);
    // Prompts reach a child through its live root.
    let lead = world
        .harness
        .resume(ResumeAgent {
            id: root.clone(),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await?;
    let lead = lead.agent().clone();
    // Its tree is live again: notices a crash kept from it arrive first
    // (B54), and logs a crash left outside its catalog go (B9).
    world.runtime.deliver_lost_notices(&lead).await?;
    world.runtime.remove_orphans(&lead).await?;
    let (_subscription, mut events) = world.runtime.events().subscribe();
    world
        .runtime
        .prompt(
            UserPrompt {
                child: child.clone(),
                request_id: MessageId::generate(),
                content: vec![ContentBlock::text(args.message.clone())],
                delivery: PromptDelivery::Queue,
            },
            &TrustedHost,
            &CancellationToken::new(),
        )
        .await?;
    let settled = async {
        while let Some(event) = events.recv().await {
            if let SubagentEvent::End(info, outcome) = event
                && info.child_id == child
            {
                return Some(outcome);
            }
        }
        None
    };
    let outcome = tokio::select! {
        outcome = settled => outcome,
        _ = tokio::signal::ctrl_c() => {
            world.runtime.interrupt_by_user(&child, &TrustedHost).await?;
            world.runtime.drain_descendants(std::slice::from_ref(&lead)).await?;
            return Err(CliError::Interrupted);
        }
    };
    if let Some(RunOutcome::Error(error)) = outcome {
        return Err(CliError::Refused(format!("`{name}` failed: {error}")));
    }
    let log = world.store.load(&child).await?;
    let turns = transcript::finished_turns(&log.events);
    let Some(turn) = turns.last() else {
        return Err(CliError::Refused(format!("`{name}` did not answer")));
    };
    if transcript::failed(&turn.end.stop_reason) {
        return Err(CliError::Refused(format!(
            "`{name}` stopped ({}){}",
            turn.end.stop_reason,
            turn.end
                .diagnostic
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        )));
    }
    println!("{name}: {}", turn.answer.trim().replace('\n', "\n  "));
    // The notice wakes the root; the tree is done when nothing progresses.
    loop {
        lead.wait_idle().await;
        if world.runtime.wait_for_tree_work(&lead).await || lead.status() == AgentStatus::Running {
            continue;
        }
        break;
    }
    Ok(())
}
