//! `dsh replay` (B59): the demo's tree replays identical, session by
//! session; a log whose claimed message no longer matches the inbox item
//! it claims is reported where it parts (the session and the seq), and the
//! command fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::*;

#[test]
fn dsh_replay_finds_the_demo_identical_and_an_altered_log_where_it_parts() {
    let scratch = Scratch::new();
    copy_fixture("greeter", scratch.dir.path());
    scratch.demo();
    let replay = scratch.dsh(&["replay"], &[]);
    assert!(replay.status.success(), "{}", text(&replay.stderr));
    let said = text(&replay.stdout);
    let sessions = std::fs::read_dir(scratch.sessions())
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".jsonl")
        })
        .count();
    assert!(sessions > 1, "the demo leaves a tree");
    assert_eq!(said.lines().count(), sessions, "{said}");
    assert!(
        said.lines().all(|line| line.contains(": identical (")),
        "{said}"
    );

    // The researcher's first claimed message, altered.
    let id = scratch.child_id("researcher");
    let path = scratch.sessions().join(format!("{id}.jsonl"));
    let log = std::fs::read_to_string(&path).unwrap();
    let mut seq = None;
    let lines: Vec<String> = log
        .lines()
        .map(|line| {
            let mut event: serde_json::Value = serde_json::from_str(line).unwrap();
            if seq.is_none() && event["type"] == "user/message" {
                seq = event["seq"].as_u64();
                event["payload"]["message"]["content"][0]["text"] = "not what was sent".into();
                return serde_json::to_string(&event).unwrap();
            }
            line.to_owned()
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let seq = seq.expect("the researcher claimed its task");
    let replay = scratch.dsh(&["replay"], &[]);
    assert_eq!(replay.status.code(), Some(1), "{}", text(&replay.stdout));
    let said = text(&replay.stdout);
    assert!(
        said.contains(&format!("{id}: diverges at seq {seq}\n  expected: ")),
        "{said}"
    );
    assert!(said.contains("not what was sent"), "{said}");
    assert_eq!(text(&replay.stderr).lines().count(), 1);
}
