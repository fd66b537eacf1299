//! `dsh show <name>`: an agent's transcript, read from its log (user,
//! assistant and tool messages, turn ends), with senders named by their
//! place in the tree. It only reads the directory.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use dsh_core::{CancellationToken, SessionId};
use dsh_harness::ScriptedModel;
use dsh_subagent::ROOT_NAME;

use crate::error::CliError;
use crate::sessions::{self, Member};
use crate::transcript;
use crate::world::World;

/// Run the command.
pub async fn show(dir: &Path, root: Option<&str>, name: &str) -> Result<(), CliError> {
    let store = sessions::existing_store(dir)?;
    let headers = sessions::headers(store.as_ref()).await?;
    let root = sessions::pick_root(dir, &headers, root)?;
    let world = World::build(store, Arc::new(ScriptedModel::new()), None, None)?;
    let member = sessions::resolve(&world.runtime, &root, name).await?;
    let mut names: HashMap<SessionId, String> = HashMap::new();
    names.insert(root.clone(), ROOT_NAME.to_owned());
    for row in world
        .runtime
        .list_descendants(&root, &CancellationToken::new())
        .await?
    {
        names.insert(row.entry.child_id.clone(), sessions::display_name(&row));
    }
    let log = world.store.load(member.id()).await?;
    world.shutdown().await;
    let title = match &member {
        Member::Root(_) => ROOT_NAME.to_owned(),
        Member::Child(row) => format!(
            "{} ({}, {}): {}",
            sessions::display_name(row),
            row.entry.provider,
            row.entry.mode.as_str(),
            row.entry.label
        ),
    };
    let name_of = |id: &SessionId| names.get(id).cloned().unwrap_or_else(|| id.to_string());
    print!(
        "{title}\n{}",
        transcript::render(&log.events, log.header.seed_len, &name_of)
    );
    Ok(())
}
