//! `dsh replay [TREE]`: drive every session of the most recent (or a
//! named) tree again from its own log through the turn machine
//! ([`dsh_harness::replay`], B59) and say, per session, `identical` or
//! where it first diverges (the seq, the event the log has there and the
//! event the replay wrote). Model replies, tool outputs, times and ids all
//! come from the log: nothing runs, nothing is written, no model is asked.
//! Any divergence makes the command fail (exit 1) after every session is
//! reported. The store's headers are read once, by the scan that picks the
//! tree, and handed to the replay ([`replay_headers`]); a log whose header
//! cannot be read fails the command, as it did when the replay read them.

use std::fmt::Write as _;
use std::path::Path;

use dsh_core::SessionStore;
use dsh_harness::replay::{SessionReplay, Verdict, replay_headers};

use crate::error::CliError;
use crate::sessions;

/// Run the command.
///
/// # Cancel safety
/// Cancel safe: it only reads the logs.
pub async fn replay(source: &crate::engine::Source, tree: Option<&str>) -> Result<(), CliError> {
    let store = source.store().await?;
    let replays = replays(store.as_ref(), source.place(), tree).await?;
    print!("{}", render(&replays));
    let diverged = replays
        .iter()
        .filter(|replay| matches!(replay.verdict, Verdict::Diverged(_)))
        .count();
    if diverged > 0 {
        return Err(CliError::Refused(format!(
            "{diverged} of {} sessions diverged from their logs",
            replays.len()
        )));
    }
    Ok(())
}

/// Every session of the tree `tree` (the most recent when `None`) of the
/// directory `dir` that `store` reads, replayed, parents first.
async fn replays(
    store: &dyn SessionStore,
    dir: &Path,
    tree: Option<&str>,
) -> Result<Vec<SessionReplay>, CliError> {
    let scan = sessions::scan(store).await?;
    scan.warn();
    let root = scan.pick_root(dir, tree)?;
    if let Some(log) = scan.unreadable.first() {
        return Err(log.error.clone().into());
    }
    Ok(replay_headers(store, &scan.headers, Some(&root)).await?)
}

/// One line per session; a divergence adds the two events, one per line.
fn render(replays: &[SessionReplay]) -> String {
    let mut out = String::new();
    for replay in replays {
        // Writing to a String cannot fail.
        let _ = match &replay.verdict {
            Verdict::Identical { turns } => {
                let s = if *turns == 1 { "" } else { "s" };
                writeln!(out, "{}: identical ({turns} turn{s})", replay.id)
            }
            Verdict::Diverged(divergence) => {
                let line = |event: &Option<dsh_core::SessionEvent>| {
                    event
                        .as_ref()
                        .map_or_else(|| "nothing".to_owned(), |event| event.to_json_line())
                };
                writeln!(
                    out,
                    "{}: diverges at seq {}\n  expected: {}\n  got:      {}",
                    replay.id,
                    divergence.seq,
                    line(&divergence.expected),
                    line(&divergence.got)
                )
            }
        };
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use dsh_core::{Durability, SessionHeader, SessionId, SessionStore as _};
    use dsh_harness::JsonlStore;
    use dsh_test_support::store::{FaultStore, Op};

    use super::*;

    /// `dsh replay` reads each log's header once (the scan that picks the
    /// tree; the replay orders the tree from those headers) and its events
    /// once: two reads a log, where the replay reading the headers again
    /// made three.
    #[tokio::test]
    async fn each_header_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let jsonl = JsonlStore::new(dir.path(), Durability::None).unwrap();
        // A lead, its child and its grandchild.
        let mut ids: Vec<SessionId> = Vec::new();
        for depth in 0..3 {
            let mut header = SessionHeader::new(SessionId::generate(), dir.path());
            header.parent_session = ids.last().cloned();
            header.delegation_depth = depth;
            jsonl.create(&header, &[]).await.unwrap().close().await;
            ids.push(header.id);
        }
        let store = FaultStore::new(jsonl);
        let replays = replays(&store, dir.path(), Some(ids[0].as_str()))
            .await
            .unwrap();
        let replayed: Vec<_> = replays.iter().map(|replay| replay.id.clone()).collect();
        assert_eq!(replayed, ids, "parents first");
        for id in &ids {
            assert_eq!(store.calls_on_log(id, Op::Load), 2, "{id}");
        }
    }
}
