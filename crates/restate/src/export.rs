//! [`export`]: a tree of sessions on the cluster written as the local
//! store's JSONL files, byte for byte (`<id>.jsonl`: the header line, then
//! one line per event, each ending in `\n`), so `dsh show`, dsh's parser,
//! the snapshot suites and replay read them as any local log. The tree is
//! the root and every session a `subagent/child` catalog entry of a
//! session in it names (`payload.child_id`), parents first.

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use dsh_core::SessionId;

use crate::client::{ClientError, RestateClient};

/// Why an export stopped. Files written before the error stay.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A session of the tree does not exist on the cluster.
    #[error("session `{0}` does not exist on the cluster")]
    NoSuchSession(SessionId),
    /// The server could not be asked.
    #[error("reading `{session}`: {source}")]
    Client {
        /// The session being read.
        session: SessionId,
        /// What failed.
        #[source]
        source: ClientError,
    },
    /// A file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Write the tree rooted at `root` into `dir` (created if missing) as
/// `<id>.jsonl` files; returns the sessions written, parents first.
///
/// # Errors
/// [`ExportError`]: a session named in the tree is missing, the server
/// failed, or a file could not be written.
///
/// # Cancel safety
/// Dropped, the files written so far stay (each is written whole, as one
/// `write`; a file being written may be left partial).
pub async fn export(
    client: &RestateClient,
    root: &SessionId,
    dir: &Path,
) -> Result<Vec<SessionId>, ExportError> {
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|source| ExportError::Write {
            path: dir.to_owned(),
            source,
        })?;
    let mut written = Vec::new();
    let mut seen = BTreeSet::from([root.clone()]);
    let mut next = VecDeque::from([root.clone()]);
    while let Some(id) = next.pop_front() {
        let failed = |source| ExportError::Client {
            session: id.clone(),
            source,
        };
        let header = client
            .header_line(&id)
            .await
            .map_err(failed)?
            .ok_or_else(|| ExportError::NoSuchSession(id.clone()))?;
        let mut text = header;
        text.push('\n');
        let mut from = 0;
        loop {
            let page = client.events_since(&id, from).await.map_err(failed)?;
            for child in children(&page.lines) {
                if seen.insert(child.clone()) {
                    next.push_back(child);
                }
            }
            text.push_str(&page.lines);
            from = page.next_seq;
            if page.complete {
                break;
            }
        }
        let path = dir.join(format!("{id}.jsonl"));
        tokio::fs::write(&path, text)
            .await
            .map_err(|source| ExportError::Write { path, source })?;
        written.push(id);
    }
    Ok(written)
}

/// The child ids the `subagent/child` entries among `lines` name.
fn children(lines: &str) -> Vec<SessionId> {
    lines
        .lines()
        .filter(|line| line.contains("\"subagent/child\""))
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["type"] == "subagent/child")
        .filter_map(|event| event["payload"]["child_id"].as_str().map(str::to_owned))
        .filter_map(|id| SessionId::new(id).ok())
        .collect()
}
