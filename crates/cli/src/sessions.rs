//! Reading a session directory as trees: its roots (sessions with no parent),
//! the most recent one, and a name resolved within a root's tree from the
//! persisted catalogs. Everything here only reads: it never creates the
//! directory, opens a log for writing or resumes an agent.

use std::path::Path;
use std::sync::Arc;

use dsh_core::{CancellationToken, Durability, SessionHeader, SessionId, SessionStore};
use dsh_harness::JsonlStore;
use dsh_subagent::{DescendantRow, ROOT_NAME, SubagentRuntime};

use crate::error::CliError;

/// The store over an existing session directory (refused when it is
/// missing, so a read never creates it).
pub fn existing_store(dir: &Path) -> Result<Arc<JsonlStore>, CliError> {
    if !dir.is_dir() {
        return Err(CliError::NoSessionDir(dir.to_path_buf()));
    }
    Ok(Arc::new(JsonlStore::new(dir, Durability::TurnBoundary)?))
}

/// Every session's header, in id order; any log whose header cannot be read
/// makes the directory corrupt.
pub async fn headers(store: &dyn SessionStore) -> Result<Vec<SessionHeader>, CliError> {
    let mut headers = Vec::new();
    for id in store.list().await? {
        let header = store.header(&id).await.map_err(|err| match err {
            dsh_core::StoreError::Io { .. } | dsh_core::StoreError::NotFound(_) => {
                CliError::from(err)
            }
            err => CliError::Corrupt(err.to_string()),
        })?;
        headers.push(header);
    }
    Ok(headers)
}

/// The root sessions, oldest first (creation time, then id).
pub fn roots(headers: &[SessionHeader]) -> Vec<&SessionHeader> {
    let mut roots: Vec<&SessionHeader> = headers
        .iter()
        .filter(|header| header.parent_session.is_none())
        .collect();
    roots.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
    roots
}

/// The root `wanted` names, or the most recent root.
pub fn pick_root(
    dir: &Path,
    headers: &[SessionHeader],
    wanted: Option<&str>,
) -> Result<SessionId, CliError> {
    let roots = roots(headers);
    match wanted {
        Some(wanted) => roots
            .iter()
            .find(|header| header.id.as_str() == wanted)
            .map(|header| header.id.clone())
            .ok_or_else(|| CliError::UnknownRoot(wanted.to_owned())),
        None => roots
            .last()
            .map(|header| header.id.clone())
            .ok_or_else(|| CliError::NoSessions(dir.to_path_buf())),
    }
}

/// A member of a tree, found by name.
#[derive(Debug, Clone)]
pub enum Member {
    /// The root itself (`lead`).
    Root(SessionId),
    /// A descendant, as the listing shows it.
    Child(Box<DescendantRow>),
}

impl Member {
    /// The member's session.
    pub fn id(&self) -> &SessionId {
        match self {
            Self::Root(id) => id,
            Self::Child(row) => &row.entry.child_id,
        }
    }
}

/// The row's display name: its path, else its name, else its session id.
pub fn display_name(row: &DescendantRow) -> String {
    row.path
        .clone()
        .or_else(|| row.entry.name.clone())
        .unwrap_or_else(|| row.entry.child_id.to_string())
}

/// Resolve `name` in `root`'s persisted tree: `lead`, a slash path of names,
/// or a member's session id.
pub async fn resolve(
    runtime: &SubagentRuntime,
    root: &SessionId,
    name: &str,
) -> Result<Member, CliError> {
    if name == ROOT_NAME || name == root.as_str() {
        return Ok(Member::Root(root.clone()));
    }
    let rows = runtime
        .list_descendants(root, &CancellationToken::new())
        .await?;
    rows.into_iter()
        .find(|row| row.path.as_deref() == Some(name) || row.entry.child_id.as_str() == name)
        .map(|row| Member::Child(Box::new(row)))
        .ok_or_else(|| CliError::UnknownAgent {
            name: name.to_owned(),
            root: root.to_string(),
        })
}
