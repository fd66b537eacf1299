//! The permission policy: the whole matrix (level × tool × no asker, an
//! approving asker, a declining asker) as one table-driven test with the
//! effect on disk checked for every row; what the asker is told (agent,
//! tool, exact path or command); a call cancelled while asking; and the
//! serialising wrapper, driven by hand: one request at a time, in order,
//! a dropped request leaving the queue.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use async_trait::async_trait;
use common::{World, ctx, pick, text};
use dsh_core::SessionId;
use dsh_tool_workspace::{Answer, Asker, Level, Policy, Request, SerialAsker};
use serde_json::{Value, json};

/// Answers every request the same way and records it.
struct Recorder {
    answer: Answer,
    asked: Mutex<Vec<Request>>,
}

#[async_trait]
impl Asker for Recorder {
    async fn ask(&self, request: &Request) -> Answer {
        self.asked.lock().unwrap().push(request.clone());
        self.answer
    }
}

fn input(tool: &str) -> Value {
    match tool {
        "read_file" => json!({"path": "a.txt"}),
        "list_files" => json!({}),
        "grep" => json!({"pattern": "alpha"}),
        "edit_file" => json!({"path": "a.txt", "old_string": "alpha", "new_string": "beta"}),
        "write_file" => json!({"path": "new.txt", "content": "x"}),
        "shell" => json!({"command": "echo ran > shell.txt"}),
        other => panic!("{other}"),
    }
}

/// Whether the call's effect is on disk.
fn effect(w: &World, tool: &str) -> bool {
    match tool {
        "edit_file" => std::fs::read_to_string(w.root.join("a.txt")).unwrap() == "beta\n",
        "write_file" => w.root.join("new.txt").exists(),
        "shell" => w.root.join("shell.txt").exists(),
        _ => true,
    }
}

const TOOLS: [&str; 6] = [
    "read_file",
    "list_files",
    "grep",
    "edit_file",
    "write_file",
    "shell",
];

#[tokio::test]
async fn the_policy_matrix() {
    let w = World::new().await;
    let mut table =
        String::from("level           | tool       | asker   | outcome        | asked\n");
    for level in [Level::ReadOnly, Level::WorkspaceWrite, Level::Full] {
        for asker in [None, Some(Answer::Allow), Some(Answer::Deny)] {
            for tool in TOOLS {
                w.file("a.txt", "alpha\n");
                let _ = std::fs::remove_file(w.root.join("new.txt"));
                let _ = std::fs::remove_file(w.root.join("shell.txt"));
                let recorder = asker.map(|answer| {
                    Arc::new(Recorder {
                        answer,
                        asked: Mutex::new(Vec::new()),
                    })
                });
                let policy = Policy::new(level, recorder.clone().map(|r| r as Arc<dyn Asker>));
                let t = pick(w.tools(policy), tool);
                let result = common::call(&t, &w.lead, input(tool)).await;
                let asked = recorder
                    .as_ref()
                    .map_or(0, |r| r.asked.lock().unwrap().len());
                let outcome = match &result {
                    Ok(out) if !out.is_error => "ran",
                    Ok(out) => panic!("{tool}: {}", text(out)),
                    Err(e) if e.to_string().contains("there is no one to approve") => "refused",
                    Err(e) if e.to_string().contains("The user declined") => "declined",
                    Err(e) => panic!("{tool}: {e}"),
                };
                // What the table must say, independently of the snapshot.
                let writes = matches!(tool, "edit_file" | "write_file" | "shell");
                let above = writes && level == Level::ReadOnly;
                let expected = match (above, asker) {
                    (false, _) => "ran",
                    (true, None) => "refused",
                    (true, Some(Answer::Allow)) => "ran",
                    (true, Some(Answer::Deny)) => "declined",
                };
                assert_eq!(outcome, expected, "{level} {tool} {asker:?}");
                assert_eq!(
                    asked,
                    usize::from(above && asker.is_some()),
                    "{level} {tool}"
                );
                assert_eq!(
                    effect(&w, tool),
                    outcome == "ran",
                    "{level} {tool} {asker:?}"
                );
                let asker_name = match asker {
                    None => "none",
                    Some(Answer::Allow) => "allow",
                    Some(Answer::Deny) => "deny",
                };
                table.push_str(&format!(
                    "{:<15} | {tool:<10} | {asker_name:<7} | {outcome:<14} | {asked}\n",
                    level.as_str()
                ));
            }
        }
    }
    insta::assert_snapshot!("policy_matrix", table);
}

