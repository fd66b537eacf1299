//! Reading a large plain log as it is parsed: each parsing thread reads
//! its own run of whole lines from the file in blocks and parses every
//! block while it is still in the cache, so a replay never holds the whole
//! file in memory (a 100,000-event log is 18 MB) and the copy out of the
//! page cache is split over the threads that parse. It decides nothing
//! about what a log is: every line goes through the same parser as a log
//! read whole ([`super::parse`]), and a file it cannot cut into runs (a
//! header longer than its first read, a file with no `\n`) is read whole
//! and handed to [`parse_log`], so both readings accept, repair and refuse
//! exactly the same files. It must never read past the size it was given
//! nor parse a line twice.

use std::fs::File;
use std::io;
use std::path::Path;

use dsh_core::{SessionId, StoreError};

use super::io_error;
use super::parse::{
    ChunkOutcome, PARALLEL_PARSE_BYTES, Parsed, finish_log, merge_runs, on_threads, parse_chunk,
    parse_header, parse_log, parse_threads,
};

/// How much of its run a parsing thread reads at a time.
const BLOCK: usize = 256 << 10;

/// How much the first read takes: enough for any header in practice (one
/// longer is read whole instead).
const HEADER_PROBE: usize = 64 << 10;

/// The shortest line an event can be (`{"seq":0,"time":0,"type":"","payload":0}`
/// is 43 bytes): it bounds how many events a byte count can hold.
const SHORTEST_EVENT: u64 = 40;

/// How many times a read starts over on a file that changed under it.
const ATTEMPTS: usize = 3;

/// Read and parse the plain log open as `file`, `size` bytes long (its
/// length when it was opened). A log of a megabyte or more is streamed, on
/// [`parse_threads`] threads; a smaller one is read whole. A reader without
/// the lock (a `load`) can see the log cut under it (its owner cutting a
/// torn last line when it opens it): the read then starts over at the
/// file's new length, and fails only if the file keeps changing.
pub(super) fn read_log(
    id: &SessionId,
    path: &Path,
    file: &File,
    size: u64,
) -> Result<Parsed, StoreError> {
    let mut size = size;
    let mut attempt = 1;
    loop {
        if size < PARALLEL_PARSE_BYTES as u64 {
            return parse_log(id, path, read_whole(path, file, size)?);
        }
        match stream_log(id, path, file, size, parse_threads(), BLOCK) {
            Err(StoreError::Io { source, .. })
                if source.kind() == io::ErrorKind::UnexpectedEof && attempt < ATTEMPTS =>
            {
                attempt += 1;
                size = file
                    .metadata()
                    .map_err(|source| io_error(path, source))?
                    .len();
            }
            other => return other,
        }
    }
}

/// Read all `size` bytes of `file` from its start.
fn read_whole(path: &Path, file: &File, size: u64) -> Result<Vec<u8>, StoreError> {
    let mut bytes = vec![0; usize::try_from(size).unwrap_or(usize::MAX)];
    let read = fill(file, 0, &mut bytes).map_err(|source| io_error(path, source))?;
    bytes.truncate(read);
    Ok(bytes)
}

/// Read from `offset` until `buf` is full or the file ends; how many bytes
/// were read.
fn fill(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match read_at(file, &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(read) => done += read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(done)
}

/// One positional read (it leaves the file's cursor alone, so the threads
/// of one parse share the descriptor).
#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, offset)
}

/// One positional read (the threads of one parse share the handle).
#[cfg(windows)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, offset)
}

/// The file changed while it was read (it is locked, so only a process that
/// ignores the lock can do that).
fn changed() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the log changed while it was being read",
    )
}

