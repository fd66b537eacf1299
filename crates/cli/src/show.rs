//! `dsh show <name>`: an agent's transcript, read from its log (user,
//! assistant and tool messages, turn ends), with senders named by their
//! place in the tree. An external child has no log here (the agent program
//! keeps its own transcript): what is known of it is what its creator
//! heard, each settlement notice (its stop reason, output and diagnostic),
//! or for a foreground child, what its creator's log recorded when it
//! settled (the same facts, bounded).
//! It only reads the directory, and only the logs of the tree it shows: a
//! bad file elsewhere is warned about and left out.

use std::collections::HashMap;

use dsh_core::SessionId;
use dsh_subagent::ROOT_NAME;

use crate::error::CliError;
use crate::sessions::{self, Member};
use crate::transcript;

/// Run the command.
///
/// # Cancel safety
/// Cancel safe: it only reads the logs.
pub async fn show(
    source: &crate::engine::Source,
    root: Option<&str>,
    name: &str,
) -> Result<(), CliError> {
    let store = source.store().await?;
    let scan = sessions::scan(store.as_ref()).await?;
    scan.warn();
    let root = scan.pick_root(source.place(), root)?;
    let member = sessions::resolve(store.as_ref(), &root, name).await?;
    if let Member::Child(row) = &member
        && row.entry.mode == dsh_subagent::ChildMode::EXTERNAL
    {
        let creator = store.load(&row.parent_id).await?;
        print!("{}", external(row, &creator.events));
        return Ok(());
    }
    let mut names: HashMap<SessionId, String> = HashMap::new();
    names.insert(root.clone(), ROOT_NAME.to_owned());
    for row in sessions::descendants(store.as_ref(), &root).await? {
        names.insert(row.entry.child_id.clone(), sessions::display_name(&row));
    }
    let log = store.load(member.id()).await?;
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

/// What is known of the external child `row`: its creator's settlement
/// notices from it (`events` is the creator's log).
fn external(row: &dsh_subagent::DescendantRow, events: &[dsh_core::SessionEvent]) -> String {
    let mut out = format!(
        "{} ({}, external): {}\n",
        sessions::display_name(row),
        row.entry.provider,
        row.entry.label
    );
    out.push_str(
        "An external agent keeps its own transcript; this is what its creator heard from it.\n",
    );
    let notices =
        dsh_subagent::heard_from(events, &row.entry.child_id, &sessions::display_name(row));
    if notices.is_empty() {
        out.push_str("\nNothing yet: it has not settled a turn.\n");
    }
    for notice in notices {
        out.push('\n');
        out.push_str(notice.trim_end());
        out.push('\n');
    }
    out
}
