//! Property tests of the log codec (`dsh_core::codec`): generated events of
//! every kind (texts with quotes, backslashes, control characters, U+2028,
//! non-BMP characters; payloads with odd key orders, repeated keys, lone and
//! paired surrogate escapes and numbers at the edges) are written, then read
//! back, and every line (as written, cut at every byte, with a byte flipped,
//! with whitespace or an escape inserted) is read by every reader:
//! [`LineReader`] (the codec's fast path, then its general one),
//! `serde_json::from_str::<SessionEvent>` (its general path alone), the skim
//! and a reference built from serde's derive alone ([`reference`]), which
//! shares no code with the codec. They must accept the same lines and read
//! them to the same values. Headers and flat catalog objects likewise.
//! Failures are kept in `proptest-regressions/` and replayed first.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

use dsh_core::codec::{LineReader, Skimmed, flat_strings, read_header, skim_line};
use dsh_core::session::{
    AssistantEntry, InboxAccepted, InboxIds, StepStart, ToolResultEntry, TurnEnd, TurnStart,
    UserEntry,
};
use dsh_core::{
    CallId, ContentBlock, EventPayload, ExtensionPayload, InboxTarget, MessageId, MessageSource,
    SessionEvent, SessionHeader, SessionId, StopReason, ToolCall, ToolInput, Usage, UserMessage,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::FileFailurePersistence;

/// A reader of event lines written with serde's derive and nothing of the
/// codec: the envelope is a derived struct holding the payload as raw text,
/// the payload is then read by its type's own `Deserialize` (a tool call
/// through a derived mirror keeping its input as raw text). Text the codec
/// keeps as written (an extension payload, a tool input) is compared as
/// that text, put on one line here by this module's own code.
mod reference {
    use serde::Deserialize;
    use serde_json::value::RawValue;

    use super::*;

    #[derive(Deserialize)]
    struct Line {
        seq: u64,
        time: u64,
        #[serde(rename = "type")]
        kind: String,
        payload: Box<RawValue>,
    }

    #[derive(Deserialize)]
    struct Call {
        call_id: CallId,
        name: String,
        input: Box<RawValue>,
    }

    /// `text` (valid JSON) on one line, as the codec keeps it: unchanged,
    /// unless a line break stands between its tokens, which then loses
    /// every whitespace between tokens.
    pub(super) fn one_line(text: &str) -> String {
        if !text.contains(['\n', '\r']) {
            return text.to_owned();
        }
        let mut out = String::new();
        let mut in_string = false;
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            match (in_string, c) {
                (true, '\\') => {
                    out.push(c);
                    out.extend(chars.next());
                }
                (true, '"') | (false, '"') => {
                    in_string = !in_string;
                    out.push(c);
                }
                (false, ' ' | '\t' | '\n' | '\r') => {}
                _ => out.push(c),
            }
        }
        out
    }

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(one_line(text)).unwrap()
    }

    /// The payload of type `kind` whose text is `text`.
    pub(super) fn payload(kind: &str, text: &str) -> Option<EventPayload> {
        use serde_json::from_str;
        Some(match kind {
            "turn/start" => EventPayload::TurnStart(from_str(text).ok()?),
            "turn/end" => EventPayload::TurnEnd(from_str(text).ok()?),
            "step/start" => EventPayload::StepStart(from_str(text).ok()?),
            "inbox/accepted" => EventPayload::InboxAccepted(from_str(text).ok()?),
            "inbox/claimed" => EventPayload::InboxClaimed(from_str(text).ok()?),
            "inbox/discarded" => EventPayload::InboxDiscarded(from_str(text).ok()?),
            "user/message" => EventPayload::UserMessage(from_str(text).ok()?),
            "assistant/message" => EventPayload::AssistantMessage(from_str(text).ok()?),
            "tool/result" => EventPayload::ToolResult(from_str(text).ok()?),
            "usage" => EventPayload::Usage(from_str(text).ok()?),
            "tool/call" => {
                let call: Call = from_str(text).ok()?;
                EventPayload::ToolCall(ToolCall {
                    call_id: call.call_id,
                    name: call.name,
                    input: ToolInput::new(&raw(call.input.get())).ok()?,
                })
            }
            other => EventPayload::Extension {
                kind: other.to_owned(),
                payload: ExtensionPayload::new(&raw(text)).ok()?,
            },
        })
    }

    /// The event on `line`, or `None` where it is not one.
    pub(super) fn event(line: &str) -> Option<SessionEvent> {
        let line: Line = serde_json::from_str(line).ok()?;
        let payload = payload(&line.kind, line.payload.get())?;
        Some(SessionEvent {
            seq: line.seq,
            time: line.time,
            payload,
        })
    }

    /// What a skim of `line` wanting `wanted` gives: the envelope read, the
    /// payload built only when its type is wanted (else only checked to be
    /// JSON, which the raw text is).
    pub(super) fn skim(line: &str, wanted: &[&str]) -> Option<Skimmed> {
        let line: Line = serde_json::from_str(line).ok()?;
        let event = if wanted.contains(&line.kind.as_str()) {
            Some(SessionEvent {
                seq: line.seq,
                time: line.time,
                payload: payload(&line.kind, line.payload.get())?,
            })
        } else {
            None
        };
        Some(Skimmed {
            seq: line.seq,
            event,
        })
    }
}

