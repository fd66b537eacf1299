//! `dsh agents`: every persisted tree in a session directory, one per root
//! session (oldest first), each listed from its root by
//! `list_stored_descendants` (no runtime is built): names or paths, providers, modes, labels, session
//! ids and row diagnostics. One bad file affects only what needs it (B57):
//! a tree whose root log or catalog cannot be read is marked and the other
//! trees are listed; a log that cannot be read is an `unavailable` row
//! (under its tree when a catalog names it, else in its own section); a
//! file that is not a session log is skipped with a warning on stderr.
//!
//! Crash debris is reported, never invisible: a child log that no catalog
//! names (a crash between creating a child and recording it, or a child
//! whose parent's log is gone) is listed under `orphans`. The command only
//! reads the directory, except with `--prune-orphans`, which removes
//! exactly those orphan logs (a log another process is writing is refused
//! by its lock and kept).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use dsh_core::{SessionId, SessionStore, StoreError};
use dsh_subagent::{RowDiagnostic, SubagentError};
use serde::Serialize;

use crate::error::{CliError, person};
use crate::sessions::{self, Orphan};

fn diagnostic(diagnostic: RowDiagnostic) -> &'static str {
    match diagnostic {
        RowDiagnostic::Corrupt => "corrupt: its log or catalog cannot be parsed",
        RowDiagnostic::Unavailable => "unavailable: its log cannot be read",
        RowDiagnostic::Unsupported => "unsupported mode: not traversed",
    }
}

/// How a root whose own catalog cannot be read is marked.
fn root_diagnostic(err: &SubagentError) -> String {
    let kind = match err {
        SubagentError::Agent(dsh_core::AgentError::Store(
            StoreError::Corrupt { .. } | StoreError::OutOfSequence { .. },
        ))
        | SubagentError::Infra(dsh_subagent::InfraError::CorruptCatalog { .. })
        | SubagentError::Infra(dsh_subagent::InfraError::DuplicateName { .. }) => "corrupt",
        _ => "unavailable",
    };
    format!(
        "{kind}: this tree cannot be listed: {}",
        crate::one_line(&person(err))
    )
}

/// Each row's role, as its child's header records it (the preset it was
/// composed from); `None` for a child started without one, an external
/// child (no log here) and a header that cannot be read (its row says so).
pub(crate) async fn roles_of(
    store: &dyn SessionStore,
    rows: &[dsh_subagent::DescendantRow],
) -> Vec<Option<String>> {
    let ids: Vec<SessionId> = rows.iter().map(|row| row.entry.child_id.clone()).collect();
    store
        .header_many(&ids)
        .await
        .into_iter()
        .map(|header| header.ok().and_then(|header| header.composition.preset))
        .collect()
}

/// What `dsh agents` was asked.
#[derive(Debug)]
pub struct AgentsArgs<'a> {
    /// Where the sessions are, as messages name it (the session directory).
    pub dir: &'a Path,
    /// `--prune-orphans`: remove the orphan logs listed.
    pub prune_orphans: bool,
    /// `--json`: the listing as one JSON document (never with
    /// `--prune-orphans`: the document only reads).
    pub json: bool,
}

/// Run the command.
///
/// # Cancel safety
/// Cancel safe, except with `--prune-orphans`: a drop while orphans are
/// being removed leaves the ones not yet removed in place (each removal is
/// whole). Listing never writes.
pub async fn agents(
    source: &crate::engine::Source,
    prune_orphans: bool,
    json: bool,
) -> Result<(), CliError> {
    let store = source.store().await?;
    let args = AgentsArgs {
        dir: source.place(),
        prune_orphans,
        json,
    };
    let out = if args.json {
        crate::json::document(&document(store.as_ref(), args.dir).await?)
    } else {
        listing(store, &args).await?
    };
    print!("{out}");
    Ok(())
}

/// `dsh agents --json`: the whole directory as one document (the schema
/// is in docs/cli-json.md).
#[derive(Debug, Serialize)]
struct Document {
    /// [`crate::json::SCHEMA_VERSION`].
    schema: u32,
    /// Every tree, oldest root first.
    trees: Vec<TreeDoc>,
    /// Logs that cannot be read and no listed tree names.
    unreadable: Vec<UnreadableDoc>,
    /// Child logs no catalog names.
    orphans: Vec<OrphanDoc>,
    /// Logs whose header was never written whole.
    unfinished: Vec<SessionId>,
}

