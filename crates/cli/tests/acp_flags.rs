//! `dsh send` and `dsh resume` take the same `--acp-*` flags as `dsh run`:
//! a continuable ACP child made by an agent the flags configured (no
//! dsh.toml) is continued by `dsh send` with those flags, and refused,
//! naming the agent, without them; `dsh resume` runs with them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_test_support::skip_or_fail;
use support::model::{FakeModel, Reply};
use support::{Scratch, text};

#[test]
fn send_and_resume_take_the_acp_flags_of_run() {
    let Some(agent) = support::rogue_agent() else {
        skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let sessions = scratch.dir.path().join("acp-sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let sessions = sessions.display().to_string();
    let mut acp = support::acp_flags(&agent);
    acp.extend(["--acp-arg", "--sessions", "--acp-arg", sessions.as_str()]);
    let mut replies = vec![Reply::ToolCall {
        name: "acp".to_owned(),
        arguments: serde_json::json!({
            "description": "say hello",
            "name": "helper",
            "prompt": "say hello from the helper",
            "run_in_background": true,
        }),
    }];
    replies.extend((0..8).map(|_| Reply::Text("Noted.".to_owned())));
    let model = FakeModel::start(replies);
    let env = support::fake_env(&model);
    fn with<'a>(command: &[&'a str], acp: &[&'a str]) -> Vec<&'a str> {
        let mut args = command.to_vec();
        args.extend(acp);
        args
    }
    let run = scratch.dsh(&with(&["run", "--model", "openai:fake", "go"], &acp), &env);
    assert!(
        run.status.success(),
        "{}{}",
        text(&run.stderr),
        text(&run.stdout)
    );

    // Without the flags nothing configures the agent that made it.
    let err = scratch.refused_with(&["send", "helper", "recall"], &env, &[1]);
    assert!(
        err.contains("`helper` was made by the ACP agent `acp`, which is not configured here"),
        "{err}"
    );
    let send = scratch.dsh(&with(&["send", "helper", "recall"], &acp), &env);
    let stdout = text(&send.stdout);
    assert!(send.status.success(), "{}{stdout}", text(&send.stderr));
    let reply = stdout
        .lines()
        .find(|line| line.starts_with("helper: "))
        .unwrap_or_else(|| panic!("no reply from the helper:\n{stdout}"));
    assert!(
        reply.contains("recalled: ") && reply.contains("hello from the helper"),
        "{reply}"
    );

    let resume = scratch.dsh(&with(&["resume"], &acp), &env);
    assert!(resume.status.success(), "{}", text(&resume.stderr));
    // A flag that needs an agent is refused without one, as `run` does.
    let err = scratch.refused(&["resume", "--acp-arg", "x"], &env, 2);
    assert!(
        err.contains("--acp-arg: no ACP agent is configured"),
        "{err}"
    );
}
