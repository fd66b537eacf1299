//! A long session's turn costs what a short one's does: after the first
//! turn of an activation (which projects the transcript from the log once),
//! a turn allocates no more with 10,000 prior messages than with 10, because
//! the loop keeps the transcript up to date write by write and hands each
//! model request shared chunks of it instead of replaying or copying the
//! history. Counted in allocations (a growing log's occasional doubling is
//! one), so the bound holds wherever the doublings fall. Nor does a turn
//! make a large allocation (the driver task it spawns included): glibc's
//! allocator answers one by first consolidating every free chunk, and a
//! long history leaves many. The only test in its binary: the counters
//! are process-wide.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_core::{
    AgentFactory, CancellationToken, CreateAgent, SessionHeader, SessionId, UserMessage,
};
use dsh_harness::{Harness, MemoryStore, Scripted, ScriptedModel};
use dsh_test_support::alloc::{
    CountingAllocator, LARGE_ALLOCATION, allocations, large_allocations,
};
use dsh_test_support::logs::conversation;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Allocations, and large ones, made by `turns` turns of an agent with
/// `prior` messages of history, after one warm-up turn.
async fn allocations_per_turns(prior: u64, turns: usize) -> (usize, usize) {
    let model = Arc::new(
        ScriptedModel::new()
            .without_recording()
            .responder(|_| Scripted::Text("ok".into())),
    );
    let harness = Harness::builder(Arc::new(MemoryStore::new()))
        .model(model)
        .build()
        .unwrap();
    let handle = harness
        .create(CreateAgent {
            header: SessionHeader::new(SessionId::new(format!("long-{prior}")).unwrap(), "/"),
            seed: conversation(prior),
            setup: Default::default(),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
    let agent = handle.agent().clone();
    agent
        .followup(UserMessage::user_text("warm up"))
        .await
        .unwrap();
    agent.wait_idle().await;
    let before = allocations();
    let large_before = large_allocations();
    for _ in 0..turns {
        agent.followup(UserMessage::user_text("go")).await.unwrap();
        agent.wait_idle().await;
    }
    let spent = allocations() - before;
    let large = large_allocations() - large_before;
    assert_eq!(
        agent.events().len() as u64,
        prior * 2 + 8 * (turns as u64 + 1)
    );
    handle.dispose().await;
    (spent, large)
}

#[tokio::test]
async fn a_turn_allocates_the_same_with_ten_thousand_prior_messages_as_with_ten() {
    let turns = 20;
    let (short, _) = allocations_per_turns(10, turns).await;
    let (long, large) = allocations_per_turns(10_000, turns).await;
    // A replay or a copy of the history would cost over 10,000 allocations
    // a turn; sharing costs a handful more at most.
    assert!(
        long <= short + short / 4,
        "{turns} turns allocated {long} times with 10,000 prior messages, {short} with 10"
    );
    // What is left are the log's and the transcript's occasional growth
    // (a new chunk every 64 messages), never one per turn.
    assert!(
        large < turns / 4,
        "{turns} turns made {large} allocations of {LARGE_ALLOCATION} bytes or more"
    );
}
