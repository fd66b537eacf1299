//! The delegation and control tools a worker offers (`subagent`, `fork`,
//! `list_agents`, `send_message`, `wait`, `interrupt_agent`), each run by
//! the engine as calls between objects, against the real server and two
//! real test workers, each test in its own network namespace. The
//! model-visible results are the local tools' texts (snapshotted); the
//! kill test cuts a worker while a parent `wait`s. Every tree is read back
//! exported and replayed (`support::logs`). Ordering comes from gates
//! (FIFOs), never from sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_core::{EventPayload, InboxTarget, MessageSource, SessionEvent, SessionId, UserMessage};
use dsh_restate::state::inbox::AcceptRequest;
use serde_json::json;
use support::cluster::{Cluster, POLL};
use support::logs::{assistant_texts, export_and_check, results, text};

fn id(text: &str) -> SessionId {
    SessionId::new(text).unwrap()
}

/// Wait until the child `child` exists, has ended a turn and is idle.
async fn child_settled(cluster: &Cluster, child: &str) {
    let child = id(child);
    loop {
        if let Ok(status) = cluster.client().status(&child).await
            && status.head.turns_ended >= 1
            && status.is_idle()
        {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Wait until the log of `session` holds each of `needles`.
async fn logged(cluster: &Cluster, session: &str, needles: &[&str]) {
    let session = id(session);
    loop {
        let page = cluster.client().events_since(&session, 0).await.unwrap();
        if needles.iter().all(|needle| page.lines.contains(needle)) {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Wait until the lead's log holds each of `notices` (a notice's first
/// words): the notices sent are in, so nothing more is on its way.
async fn heard(cluster: &Cluster, notices: &[&str]) {
    logged(cluster, "lead", notices).await;
}

/// Wait until every session of `ids` exists and is idle and the server
/// holds no invocation addressed to any of them (a turn, an accept, a
/// notice on its way).
async fn quiet(cluster: &Cluster, ids: &[&str]) {
    let ids: Vec<SessionId> = ids.iter().map(|text| id(text)).collect();
    loop {
        let mut idle = cluster.client().in_flight(&ids).await.unwrap() == 0;
        for id in &ids {
            idle &= cluster
                .client()
                .status(id)
                .await
                .is_ok_and(|status| status.is_idle());
        }
        if idle {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The texts of the user messages of `events` that `source` matches.
fn users(events: &[SessionEvent], agent_messages: bool) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::UserMessage(user) => {
                let matches = match &user.message.source {
                    MessageSource::SubagentSettled { .. } => !agent_messages,
                    MessageSource::AgentMessage { .. } => agent_messages,
                    _ => false,
                };
                matches.then(|| text(&user.message.content))
            }
            _ => None,
        })
        .collect()
}

/// The results of `events` as the model read them, one per line.
fn result_texts(events: &[SessionEvent]) -> Vec<String> {
    results(events)
        .iter()
        .map(|result| {
            let mark = if result.is_error { "error: " } else { "" };
            format!("{mark}{}", text(&result.content))
        })
        .collect()
}

/// The catalog entries' payloads.
fn catalog(events: &[SessionEvent]) -> Vec<serde_json::Value> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::Extension { kind, payload } if kind == "subagent/child" => {
                Some(payload.to_value())
            }
            _ => None,
        })
        .collect()
}

/// Refusals and a timeout read as the local tools': a wait that times out,
/// one out of range, a message to nobody or to oneself, an interrupt of
/// oneself, an unknown tool (told every tool, the engine's among them),
/// input that fails the tool's schema, a budget the cluster does not
/// enforce, a bad name, a name taken twice, and a child past the depth
/// limit.
#[test]
fn refusals_and_a_timeout_read_as_the_local_tools() {
    if !support::isolated("refusals_and_a_timeout_read_as_the_local_tools") {
        return;
    }
    support::run(async {
        let spawn = |name: &str| json!({"tool": "subagent", "input": {"description": "d", "prompt": "p", "name": name}});
        let sessions = json!({
            "lead": [
            {"calls": [
                {"tool": "wait", "input": {"timeout_ms": 1}},
                {"tool": "wait", "input": {"timeout_ms": 0}},
                {"tool": "nope", "input": {}},
                {"tool": "send_message", "input": {"to": "nobody", "message": "hi"}},
                {"tool": "send_message", "input": {"to": "lead", "message": "hi"}},
                {"tool": "interrupt_agent", "input": {"to": "lead"}},
                {"tool": "interrupt_agent", "input": {}},
                {"tool": "subagent", "input": {"description": "d", "prompt": "p", "token_budget": 5}},
                {"tool": "subagent", "input": {"description": "d", "prompt": "p", "colour": "red"}},
                spawn("Bad Name"),
                spawn("kid"),
                spawn("kid"),
            ]},
            {"text": "done"},
            ],
            // One level only: `kid` may not start a child of its own.
            "lead.1": [
                {"calls": [{"tool": "subagent", "input": {"description": "d", "prompt": "p"}}]},
                {"text": "done"},
            ],
        });
        let cluster = Cluster::start_with_max_depth(sessions, &[], 1).await;
        let lead = cluster.start_lead().await;
        child_settled(&cluster, "lead.1").await;
        heard(&cluster, &["[kid completed"]).await;
        quiet(&cluster, &["lead", "lead.1"]).await;
        let logs = export_and_check(&cluster, &lead, &[]).await;
        insta::assert_snapshot!(result_texts(&logs[0].1).join("\n---\n"));
        assert_eq!(logs.len(), 2, "the kid started no child");
        assert_eq!(
            result_texts(&logs[1].1),
            [
                "error: No subagent was started: delegation depth limit reached: a child here would be at depth 2, and the limit is 1. Solve the task yourself."
            ]
        );
    });
}

/// `subagent` and `fork` start children in the background by default,
/// each cataloged once with its name (the model's, or the first free
/// `agent-N`); the fork's log starts as a copy of the lead's completed
/// turns; each child's notice is worded as a local one and heard once.
#[test]
fn spawned_and_forked_children_settle_with_the_local_notices() {
    if !support::isolated("spawned_and_forked_children_settle_with_the_local_notices") {
        return;
    }
    support::run(async {
        let sessions = json!({
            "lead": [
                {"text": "first turn"},
                {"calls": [
                    {"tool": "subagent", "input": {"description": "search", "prompt": "p1", "name": "scout"}},
                    {"tool": "fork", "input": {"description": "review", "prompt": "p2"}},
                ]},
                {"text": "waiting"},
            ],
            "lead.1": [{"text": "scout found it"}],
            // The fork's first step is its second: its seed holds the
            // lead's first answer.
            "lead.2": [{}, {"text": "the review"}],
        });
        let cluster = Cluster::start(sessions, &[]).await;
        let lead = cluster.start_lead().await;
        cluster.wait_turns(&lead, 1).await;
        let second = AcceptRequest {
            request_id: "second".to_owned(),
            message: UserMessage::user_text("second"),
            target: InboxTarget::NextTurn,
            wake: true,
        };
        cluster.client().accept(&lead, &second).await.unwrap();
        for child in ["lead.1", "lead.2"] {
            child_settled(&cluster, child).await;
        }
        heard(&cluster, &["[scout completed", "[agent-1 completed"]).await;
        quiet(&cluster, &["lead", "lead.1", "lead.2"]).await;
        let logs = export_and_check(&cluster, &lead, &[]).await;
        let (lead_log, scout, fork) = (&logs[0].1, &logs[1].1, &logs[2].1);
        let entries = catalog(lead_log);
        assert_eq!(entries.len(), 2, "{entries:?}");
        assert_eq!(
            (
                &entries[0]["name"],
                &entries[0]["provider"],
                &entries[0]["label"]
            ),
            (&json!("scout"), &json!("spawn"), &json!("search"))
        );
        assert_eq!(
            (&entries[1]["name"], &entries[1]["provider"]),
            (&json!("agent-1"), &json!("fork"))
        );
        // The fork's log starts with the lead's first turn, whole.
        let first_turn = lead_log.iter().position(SessionEvent::is_turn_end).unwrap();
        assert_eq!(fork[..=first_turn], lead_log[..=first_turn]);
        assert_eq!(assistant_texts(scout), ["scout found it"]);
        let mut notices = users(lead_log, false);
        notices.sort();
        assert_eq!(
            notices,
            [
                "[agent-1 completed; stop reason: completed]\n\nthe review",
                "[scout completed; stop reason: completed]\n\nscout found it",
            ]
        );
        insta::assert_snapshot!(result_texts(lead_log).join("\n---\n"));
    });
}

/// `list_agents` lists the tree by name, `send_message` delivers into the
/// child's inbox by name, and the child's `wait` wakes on it; the child's
/// reply comes back as its notice.
#[test]
fn a_child_waits_for_the_message_its_lead_sends_by_name() {
    if !support::isolated("a_child_waits_for_the_message_its_lead_sends_by_name") {
        return;
    }
    support::run(async {
        let sessions = json!({
            "lead": [
                {"calls": [{"tool": "subagent", "input": {"description": "search the docs", "prompt": "p", "name": "kid"}}]},
                {"calls": [{"tool": "list_agents", "input": {}}]},
                {"calls": [{"tool": "send_message", "input": {"to": "kid", "message": "focus"}}]},
                {"text": "sent"},
            ],
            "lead.1": [
                {"calls": [{"tool": "wait", "input": {"timeout_ms": 600_000}}]},
                {"text": "kid heard"},
            ],
        });
        let cluster = Cluster::start(sessions, &[]).await;
        let lead = cluster.start_lead().await;
        child_settled(&cluster, "lead.1").await;
        heard(&cluster, &["[kid completed"]).await;
        quiet(&cluster, &["lead", "lead.1"]).await;
        let logs = export_and_check(&cluster, &lead, &[]).await;
        let (lead_log, kid) = (&logs[0].1, &logs[1].1);
        let said = result_texts(lead_log);
        assert_eq!(said.len(), 3, "{said:?}");
        let listing: Vec<&str> = said[1].lines().collect();
        assert_eq!(listing.len(), 3, "{listing:?}");
        assert_eq!(listing[1], "- lead (you): running");
        assert!(listing[2].starts_with("- kid: "), "{listing:?}");
        assert!(listing[2].ends_with(" — search the docs"), "{listing:?}");
        assert_eq!(
            said[2],
            "Message delivered to `kid`. Any reply will arrive as a message to you."
        );
        assert_eq!(users(kid, true), ["p", "focus"]);
        assert_eq!(
            result_texts(kid),
            ["1 item arrived for you: a message from `lead`. It follows this result."]
        );
        assert_eq!(
            users(lead_log, false),
            ["[kid completed; stop reason: completed]\n\nkid heard"]
        );
    });
}

/// A lead that starts `kid` and interrupts it in its second step (gated
/// at `lead`), then says "stopped it" (gated at `after`); `kid_first` is
/// the child's first step, whose reply is gated at `kid`.
fn interrupting_lead(kid_first: serde_json::Value) -> serde_json::Value {
    json!({
        "lead": [
            {"calls": [{"tool": "subagent", "input": {"description": "d", "prompt": "p", "name": "kid"}}]},
            {"calls": [{"tool": "interrupt_agent", "input": {"to": "kid"}}], "gate": "lead"},
            {"text": "stopped it", "gate": "after"},
        ],
        "lead.1": [kid_first, {"text": "never said"}],
    })
}

/// Once the interrupted tree is quiet: the logs of the lead and the child,
/// checked; the child never took its second step, and its notice says it
/// was stopped.
async fn interrupted_tree(cluster: &Cluster) -> (Vec<SessionEvent>, Vec<SessionEvent>) {
    child_settled(cluster, "lead.1").await;
    heard(cluster, &["[kid was stopped"]).await;
    quiet(cluster, &["lead", "lead.1"]).await;
    let mut logs = export_and_check(cluster, &id("lead"), &["lead.1"]).await;
    let (kid, lead) = (logs.remove(1).1, logs.remove(0).1);
    assert!(!assistant_texts(&kid).contains(&"never said".to_owned()));
    assert_eq!(
        users(&lead, false),
        ["[kid was stopped before finishing; stop reason: aborted]"]
    );
    (lead, kid)
}

/// `interrupt_agent` stops a running child's turn (it ends `aborted` after
/// its step in flight, its notice says so); the child stays in the tree.
#[test]
fn a_lead_interrupts_its_running_child() {
    if !support::isolated("a_lead_interrupts_its_running_child") {
        return;
    }
    support::run(async {
        let kid_first = json!({"calls": [{"tool": "count_idempotent", "input": {"label": "kid"}}], "gate": "kid"});
        let cluster = Cluster::start(interrupting_lead(kid_first), &["lead", "kid", "after"]).await;
        cluster.start_lead().await;
        cluster.started("kid").await;
        cluster.started("lead").await;
        cluster.open("lead").await;
        // The interrupt's result is journaled before the lead's next step.
        cluster.started("after").await;
        cluster.open("kid").await;
        cluster.open("after").await;
        let (lead, _) = interrupted_tree(&cluster).await;
        assert_eq!(
            result_texts(&lead)[1],
            "Stop requested for `kid`: its current turn ends shortly. It keeps its queued \
             messages and the agents it started, and stays available for send_message."
        );
    });
}

/// An interrupt ends a child's `wait` at once (as a cancelled local wait
/// ends), and its turn ends `aborted`.
#[test]
fn an_interrupt_ends_a_childs_wait() {
    if !support::isolated("an_interrupt_ends_a_childs_wait") {
        return;
    }
    support::run(async {
        let kid_first =
            json!({"calls": [{"tool": "wait", "input": {"timeout_ms": 600_000}}], "gate": "kid"});
        let cluster = Cluster::start(interrupting_lead(kid_first), &["lead", "kid", "after"]).await;
        cluster.start_lead().await;
        cluster.started("kid").await;
        cluster.open("kid").await;
        logged(&cluster, "lead.1", &["\"wait\""]).await;
        cluster.started("lead").await;
        cluster.open("lead").await;
        cluster.started("after").await;
        cluster.open("after").await;
        let (_, kid) = interrupted_tree(&cluster).await;
        assert_eq!(
            result_texts(&kid),
            ["error: The wait was cancelled before anything arrived."]
        );
    });
}

/// The kill test of `wait`: worker A dies while the lead waits for its
/// child's notice (and the child's step is in flight on A). The child's
/// step runs again on B, its notice wakes the lead's wait there, and the
/// lead sees it once; none of the lead's steps is asked twice.
#[test]
fn a_wait_cut_by_a_kill_resumes_on_the_other_worker_and_sees_the_notice_once() {
    if !support::isolated(
        "a_wait_cut_by_a_kill_resumes_on_the_other_worker_and_sees_the_notice_once",
    ) {
        return;
    }
    support::run(async {
        let sessions = json!({
            "lead": [
                {"calls": [{"tool": "subagent", "input": {"description": "d", "prompt": "p", "name": "kid"}}]},
                {"calls": [{"tool": "wait", "input": {"timeout_ms": 600_000}}]},
                {"text": "heard", "gate": "heard"},
            ],
            "lead.1": [{"text": "kid done", "gate": "kid"}],
        });
        let mut cluster = Cluster::start(sessions, &["kid", "heard"]).await;
        let lead = cluster.start_lead().await;
        cluster.started("kid").await;
        // The lead has made its wait call once its log holds it.
        logged(&cluster, "lead", &["\"wait\""]).await;
        cluster.kill_a();
        cluster.started("kid").await;
        cluster.open("kid").await;
        cluster.started("heard").await;
        cluster.open("heard").await;
        child_settled(&cluster, "lead.1").await;
        heard(&cluster, &["[kid completed"]).await;
        quiet(&cluster, &["lead", "lead.1"]).await;
        let logs = export_and_check(&cluster, &lead, &[]).await;
        let lead_log = &logs[0].1;
        assert_eq!(
            users(lead_log, false),
            ["[kid completed; stop reason: completed]\n\nkid done"]
        );
        assert_eq!(
            result_texts(lead_log)[1],
            "1 item arrived for you: a settlement notice from `kid`. It follows this result."
        );
        assert_eq!(assistant_texts(lead_log).last().unwrap(), "heard");
        let asks = cluster.record("asks");
        for step in ["lead 0", "lead 1", "lead 2"] {
            assert_eq!(
                asks.iter().filter(|ask| *ask == step).count(),
                1,
                "{asks:?}"
            );
        }
        assert_eq!(
            asks.iter().filter(|ask| *ask == "lead.1 0").count(),
            2,
            "{asks:?}"
        );
    });
}
