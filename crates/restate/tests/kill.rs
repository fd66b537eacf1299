//! The kill tests of issue 35 (B60, B61): real `restate-server`, two real
//! `dsh-restate-worker` processes behind one failover address
//! (`support::Front`), each test in its own network namespace. Every kill
//! lands at a gate (a FIFO the gated step writes to and then waits on),
//! never after a sleep. The assertions read the tree exported as JSONL
//! (through the cluster's read-side store, as `dsh export` copies it)
//! with dsh's own store, replay each session with `harness::replay`, and
//! count the model's asks and the tools' runs from the files the test
//! worker appends to across processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_core::{
    EventPayload, InboxTarget, MessageSource, SessionEvent, SessionId, StopReason, UserMessage,
};
use dsh_restate::client::ClientError;
use dsh_restate::object::WORKER_STOPPED_TOOL_CALL;
use dsh_restate::state::inbox::AcceptRequest;
use serde_json::{Value, json};
use support::cluster::{Cluster, POLL, lead};
use support::logs::{assistant_texts, export_and_check, results, text};

/// Kill test 2: a worker dies during a tool call, after the model step
/// that made the call was journaled. The model is not asked again; a tool
/// that is not idempotent is not run again and answers that its outcome
/// is unknown; an idempotent one runs again; the turn goes on, on B.
fn kill_during_a_tool_call(tool: &str) -> (Vec<String>, Vec<String>, Vec<SessionEvent>) {
    let mut outcome = None;
    support::run(async {
        let sessions = json!({"lead": [
            {"calls": [{"tool": tool, "input": {"label": "a", "gate": "tool"}}]},
            {"text": "finished"},
        ]});
        let mut cluster = Cluster::start(sessions, &["tool"]).await;
        let id = cluster.start_lead().await;
        cluster.started("tool").await;
        cluster.kill_a();
        if tool == "count_idempotent" {
            // Run again on B: let that run through.
            cluster.started("tool").await;
            cluster.open("tool").await;
        }
        cluster.client().wait_idle(&id, POLL).await.unwrap();
        let mut logs = export_and_check(&cluster, &id, &[]).await;
        let (_, events) = logs.remove(0);
        outcome = Some((cluster.record("asks"), cluster.record("runs"), events));
    });
    outcome.unwrap()
}

#[test]
fn a_cut_tool_call_that_is_not_idempotent_is_not_run_again() {
    if !support::isolated("a_cut_tool_call_that_is_not_idempotent_is_not_run_again") {
        return;
    }
    let (asks, runs, events) = kill_during_a_tool_call("count");
    assert_eq!(asks, ["lead 0", "lead 1"]);
    assert_eq!(runs, ["a"]);
    let results = results(&events);
    assert_eq!(results.len(), 1);
    assert!(results[0].is_error);
    assert_eq!(text(&results[0].content), WORKER_STOPPED_TOOL_CALL);
    assert_eq!(assistant_texts(&events).last().unwrap(), "finished");
}

#[test]
fn a_cut_tool_call_that_is_idempotent_runs_again() {
    if !support::isolated("a_cut_tool_call_that_is_idempotent_runs_again") {
        return;
    }
    let (asks, runs, events) = kill_during_a_tool_call("count_idempotent");
    assert_eq!(asks, ["lead 0", "lead 1"]);
    assert_eq!(runs, ["a", "a"]);
    let results = results(&events);
    assert_eq!(results.len(), 1);
    assert!(!results[0].is_error);
    assert_eq!(text(&results[0].content), "counted a");
}

