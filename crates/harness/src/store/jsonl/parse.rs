//! The JSON-lines parser of a session log: the header line, then one event
//! per line, split over several threads for large logs. It decides what a
//! file is (a session, a stray that is not one, a log in a newer format) and
//! where a log ends: the only line it may drop is a torn last one (no `\n`),
//! which it reports. It never reads the disk and never skips a line in the
//! middle.

use std::path::Path;
use std::sync::OnceLock;

use dsh_core::codec::{LineReader, read_header};
use dsh_core::session::FORMAT_VERSION;
use dsh_core::{SessionEvent, SessionHeader, SessionId, StoreError, TornTail};
use serde::Deserialize;
use serde::de::IgnoredAny;

/// A log as parsed from its bytes.
pub(super) struct Parsed {
    pub(super) header: SessionHeader,
    pub(super) events: Vec<SessionEvent>,
    /// How many bytes of the file belong to the log (everything but a torn tail).
    pub(super) keep: u64,
    /// The torn last line, if any (excluded from `keep`).
    pub(super) torn_tail: Option<TornTail>,
    /// Whether the last line parsed but lacks its `\n`.
    pub(super) missing_newline: bool,
}

pub(super) fn corrupt(path: &Path, line: u64, message: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

/// Parse the header line (with or without its `\n`) and check it names `id`.
///
/// A file whose first line is not a session header at all (empty, not a
/// JSON object, or an object without `format` and `id`) is
/// [`StoreError::NotASession`]; one in a newer format is
/// [`StoreError::UnsupportedFormat`]; any other fault is
/// [`StoreError::Corrupt`] at line 1. The happy path parses the line once.
pub(super) fn parse_header(
    id: &SessionId,
    path: &Path,
    line: &[u8],
) -> Result<SessionHeader, StoreError> {
    let header = match read_header(line, Some(id), None) {
        Ok(header) => header,
        Err(err) => return Err(classify_header(path, line, &err)),
    };
    check_format(path, u64::from(header.format))?;
    if header.id != *id {
        let message = format!(
            "the header names session `{}`, but the file is the log of `{id}`",
            header.id
        );
        return Err(corrupt(path, 1, message));
    }
    Ok(header)
}

/// Refuse a format newer than this build reads.
fn check_format(path: &Path, found: u64) -> Result<(), StoreError> {
    if found > u64::from(FORMAT_VERSION) {
        return Err(StoreError::UnsupportedFormat {
            path: path.to_path_buf(),
            found,
            supported: FORMAT_VERSION,
        });
    }
    Ok(())
}

/// The two fields that make a first line a session header, read without
/// looking at the rest (whose shape a newer format may have changed).
#[derive(Deserialize)]
struct HeaderProbe {
    format: Option<serde_json::Value>,
    id: Option<IgnoredAny>,
}

/// Say why a first line that does not parse as a header fails.
fn classify_header(path: &Path, line: &[u8], err: &serde_json::Error) -> StoreError {
    let not_a_session = |reason: &str| StoreError::NotASession {
        path: path.to_path_buf(),
        reason: reason.to_owned(),
    };
    let text = line.trim_ascii_start();
    if text.is_empty() {
        // A whole file this empty is an unfinished create (see
        // `parse_lone_header`); here a blank line is followed by others.
        return not_a_session("its first line is blank");
    }
    if text.first() != Some(&b'{') {
        return not_a_session("its first line is not a JSON object");
    }
    match serde_json::from_slice::<HeaderProbe>(line) {
        Ok(HeaderProbe {
            format: Some(format),
            id: Some(_),
        }) => {
            if let Some(found) = format.as_u64()
                && let Err(newer) = check_format(path, found)
            {
                return newer;
            }
            corrupt(path, 1, format!("unreadable session header: {err}"))
        }
        Ok(_) => {
            not_a_session("its first line is a JSON object without a session's `format` and `id`")
        }
        // Not even JSON, though it opens like an object: a damaged header.
        Err(_) => corrupt(path, 1, format!("unreadable session header: {err}")),
    }
}

/// Whether `bytes`, a whole file, is what a create that crashed before it was
/// acknowledged leaves: nothing, or a first line without its `\n` that is not
/// a whole header. Such a file never held an acknowledged log, so the next
/// create of its id may replace it.
pub(super) fn torn_header(bytes: &[u8]) -> bool {
    !bytes.contains(&b'\n') && read_header(bytes, None, None).is_err()
}

/// Parse a file's only line, which has no `\n`: a header whose newline was
/// lost, or (see [`torn_header`]) what an unfinished create leaves, nothing
/// or part of a header, [`StoreError::TornCreate`]. A whole header in a
/// newer format stays [`StoreError::UnsupportedFormat`].
pub(super) fn parse_lone_header(
    id: &SessionId,
    path: &Path,
    bytes: &[u8],
) -> Result<SessionHeader, StoreError> {
    parse_header(id, path, bytes).map_err(|err| match err {
        StoreError::Corrupt { .. } | StoreError::NotASession { .. } if torn_header(bytes) => {
            StoreError::TornCreate {
                path: path.to_path_buf(),
            }
        }
        other => other,
    })
}

/// Parse a whole log. The only line that may fail without failing the log is
/// a last one with no `\n` (a torn append), which is reported, not kept.
pub(super) fn parse_log(id: &SessionId, path: &Path, bytes: Vec<u8>) -> Result<Parsed, StoreError> {
    let total = bytes.len() as u64;
    let Some(last_newline) = bytes.iter().rposition(|&byte| byte == b'\n') else {
        // No complete line: at most a header whose newline was lost, or the
        // torn header of a create that crashed before it was acknowledged
        // (a create writes its header in place, see `torn_header`).
        let header = parse_lone_header(id, path, &bytes)?;
        return Ok(Parsed {
            header,
            events: Vec::new(),
            keep: total,
            torn_tail: None,
            missing_newline: !bytes.is_empty(),
        });
    };
    let header_end = bytes
        .iter()
        .position(|&byte| byte == b'\n')
        .unwrap_or(last_newline);
    let header = parse_header(id, path, &bytes[..header_end])?;
    let events = if header_end < last_newline {
        let region = &bytes[header_end + 1..last_newline];
        let threads = if region.len() >= PARALLEL_PARSE_BYTES {
            parse_threads()
        } else {
            1
        };
        parse_events(path, region, threads)?
    } else {
        Vec::new()
    };
    finish_log(path, header, events, &bytes[last_newline + 1..], total)
}

/// A log of `total` bytes from its header, the events of its complete
/// lines, and `tail`, what follows its last `\n`: a last line that parses
/// (and is in place) is kept and its `\n` reported missing; anything else
/// there is a torn tail, cut.
pub(super) fn finish_log(
    path: &Path,
    header: SessionHeader,
    mut events: Vec<SessionEvent>,
    tail: &[u8],
    total: u64,
) -> Result<Parsed, StoreError> {
    // The header, one line per event, then the tail.
    let next_line = events.len() as u64 + 2;
    if tail.is_empty() {
        return Ok(Parsed {
            header,
            events,
            keep: total,
            torn_tail: None,
            missing_newline: false,
        });
    }
    let tail_event = std::str::from_utf8(tail)
        .ok()
        .and_then(|text| SessionEvent::from_json_line(text).ok());
    match tail_event {
        Some(event) => {
            check_seq(path, next_line, events.len() as u64, &event)?;
            events.push(event);
            Ok(Parsed {
                header,
                events,
                keep: total,
                torn_tail: None,
                missing_newline: true,
            })
        }
        None => Ok(Parsed {
            header,
            events,
            keep: total - tail.len() as u64,
            torn_tail: Some(TornTail {
                path: path.to_path_buf(),
                line: next_line,
                bytes: tail.len() as u64,
            }),
            missing_newline: false,
        }),
    }
}

/// Logs at least this large are parsed on several threads.
pub(super) const PARALLEL_PARSE_BYTES: usize = 1 << 20;

/// How many threads parse a large log.
pub(super) fn parse_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .clamp(1, 8)
    })
}

