//! The team part of `dsh` run as a process: the offline team demo
//! (`dsh run --team` with the demo model: a lead, two teammates, three
//! tasks with a dependency, peer messages, over the real team service,
//! tools and JSONL logs), then `dsh team` reading that tree cold, and its
//! refusals, which follow the other commands' (one line, exit 3, the
//! session directory untouched), and the team demo SIGKILLed at seeded
//! points (`DSH_TEAM_KILL_SEED=<n>` replays), after each of which `dsh team`
//! reads the tree, continuing the lead recovers the team, and no team
//! message is lost to its log or held twice. Snapshots redact session and
//! message ids, the scratch path and token counts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use std::collections::{HashMap, HashSet};
use std::path::Path;

use dsh_test_support::acknowledged::{Held, OnDisk};
use serde_json::Value;
use support::{BOUND, Scratch, dir_bytes, kill_once_written, text};

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
    dsh_test_support::replays::assert_dir_replays(&scratch.sessions());
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

    // A lead's log corrupt in the middle: exit 4, naming file and line.
    let lead = text(&plain.stdout)
        .split(':')
        .next()
        .and_then(|head| head.strip_prefix("team "))
        .unwrap()
        .to_owned();
    let path = scratch.sessions().join(format!("{lead}.jsonl"));
    let log = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = log.lines().collect();
    lines.insert(2, "{not json");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let err = scratch.refused(&["team"], &[], 4);
    assert!(err.contains(&format!("{lead}.jsonl:3: corrupt")), "{err}");
}

/// How many kills of the team demo.
const KILLS: usize = 24;

/// Every complete line of every log in `dir`, by session id.
fn events(dir: &Path) -> HashMap<String, Vec<Value>> {
    let mut logs = HashMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(id) = name
            .strip_suffix(".jsonl")
            .filter(|id| !id.starts_with('.'))
        else {
            continue;
        };
        let bytes = std::fs::read(&path).unwrap();
        let complete = bytes
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1);
        let lines = bytes[..complete]
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| serde_json::from_slice(line).unwrap())
            .collect();
        logs.insert(id.to_owned(), lines);
    }
    logs
}

/// The mailbox as the lead's log holds it: every queued message id with
/// its target's session, and the acknowledged ids.
fn mailbox(lead: &[Value]) -> (Vec<(String, String)>, HashSet<String>) {
    let of = |kind: &'static str| {
        lead.iter()
            .filter(move |event| event["type"] == kind)
            .map(|event| &event["payload"])
    };
    let sessions: HashMap<&str, &str> = of("team/member")
        .map(|member| {
            (
                member["name"].as_str().unwrap(),
                member["id"].as_str().unwrap(),
            )
        })
        .collect();
    let queued = of("team/message")
        .map(|message| {
            let to = message["to"].as_str().unwrap();
            let session = if to == "lead" {
                lead[0]["id"].as_str().unwrap_or("")
            } else {
                sessions[to]
            };
            (
                message["id"].as_str().unwrap().to_owned(),
                session.to_owned(),
            )
        })
        .collect();
    let delivered = of("team/delivered")
        .map(|ack| ack["id"].as_str().unwrap().to_owned())
        .collect();
    (queued, delivered)
}

/// How many times a log accepted message `id`.
fn accepted(log: &[Value], id: &str) -> usize {
    log.iter()
        .filter(|event| {
            event["type"] == "inbox/accepted" && event["payload"]["message"]["id"] == id
        })
        .count()
}

/// `dsh team` of the scratch's latest tree: it succeeds and names no
/// record the fold refused; its output.
fn team_report(scratch: &Scratch, at: &str) -> String {
    let team = scratch.dsh(&["team"], &[]);
    assert!(
        team.status.success(),
        "{at}: dsh team: {}",
        text(&team.stderr)
    );
    let report = text(&team.stdout);
    assert!(!report.contains("was refused"), "{at}: {report}");
    report
}

