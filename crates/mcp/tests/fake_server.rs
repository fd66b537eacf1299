//! The MCP client against a server of our own (`fixtures/fake_server.py`):
//! the offered specs, every error the model is shown (a tool's error, a
//! protocol error, a timeout, a crash mid-call, a schema that is not an
//! object schema), re-listing, a start that fails with its stderr, and no
//! process left after a shutdown or a drop.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_core::{AgentFactory, ToolRestriction};
use dsh_mcp::{McpServerConfig, McpServers};
use serde_json::json;
use support::{FakeTree, fake, fake_tree, marked, marker, run};

fn servers(configs: Vec<McpServerConfig>) -> McpServers {
    McpServers::new(configs, std::env::temp_dir()).unwrap()
}

/// The listing, its command lines (which hold paths and a pid) left out.
fn status(servers: &McpServers) -> Vec<dsh_mcp::ServerStatus> {
    let mut status = servers.status();
    for server in &mut status {
        server.endpoint = "(command line)".to_owned();
    }
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_offered_with_the_servers_wording_and_errors_reach_the_model() {
    let Some(tree) = fake_tree("errors").await else {
        return;
    };
    let FakeTree {
        mark,
        servers,
        harness,
        model,
    } = tree;
    let ran = run(
        &harness,
        &model,
        None,
        vec![
            ("mcp__fake__echo", json!({"text": "hi"})),
            ("mcp__fake__echo", json!({"text": 3})),
            ("mcp__fake__fail", json!({})),
            ("mcp__fake__rpc_error", json!({})),
            ("mcp__fake__hang", json!({})),
            ("mcp__fake__not_object", json!({})),
        ],
    )
    .await;
    insta::with_settings!({sort_maps => true}, {
        insta::assert_json_snapshot!("fake_specs", ran.offered);
    });
    insta::assert_debug_snapshot!("fake_results", ran.results);
    insta::with_settings!({sort_maps => true}, {
        insta::assert_json_snapshot!("fake_status", status(&servers));
    });
    servers.shutdown().await;
    assert_eq!(marked(&mark), Vec::<i32>::new(), "the server is gone");
    insta::with_settings!({sort_maps => true}, {
        insta::assert_json_snapshot!("fake_status_stopped", status(&servers));
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_crashes_mid_call_is_a_tool_error_and_its_tools_go() {
    let Some(tree) = fake_tree("crash").await else {
        return;
    };
    let FakeTree {
        mark,
        servers,
        harness,
        model,
    } = tree;
    let ran = run(
        &harness,
        &model,
        None,
        vec![("mcp__fake__crash", json!({}))],
    )
    .await;
    insta::assert_debug_snapshot!("crash_result", ran.results);
    let after = run(
        &harness,
        &model,
        None,
        vec![("mcp__fake__echo", json!({"text": "x"}))],
    )
    .await;
    assert!(
        after.names().iter().all(|name| !name.starts_with("mcp__")),
        "{:?}",
        after.names()
    );
    insta::assert_debug_snapshot!("after_crash_result", after.results);
    assert_eq!(
        servers.status()[0].state,
        "exited: its process exited (exit status: 7)"
    );
    servers.shutdown().await;
    assert_eq!(marked(&mark), Vec::<i32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_list_changes_is_relisted() {
    let Some(tree) = fake_tree("relist").await else {
        return;
    };
    let FakeTree {
        mark,
        servers,
        harness,
        model,
    } = tree;
    let (added_tx, mut added) = tokio::sync::mpsc::unbounded_channel();
    let registry = harness.clone();
    servers.on_new_tools(move |tool| {
        let name = tool.name().to_owned();
        registry.add_tool(tool).unwrap();
        let _ = added_tx.send(name);
    });
    let ran = run(&harness, &model, None, vec![("mcp__fake__grow", json!({}))]).await;
    assert_eq!(ran.results, [("grown".to_owned(), false)]);
    // The re-listing hands out the new tool (and only it).
    assert_eq!(added.recv().await.as_deref(), Some("mcp__fake__added"));
    let after = run(
        &harness,
        &model,
        None,
        vec![("mcp__fake__echo", json!({"text": "x"}))],
    )
    .await;
    assert!(
        !after.names().contains(&"mcp__fake__echo"),
        "{:?}",
        after.names()
    );
    assert!(after.names().contains(&"mcp__fake__grow"));
    insta::assert_debug_snapshot!("relisted_echo_result", after.results);
    // An agent created after the re-listing is offered the added tool.
    let later = run(
        &harness,
        &model,
        None,
        vec![("mcp__fake__added", json!({"text": "new"}))],
    )
    .await;
    assert!(
        later.names().contains(&"mcp__fake__added"),
        "{:?}",
        later.names()
    );
    assert_eq!(later.results, [("added: new".to_owned(), false)]);
    let status = &servers.status()[0];
    let names: Vec<&str> = status.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"mcp__fake__added") && !names.contains(&"mcp__fake__echo"),
        "{names:?}"
    );
    servers.shutdown().await;
    assert_eq!(marked(&mark), Vec::<i32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_narrows_the_mcp_tools_and_never_widens_them() {
    let Some(tree) = fake_tree("filter").await else {
        return;
    };
    let FakeTree {
        mark,
        servers,
        harness,
        model,
    } = tree;
    let narrowed = run(
        &harness,
        &model,
        Some(ToolRestriction::allow(["mcp__fake__fail"])),
        vec![("mcp__fake__echo", json!({"text": "x"}))],
    )
    .await;
    assert_eq!(narrowed.names(), ["mcp__fake__fail"]);
    assert_eq!(
        narrowed.results,
        [(
            "Tool `mcp__fake__echo` is not available to this agent.".to_owned(),
            true
        )]
    );
    // A filter naming a tool no server offers is refused, not widened to it.
    let widened = harness
        .create(dsh_core::CreateAgent {
            setup: Default::default(),
            header: {
                let mut header = dsh_core::SessionHeader::new(
                    dsh_core::SessionId::generate(),
                    std::env::temp_dir(),
                );
                header.composition.tools = Some(ToolRestriction::allow(["mcp__fake__nope"]));
                header
            },
            seed: Vec::new(),
            cancel: dsh_core::CancellationToken::new(),
        })
        .await;
    assert!(widened.is_err());
    servers.shutdown().await;
    assert_eq!(marked(&mark), Vec::<i32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_start_says_why_with_its_last_stderr_lines() {
    let mark = marker("nostart");
    let Some(mut config) = fake(&mark) else {
        return;
    };
    if let dsh_mcp::Endpoint::Command { env, .. } = &mut config.endpoint {
        env.insert("FAKE_MCP_FAIL_START".into(), "1".into());
    }
    let servers = servers(vec![config]);
    let Err(err) = servers.tools().await else {
        panic!("the server started")
    };
    insta::assert_snapshot!("start_failure", err.to_string().replace(&mark, "MARK"));
    assert_eq!(marked(&mark), Vec::<i32>::new());

    let missing = McpServers::new(
        vec![McpServerConfig::command("gone", "/nonexistent/mcp-server")],
        std::env::temp_dir(),
    )
    .unwrap();
    let Err(err) = missing.tools().await else {
        panic!("a missing program started")
    };
    insta::assert_snapshot!("spawn_failure", err.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_set_leaves_no_process() {
    let mark = marker("drop");
    let Some(config) = fake(&mark) else { return };
    let servers = servers(vec![config]);
    let tools = servers.tools().await.unwrap();
    assert_eq!(marked(&mark).len(), 1);
    drop(tools);
    drop(servers);
    // The group is SIGKILLed at once; its reaping is the runtime's.
    dsh_test_support::wait::until(|| marked(&mark).is_empty()).await;
}

#[test]
fn bad_server_names_are_refused() {
    for name in ["", "a.b", "a__b"] {
        let err = McpServers::new(
            vec![McpServerConfig::command(name, "true")],
            std::env::temp_dir(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("MCP server `{name}`: "))
        );
    }
    let twice = vec![
        McpServerConfig::command("a", "true"),
        McpServerConfig::command("a", "true"),
    ];
    assert!(McpServers::new(twice, std::env::temp_dir()).is_err());
}