#[tokio::test]
async fn the_asker_is_told_the_agent_tool_and_exact_subject() {
    let w = World::new().await;
    let child = w.agent(&w.root).await;
    let recorder = Arc::new(Recorder {
        answer: Answer::Deny,
        asked: Mutex::new(Vec::new()),
    });
    let tools = w.tools(Policy::new(Level::ReadOnly, Some(recorder.clone())));
    let shell = pick(tools.clone(), "shell");
    let write = pick(tools, "write_file");
    let refusal = common::call(&shell, &child, json!({"command": "cargo test -p x"}))
        .await
        .unwrap_err()
        .to_string();
    common::call(
        &write,
        &w.lead,
        json!({"path": "src/new.rs", "content": ""}),
    )
    .await
    .unwrap_err();
    let asked = recorder.asked.lock().unwrap().clone();
    assert_eq!(
        asked,
        [
            Request {
                agent: child.id().clone(),
                tool: "shell".into(),
                subject: "cargo test -p x".into(),
                level: Level::ReadOnly,
                needed: Level::WorkspaceWrite,
            },
            Request {
                agent: SessionId::new("lead").unwrap(),
                tool: "write_file".into(),
                subject: "src/new.rs".into(),
                level: Level::ReadOnly,
                needed: Level::WorkspaceWrite,
            },
        ]
    );
    let no_asker = pick(w.tools(Policy::default()), "shell");
    let needs = common::call(&no_asker, &w.lead, json!({"command": "make"}))
        .await
        .unwrap_err()
        .to_string();
    insta::assert_snapshot!("policy_refusals", format!("{refusal}\n{needs}"));
}

/// Records what it is asked and answers `Allow` once a gate permit is given.
struct Gated {
    gate: tokio::sync::Semaphore,
    asked: Mutex<Vec<String>>,
}

#[async_trait]
impl Asker for Gated {
    async fn ask(&self, request: &Request) -> Answer {
        self.asked.lock().unwrap().push(request.subject.clone());
        self.gate.acquire().await.unwrap().forget();
        Answer::Allow
    }
}

fn request(subject: &str) -> Request {
    Request {
        agent: SessionId::new("lead").unwrap(),
        tool: "shell".into(),
        subject: subject.into(),
        level: Level::ReadOnly,
        needed: Level::WorkspaceWrite,
    }
}

fn poll<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn the_serial_asker_asks_one_at_a_time_in_order() {
    let asker = SerialAsker::new(Gated {
        gate: tokio::sync::Semaphore::new(0),
        asked: Mutex::new(Vec::new()),
    });
    let (r1, r2, r3, r4) = (
        request("one"),
        request("two"),
        request("three"),
        request("four"),
    );
    let inner = |a: &SerialAsker<Gated>| a.inner().asked.lock().unwrap().clone();
    let mut first = Box::pin(asker.ask(&r1));
    let mut second = pin!(asker.ask(&r2));
    let mut third = Box::pin(asker.ask(&r3));
    assert!(poll(first.as_mut()).is_pending());
    assert!(poll(second.as_mut()).is_pending());
    assert!(poll(third.as_mut()).is_pending());
    // Only the first is being asked; the others queue.
    assert_eq!(inner(&asker), ["one"]);
    // Dropped while asking: the next in line is asked.
    drop(first);
    assert!(poll(second.as_mut()).is_pending());
    assert_eq!(inner(&asker), ["one", "two"]);
    // Dropped while queued: it is never asked.
    drop(third);
    asker.inner().gate.add_permits(1);
    assert_eq!(poll(second.as_mut()), Poll::Ready(Answer::Allow));
    let mut fourth = pin!(asker.ask(&r4));
    assert!(poll(fourth.as_mut()).is_pending());
    assert_eq!(inner(&asker), ["one", "two", "four"]);
    asker.inner().gate.add_permits(1);
    assert_eq!(poll(fourth.as_mut()), Poll::Ready(Answer::Allow));
}

#[tokio::test]
async fn a_call_cancelled_while_asking_does_nothing() {
    let w = World::new().await;
    let gated = Arc::new(Gated {
        gate: tokio::sync::Semaphore::new(0),
        asked: Mutex::new(Vec::new()),
    });
    let write = pick(
        w.tools(Policy::new(Level::ReadOnly, Some(gated.clone()))),
        "write_file",
    );
    let context = ctx(&w.lead);
    let cancel = context.cancel.clone();
    let task = tokio::spawn(async move {
        write
            .execute(json!({"path": "never.txt", "content": "x"}), context)
            .await
    });
    let deadline = tokio::time::Instant::now() + common::BOUND;
    while gated.asked.lock().unwrap().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never asked");
        tokio::task::yield_now().await;
    }
    cancel.cancel();
    let result = tokio::time::timeout(common::BOUND, task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        result.unwrap_err().to_string(),
        "The call was cancelled before it finished."
    );
    assert!(!w.root.join("never.txt").exists());
}
