//! `dsh acp` under the TypeScript SDK's client (the pinned
//! `@agentclientprotocol/sdk` the peers' install script puts in
//! `crates/subagent-acp/peers`): the scripted session of
//! `acp_client/session.mjs` against a loopback model. Its first turn starts
//! two foreground children, each asking to run a shell command above the
//! read-only level (the first approved, the second rejected); its second
//! turn is cancelled while its permission request is up; a new `dsh acp`
//! then loads the session and replays it. What the client received is
//! snapshot-tested, one line per update, with session ids numbered in
//! order of appearance and the scratch path redacted.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dsh_test_support::skip_or_fail;
use serde_json::{Value, json};
use support::model::{FakeModel, Reply};
use support::{BOUND, Scratch, text, wait_bounded};

/// The SDK's entry point, when the peers are installed.
fn sdk() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../subagent-acp/peers/node_modules/@agentclientprotocol/sdk/dist/acp.js");
    path.is_file().then_some(path)
}

fn node() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join("node"))
        .find(|path| path.is_file())
}

fn call(name: &str, arguments: Value) -> Reply {
    Reply::ToolCall {
        name: name.to_owned(),
        arguments,
    }
}

fn helper(name: &str, prompt: &str) -> Reply {
    call(
        "subagent",
        json!({
            "description": format!("{name}'s command"),
            "name": name,
            "prompt": prompt,
            "run_in_background": false,
        }),
    )
}

/// One line for a received record.
fn line(record: &Value, ids: &mut HashMap<String, String>) -> String {
    let mut id = |value: &Value| -> String {
        let Some(raw) = value.as_str() else {
            return "-".to_owned();
        };
        let next = format!("S{}", ids.len() + 1);
        ids.entry(raw.to_owned()).or_insert(next).clone()
    };
    let phase = record["phase"].as_str().unwrap_or("?");
    let short = |value: &Value| {
        // The first line: a shell result's later lines name the sandbox.
        let text = value
            .as_str()
            .unwrap_or_default()
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        if text.chars().count() > 70 {
            format!("{}…", text.chars().take(69).collect::<String>())
        } else {
            text
        }
    };
    match record["kind"].as_str().unwrap_or("?") {
        "update" => {
            let update = &record["update"];
            let session = id(&record["sessionId"]);
            let kind = update["sessionUpdate"].as_str().unwrap_or("?");
            let detail = match kind {
                "user_message_chunk" | "agent_message_chunk" => {
                    format!("{:?}", short(&update["content"]["text"]))
                }
                "tool_call" => format!(
                    "{} {} {:?}",
                    short(&update["toolCallId"]),
                    short(&update["status"]),
                    short(&update["title"])
                ),
                "tool_call_update" => {
                    let content: Vec<String> = update["content"]
                        .as_array()
                        .map(|blocks| {
                            blocks
                                .iter()
                                .map(|block| match block["type"].as_str() {
                                    Some("session") => {
                                        format!("session {}", id(&block["sessionId"]))
                                    }
                                    _ => format!("{:?}", short(&block["content"]["text"])),
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    format!(
                        "{} {} [{}]",
                        short(&update["toolCallId"]),
                        update["status"].as_str().unwrap_or("-"),
                        content.join(", ")
                    )
                }
                "subagent_update" => format!(
                    "child {} {:?} parent {} call {}",
                    id(&update["sessionId"]),
                    short(&update["title"]),
                    id(&update["_meta"]["dsh"]["parentSessionId"]),
                    short(&update["_meta"]["dsh"]["toolCallId"])
                ),
                _ => String::new(),
            };
            format!("{phase} {session} {kind} {detail}")
                .trim_end()
                .to_owned()
        }
        "permission" => format!(
            "{phase} {} permission {} {:?} agent {} options {} -> {}",
            id(&record["sessionId"]),
            short(&record["toolCall"]["toolCallId"]),
            short(&record["toolCall"]["title"]),
            id(&record["toolCall"]["_meta"]["dsh"]["agentSessionId"]),
            record["options"],
            short(&record["answer"])
        ),
        "session" => format!("{phase} session {}", id(&record["sessionId"])),
        "stop" => format!("{phase} stop {}", short(&record["stopReason"])),
        "exit" => format!("{phase} exit {}", record["code"]),
        "initialized" => format!("{phase} initialized loadSession={}", record["loadSession"]),
        other => format!("{phase} {other}"),
    }
}

#[test]
fn the_typescript_sdk_client_sees_two_child_sessions_answers_approvals_cancels_and_loads() {
    let (Some(sdk), Some(node)) = (sdk(), node()) else {
        skip_or_fail(
            "no node or no @agentclientprotocol/sdk (crates/subagent-acp/peers/install.sh)",
        );
        return;
    };
    let scratch = Scratch::new();
    let model = FakeModel::start(vec![
        helper("alpha", "Run the first command."),
        call("shell", json!({ "command": "echo approved" })),
        Reply::Text("alpha ran it.".to_owned()),
        helper("beta", "Run the second command."),
        call("shell", json!({ "command": "echo rejected" })),
        Reply::Text("beta was refused.".to_owned()),
        Reply::Text("Both helpers are done.".to_owned()),
        call("shell", json!({ "command": "echo cancelled" })),
    ]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp_client/session.mjs");
    let mut command = Command::new(node);
    command
        .arg(script)
        .arg(&sdk)
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .arg(scratch.sessions())
        .arg(scratch.dir.path())
        .current_dir(scratch.dir.path())
        .env_remove("DSH_MODEL")
        .env("XDG_CONFIG_HOME", scratch.dir.path().join("xdg"))
        .env("HOME", scratch.dir.path())
        .envs(model.env())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = wait_bounded(command.spawn().unwrap(), BOUND, "the TypeScript client");
    let stdout = text(&output.stdout);
    assert!(
        output.status.success(),
        "{}\n{stdout}",
        text(&output.stderr)
    );
    let mut ids = HashMap::new();
    let lines: Vec<String> = stdout
        .lines()
        .map(|raw| serde_json::from_str::<Value>(raw).unwrap())
        .map(|record| line(&record, &mut ids))
        .collect();
    let scratch_path = scratch.dir.path().display().to_string();
    let received = lines.join("\n").replace(&scratch_path, "[scratch]");
    insta::assert_snapshot!(received);
}
