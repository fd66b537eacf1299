//! `dsh acp` driven by dsh's own ACP provider: a tree inside a tree. The
//! outer `dsh run` (its lead answered by a loopback model) starts the
//! `acp` tool with `dsh acp` as the agent program; the inner dsh builds a
//! whole tree of its own (the offline demo: a lead and two children) in
//! its own session directory and answers with its lead's summary, which
//! the outer lead receives as the child's result. `dsh send` continues
//! the inner tree through `session/load` (dsh advertises it, so the child
//! is continuable). A signal to the outer run while the inner tree works
//! stops both and leaves no process behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use rustix::process::{Pid, Signal, kill_process};
use support::model::{FakeModel, Reply};
use support::{BOUND, Scratch, processes, text, wait_bounded, wait_for};

/// The `--acp-*` flags that make `dsh acp --dir INNER EXTRA...` the ACP agent.
fn inner_agent(inner: &Path, extra: &[&str]) -> Vec<String> {
    let mut flags = vec![
        "--acp-command".to_owned(),
        env!("CARGO_BIN_EXE_dsh").to_owned(),
    ];
    for arg in ["acp", "--dir", inner.to_str().unwrap()]
        .into_iter()
        .chain(extra.iter().copied())
    {
        flags.extend(["--acp-arg".to_owned(), arg.to_owned()]);
    }
    flags
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The outer lead's call of `dsh acp` as the child `inner`.
fn delegate() -> Reply {
    Reply::ToolCall {
        name: "acp".to_owned(),
        arguments: serde_json::json!({
            "description": "inner tree",
            "name": "inner",
            "prompt": "Report on this workspace.",
        }),
    }
}

/// `dsh ARGS --dir INNER` against the inner tree's directory.
fn inner_dsh(scratch: &Scratch, inner: &Path, args: &[&str]) -> std::process::Output {
    let mut command = scratch.bare(args, &[]);
    command.arg("--dir").arg(inner);
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_bounded(child, BOUND, &format!("dsh {args:?}"))
}

#[test]
fn dsh_acp_serves_a_whole_tree_to_dshs_own_acp_provider_and_continues_it_through_load() {
    let scratch = Scratch::new();
    std::fs::write(
        scratch.dir.path().join("README.md"),
        "# Notes\n\nA small workspace.\n",
    )
    .unwrap();
    let inner = scratch.dir.path().join("inner");
    let mut replies = vec![delegate()];
    replies.extend((0..6).map(|_| Reply::Text("Noted.".to_owned())));
    let model = FakeModel::start(replies);
    let flags = inner_agent(&inner, &[]);
    let mut args = vec!["run", "--model", "openai:fake", "--json"];
    args.extend(strs(&flags));
    args.push("delegate");
    let run = scratch.dsh(&args, &model.env());
    let stdout = text(&run.stdout);
    assert!(run.status.success(), "{}{stdout}", text(&run.stderr));

    // Start and settlement: the outer run saw the child start once and
    // settle `completed`, and its lead heard the inner lead's words.
    let events = support::json_lines(&run.stdout);
    let of_inner = |kind: &str| {
        events
            .iter()
            .filter(|event| event["type"] == kind && event["agent"] == "inner")
            .count()
    };
    assert_eq!(of_inner("agent_started"), 1, "{stdout}");
    assert_eq!(of_inner("settled"), 1, "{stdout}");
    assert!(
        events.iter().any(|event| event["type"] == "settled"
            && event["agent"] == "inner"
            && event["stop_reason"] == "completed"),
        "{stdout}"
    );
    assert!(
        events.iter().any(|event| event["type"] == "notice"
            && event["text"]
                .as_str()
                .is_some_and(|text| text.contains("a fresh researcher searches"))),
        "{stdout}"
    );

    // The result: the outer lead heard the inner lead's summary, which
    // quotes both inner children.
    let show = scratch.dsh(&["show", "inner"], &[]);
    assert!(show.status.success(), "{}", text(&show.stderr));
    let shown = text(&show.stdout);
    assert!(shown.contains("Summary: the researcher reports"), "{shown}");

    // The inner tree is a real dsh tree of its own: a lead and both
    // children, in the inner directory.
    let agents = inner_dsh(&scratch, &inner, &["agents"]);
    let listing = text(&agents.stdout);
    assert!(agents.status.success(), "{}", text(&agents.stderr));
    for child in ["researcher", "reviewer"] {
        assert!(listing.contains(child), "{listing}");
    }

    // Continuation: the external child takes a message as a follow-up
    // run, which loads the inner session again and prompts its lead.
    let mut send = vec!["send", "inner", "And the headings?"];
    send.extend(strs(&flags));
    let sent = scratch.dsh(&send, &model.env());
    assert!(
        sent.status.success(),
        "{}{}",
        text(&sent.stderr),
        text(&sent.stdout)
    );
    assert!(
        text(&sent.stdout).starts_with("inner: "),
        "{}",
        text(&sent.stdout)
    );
    let lead = inner_dsh(&scratch, &inner, &["show", "lead"]);
    assert!(
        text(&lead.stdout).contains("And the headings?"),
        "{}",
        text(&lead.stdout)
    );
    assert_eq!(
        text(&inner_dsh(&scratch, &inner, &["agents"]).stdout)
            .matches("tree s-")
            .count(),
        1,
        "the load made a second tree"
    );
}

#[test]
fn a_signal_to_the_outer_run_stops_the_inner_tree_and_leaves_no_process() {
    let scratch = Scratch::new();
    let inner = scratch.dir.path().join("inner");
    let outer = FakeModel::start(vec![delegate()]);
    // The inner lead waits for its model for ever.
    let hanging = FakeModel::start(vec![Reply::Hang]);
    let flags = inner_agent(
        &inner,
        &["--model", "openai:fake", "--base-url", &hanging.base_url],
    );
    let mut args = vec![
        "run",
        "--model",
        "openai:fake",
        "--acp-env",
        "OPENAI_API_KEY",
    ];
    args.extend(strs(&flags));
    args.push("delegate");
    let child = scratch.spawn(&args, &outer.env());
    let dsh = child.id();
    // The inner lead asked its model: the inner tree is live.
    hanging.next_request(BOUND);
    let needle = inner.to_str().unwrap().to_owned();
    assert!(!processes(&needle, dsh).is_empty());
    let pid = Pid::from_raw(i32::try_from(dsh).unwrap()).unwrap();
    kill_process(pid, Signal::TERM).unwrap();
    let output = wait_bounded(child, BOUND, "dsh run after SIGTERM");
    assert_eq!(output.status.code(), Some(143), "{}", text(&output.stderr));
    wait_for("every inner process is gone", || {
        processes(&needle, dsh).is_empty()
    });
    // What the inner tree wrote stays: its lead's log and its prompt.
    let shown = inner_dsh(&scratch, &inner, &["show", "lead"]);
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    assert!(text(&shown.stdout).contains("Report on this workspace."));
}

/// `dsh acp` spoken to line by line.
struct Raw {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<serde_json::Value>,
    /// The `session/update` notifications seen so far.
    updates: Vec<serde_json::Value>,
}

impl Raw {
    fn start(scratch: &Scratch, model: &FakeModel) -> Self {
        Self::with(scratch, model, &[])
    }

    /// `dsh acp --model openai:fake EXTRA...`.
    fn with(scratch: &Scratch, model: &FakeModel, extra: &[&str]) -> Self {
        let mut args = vec!["acp", "--model", "openai:fake"];
        args.extend(extra);
        let mut command = scratch.command(&args, &model.env());
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // Every line on stdout must be a protocol frame.
                let frame: serde_json::Value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({ "not_a_frame": line }));
                if tx.send(frame).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
            updates: Vec::new(),
        }
    }

    fn send(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, id: u64, method: &str, params: serde_json::Value) {
        let frame =
            serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.send(&frame.to_string());
    }

    /// `initialize` (request 1), then `session/new` at `cwd` without MCP
    /// servers (request 2): its response.
    fn open(&mut self, cwd: &Path) -> serde_json::Value {
        self.request(1, "initialize", serde_json::json!({ "protocolVersion": 1 }));
        self.response(1.into());
        self.request(
            2,
            "session/new",
            serde_json::json!({ "cwd": cwd, "mcpServers": [] }),
        );
        self.response(2.into())
    }

    /// The response to request `id` (updates on the way are checked to be
    /// frames and passed over; a permission request is rejected).
    fn response(&mut self, id: serde_json::Value) -> serde_json::Value {
        self.answering(id, |_| "reject")
    }

    /// The response to request `id`, each permission request on the way
    /// answered with the option `answer` picks.
    fn answering(
        &mut self,
        id: serde_json::Value,
        mut answer: impl FnMut(&serde_json::Value) -> &'static str,
    ) -> serde_json::Value {
        loop {
            let frame = self
                .lines
                .recv_timeout(BOUND)
                .unwrap_or_else(|_| panic!("no response to {id} within {BOUND:?}"));
            assert!(frame.get("not_a_frame").is_none(), "{frame}");
            if frame["method"] == "session/request_permission" {
                let option = answer(&frame);
                let reply = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": frame["id"],
                    "result": { "outcome": { "outcome": "selected", "optionId": option } },
                });
                self.send(&reply.to_string());
            } else if frame.get("method").is_none() && frame["id"] == id {
                return frame;
            } else if frame["method"] == "session/update" {
                self.updates.push(frame["params"].clone());
            }
        }
    }
}

