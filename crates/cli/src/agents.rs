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

/// What `dsh agents` was asked.
#[derive(Debug)]
pub struct AgentsArgs<'a> {
    /// Where the sessions are, as messages name it (the session directory).
    pub dir: &'a Path,
    /// `--prune-orphans`: remove the orphan logs listed.
    pub prune_orphans: bool,
}

/// Run the command.
///
/// # Cancel safety
/// Cancel safe, except with `--prune-orphans`: a drop while orphans are
/// being removed leaves the ones not yet removed in place (each removal is
/// whole). Listing never writes.
pub async fn agents(source: &crate::engine::Source, prune_orphans: bool) -> Result<(), CliError> {
    let store = source.store().await?;
    let args = AgentsArgs {
        dir: source.place(),
        prune_orphans,
    };
    let out = listing(store, &args).await?;
    print!("{out}");
    Ok(())
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
        for row in rows {
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
            let kind = match &log.error {
                StoreError::Corrupt { .. } | StoreError::OutOfSequence { .. } => "corrupt",
                StoreError::UnsupportedFormat { .. } => "unsupported",
                _ => "unavailable",
            };
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
            },
        )
        .await
        .unwrap();
        let out = out.replace(lead.id().as_str(), "[lead]");
        insta::assert_snapshot!(out);
    }
}