// ---------------------------------------------------------------------------
// Generators.

/// Pieces of text that are hard for a JSON reader.
const PIECES: &[&str] = &[
    "a",
    "plain words ",
    "\"",
    "\\",
    "/",
    "\u{0}",
    "\n",
    "\r",
    "\t",
    "\u{8}",
    "\u{1f}",
    "\u{7f}",
    "\u{2028}",
    "\u{2029}",
    "\u{e9}",
    "\u{2603}",
    "\u{1d11e}",
    "\u{1f600}",
    "\\u0041",
    "\\ud800",
    "}",
    "]",
    ",",
    "\":\"",
    "{\"type\":\"text\",\"text\":\"",
];

fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => select(PIECES).prop_map(str::to_owned),
        1 => any::<char>().prop_map(String::from),
    ];
    vec(piece, 0..6).prop_map(|pieces| pieces.concat())
}

/// An id's text: usually plain, sometimes anything.
fn id_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(&["m-1", "m-2", "c-1", "c-2", "", "x"][..]).prop_map(str::to_owned),
        1 => text(),
    ]
}

fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        select(&[0, 1, 9, 10, u64::MAX, u64::MAX - 1, 1 << 53][..]),
        any::<u64>(),
        0..1_000_u64,
    ]
}

/// `text` as a JSON string literal, escaped as serde_json does not
/// necessarily escape it (control characters as `\u00XX`).
fn quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Escapes written by hand into JSON string literals, surrogates and all.
const ESCAPES: &[&str] = &[
    "\\ud800",
    "\\udc00",
    "\\ud834\\udd1e",
    "\\uD83D\\uDE00",
    "\\u2028",
    "\\/",
    "\\u0000",
    "\\b",
    "\\u00e9",
    "\\x",
];

/// A JSON string literal's source text.
fn json_string() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => text().prop_map(|text| {
            let quoted = quoted(&text);
            quoted[1..quoted.len() - 1].to_owned()
        }),
        1 => select(ESCAPES).prop_map(str::to_owned),
    ];
    vec(piece, 0..4).prop_map(|pieces| format!("\"{}\"", pieces.concat()))
}

/// Numbers at the edges of what a reader holds.
const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "-0.0",
    "1e400",
    "-1e400",
    "1e-400",
    "1E2",
    "0.1",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "123456789012345678901234567890",
    "01",
    "1.",
    "-",
];

