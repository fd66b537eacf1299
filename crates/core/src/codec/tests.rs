//! The codec's example tests: fixed lines at the edges of the written form
//! (the property tests in `tests/codec_properties.rs` generate the rest).

use super::*;
use crate::content::ContentBlock;
use crate::message::{InboxTarget, MessageSource, ToolCall, UserMessage};
use crate::stop::StopReason;

fn event(seq: u64, payload: EventPayload) -> SessionEvent {
    SessionEvent {
        seq,
        time: 1_700_000_000_000 + seq,
        payload,
    }
}

#[test]
fn both_parsers_agree_and_round_trip() {
    let events = [
        event(0, EventPayload::TurnStart(TurnStart { turn: 0 })),
        event(
            1,
            EventPayload::InboxAccepted(InboxAccepted {
                message: UserMessage {
                    id: MessageId::new("m-1"),
                    content: vec![ContentBlock::text("hi")],
                    source: MessageSource::User,
                },
                target: InboxTarget::NextTurn,
                wake: true,
            }),
        ),
        event(
            2,
            EventPayload::Extension {
                kind: "subagent/child".into(),
                payload: serde_json::json!({"name": "a"}).into(),
            },
        ),
    ];
    for ev in events {
        let line = ev.to_json_line();
        assert_eq!(SessionEvent::from_json_line(&line).unwrap(), ev);
        assert_eq!(serde_json::from_str::<SessionEvent>(&line).unwrap(), ev);
    }
}

#[test]
fn lines_with_other_key_orders_and_unknown_keys_still_parse() {
    let line = r#"{"payload":{"turn":3},"extra":[1,2],"type":"turn/start","time":5,"seq":7}"#;
    let event = SessionEvent::from_json_line(line).unwrap();
    assert_eq!(event.seq, 7);
    assert_eq!(
        event.payload,
        EventPayload::TurnStart(TurnStart { turn: 3 })
    );
    let escaped = r#"{"seq":0,"time":0,"type":"x\/y","payload":null}"#;
    assert_eq!(
        SessionEvent::from_json_line(escaped)
            .unwrap()
            .payload
            .kind(),
        "x/y"
    );
    for bad in [
        r#"{"seq":0,"time":0,"payload":{}}"#,
        r#"{"seq":0,"time":0,"type":"turn/start"}"#,
        r#"{"seq":0,"time":0,"type":"turn/start","payload":{"turn":"x"}}"#,
        r#"{"seq":0,"time":0,"type":"usage","payload":{}} trailing"#,
    ] {
        assert!(SessionEvent::from_json_line(bad).is_err(), "{bad}");
    }
}

