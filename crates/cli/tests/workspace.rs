//! The workspace tools in a real `dsh run` against a loopback model: the
//! lead reads a real file of its working directory (the next request holds
//! its text), a write under the default `read-only` level is refused with
//! a sentence the model sees and leaves the disk alone, and the same write
//! under `--sandbox workspace-write` lands on disk.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::model::{FakeModel, Reply};
use support::{Scratch, text};

const BOUND: Duration = Duration::from_secs(60);

fn call(name: &str, arguments: serde_json::Value) -> Reply {
    Reply::ToolCall {
        name: name.to_owned(),
        arguments,
    }
}

/// Run the lead with `replies` and `extra` flags; the requests' bodies.
fn run(scratch: &Scratch, replies: Vec<Reply>, extra: &[&str]) -> Vec<String> {
    let count = replies.len();
    let model = FakeModel::start(replies);
    let env = model.env();
    let mut args = vec!["run", "--model", "openai:fake", "work"];
    args.extend_from_slice(extra);
    let output = scratch.dsh(&args, &env);
    assert!(output.status.success(), "{}", text(&output.stderr));
    (0..count).map(|_| model.next_request(BOUND)).collect()
}

/// The lead writes `out.txt`, then answers.
fn write() -> Vec<Reply> {
    vec![
        call(
            "write_file",
            serde_json::json!({ "path": "out.txt", "content": "written\n" }),
        ),
        Reply::Text("Done.".to_owned()),
    ]
}

#[test]
fn the_lead_reads_real_files_and_writes_only_under_a_level_that_allows_it() {
    let scratch = Scratch::new();
    std::fs::write(
        scratch.dir.path().join("notes.txt"),
        "the fixture says hello\n",
    )
    .unwrap();
    let requests = run(
        &scratch,
        vec![
            call("read_file", serde_json::json!({ "path": "notes.txt" })),
            Reply::Text("Read it.".to_owned()),
        ],
        &[],
    );
    assert!(
        requests[1].contains("the fixture says hello"),
        "{}",
        requests[1]
    );

    let requests = run(&scratch, write(), &[]);
    assert!(!scratch.dir.path().join("out.txt").exists());
    assert!(requests[1].contains("read-only"), "{}", requests[1]);

    run(&scratch, write(), &["--sandbox", "workspace-write"]);
    assert_eq!(
        std::fs::read_to_string(scratch.dir.path().join("out.txt")).unwrap(),
        "written\n"
    );
}

/// `--ask` puts an action above the level to the person (stdin, stderr):
/// one question naming the agent, the tool and the exact path; `y` lets it
/// happen, anything else (or the end of input) refuses it with a sentence
/// the model reads. `--no-ask`, or no terminal without `--ask`, asks
/// nothing and refuses.
#[test]
fn ask_puts_an_action_above_the_level_to_the_person_and_no_ask_refuses() {
    let scratch = Scratch::new();
    let out = scratch.dir.path().join("out.txt");
    let run_with = |extra: &[&str], input: &str| {
        let model = FakeModel::start(write());
        let env = model.env();
        let mut args = vec!["run", "--model", "openai:fake", "work"];
        args.extend_from_slice(extra);
        let output = scratch.dsh_with_input(&args, &env, input);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let requests: Vec<String> = (0..2).map(|_| model.next_request(BOUND)).collect();
        (text(&output.stderr), requests)
    };

    let (stderr, requests) = run_with(&["--ask"], "n\n");
    assert_eq!(
        stderr,
        "dsh: lead wants to use write_file on `out.txt` (needs workspace-write; the level is read-only). Allow? [y/N] "
    );
    assert!(!out.exists());
    assert!(requests[1].contains("declined"), "{}", requests[1]);

    let (stderr, _) = run_with(&["--ask"], "");
    assert!(
        stderr.ends_with("no answer (end of input): no\n"),
        "{stderr}"
    );
    assert!(!out.exists());

    let (stderr, _) = run_with(&["--ask"], "y\n");
    assert!(stderr.contains("Allow? [y/N] "), "{stderr}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "written\n");
    std::fs::remove_file(&out).unwrap();

    // Nothing asks: stdin is a pipe and there is no --ask, or --no-ask.
    for extra in [&[][..], &["--no-ask"]] {
        let (stderr, requests) = run_with(extra, "y\n");
        assert_eq!(stderr, "", "{extra:?}");
        assert!(!out.exists(), "{extra:?}");
        assert!(requests[1].contains("read-only"), "{}", requests[1]);
    }
    let refused = scratch.refused(&["run", "--ask", "--no-ask"], &[], 2);
    assert!(refused.contains("--no-ask"), "{refused}");
}
