//! A tree of sessions on the cluster, read from its catalog entries: the
//! root and every session a `subagent/child` entry of a member names
//! (`payload.child_id`). [`members`] lists it, parents first; [`drain`]
//! stops it, children first: each member's inbox refuses new input
//! (`DRAINING`, notices still admitted) and its running turn ends
//! `aborted` at its next check.

use std::collections::{BTreeSet, VecDeque};

use dsh_core::SessionId;

use crate::client::{ClientError, RestateClient};

/// Why a tree could not be read or drained.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// A session of the tree does not exist on the cluster.
    #[error("session `{0}` does not exist on the cluster")]
    NoSuchSession(SessionId),
    /// The server could not be asked.
    #[error("`{session}`: {source}")]
    Client {
        /// The session being read or drained.
        session: SessionId,
        /// What failed.
        #[source]
        source: ClientError,
    },
}

/// The tree rooted at `root`, parents first (breadth first).
///
/// # Errors
/// [`TreeError`]: a member is missing or the server failed.
///
/// # Cancel safety
/// Cancel safe: it changes nothing.
pub async fn members(
    client: &RestateClient,
    root: &SessionId,
) -> Result<Vec<SessionId>, TreeError> {
    let mut members = Vec::new();
    let mut seen = BTreeSet::from([root.clone()]);
    let mut next = VecDeque::from([root.clone()]);
    while let Some(id) = next.pop_front() {
        let failed = |source| TreeError::Client {
            session: id.clone(),
            source,
        };
        if client.header_line(&id).await.map_err(failed)?.is_none() {
            return Err(TreeError::NoSuchSession(id));
        }
        let mut from = 0;
        loop {
            let page = client.events_since(&id, from).await.map_err(failed)?;
            for child in children(&page.lines) {
                if seen.insert(child.clone()) {
                    next.push_back(child);
                }
            }
            from = page.next_seq;
            if page.complete {
                break;
            }
        }
        members.push(id);
    }
    Ok(members)
}

/// Drain the tree rooted at `root`, children first: each member refuses
/// new input from now on and is interrupted. Returns the members drained.
///
/// # Errors
/// As [`members`]; a member the server failed to drain (those before it
/// stay drained; draining again is harmless).
///
/// # Cancel safety
/// Cancel safe to drop; the members drained so far stay drained.
pub async fn drain(client: &RestateClient, root: &SessionId) -> Result<Vec<SessionId>, TreeError> {
    let members = members(client, root).await?;
    for id in members.iter().rev() {
        let failed = |source| TreeError::Client {
            session: id.clone(),
            source,
        };
        client.drain(id).await.map_err(failed)?;
        client.interrupt(id).await.map_err(failed)?;
    }
    Ok(members)
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