/// A JSON value's source text (not always valid: a few number forms are
/// not JSON), with repeated keys and keys in any order.
fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        select(NUMBERS).prop_map(str::to_owned),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| if f.is_finite() {
            format!("{f:e}")
        } else {
            "0".into()
        }),
        select(&["true", "false", "null"][..]).prop_map(str::to_owned),
        json_string(),
    ];
    let tree = leaf.clone().prop_recursive(4, 24, 5, |inner| {
        let key = prop_oneof![
            3 => select(&["\"a\"", "\"z\"", "\"\\u0061\"", "\"\"", "\"type\""][..])
                .prop_map(str::to_owned),
            1 => json_string(),
        ];
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(|items| format!("[{}]", items.join(","))),
            vec((key, inner), 0..4).prop_map(|fields| {
                let fields: Vec<String> = fields.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", fields.join(","))
            }),
        ]
    });
    prop_oneof![
        8 => tree,
        // Nesting around serde_json's depth limit (128).
        1 => (120_usize..132, leaf).prop_map(|(depth, leaf)| {
            format!("{}{leaf}{}", "[".repeat(depth), "]".repeat(depth))
        }),
    ]
}

fn content() -> impl Strategy<Value = Vec<ContentBlock>> {
    let block = prop_oneof![
        6 => text().prop_map(ContentBlock::text),
        1 => (text(), text()).prop_map(|(media_type, data)| ContentBlock::Image { media_type, data }),
    ];
    vec(block, 0..3)
}

fn session_id() -> impl Strategy<Value = SessionId> {
    select(&["s-1", "s-2", "child-a"][..]).prop_map(|id| SessionId::new(id).unwrap())
}

fn stop_reason() -> impl Strategy<Value = StopReason> {
    prop_oneof![
        Just(StopReason::COMPLETED),
        Just(StopReason::ABORTED),
        text().prop_map(StopReason::new),
    ]
}

fn source() -> impl Strategy<Value = MessageSource> {
    prop_oneof![
        4 => Just(MessageSource::User),
        1 => session_id().prop_map(|sender_session_id| MessageSource::AgentMessage { sender_session_id }),
        1 => (text(), proptest::option::of(stop_reason()), session_id()).prop_map(
            |(summary, stop_reason, sender_session_id)| MessageSource::SubagentSettled {
                summary,
                stop_reason,
                sender_session_id,
            }
        ),
    ]
}

fn user_message() -> impl Strategy<Value = UserMessage> {
    (id_text(), content(), source()).prop_map(|(id, content, source)| UserMessage {
        id: MessageId::new(id),
        content,
        source,
    })
}

/// Extension types: some wanted by the skims below, none built in.
const EXTENSION_KINDS: &[&str] = &["x/y", "subagent/child", "team/message", "a\"b", "\u{e9}\t/"];

/// The extension types a skim wants.
const WANTED: &[&str] = &["x/y", "a\"b"];

