//! B63 and B64 through the real `dsh` process against the loopback
//! OpenAI-compatible server (which reports usage with every answer): a tree
//! whose token budget is spent stops children first and ends with the line
//! naming the budget; a role file reaches the child it starts (its
//! instructions in the child's system prompt, its name in `dsh agents` and
//! `dsh show`); a bad role file and a cost limit without prices are
//! refused before anything runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use serde_json::{Value, json};
use support::openai::{Answer, Board, ChatServer, Request, call};
use support::{Scratch, text};

const LEAD_TASK: &str = "Keep a helper busy.";
const CHILD_TASK: &str = "Look for the file, again and again.";

/// The lead starts one background child and waits; the child reads a
/// missing file forever, so only the tree's budget ends the run.
fn spinning(request: &Request, _board: &Board) -> Answer {
    if request.task() == LEAD_TASK {
        if request.step() == 0 {
            Answer::calls(vec![call(
                "subagent",
                json!({"description": "spin", "name": "spinner", "prompt": CHILD_TASK}),
            )])
        } else {
            Answer::calls(vec![call("wait", json!({"timeout_ms": 120_000}))])
        }
    } else {
        Answer::calls(vec![call("read_file", json!({"path": "nothing-here.txt"}))])
    }
}

/// Every log of the session directory: (header, events).
fn logs(scratch: &Scratch) -> Vec<(Value, Vec<Value>)> {
    let mut logs = Vec::new();
    let Ok(entries) = std::fs::read_dir(scratch.sessions()) else {
        return logs;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|ext| ext != "jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap());
        let header = lines.next().unwrap();
        logs.push((header, lines.collect()));
    }
    logs
}

#[test]
fn b64_a_spent_token_or_cost_budget_stops_the_tree_children_first_and_says_so() {
    let cases: [(&[&str], &str); 2] = [
        (
            &["--max-tokens", "20000"],
            "budget: the tree's token budget of 20000 was spent (",
        ),
        (
            // At $1000 per million tokens, a request of about 2000 costs $2.
            &["--max-cost", "10"],
            "budget: the tree's cost budget of $10.0000 was spent ($",
        ),
    ];
    for (flags, said) in cases {
        let scratch = Scratch::new();
        std::fs::write(
            scratch.dir.path().join("dsh.toml"),
            "[prices.loopback]\ninput = 1000.0\noutput = 1000.0\n",
        )
        .unwrap();
        let server = ChatServer::start(spinning);
        let mut args = vec!["run", "--model", "openai:loopback"];
        args.extend_from_slice(flags);
        args.push(LEAD_TASK);
        let run = scratch.dsh(&args, &server.env());
        server.assert_clean();
        let stderr = text(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(said), "{stderr}");
        assert!(
            stderr.contains("so the tree was stopped, children first, then the lead"),
            "{stderr}"
        );
        // Children first: the child settled (its usage recorded in the
        // lead's log) before the lead's last turn ended, and its log's
        // last event is no later than the lead's.
        let logs = logs(&scratch);
        let (_, lead) = logs
            .iter()
            .find(|(header, _)| header.get("parent_session").is_none())
            .unwrap();
        let (_, child) = logs
            .iter()
            .find(|(header, _)| header.get("parent_session").is_some())
            .unwrap();
        let settled = lead
            .iter()
            .position(|event| event["type"] == "subagent/usage")
            .expect("the child's usage in the lead's log");
        let ended = lead
            .iter()
            .rposition(|event| event["type"] == "turn/end")
            .expect("the lead's turn ended");
        assert!(settled < ended, "{lead:#?}");
        let last = |log: &[Value]| log.last().map(|event| event["time"].as_u64().unwrap());
        assert!(last(child) <= last(lead));
    }
}

