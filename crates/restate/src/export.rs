//! [`export`]: a tree of sessions on the cluster written as the local
//! store's JSONL files, byte for byte (`<id>.jsonl`: the header line, then
//! one line per event, each ending in `\n`), so `dsh show`, dsh's parser,
//! the snapshot suites and replay read them as any local log. The tree is
//! [`crate::tree::members`].

use std::path::{Path, PathBuf};

use dsh_core::SessionId;

use crate::client::{ClientError, RestateClient};
use crate::tree::{self, TreeError};

/// Why an export stopped. Files written before the error stay.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The tree could not be read.
    #[error(transparent)]
    Tree(#[from] TreeError),
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
    for id in tree::members(client, root).await? {
        let failed = |source| ExportError::Client {
            session: id.clone(),
            source,
        };
        let header = client
            .header_line(&id)
            .await
            .map_err(failed)?
            .ok_or_else(|| TreeError::NoSuchSession(id.clone()))?;
        let mut text = header;
        text.push('\n');
        let mut from = 0;
        loop {
            let page = client.events_since(&id, from).await.map_err(failed)?;
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
