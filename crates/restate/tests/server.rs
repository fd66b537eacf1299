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
    EventPayload, ExtensionPayload, InboxTarget, MessageId, SessionEvent, SessionHeader, SessionId,
    SessionStore, StoreError, UserMessage,
};
use dsh_restate::client::{ClientError, RestateClient};
use dsh_restate::object::SessionSeed;
use dsh_restate::state::inbox::{AcceptRequest, Acceptance};
use dsh_restate::store::RestateSessionStore;
use serde_json::json;
use support::{Server, WORKER_ADDR, Worker, test_worker};

fn request(n: u32, target: InboxTarget) -> AcceptRequest {
    AcceptRequest {
        request_id: format!("request-{n}"),
        message: UserMessage::user_text(format!("message {n}")),
        target,
        wake: true,
    }
}

/// Accept request `n` into `session`'s inbox.
async fn accept(
    client: &RestateClient,
    session: &SessionId,
    n: u32,
    target: InboxTarget,
) -> Result<Acceptance, ClientError> {
    client.accept(session, &request(n, target)).await
}

/// Claim one list of `session`'s inbox: the message ids, in order.
async fn claim(client: &RestateClient, session: &SessionId, target: InboxTarget) -> Vec<MessageId> {
    let items = client.claim(session, target, None).await.unwrap();
    items.into_iter().map(|item| item.message.id).collect()
}

#[test]
fn the_inbox_accepts_once_claims_in_order_and_outlives_a_killed_worker() {
    if !support::isolated("the_inbox_accepts_once_claims_in_order_and_outlives_a_killed_worker") {
        return;
    }
    support::run(async {
        let (server, worker) = Server::with_worker(test_worker(WORKER_ADDR, None)).await;
        let lead = SessionId::new("lead").unwrap();
        let (client, queue, steer) = (&server.client, InboxTarget::NextTurn, InboxTarget::NextStep);

        let first = accept(client, &lead, 1, queue).await.unwrap();
        assert!(!first.duplicate && first.schedule_turn);
        let second = accept(client, &lead, 2, queue).await.unwrap();
        assert!(!second.duplicate && !second.schedule_turn);
        let steered = accept(client, &lead, 3, steer).await.unwrap();
        // The same request again (a sender's retry, with a fresh message):
        // acknowledged with the first message's id, queued once.
        let again = accept(client, &lead, 1, queue).await.unwrap();
        assert!(again.duplicate);
        assert_eq!(again.message_id, first.message_id);

        // The state is the server's: a worker killed and started again
        // finds it whole.
        worker.kill9();
        let worker = Worker::start(test_worker(WORKER_ADDR, None));
        let after = accept(client, &lead, 2, queue).await.unwrap();
        assert!(after.duplicate);
        assert_eq!(after.message_id, second.message_id);
        assert_eq!(
            claim(client, &lead, queue).await,
            [first.message_id, second.message_id]
        );
        assert_eq!(claim(client, &lead, queue).await, []);
        assert_eq!(claim(client, &lead, steer).await, [steered.message_id]);

        // Discarded items are never claimed; a drained inbox refuses new
        // input by name but still acknowledges a repeat.
        let fourth = accept(client, &lead, 4, queue).await.unwrap();
        client.discard(&lead, &[fourth.message_id]).await.unwrap();
        assert_eq!(claim(client, &lead, queue).await, []);
        client.drain(&lead).await.unwrap();
        let refused = accept(client, &lead, 5, queue).await.unwrap_err();
        assert!(
            matches!(&refused, ClientError::Status { status: 409, body, .. } if body.contains("DRAINING")),
            "{refused}"
        );
        assert!(accept(client, &lead, 1, queue).await.unwrap().duplicate);
        assert_eq!(claim(client, &lead, queue).await, []);
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
        let (server, worker) = Server::with_worker(test_worker(WORKER_ADDR, None)).await;
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