fn payload() -> impl Strategy<Value = EventPayload> {
    prop_oneof![
        number().prop_map(|turn| EventPayload::TurnStart(TurnStart { turn })),
        (number(), stop_reason(), proptest::option::of(text())).prop_map(
            |(turn, stop_reason, diagnostic)| EventPayload::TurnEnd(TurnEnd {
                turn,
                stop_reason,
                diagnostic,
            })
        ),
        (number(), number())
            .prop_map(|(turn, step)| EventPayload::StepStart(StepStart { turn, step })),
        (user_message(), any::<bool>(), any::<bool>()).prop_map(|(message, next, wake)| {
            let target = if next {
                InboxTarget::NextTurn
            } else {
                InboxTarget::NextStep
            };
            EventPayload::InboxAccepted(InboxAccepted {
                message,
                target,
                wake,
            })
        }),
        (vec(id_text(), 0..3), any::<bool>()).prop_map(|(ids, claimed)| {
            let ids = InboxIds {
                message_ids: ids.into_iter().map(MessageId::new).collect(),
            };
            if claimed {
                EventPayload::InboxClaimed(ids)
            } else {
                EventPayload::InboxDiscarded(ids)
            }
        }),
        user_message().prop_map(|message| EventPayload::UserMessage(UserEntry { message })),
        content().prop_map(|content| EventPayload::AssistantMessage(AssistantEntry { content })),
        (id_text(), text(), json_value()).prop_filter_map("not JSON", |(id, name, input)| {
            Some(EventPayload::ToolCall(ToolCall {
                call_id: CallId::new(id),
                name,
                input: ToolInput::from_json(&input).ok()?,
            }))
        }),
        (id_text(), text(), content(), any::<bool>()).prop_map(|(id, name, content, is_error)| {
            EventPayload::ToolResult(ToolResultEntry {
                call_id: CallId::new(id),
                name,
                content,
                is_error,
            })
        }),
        (number(), number(), number(), number()).prop_map(|(input, output, cached, reasoning)| {
            EventPayload::Usage(Usage {
                input_tokens: input,
                output_tokens: output,
                cached_input_tokens: cached % 3,
                reasoning_tokens: reasoning % 2,
            })
        }),
        (
            prop_oneof![select(EXTENSION_KINDS).prop_map(str::to_owned), text()],
            json_value()
        )
            .prop_filter_map("not an extension", |(kind, text)| {
                if EventPayload::is_builtin_kind(&kind) {
                    return None;
                }
                let payload = serde_json::from_str::<ExtensionPayload>(&text).ok()?;
                Some(EventPayload::Extension { kind, payload })
            }),
    ]
}

fn event() -> impl Strategy<Value = SessionEvent> {
    (number(), number(), payload()).prop_map(|(seq, time, payload)| SessionEvent {
        seq,
        time,
        payload,
    })
}

// ---------------------------------------------------------------------------
// Mutations and checks.

/// Whitespace (and a character JSON does not take for it) to insert.
const SPACES: &[&str] = &[" ", "\t", "\n", "\r", "\r\n ", "\u{a0}"];

/// `line` with `insert` put in at byte `at` (moved back to a character
/// boundary).
fn inserted(line: &str, at: usize, insert: &str) -> String {
    let mut at = at % (line.len() + 1);
    while !line.is_char_boundary(at) {
        at -= 1;
    }
    format!("{}{insert}{}", &line[..at], &line[at..])
}

/// `line` damaged: with the bit `bit` of byte `at` flipped for each of
/// `flips`, and with the text of `inserts` put in at theirs, each given to
/// `check`.
fn each_damaged(
    line: &str,
    flips: &[(usize, u8)],
    inserts: &[(usize, &str)],
    mut check: impl FnMut(&[u8]) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    for &(at, bit) in flips {
        let mut bytes = line.as_bytes().to_vec();
        let at = at % bytes.len();
        bytes[at] ^= 1 << bit;
        check(&bytes)?;
    }
    for &(at, insert) in inserts {
        check(inserted(line, at, insert).as_bytes())?;
    }
    Ok(())
}

