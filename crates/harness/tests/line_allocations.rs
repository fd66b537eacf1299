//! Reading a log line allocates what the event owns and nothing else: an
//! id, a name, a content list, one string per text, each once, at its
//! final size. A text with escapes (a file's lines, a command's output)
//! is decoded into a string allocated once, however long it is, not grown
//! in a scratch buffer by doubling and copied out (a realistic tool
//! result's line took 8 allocations that way, against the 4 its event
//! owns). Read through one [`LineReader`], a turn's events share the ids
//! they repeat. Counted in allocations, so the bounds hold on any machine;
//! they are upper bounds (what the event owns), so a reader that allocates
//! less, or a payload type that owns less, still passes.
//! The only test in its binary: the counters are process-wide.

#![allow(clippy::unwrap_used)]

use dsh_core::codec::LineReader;
use dsh_core::session::{EventPayload, SessionEvent, ToolResultEntry};
use dsh_core::{CallId, ContentBlock};
use dsh_test_support::alloc::{CountingAllocator, allocations, large_allocations};
use dsh_test_support::bench::mixed_event;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Parse `line`, returning the event and the allocations and large
/// allocations the parse made (the event's own included).
fn parse_counted(line: &str) -> (SessionEvent, usize, usize) {
    let (before, large_before) = (allocations(), large_allocations());
    let event = SessionEvent::from_json_line(line).unwrap();
    let spent = allocations() - before;
    let large = large_allocations() - large_before;
    (event, spent, large)
}

/// A tool result whose text is `text`, as a log line.
fn tool_result_line(text: &str) -> String {
    SessionEvent {
        seq: 7,
        time: 1_700_000_000_000,
        payload: EventPayload::ToolResult(ToolResultEntry {
            call_id: CallId::new("call-1"),
            name: "read_file".into(),
            content: vec![ContentBlock::text(text)],
            is_error: false,
        }),
    }
    .to_json_line()
}

#[test]
fn a_line_allocates_only_what_its_event_owns() {
    // One turn of a realistic log, by seq within the turn: what each event
    // owns (ids, names, lists and texts; numbers and fixed names own
    // nothing), read line by line, and read through one reader, where an
    // event shares the ids the events before it named.
    let owned: [(usize, usize); 13] = [
        (0, 0), // turn/start
        (3, 3), // inbox/accepted: the message's id, content list and text
        (2, 1), // inbox/claimed: the id list and one id (shared)
        (3, 2), // user/message: id (shared), content list, text
        (0, 0), // step/start
        (2, 2), // assistant/message: content list, text
        (3, 3), // tool/call: call id, name, input text (never a value tree)
        (4, 3), // tool/result: call id (shared), name, content list, text with escapes
        (0, 0), // usage
        (0, 0), // step/start
        (2, 2), // assistant/message
        (0, 0), // usage
        (0, 0), // turn/end
    ];
    let mut reader = LineReader::new();
    let (mut spent_alone, mut spent_shared) = (0, 0);
    for (seq, (alone, shared)) in (0..).zip(owned) {
        let written = mixed_event(seq);
        let line = written.to_json_line();
        let (event, spent, _) = parse_counted(&line);
        assert_eq!(event, written, "seq {seq}");
        assert!(spent <= alone, "seq {seq}: {spent} > {alone}: {line}");
        spent_alone += spent;
        let before = allocations();
        let event = reader.read(&line).unwrap();
        let spent = allocations() - before;
        assert_eq!(event, written, "seq {seq}, through the reader");
        assert!(
            spent <= shared,
            "seq {seq}, through the reader: {spent} > {shared}: {line}"
        );
        spent_shared += spent;
    }
    // The reader shares ids: it allocates less than reading line by line.
    assert!(
        spent_shared < spent_alone,
        "{spent_shared} >= {spent_alone}"
    );
    // The next turn's ids are new: nothing is shared across turns.
    let line = mixed_event(13 + 1).to_json_line();
    let before = allocations();
    reader.read(&line).unwrap();
    let spent = allocations() - before;
    assert!(spent <= 3, "the next turn's accepted message: {spent}");
    // The tool result's text in the realistic log has escapes: it is the
    // case the bound is about.
    assert!(mixed_event(7).to_json_line().contains("\\n"));

    // A long text with escapes on every line, the shape of a file read:
    // still four allocations, and only its text is a large one.
    let file: String = (0..2_000)
        .map(|line| format!("\tline {line}: \"quoted\" \\ and \u{e9}\n"))
        .collect();
    let line = tool_result_line(&file);
    let (event, spent, large) = parse_counted(&line);
    let EventPayload::ToolResult(result) = &event.payload else {
        panic!("not a tool result: {event:?}");
    };
    assert_eq!(result.content, vec![ContentBlock::text(file.as_str())]);
    assert!(spent <= 4, "{spent} allocations");
    assert!(large <= 1, "{large} large allocations");
}
