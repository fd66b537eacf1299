//! External (ACP) children as `dsh agents` and `dsh show` present them
//! (field run item 9): the real binary, a loopback OpenAI-compatible
//! server whose lead starts the ACP suite's test-only agent twice in the
//! background, once to answer and once to fail. Both are listed as
//! external leaves (never `unreadable`), and `dsh show` on each prints what
//! is known of it (what its creator heard: the stop reason, the output and
//! the diagnostic) instead of refusing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod support;

use dsh_test_support::skip_or_fail;
use support::model::{FakeModel, Reply};
use support::{Scratch, text};

fn acp_call(name: &str, prompt: &str) -> Reply {
    Reply::ToolCall {
        name: "acp".to_owned(),
        arguments: serde_json::json!({
            "description": format!("the {name} task"),
            "name": name,
            "prompt": prompt,
            "run_in_background": true,
        }),
    }
}

#[test]
fn completed_and_failed_external_children_are_listed_and_shown() {
    let Some(agent) = support::rogue_agent() else {
        skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let mut replies = vec![
        acp_call("helper", "say hello from the helper"),
        acp_call("broken", "say half an answer; error"),
    ];
    replies.extend((0..8).map(|_| Reply::Text("Noted.".to_owned())));
    let model = FakeModel::start(replies);
    let run = support::run_with_rogue(&scratch, &model, &agent);
    assert!(
        run.status.success(),
        "{}{}",
        text(&run.stderr),
        text(&run.stdout)
    );

    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    let listing = text(&agents.stdout);
    assert!(!listing.contains("unreadable"), "{listing}");
    snapshot!(&scratch, "agents", listing);

    for name in ["helper", "broken"] {
        let show = scratch.dsh(&["show", name], &[]);
        assert!(show.status.success(), "{}", text(&show.stderr));
        snapshot!(&scratch, format!("show_{name}"), text(&show.stdout));
    }
}

/// Foreground ACP children (the lead waits for each): the live run's
/// summary lists them, a second `dsh` process lists them as external
/// leaves (`dsh agents`), and `dsh show` prints what their creator's log
/// recorded when they settled: the output, and the diagnostic of the one
/// that failed.
#[test]
fn foreground_external_children_are_listed_and_shown() {
    let Some(agent) = support::rogue_agent() else {
        skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let foreground = |name: &str, prompt: &str| Reply::ToolCall {
        name: "acp".to_owned(),
        arguments: serde_json::json!({
            "description": format!("the {name} task"),
            "name": name,
            "prompt": prompt,
            "run_in_background": false,
        }),
    };
    let mut replies = vec![
        foreground("helper", "say hello from the helper"),
        foreground("broken", "say half an answer; error"),
    ];
    replies.extend((0..8).map(|_| Reply::Text("Noted.".to_owned())));
    let model = FakeModel::start(replies);
    let run = support::run_with_rogue(&scratch, &model, &agent);
    let stdout = text(&run.stdout);
    assert!(run.status.success(), "{}{stdout}", text(&run.stderr));
    let tree = &stdout[stdout.find("\ntree:").unwrap_or(0)..];
    for name in ["helper ", "broken "] {
        assert!(
            tree.lines()
                .any(|line| line.trim_start().starts_with(name) && line.contains(" external ")),
            "{name}not in the run's summary:\n{stdout}"
        );
    }

    let agents = scratch.dsh(&["agents"], &[]);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    snapshot!(&scratch, "foreground_agents", text(&agents.stdout));
    for name in ["helper", "broken"] {
        let show = scratch.dsh(&["show", name], &[]);
        assert!(show.status.success(), "{}", text(&show.stderr));
        snapshot!(
            &scratch,
            format!("foreground_show_{name}"),
            text(&show.stdout)
        );
    }
}
