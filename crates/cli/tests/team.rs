//! The team part of `dsh` run as a process: the offline team demo
//! (`dsh run --team` with the demo model: a lead, two teammates, three
//! tasks with a dependency, peer messages, over the real team service,
//! tools and JSONL logs), then `dsh team` reading that tree cold, and its
//! refusals, which follow the other commands' (one line, exit 3, the
//! session directory untouched). Snapshots redact session and message ids,
//! the scratch path and token counts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use support::{Scratch, text};

/// Snapshot `value` with the scratch's redactions and message ids.
fn snapshot(scratch: &Scratch, name: &str, value: &str) {
    let mut settings = support::redacted(scratch);
    settings.add_filter(r"m-[0-9a-f]{32}", "[message]");
    settings.bind(|| insta::assert_snapshot!(name, value));
}

/// The `user/message` and accepted sources of one log, in order.
fn sources(scratch: &Scratch, id: &str) -> Vec<String> {
    let log = std::fs::read_to_string(scratch.sessions().join(format!("{id}.jsonl"))).unwrap();
    log.lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|event| event["type"] == "inbox/accepted")
        .map(|event| {
            event["payload"]["message"]["source"]["kind"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn the_team_demo_runs_a_lead_two_teammates_and_three_tasks_and_dsh_team_shows_it() {
    let scratch = Scratch::new();
    let run = scratch.dsh(&["run", "--team"], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(text(&run.stderr), "");
    snapshot(&scratch, "team_demo", &text(&run.stdout));

    let team = scratch.dsh(&["team"], &[]);
    assert!(team.status.success(), "{}", text(&team.stderr));
    assert_eq!(text(&team.stderr), "");
    snapshot(&scratch, "team", &text(&team.stdout));
    // The run ends with the same report, read from the same logs.
    assert!(text(&run.stdout).ends_with(&text(&team.stdout)));

    // Named: the same tree.
    let lead = text(&team.stdout)
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("team "))
        .unwrap()
        .to_owned();
    let named = scratch.dsh(&["team", &lead], &[]);
    assert_eq!(text(&named.stdout), text(&team.stdout));

    // Each teammate took its task from the lead (an agent message); the
    // reviewer holds the surveyor's message whole, with its own source.
    let reviewer = scratch.child_id("reviewer");
    assert_eq!(
        sources(&scratch, &reviewer),
        ["agent-message", "team-message"]
    );
    // The thanks stayed queued for the settled surveyor: never delivered.
    let surveyor = scratch.child_id("surveyor");
    assert_eq!(sources(&scratch, &surveyor), ["agent-message"]);

    // Continuing the lead keeps its team: the team is reopened (its
    // recovery leaves the thanks queued for the inactive surveyor), the
    // lead answers, and the run ends with the same team report.
    let send = scratch.dsh(&["send", "lead", "Is the report done?"], &[]);
    assert!(send.status.success(), "{}", text(&send.stderr));
    let said = text(&send.stdout);
    assert!(said.contains("lead: Noted: Is the report done?"), "{said}");
    assert!(said.ends_with(&text(&team.stdout)), "{said}");
    let after = scratch.dsh(&["team"], &[]);
    assert_eq!(text(&after.stdout), text(&team.stdout));

    // The same demo, the same output but for the ids.
    let again = scratch.dsh(&["run", "--team"], &[]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    snapshot(&scratch, "team_demo", &text(&again.stdout));
}

#[test]
fn dsh_team_refuses_what_other_commands_refuse_and_says_when_a_tree_has_no_team() {
    let scratch = Scratch::new();
    let err = scratch.refused(&["team"], &[], 3);
    assert!(err.contains("no session directory at"), "{err}");
    assert!(!scratch.sessions().exists());

    scratch.demo();
    let plain = scratch.dsh(&["team"], &[]);
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let said = text(&plain.stdout);
    assert!(
        said.ends_with(
            ": no members, tasks or messages (`dsh run --team` gives a lead its team)\n"
        ),
        "{said}"
    );
    let err = scratch.refused(&["team", "s-nope"], &[], 3);
    assert!(err.contains("no root session `s-nope`"), "{err}");
}
