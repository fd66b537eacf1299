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
    let env = [
        ("OPENAI_API_KEY", "sk-test"),
        ("OPENAI_BASE_URL", model.base_url.as_str()),
    ];
    let mut args = vec!["run", "--model", "openai:fake", "work"];
    args.extend_from_slice(extra);
    let output = scratch.dsh(&args, &env);
    assert!(output.status.success(), "{}", text(&output.stderr));
    (0..count).map(|_| model.next_request(BOUND)).collect()
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

    let write = || {
        vec![
            call(
                "write_file",
                serde_json::json!({ "path": "out.txt", "content": "written\n" }),
            ),
            Reply::Text("Done.".to_owned()),
        ]
    };
    let requests = run(&scratch, write(), &[]);
    assert!(!scratch.dir.path().join("out.txt").exists());
    assert!(requests[1].contains("read-only"), "{}", requests[1]);

    run(&scratch, write(), &["--sandbox", "workspace-write"]);
    assert_eq!(
        std::fs::read_to_string(scratch.dir.path().join("out.txt")).unwrap(),
        "written\n"
    );
}