#[test]
fn bad_frames_unknown_sessions_a_second_prompt_and_a_closed_stdin_get_the_protocols_answers() {
    let scratch = Scratch::new();
    let model = FakeModel::start(vec![Reply::Hang]);
    let mut raw = Raw::start(&scratch, &model);
    raw.send("this is not JSON");
    let parse = raw.response(serde_json::Value::Null);
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    raw.request(1, "initialize", serde_json::json!({ "protocolVersion": 1 }));
    let init = raw.response(1.into());
    assert_eq!(
        init["result"]["agentCapabilities"]["loadSession"], true,
        "{init}"
    );
    let prompt = |session: &str, text: &str| serde_json::json!({ "sessionId": session, "prompt": [{ "type": "text", "text": text }] });
    raw.request(
        2,
        "session/prompt",
        prompt("s-0123456789abcdef0123456789abcdef", "hi"),
    );
    let unknown = raw.response(2.into());
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    raw.request(
        3,
        "session/load",
        serde_json::json!({ "sessionId": "s-0123456789abcdef0123456789abcdef", "cwd": scratch.dir.path(), "mcpServers": [] }),
    );
    assert_eq!(raw.response(3.into())["error"]["code"], -32602);
    raw.request(
        4,
        "session/new",
        serde_json::json!({ "cwd": scratch.dir.path(), "mcpServers": [] }),
    );
    let created = raw.response(4.into());
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    raw.request(5, "session/prompt", prompt(&session, "Keep this message."));
    // The lead is waiting for its model: a turn runs.
    model.next_request(BOUND);
    raw.request(6, "session/prompt", prompt(&session, "And this?"));
    let busy = raw.response(6.into());
    assert_eq!(busy["error"]["code"], -32600, "{busy}");
    // The client goes away mid-turn: the tree stops, the turn ends
    // cancelled, and dsh exits cleanly.
    drop(raw.stdin.take());
    let ended = raw.response(5.into());
    assert_eq!(ended["result"]["stopReason"], "cancelled", "{ended}");
    let output = wait_bounded(raw.child, BOUND, "dsh acp after its stdin closed");
    assert!(output.status.success(), "{}", text(&output.stderr));
    // What was written stays: the prompt the turn took is in the lead's log.
    let shown = scratch.dsh(&["show", "lead"], &[]);
    assert!(
        text(&shown.stdout).contains("Keep this message."),
        "{}",
        text(&shown.stdout)
    );
    assert!(!text(&shown.stdout).contains("And this?"));
}