/// `work` done on every one of `parts`, results in order: the first part
/// on the calling thread, each other on a thread of its own named `name`
/// (or here, after the first, when no thread can be started). A panic in
/// any part is resumed here. `work` is told each part's index.
pub(super) fn on_threads<P, R, F>(name: &str, parts: &[P], work: F) -> Vec<R>
where
    P: Sync,
    R: Send,
    F: Fn(usize, &P) -> R + Sync,
{
    let Some((head, rest)) = parts.split_first() else {
        return Vec::new();
    };
    if rest.is_empty() {
        return vec![work(0, head)];
    }
    std::thread::scope(|scope| {
        let work = &work;
        let pending: Vec<_> = (1..)
            .zip(rest)
            .map(|(index, part)| {
                let spawned = std::thread::Builder::new()
                    .name(name.to_owned())
                    .spawn_scoped(scope, move || work(index, part));
                (index, part, spawned.ok())
            })
            .collect();
        let mut results = Vec::with_capacity(parts.len());
        results.push(work(0, head));
        for (index, part, spawned) in pending {
            results.push(match spawned {
                Some(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                // No thread to spare: do it here.
                None => work(index, part),
            });
        }
        results
    })
}

/// Split `region` (event lines without the final `\n`) into up to `parts`
/// runs of whole lines of about equal size, dropping the `\n` between runs.
pub(super) fn split_lines(region: &[u8], parts: usize) -> Vec<&[u8]> {
    let target = region.len() / parts.max(1);
    let mut chunks = Vec::with_capacity(parts);
    let mut start = 0;
    for part in 1..parts {
        let from = (part * target).max(start);
        let Some(end) = region[from..]
            .iter()
            .position(|&byte| byte == b'\n')
            .map(|at| from + at)
        else {
            break;
        };
        chunks.push(&region[start..end]);
        start = end + 1;
    }
    chunks.push(&region[start..]);
    chunks
}

/// The events parsed from one run of lines, up to the first line that is
/// not a well-formed event (its problem in `failure`).
pub(super) struct ChunkOutcome {
    pub(super) events: Vec<SessionEvent>,
    pub(super) failure: Option<String>,
}

/// How many lines `chunk` (`\n`-separated, the last without its `\n`) holds.
fn line_count(chunk: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', chunk).count() + 1
}

/// Parse one run of `\n`-separated lines onto the end of `events`, stopping
/// at the first bad one, whose problem it returns. Seqs are checked by the
/// caller, which knows where the run starts.
pub(super) fn parse_chunk(chunk: &[u8], events: &mut Vec<SessionEvent>) -> Option<String> {
    let (text, mut failure) = match std::str::from_utf8(chunk) {
        Ok(text) => (Some(text), None),
        Err(err) => {
            // Keep the whole lines before the one holding the bad byte.
            let valid = &chunk[..err.valid_up_to()];
            let before = valid
                .iter()
                .rposition(|&byte| byte == b'\n')
                .and_then(|end| std::str::from_utf8(&valid[..end]).ok());
            (before, Some("invalid UTF-8".to_owned()))
        }
    };
    // One reader for the run: consecutive events share the ids they repeat.
    let mut reader = LineReader::new();
    for line in text.into_iter().flat_map(lines_of) {
        match reader.read(line) {
            Ok(event) => events.push(event),
            Err(err) => {
                failure = Some(format!("unreadable event: {err}"));
                break;
            }
        }
    }
    failure
}

/// Parse one run of lines into a vector of its own, first telling
/// `counted` how many lines it holds.
fn parse_counted(chunk: &[u8], counted: &std::sync::mpsc::Sender<usize>) -> ChunkOutcome {
    let lines = line_count(chunk);
    // The head stops waiting when every sender is gone, so a closed
    // channel costs nothing but its capacity hint.
    counted.send(lines).ok();
    let mut events = Vec::with_capacity(lines);
    let failure = parse_chunk(chunk, &mut events);
    ChunkOutcome { events, failure }
}

/// The `\n`-separated lines of `text` (the last one without its `\n`), found
/// with SIMD (`str::split` searches byte by byte).
fn lines_of(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    memchr::memchr_iter(b'\n', text.as_bytes())
        .chain(std::iter::once(text.len()))
        .map(move |end| {
            // `\n` is ASCII, so both ends are character boundaries.
            let line = text.get(start..end).unwrap_or_default();
            start = end + 1;
            line
        })
}

/// Parse the event lines of a log (everything between the header's `\n`
/// and the final `\n`), split over up to `threads` threads. The event on
/// each line must carry its index as its seq.
fn parse_events(
    path: &Path,
    region: &[u8],
    threads: usize,
) -> Result<Vec<SessionEvent>, StoreError> {
    let chunks = split_lines(region, threads);
    let outcomes = match chunks.as_slice() {
        [only] => {
            let mut events = Vec::with_capacity(line_count(only) + 1);
            let failure = parse_chunk(only, &mut events);
            vec![ChunkOutcome { events, failure }]
        }
        [head, rest @ ..] => std::thread::scope(|scope| {
            let (counted, counts) = std::sync::mpsc::channel();
            let pending: Vec<_> = rest
                .iter()
                .map(|&chunk| {
                    let counted = counted.clone();
                    let spawned = std::thread::Builder::new()
                        .name("dsh-store-parse".into())
                        .spawn_scoped(scope, move || parse_counted(chunk, &counted));
                    (chunk, spawned.ok())
                })
                .collect();
            drop(counted);
            // The head's vector becomes the log's, so it is sized for every
            // line at once: the other runs are moved onto its end once, and
            // nothing is copied to grow it. Each run counts its own lines
            // (the counting is as parallel as the parse).
            let mut lines = line_count(head);
            for (chunk, spawned) in &pending {
                if spawned.is_none() {
                    lines += line_count(chunk);
                }
            }
            let spawned = pending.iter().filter(|(_, spawned)| spawned.is_some());
            lines += counts.iter().take(spawned.count()).sum::<usize>();
            // One more for a last line without its `\n`, which the caller adds.
            let mut events = Vec::with_capacity(lines + 1);
            let failure = parse_chunk(head, &mut events);
            let mut outcomes = Vec::with_capacity(chunks.len());
            outcomes.push(ChunkOutcome { events, failure });
            for (chunk, handle) in pending {
                outcomes.push(match handle {
                    Some(handle) => handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                    // No thread to spare: parse it here.
                    None => {
                        let mut events = Vec::new();
                        let failure = parse_chunk(chunk, &mut events);
                        ChunkOutcome { events, failure }
                    }
                });
            }
            outcomes
        }),
        [] => Vec::new(),
    };
    merge_runs(path, outcomes)
}

/// The events of consecutive runs of lines, the first run's vector
/// extended by the others, each event checked to carry its index as its
/// seq; the first bad line (a seq out of place or a run's failure) fails
/// the log.
pub(super) fn merge_runs(
    path: &Path,
    outcomes: Vec<ChunkOutcome>,
) -> Result<Vec<SessionEvent>, StoreError> {
    let mut events: Vec<SessionEvent> = Vec::new();
    for (run, mut outcome) in outcomes.into_iter().enumerate() {
        for (index, event) in (events.len() as u64..).zip(&outcome.events) {
            // Line 1 is the header.
            check_seq(path, index + 2, index, event)?;
        }
        if let Some(message) = outcome.failure {
            let line = (events.len() + outcome.events.len()) as u64 + 2;
            return Err(corrupt(path, line, message));
        }
        if run == 0 {
            // The head's, sized for them all.
            events = outcome.events;
        } else {
            events.append(&mut outcome.events);
        }
    }
    Ok(events)
}

/// Check that `event`, on line `line`, is the `index`-th event of its log.
fn check_seq(path: &Path, line: u64, index: u64, event: &SessionEvent) -> Result<(), StoreError> {
    if event.seq == index {
        Ok(())
    } else {
        Err(corrupt(
            path,
            line,
            format!("expected seq {index}, found {}", event.seq),
        ))
    }
}

#[cfg(test)]
mod tests {
    use dsh_core::session::{EventPayload, TurnStart};

    use super::*;

    fn region(count: u64) -> String {
        (0..count)
            .map(|seq| {
                SessionEvent {
                    seq,
                    time: seq,
                    payload: EventPayload::TurnStart(TurnStart { turn: seq }),
                }
                .to_json_line()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn replace_line(text: &str, index: usize, with: &[u8]) -> Vec<u8> {
        let mut lines: Vec<Vec<u8>> = text
            .split('\n')
            .map(|line| line.as_bytes().to_vec())
            .collect();
        lines[index] = with.to_vec();
        lines.join(&b'\n')
    }

    fn failure_line(bytes: &[u8], threads: usize) -> (u64, String) {
        match parse_events(Path::new("log.jsonl"), bytes, threads) {
            Err(StoreError::Corrupt { line, message, .. }) => (line, message),
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn split_lines_cuts_only_between_lines() {
        let text = region(10);
        for parts in 1..14 {
            let chunks = split_lines(text.as_bytes(), parts);
            assert!(!chunks.is_empty() && chunks.len() <= parts);
            assert_eq!(chunks.join(&b'\n'), text.as_bytes(), "{parts}");
        }
    }

    #[test]
    fn every_split_parses_the_same_events() {
        let text = region(25);
        let one = parse_events(Path::new("log.jsonl"), text.as_bytes(), 1).unwrap();
        assert_eq!(one.len(), 25);
        for threads in 2..6 {
            let many = parse_events(Path::new("log.jsonl"), text.as_bytes(), threads).unwrap();
            assert_eq!(many, one, "{threads}");
        }
    }

    /// The head's vector is the log's, sized once for every line (and a
    /// last one without its `\n`): no run is copied to grow it.
    #[test]
    fn the_events_are_allocated_once_for_the_whole_log() {
        let text = region(25);
        for threads in 1..7 {
            let events = parse_events(Path::new("log.jsonl"), text.as_bytes(), threads).unwrap();
            assert_eq!(events.len(), 25);
            assert_eq!(events.capacity(), 26, "{threads} threads");
        }
    }

    #[test]
    fn every_split_reports_the_first_bad_line() {
        let text = region(12);
        for bad in 0..12 {
            let garbage = replace_line(&text, bad, b"{\"seq\":");
            let gap = replace_line(
                &text,
                bad,
                region(bad as u64 + 2)
                    .rsplit('\n')
                    .next()
                    .unwrap()
                    .as_bytes(),
            );
            let utf8 = replace_line(&text, bad, b"{\"seq\":\xff}");
            // A second problem further on must not mask the first.
            let twice = replace_line(
                &String::from_utf8(garbage.clone()).unwrap(),
                11.max(bad),
                b"x",
            );
            for threads in 1..5 {
                let line = bad as u64 + 2;
                let (at, message) = failure_line(&garbage, threads);
                assert_eq!(at, line, "garbage at {bad}, {threads} threads");
                assert!(message.starts_with("unreadable event"), "{message}");
                let (at, message) = failure_line(&gap, threads);
                assert_eq!(at, line, "gap at {bad}, {threads} threads");
                assert_eq!(message, format!("expected seq {bad}, found {}", bad + 1));
                let (at, message) = failure_line(&utf8, threads);
                assert_eq!(
                    (at, message.as_str()),
                    (line, "invalid UTF-8"),
                    "{threads} threads"
                );
                assert_eq!(failure_line(&twice, threads).0, line);
            }
        }
    }
}
