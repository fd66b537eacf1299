//! The real `dsh` process against a loopback OpenAI-compatible server that
//! holds every request to the API's rules (see `support/openai.rs`) and
//! plays a realistic session on a copy of a fixture repository whose test
//! fails: the lead starts two background children, `finder` greps and
//! reads to explain the failure, `fixer` reads the script, edits it and
//! runs the test with `shell`; the lead waits for both notices and
//! summarises. The `--json` stream and the transcripts are snapshotted,
//! the edit is checked on disk, and then `dsh send fixer` and `dsh send
//! lead` continue the tree with the model it recorded (no `--model`),
//! against the same server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use serde_json::json;
use support::openai::{Answer, Board, ChatServer, Request, call};
use support::{Scratch, copy_fixture, json_by_agent, text};

const LEAD_TASK: &str = "The greeter's test fails (`sh test.sh`). Find out why and fix it.";
const FINDER_TASK: &str = "In this repository, find where the greeting is printed and what test.sh expects of it. Report the mismatch in one sentence.";
const FIXER_TASK: &str = "In this repository, greet.sh misspells its greeting and test.sh fails. Fix greet.sh with the smallest edit and run `sh test.sh` to show it passes.";
const FIXER_ANSWER: &str = "Fixed: greet.sh printed \"Helo\"; it now prints \"Hello\" and `sh test.sh` prints \"ok: Hello, dsh!\".";
const FINDER_ANSWER: &str = "greet.sh echoes \"Helo, $1!\" while test.sh expects \"Hello, dsh!\": the greeting is misspelt.";
const FOLLOW_UP: &str = "What exactly did the test print?";
const LEAD_FOLLOW_UP: &str = "Is anything left to do?";

/// The session, as a function of each request: the agent is named by its
/// task (a child's is framed as a message from its parent), its step by
/// the assistant messages so far.
fn script(request: &Request, board: &Board) -> Answer {
    let task = request.task();
    let step = request.step();
    if task == LEAD_TASK {
        lead(request, board, step)
    } else if task.ends_with(FINDER_TASK) {
        finder(request, board, step)
    } else if task.ends_with(FIXER_TASK) {
        fixer(request, board, step)
    } else {
        Answer::text(&format!("SCRIPT: no agent has the task {task:?}"))
    }
}

fn lead(request: &Request, board: &Board, step: usize) -> Answer {
    match step {
        0 => Answer::saying(
            "I'll have one agent explain the failure while another fixes it.",
            vec![
                call(
                    "subagent",
                    json!({"description": "explain the failure", "name": "finder", "prompt": FINDER_TASK}),
                ),
                call(
                    "subagent",
                    json!({"description": "fix the greeter", "name": "fixer", "prompt": FIXER_TASK}),
                ),
            ],
        ),
        1 => {
            // Both started: the fixer may begin.
            board.mark("lead waits");
            Answer::calls(vec![call("wait", json!({"timeout_ms": 120_000}))])
        }
        2 if request.mentions(FIXER_ANSWER) => {
            // The fixer's notice is in: the finder may answer.
            board.mark("lead saw the fixer");
            Answer::saying(
                "The fix is in; waiting for the explanation.",
                vec![call("wait", json!({"timeout_ms": 120_000}))],
            )
        }
        3 if request.mentions(FINDER_ANSWER) => Answer::text(
            "The test failed because greet.sh printed \"Helo\" instead of \"Hello\". The fixer corrected the spelling and `sh test.sh` now passes.",
        ),
        _ if request.last().contains(LEAD_FOLLOW_UP) || request.mentions(LEAD_FOLLOW_UP) => {
            Answer::text("Nothing is left: the test passes and the fix is one word.")
        }
        _ => Answer::text(&format!(
            "SCRIPT: the lead at step {step} did not expect {:?}",
            request.last()
        )),
    }
}

fn finder(request: &Request, board: &Board, step: usize) -> Answer {
    match step {
        0 => Answer::calls(vec![call(
            "grep",
            json!({"pattern": "Hel+o", "globs": ["*.sh"]}),
        )]),
        1 => Answer::calls(vec![call("read_file", json!({"path": "test.sh"}))]),
        2 => {
            // Its grep and read are done: the fixer may edit.
            board.mark("finder searched");
            board.wait_for("lead saw the fixer");
            if request
                .tool_results()
                .iter()
                .any(|r| r.contains("expected 'Hello, dsh!'"))
            {
                Answer::text(FINDER_ANSWER)
            } else {
                Answer::text("SCRIPT: the finder did not read test.sh")
            }
        }
        _ => Answer::text(&format!("SCRIPT: the finder at step {step}")),
    }
}

fn fixer(request: &Request, board: &Board, step: usize) -> Answer {
    match step {
        0 => {
            board.wait_for("lead waits");
            Answer::calls(vec![call("read_file", json!({"path": "greet.sh"}))])
        }
        1 => {
            board.wait_for("finder searched");
            Answer::saying(
                "The greeting is misspelt; fixing it.",
                vec![call(
                    "edit_file",
                    json!({"path": "greet.sh", "old_string": "echo \"Helo, $1!\"", "new_string": "echo \"Hello, $1!\""}),
                )],
            )
        }
        2 => Answer::calls(vec![call(
            "shell",
            json!({"command": "sh test.sh", "timeout_ms": 60_000}),
        )]),
        3 if request.last().contains("ok: Hello, dsh!") => Answer::text(FIXER_ANSWER),
        _ if request.last() == FOLLOW_UP => {
            Answer::text("It printed \"ok: Hello, dsh!\" and exited 0.")
        }
        _ => Answer::text(&format!(
            "SCRIPT: the fixer at step {step} did not expect {:?}",
            request.last()
        )),
    }
}