#[test]
fn an_always_answer_covers_that_agent_for_the_rest_of_the_session() {
    let scratch = Scratch::new();
    let shell = |command: &str| Reply::ToolCall {
        name: "shell".to_owned(),
        arguments: serde_json::json!({ "command": command }),
    };
    let model = FakeModel::start(vec![
        shell("echo one"),
        shell("echo two"),
        Reply::Text("Both ran.".to_owned()),
    ]);
    let mut raw = Raw::start(&scratch, &model);
    let created = raw.open(scratch.dir.path());
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    raw.request(
        3,
        "session/prompt",
        serde_json::json!({ "sessionId": session, "prompt": [{ "type": "text", "text": "Run both." }] }),
    );
    let mut asked = Vec::new();
    let ended = raw.answering(3.into(), |frame| {
        asked.push(frame["params"]["toolCall"]["title"].clone());
        "always"
    });
    assert_eq!(ended["result"]["stopReason"], "end_turn", "{ended}");
    // Asked once, naming the lead, the tool and the exact command; the
    // second command of the same agent ran without a question.
    assert_eq!(asked, vec![serde_json::json!("lead: shell `echo one`")]);
    let shown = scratch.dsh(&["show", "lead"], &[]);
    let transcript = text(&shown.stdout);
    assert!(transcript.contains("echo two"), "{transcript}");
    assert!(!transcript.contains("declined"), "{transcript}");
    drop(raw.stdin.take());
    let output = wait_bounded(raw.child, BOUND, "dsh acp after its stdin closed");
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn a_signal_to_dsh_acp_mid_turn_stops_its_tree_and_leaves_no_process() {
    let Some(agent) = support::rogue_agent() else {
        dsh_test_support::skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let marker = format!("--dsh-acp-agent-signal-{}", std::process::id());
    let model = FakeModel::start(vec![Reply::ToolCall {
        name: "acp".to_owned(),
        arguments: serde_json::json!({
            "description": "hang",
            "prompt": "say working; grandchild; hang",
        }),
    }]);
    let mut extra = support::acp_flags(&agent);
    extra.extend(["--acp-arg", &marker]);
    let mut raw = Raw::with(&scratch, &model, &extra);
    let created = raw.open(scratch.dir.path());
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    raw.request(
        3,
        "session/prompt",
        serde_json::json!({ "sessionId": session, "prompt": [{ "type": "text", "text": "Go." }] }),
    );
    let dsh = raw.child.id();
    // The ACP agent and its grandchild (`sleep`, in its process group).
    wait_for("the ACP agent and its grandchild start", || {
        processes(&marker, dsh).len() >= 2
    });
    let pid = Pid::from_raw(i32::try_from(dsh).unwrap()).unwrap();
    kill_process(pid, Signal::TERM).unwrap();
    let ended = raw.response(3.into());
    assert_eq!(ended["result"]["stopReason"], "cancelled", "{ended}");
    let output = wait_bounded(raw.child, BOUND, "dsh acp after SIGTERM");
    assert_eq!(output.status.code(), Some(143), "{}", text(&output.stderr));
    wait_for("every ACP process is gone", || {
        processes(&marker, dsh).is_empty()
    });
}

/// A lead that starts the ACP child `name` in the foreground with
/// `prompt` (the rogue agent's script), then says `then`.
fn one_acp_child(name: &str, prompt: &str, then: &str) -> FakeModel {
    FakeModel::start(vec![
        Reply::ToolCall {
            name: "acp".to_owned(),
            arguments: serde_json::json!({
                "description": name,
                "name": name,
                "prompt": prompt,
                "run_in_background": false,
            }),
        },
        Reply::Text(then.to_owned()),
    ])
}

#[test]
fn an_acp_childs_own_permission_request_is_forwarded_to_the_client() {
    let Some(agent) = support::rogue_agent() else {
        dsh_test_support::skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let model = one_acp_child("cleaner", "ask rm -rf build; say done", "Cleaned.");
    let mut extra = support::acp_flags(&agent);
    extra.extend(["--acp-permission", "ask"]);
    let mut raw = Raw::with(&scratch, &model, &extra);
    let created = raw.open(scratch.dir.path());
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    raw.request(
        3,
        "session/prompt",
        serde_json::json!({ "sessionId": session, "prompt": [{ "type": "text", "text": "Clean." }] }),
    );
    let mut asked = Vec::new();
    let ended = raw.answering(3.into(), |frame| {
        asked.push(frame["params"].clone());
        "allow"
    });
    assert_eq!(ended["result"]["stopReason"], "end_turn", "{ended}");
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["sessionId"], session.as_str());
    // Named by the child's path, not its provider (`acp`), with its
    // session id.
    assert_eq!(
        asked[0]["toolCall"]["title"], "cleaner: execute `rm -rf build`",
        "{asked:?}"
    );
    assert!(
        asked[0]["toolCall"]["_meta"]["dsh"]["agentSessionId"]
            .as_str()
            .is_some_and(|id| id.starts_with("s-") && id != session),
        "{asked:?}"
    );
    // The agent was granted its request and said so in its result.
    let shown = scratch.dsh(&["show", "cleaner"], &[]);
    assert!(
        text(&shown.stdout).contains("granted yes"),
        "{}",
        text(&shown.stdout)
    );
    drop(raw.stdin.take());
    let output = wait_bounded(raw.child, BOUND, "dsh acp after its stdin closed");
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn the_clients_stdio_mcp_servers_serve_the_sessions_tree_and_stop_with_it() {
    let Some(script) = support::fake_mcp_server() else {
        return;
    };
    let marker = format!("dsh-acp-agent-mcp-{}", std::process::id());
    let scratch = Scratch::new();
    let (model, mut raw, init) = calling_once(
        &scratch,
        "mcp__fake__echo",
        serde_json::json!({ "text": "through the client's server" }),
    );
    assert_eq!(
        init["result"]["agentCapabilities"]["mcpCapabilities"],
        serde_json::json!({ "http": true, "sse": false }),
        "{init}"
    );
    // An SSE server is refused in one line: dsh advertised stdio and HTTP.
    raw.request(
        2,
        "session/new",
        serde_json::json!({ "cwd": scratch.dir.path(), "mcpServers": [
            { "type": "sse", "name": "feed", "url": "http://127.0.0.1:9/sse", "headers": [] }
        ] }),
    );
    let refused = raw.response(2.into());
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        refused["error"]["data"],
        "MCP server `feed`: dsh takes stdio and streamable-HTTP MCP servers, not SSE",
        "{refused}"
    );
    raw.request(
        3,
        "session/new",
        serde_json::json!({ "cwd": scratch.dir.path(), "mcpServers": [
            { "name": "fake", "command": "python3", "args": [script, marker], "env": [] }
        ] }),
    );
    let created = raw.response(3.into());
    assert!(!dsh_test_support::procs::marked(&marker).is_empty());
    echo_and_close(
        raw,
        &model,
        &created,
        "mcp__fake__echo",
        "echo: through the client's server",
    );
    wait_for("the client's MCP server is gone", || {
        dsh_test_support::procs::marked(&marker).is_empty()
    });
}

/// An HTTP MCP server the client passes is reached with the headers it
/// gives: the registry's server-everything behind a gate that refuses any
/// request without the client's token serves the session's tree (its
/// `echo` answers the lead), and the same server without the header fails
/// the session's start naming it.
#[test]
fn the_clients_http_mcp_server_is_reached_with_its_headers() {
    let token = format!("dsh-acp-{}", std::process::id());
    let Some(server) = support::gated_everything("X-Dsh-Token", &token) else {
        return;
    };
    let scratch = Scratch::new();
    let (model, mut raw, _) = calling_once(
        &scratch,
        "mcp__ev__echo",
        serde_json::json!({ "message": "through the gate" }),
    );
    let http = |headers: serde_json::Value| {
        serde_json::json!({ "cwd": scratch.dir.path(), "mcpServers": [
            { "type": "http", "name": "ev", "url": server.url, "headers": headers }
        ] })
    };
    raw.request(2, "session/new", http(serde_json::json!([])));
    let refused = raw.response(2.into());
    let said = refused["error"].to_string();
    assert!(
        said.contains("MCP server `ev` did not start") && said.contains("401"),
        "{refused}"
    );
    raw.request(
        3,
        "session/new",
        http(serde_json::json!([{ "name": "X-Dsh-Token", "value": token }])),
    );
    let created = raw.response(3.into());
    echo_and_close(
        raw,
        &model,
        &created,
        "mcp__ev__echo",
        "Echo: through the gate",
    );
}

/// `dsh acp` over a model that calls `tool` with `arguments` once and
/// then answers, initialized: the model, the connection and its
/// `initialize` response.
fn calling_once(
    scratch: &Scratch,
    tool: &str,
    arguments: serde_json::Value,
) -> (FakeModel, Raw, serde_json::Value) {
    let model = FakeModel::start(vec![
        Reply::ToolCall {
            name: tool.to_owned(),
            arguments,
        },
        Reply::Text("Echoed.".to_owned()),
    ]);
    let mut raw = Raw::start(scratch, &model);
    raw.request(1, "initialize", serde_json::json!({ "protocolVersion": 1 }));
    let init = raw.response(1.into());
    (model, raw, init)
}

/// Prompt the session `created` opened: the model was offered `tool`, its
/// call's result (holding `echoed`) reached the model, the turn ended,
/// and `dsh acp` exits cleanly once its stdin closes.
fn echo_and_close(
    mut raw: Raw,
    model: &FakeModel,
    created: &serde_json::Value,
    tool: &str,
    echoed: &str,
) {
    let session = created["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"));
    raw.request(
        4,
        "session/prompt",
        serde_json::json!({ "sessionId": session, "prompt": [{ "type": "text", "text": "Echo." }] }),
    );
    let ended = raw.response(4.into());
    assert_eq!(ended["result"]["stopReason"], "end_turn", "{ended}");
    let first = model.next_request(BOUND);
    assert!(first.contains(&format!("\"{tool}\"")), "{first}");
    let second = model.next_request(BOUND);
    assert!(second.contains(echoed), "{second}");
    drop(raw.stdin.take());
    let output = wait_bounded(raw.child, BOUND, "dsh acp after its stdin closed");
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn the_model_option_lists_the_configured_routes_and_a_pick_applies_from_the_next_prompt() {
    let scratch = Scratch::new();
    std::fs::write(
        scratch.dir.path().join("dsh.toml"),
        "[agents.reviewer]\ndescription = \"Reviews.\"\nmodel = \"openai:fake-large\"\n",
    )
    .unwrap();
    let model = FakeModel::start(vec![
        Reply::Text("First.".to_owned()),
        Reply::Text("Second.".to_owned()),
    ]);
    let mut raw = Raw::start(&scratch, &model);
    let created = raw.open(scratch.dir.path());
    let options = &created["result"]["configOptions"];
    assert_eq!(options[0]["id"], "model", "{created}");
    assert_eq!(options[0]["category"], "model", "{created}");
    assert_eq!(options[0]["currentValue"], "openai:fake", "{created}");
    let values: Vec<_> = options[0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|option| option["value"].clone())
        .collect();
    assert_eq!(values, ["openai:fake", "openai:fake-large"], "{created}");
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    let prompt = |text: &str| serde_json::json!({ "sessionId": session, "prompt": [{ "type": "text", "text": text }] });

    raw.request(3, "session/prompt", prompt("One."));
    assert_eq!(raw.response(3.into())["result"]["stopReason"], "end_turn");
    let first: serde_json::Value = serde_json::from_str(&model.next_request(BOUND)).unwrap();
    assert_eq!(first["model"], "fake");

    // A route nobody configured, and an option that does not exist, are
    // refused; the configured route is taken.
    let set = |value: &str, config: &str| serde_json::json!({ "sessionId": session, "configId": config, "value": value });
    raw.request(4, "session/set_config_option", set("openai:other", "model"));
    assert_eq!(raw.response(4.into())["error"]["code"], -32602);
    raw.request(
        5,
        "session/set_config_option",
        set("openai:fake-large", "mode"),
    );
    assert_eq!(raw.response(5.into())["error"]["code"], -32602);
    raw.request(
        6,
        "session/set_config_option",
        set("openai:fake-large", "model"),
    );
    let picked = raw.response(6.into());
    assert_eq!(
        picked["result"]["configOptions"][0]["currentValue"], "openai:fake-large",
        "{picked}"
    );
    raw.request(7, "session/prompt", prompt("Two."));
    assert_eq!(raw.response(7.into())["result"]["stopReason"], "end_turn");
    let second: serde_json::Value = serde_json::from_str(&model.next_request(BOUND)).unwrap();
    assert_eq!(second["model"], "fake-large");
    drop(raw.stdin.take());
    let output = wait_bounded(raw.child, BOUND, "dsh acp after its stdin closed");
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn an_acp_childs_text_streams_on_its_own_child_session_before_the_turn_answers() {
    let Some(agent) = support::rogue_agent() else {
        dsh_test_support::skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let model = one_acp_child("worker", "say working on it; say done", "Worked.");
    let extra = support::acp_flags(&agent);
    let mut raw = Raw::with(&scratch, &model, &extra);
    let created = raw.open(scratch.dir.path());
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    raw.request(
        3,
        "session/prompt",
        serde_json::json!({ "sessionId": session, "prompt": [{ "type": "text", "text": "Work." }] }),
    );
    let ended = raw.response(3.into());
    assert_eq!(ended["result"]["stopReason"], "end_turn", "{ended}");
    // The child's session: the one its announcement names.
    let announced: Vec<_> = raw
        .updates
        .iter()
        .filter(|update| update["update"]["sessionUpdate"] == "subagent_update")
        .collect();
    assert_eq!(announced.len(), 1, "{:?}", raw.updates);
    let child = raw
        .updates
        .iter()
        .map(|update| update["sessionId"].as_str().unwrap().to_owned())
        .find(|id| *id != session)
        .expect("updates on the child's session");
    let said: String = raw
        .updates
        .iter()
        .filter(|update| {
            update["sessionId"] == child.as_str()
                && update["update"]["sessionUpdate"] == "agent_message_chunk"
        })
        .filter_map(|update| update["update"]["content"]["text"].as_str())
        .collect();
    assert!(said.contains("working on it"), "{:?}", raw.updates);
    drop(raw.stdin.take());
    let output = wait_bounded(raw.child, BOUND, "dsh acp after its stdin closed");
    assert!(output.status.success(), "{}", text(&output.stderr));
}

/// One turn of a new session of `dsh acp EXTRA...` (the lead only
/// answers); the lead's first model request.
fn first_request(scratch: &Scratch, extra: &[&str]) -> String {
    let model = FakeModel::start(vec![Reply::Text("Done.".to_owned())]);
    let mut raw = Raw::with(scratch, &model, extra);
    let created = raw.open(scratch.dir.path());
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    raw.request(
        3,
        "session/prompt",
        serde_json::json!({ "sessionId": session, "prompt": [{ "type": "text", "text": "Go." }] }),
    );
    assert_eq!(raw.response(3.into())["result"]["stopReason"], "end_turn");
    drop(raw.stdin.take());
    let output = wait_bounded(raw.child, BOUND, "dsh acp after its stdin closed");
    assert!(output.status.success(), "{}", text(&output.stderr));
    model.next_request(BOUND)
}

#[test]
fn dsh_acp_with_team_gives_each_lead_the_team_tools_and_without_it_does_not() {
    let scratch = Scratch::new();
    let asked = first_request(&scratch, &["--team"]);
    assert!(asked.contains("\"spawn_teammate\""), "{asked}");
    assert!(asked.contains("\"team_task_create\""), "{asked}");
    let asked = first_request(&scratch, &[]);
    assert!(!asked.contains("\"spawn_teammate\""), "{asked}");
}

/// `dsh acp --max-tokens` holds as `dsh run`'s does: the 60,000 tokens an
/// ACP child reports spend the tree's budget of 50,000, so the turn is
/// stopped, children first, and ends `max_tokens` with the line naming
/// the budget on stderr; a later turn of the spent tree ends so at once.
#[test]
fn a_spent_tree_budget_ends_the_turn_max_tokens() {
    let Some(agent) = support::rogue_agent() else {
        dsh_test_support::skip_or_fail("no Python for the test-only ACP agent");
        return;
    };
    let scratch = Scratch::new();
    let model = FakeModel::start(support::delegating(&["usage 40000 20000; say counted"]));
    let mut extra = support::acp_flags(&agent);
    extra.extend(["--max-tokens", "50000"]);
    let mut raw = Raw::with(&scratch, &model, &extra);
    let created = raw.open(scratch.dir.path());
    let session = created["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    for id in [3, 4] {
        raw.request(
            id,
            "session/prompt",
            serde_json::json!({ "sessionId": session, "prompt": [{ "type": "text", "text": "Delegate." }] }),
        );
        let ended = raw.response(id.into());
        assert_eq!(ended["result"]["stopReason"], "max_tokens", "{ended}");
    }
    drop(raw.stdin.take());
    let output = wait_bounded(raw.child, BOUND, "dsh acp after its stdin closed");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(
            "dsh: budget: the tree's token budget of 50000 was spent (60000 tokens used)"
        ),
        "{stderr}"
    );
}
