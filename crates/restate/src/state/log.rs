//! The `Session` object's log as Restate state: the header line, the
//! events in chunks of [`CHUNK_EVENTS`] lines, and the [`LogHead`].
//!
//! A chunk holds the exact JSONL lines the local store writes (each
//! [`SessionEvent::to_json_line`] followed by `\n`), so one line format holds
//! everywhere and an export is the header line followed by the chunks
//! concatenated. Chunk `n` (state key [`chunk_key`]`(n)`) holds the events
//! with seqs `n * CHUNK_EVENTS ..`; only the last chunk is ever partial.
//! Everything here is pure: the object's handlers fetch the state, call
//! these functions and write back what they return.

use dsh_core::{EventPayload, SessionEvent};
use serde::{Deserialize, Serialize};

/// How many events one chunk holds: one state entry stays far below the
/// server's 32 MiB entry limit for ordinary events, and an append rewrites
/// at most one partial chunk.
pub const CHUNK_EVENTS: u64 = 64;

/// The state key of the header line.
pub const HEADER_KEY: &str = "header";

/// The state key of the [`LogHead`].
pub const HEAD_KEY: &str = "head";

/// The state key of chunk `index`.
pub fn chunk_key(index: u64) -> String {
    format!("log/{index}")
}

/// The chunk that holds event `seq`.
pub fn chunk_of(seq: u64) -> u64 {
    seq / CHUNK_EVENTS
}

/// Where a session's log stands: what the next append must continue from,
/// and the turn bookkeeping a reader needs without reading the chunks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogHead {
    /// The seq the next event must have (the number of events).
    pub next_seq: u64,
    /// How many turns have ended.
    pub turns_ended: u64,
    /// The turn that started and has not ended, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_turn: Option<u64>,
    /// The Restate invocation running the open turn (the turn's epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_invocation_id: Option<String>,
    /// How many activations the session has had: the epoch that replaces
    /// the local registry's.
    #[serde(default)]
    pub activation: u64,
}

/// A chunk to write back: its index and its whole new text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkWrite {
    /// The chunk's index (state key [`chunk_key`]).
    pub index: u64,
    /// The JSONL lines the chunk now holds, each ending in `\n`.
    pub lines: Vec<u8>,
}

/// Why events could not be appended or a chunk could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// The events do not continue the log.
    #[error("expected event seq {expected}, got {got}")]
    OutOfSequence {
        /// The seq the log needs next.
        expected: u64,
        /// The seq offered.
        got: u64,
    },
    /// The partial last chunk the append continues was not given, or holds
    /// another number of lines than the head says.
    #[error("chunk {index} holds {found} lines where the head says {expected}")]
    TailMismatch {
        /// The chunk.
        index: u64,
        /// Lines the head implies.
        expected: u64,
        /// Lines found.
        found: u64,
    },
    /// A chunk's text is not UTF-8 lines, each ending in `\n`.
    #[error("chunk {index} is not whole UTF-8 lines")]
    BadChunk {
        /// The chunk.
        index: u64,
    },
}

/// Append `events` to a log standing at `head`, whose partial last chunk
/// (when `head.next_seq` is not a multiple of [`CHUNK_EVENTS`]) is `tail`.
/// Returns the chunks to write back, in order, and advances `head`; on an
/// error `head` is unchanged and nothing is to be written.
///
/// # Errors
/// [`LogError::OutOfSequence`] when the seqs do not continue the log from
/// `head.next_seq` one by one; [`LogError::TailMismatch`] when `tail` does
/// not hold the partial chunk's lines.
pub fn append(
    head: &mut LogHead,
    tail: Option<&[u8]>,
    events: &[SessionEvent],
) -> Result<Vec<ChunkWrite>, LogError> {
    for (offset, event) in (0u64..).zip(events) {
        let expected = head.next_seq + offset;
        if event.seq != expected {
            return Err(LogError::OutOfSequence {
                expected,
                got: event.seq,
            });
        }
    }
    let in_tail = head.next_seq % CHUNK_EVENTS;
    let tail = tail.unwrap_or_default();
    let found = line_count(tail);
    if found != in_tail {
        return Err(LogError::TailMismatch {
            index: chunk_of(head.next_seq),
            expected: in_tail,
            found,
        });
    }
    let mut writes: Vec<ChunkWrite> = Vec::new();
    let mut next = head.clone();
    for event in events {
        let index = chunk_of(event.seq);
        if writes.last().is_none_or(|last| last.index != index) {
            let lines = if event.seq == head.next_seq {
                tail.to_vec()
            } else {
                Vec::new()
            };
            writes.push(ChunkWrite { index, lines });
        }
        if let Some(write) = writes.last_mut() {
            write
                .lines
                .extend_from_slice(event.to_json_line().as_bytes());
            write.lines.push(b'\n');
        }
        next.observe(event);
    }
    *head = next;
    Ok(writes)
}

impl LogHead {
    /// Count `event` into the head.
    fn observe(&mut self, event: &SessionEvent) {
        self.next_seq = event.seq + 1;
        match &event.payload {
            EventPayload::TurnStart(start) => self.open_turn = Some(start.turn),
            EventPayload::TurnEnd(_) => {
                self.open_turn = None;
                self.turn_invocation_id = None;
                self.turns_ended += 1;
            }
            _ => {}
        }
    }
}

fn line_count(lines: &[u8]) -> u64 {
    lines
        .iter()
        .fold(0, |count, byte| count + u64::from(*byte == b'\n'))
}

