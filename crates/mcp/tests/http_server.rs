//! The streamable-HTTP client against the registry's reference server,
//! `@modelcontextprotocol/server-everything` in its `streamableHttp` mode
//! (installed by `crates/subagent-acp/peers/install.sh`) over loopback:
//! its tools listed and called by URL, a server that goes away mid-call is
//! a tool error, a server behind a gate that wants a header is reached with
//! the configured header and refused without it, and a URL nobody answers
//! fails the start with one line naming it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Stdio;
use std::time::Duration;

use dsh_mcp::{McpServerConfig, McpServers};
use serde_json::json;
use support::{harness, marked, marker, npm_servers, run};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

/// A port nothing listens on (bound, then released).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// server-everything over streamable HTTP on a free loopback port, once it
/// listens: the process, its URL, and the count of POSTs it received. With
/// a `gate` (a header's name and value), a request without that header is
/// refused (401) before it reaches the server (`fixtures/header_gate.mjs`).
async fn everything_http(
    mark: &str,
    gate: Option<(&str, &str)>,
) -> Option<(Child, String, watch::Receiver<usize>)> {
    let dir = npm_servers()?;
    let port = free_port();
    let mut command = Command::new("node");
    if let Some((name, value)) = gate {
        let preload =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/header_gate.mjs");
        command
            .arg("--import")
            .arg(preload)
            .env("DSH_GATE_HEADER", name)
            .env("DSH_GATE_VALUE", value);
    }
    let mut child = command
        .arg(dir.join("server-everything/dist/index.js"))
        .arg("streamableHttp")
        .arg(format!("--dsh-mark={mark}"))
        .env("PORT", port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    while let Some(line) = stderr.next_line().await.unwrap() {
        if line.contains("listening on port") {
            break;
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    let (posts, seen) = watch::channel(0);
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stdout.next_line().await {
            if line.contains("Received MCP POST request") {
                posts.send_modify(|n| *n += 1);
            }
        }
    });
    Some((child, format!("http://127.0.0.1:{port}/mcp"), seen))
}

/// The set of `config` alone, started, and a harness over its tools.
async fn serving(
    config: McpServerConfig,
) -> (
    McpServers,
    dsh_harness::Harness,
    std::sync::Arc<dsh_harness::ScriptedModel>,
) {
    let servers = McpServers::new(vec![config], std::env::temp_dir()).unwrap();
    let tools = servers.tools().await.unwrap();
    let (harness, model) = harness(&tools);
    (servers, harness, model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reached_by_url_lists_and_calls_tools_and_its_death_is_a_tool_error() {
    let mark = marker("http");
    let Some((mut child, url, posts)) = everything_http(&mark, None).await else {
        return;
    };
    let mut config = McpServerConfig::url("ev", url);
    config.call_timeout = Duration::from_secs(60);
    let (servers, harness, model) = serving(config).await;

    let ran = run(
        &harness,
        &model,
        None,
        vec![
            ("mcp__ev__echo", json!({"message": "hello"})),
            ("mcp__ev__get-sum", json!({"a": 2, "b": 40})),
        ],
    )
    .await;
    assert!(ran.names().contains(&"mcp__ev__echo"), "{:?}", ran.names());
    assert_eq!(
        ran.results,
        [
            ("Echo: hello".to_owned(), false),
            ("The sum of 2 and 40 is 42.".to_owned(), false)
        ]
    );
    assert_eq!(servers.status()[0].state, "ready");

    // The server is killed once the slow call reached it.
    let before = *posts.borrow();
    let pid = child.id().unwrap();
    let killer = tokio::spawn({
        let mut posts = posts.clone();
        async move {
            posts.wait_for(|n| *n > before).await.unwrap();
            rustix::process::kill_process(
                rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap(),
                rustix::process::Signal::KILL,
            )
            .unwrap();
        }
    });
    let died = run(
        &harness,
        &model,
        None,
        vec![(
            "mcp__ev__trigger-long-running-operation",
            json!({"duration": 30, "steps": 1}),
        )],
    )
    .await;
    killer.await.unwrap();
    child.wait().await.unwrap();
    insta::assert_debug_snapshot!("http_death_result", died.results);
    assert!(servers.status()[0].state.starts_with("exited: "));
    servers.shutdown().await;
    assert_eq!(marked(&mark), Vec::<i32>::new());
}

#[tokio::test]
async fn a_url_nobody_answers_fails_the_start_with_one_line_naming_it() {
    let url = format!("http://127.0.0.1:{}/mcp", free_port());
    let servers = McpServers::new(
        vec![McpServerConfig::url("gone", url.clone())],
        std::env::temp_dir(),
    )
    .unwrap();
    let Err(err) = servers.tools().await else {
        panic!("a URL nobody answers started");
    };
    let err = err.to_string();
    assert!(err.contains(&url), "{err}");
    assert!(
        err.starts_with("MCP server `gone` did not start: "),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains("Connection refused"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_header_reaches_the_server_with_every_request() {
    let mark = marker("gate");
    let token = format!("t0ken-{mark}");
    let Some((_child, url, posts)) = everything_http(&mark, Some(("X-Dsh-Token", &token))).await
    else {
        return;
    };
    // Without it (or with a wrong value) the gate refuses the start, and
    // the server never sees a request; the value is not in the message.
    for config in [
        McpServerConfig::url("ev", url.clone()),
        McpServerConfig::url("ev", url.clone()).header("X-Dsh-Token", "wrong-value"),
    ] {
        let servers = McpServers::new(vec![config], std::env::temp_dir()).unwrap();
        let Err(err) = servers.tools().await else {
            panic!("the gate let a request without its header through");
        };
        let err = err.to_string();
        assert!(err.starts_with("MCP server `ev` did not start: "), "{err}");
        assert!(err.contains(&url), "{err}");
        assert!(!err.contains("wrong-value") && !err.contains('\n'), "{err}");
    }
    assert_eq!(*posts.borrow(), 0);

    let config = McpServerConfig::url("ev", url).header("X-Dsh-Token", &token);
    let (servers, harness, model) = serving(config).await;
    let ran = run(
        &harness,
        &model,
        None,
        vec![("mcp__ev__echo", json!({"message": "through the gate"}))],
    )
    .await;
    assert_eq!(ran.results, [("Echo: through the gate".to_owned(), false)]);
    assert!(*posts.borrow() > 0);
    servers.shutdown().await;
}