/// Stream a log of `size` bytes on up to `threads` threads reading `block`
/// bytes at a time (a parameter so that tests can cut lines anywhere).
fn stream_log(
    id: &SessionId,
    path: &Path,
    file: &File,
    size: u64,
    threads: usize,
    block: usize,
) -> Result<Parsed, StoreError> {
    let io = |source| io_error(path, source);
    let mut probe = vec![0; HEADER_PROBE.min(usize::try_from(size).unwrap_or(usize::MAX))];
    let probed = fill(file, 0, &mut probe).map_err(io)?;
    probe.truncate(probed);
    let Some(header_end) = memchr::memchr(b'\n', &probe) else {
        // No `\n` in the probe: a lone header (torn or not) or a header
        // too long to probe. The whole-file reading knows both.
        return parse_log(id, path, read_whole(path, file, size)?);
    };
    let header = parse_header(id, path, &probe[..header_end])?;
    let start = header_end as u64 + 1;

    // Each thread's run starts at a line's start and ends where the next
    // run starts; only the last can end in a line without its `\n`.
    let threads = threads.max(1);
    let mut bounds = Vec::with_capacity(threads + 1);
    bounds.push(start);
    for part in 1..threads {
        let nominal = start + (size - start) * part as u64 / threads as u64;
        let from = nominal.max(bounds.last().copied().unwrap_or(start));
        bounds.push(line_start(file, from, size, block).map_err(io)?);
    }
    bounds.push(size);
    let runs: Vec<(u64, u64)> = bounds
        .windows(2)
        .map(|pair| (pair[0], pair[1]))
        .filter(|(from, to)| from < to)
        .collect();

    // Sized from the probe's lines, so that the head's vector, which
    // becomes the log's, is rarely grown.
    let estimate =
        usize::try_from(estimated_events(&probe[header_end + 1..], size - start)).unwrap_or(0);
    let capacity = |(from, to): (u64, u64)| {
        let share = (estimate as u64).saturating_mul(to - from) / (size - start).max(1);
        usize::try_from(share + 1).unwrap_or(0)
    };
    let outcomes = on_threads("dsh-store-parse", &runs, |index, &run| {
        // The head's vector is sized for the whole log.
        let capacity = if index == 0 { estimate } else { capacity(run) };
        parse_run(file, run, block, capacity)
    });
    let (chunks, tail) = runs_and_tail(outcomes).map_err(io)?;
    let events = merge_runs(path, chunks)?;
    finish_log(path, header, events, &tail, size)
}

/// The runs' events in order, and the log's tail: what follows the last
/// run's last `\n`. Every run but the last ends after a `\n` found before
/// the parse began; one that no longer does means the file changed.
fn runs_and_tail(outcomes: Vec<io::Result<Run>>) -> io::Result<(Vec<ChunkOutcome>, Vec<u8>)> {
    let last = outcomes.len().saturating_sub(1);
    let mut chunks = Vec::with_capacity(outcomes.len());
    let mut tail = Vec::new();
    for (index, outcome) in outcomes.into_iter().enumerate() {
        let run = outcome?;
        if !run.trailing.is_empty() {
            if index != last {
                return Err(changed());
            }
            tail = run.trailing;
        }
        chunks.push(run.chunk);
    }
    Ok((chunks, tail))
}

/// How many events `size` bytes of event lines hold, judged by the complete
/// lines in `sample` (the lines after the header in the first read).
fn estimated_events(sample: &[u8], size: u64) -> u64 {
    let lines = memchr::memchr_iter(b'\n', sample).count() as u64;
    let most = size / SHORTEST_EVENT + 1;
    match memchr::memrchr(b'\n', sample) {
        Some(end) if lines > 0 => {
            let average = ((end as u64 + 1) / lines).max(1);
            // A tenth more than the average says: the rest may run shorter.
            let events = size / average;
            (events + events / 10 + 1).min(most)
        }
        _ => 0,
    }
}

/// The start of the first line at or after `from` (a line starts after a
/// `\n`), or `size` if no line starts there. `from` is past the header, so
/// the byte before it exists. It reads a page at a time (at most `block`):
/// the next `\n` is usually a line away.
fn line_start(file: &File, from: u64, size: u64, block: usize) -> io::Result<u64> {
    let mut at = from - 1;
    let mut buf = vec![0; block.clamp(1, 4096)];
    while at < size {
        let want = usize::try_from(size - at)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let read = fill(file, at, &mut buf[..want])?;
        if read == 0 {
            return Err(changed());
        }
        if let Some(newline) = memchr::memchr(b'\n', &buf[..read]) {
            return Ok(at + newline as u64 + 1);
        }
        at += read as u64;
    }
    Ok(size)
}

/// What a thread made of its run.
struct Run {
    /// Its events, up to its first bad line, and that line's problem.
    chunk: ChunkOutcome,
    /// Bytes after its last `\n` (only the log's last run may have any).
    trailing: Vec<u8>,
}