/// Kill test 4 (and 1's model half): the lead's worker dies while a model
/// step is in flight; two follow-ups and a steer sent then are each
/// accepted, claimed once and in order; the cut step is asked at most
/// twice, every other step once.
#[test]
fn input_sent_while_a_worker_is_dead_is_claimed_once_in_order() {
    if !support::isolated("input_sent_while_a_worker_is_dead_is_claimed_once_in_order") {
        return;
    }
    support::run(async {
        let sessions = json!({"lead": [
            {"text": "first", "gate": "model"},
            {"text": "second"},
            {"text": "third"},
            {"text": "fourth"},
        ]});
        let mut cluster = Cluster::start(sessions, &["model"]).await;
        let (id, header) = lead();
        let client = cluster.client().clone();
        client
            .start(&header, UserMessage::user_text("m1"))
            .await
            .unwrap();
        cluster.started("model").await;
        cluster.kill_a();
        let mut sent = Vec::new();
        for (n, target) in [
            (2, InboxTarget::NextTurn),
            (3, InboxTarget::NextStep),
            (4, InboxTarget::NextTurn),
        ] {
            let message = UserMessage::user_text(format!("m{n}"));
            sent.push(message.id.clone());
            let request = AcceptRequest {
                request_id: format!("r{n}"),
                message,
                target,
                wake: true,
            };
            let first = client.accept(&id, &request).await.unwrap();
            let again = client.accept(&id, &request).await.unwrap();
            assert!(!first.duplicate && again.duplicate);
        }
        // The cut step is asked again on B: let it through.
        cluster.started("model").await;
        cluster.open("model").await;
        client.wait_idle(&id, POLL).await.unwrap();
        let mut logs = export_and_check(&cluster, &id, &[]).await;
        let (_, events) = logs.remove(0);
        let users: Vec<String> = events
            .iter()
            .filter_map(|event| match &event.payload {
                EventPayload::UserMessage(user) => Some(text(&user.message.content)),
                _ => None,
            })
            .collect();
        assert_eq!(users.len(), 4);
        assert_eq!(users[0], "m1");
        // The steer joins the first turn if it arrived before that turn's
        // last step boundary, else the next; the follow-ups keep their order.
        let followups: Vec<&String> = users.iter().filter(|u| *u != "m3").collect();
        assert_eq!(followups, ["m1", "m2", "m4"]);
        let asks = cluster.record("asks");
        assert_eq!(asks.iter().filter(|ask| *ask == "lead 0").count(), 2);
        assert_eq!(asks.len(), assistant_texts(&events).len() + 1, "{asks:?}");
    });
}

fn count(asks: &[String], ask: &str) -> usize {
    asks.iter().filter(|line| *line == ask).count()
}

fn notices(events: &[SessionEvent]) -> usize {
    events
        .iter()
        .filter(|event| {
            matches!(&event.payload, EventPayload::UserMessage(user)
                if matches!(user.message.source, MessageSource::SubagentSettled { .. }))
        })
        .count()
}

fn catalog_entries(events: &[SessionEvent]) -> usize {
    events
        .iter()
        .filter(|event| matches!(&event.payload, EventPayload::Extension { kind, .. } if kind == "subagent/child"))
        .count()
}

/// A lead that starts one background child (`lead.1`, whose only model
/// step waits at gate `child`), then waits, then answers the notice.
fn background_tree() -> Value {
    json!({
        "lead": [
            {"calls": [{"tool": "subagent", "input": {"description": "work", "prompt": "work"}}]},
            {"text": "waiting"},
            {"text": "heard"},
        ],
        "lead.1": [{"text": "child done", "gate": "child"}],
    })
}

/// Once the child's gated step was cut once and run again: the tree ends
/// with one catalog entry and one notice, the child's step asked twice and
/// every lead step once (its second, in flight or not at the cut, at most
/// twice).
async fn check_background_tree(cluster: &Cluster, id: &SessionId, child: &SessionId) {
    cluster.wait_turns(child, 1).await;
    cluster.wait_turns(id, 2).await;
    let logs = export_and_check(cluster, id, &[]).await;
    assert_eq!(logs.len(), 2);
    let (lead_log, child_log) = (&logs[0].1, &logs[1].1);
    assert_eq!(&logs[1].0, child);
    assert_eq!(catalog_entries(lead_log), 1);
    assert_eq!(notices(lead_log), 1);
    assert_eq!(assistant_texts(child_log), ["child done"]);
    assert_eq!(assistant_texts(lead_log).last().unwrap(), "heard");
    let asks = cluster.record("asks");
    assert_eq!(count(&asks, "lead.1 0"), 2, "{asks:?}");
    assert_eq!(count(&asks, "lead 0"), 1, "{asks:?}");
    assert!(count(&asks, "lead 1") <= 2, "{asks:?}");
    assert_eq!(count(&asks, "lead 2"), 1, "{asks:?}");
}

