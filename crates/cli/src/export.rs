//! `dsh export [TREE] --to DIR`: write the logs of a tree (the most recent
//! root's, or TREE's) as files of the local JSONL store in DIR, from
//! whichever store the sessions are read from: a session directory or a
//! Restate cluster (`--engine restate`). The files are the local store's
//! own (it writes them, each created whole from its header and events), so
//! DIR can be read by every command with `--dir DIR`, and a tree exported
//! from a session directory is byte for byte the directory's files.
//!
//! A tree's members are the sessions whose parent chain reaches its root
//! (a child no catalog names is exported with its tree, as it lies). A
//! session that already exists in DIR is refused before anything is
//! written; nothing else in DIR is touched.

use std::collections::HashMap;
use std::path::Path;

use dsh_core::{Durability, SessionHeader, SessionId, SessionStore};

use crate::error::CliError;
use crate::sessions;

/// What `dsh export` was asked.
pub struct ExportArgs<'a> {
    /// Where the sessions are read from.
    pub source: &'a crate::engine::Source,
    /// The tree's root session (default: the most recent root).
    pub tree: Option<&'a str>,
    /// The directory written to (created if missing).
    pub to: &'a Path,
}

/// Run the command: print one line naming how many sessions went where.
///
/// # Cancel safety
/// Not cancel safe: a drop while logs are being written leaves the ones
/// already written in DIR (each whole, by the store's create).
pub async fn export(args: ExportArgs<'_>) -> Result<(), CliError> {
    let store = args.source.store().await?;
    let scan = sessions::scan(store.as_ref()).await?;
    scan.warn();
    let root = scan.pick_root(args.source.place(), args.tree)?;
    let target = sessions::open_store(args.to, Durability::TurnBoundary)?;
    let members = tree_members(&scan.headers, &root);
    copy(store.as_ref(), &members, target.as_ref()).await?;
    let s = if members.len() == 1 { "" } else { "s" };
    println!(
        "exported {} session{s} of tree {root} to {}",
        members.len(),
        args.to.display()
    );
    Ok(())
}

/// The sessions of `headers` whose parent chain reaches `root`, the root
/// first, then in id order.
fn tree_members(headers: &[SessionHeader], root: &SessionId) -> Vec<SessionId> {
    let parents: HashMap<&SessionId, Option<&SessionId>> = headers
        .iter()
        .map(|header| (&header.id, header.parent_session.as_ref()))
        .collect();
    let reaches_root = |id: &SessionId| {
        let mut at = id;
        // A cycle of parents (a damaged header) cannot loop forever.
        for _ in 0..=parents.len() {
            if at == root {
                return true;
            }
            match parents.get(at).copied().flatten() {
                Some(parent) => at = parent,
                None => return false,
            }
        }
        false
    };
    let mut members: Vec<SessionId> = headers
        .iter()
        .map(|header| header.id.clone())
        .filter(|id| id != root && reaches_root(id))
        .collect();
    members.sort();
    members.insert(0, root.clone());
    members
}

/// Write each of `members`, loaded from `source`, into `target`: checked
/// for clashes first, then each log created whole from its header and
/// events, and the target flushed.
async fn copy(
    source: &dyn SessionStore,
    members: &[SessionId],
    target: &dyn SessionStore,
) -> Result<(), CliError> {
    for id in members {
        if target.exists(id).await? {
            return Err(CliError::Refused(format!(
                "session {id} is already in the export directory; nothing was written"
            )));
        }
    }
    for id in members {
        let loaded = source.load(id).await?;
        let log = target.create(&loaded.header, &loaded.events).await?;
        log.close().await;
    }
    target.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use proptest::prelude::*;

    /// A forest of `parents.len()` sessions: session `i`'s parent is
    /// `parents[i] % i` (a root when `None` or `i == 0`).
    fn forest(parents: &[Option<usize>]) -> Vec<SessionHeader> {
        let id = |i: usize| SessionId::new(format!("s{i:03}")).unwrap();
        parents
            .iter()
            .enumerate()
            .map(|(i, parent)| {
                let mut header = SessionHeader::new(id(i), "/work");
                header.parent_session = parent.filter(|_| i > 0).map(|p| id(p % i));
                header
            })
            .collect()
    }

    proptest! {
        /// The members are the root and exactly the sessions below it:
        /// every member's chain reaches the root, and every session left
        /// out is in another tree.
        #[test]
        fn a_tree_is_its_root_and_everything_below_it(
            parents in prop::collection::vec(prop::option::of(0usize..64), 1..40),
            pick in 0usize..40,
        ) {
            let headers = forest(&parents);
            let root = headers[pick % headers.len()].id.clone();
            let members = tree_members(&headers, &root);
            prop_assert_eq!(&members[0], &root);
            let parent_of: HashMap<_, _> = headers
                .iter()
                .map(|h| (h.id.clone(), h.parent_session.clone()))
                .collect();
            let below = |id: &SessionId| {
                let mut at = id.clone();
                loop {
                    if at == root { return true; }
                    match parent_of[&at].clone() { Some(p) => at = p, None => return false }
                }
            };
            for header in &headers {
                prop_assert_eq!(members.contains(&header.id), below(&header.id));
            }
        }
    }
}
