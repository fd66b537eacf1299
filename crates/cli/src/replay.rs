//! `dsh replay [TREE]`: drive every session of the most recent (or a
//! named) tree again from its own log through the turn machine
//! ([`dsh_harness::replay`], B59) and say, per session, `identical` or
//! where it first diverges (the seq, the event the log has there and the
//! event the replay wrote). Model replies, tool outputs, times and ids all
//! come from the log: nothing runs, nothing is written, no model is asked.
//! Any divergence makes the command fail (exit 1) after every session is
//! reported.

use std::fmt::Write as _;

use dsh_harness::replay::{SessionReplay, Verdict, replay_tree};

use crate::error::CliError;
use crate::sessions;

/// Run the command.
///
/// # Cancel safety
/// Cancel safe: it only reads the logs.
pub async fn replay(source: &crate::engine::Source, tree: Option<&str>) -> Result<(), CliError> {
    let store = source.store().await?;
    let scan = sessions::scan(store.as_ref()).await?;
    scan.warn();
    let root = scan.pick_root(source.place(), tree)?;
    let replays = replay_tree(store.as_ref(), Some(&root)).await?;
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