/// The lines of chunk `index` whose seqs are `from` or later, as text.
///
/// # Errors
/// [`LogError::BadChunk`] when the chunk is not UTF-8 or its last line has
/// no newline.
pub fn lines_from(index: u64, chunk: &[u8], from: u64) -> Result<&str, LogError> {
    let text = std::str::from_utf8(chunk).map_err(|_| LogError::BadChunk { index })?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(LogError::BadChunk { index });
    }
    let skip = from.saturating_sub(index * CHUNK_EVENTS);
    let mut start = 0;
    for _ in 0..skip {
        match text[start..].find('\n') {
            Some(at) => start += at + 1,
            None => return Ok(""),
        }
    }
    Ok(&text[start..])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use dsh_core::session::{StepStart, TurnEnd, TurnStart};
    use proptest::prelude::*;

    /// A log of `len` events: turns of a start, two steps and an end.
    fn events(len: u64) -> Vec<SessionEvent> {
        (0..len)
            .map(|seq| {
                let turn = seq / 4;
                let payload = match seq % 4 {
                    0 => EventPayload::TurnStart(TurnStart { turn }),
                    3 => EventPayload::TurnEnd(TurnEnd {
                        turn,
                        stop_reason: dsh_core::StopReason::COMPLETED,
                        diagnostic: None,
                    }),
                    step => EventPayload::StepStart(StepStart { turn, step }),
                };
                SessionEvent {
                    seq,
                    time: 1_700_000_000_000 + seq,
                    payload,
                }
            })
            .collect()
    }

    /// Apply appends of the given batch sizes to a map of chunks.
    fn write_in_batches(
        all: &[SessionEvent],
        batches: &[usize],
    ) -> (LogHead, std::collections::BTreeMap<u64, Vec<u8>>) {
        let mut head = LogHead::default();
        let mut chunks = std::collections::BTreeMap::new();
        let mut at = 0;
        for &size in batches {
            let batch = &all[at..(at + size).min(all.len())];
            at += batch.len();
            let tail = chunks.get(&chunk_of(head.next_seq)).cloned();
            for write in append(&mut head, tail.as_deref(), batch).unwrap() {
                chunks.insert(write.index, write.lines);
            }
        }
        (head, chunks)
    }

    proptest! {
        /// However the events are batched, the chunks concatenated are the
        /// JSONL lines the local store writes, every chunk but the last is
        /// full, and reading from any seq gives the events from there.
        #[test]
        fn chunks_hold_the_local_lines_whatever_the_batching(
            len in 0u64..300,
            batches in proptest::collection::vec(0usize..100, 0..40),
            from in 0u64..320,
        ) {
            let all = events(len);
            let mut batches = batches;
            batches.push(all.len());
            let (head, chunks) = write_in_batches(&all, &batches);
            let expected: String = all.iter().map(|e| e.to_json_line() + "\n").collect();
            let joined: Vec<u8> = chunks.values().flatten().copied().collect();
            prop_assert_eq!(String::from_utf8(joined).unwrap(), expected);
            prop_assert_eq!(head.next_seq, len);
            prop_assert_eq!(head.turns_ended, len / 4);
            prop_assert_eq!(head.open_turn, (len % 4 != 0).then_some(len / 4));
            let count = u64::try_from(chunks.len()).unwrap();
            for (index, lines) in &chunks {
                if index + 1 < count {
                    prop_assert_eq!(line_count(lines), CHUNK_EVENTS);
                }
            }
            let read: String = chunks
                .iter()
                .filter(|(index, _)| **index >= chunk_of(from))
                .map(|(index, lines)| lines_from(*index, lines, from).unwrap().to_owned())
                .collect();
            let tail: String = all.iter().skip(usize::try_from(from).unwrap()).map(|e| e.to_json_line() + "\n").collect();
            prop_assert_eq!(read, tail);
        }

        /// An append whose first seq is not the head's next one is refused
        /// and leaves the head as it was.
        #[test]
        fn an_append_out_of_sequence_changes_nothing(len in 1u64..200, skew in 1u64..5, back in proptest::bool::ANY) {
            let all = events(len + 10);
            let (head, chunks) = write_in_batches(&all[..usize::try_from(len).unwrap()], &[usize::MAX]);
            let mut moved = head.clone();
            let start = if back { len - skew.min(len) } else { len + skew };
            let stray = SessionEvent { seq: start, ..all[0].clone() };
            let tail = chunks.get(&chunk_of(len)).cloned();
            let refused = append(&mut moved, tail.as_deref(), &[stray]).unwrap_err();
            prop_assert_eq!(refused, LogError::OutOfSequence { expected: len, got: start });
            prop_assert_eq!(moved, head);
        }
    }

    #[test]
    fn an_append_without_its_partial_tail_is_refused() {
        let all = events(5);
        let (mut head, _) = write_in_batches(&all[..3], &[3]);
        let refused = append(&mut head, None, &all[3..]).unwrap_err();
        assert_eq!(
            refused,
            LogError::TailMismatch {
                index: 0,
                expected: 3,
                found: 0
            }
        );
        assert_eq!(head.next_seq, 3);
    }

    #[test]
    fn a_chunk_with_a_torn_line_is_bad() {
        assert_eq!(
            lines_from(2, b"{\"seq\":128}", 128),
            Err(LogError::BadChunk { index: 2 })
        );
    }
}
