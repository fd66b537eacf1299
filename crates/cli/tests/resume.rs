//! A tree remembers the model that built it: `dsh send` to a child and
//! `dsh send lead` (the lead's own conversation, continued with its whole
//! tree) reach that model with no `--model` and no configuration file,
//! and `--model` still wins. The model is a loopback OpenAI-compatible
//! server; the first run names it only in `dsh.toml`, which is then removed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::model::{FakeModel, Reply};
use support::{Scratch, text};

const BOUND: Duration = Duration::from_secs(60);

fn text_reply(text: &str) -> Reply {
    Reply::Text(text.to_owned())
}

#[test]
fn send_and_send_lead_use_the_recorded_model_and_continue_the_conversation() {
    let scratch = Scratch::new();
    let model = FakeModel::start(vec![
        // The run: the lead starts `helper` in the foreground, which
        // answers; the lead summarises.
        Reply::ToolCall {
            name: "subagent".to_owned(),
            arguments: serde_json::json!({
                "description": "look around",
                "prompt": "Say what you see.",
                "name": "helper",
                "run_in_background": false,
            }),
        },
        text_reply("I see a fixture."),
        text_reply("The helper saw a fixture."),
        // `dsh send helper`.
        text_reply("Still a fixture."),
        // `dsh send lead` (the lead may also answer the helper's notice,
        // before `send helper` stops the tree or after `send lead` resumes
        // it: every such turn gets the same answer).
        text_reply("We are done here."),
        text_reply("We are done here."),
        text_reply("We are done here."),
    ]);
    let config = scratch.dir.path().join("dsh.toml");
    std::fs::write(
        &config,
        format!(
            "model = \"local:scripted\"\n[providers.local]\nbase_url = \"{}\"\n",
            model.base_url
        ),
    )
    .unwrap();
    let run = scratch.dsh(&["run", "look around"], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(text(&run.stdout).contains("lead: The helper saw a fixture."));
    for _ in 0..3 {
        model.next_request(BOUND);
    }
    // From now on only the tree knows its model.
    std::fs::remove_file(&config).unwrap();

    let send = scratch.dsh(&["send", "helper", "And now?"], &[]);
    assert!(send.status.success(), "{}", text(&send.stderr));
    assert_eq!(text(&send.stdout), "helper: Still a fixture.\n");
    let request = model.next_request(BOUND);
    assert!(request.contains("\"model\":\"scripted\""), "{request}");
    assert!(request.contains("And now?"), "{request}");
    // The lead may start a turn for the helper's notice before `send`
    // stops the tree: that request is not this test's business.
    while model.requests.try_recv().is_ok() {}

    let lead = scratch.dsh(&["send", "lead", "Anything else?"], &[]);
    let stdout = text(&lead.stdout);
    assert!(lead.status.success(), "{}", text(&lead.stderr));
    assert!(stdout.contains("lead: We are done here."), "{stdout}");
    // The earlier answers are not printed again.
    assert!(!stdout.contains("The helper saw a fixture."), "{stdout}");
    let request = loop {
        let request = model.next_request(BOUND);
        if request.contains("Anything else?") {
            break request;
        }
    };
    // The lead's whole conversation goes with it: its first task and its
    // first answer.
    assert!(request.contains("look around"), "{request}");
    assert!(request.contains("The helper saw a fixture."), "{request}");

    // `--model` wins over the recorded model.
    let send = scratch.dsh(&["send", "helper", "demo?", "--model", "demo"], &[]);
    assert!(send.status.success(), "{}", text(&send.stderr));
    assert!(
        text(&send.stdout) == "helper: Noted: demo?\n",
        "{}",
        text(&send.stdout)
    );
}
