//! End to end against the real `restate-server` (installed by
//! `crates/restate/server/install.sh`) and real `dsh-restate-worker`
//! processes, each test in its own private network namespace
//! (`support::isolated`): the inbox's dedupe and order through the
//! ingress, surviving a `kill -9` of its worker.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use dsh_core::{InboxTarget, SessionId, UserMessage};
use dsh_restate::state::inbox::AcceptRequest;
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
    support::runtime().block_on(async {
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
        drop(worker);
    });
}
