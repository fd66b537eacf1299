//! End to end against the real `restate-server` (installed by
//! `crates/restate/server/install.sh`) and real `dsh-restate-worker`
//! processes, each test in its own private network namespace
//! (`support::isolated`): the inbox's dedupe and order through the
//! ingress, surviving a `kill -9` of its worker; the read-side session
//! store over the `dsh.Session` object's state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_core::session::TurnStart;
use dsh_core::{
    EventPayload, ExtensionPayload, InboxTarget, SessionEvent, SessionHeader, SessionId,
    SessionStore, StoreError, UserMessage,
};
use dsh_restate::client::ClientError;
use dsh_restate::object::SessionSeed;
use dsh_restate::state::inbox::AcceptRequest;
use dsh_restate::store::RestateSessionStore;
use serde_json::json;
use support::{Server, WORKER_ADDR, Worker};

fn request(n: u32, target: InboxTarget) -> AcceptRequest {
    AcceptRequest {
        request_id: format!("request-{n}"),
        message: UserMessage::user_text(format!("message {n}")),
        target,
        wake: true,
    }
}

#[test]
fn the_inbox_accepts_once_claims_in_order_and_outlives_a_killed_worker() {
    if !support::isolated("the_inbox_accepts_once_claims_in_order_and_outlives_a_killed_worker") {
        return;
    }
    support::run(async {
        let server = Server::start().await;
        let worker = Worker::start(WORKER_ADDR);
        server
            .client
            .register_deployment(&worker.uri)
            .await
            .unwrap();
        let lead = SessionId::new("lead").unwrap();
        let client = &server.client;

        let first = client
            .accept(&lead, &request(1, InboxTarget::NextTurn))
            .await
            .unwrap();
        assert!(!first.duplicate && first.schedule_turn);
        let second = client
            .accept(&lead, &request(2, InboxTarget::NextTurn))
            .await
            .unwrap();
        assert!(!second.duplicate && !second.schedule_turn);
        let steer = client
            .accept(&lead, &request(3, InboxTarget::NextStep))
            .await
            .unwrap();
        // The same request again (a sender's retry, with a fresh message):
        // acknowledged with the first message's id, queued once.
        let again = client
            .accept(&lead, &request(1, InboxTarget::NextTurn))
            .await
            .unwrap();
        assert!(again.duplicate);
        assert_eq!(again.message_id, first.message_id);

        // The state is the server's: a worker killed and started again
        // finds it whole.
        worker.kill9();
        let worker = Worker::start(WORKER_ADDR);
        let after = client
            .accept(&lead, &request(2, InboxTarget::NextTurn))
            .await
            .unwrap();
        assert!(after.duplicate);
        assert_eq!(after.message_id, second.message_id);

        let queue = client
            .claim(&lead, InboxTarget::NextTurn, None)
            .await
            .unwrap();
        let ids: Vec<_> = queue.iter().map(|item| item.message.id.clone()).collect();
        assert_eq!(ids, [first.message_id, second.message_id]);
        assert!(
            client
                .claim(&lead, InboxTarget::NextTurn, None)
                .await
                .unwrap()
                .is_empty()
        );
        let steered = client
            .claim(&lead, InboxTarget::NextStep, None)
            .await
            .unwrap();
        assert_eq!(steered.len(), 1);
        assert_eq!(steered[0].message.id, steer.message_id);

        // Discarded items are never claimed; a drained inbox refuses new
        // input by name but still acknowledges a repeat.
        let fourth = client
            .accept(&lead, &request(4, InboxTarget::NextTurn))
            .await
            .unwrap();
        client.discard(&lead, &[fourth.message_id]).await.unwrap();
        assert!(
            client
                .claim(&lead, InboxTarget::NextTurn, None)
                .await
                .unwrap()
                .is_empty()
        );
        client.drain(&lead).await.unwrap();
        let refused = client
            .accept(&lead, &request(5, InboxTarget::NextTurn))
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, ClientError::Status { status: 409, body, .. } if body.contains("DRAINING")),
            "{refused}"
        );
        assert!(
            client
                .accept(&lead, &request(1, InboxTarget::NextTurn))
                .await
                .unwrap()
                .duplicate
        );
        assert!(
            client
                .claim(&lead, InboxTarget::NextTurn, None)
                .await
                .unwrap()
                .is_empty()
        );
        drop(worker);
    });
}

/// A log of `len` events: a turn's start, then extension events whose
/// payloads carry text that JSON must escape (quotes, a newline, non-ASCII).
fn events(len: u64) -> Vec<SessionEvent> {
    (0..len)
        .map(|seq| SessionEvent {
            seq,
            time: 1_700_000_000_000 + seq,
            payload: if seq == 0 {
                EventPayload::TurnStart(TurnStart { turn: 0 })
            } else {
                EventPayload::Extension {
                    kind: "test/note".to_owned(),
                    payload: ExtensionPayload::new(
                        &json!({ "n": seq, "text": "a \"quote\",\nüber" }),
                    )
                    .unwrap(),
                }
            },
        })
        .collect()
}

#[test]
fn the_session_store_lists_and_loads_what_the_session_objects_hold() {
    if !support::isolated("the_session_store_lists_and_loads_what_the_session_objects_hold") {
        return;
    }
    support::run(async {
        let server = Server::start().await;
        let worker = Worker::start(WORKER_ADDR);
        server
            .client
            .register_deployment(&worker.uri)
            .await
            .unwrap();
        let store = RestateSessionStore::new(server.client.clone());

        // Two sessions: one longer than a page of chunks, one empty.
        let mut long = SessionHeader::new(SessionId::new("long").unwrap(), "/work");
        long.origin = Some("dsh".to_owned());
        let long_events = events(64 * 16 + 70);
        let short = SessionHeader::new(SessionId::new("short").unwrap(), "/tmp");
        for (header, seed) in [(&long, long_events.clone()), (&short, Vec::new())] {
            let seed = SessionSeed {
                header: header.clone(),
                seed,
            };
            server.client.create_session(&seed).await.unwrap();
        }

        assert_eq!(
            store.list().await.unwrap(),
            [long.id.clone(), short.id.clone()]
        );
        let loaded = store.load(&long.id).await.unwrap();
        assert_eq!(loaded.header, long);
        assert_eq!(loaded.events, long_events);
        assert_eq!(store.header(&short.id).await.unwrap(), short);
        assert!(store.load(&short.id).await.unwrap().events.is_empty());

        let missing = SessionId::new("missing").unwrap();
        assert!(!store.exists(&missing).await.unwrap());
        assert!(
            matches!(store.load(&missing).await, Err(StoreError::NotFound(id)) if id == missing)
        );
        assert!(matches!(
            store.open(&long.id).await,
            Err(StoreError::Locked(_))
        ));

        // A second create is refused by name, and changes nothing.
        let again = SessionSeed {
            header: long.clone(),
            seed: Vec::new(),
        };
        let refused = server.client.create_session(&again).await.unwrap_err();
        assert!(
            matches!(&refused, ClientError::Status { status: 409, body, .. } if body.contains("SESSION_EXISTS")),
            "{refused}"
        );
        assert_eq!(
            store.load(&long.id).await.unwrap().events.len(),
            long_events.len()
        );
        drop(worker);
    });
}
