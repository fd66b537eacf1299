//! `--json` of the read-only commands (`dsh agents`, `dsh show`, `dsh
//! team`) as a program reads it: stdout is one JSON document (schema 1,
//! the fields docs/cli-json.md names) and nothing else, it agrees with the
//! text the same command prints, and the documents of the offline demos
//! are snapshotted (ids, the scratch path and token counts redacted).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use serde_json::Value;
use support::{Scratch, text};

/// The one JSON document `args` prints, checked to be alone on stdout.
fn document(scratch: &Scratch, args: &[&str]) -> Value {
    let output = scratch.dsh(args, &[]);
    assert!(
        output.status.success(),
        "{args:?}: {}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stderr), "", "{args:?}");
    let stdout = text(&output.stdout);
    assert_eq!(
        stdout.lines().count(),
        1,
        "{args:?}: one document, one line"
    );
    let value: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(value["schema"], 1, "{args:?}");
    value
}

/// Snapshot a document pretty-printed, redacted as the text snapshots are.
fn snapshot(scratch: &Scratch, name: &str, value: &Value) {
    let mut settings = support::redacted(scratch);
    settings.add_filter(r#""(\w+_tokens)": \d+"#, r#""${1}": [n]"#);
    settings.add_filter(r"m-[0-9a-f]{32}", "[message]");
    settings.bind(|| insta::assert_snapshot!(name, serde_json::to_string_pretty(value).unwrap()));
}

#[test]
fn agents_and_show_print_one_document_that_agrees_with_the_text() {
    let scratch = Scratch::new();
    scratch.demo();
    let agents = document(&scratch, &["agents", "--json"]);
    let trees = agents["trees"].as_array().unwrap();
    assert_eq!(trees.len(), 1);
    let tree = &trees[0];
    assert_eq!(tree["root"], scratch.root_id().as_str());
    assert_eq!(tree["most_recent"], true);
    for child in tree["agents"].as_array().unwrap() {
        let name = child["name"].as_str().unwrap();
        assert_eq!(child["session"], scratch.child_id(name).as_str(), "{name}");
        assert_eq!(child["parent"], tree["root"], "{name}");
        let show = document(&scratch, &["show", name, "--json"]);
        assert_eq!(
            (&show["agent"], &show["session"], &show["label"]),
            (&child["name"], &child["session"], &child["label"])
        );
        // Every line is one the run's stream documents, for this agent.
        for line in show["events"].as_array().unwrap() {
            assert_eq!(line["agent"], name);
            assert_eq!(line["session"], child["session"]);
        }
    }
    snapshot(&scratch, "agents_json", &agents);
    let lead = document(&scratch, &["show", "lead", "--json"]);
    let events = lead["events"].as_array().unwrap();
    assert_eq!(events.first().unwrap()["type"], "prompt");
    assert_eq!(events.last().unwrap()["type"], "turn_ended");
    snapshot(&scratch, "show_lead_json", &lead);
}

#[test]
fn team_prints_the_roster_board_and_mailbox_as_one_document() {
    let scratch = Scratch::new();
    let run = scratch.dsh(&["run", "--team"], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let team = document(&scratch, &["team", "--json"]);
    let report = text(&scratch.dsh(&["team"], &[]).stdout);
    let members = team["members"].as_array().unwrap();
    assert_eq!(members[0]["role"], "lead");
    assert!(report.contains(&format!("members ({}):", members.len())));
    for task in team["tasks"].as_array().unwrap() {
        assert!(report.contains(task["id"].as_str().unwrap()), "{task}");
    }
    let mailbox = team["mailbox"].as_array().unwrap();
    assert!(report.contains(&format!("mailbox ({} messages", mailbox.len())));
    snapshot(&scratch, "team_json", &team);
}

#[test]
fn json_never_goes_with_a_command_that_writes() {
    let scratch = Scratch::new();
    scratch.demo();
    let refused = scratch.refused(&["agents", "--json", "--prune-orphans"], &[], 2);
    assert!(refused.contains("--prune-orphans"), "{refused}");
}