/// One tree of [`Document`].
#[derive(Debug, Serialize)]
struct TreeDoc {
    /// The root session.
    root: SessionId,
    /// Whether it is the most recent root (the default of `--root`).
    most_recent: bool,
    /// Why the tree cannot be listed; `agents` is then empty.
    error: Option<String>,
    /// Its children, depth first in catalog order (the lead is `root`).
    agents: Vec<AgentDoc>,
}

/// One child of a [`TreeDoc`].
#[derive(Debug, Serialize)]
struct AgentDoc {
    /// Its path of names from the root, else its name, else its session.
    name: String,
    /// Its session.
    session: SessionId,
    /// The session whose catalog holds it.
    parent: SessionId,
    /// Edge distance from the root: direct children are 1.
    depth: u32,
    /// The provider that made it.
    provider: String,
    /// `continuable`, `one-shot`, `external`, ...
    mode: String,
    /// Its label.
    label: String,
    /// Tokens of its settled activations, when any.
    usage: Option<dsh_subagent::budget::ChildUsage>,
    /// `corrupt`, `unavailable` or `unsupported` when its own descendants
    /// are not listed.
    diagnostic: Option<RowDiagnostic>,
}

/// A log of [`Document::unreadable`].
#[derive(Debug, Serialize)]
struct UnreadableDoc {
    /// The session its file name claims.
    session: SessionId,
    /// `corrupt`, `unsupported` or `unavailable`.
    kind: &'static str,
    /// What reading it said.
    error: String,
}

/// A log of [`Document::orphans`].
#[derive(Debug, Serialize)]
struct OrphanDoc {
    /// The child's session.
    session: SessionId,
    /// The parent its header names.
    parent: SessionId,
    /// Whether the parent's log exists.
    parent_exists: bool,
    /// Events after its header.
    events: usize,
}

/// The document of the directory `store` reads.
async fn document(store: &dyn SessionStore, dir: &Path) -> Result<Document, CliError> {
    let scan = sessions::scan(store).await?;
    scan.warn();
    let roots = scan.roots();
    let orphans = sessions::orphans(&scan, store).await;
    if roots.is_empty()
        && scan.unreadable.is_empty()
        && orphans.is_empty()
        && scan.unfinished.is_empty()
    {
        return Err(CliError::NoSessions(dir.to_path_buf()));
    }
    let mut listed: HashSet<SessionId> = HashSet::new();
    let mut trees = Vec::new();
    for (index, root) in roots.iter().enumerate() {
        let (agents, error) = match sessions::descendants(store, &root.id).await {
            Ok(rows) => (rows, None),
            Err(err) => (Vec::new(), Some(root_diagnostic(&err))),
        };
        listed.extend(agents.iter().map(|row| row.entry.child_id.clone()));
        trees.push(TreeDoc {
            root: root.id.clone(),
            most_recent: index + 1 == roots.len(),
            error,
            agents: agents
                .into_iter()
                .map(|row| AgentDoc {
                    name: sessions::display_name(&row),
                    usage: (!row.usage.is_empty()).then_some(row.usage),
                    diagnostic: row.diagnostic,
                    session: row.entry.child_id,
                    parent: row.parent_id,
                    depth: row.depth,
                    provider: row.entry.provider,
                    mode: row.entry.mode.as_str().to_owned(),
                    label: row.entry.label,
                })
                .collect(),
        });
    }
    Ok(Document {
        schema: crate::json::SCHEMA_VERSION,
        trees,
        unreadable: scan
            .unreadable
            .iter()
            .filter(|log| !listed.contains(&log.id))
            .map(|log| UnreadableDoc {
                session: log.id.clone(),
                kind: unreadable_kind(&log.error),
                error: crate::one_line(&log.error.to_string()),
            })
            .collect(),
        orphans: orphans
            .into_iter()
            .map(|orphan| OrphanDoc {
                session: orphan.id,
                parent: orphan.parent,
                parent_exists: orphan.parent_exists,
                events: orphan.events,
            })
            .collect(),
        unfinished: scan.unfinished.into_iter().map(|log| log.id).collect(),
    })
}