#[test]
fn b64_a_child_that_spends_its_default_budget_is_stopped_and_the_run_says_which() {
    let scratch = Scratch::new();
    std::fs::write(
        scratch.dir.path().join("dsh.toml"),
        "[limits]\nchild_token_budget = 8000\n",
    )
    .unwrap();
    // The lead waits for its spinner's notice, then answers.
    let server = ChatServer::start(|request, board| {
        if request.task() == LEAD_TASK && request.mentions("spinner") && request.step() >= 2 {
            return Answer::text("done");
        }
        spinning(request, board)
    });
    let run = scratch.dsh(
        &["run", "--model", "openai:loopback", LEAD_TASK],
        &server.env(),
    );
    server.assert_clean();
    assert!(run.status.success(), "{}", text(&run.stderr));
    let out = text(&run.stdout);
    assert!(
        out.contains("budget: `spinner` was stopped by its token budget"),
        "{out}"
    );
    // A tree that has a limit and stays within it shows its spend.
    let scratch = Scratch::new();
    let server = ChatServer::start(|request, _| {
        if request.step() == 0 {
            Answer::text("quick")
        } else {
            Answer::text("SCRIPT: one step only")
        }
    });
    let run = scratch.dsh(
        &[
            "run",
            "--model",
            "openai:loopback",
            "--max-tokens",
            "900000",
            LEAD_TASK,
        ],
        &server.env(),
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    let out = text(&run.stdout);
    assert!(out.contains(" of 900000 tokens used"), "{out}");
}

/// Write the project role `reviewer` (read-only, its own instructions);
/// its file.
fn reviewer_role(scratch: &Scratch) -> std::path::PathBuf {
    let agents = scratch.dir.path().join(".dsh/agents");
    std::fs::create_dir_all(&agents).unwrap();
    let file = agents.join("reviewer.md");
    std::fs::write(
        &file,
        "---\ndescription: Reviews a change\ntools: [read_file]\n---\nYou are the careful reviewer.\n",
    )
    .unwrap();
    file
}

/// The lead, offered the role, starts `rev` as a `reviewer` and waits for
/// it; `rev` answers only with the role's instructions as its system
/// prompt.
fn reviewing(request: &Request, _board: &Board) -> Answer {
    if request.task() == LEAD_TASK {
        if request.step() == 0 {
            let offered = request.body["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|tool| {
                    tool["function"]["description"]
                        .as_str()
                        .is_some_and(|text| text.contains("- reviewer: Reviews a change"))
                });
            if !offered {
                return Answer::text("SCRIPT: the role was not listed");
            }
            Answer::calls(vec![call(
                "subagent",
                json!({"description": "review it", "name": "rev", "prompt": CHILD_TASK, "agent": "reviewer", "run_in_background": false}),
            )])
        } else {
            Answer::text("reviewed")
        }
    } else if request.messages[0]["content"]
        .as_str()
        .is_some_and(|system| system.contains("You are the careful reviewer."))
    {
        Answer::text("looks fine")
    } else {
        Answer::text("SCRIPT: the child has no role instructions")
    }
}

#[test]
fn b63_a_role_file_reaches_its_child_and_the_listings_name_it() {
    let scratch = Scratch::new();
    reviewer_role(&scratch);
    let server = ChatServer::start(reviewing);
    let run = scratch.dsh(
        &["run", "--model", "openai:loopback", LEAD_TASK],
        &server.env(),
    );
    server.assert_clean();
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(
        !text(&run.stdout).contains("SCRIPT"),
        "{}",
        text(&run.stdout)
    );
    let agents = scratch.dsh(&["agents"], &[]);
    assert!(
        text(&agents.stdout).contains("role: reviewer"),
        "{}",
        text(&agents.stdout)
    );
    let show = scratch.dsh(&["show", "rev"], &[]);
    assert!(
        text(&show.stdout).contains(", role reviewer): review it"),
        "{}",
        text(&show.stdout)
    );
}

