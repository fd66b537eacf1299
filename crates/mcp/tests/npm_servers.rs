//! The MCP client against the registry's reference servers, installed at
//! pinned versions by `crates/subagent-acp/peers/install.sh`:
//! `@modelcontextprotocol/server-everything` (tools listed and called, a
//! tool's error, a slow tool past the call timeout, the list it changes
//! after the handshake) and `@modelcontextprotocol/server-filesystem` (one
//! agent of a tree reads a file through it, another whose filter leaves it
//! out can neither see nor call it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use dsh_core::ToolRestriction;
use dsh_mcp::{McpServerConfig, McpServers};
use serde_json::json;
use support::{harness, marked, marker, npm_servers, run};

/// `node <dir>/<package>/dist/index.js <args>`, marked with `mark`.
fn node_server(name: &str, package: &str, args: &[&str], mark: &str) -> Option<McpServerConfig> {
    let dir = npm_servers()?;
    let script = dir.join(package).join("dist/index.js");
    let mut all = vec![script.display().to_string()];
    all.extend(args.iter().map(|arg| (*arg).to_owned()));
    // Node ignores arguments after the script's own; the marker names the
    // process for the check that none is left.
    all.push(format!("--dsh-mark={mark}"));
    Some(McpServerConfig::command(name, "node").args(all))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_tools_are_listed_called_and_bounded() {
    let mark = marker("everything");
    let Some(mut config) = node_server("ev", "server-everything", &["stdio"], &mark) else {
        return;
    };
    config.call_timeout = Duration::from_secs(1);
    let servers = McpServers::new(vec![config], std::env::temp_dir()).unwrap();
    let tools = servers.tools().await.unwrap();
    // The server registers more tools once the handshake is done and says
    // so: the list is read again.
    let mut listings = servers.listings("ev").unwrap();
    listings.wait_for(|n| *n >= 2).await.unwrap();

    let (harness, model) = harness(&tools);
    let ran = run(
        &harness,
        &model,
        None,
        vec![
            ("mcp__ev__echo", json!({"message": "hello"})),
            ("mcp__ev__get-sum", json!({"a": 2, "b": 40})),
            ("mcp__ev__get-sum", json!({"a": "two", "b": 40})),
            (
                "mcp__ev__gzip-file-as-resource",
                json!({"name": "x.gz", "data": "file:///etc/hostname"}),
            ),
            (
                "mcp__ev__trigger-long-running-operation",
                json!({"duration": 30, "steps": 1}),
            ),
        ],
    )
    .await;
    let echo = ran
        .offered
        .iter()
        .find(|spec| spec.name == "mcp__ev__echo")
        .unwrap();
    insta::with_settings!({sort_maps => true}, {
        insta::assert_json_snapshot!("everything_echo_spec", echo);
    });
    insta::assert_debug_snapshot!("everything_results", ran.results);
    servers.shutdown().await;
    assert_eq!(marked(&mark), Vec::<i32>::new(), "the server is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filesystem_read_is_offered_to_one_agent_and_not_to_one_whose_filter_omits_it() {
    let mark = marker("filesystem");
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    std::fs::write(root_path.join("notes.txt"), "the answer is 42\n").unwrap();
    let root_arg = root_path.display().to_string();
    let Some(config) = node_server("fs", "server-filesystem", &[&root_arg], &mark) else {
        return;
    };
    let servers = McpServers::new(vec![config], root_path.clone()).unwrap();
    let tools = servers.tools().await.unwrap();
    let (harness, model) = harness(&tools);
    let file = root_path.join("notes.txt").display().to_string();

    let reader = run(
        &harness,
        &model,
        Some(ToolRestriction::allow(["mcp__fs__read_text_file"])),
        vec![("mcp__fs__read_text_file", json!({"path": file}))],
    )
    .await;
    assert_eq!(reader.names(), ["mcp__fs__read_text_file"]);
    assert_eq!(reader.results, [("the answer is 42\n".to_owned(), false)]);

    let other = run(
        &harness,
        &model,
        Some(ToolRestriction::deny(["mcp__fs__read_text_file"])),
        vec![("mcp__fs__read_text_file", json!({"path": file}))],
    )
    .await;
    assert!(!other.names().contains(&"mcp__fs__read_text_file"));
    assert!(
        other.names().contains(&"mcp__fs__list_directory"),
        "{:?}",
        other.names()
    );
    assert_eq!(
        other.results,
        [(
            "Tool `mcp__fs__read_text_file` is not available to this agent.".to_owned(),
            true
        )]
    );
    servers.shutdown().await;
    assert_eq!(marked(&mark), Vec::<i32>::new(), "the server is gone");
}
