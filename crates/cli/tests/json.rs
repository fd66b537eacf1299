//! `dsh run --json` as a program reads it: every line of stdout is one
//! JSON object of a documented type and nothing else is there, the offline
//! demo's stream is snapshotted (per agent, in each agent's order), the
//! run is bracketed by `run_started` and the lead's `settled`, every tool
//! call has its result, and an error still reaches stderr as one line with
//! its exit code and nothing on stdout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use support::{Scratch, json_by_agent, json_lines, text};

#[test]
fn the_demo_streams_one_documented_object_per_line_and_nothing_else() {
    let scratch = Scratch::new();
    support::copy_fixture("greeter", scratch.dir.path());
    let run = scratch.dsh(&["run", "--json"], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(text(&run.stderr), "");
    let lines = json_lines(&run.stdout);
    assert_eq!(lines.first().unwrap()["type"], "run_started");
    assert_eq!(lines.first().unwrap()["schema"], 1);
    let last = lines.last().unwrap();
    assert_eq!(
        (&last["type"], &last["agent"], &last["stop_reason"]),
        (&"settled".into(), &"lead".into(), &"completed".into())
    );
    // Every call is answered, in the same agent's stream.
    for call in lines.iter().filter(|line| line["type"] == "tool_call") {
        assert!(
            lines.iter().any(|line| line["type"] == "tool_result"
                && line["call_id"] == call["call_id"]
                && line["session"] == call["session"]),
            "no result for {call}"
        );
    }
    // Each child starts before anything of its own, and settles last.
    for child in ["researcher", "reviewer"] {
        let own: Vec<_> = lines.iter().filter(|line| line["agent"] == child).collect();
        assert_eq!(own.first().unwrap()["type"], "agent_started", "{child}");
        assert_eq!(own.last().unwrap()["type"], "settled", "{child}");
    }
    // Each step's text streams as deltas first: the pieces since the
    // agent's last `text` line, joined, are that line's text.
    for agent in ["lead", "researcher", "reviewer"] {
        let mut pieces = String::new();
        let mut steps = 0;
        for line in lines.iter().filter(|line| line["agent"] == agent) {
            match line["type"].as_str().unwrap() {
                "text_delta" => pieces.push_str(line["text"].as_str().unwrap()),
                "text" => {
                    assert_eq!(line["text"].as_str().unwrap(), pieces, "{agent}");
                    pieces.clear();
                    steps += 1;
                }
                _ => {}
            }
        }
        assert!(steps > 0, "{agent} said nothing");
        assert_eq!(pieces, "", "{agent}: deltas after its last text");
    }
    snapshot!(&scratch, "run_demo_json", json_by_agent(&run.stdout));
}

#[test]
fn with_json_an_error_is_still_one_line_on_stderr_with_its_exit_code() {
    let scratch = Scratch::new();
    // Nothing listens on port 9 of the loopback.
    let env = [
        ("OPENAI_API_KEY", "sk-test"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
    ];
    let err = scratch.refused(&["run", "--json", "--model", "openai:m", "hi"], &env, 5);
    assert!(err.contains("127.0.0.1:9"), "{err}");
    scratch.demo();
    let err = scratch.refused(&["send", "--json", "nobody", "hi"], &[], 3);
    assert!(err.contains("nobody"), "{err}");
}