/// A role child goes on after its role file is gone: its header recorded
/// the role's instructions, tools and route, so `dsh send` resumes it from
/// them, with its instructions still its system prompt.
#[test]
fn b63_a_role_child_takes_a_message_after_its_role_file_is_removed() {
    let scratch = Scratch::new();
    let role = reviewer_role(&scratch);
    let server = ChatServer::start(reviewing);
    let run = scratch.dsh(
        &["run", "--model", "openai:loopback", LEAD_TASK],
        &server.env(),
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    std::fs::remove_file(role).unwrap();
    let send = scratch.dsh(&["send", "rev", "once more"], &server.env());
    server.assert_clean();
    assert!(send.status.success(), "{}", text(&send.stderr));
    assert_eq!(text(&send.stdout).trim(), "rev: looks fine");
}

#[test]
fn b63_b64_bad_roles_and_unpriced_cost_limits_are_refused_before_anything_runs() {
    let scratch = Scratch::new();
    let agents = scratch.dir.path().join(".dsh/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("reviewer.md"),
        "---\ndescription: Reviews\ntools: [no_such_tool]\n---\nBody.\n",
    )
    .unwrap();
    let run = scratch.dsh(&["run", "hello"], &[]);
    assert_eq!(run.status.code(), Some(2));
    let stderr = text(&run.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("reviewer.md: tools: there is no tool `no_such_tool`"),
        "{stderr}"
    );
    assert!(logs(&scratch).is_empty(), "nothing ran");
    std::fs::remove_file(agents.join("reviewer.md")).unwrap();
    let run = scratch.dsh(
        &[
            "run",
            "--model",
            "openai:gpt-4o",
            "--max-cost",
            "1",
            "hello",
        ],
        &[("OPENAI_API_KEY", "sk-test")],
    );
    assert_eq!(run.status.code(), Some(2));
    let stderr = text(&run.stderr);
    assert!(stderr.contains("prices.gpt-4o: missing"), "{stderr}");
    assert!(logs(&scratch).is_empty(), "nothing ran");
    let run = scratch.dsh(&["run", "--max-tokens", "0", "hello"], &[]);
    assert_eq!(run.status.code(), Some(2));
    assert!(text(&run.stderr).contains("--max-tokens: must be positive"));
}

#[test]
fn b64_json_shows_the_spend_against_the_budget_and_ends_with_the_budget() {
    let scratch = Scratch::new();
    let server = ChatServer::start(spinning);
    let run = scratch.dsh(
        &[
            "run",
            "--model",
            "openai:loopback",
            "--max-tokens",
            "20000",
            "--json",
            LEAD_TASK,
        ],
        &server.env(),
    );
    assert_eq!(run.status.code(), Some(1), "{}", text(&run.stderr));
    let lines = support::json_lines(&run.stdout);
    let spends: Vec<u64> = lines
        .iter()
        .filter(|line| line["type"] == "budget")
        .map(|line| {
            assert_eq!(line["max_tokens"], 20000);
            assert_eq!(line["max_cost"], Value::Null);
            line["tokens"].as_u64().unwrap()
        })
        .collect();
    assert!(!spends.is_empty(), "{}", text(&run.stdout));
    assert!(spends.is_sorted(), "{spends:?}");
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "settled");
    assert_eq!(last["agent"], "lead");
    assert!(
        last["error"]
            .as_str()
            .unwrap()
            .starts_with("budget: the tree's token budget of 20000 was spent"),
        "{last}"
    );
}

#[test]
fn b64_dsh_send_to_a_child_is_metered_and_stopped_when_the_budget_is_spent() {
    const QUICK: &str = "Say hello.";
    let scratch = Scratch::new();
    // The lead starts a child that answers at once, then ends; sent the
    // spinning task later, the child reads a missing file forever.
    let server = ChatServer::start(|request, _| {
        if request.task() == LEAD_TASK {
            if request.step() == 0 {
                return Answer::calls(vec![call(
                    "subagent",
                    json!({"description": "greet", "name": "greeter", "prompt": QUICK, "run_in_background": false}),
                )]);
            }
            return Answer::text("done");
        }
        if request.last() == CHILD_TASK || request.mentions(CHILD_TASK) {
            return Answer::calls(vec![call("read_file", json!({"path": "nothing-here.txt"}))]);
        }
        Answer::text("hello")
    });
    let run = scratch.dsh(
        &["run", "--model", "openai:loopback", LEAD_TASK],
        &server.env(),
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    let send = scratch.dsh(
        &[
            "send",
            "greeter",
            CHILD_TASK,
            "--model",
            "openai:loopback",
            "--max-tokens",
            "20000",
        ],
        &server.env(),
    );
    server.assert_clean();
    let stderr = text(&send.stderr);
    assert_eq!(send.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("budget: the tree's token budget of 20000 was spent ("),
        "{stderr}"
    );
}
