//! `spawn_teammate` (lead only): create one named, durable teammate with
//! its first task, fresh or forked from the lead, optionally in its own
//! git worktree.

use std::sync::Arc;

use dsh_agent_team::{MemberContext, SpawnTeammate, Team};
use dsh_core::{Agent, ContentBlock};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::common::{Refusal, member_json, object, parse, string};

/// The description the model reads.
pub(crate) const DESCRIPTION: &str = "Create one named, durable teammate with its first task. Only the team lead may \
                 call this tool.";

/// The input schema.
pub(crate) fn schema() -> Value {
    object(
        json!({
            "name": string("Unique lowercase kebab-case teammate name, at most 64 characters; never reused."),
            "description": string("Short description of the delegated responsibility."),
            "prompt": string("Complete initial task for the teammate."),
            "context": {
                "type": "string",
                "enum": ["fresh", "fork"],
                "description": "fresh starts without the lead's history; fork inherits the lead's completed turns. Defaults to fresh.",
            },
            "worktree": {
                "type": "boolean",
                "description": "Give the teammate its own git worktree, on a branch of the lead's repository, as its working directory. Defaults to false.",
            },
        }),
        &["name", "description", "prompt"],
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpawnInput {
    name: String,
    description: String,
    prompt: String,
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    worktree: bool,
}

/// Run one call.
pub(crate) async fn run(
    team: &Team,
    caller: &Arc<dyn Agent>,
    input: Value,
) -> Result<Value, Refusal> {
    let input: SpawnInput = parse(input)?;
    let context = match input.context.as_deref() {
        None | Some("fresh") => MemberContext::Fresh,
        Some("fork") => MemberContext::Fork,
        Some(other) => {
            return Err(Refusal::Input(format!(
                "context is fresh or fork, not `{other}`"
            )));
        }
    };
    let row = team
        .spawn_teammate(
            caller,
            SpawnTeammate {
                name: input.name,
                description: input.description,
                prompt: vec![ContentBlock::text(input.prompt)],
                context,
                worktree: input.worktree,
            },
        )
        .await?;
    Ok(json!({"spawned": member_json(&row)}))
}
