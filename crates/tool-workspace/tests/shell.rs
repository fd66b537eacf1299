//! `shell` with real processes: exit codes and signals, bounded output,
//! the timeout, and the process group killed on timeout, on cancel, on a
//! dropped call and after the shell exits (checked in the process table,
//! `/proc/*/stat`), its cwd confined to the root, and Landlock confining
//! writes under `workspace-write` where the kernel has it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{BOUND, World, ctx, ok, refused, text};
use dsh_test_support::skip_or_fail;
use dsh_tool_workspace::{
    Answer, Asker, Level, MAX_SHELL_OUTPUT_BYTES, Policy, Request, landlock_status,
};
use serde_json::{Value, json};

/// Approves everything.
struct AllowAll;

#[async_trait]
impl Asker for AllowAll {
    async fn ask(&self, _: &Request) -> Answer {
        Answer::Allow
    }
}

/// The live (not zombie) members of process group `pgid`.
fn group_members(pgid: i32) -> Vec<String> {
    let mut live = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return live;
    };
    for entry in entries.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        if fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z" {
            live.push(stat[..close + 1].to_owned());
        }
    }
    live
}

/// Wait (bounded) until group `pgid` has no live member.
async fn group_gone(pgid: i32) {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let live = group_members(pgid);
        if live.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "process group {pgid} still has {live:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait (bounded) for the shell to write its pid (its group id) to `path`.
async fn pid_from(path: &Path) -> i32 {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        if let Ok(Ok(pid)) = std::fs::read_to_string(path).map(|t| t.trim().parse()) {
            return pid;
        }
        assert!(tokio::time::Instant::now() < deadline, "no pid file");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The result with the root and the kernel-dependent sandbox line masked.
fn masked(w: &World, text: &str) -> String {
    text.replace(&w.root.display().to_string(), "[ROOT]")
        .lines()
        .map(|l| {
            if l.starts_with("sandbox:") {
                "sandbox: [..]"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn run(w: &World, level: Level, input: Value) -> (bool, String) {
    let shell = w.tool(level, "shell");
    let out = common::call(&shell, &w.lead, input).await.unwrap();
    (out.is_error, text(&out))
}

#[tokio::test]
async fn exit_codes_signals_and_streams_are_reported() {
    let w = World::new().await;
    let (failed, out) = run(
        &w,
        Level::WorkspaceWrite,
        json!({"command": "echo out; echo err >&2; exit 3"}),
    )
    .await;
    assert!(failed);
    insta::assert_snapshot!("shell_exit_code", masked(&w, &out));
    let (failed, out) = run(&w, Level::WorkspaceWrite, json!({"command": "true"})).await;
    assert!(!failed);
    insta::assert_snapshot!("shell_success", masked(&w, &out));
    let (failed, out) = run(
        &w,
        Level::WorkspaceWrite,
        json!({"command": "kill -TERM $$"}),
    )
    .await;
    assert!(failed);
    assert!(out.contains("killed by signal 15 (SIGTERM)"), "{out}");
}

#[tokio::test]
async fn output_is_bounded_head_and_tail_with_a_marker() {
    let w = World::new().await;
    let (failed, out) = run(
        &w,
        Level::WorkspaceWrite,
        json!({"command": "printf start; head -c 200000 /dev/zero | tr '\\0' a; printf end"}),
    )
    .await;
    assert!(!failed, "{out}");
    assert!(out.len() < MAX_SHELL_OUTPUT_BYTES + 1000, "{}", out.len());
    let marker = out
        .lines()
        .find(|l| l.starts_with("[stdout truncated"))
        .unwrap();
    insta::assert_snapshot!("shell_truncated_marker", marker);
    assert!(out.contains("stdout:\nstartaaa"), "{out:.80}");
    assert!(
        out.contains("aaaend\nstderr: (empty)"),
        "{}",
        &out[out.len() - 80..]
    );
}

#[tokio::test]
async fn a_timeout_kills_the_whole_group() {
    let w = World::new().await;
    let (failed, out) = run(
        &w,
        Level::WorkspaceWrite,
        json!({"command": "echo $$ > pid; echo started; sleep 1000 & sleep 1000", "timeout_ms": 300}),
    )
    .await;
    assert!(failed);
    insta::assert_snapshot!("shell_timeout", masked(&w, &out));
    group_gone(pid_from(&w.root.join("pid")).await).await;
}

#[tokio::test]
async fn a_background_job_does_not_outlive_the_call() {
    let w = World::new().await;
    let (failed, out) = run(
        &w,
        Level::WorkspaceWrite,
        json!({"command": "sleep 1000 & echo $$ > pid"}),
    )
    .await;
    assert!(!failed, "{out}");
    assert!(out.contains("exit code: 0"), "{out}");
    group_gone(pid_from(&w.root.join("pid")).await).await;
}

#[tokio::test]
async fn cancel_kills_the_group_and_reports_it() {
    let w = World::new().await;
    let shell = w.tool(Level::WorkspaceWrite, "shell");
    let context = ctx(&w.lead);
    let cancel = context.cancel.clone();
    let task = tokio::spawn(async move {
        shell
            .execute(
                json!({"command": "echo $$ > pid; sleep 1000 & sleep 1000"}),
                context,
            )
            .await
    });
    let pgid = pid_from(&w.root.join("pid")).await;
    assert!(!group_members(pgid).is_empty());
    cancel.cancel();
    let result = tokio::time::timeout(BOUND, task).await.unwrap().unwrap();
    assert_eq!(
        result.unwrap_err().to_string(),
        "The call was cancelled before it finished."
    );
    group_gone(pgid).await;
}

#[tokio::test]
async fn dropping_the_call_kills_the_group() {
    let w = World::new().await;
    let shell = w.tool(Level::WorkspaceWrite, "shell");
    let context = ctx(&w.lead);
    let task = tokio::spawn(async move {
        shell
            .execute(
                json!({"command": "echo $$ > pid; sleep 1000 & sleep 1000"}),
                context,
            )
            .await
    });
    let pgid = pid_from(&w.root.join("pid")).await;
    // The call is parked in its wait for the shell: drop it there.
    assert!(!group_members(pgid).is_empty());
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    group_gone(pgid).await;
}

#[tokio::test]
async fn the_cwd_is_the_callers_or_inside_the_root() {
    let w = World::new().await;
    w.file("sub/inner/x", "");
    let child = w.agent(&w.root.join("sub")).await;
    let shell = w.tool(Level::WorkspaceWrite, "shell");
    let out = ok(&shell, &child, json!({"command": "pwd"})).await;
    assert!(
        out.contains(&format!("stdout:\n{}\n", w.root.join("sub").display())),
        "{out}"
    );
    let out = ok(&shell, &child, json!({"command": "pwd", "cwd": "inner"})).await;
    assert!(out.contains("cwd: inner\n"), "{out}");
    assert!(
        out.contains(&format!("{}\n", w.root.join("sub/inner").display())),
        "{out}"
    );
    let err = refused(&shell, &child, json!({"command": "pwd", "cwd": "../.."})).await;
    assert!(err.contains("outside the workspace root"), "{err}");
    let err = refused(&shell, &child, json!({"command": "pwd", "cwd": "inner/x"})).await;
    assert!(err.contains("is a file"), "{err}");
    let err = refused(&shell, &child, json!({"command": "pwd", "timeout_ms": 0})).await;
    assert!(err.contains("timeout_ms must be between"), "{err}");
}

#[tokio::test]
async fn landlock_confines_writes_under_workspace_write() {
    // Outside both the root and /tmp (which the rule set leaves writable):
    // the crate's target temporary directory, unless the checkout itself
    // is under /tmp (a CI clone there), then /var/tmp.
    let Some(base) = [
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        Path::new("/var/tmp"),
    ]
    .into_iter()
    .find(|dir| !dir.starts_with("/tmp") && dir.is_dir()) else {
        skip_or_fail("no writable directory outside /tmp to write into");
        return;
    };
    let w = World::new_in(base).await;
    let outside = w.dir.path().join("outside.txt");
    let status = landlock_status();
    let write_out = json!({"command": format!("echo x > '{}'", outside.display())});
    if !status.applies() {
        let (failed, out) = run(&w, Level::WorkspaceWrite, write_out).await;
        assert!(!failed, "{out}");
        assert!(out.contains("sandbox: not applied"), "{out}");
        skip_or_fail(&format!("Landlock is not available here: {status:?}"));
        return;
    }
    let (failed, out) = run(&w, Level::WorkspaceWrite, write_out.clone()).await;
    assert!(failed, "{out}");
    assert!(out.contains("Permission denied"), "{out}");
    assert!(out.contains("sandbox: landlock"), "{out}");
    assert!(!outside.exists());
    let tmp = tempfile::NamedTempFile::new().unwrap();
    let (failed, out) = run(
        &w,
        Level::WorkspaceWrite,
        json!({"command": format!("echo in > inside.txt && echo t > '{}' && echo n > /dev/null && cat '{}'", tmp.path().display(), outside.parent().unwrap().join("root/inside.txt").display())}),
    )
    .await;
    assert!(!failed, "{out}");
    assert!(out.contains("stdout:\nin\n"), "{out}");
    // Reads outside the root are not confined.
    std::fs::write(&outside, "readable").unwrap();
    let (failed, out) = run(
        &w,
        Level::WorkspaceWrite,
        json!({"command": format!("cat '{}'", outside.display())}),
    )
    .await;
    assert!(!failed && out.contains("readable"), "{out}");
    std::fs::remove_file(&outside).unwrap();
    // A program the command starts inherits the rule set.
    let (failed, out) = run(
        &w,
        Level::WorkspaceWrite,
        json!({"command": format!("touch '{}'", outside.display())}),
    )
    .await;
    assert!(failed && out.contains("Permission denied"), "{out}");
    assert!(!outside.exists());
    // A command approved above read-only runs confined too.
    let approved = common::pick(
        w.tools(Policy::new(Level::ReadOnly, Some(Arc::new(AllowAll)))),
        "shell",
    );
    let out = common::call(&approved, &w.lead, write_out.clone())
        .await
        .unwrap();
    assert!(out.is_error, "{}", text(&out));
    assert!(text(&out).contains("sandbox: landlock"), "{}", text(&out));
    assert!(!outside.exists());
    // `full` is unconfined.
    let (failed, out) = run(&w, Level::Full, write_out).await;
    assert!(!failed, "{out}");
    assert!(out.contains("sandbox: none (full access)"), "{out}");
    assert!(outside.exists());
}