/// The hand-read envelope accepts exactly what the general path does,
/// with the same result: written lines take it, anything unusual falls
/// through to the general path, which reads or refuses it.
#[test]
fn the_fast_path_agrees_with_the_general_one() {
    let lines = [
        r#"{"seq":0,"time":0,"type":"turn/start","payload":{"turn":0}}"#,
        r#"{"seq":18446744073709551615,"time":1,"type":"usage","payload":{"input_tokens":1,"output_tokens":2}}"#,
        r#"{"seq":18446744073709551616,"time":1,"type":"turn/start","payload":{"turn":0}}"#,
        r#"{"seq":01,"time":1,"type":"turn/start","payload":{"turn":0}}"#,
        r#"{"seq":1.0,"time":1,"type":"turn/start","payload":{"turn":0}}"#,
        r#"{"seq":1e2,"time":1,"type":"turn/start","payload":{"turn":0}}"#,
        r#"{"seq":-1,"time":1,"type":"turn/start","payload":{"turn":0}}"#,
        r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":0} }"#,
        r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":0},"seq":2}"#,
        r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":0}} "#,
        r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":"x"}}"#,
        r#"{"seq":1,"time":1,"type":"turn\/start","payload":{"turn":0}}"#,
        "{\"seq\":1,\"time\":1,\"type\":\"a\tb\",\"payload\":{}}",
        r#"{"seq":1,"time":1,"type":"x/y","payload":{"a":[1,{"b":"}"}]}}"#,
        r#"{"seq":1,"time":1,"type":"x/y","payload":{"a":1}}}"#,
        r#"{"seq":1,"time":1,"type":"x/y","payload":}"#,
        r#"{"seq":1,"time":1,"type":"x/y","payload":{}"#,
        r#"{"seq": 1,"time":1,"type":"turn/start","payload":{"turn":0}}"#,
        // The payloads read by hand, and forms next to theirs.
        r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":18446744073709551615}}"#,
        r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":18446744073709551616}}"#,
        r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":-1}}"#,
        r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":1e400}}"#,
        r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":01}}"#,
        r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":1,"x":2}}"#,
        r#"{"seq":1,"time":1,"type":"turn/start","payload":{"turn":1,"turn":2}}"#,
        r#"{"seq":1,"time":1,"type":"step/start","payload":{"turn":1,"step":2}}"#,
        r#"{"seq":1,"time":1,"type":"step/start","payload":{"step":2,"turn":1}}"#,
        r#"{"seq":1,"time":1,"type":"step/start","payload":{"turn":1}}"#,
        r#"{"seq":1,"time":1,"type":"step/start","payload":{"turn":1,"step":2.0}}"#,
        r#"{"seq":1,"time":1,"type":"usage","payload":{"input_tokens":4000,"output_tokens":120}}"#,
        r#"{"seq":1,"time":1,"type":"usage","payload":{"input_tokens":4,"output_tokens":1,"cached_input_tokens":3}}"#,
        r#"{"seq":1,"time":1,"type":"usage","payload":{"input_tokens":4,"output_tokens":1,"reasoning_tokens":0}}"#,
        r#"{"seq":1,"time":1,"type":"usage","payload":{"input_tokens":4,"output_tokens":0.1}}"#,
        r#"{"seq":1,"time":1,"type":"usage","payload":{"output_tokens":1,"input_tokens":4}}"#,
        r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"plain"}]}}"#,
        r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":""}]}}"#,
        "{\"seq\":1,\"time\":1,\"type\":\"assistant/message\",\"payload\":{\"content\":[{\"type\":\"text\",\"text\":\"h\u{e9}llo \u{2603} \u{1d11e}\"}]}}",
        r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a\"b\n\u00e9\ud834\udd1e"}]}}"#,
        r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"lone \ud800"}]}}"#,
        "{\"seq\":1,\"time\":1,\"type\":\"assistant/message\",\"payload\":{\"content\":[{\"type\":\"text\",\"text\":\"a\tb\"}]}}",
        "{\"seq\":1,\"time\":1,\"type\":\"assistant/message\",\"payload\":{\"content\":[{\"type\":\"text\",\"text\":\"a\u{7f}b\"}]}}",
        r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}"#,
        r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a","cache":true}]}}"#,
        r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a"}],"x":1}}"#,
        r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a"}]}"#,
        r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a}]}}"#,
        r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"image","text":"a"}]}}"#,
        r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[]}}"#,
        r#"{"seq":1,"time":1,"type":"assistant/message","payload":{"content":[{"type":"text","text":"a"},]}}"#,
        r#"{"seq":1,"time":1,"type":"turn/end","payload":{"turn":3,"stop_reason":"completed"}}"#,
        r#"{"seq":1,"time":1,"type":"turn/end","payload":{"turn":3,"stop_reason":"a-new-reason"}}"#,
        r#"{"seq":1,"time":1,"type":"turn/end","payload":{"turn":3,"stop_reason":"aborted","diagnostic":"d"}}"#,
        r#"{"seq":1,"time":1,"type":"turn/end","payload":{"turn":3,"stop_reason":"x\u0041"}}"#,
        r#"{"seq":1,"time":1,"type":"turn/end","payload":{"turn":3,"stop_reason":7}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/claimed","payload":{"message_ids":[]}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/claimed","payload":{"message_ids":["m-1"]}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/discarded","payload":{"message_ids":["m-1","m-2",""]}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/claimed","payload":{"message_ids":["m-1",]}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/claimed","payload":{"message_ids":["m-1""m-2"]}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/claimed","payload":{"message_ids":["m-\u00e9"]}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/claimed","payload":{"message_ids":[1]}}"#,
        r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}}}}"#,
        r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"},{"type":"text","text":"\u00e9"}],"source":{"kind":"user"}}}}"#,
        r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"id":"m-1","content":[],"source":{"kind":"user"}}}}"#,
        r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user","client_time_zone":"UTC"}}}}"#,
        r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"agent-message","form":"relay","sender_session_id":"s-1"}}}}"#,
        r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"x":1}}"#,
        r#"{"seq":1,"time":1,"type":"user/message","payload":{"message":{"content":[{"type":"text","text":"hi"}],"id":"m-1","source":{"kind":"user"}}}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/accepted","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"target":"next-turn","wake":true}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/accepted","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"target":"next-step","wake":false}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/accepted","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"target":"later","wake":true}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/accepted","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"target":"next-turn","wake":1}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/accepted","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"target":"next-turn"}}"#,
        r#"{"seq":1,"time":1,"type":"inbox/accepted","payload":{"message":{"id":"m-1","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"target":"next-turn","wake":true,"wake":false}}"#,
        r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"fn a() {\n    b(\"x\\y\");\n}\n"}]}}"#,
        r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"\u00e9\ud834\udd1e\/\b\f\r\t"}],"is_error":true}}"#,
        r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"ends in a backslash \\"}]}}"#,
        r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"lone \ud800 surrogate"}]}}"#,
        r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"bad \x escape"}]}}"#,
        r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"cut \u"}]}}"#,
        r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"text","text":"open \"}]}}"#,
        "{\"seq\":1,\"time\":1,\"type\":\"tool/result\",\"payload\":{\"call_id\":\"c-1\",\"name\":\"read\",\"content\":[{\"type\":\"text\",\"text\":\"raw\ttab \\n\"}]}}",
        r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[],"is_error":false}}"#,
        r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[{"type":"image","media_type":"image/png","data":"AAAA"}]}}"#,
        r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-1","name":"read","content":[],"is_error":true,"x":1}}"#,
        r#"{"seq":1,"time":1,"type":"tool/result","payload":{"call_id":"c-\u0031","name":"read","content":[]}}"#,
        r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{"path":"src/a.rs","offset":0,"limit":200}}}"#,
        r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{"big":18446744073709551616,"neg":-9223372036854775808,"f":0.1,"e":1e-7,"z":-0.0}}}"#,
        r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{"huge":1e400}}}"#,
        r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{"a":1,"a":2,"b":"\ud834\udd1e","c":"\ud800"}}}"#,
        r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{"a":1,"a":2,"b":"\u00e9"}}}"#,
        r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":[[[[[[[[[[[[[[[[{"deep":[null,true,false]}]]]]]]]]]]]]]]]]}}"#,
        r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":"text"}}"#,
        r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{} }}"#,
        r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{}},"x":1}"#,
        r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{},"x":1}}"#,
        r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read","input":{}}"#,
        r#"{"seq":1,"time":1,"type":"tool/call","payload":{"call_id":"c-1","name":"read"}}"#,
    ];
    for line in lines {
        let fast = fast::event(line, &mut RecentIds::default());
        let general = general::event(line).ok();
        if fast.is_some() {
            assert_eq!(fast, general, "{line}");
        }
        assert_eq!(SessionEvent::from_json_line(line).ok(), general, "{line}");
    }
    let written = event(3, EventPayload::TurnStart(TurnStart { turn: 1 })).to_json_line();
    assert!(fast::event(&written, &mut RecentIds::default()).is_some());
}