/// `line` (as written) with its four fields in the order `order`, its seq
/// written as `number` if given, and, when `extra` is `Some`, one field
/// again (0-3) or an unknown one (4).
fn reordered(line: &str, order: &[usize], number: Option<&str>, extra: Option<usize>) -> String {
    // The written type has every quote escaped, so the first unescaped
    // `","payload":` ends it.
    let (head, payload) = line.split_once(r#"","payload":"#).unwrap();
    let payload = &payload[..payload.len() - 1];
    let (seq, rest) = head
        .strip_prefix(r#"{"seq":"#)
        .unwrap()
        .split_once(',')
        .unwrap();
    let seq = number.unwrap_or(seq);
    let (time, kind) = rest
        .strip_prefix(r#""time":"#)
        .unwrap()
        .split_once(',')
        .unwrap();
    let kind = format!("{}\"", kind.strip_prefix(r#""type":"#).unwrap());
    let fields = [
        format!(r#""seq":{seq}"#),
        format!(r#""time":{time}"#),
        format!(r#""type":{kind}"#),
        format!(r#""payload":{payload}"#),
        r#""extra":[1,{"seq":null}]"#.to_owned(),
    ];
    let mut chosen: Vec<&str> = order.iter().map(|&at| fields[at].as_str()).collect();
    if let Some(extra) = extra {
        chosen.insert(extra % 3, &fields[extra]);
    }
    format!("{{{}}}", chosen.join(","))
}

/// Every reader reads `line` alike: the codec (fast path first), serde's
/// `Deserialize` for `SessionEvent`, the reference, and the skim.
fn check_line(line: &str) -> Result<(), TestCaseError> {
    let expected = reference::event(line);
    let read = LineReader::new().read(line).ok();
    prop_assert_eq!(&read, &expected, "LineReader on {:?}", line);
    let serde = serde_json::from_str::<SessionEvent>(line).ok();
    prop_assert_eq!(&serde, &expected, "from_str on {:?}", line);
    for wanted in [WANTED, &[][..]] {
        let skimmed = skim_line(line, wanted).ok();
        prop_assert_eq!(skimmed, reference::skim(line, wanted), "skim on {:?}", line);
    }
    Ok(())
}

/// [`check_line`] on bytes, when they are text (a reader of a log first
/// refuses bytes that are not UTF-8).
fn check_bytes(bytes: &[u8]) -> Result<(), TestCaseError> {
    match std::str::from_utf8(bytes) {
        Ok(line) => check_line(line),
        Err(_) => Ok(()),
    }
}

/// `cases` cases, failures kept in `proptest-regressions/` (committed).
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/codec_properties.txt",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(1_500))]

    /// Writing then reading gives the same event, through every reader,
    /// and a line a byte off (flipped, whitespace or an escape inserted)
    /// is read alike by all of them.
    #[test]
    fn every_reader_reads_a_written_or_damaged_line_alike(
        event in event(),
        flips in vec((any::<usize>(), 0..8_u8), 3),
        spaces in vec((any::<usize>(), select(SPACES)), 3),
        escapes in vec((any::<usize>(), select(ESCAPES)), 2),
        order in Just(vec![0, 1, 2, 3]).prop_shuffle(),
        extra in proptest::option::of(0..5_usize),
        number in proptest::option::of(select(NUMBERS)),
    ) {
        let line = event.to_json_line();
        prop_assert!(!line.contains('\n'), "{line:?} is one line");
        prop_assert_eq!(LineReader::new().read(&line).ok(), Some(event.clone()), "{:?}", line);
        check_line(&line)?;
        let inserts: Vec<(usize, &str)> = spaces.into_iter().chain(escapes).collect();
        each_damaged(&line, &flips, &inserts, check_bytes)?;
        let moved = reordered(&line, &order, number, extra);
        check_line(&moved)?;
        if extra.is_none_or(|extra| extra == 4) && number.is_none() {
            prop_assert_eq!(LineReader::new().read(&moved).ok(), Some(event), "{:?}", moved);
        }
    }
}

proptest! {
    #![proptest_config(config(200))]

    /// A written line cut at any byte is read alike by every reader.
    #[test]
    fn every_reader_reads_a_cut_line_alike(event in event()) {
        let line = event.to_json_line();
        for end in 0..line.len() {
            check_bytes(&line.as_bytes()[..end])?;
        }
    }

    /// Events read through one reader (sharing the ids they repeat) are
    /// the events read line by line.
    #[test]
    fn a_log_read_through_one_reader_is_its_lines_read_alone(events in vec(event(), 1..12)) {
        let mut reader = LineReader::new();
        for event in &events {
            let line = event.to_json_line();
            prop_assert_eq!(reader.read(&line).ok(), Some(event.clone()), "{:?}", line);
        }
    }
}

fn header() -> impl Strategy<Value = SessionHeader> {
    let extensions = vec(
        (
            text(),
            prop_oneof![
                Just(serde_json::Value::Null),
                text().prop_map(serde_json::Value::from),
                any::<i64>().prop_map(serde_json::Value::from),
            ],
        ),
        0..2,
    );
    (
        session_id(),
        proptest::option::of(session_id()),
        proptest::option::of(text()),
        prop_oneof![Just(0_u32), Just(u32::MAX), any::<u32>()],
        text(),
        number(),
        number(),
        proptest::option::of(text()),
        extensions,
        0..3_u32,
    )
        .prop_map(
            |(id, parent, origin, depth, cwd, seed_len, created_at, preset, extensions, format)| {
                let mut header = SessionHeader::new(id, cwd);
                header.format = format;
                header.parent_session = parent;
                header.origin = origin;
                header.delegation_depth = depth;
                header.seed_len = seed_len;
                header.created_at = created_at;
                header.composition.preset = preset;
                header.extensions = extensions.into_iter().collect();
                header
            },
        )
}

/// The codec's header reader reads `line` as serde's derive does, whether
/// it is asked for the id the header names or for none, sharing a known
/// parent or not.
fn check_header(line: &[u8], id: &SessionId) -> Result<(), TestCaseError> {
    let expected = serde_json::from_slice::<SessionHeader>(line).ok();
    let known = SessionId::new("s-1").unwrap();
    for (id, known) in [(Some(id), None), (Some(id), Some(&known)), (None, None)] {
        let read = read_header(line, id, known).ok();
        prop_assert_eq!(&read, &expected, "{:?}", String::from_utf8_lossy(line));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(200))]

    /// A header written then read is the same header; cut, flipped or
    /// spaced, it is read as serde's derive reads it.
    #[test]
    fn the_header_reader_reads_as_serde_does(
        header in header(),
        flips in vec((any::<usize>(), 0..8_u8), 3),
        spaces in vec((any::<usize>(), select(SPACES)), 2),
    ) {
        let line = serde_json::to_string(&header).unwrap();
        let read = read_header(line.as_bytes(), Some(&header.id), None).ok();
        prop_assert_eq!(read, Some(header.clone()));
        let check = |line: &[u8]| check_header(line, &header.id);
        for end in 0..=line.len() {
            check(&line.as_bytes()[..end])?;
        }
        each_damaged(&line, &flips, &spaces, check)?;
    }
}

/// A flat object of string fields, as a catalog entry is written.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Flat {
    id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    label: String,
}

proptest! {
    #![proptest_config(config(500))]

    /// What `flat_strings` reads of a text, serde's derive reads to the same
    /// fields; a written object without escapes is read by it.
    #[test]
    fn flat_strings_read_only_what_serde_reads_alike(
        id in text(),
        name in proptest::option::of(text()),
        label in text(),
        flips in vec((any::<usize>(), 0..8_u8), 3),
        spaces in vec((any::<usize>(), select(SPACES)), 2),
    ) {
        let flat = Flat { id, name, label };
        let text = serde_json::to_string(&flat).unwrap();
        let check = |bytes: &[u8]| -> Result<(), TestCaseError> {
            let Ok(text) = std::str::from_utf8(bytes) else { return Ok(()) };
            if let Some([id, name, label]) = flat_strings(text, ["id", "name", "label"]) {
                let read = id.zip(label).map(|(id, label)| Flat {
                    id: id.to_owned(),
                    name: name.map(str::to_owned),
                    label: label.to_owned(),
                });
                let serde = serde_json::from_str::<Flat>(text).ok();
                prop_assert_eq!(read, serde, "{:?}", text);
            }
            Ok(())
        };
        let plain = [&flat.id, &flat.label].into_iter().chain(&flat.name).all(|field| {
            !field.contains(['"', '\\']) && !field.chars().any(|c| u32::from(c) < 0x20)
        });
        prop_assert_eq!(flat_strings(&text, ["id", "name", "label"]).is_some(), plain, "{:?}", text);
        for end in 0..=text.len() {
            check(&text.as_bytes()[..end])?;
        }
        each_damaged(&text, &flips, &spaces, check)?;
    }
}