/// The fixture copied into a scratch, the server, and `dsh run`'s output.
fn fixed_tree() -> (Scratch, ChatServer, std::process::Output) {
    let scratch = Scratch::new();
    copy_fixture("greeter", scratch.dir.path());
    let server = ChatServer::start(script);
    let env = server.env();
    let run = scratch.dsh(
        &[
            "run",
            "--model",
            "openai:loopback",
            "--sandbox",
            "workspace-write",
            "--json",
            LEAD_TASK,
        ],
        &env,
    );
    (scratch, server, run)
}

#[test]
fn a_lead_and_two_children_fix_a_failing_test_against_an_api_that_checks_every_request() {
    let (scratch, server, run) = fixed_tree();
    let env = server.env();
    server.assert_clean();
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(text(&run.stderr), "");
    assert!(
        server.board.has("lead saw the fixer"),
        "{}",
        text(&run.stdout)
    );

    // The edit is on disk, and the test passes outside dsh too.
    let greet = std::fs::read_to_string(scratch.dir.path().join("greet.sh")).unwrap();
    assert!(greet.contains("echo \"Hello, $1!\""), "{greet}");
    let test = std::process::Command::new("sh")
        .arg("test.sh")
        .current_dir(scratch.dir.path())
        .output()
        .unwrap();
    assert!(test.status.success(), "{}", text(&test.stdout));

    // The server's cached prompt tokens reach every agent's usage.
    let lines = support::json_lines(&run.stdout);
    for agent in ["lead", "finder", "fixer"] {
        assert!(
            lines.iter().any(|line| line["type"] == "usage"
                && line["agent"] == agent
                && line["cached_input_tokens"].as_u64() > Some(0)),
            "no cached tokens for {agent}"
        );
        assert!(
            lines.iter().any(|line| line["type"] == "usage"
                && line["agent"] == agent
                && line["reasoning_tokens"].as_u64() > Some(0)),
            "no reasoning tokens for {agent}"
        );
    }
    snapshot!(&scratch, "e2e_run_json", json_by_agent(&run.stdout));
    for name in ["lead", "finder", "fixer"] {
        let show = scratch.dsh(&["show", name], &[]);
        assert!(show.status.success(), "{}", text(&show.stderr));
        snapshot!(&scratch, format!("e2e_show_{name}"), text(&show.stdout));
    }

    // The recorded model continues the tree: no --model, the same server.
    let before = *server.answered.lock().unwrap();
    let send = scratch.dsh(&["send", "--json", "fixer", FOLLOW_UP], &env);
    server.assert_clean();
    assert!(send.status.success(), "{}", text(&send.stderr));
    assert!(*server.answered.lock().unwrap() > before);
    snapshot!(&scratch, "e2e_send_fixer_json", json_by_agent(&send.stdout));

    let lead = scratch.dsh(&["send", "lead", LEAD_FOLLOW_UP], &env);
    server.assert_clean();
    assert!(lead.status.success(), "{}", text(&lead.stderr));
    assert!(
        text(&lead.stdout).contains("Nothing is left"),
        "{}",
        text(&lead.stdout)
    );
    snapshot!(&scratch, "e2e_send_lead", text(&lead.stdout));
    dsh_test_support::replays::assert_dir_replays(&scratch.sessions());
}

/// After a real run, a bad `dsh.toml` (an unknown key, a bad value, an
/// unset key variable) refuses `run` and `send lead` with one line and exit
/// 2 before anything runs: the server hears no request, the session
/// directory is unchanged.
#[test]
fn a_bad_configuration_is_refused_before_the_server_hears_anything() {
    let (scratch, server, run) = fixed_tree();
    assert!(run.status.success(), "{}", text(&run.stderr));
    let provider = format!(
        "[providers.loop]\nbase_url = \"{}\"\nmodel = \"loopback\"\n",
        server.base_url
    );
    let cases = [
        (
            "unknown key",
            format!("model = \"loop\"\nsandboxx = \"full\"\n{provider}"),
        ),
        (
            "bad value",
            format!("model = \"loop\"\nsandbox = \"everything\"\n{provider}"),
        ),
        (
            "unset key variable",
            format!("model = \"loop\"\n{provider}api_key_env = \"DSH_E2E_UNSET_KEY\"\n"),
        ),
    ];
    let received = *server.received.lock().unwrap();
    for (what, body) in cases {
        std::fs::write(scratch.dir.path().join("dsh.toml"), body).unwrap();
        // `send` drives the tree with the model it recorded, so only `run`
        // uses the provider whose key variable is unset.
        let commands: &[&[&str]] = if what == "unset key variable" {
            &[&["run", "go"]]
        } else {
            &[&["run", "go"], &["send", "lead", "go on"]]
        };
        for args in commands {
            let err = scratch.refused(args, &server.env(), 2);
            assert!(err.contains("dsh.toml: "), "{what}: {args:?}: {err}");
        }
    }
    assert_eq!(
        *server.received.lock().unwrap(),
        received,
        "a request reached the server"
    );
}
