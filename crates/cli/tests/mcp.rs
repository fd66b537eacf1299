//! MCP servers through the `dsh` binary (B62): `--mcp` and
//! `[mcp.servers.NAME]` start one set of servers for the tree, whose tools
//! the lead calls as `mcp__<server>__<tool>`; `dsh mcp` lists them; a bad
//! table is refused before anything runs; a `url` server nobody answers
//! fails the run with one line naming it; and no server process is left
//! after SIGINT, SIGTERM, SIGHUP or SIGKILL of `dsh`. The server is the MCP
//! suite's fake (standard-library Python).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use dsh_test_support::procs::marked;
use rustix::process::{Pid, Signal, kill_process};
use support::model::{FakeModel, Reply};
use support::{BOUND, Scratch, text, wait_bounded};

/// `--mcp fake=python3 <script> <marker>`.
fn mcp_flag(script: &std::path::Path, marker: &str) -> String {
    format!("fake=python3 {} {marker}", script.display())
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn model_env(model: &FakeModel) -> [(&'static str, String); 2] {
    [
        ("OPENAI_API_KEY", "sk-test".to_owned()),
        ("OPENAI_BASE_URL", model.base_url.clone()),
    ]
}

#[test]
fn the_lead_calls_an_mcp_tool_and_the_server_is_gone_after_the_run() {
    let Some(script) = support::fake_mcp_server() else {
        return;
    };
    let marker = format!("dsh-cli-mcp-call-{}", std::process::id());
    let scratch = Scratch::new();
    let model = FakeModel::start(vec![
        Reply::ToolCall {
            name: "mcp__fake__echo".to_owned(),
            arguments: serde_json::json!({"text": "through the server"}),
        },
        Reply::Text("done".to_owned()),
    ]);
    let env = model_env(&model);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let flag = mcp_flag(&script, &marker);
    let output = scratch.dsh(
        &["run", "--model", "openai:fake", "--mcp", &flag, "hi"],
        &env,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let first = model.next_request(BOUND);
    assert!(first.contains("\"mcp__fake__echo\""), "{first}");
    assert!(first.contains("Echo the text back."), "{first}");
    let second = model.next_request(BOUND);
    assert!(second.contains("echo: through the server"), "{second}");
    assert_eq!(marked(&marker), Vec::<i32>::new(), "the server is gone");
}

#[test]
fn dsh_mcp_lists_servers_their_state_and_tools() {
    let Some(script) = support::fake_mcp_server() else {
        return;
    };
    let marker = format!("dsh-cli-mcp-list-{}", std::process::id());
    let scratch = Scratch::new();
    let flag = mcp_flag(&script, &marker);
    let output = scratch
        .bare(&["mcp", "--json", "--mcp", &flag], &[])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let mut listing: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    listing[0]["endpoint"] = "(command line)".into();
    insta::assert_json_snapshot!("mcp_listing", listing);
    assert_eq!(marked(&marker), Vec::<i32>::new(), "the server is gone");

    let text_output = scratch
        .bare(&["mcp", "--mcp", &flag], &[])
        .output()
        .unwrap();
    assert!(text_output.status.success());
    let listed = text(&text_output.stdout);
    assert!(listed.starts_with("fake  ready  (python3 "), "{listed}");
    assert!(
        listed.contains("\n  mcp__fake__echo  Echo the text back.\n"),
        "{listed}"
    );
}

#[test]
fn a_url_server_nobody_answers_fails_the_run_with_one_line_naming_the_url() {
    let scratch = Scratch::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    std::fs::write(
        scratch.dir.path().join("dsh.toml"),
        format!("[mcp.servers.web]\nurl = \"{url}\"\n"),
    )
    .unwrap();
    let run = scratch.dsh(&["run", "hi"], &[]);
    assert_eq!(run.status.code(), Some(1));
    let stderr = text(&run.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!("dsh: MCP server `web` did not start: `{url}`: ")),
        "{stderr}"
    );
    assert!(
        last.ends_with("Connection refused (os error 111)"),
        "{stderr}"
    );
}

#[test]
fn a_server_that_does_not_start_and_a_bad_table_are_one_line_each() {
    let scratch = Scratch::new();
    let output = scratch
        .bare(&["mcp", "--mcp", "gone=/nonexistent/mcp-server"], &[])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stdout).starts_with(
            "gone  failed: MCP server `gone` did not start: cannot start `/nonexistent/mcp-server`: the command was not found"
        ),
        "{}",
        text(&output.stdout)
    );
    assert_eq!(text(&output.stderr), "dsh: 1 MCP server(s) did not start\n");

    let run = scratch.dsh(&["run", "--mcp", "gone=/nonexistent/mcp-server", "hi"], &[]);
    assert_eq!(run.status.code(), Some(1));
    assert_eq!(
        text(&run.stderr).lines().last(),
        Some(
            "dsh: MCP server `gone` did not start: cannot start `/nonexistent/mcp-server`: the command was not found"
        )
    );

    std::fs::write(
        scratch.dir.path().join("dsh.toml"),
        "[mcp.servers.both]\ncommand = \"x\"\nurl = \"http://localhost:1/mcp\"\n",
    )
    .unwrap();
    let bad = scratch.bare(&["mcp"], &[]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    insta::assert_snapshot!(
        "mcp_bad_table",
        text(&bad.stderr).replace(&scratch.dir.path().display().to_string(), "SCRATCH")
    );
}

#[test]
fn no_server_process_is_left_after_any_signal() {
    let Some(script) = support::fake_mcp_server() else {
        return;
    };
    for (sig, code) in [
        (Signal::INT, Some(130)),
        (Signal::TERM, Some(143)),
        (Signal::HUP, Some(129)),
        (Signal::KILL, None),
    ] {
        let marker = format!("dsh-cli-mcp-signal-{}-{}", sig.as_raw(), std::process::id());
        let scratch = Scratch::new();
        let model = FakeModel::start(vec![Reply::Hang]);
        let env = model_env(&model);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        // A server that outlives its stdin and ignores SIGTERM.
        let flag = format!("{} --linger", mcp_flag(&script, &marker));
        let child = scratch.spawn(
            &["run", "--model", "openai:fake", "--mcp", &flag, "hi"],
            &env,
        );
        // The servers start before the lead's first request.
        model.next_request(BOUND);
        let dsh = i32::try_from(child.id()).unwrap();
        let servers = || {
            let mut pids = marked(&marker);
            pids.retain(|pid| *pid != dsh);
            pids
        };
        assert_eq!(servers().len(), 1, "the server runs");
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
        kill_process(pid, sig).unwrap();
        let output = wait_bounded(child, BOUND, "dsh run after a signal");
        assert_eq!(output.status.code(), code, "{}", text(&output.stderr));
        // After SIGKILL the parent-death signal ends it, asynchronously.
        wait_for("the server to be gone", || servers().is_empty());
    }
}

/// `[mcp.servers.NAME] headers` reach a URL server with every request, a
/// `${VAR}` in a value taken from dsh's environment (the secret is not in
/// the file): the registry's server-everything behind a gate that wants
/// the token is listed ready with its tools by `dsh mcp`; with the
/// variable unset, the file is refused naming the key and the variable.
#[test]
fn a_url_servers_headers_take_their_secret_from_the_environment() {
    let token = format!("dsh-cli-{}", std::process::id());
    let Some(server) = support::gated_everything("Authorization", &format!("Bearer {token}"))
    else {
        return;
    };
    let scratch = Scratch::new();
    std::fs::write(
        scratch.dir.path().join("dsh.toml"),
        format!(
            "[mcp.servers.ev]\nurl = \"{}\"\nheaders = {{ Authorization = \"Bearer ${{DSH_TEST_MCP_TOKEN}}\" }}\n",
            server.url
        ),
    )
    .unwrap();
    let listed = scratch
        .bare(&["mcp"], &[("DSH_TEST_MCP_TOKEN", &token)])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let listing = text(&listed.stdout);
    assert!(listing.starts_with("ev  ready  "), "{listing}");
    assert!(listing.contains("\n  mcp__ev__echo  "), "{listing}");

    let unset = scratch.bare(&["mcp"], &[]).output().unwrap();
    assert_eq!(unset.status.code(), Some(2));
    let stderr = text(&unset.stderr);
    assert!(
        stderr.contains(
            "mcp.servers.ev.headers.Authorization: `${DSH_TEST_MCP_TOKEN}` is not set in dsh's environment"
        ),
        "{stderr}"
    );
}