/// How a log that cannot be read is classed.
fn unreadable_kind(error: &StoreError) -> &'static str {
    match error {
        StoreError::Corrupt { .. } | StoreError::OutOfSequence { .. } => "corrupt",
        StoreError::UnsupportedFormat { .. } => "unsupported",
        _ => "unavailable",
    }
}

/// The listing of the directory `store` reads, pruning orphans when asked.
async fn listing(store: Arc<dyn SessionStore>, args: &AgentsArgs<'_>) -> Result<String, CliError> {
    let dir = args.dir;
    let scan = sessions::scan(store.as_ref()).await?;
    scan.warn();
    let roots = scan.roots();
    let orphans = sessions::orphans(&scan, store.as_ref()).await;
    if roots.is_empty()
        && scan.unreadable.is_empty()
        && orphans.is_empty()
        && scan.unfinished.is_empty()
    {
        return Err(CliError::NoSessions(dir.to_path_buf()));
    }
    // Listing reads the logs only: no runtime, nothing that could run.
    let mut out = String::new();
    let mut listed: HashSet<SessionId> = HashSet::new();
    for (index, root) in roots.iter().enumerate() {
        let latest = if index + 1 == roots.len() {
            " (most recent)"
        } else {
            ""
        };
        if index > 0 {
            out.push('\n');
        }
        out.push_str(&format!("tree {}{latest}\n", root.id));
        let rows = match sessions::descendants(store.as_ref(), &root.id).await {
            Ok(rows) => rows,
            Err(err) => {
                out.push_str(&format!(
                    "  {:<24} root  ({})\n",
                    "lead",
                    root_diagnostic(&err)
                ));
                continue;
            }
        };
        out.push_str(&format!("  {:<24} root\n", "lead"));
        let roles = roles_of(store.as_ref(), &rows).await;
        for (row, role) in rows.into_iter().zip(roles) {
            listed.insert(row.entry.child_id.clone());
            let name = format!(
                "{}{}",
                "  ".repeat(row.depth.saturating_sub(1) as usize),
                sessions::display_name(&row)
            );
            let mut line = format!(
                "  {name:<24} {:<6} {:<12} {}  {}",
                row.entry.provider,
                row.entry.mode.as_str(),
                row.entry.child_id,
                row.entry.label
            );
            if let Some(role) = role {
                line.push_str(&format!("  role: {role}"));
            }
            if !row.usage.is_empty() {
                line.push_str(&format!(
                    "  [{}]",
                    dsh_subagent::budget::usage_line(&row.usage.subtree)
                ));
            }
            if let Some(found) = row.diagnostic {
                line.push_str(&format!("  ({})", diagnostic(found)));
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    let stray: Vec<_> = scan
        .unreadable
        .iter()
        .filter(|log| !listed.contains(&log.id))
        .collect();
    if !stray.is_empty() {
        open_section(
            &mut out,
            "logs that cannot be read (no listed tree names them)",
        );
        for log in stray {
            let kind = unreadable_kind(&log.error);
            out.push_str(&format!(
                "  {}  ({kind}: {})\n",
                log.id,
                crate::one_line(&log.error.to_string())
            ));
        }
    }
    if !orphans.is_empty() {
        open_section(
            &mut out,
            if args.prune_orphans {
                "orphans (child logs no catalog names)"
            } else {
                "orphans (child logs no catalog names; `dsh agents --prune-orphans` removes them)"
            },
        );
        for orphan in &orphans {
            let mut line = format!("  {}  {}", orphan.id, orphan_text(orphan));
            if args.prune_orphans {
                match store.remove(&orphan.id).await {
                    Ok(()) => line.push_str(": removed"),
                    Err(err) => line.push_str(&kept(&err)),
                }
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    if !scan.unfinished.is_empty() {
        open_section(
            &mut out,
            if args.prune_orphans {
                "unfinished creates (no session header written whole)"
            } else {
                "unfinished creates (no session header written whole: a create running now, or one a crash cut short; `dsh agents --prune-orphans` removes them)"
            },
        );
        for unfinished in &scan.unfinished {
            let mut line = format!("  {}", unfinished.id);
            if args.prune_orphans {
                // Only a file still torn and held by no writer goes.
                match store.remove_torn(&unfinished.id).await {
                    Ok(true) => line.push_str(": removed"),
                    Ok(false) => {
                        line.push_str(": kept (a writer holds it, or it is no longer torn)")
                    }
                    Err(err) => line.push_str(&kept(&err)),
                }
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    Ok(out)
}

/// Start a section of the report: a blank line after any before it, then
/// its heading.
fn open_section(out: &mut String, heading: &str) {
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(heading);
    out.push('\n');
}

/// How a log that could not be removed is marked, with why.
fn kept(err: &StoreError) -> String {
    format!(": kept ({})", crate::one_line(&err.to_string()))
}

/// What an orphan is, in a few words.
fn orphan_text(orphan: &Orphan) -> String {
    let whose = if orphan.parent_exists {
        format!("child of {}, not in its catalog", orphan.parent)
    } else {
        format!("child of {}, whose log is gone", orphan.parent)
    };
    let events = match orphan.events {
        0 => "only a header".to_owned(),
        1 => "1 event".to_owned(),
        n => format!("{n} events"),
    };
    format!("{whose} ({events})")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::io::ErrorKind;

    use dsh_core::{AgentFactory, CancellationToken, CreateAgent, Durability, SessionHeader};
    use dsh_harness::JsonlStore;
    use dsh_subagent::catalog::{CATALOG_EVENT, catalog_payload};
    use dsh_subagent::{CatalogEntry, ChildMode};
    use dsh_test_support::store::{Fault, FaultStore, Op};

    use super::*;

    /// A log the OS refuses to read (permission denied, as mode 000 is for
    /// anyone but root; tests run as root, so the refusal is injected by a
    /// `FaultStore` over the real directory) is an `unavailable` row under
    /// its tree, and the rest of the tree lists.
    #[tokio::test]
    async fn a_log_that_cannot_be_read_is_an_unavailable_row() {
        let dir = tempfile::tempdir().unwrap();
        let jsonl = Arc::new(JsonlStore::new(dir.path(), Durability::None).unwrap());
        let harness = dsh_harness::Harness::builder(jsonl.clone())
            .model(Arc::new(dsh_harness::ScriptedModel::new()))
            .build()
            .unwrap();
        let lead = harness
            .create(CreateAgent {
                header: SessionHeader::new(SessionId::generate(), dir.path()),
                seed: Vec::new(),
                setup: Default::default(),
                cancel: CancellationToken::new(),
            })
            .await
            .unwrap();
        let lead = lead.agent().clone();
        let mut children = Vec::new();
        for name in ["locked", "open"] {
            let mut header =
                SessionHeader::new(SessionId::new(format!("s-{name}")).unwrap(), dir.path());
            header.parent_session = Some(lead.id().clone());
            header.delegation_depth = 1;
            jsonl.create(&header, &[]).await.unwrap().close().await;
            let entry = CatalogEntry {
                child_id: header.id.clone(),
                name: Some(name.to_owned()),
                label: format!("the {name} one"),
                provider: "spawn".to_owned(),
                mode: ChildMode::CONTINUABLE,
            };
            lead.record(CATALOG_EVENT, catalog_payload(&entry))
                .await
                .unwrap();
            children.push(header.id);
        }
        harness.shutdown().await;

        let faults = FaultStore::new((*jsonl).clone());
        for nth in 1..=4 {
            faults.fail_on_log(
                &children[0],
                Op::Load,
                nth,
                Fault::Kind(ErrorKind::PermissionDenied),
            );
        }
        let store: Arc<dyn SessionStore> = Arc::new(faults);
        let out = listing(
            store,
            &AgentsArgs {
                dir: dir.path(),
                prune_orphans: false,
                json: false,
            },
        )
        .await
        .unwrap();
        let out = out.replace(lead.id().as_str(), "[lead]");
        insta::assert_snapshot!(out);
    }
}
