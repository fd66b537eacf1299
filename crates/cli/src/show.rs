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
use serde::Serialize;

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
    json: bool,
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
        if json {
            let heard = dsh_subagent::heard_from(
                &creator.events,
                &row.entry.child_id,
                &sessions::display_name(row),
            );
            let document = Document {
                heard,
                ..Document::of(&member, 0, Vec::new())
            };
            print!("{}", crate::json::document(&document));
        } else {
            print!("{}", external(row, &creator.events));
        }
        return Ok(());
    }
    let mut names: HashMap<SessionId, String> = HashMap::new();
    names.insert(root.clone(), ROOT_NAME.to_owned());
    for row in sessions::descendants(store.as_ref(), &root).await? {
        names.insert(row.entry.child_id.clone(), sessions::display_name(&row));
    }
    let log = store.load(member.id()).await?;
    if json {
        let agent = member_name(&member);
        let session = member.id().as_str();
        let seed = usize::try_from(log.header.seed_len).unwrap_or(usize::MAX);
        let events = log
            .events
            .get(seed..)
            .unwrap_or_default()
            .iter()
            .filter_map(|event| crate::json::transcript_line(&agent, session, event))
            .collect();
        let document = Document::of(&member, log.header.seed_len, events);
        print!("{}", crate::json::document(&document));
        return Ok(());
    }
    let title = match &member {
        Member::Root(_) => ROOT_NAME.to_owned(),
        Member::Child(row) => format!(
            "{} ({}, {}{}): {}",
            sessions::display_name(row),
            row.entry.provider,
            row.entry.mode.as_str(),
            log.header
                .composition
                .preset
                .as_ref()
                .map(|role| format!(", role {role}"))
                .unwrap_or_default(),
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

/// `dsh show --json`: one agent's transcript as one document (the schema
/// is in docs/cli-json.md).
#[derive(Debug, Serialize)]
struct Document<'a> {
    /// [`crate::json::SCHEMA_VERSION`].
    schema: u32,
    /// Its name or path (`lead` for the root).
    agent: String,
    /// Its session.
    session: &'a SessionId,
    /// The provider that made it (`root` for the lead).
    provider: &'a str,
    /// `root`, `continuable`, `one-shot`, `external`, ...
    mode: &'a str,
    /// Its label (empty for the lead).
    label: &'a str,
    /// Events it inherited (a fork's parent's), left out of `events`.
    inherited_events: u64,
    /// Its own events as `dsh run --json` lines, with a `prompt` line for
    /// each message a person typed; empty for an external child.
    events: Vec<crate::json::Line<'a>>,
    /// For an external child, what its creator heard from it (each
    /// settlement notice); else empty.
    heard: Vec<String>,
}

impl<'a> Document<'a> {
    /// The document of `member` with these events and nothing heard.
    fn of(member: &'a Member, inherited_events: u64, events: Vec<crate::json::Line<'a>>) -> Self {
        let (provider, mode, label) = match member {
            Member::Root(_) => ("root", "root", ""),
            Member::Child(row) => (
                row.entry.provider.as_str(),
                row.entry.mode.as_str(),
                row.entry.label.as_str(),
            ),
        };
        Self {
            schema: crate::json::SCHEMA_VERSION,
            agent: member_name(member),
            session: member.id(),
            provider,
            mode,
            label,
            inherited_events,
            events,
            heard: Vec::new(),
        }
    }
}

/// The member's name as the transcript's title gives it.
fn member_name(member: &Member) -> String {
    match member {
        Member::Root(_) => ROOT_NAME.to_owned(),
        Member::Child(row) => sessions::display_name(row),
    }
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
