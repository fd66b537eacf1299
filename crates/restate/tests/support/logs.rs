//! What every test of a tree reads back: the tree exported as JSONL with
//! dsh's own store, each session replayed (`harness::replay`) and checked
//! (each user message once, every tool call answered once, every turn
//! ended), every invocation completed; and small readers of a log's
//! results and texts. Shared by the kill tests and the tool tests.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::PathBuf;

use dsh_core::session::ToolResultEntry;
use dsh_core::{ContentBlock, EventPayload, SessionEvent, SessionId, SessionStore, StopReason};
use dsh_harness::JsonlStore;
use dsh_harness::replay::{Verdict, replay_session};
use dsh_restate::store::RestateSessionStore;

use super::cluster::Cluster;

/// Export `root`'s tree, load every session with dsh's JSONL store,
/// replay each, and check what every tree must hold; returns the
/// sessions' logs. The `interrupted` sessions may end turns `aborted`.
pub async fn export_and_check(
    cluster: &Cluster,
    root: &SessionId,
    interrupted: &[&str],
) -> Vec<(SessionId, Vec<SessionEvent>)> {
    // As `dsh export` copies a tree: each member loaded through the
    // cluster's read-side store, created whole in a local JSONL store.
    let out: PathBuf = cluster.dir.path().join("export");
    let ids = dsh_restate::tree::members(cluster.client(), root)
        .await
        .unwrap();
    let cluster_store = RestateSessionStore::new(cluster.client().clone());
    let store = JsonlStore::new(&out, dsh_core::Durability::default()).unwrap();
    for id in &ids {
        let loaded = cluster_store.load(id).await.unwrap();
        store
            .create(&loaded.header, &loaded.events)
            .await
            .unwrap()
            .close()
            .await;
    }
    let mut logs = Vec::new();
    for id in ids {
        let loaded = store.load(&id).await.unwrap();
        assert!(loaded.torn_tail.is_none());
        let verdict = replay_session(&loaded.header, &loaded.events);
        assert!(
            matches!(verdict, Verdict::Identical { .. }),
            "{id}: {verdict:?}"
        );
        check_log(&id, &loaded.events, interrupted.contains(&id.as_str()));
        logs.push((id, loaded.events));
    }
    let rows = cluster
        .client()
        .query("select target_handler_name, status from sys_invocation")
        .await
        .unwrap();
    for row in rows {
        assert_eq!(row["status"], "completed", "{row}");
    }
    logs
}

/// Each user message once, every tool call answered once, every turn
/// ended `completed` (or `aborted`, for a session that was `interrupted`).
pub fn check_log(id: &SessionId, events: &[SessionEvent], interrupted: bool) {
    let mut users = std::collections::BTreeSet::new();
    let mut calls = std::collections::BTreeMap::new();
    for event in events {
        match &event.payload {
            EventPayload::UserMessage(user) => {
                assert!(
                    users.insert(user.message.id.clone()),
                    "{id}: {event:?} twice"
                );
            }
            EventPayload::ToolCall(call) => {
                assert!(calls.insert(call.call_id.clone(), 0).is_none());
            }
            EventPayload::ToolResult(result) => {
                *calls.get_mut(&result.call_id).unwrap() += 1;
            }
            EventPayload::TurnEnd(end) => {
                let aborted = interrupted && end.stop_reason == StopReason::ABORTED;
                assert!(
                    aborted || end.stop_reason == StopReason::COMPLETED,
                    "{id}: {end:?}"
                );
            }
            _ => {}
        }
    }
    assert!(
        calls.values().all(|answers| *answers == 1),
        "{id}: {calls:?}"
    );
}

pub fn results(events: &[SessionEvent]) -> Vec<&ToolResultEntry> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::ToolResult(result) => Some(result),
            _ => None,
        })
        .collect()
}

pub fn assistant_texts(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::AssistantMessage(entry) => Some(text(&entry.content)),
            _ => None,
        })
        .collect()
}

pub fn text(content: &[ContentBlock]) -> String {
    dsh_core::content::joined_text(content)
}