/// The payloads read by hand are read by hand as written (so the hand
/// path is not dead), to what serde reads.
#[test]
fn the_written_payloads_are_read_by_hand() {
    let payloads = [
        EventPayload::TurnStart(TurnStart { turn: 7 }),
        EventPayload::StepStart(StepStart { turn: 7, step: 1 }),
        EventPayload::Usage(Usage {
            input_tokens: 4_000,
            output_tokens: 120,
            ..Usage::default()
        }),
        EventPayload::AssistantMessage(AssistantEntry {
            content: vec![ContentBlock::text(
                "I will fix it: `parse` (\u{e9}, \u{2603}).",
            )],
        }),
        EventPayload::AssistantMessage(AssistantEntry { content: vec![] }),
        EventPayload::TurnEnd(TurnEnd {
            turn: 2,
            stop_reason: StopReason::COMPLETED,
            diagnostic: None,
        }),
        EventPayload::TurnEnd(TurnEnd {
            turn: 2,
            stop_reason: StopReason::new("made-up"),
            diagnostic: None,
        }),
        EventPayload::InboxClaimed(InboxIds {
            message_ids: vec![MessageId::new("m-1"), MessageId::new("m-2")],
        }),
        EventPayload::InboxDiscarded(InboxIds {
            message_ids: vec![],
        }),
        EventPayload::UserMessage(UserEntry {
            message: UserMessage {
                id: MessageId::new("m-3"),
                content: vec![ContentBlock::text("a"), ContentBlock::text("b")],
                source: MessageSource::User,
            },
        }),
        EventPayload::ToolResult(ToolResultEntry {
            call_id: CallId::new("c-1"),
            name: "read_file".into(),
            content: vec![ContentBlock::text("fn a() {\n    \"\\\u{1}\u{e9}\"\n}")],
            is_error: false,
        }),
        EventPayload::ToolResult(ToolResultEntry {
            call_id: CallId::new("c-2"),
            name: "read_file".into(),
            content: vec![],
            is_error: true,
        }),
        EventPayload::ToolCall(ToolCall {
            call_id: CallId::new("c-3"),
            name: "read_file".into(),
            input: serde_json::json!({"path": "src/list.rs", "offset": 0, "limit": 200, "f": 0.1})
                .into(),
        }),
        EventPayload::InboxAccepted(InboxAccepted {
            message: UserMessage {
                id: MessageId::new("m-4"),
                content: vec![ContentBlock::text("fix the parser")],
                source: MessageSource::User,
            },
            target: InboxTarget::NextStep,
            wake: false,
        }),
    ];
    for payload in payloads {
        let line = event(9, payload.clone()).to_json_line();
        let (_, text) = line.split_once(r#""payload":"#).unwrap();
        let text = text.strip_suffix('}').unwrap();
        assert_eq!(
            written_payload(payload.kind(), text, &mut RecentIds::default()),
            Some(payload.clone()),
            "{line}"
        );
        assert_eq!(general::event(&line).unwrap().payload, payload);
    }
}

/// `serde_json::from_str::<SessionEvent>` reads every line as
/// `from_json_line` does: an extension payload keeps its text (key order,
/// repeated keys, numbers out of `f64`'s range), and a repeated envelope
/// key is refused by both.
#[test]
fn deserialize_reads_a_line_as_from_json_line_does() {
    let lines = [
        r#"{"seq":0,"time":0,"type":"x/y","payload":{"z":1,"a":2}}"#,
        r#"{"seq":0,"time":0,"type":"x/y","payload":{"a":1,"a":2}}"#,
        r#"{"seq":0,"time":0,"type":"x/y","payload":{"big":1e400}}"#,
        r#"{"payload":{"z":1,"a":[1e400]},"type":"x/y","time":0,"seq":0}"#,
        r#"{"seq":0,"time":0,"type":"turn/start","payload":{"turn":1},"seq":1}"#,
        r#"{"seq":0,"time":0,"type":"turn/start","type":"turn/start","payload":{"turn":1}}"#,
        r#"{"payload":{"turn":1},"seq":0,"time":0,"type":"turn/start","payload":{"turn":1}}"#,
    ];
    for line in lines {
        let read = SessionEvent::from_json_line(line).ok();
        let serde = serde_json::from_str::<SessionEvent>(line).ok();
        assert_eq!(read, serde, "{line}");
    }
    let kept = SessionEvent::from_json_line(lines[0]).unwrap();
    let EventPayload::Extension { payload, .. } = kept.payload else {
        panic!("an extension");
    };
    assert_eq!(payload.get(), r#"{"z":1,"a":2}"#);
    assert!(SessionEvent::from_json_line(lines[4]).is_err());
}

/// A skimmed line is read whatever its key order; a repeated key is
/// refused; a payload of a type not wanted is only checked to be JSON.
#[test]
fn a_skimmed_line_is_read_whatever_its_key_order_and_a_repeated_key_is_refused() {
    let wanted = ["subagent/child"];
    let read =
        |line: &str| general::skim(line, &wanted).map(|skimmed| (skimmed.seq, skimmed.event));
    let ordered = r#"{"seq":4,"time":9,"type":"subagent/child","payload":{"a":1}}"#;
    let reversed = r#"{"payload":{"a":1},"type":"subagent\/child","time":9,"seq":4}"#;
    let expected = SessionEvent::from_json_line(ordered).unwrap();
    assert_eq!(read(ordered).unwrap(), (4, Some(expected.clone())));
    assert_eq!(read(reversed).unwrap(), (4, Some(expected)));
    let unwanted = r#"{"seq":4,"time":9,"type":"turn/start","payload":{"turn":"x"}}"#;
    assert_eq!(read(unwanted).unwrap(), (4, None));
    assert!(read(r#"{"seq":4,"seq":5,"time":9,"type":"x","payload":{}}"#).is_err());
    assert!(read(r#"{"seq":4,"type":"x","payload":{}}"#).is_err());
}

/// The hand-read skim accepts what the general one does, with the same
/// result; anything unusual is left to it.
#[test]
fn the_written_skim_agrees_with_the_general_one() {
    let wanted = ["subagent/child"];
    let general = |line: &str| general::skim(line, &wanted).ok();
    let taken = [
        r#"{"seq":4,"time":9,"type":"subagent/child","payload":{"a":[1,{"b":"}"}]}}"#,
        r#"{"seq":0,"time":0,"type":"turn/start","payload":{"turn":"not built"}}"#,
        r#"{"seq":18446744073709551615,"time":1,"type":"x","payload":null}"#,
        // Whitespace inside the payload is the payload's own.
        r#"{"seq":4,"time":9,"type":"x","payload":{} }"#,
    ];
    for line in taken {
        let fast = fast::skim(line, &wanted);
        assert!(fast.is_some(), "{line}");
        assert_eq!(fast, general(line), "{line}");
    }
    let left = [
        r#"{"seq":4,"time":9,"type":"subagent/child","payload":{"a":1},"seq":5}"#,
        r#"{"seq":4,"time":9,"type":"subagent\/child","payload":{"a":1}}"#,
        r#"{"seq":04,"time":9,"type":"x","payload":{}}"#,
        r#"{"seq":4,"time":9,"type":"x","payload":{"a":}}"#,
        r#"{"seq":4,"time":9,"type":"x","payload":}"#,
        r#"{"time":9,"seq":4,"type":"x","payload":{}}"#,
        r#"{"seq":18446744073709551616,"time":1,"type":"x","payload":{}}"#,
    ];
    for line in left {
        assert_eq!(fast::skim(line, &wanted), None, "{line}");
    }
}