/// The team demo killed at seeded points of its writing (by bytes
/// written), each over a fresh directory; at least half the kills must land
/// inside a run. After each kill `dsh team` reads the tree; `dsh send lead`
/// continues it, which reopens its team (a provisioning member is decided,
/// queued messages offered again); then no member is left provisioning,
/// every message queued before the kill is held by its target once and
/// acknowledged or still queued for it, every message a target's log holds is acknowledged, no
/// message was accepted twice, and every line the logs held when the run
/// died is still there, once (`dsh_test_support::acknowledged`).
#[test]
fn the_team_demo_killed_anywhere_recovers_without_losing_or_repeating_a_message() {
    let seed = std::env::var("DSH_TEAM_KILL_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("DSH_TEAM_KILL_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let whole = {
        let scratch = Scratch::new();
        let run = scratch.dsh(&["run", "--team"], &[]);
        assert!(run.status.success(), "{}", text(&run.stderr));
        dir_bytes(&scratch.sessions())
    };
    let (mut killed, mut provisioning, mut undelivered) = (0, 0, 0);
    let mut checked = Held::default();
    for kill in 0..KILLS {
        let scratch = Scratch::new();
        let point = rng.u64(0..whole);
        let at = format!("kill {kill} at byte {point} (DSH_TEAM_KILL_SEED={seed})");
        if kill_once_written(&scratch, &["run", "--team"], point) {
            killed += 1;
        }
        let acked = OnDisk::read(&scratch.sessions());
        let held = acked.held();
        checked.accepted += held.accepted;
        checked.results += held.results;
        checked.team_messages += held.team_messages;
        let kept = |when: &str| {
            let lost = acked.lost_in(&OnDisk::read(&scratch.sessions()));
            assert!(lost.is_empty(), "{at}: after {when}:\n{}", lost.join("\n"));
        };
        let logs = events(&scratch.sessions());
        let roots = logs
            .values()
            .filter(|log| {
                log.first()
                    .is_some_and(|header| header.get("parent_session").is_none_or(Value::is_null))
            })
            .count();
        if roots == 0 {
            // Killed before the lead's header was written.
            continue;
        }
        let (queued_before, _) = mailbox(lead(&logs));
        let before = team_report(&scratch, &at);
        kept("dsh team");
        if before.contains("provisioning") {
            provisioning += 1;
        }
        if before.contains(" queued ") || before.contains(" queued\n") {
            undelivered += 1;
        }
        let send = scratch.dsh(&["send", "lead", "go on"], &[]);
        assert!(
            send.status.success(),
            "{at}: dsh send lead: {}",
            text(&send.stderr)
        );
        kept("dsh send lead");
        let report = team_report(&scratch, &at);
        assert!(!report.contains("provisioning"), "{at}: {report}");
        let logs = events(&scratch.sessions());
        let (queued, delivered) = mailbox(lead(&logs));
        // A message queued before the kill is delivered now (held once and
        // acknowledged) or still queued for its target's next turn, as a
        // quiet message to an inactive member stays even in a whole run.
        for (id, target) in &queued_before {
            let held = logs.get(target).map_or(0, |log| accepted(log, id));
            let still_queued = report
                .lines()
                .any(|line| line.contains(id.as_str()) && line.contains(" queued "));
            assert!(
                (held == 1 && delivered.contains(id)) || (held == 0 && still_queued),
                "{at}: {id}, queued before the kill, is held {held} times, {}\n{report}",
                if delivered.contains(id) {
                    "acknowledged"
                } else {
                    "not acknowledged"
                }
            );
        }
        for (id, target) in &queued {
            let held = logs.get(target).map_or(0, |log| accepted(log, id));
            assert!(held <= 1, "{at}: {id} accepted {held} times");
            if held == 1 {
                assert!(
                    delivered.contains(id),
                    "{at}: {id} is held but not acknowledged"
                );
            }
        }
        for id in &delivered {
            let target = &queued.iter().find(|(queued, _)| queued == id).unwrap().1;
            assert_eq!(
                accepted(&logs[target], id),
                1,
                "{at}: {id} acknowledged, not held"
            );
        }
        dsh_test_support::replays::assert_dir_replays(&scratch.sessions());
    }
    println!(
        "{killed} of {KILLS} runs killed part-way; {provisioning} left a member provisioning, \
         {undelivered} a message queued; {checked:?} kept"
    );
    assert!(
        killed >= KILLS / 2,
        "only {killed} of {KILLS} kills landed inside a run"
    );
    assert!(
        checked.accepted > 0 && checked.team_messages > 0,
        "no kill left an accepted or a team message to check: {checked:?}"
    );
}

/// The lead's log (the root's) of a tree's logs.
fn lead(logs: &HashMap<String, Vec<Value>>) -> &[Value] {
    logs.values()
        .find(|log| {
            log.first()
                .is_some_and(|header| header.get("parent_session").is_none_or(Value::is_null))
        })
        .unwrap()
}

/// `dsh send` to a teammate of a team tree rebuilds the team as `dsh run`
/// does: the resumed teammate's model is offered the team tools, not the
/// three control tools they replace.
#[test]
fn dsh_send_to_a_teammate_keeps_its_team_tools() {
    use support::model::{FakeModel, Reply};
    let scratch = Scratch::new();
    let mut replies = vec![Reply::ToolCall {
        name: "spawn_teammate".to_owned(),
        arguments: serde_json::json!({
            "name": "helper",
            "description": "help",
            "prompt": "Say hello.",
        }),
    }];
    replies.extend((0..8).map(|_| Reply::Text("Noted.".to_owned())));
    let model = FakeModel::start(replies);
    let env = model.env();
    let run = scratch.dsh(&["run", "--team", "--model", "openai:fake", "go"], &env);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let send = scratch.dsh(&["send", "helper", "ping the helper"], &env);
    assert!(send.status.success(), "{}", text(&send.stderr));
    assert!(
        text(&send.stdout).contains("helper: Noted."),
        "{}",
        text(&send.stdout)
    );
    let request = model.request_containing("ping the helper", BOUND);
    for tool in ["team_task_list", "wait_agent", "send_message"] {
        assert!(
            request.contains(&format!("\"name\":\"{tool}\"")),
            "{tool} missing:\n{request}"
        );
    }
}
