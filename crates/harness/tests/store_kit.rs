//! Tests of the store test kit of `dsh-test-support` (`FaultStore` and its
//! per-log counts, `GatedStore`, `SharedStore`, `until`, `bounded`) against the real stores, so the other
//! suites can trust what it injects: a failed call never reaches the inner
//! store, a stopped world stays stopped, and a gate holds a call exactly at
//! its point until released or dropped.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "test code")]

mod store_support;

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use dsh_core::{Durability, SessionStore};
use dsh_harness::store::{JsonlStore, MemoryStore};
use dsh_test_support::store::{Fault, FaultStore, GatedStore, Op, Point, SharedStore};
use dsh_test_support::wait::{bounded, until};
use futures::FutureExt;

use store_support::{header, io_source, sid, turn};

#[tokio::test]
async fn a_fault_fails_exactly_the_kth_call_with_the_os_error() {
    let store = FaultStore::new(MemoryStore::new());
    store.fail(Op::Append, 2, Fault::ENOSPC);
    let log = store.create(&header("a"), &[]).await.unwrap();
    log.append(&[turn(0)]).await.unwrap();
    let err = log.append(&[turn(1)]).await.unwrap_err();
    assert_eq!(err.code(), "STORE_IO");
    assert_eq!(io_source(&err).raw_os_error(), Some(28));
    assert_eq!(io_source(&err).kind(), io::ErrorKind::StorageFull);
    // The failed call never reached the inner store; the next one does.
    assert_eq!(store.inner().load(&sid("a")).await.unwrap().events.len(), 1);
    log.append(&[turn(1)]).await.unwrap();
    assert_eq!(store.calls(Op::Append), 3);
    assert_eq!(store.inner().load(&sid("a")).await.unwrap().events.len(), 2);
}

#[tokio::test]
async fn a_per_log_fault_counts_only_that_log() {
    let store = FaultStore::new(MemoryStore::new());
    store.fail_on_log(&sid("b"), Op::Append, 1, Fault::EIO);
    let a = store.create(&header("a"), &[]).await.unwrap();
    let b = store.create(&header("b"), &[]).await.unwrap();
    a.append(&[turn(0)]).await.unwrap();
    let err = b.append(&[turn(0)]).await.unwrap_err();
    assert_eq!(io_source(&err).raw_os_error(), Some(5));
    assert_eq!(store.calls_on_log(&sid("b"), Op::Append), 1);
    assert_eq!(store.calls_on_log(&sid("a"), Op::Append), 1);
    store.fail(Op::Open, 1, Fault::Kind(io::ErrorKind::PermissionDenied));
    let Err(err) = store.open(&sid("a")).await else {
        panic!("the open should have failed");
    };
    assert_eq!(io_source(&err).kind(), io::ErrorKind::PermissionDenied);
}

#[tokio::test]
async fn per_log_counts_list_only_the_logs_called_and_reset_keeps_the_plan() {
    let store = FaultStore::new(SharedStore(Arc::new(MemoryStore::new())));
    store.create(&header("a"), &[]).await.unwrap();
    store.create(&header("b"), &[]).await.unwrap();
    store.load(&sid("a")).await.unwrap();
    store.header(&sid("a")).await.unwrap();
    assert_eq!(
        store.calls_by_log(Op::Load),
        BTreeMap::from([(sid("a"), 2)]),
        "a header read is a load; b was never read"
    );
    assert_eq!(
        store.calls_by_log(Op::Create),
        BTreeMap::from([(sid("a"), 1), (sid("b"), 1)])
    );
    // A planned fault keeps its own count across the reset: the second load
    // of b fails, though it is the first the reset counts.
    store.fail_on_log(&sid("b"), Op::Load, 2, Fault::EIO);
    store.load(&sid("b")).await.unwrap();
    store.reset_calls();
    assert!(store.calls_by_log(Op::Load).is_empty());
    assert_eq!(store.calls(Op::Create), 0);
    let err = store.load(&sid("b")).await.unwrap_err();
    assert_eq!(io_source(&err).raw_os_error(), Some(5));
    assert_eq!(
        store.calls_by_log(Op::Load),
        BTreeMap::from([(sid("b"), 1)])
    );
}

#[tokio::test]
async fn a_stopped_world_lets_k_writes_through_and_nothing_after() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = JsonlStore::new(dir.path(), Durability::None).unwrap();
    let store = FaultStore::new(jsonl.clone());
    store.stop_after_writes(2);
    let log = store.create(&header("a"), &[]).await.unwrap();
    log.append(&[turn(0)]).await.unwrap();
    assert!(store.is_stopped());
    assert!(log.append(&[turn(1)]).await.is_err());
    assert!(log.checkpoint().await.is_err());
    assert!(store.load(&sid("a")).await.is_err());
    assert!(store.create(&header("b"), &[]).await.is_err());
    assert_eq!(store.writes(), 2);
    drop(log);
    // The inner store holds exactly the two acknowledged writes.
    let loaded = jsonl.load(&sid("a")).await.unwrap();
    assert_eq!(loaded.events, vec![turn(0)]);
    assert!(!jsonl.exists(&sid("b")).await.unwrap());
}

#[tokio::test]
async fn a_gate_before_holds_the_call_until_released() {
    let store = GatedStore::new(MemoryStore::new());
    let log = store.create(&header("a"), &[]).await.unwrap();
    let gate = store.gate(Op::Append, Point::Before);
    let events = [turn(0)];
    let mut append = log.append(&events).boxed();
    assert!(futures::poll!(&mut append).is_pending());
    assert!(gate.is_reached());
    assert!(
        store
            .inner()
            .load(&sid("a"))
            .await
            .unwrap()
            .events
            .is_empty()
    );
    gate.release();
    bounded(append).await.unwrap();
    assert!(gate.has_left());
    assert_eq!(store.inner().load(&sid("a")).await.unwrap().events.len(), 1);
    // One-shot: the next append passes.
    bounded(log.append(&[turn(1)])).await.unwrap();
}

#[tokio::test]
async fn a_future_dropped_at_a_gate_after_has_done_its_work() {
    let store = GatedStore::new(MemoryStore::new());
    let log = store.create(&header("a"), &[]).await.unwrap();
    let gate = store.gate_on_log(&sid("a"), Op::Append, Point::After);
    let events = [turn(0)];
    let mut append = log.append(&events).boxed();
    assert!(futures::poll!(&mut append).is_pending());
    bounded(gate.reached()).await;
    drop(append);
    assert!(gate.has_left());
    assert_eq!(store.inner().load(&sid("a")).await.unwrap().events.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_is_reached_from_another_task() {
    let store = Arc::new(GatedStore::new(MemoryStore::new()));
    let gate = store.gate(Op::Create, Point::Before);
    let task = tokio::spawn({
        let store = Arc::clone(&store);
        async move { store.create(&header("a"), &[]).await.map(drop) }
    });
    bounded(gate.reached()).await;
    assert_eq!(store.calls(Op::Create), 1);
    assert!(!store.inner().exists(&sid("a")).await.unwrap());
    gate.release();
    bounded(task).await.unwrap().unwrap();
    until(|| gate.has_left()).await;
    assert!(store.inner().exists(&sid("a")).await.unwrap());
}
