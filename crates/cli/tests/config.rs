//! `dsh.toml` read by the real `dsh` process: the working directory's file
//! wins over the user's configuration directory, a flag wins over both, the
//! file's model, provider and limits reach the run, and every bad file
//! (unknown key, bad value, unset key variable) is refused with one line
//! naming the file and the key, exit 2, and nothing written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use std::time::Duration;

use support::model::{FakeModel, Reply};
use support::{Scratch, text};

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_bad_configuration_is_one_line_naming_the_file_and_key_and_nothing_runs() {
    let scratch = Scratch::new();
    let file = scratch.dir.path().join("dsh.toml");
    let cases = [
        ("unknown_key", "modle = \"demo\"\n"),
        ("bad_value", "[limits]\nmax_depth = \"deep\"\n"),
        ("zero_limit", "[limits]\nmax_turn_steps = 0\n"),
        ("not_toml", "model = \"demo\n"),
        (
            "unset_key_variable",
            "model = \"local:m\"\n[providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"DSH_TEST_UNSET_KEY\"\n",
        ),
    ];
    let mut lines = Vec::new();
    for (name, body) in cases {
        write(&file, body);
        // `send` checks its session directory before it reaches the model.
        let commands: &[&[&str]] = if name == "unset_key_variable" {
            &[&["run"]]
        } else {
            &[&["run"], &["send", "researcher", "hi"]]
        };
        for args in commands {
            let err = scratch.refused(args, &[], 2);
            assert!(
                err.starts_with(
                    "dsh: [scratch]/dsh.toml: "
                        .replace("[scratch]", &scratch.dir.path().display().to_string())
                        .as_str()
                ),
                "{err}"
            );
            if args[0] == "run" {
                lines.push(format!("{name}: {err}"));
            }
        }
        assert!(!scratch.sessions().exists(), "{name}: sessions written");
    }
    snapshot!(&scratch, "bad_configuration", &lines.concat());
    // An unset key variable named by a flag is refused too, naming it.
    std::fs::remove_file(&file).unwrap();
    let err = scratch.refused(
        &[
            "run",
            "--model",
            "openai:m",
            "--api-key-env",
            "DSH_TEST_UNSET_KEY",
        ],
        &[],
        2,
    );
    assert!(err.contains("`DSH_TEST_UNSET_KEY` is not set"), "{err}");
}

#[test]
fn the_working_directory_wins_over_the_user_directory_and_a_flag_over_both() {
    let scratch = Scratch::new();
    // Nothing answers on port 9: the model named is the one reached.
    let user = scratch.dir.path().join("xdg/dsh/dsh.toml");
    write(
        &user,
        "model = \"user:m\"\n[providers.user]\nbase_url = \"http://127.0.0.1:9/v1\"\n",
    );
    let err = scratch.refused(&["run"], &[], 5);
    assert!(err.contains("http://127.0.0.1:9"), "{err}");

    let local = scratch.dir.path().join("dsh.toml");
    write(&local, "model = \"demo\"\n");
    let run = scratch.dsh(&["run"], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(
        text(&run.stdout)
            .lines()
            .next()
            .unwrap()
            .ends_with(&format!("; config {}", local.display())),
        "{}",
        text(&run.stdout)
    );

    // `--config` names the file; `--model` wins over its `model`.
    let err = scratch.refused(&["run", "--config", user.to_str().unwrap()], &[], 5);
    assert!(err.contains("http://127.0.0.1:9"), "{err}");
    let run = scratch.dsh(
        &["run", "--config", user.to_str().unwrap(), "--model", "demo"],
        &[],
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
    // A `--config` file that does not exist is named.
    let err = scratch.refused(&["run", "--config", "nowhere.toml"], &[], 2);
    assert!(
        err.starts_with("dsh: nowhere.toml: cannot read it:"),
        "{err}"
    );
}

#[test]
fn the_files_provider_and_step_limit_reach_the_run() {
    let scratch = Scratch::new();
    // A model that calls a tool at every step: only the step limit ends the turn.
    let replies = (0..6)
        .map(|_| Reply::ToolCall {
            name: "list_agents".to_owned(),
            arguments: serde_json::json!({}),
        })
        .collect();
    let model = FakeModel::start(replies);
    write(
        &scratch.dir.path().join("dsh.toml"),
        &format!(
            "model = \"local\"\n[providers.local]\nbase_url = \"{}\"\nmodel = \"scripted\"\n[limits]\nmax_turn_steps = 2\n[prices.scripted]\ninput = 1.0\noutput = 2.0\n",
            model.base_url
        ),
    );
    let run = scratch.dsh(&["run", "list the agents"], &[]);
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("step"), "{stderr}");
    assert!(
        text(&run.stdout).starts_with("dsh: model local:scripted;"),
        "{}",
        text(&run.stdout)
    );
    // Two steps, two requests, then no third.
    let first = model.next_request(Duration::from_secs(30));
    assert!(first.contains("\"model\":\"scripted\""), "{first}");
    model.next_request(Duration::from_secs(30));
    assert!(
        model.requests.try_recv().is_err(),
        "a third step was requested"
    );

    // `--max-turn-steps` wins over the file: one step.
    let model = FakeModel::start(vec![Reply::ToolCall {
        name: "list_agents".to_owned(),
        arguments: serde_json::json!({}),
    }]);
    let run = scratch.dsh(
        &[
            "run",
            "list the agents",
            "--base-url",
            &model.base_url,
            "--max-turn-steps",
            "1",
        ],
        &[],
    );
    assert_eq!(run.status.code(), Some(1), "{}", text(&run.stderr));
    model.next_request(Duration::from_secs(30));
    assert!(
        model.requests.try_recv().is_err(),
        "a second step was requested"
    );
}
