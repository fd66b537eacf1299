//! The run's log file, in `logs/` beside the session directory: an ACP
//! agent's stderr reaches it at the default level (a real process that
//! writes to stderr and fails), every level reaches it with `-v` (stderr
//! still only warnings), and a
//! clean run at the default level leaves no file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;

use support::model::{FakeModel, Reply};
use support::{Scratch, text};

/// The log files of the scratch.
fn logs(scratch: &Scratch) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(scratch.dir.path().join("logs")) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.map(|entry| entry.unwrap().path()).collect();
    files.sort();
    files
}

#[test]
fn an_acp_agents_stderr_reaches_the_log_file_and_a_clean_run_leaves_none() {
    let scratch = Scratch::new();
    scratch.demo();
    assert_eq!(logs(&scratch), Vec::<PathBuf>::new());

    let model = FakeModel::start(
        std::iter::once(Reply::ToolCall {
            name: "acp".to_owned(),
            arguments: serde_json::json!({
                "description": "fail loudly",
                "prompt": "anything",
                "run_in_background": false,
            }),
        })
        .chain((0..4).map(|_| Reply::Text("Noted.".to_owned())))
        .collect(),
    );
    let env = [
        ("OPENAI_API_KEY", "sk-test"),
        ("OPENAI_BASE_URL", model.base_url.as_str()),
    ];
    let run = scratch.dsh(
        &[
            "run",
            "--model",
            "openai:fake",
            "--acp-command",
            "/bin/sh",
            "--acp-arg",
            "-c",
            "--acp-arg",
            "echo agent-said-this-on-stderr >&2; exit 3",
            "delegate",
        ],
        &env,
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    let files = logs(&scratch);
    assert_eq!(files.len(), 1, "{files:?}");
    let log = std::fs::read_to_string(&files[0]).unwrap();
    assert!(log.contains("agent-said-this-on-stderr"), "{log}");
    assert!(!log.contains("sk-test"), "{log}");
}

/// Finding 7 of the field run: `CODEX_HOME` could never reach the agent.
#[test]
fn a_variable_passed_with_acp_env_reaches_the_agent_and_others_do_not() {
    let scratch = Scratch::new();
    let model = FakeModel::start(
        std::iter::once(Reply::ToolCall {
            name: "acp".to_owned(),
            arguments: serde_json::json!({
                "description": "show the environment",
                "prompt": "anything",
                "run_in_background": false,
            }),
        })
        .chain((0..4).map(|_| Reply::Text("Noted.".to_owned())))
        .collect(),
    );
    let env = [
        ("OPENAI_API_KEY", "sk-test"),
        ("OPENAI_BASE_URL", model.base_url.as_str()),
        ("CODEX_HOME", "/codex/home"),
        ("DSH_TEST_SECRET", "not-for-the-agent"),
    ];
    let run = scratch.dsh(
        &[
            "run",
            "--model",
            "openai:fake",
            "--acp-command",
            "/bin/sh",
            "--acp-arg",
            "-c",
            "--acp-arg",
            "echo \"home=$CODEX_HOME secret=$DSH_TEST_SECRET\" >&2; exit 3",
            "--acp-env",
            "CODEX_HOME",
            "delegate",
        ],
        &env,
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    let files = logs(&scratch);
    assert_eq!(files.len(), 1, "{files:?}");
    let log = std::fs::read_to_string(&files[0]).unwrap();
    assert!(log.contains("home=/codex/home secret="), "{log}");
    assert!(!log.contains("not-for-the-agent"), "{log}");
}

#[test]
fn with_v_every_level_reaches_a_log_file_of_its_own() {
    let scratch = Scratch::new();
    let run = scratch.dsh(&["-v", "run"], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let files = logs(&scratch);
    assert_eq!(files.len(), 1, "{files:?}");
    let log = std::fs::read_to_string(&files[0]).unwrap();
    // Below the default (warnings) level: the run's own progress lines.
    assert!(
        log.lines()
            .any(|line| line.contains(" INFO ") && line.contains("run started")),
        "{log}"
    );
    assert!(log.lines().any(|line| line.contains("run ended")), "{log}");
    // Stderr at `-v` keeps to warnings and errors.
    assert_eq!(text(&run.stderr), "");
    // A second run writes its own file.
    let run = scratch.dsh(&["-v", "run"], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(logs(&scratch).len(), 2);
}