/// Kill test 1: the worker dies while a background child's model step is
/// in flight. Every journaled step ran once, the cut one twice (A, then
/// B), the tree finishes on B, and the lead hears the child's notice once.
#[test]
fn a_child_cut_mid_model_step_finishes_on_the_other_worker() {
    if !support::isolated("a_child_cut_mid_model_step_finishes_on_the_other_worker") {
        return;
    }
    support::run(async {
        let mut cluster = Cluster::start(background_tree(), &["child"]).await;
        let id = cluster.start_lead().await;
        let child = SessionId::new("lead.1").unwrap();
        cluster.kill_a_at_and_rerun("child").await;
        check_background_tree(&cluster, &id, &child).await;
    });
}

/// Kill test 3: the worker dies while a foreground parent waits on its
/// child (the parent's turn suspended on an awakeable). No step of the
/// parent runs again; it resumes with the child's reply when the child
/// settles; no notice is sent for a foreground child's first settlement.
#[test]
fn a_foreground_parent_resumes_when_its_child_settles_after_a_kill() {
    if !support::isolated("a_foreground_parent_resumes_when_its_child_settles_after_a_kill") {
        return;
    }
    support::run(async {
        let sessions = json!({
            "lead": [
                {"calls": [{"tool": "subagent", "input": {"description": "work", "prompt": "work", "run_in_background": false}}]},
                {"text": "got it"},
            ],
            "lead.1": [{"text": "child answer", "gate": "child"}],
        });
        let mut cluster = Cluster::start(sessions, &["child"]).await;
        let id = cluster.start_lead().await;
        let child = SessionId::new("lead.1").unwrap();
        cluster.kill_a_at_and_rerun("child").await;
        cluster.wait_turns(&id, 1).await;
        cluster.wait_turns(&child, 1).await;
        let logs = export_and_check(&cluster, &id, &[]).await;
        let lead_log = &logs[0].1;
        let results = results(lead_log);
        assert_eq!(results.len(), 1);
        assert_eq!(text(&results[0].content), "child answer");
        assert_eq!(notices(lead_log), 0);
        assert_eq!(catalog_entries(lead_log), 1);
        let asks = cluster.record("asks");
        assert_eq!(count(&asks, "lead 0"), 1, "{asks:?}");
        assert_eq!(count(&asks, "lead 1"), 1, "{asks:?}");
        assert_eq!(count(&asks, "lead.1 0"), 2, "{asks:?}");
    });
}

/// Kill test 5: the server itself stops (SIGTERM) and starts again on its
/// data while a background child's model step is in flight. Nothing is
/// lost: the child's step is asked again by the new attempt (the old
/// attempt, cut, is let through its gate first and its answer goes
/// nowhere), the lead hears one notice, every other step ran once.
#[test]
fn a_server_restart_mid_tree_loses_nothing() {
    if !support::isolated("a_server_restart_mid_tree_loses_nothing") {
        return;
    }
    support::run(async {
        let mut cluster = Cluster::start(background_tree(), &["child"]).await;
        let id = cluster.start_lead().await;
        let child = SessionId::new("lead.1").unwrap();
        cluster.started("child").await;
        cluster.server.restart().await;
        // The cut attempt still waits at the gate; the new one waits to
        // announce itself, so this opening can only reach the cut one.
        cluster.open("child").await;
        cluster.started("child").await;
        cluster.open("child").await;
        check_background_tree(&cluster, &id, &child).await;
    });
}