/// Read the bytes `from..to` of `file` in blocks of `block` and parse each
/// block's whole lines as soon as it is read. A line longer than a block
/// grows the buffer until it fits. Stops at the first bad line.
fn parse_run(
    file: &File,
    (from, to): (u64, u64),
    block: usize,
    capacity: usize,
) -> io::Result<Run> {
    let mut events = Vec::with_capacity(capacity);
    let mut buf = vec![0; block.max(1)];
    // `buf[..held]` is read and not yet parsed: the start of a line.
    let mut held = 0;
    let mut at = from;
    while at < to {
        if held == buf.len() {
            // A line longer than the buffer: make room for more of it.
            buf.resize(buf.len() * 2, 0);
        }
        let want = usize::try_from(to - at)
            .unwrap_or(usize::MAX)
            .min(buf.len() - held);
        let read = fill(file, at, &mut buf[held..held + want])?;
        if read == 0 {
            return Err(changed());
        }
        at += read as u64;
        let filled = held + read;
        // Only the new bytes can hold the block's last `\n`.
        let Some(last) = memchr::memrchr(b'\n', &buf[held..filled]).map(|at| held + at) else {
            held = filled;
            continue;
        };
        if let Some(failure) = parse_chunk(&buf[..last], &mut events) {
            return Ok(Run {
                chunk: ChunkOutcome {
                    events,
                    failure: Some(failure),
                },
                trailing: Vec::new(),
            });
        }
        buf.copy_within(last + 1..filled, 0);
        held = filled - last - 1;
    }
    buf.truncate(held);
    Ok(Run {
        chunk: ChunkOutcome {
            events,
            failure: None,
        },
        trailing: buf,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use dsh_core::session::{EventPayload, TurnStart};
    use dsh_core::{ContentBlock, SessionEvent, SessionHeader};

    use super::*;

    fn streamed(
        file: &File,
        size: u64,
        threads: usize,
        block: usize,
    ) -> Result<Parsed, StoreError> {
        let id = SessionId::new("s-streamed").unwrap();
        stream_log(&id, Path::new("log.jsonl"), file, size, threads, block)
    }

    fn header_line() -> Vec<u8> {
        let id = SessionId::new("s-streamed").unwrap();
        let mut line = serde_json::to_vec(&SessionHeader::new(id, "/work")).unwrap();
        line.push(b'\n');
        line
    }

    /// A line of event `seq`: short turn starts and, every third, an
    /// assistant message with `pad` bytes of text (escapes included).
    fn event_line(seq: u64, pad: usize) -> Vec<u8> {
        let payload = if seq % 3 == 2 {
            EventPayload::AssistantMessage(dsh_core::session::AssistantEntry {
                content: vec![ContentBlock::text(format!("{}\n\"é\"", "x".repeat(pad)))],
            })
        } else {
            EventPayload::TurnStart(TurnStart { turn: seq })
        };
        let mut line = SessionEvent {
            seq,
            time: seq,
            payload,
        }
        .to_json_line()
        .into_bytes();
        line.push(b'\n');
        line
    }

    fn log(events: u64, pad: usize) -> Vec<u8> {
        let mut bytes = header_line();
        for seq in 0..events {
            bytes.extend(event_line(seq, pad));
        }
        bytes
    }

    fn file_of(bytes: &[u8]) -> (tempfile::NamedTempFile, File) {
        let mut temp = tempfile::NamedTempFile::new().unwrap();
        temp.write_all(bytes).unwrap();
        let file = File::open(temp.path()).unwrap();
        (temp, file)
    }

    /// What a reading gave, comparable across readings.
    fn outcome(result: Result<Parsed, StoreError>) -> String {
        match result {
            Ok(parsed) => format!(
                "{:?} {:?} keep={} torn={:?} missing_newline={}",
                parsed.header, parsed.events, parsed.keep, parsed.torn_tail, parsed.missing_newline
            ),
            Err(err) => format!("error: {err}"),
        }
    }

    /// Every streamed reading of `bytes` (any thread count, blocks cutting
    /// lines anywhere) gives what the whole-file reading gives.
    fn assert_same_as_whole(bytes: &[u8], what: &str) {
        let id = SessionId::new("s-streamed").unwrap();
        let whole = outcome(parse_log(&id, Path::new("log.jsonl"), bytes.to_vec()));
        let (_temp, file) = file_of(bytes);
        for threads in [1, 2, 3, 5] {
            for block in [1, 7, 64, 1000, BLOCK] {
                let streamed = outcome(streamed(&file, bytes.len() as u64, threads, block));
                assert_eq!(
                    streamed, whole,
                    "{what}: {threads} threads, blocks of {block}"
                );
            }
        }
    }

    #[test]
    fn a_streamed_log_reads_as_the_whole_file_does() {
        let clean = log(40, 300);
        assert_same_as_whole(&clean, "a clean log");
        assert_same_as_whole(&log(0, 0), "a header alone");
        assert_same_as_whole(&header_line()[..20], "a torn header");
        assert_same_as_whole(
            &header_line()[..header_line().len() - 1],
            "a header without its newline",
        );
        let mut missing = clean.clone();
        missing.pop();
        assert_same_as_whole(&missing, "a last line without its newline");
        let mut torn = clean.clone();
        torn.extend_from_slice(br#"{"seq":40,"ti"#);
        assert_same_as_whole(&torn, "a torn last line");
        let mut lone_torn = header_line();
        lone_torn.extend_from_slice(br#"{"seq":0,"ti"#);
        assert_same_as_whole(&lone_torn, "a header, then a torn line");
        let mut lone_whole = log(1, 0);
        lone_whole.pop();
        assert_same_as_whole(&lone_whole, "a header, then a line without its newline");
        let mut wrong_seq = clean.clone();
        wrong_seq.extend(event_line(41, 5));
        wrong_seq.pop();
        assert_same_as_whole(&wrong_seq, "a last line without its newline, out of place");
    }

    #[test]
    fn a_streamed_log_fails_at_the_line_the_whole_file_does() {
        let clean = log(40, 300);
        let lines: Vec<&[u8]> = clean.split_inclusive(|&byte| byte == b'\n').collect();
        for bad in [1, 2, 17, 39, 40] {
            for with in [
                &b"{\"seq\":\n"[..],
                b"\n",
                b"{\"seq\":\xff}\n",
                &event_line(bad as u64 + 1, 3),
            ] {
                let mut bytes = Vec::new();
                for (index, line) in lines.iter().enumerate() {
                    bytes.extend_from_slice(if index == bad { with } else { line });
                }
                assert_same_as_whole(&bytes, &format!("line {bad} replaced"));
            }
        }
    }

    /// A log far larger than its blocks, on several threads: the events
    /// come out whole and in order, whatever the cuts.
    #[test]
    fn a_large_log_streams_in_order_on_every_thread_count() {
        let bytes = log(3_000, 40);
        let (_temp, file) = file_of(&bytes);
        for threads in 1..=4 {
            let parsed = streamed(&file, bytes.len() as u64, threads, 4096).unwrap();
            assert_eq!(parsed.events.len(), 3_000, "{threads} threads");
            assert!(
                parsed
                    .events
                    .iter()
                    .zip(0..)
                    .all(|(event, seq)| event.seq == seq),
                "{threads} threads"
            );
            assert_eq!(parsed.keep, bytes.len() as u64);
        }
    }

    /// A file shorter than the size it was opened with (changed by a
    /// process that ignored the lock) is an error, never a shorter log.
    #[test]
    fn a_file_that_shrank_while_read_is_an_error() {
        let bytes = log(200, 40);
        let (_temp, file) = file_of(&bytes);
        let claimed = bytes.len() as u64 + 500;
        for threads in 1..=3 {
            match streamed(&file, claimed, threads, 256) {
                Err(StoreError::Io { source, .. }) => {
                    assert_eq!(source.kind(), io::ErrorKind::UnexpectedEof);
                }
                other => panic!("{threads} threads: {}", outcome(other)),
            }
        }
    }

    /// A log cut after its length was read (its owner cutting a torn last
    /// line while a `load` reads it) is read again at its new length.
    #[test]
    fn a_log_cut_under_a_reader_is_read_again_at_its_new_length() {
        let bytes = log(20_000, 40);
        assert!(
            bytes.len() >= PARALLEL_PARSE_BYTES,
            "streamed, not read whole"
        );
        let (_temp, file) = file_of(&bytes);
        let id = SessionId::new("s-streamed").unwrap();
        let parsed =
            read_log(&id, Path::new("log.jsonl"), &file, bytes.len() as u64 + 300).unwrap();
        assert_eq!(parsed.events.len(), 20_000);
        assert_eq!(parsed.keep, bytes.len() as u64);
    }

    #[test]
    fn only_the_last_run_may_end_in_a_partial_line() {
        let run = |trailing: &[u8]| {
            Ok(Run {
                chunk: ChunkOutcome {
                    events: Vec::new(),
                    failure: None,
                },
                trailing: trailing.to_vec(),
            })
        };
        let (chunks, tail) = runs_and_tail(vec![run(b""), run(b"{\"seq\"")]).unwrap();
        assert_eq!((chunks.len(), tail.as_slice()), (2, &b"{\"seq\""[..]));
        match runs_and_tail(vec![run(b"{\"seq\""), run(b"")]) {
            Err(err) => assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof),
            Ok(_) => panic!("a run before the last ended in a partial line"),
        }
    }

    #[test]
    fn the_estimate_never_passes_what_the_bytes_can_hold() {
        let sample = log(10, 40);
        let lines = &sample[header_line().len()..];
        let estimate = estimated_events(lines, 1_000_000);
        let average = lines.len() as u64 / 10;
        assert!(estimate >= 1_000_000 / average, "{estimate}");
        assert!(estimated_events(b"{}\n{}\n", 1_000_000) <= 1_000_000 / SHORTEST_EVENT + 1);
        assert_eq!(estimated_events(b"no newline", 1_000_000), 0);
    }
}
