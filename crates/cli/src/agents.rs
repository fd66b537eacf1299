//! `dsh agents`: every persisted tree in a session directory, one per root
//! session (oldest first), each listed from its root by
//! `list_descendants`: names or paths, providers, modes, labels, session
//! ids and row diagnostics. It only reads the directory.

use std::path::Path;
use std::sync::Arc;

use dsh_core::CancellationToken;
use dsh_harness::ScriptedModel;
use dsh_subagent::RowDiagnostic;

use crate::error::CliError;
use crate::sessions;
use crate::world::World;

fn diagnostic(diagnostic: RowDiagnostic) -> &'static str {
    match diagnostic {
        RowDiagnostic::Corrupt => "corrupt: its log or catalog cannot be parsed",
        RowDiagnostic::Unavailable => "unavailable: its log cannot be read",
        RowDiagnostic::Unsupported => "unsupported mode: not traversed",
    }
}

/// Run the command.
pub async fn agents(dir: &Path) -> Result<(), CliError> {
    let store = sessions::existing_store(dir)?;
    let headers = sessions::headers(store.as_ref()).await?;
    let roots = sessions::roots(&headers);
    if roots.is_empty() {
        return Err(CliError::NoSessions(dir.to_path_buf()));
    }
    // Listing loads no agent; the model is never asked.
    let world = World::build(store, Arc::new(ScriptedModel::new()), None, None)?;
    let mut out = String::new();
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
        out.push_str(&format!("  {:<24} root\n", "lead"));
        let rows = world
            .runtime
            .list_descendants(&root.id, &CancellationToken::new())
            .await?;
        for row in rows {
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
            if let Some(found) = row.diagnostic {
                line.push_str(&format!("  ({})", diagnostic(found)));
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    world.shutdown().await;
    print!("{out}");
    Ok(())
}