/// Kill test 6: a three-level tree whose turns ran on both workers (A
/// until it is killed mid-step in the grandchild, B after); then the
/// middle subtree is drained across them: its members refuse input, the
/// grandchild's turn, asked again on B, ends `aborted` with its reply kept,
/// and its notice waits in the drained parent's inbox without waking it.
#[test]
fn a_subtree_drains_across_workers() {
    if !support::isolated("a_subtree_drains_across_workers") {
        return;
    }
    support::run(async {
        let background = |prompt: &str| json!({"calls": [{"tool": "subagent", "input": {"description": prompt, "prompt": prompt}}]});
        let sessions = json!({
            "lead": [background("mid"), {"text": "waiting"}, {"text": "heard"}],
            "lead.1": [background("deep"), {"text": "mid waiting"}],
            "lead.1.1": [{"text": "deep", "gate": "deep"}],
        });
        let mut cluster = Cluster::start(sessions, &["deep"]).await;
        let id = cluster.start_lead().await;
        let (mid, deep) = (
            SessionId::new("lead.1").unwrap(),
            SessionId::new("lead.1.1").unwrap(),
        );
        cluster.started("deep").await;
        cluster.kill_a();
        cluster.started("deep").await;
        let drained = dsh_restate::tree::drain(cluster.client(), &mid)
            .await
            .unwrap();
        assert_eq!(drained, [mid.clone(), deep.clone()]);
        let refused = cluster
            .client()
            .accept(
                &mid,
                &AcceptRequest {
                    request_id: "late".to_owned(),
                    message: UserMessage::user_text("late"),
                    target: InboxTarget::NextTurn,
                    wake: true,
                },
            )
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("DRAINING"), "{refused}");
        cluster.open("deep").await;
        cluster.wait_turns(&deep, 1).await;
        cluster.wait_turns(&id, 2).await;
        cluster.wait_turns(&mid, 1).await;
        let logs = export_and_check(&cluster, &id, &["lead.1.1"]).await;
        let log = |session: &SessionId| &logs.iter().find(|(id, _)| id == session).unwrap().1;
        let deep_end = log(&deep)
            .iter()
            .rev()
            .find_map(|event| match &event.payload {
                EventPayload::TurnEnd(end) => Some(end.stop_reason.clone()),
                _ => None,
            });
        assert_eq!(deep_end, Some(StopReason::ABORTED));
        assert_eq!(assistant_texts(log(&deep)), ["deep"]);
        assert_eq!(notices(log(&id)), 1);
        assert_eq!(notices(log(&mid)), 0);
        assert_eq!(catalog_entries(log(&mid)), 1);
        let mid_status = cluster.client().status(&mid).await.unwrap();
        assert!(mid_status.inbox.draining && mid_status.inbox.parked);
        assert_eq!(mid_status.inbox.queued, 1, "the grandchild's notice waits");
        assert_eq!(count(&cluster.record("asks"), "lead.1.1 0"), 2);
    });
}

/// With every worker gone, a turn cannot go on: waiting for the session
/// ends with a named error (the session, the failing invocation's status
/// and error), not a silent wait; asking about a session that does not
/// exist is a named error too.
#[test]
fn a_turn_with_no_worker_left_is_a_named_error() {
    if !support::isolated("a_turn_with_no_worker_left_is_a_named_error") {
        return;
    }
    support::run(async {
        let sessions = json!({"lead": [{"text": "never", "gate": "step"}]});
        let mut cluster = Cluster::start_with_one_worker(sessions, &["step"]).await;
        let id = cluster.start_lead().await;
        cluster.started("step").await;
        cluster.kill_a();
        let failing = cluster.client().wait_idle(&id, POLL).await.unwrap_err();
        match &failing {
            ClientError::TurnFailing {
                session, status, ..
            } => {
                assert_eq!(session, &id);
                assert!(status == "backing-off" || status == "paused", "{failing}");
            }
            other => panic!("expected TurnFailing, got {other}"),
        }
        let nobody = SessionId::new("nobody").unwrap();
        let missing = cluster.client().status(&nobody).await.unwrap_err();
        assert!(
            matches!(missing, ClientError::NoSuchSession(ref id) if *id == nobody),
            "{missing}"
        );
    });
}
