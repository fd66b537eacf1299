//! Foreground (caller-delivered) ACP children (issue 16's listing item):
//! `launch()` announces them with `subagent/start` and `subagent/end` like
//! any activation; their creator's log keeps their membership (the
//! `subagent/foreground-child` record, never a `subagent/child` entry, so
//! an older reader skips it) and what they settled with (the
//! `subagent/external-outcome` record, bounded). `list_descendants` lists
//! them as external leaves while they run and after, in this runtime and in
//! a fresh one over the same directory, and `heard_from` reads back what
//! they said: the rogue test agent (a completed child, a failed one with a
//! long diagnostic, a running one disposed) and the TypeScript and Python
//! SDK example agents.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use dsh_core::{
    CancellationToken, Durability, EventPayload, SessionEvent, SessionStore, StopReason,
};
use dsh_harness::{Harness, JsonlStore};
use dsh_subagent::result::MAX_DIAGNOSTIC_BYTES;
use dsh_subagent::{
    CATALOG_EVENT, ChildMode, DescendantRow, ExternalOutcome, FOREGROUND_EVENT, OUTCOME_EVENT,
    RunOutcome, RuntimeConfig, SubagentEvent, SubagentRuntime, heard_from,
};
use dsh_subagent_acp::PermissionPolicy;
use support::{World, bounded, peers, quick, result_of, world};

/// The lead's log, as stored.
async fn lead_events(world: &World) -> Vec<SessionEvent> {
    world.store.load(world.lead.id()).await.unwrap().events
}

/// The extension records of `kind` in `events`.
fn records(events: &[SessionEvent], kind: &str) -> Vec<serde_json::Value> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::Extension { kind: k, payload } if k == kind => {
                Some(payload.parse::<serde_json::Value>().unwrap())
            }
            _ => None,
        })
        .collect()
}

/// The lead's children as a runtime that has never seen them lists them:
/// a new harness and runtime over the same directory (what a second `dsh`
/// process does).
async fn cold_rows(world: &World) -> Vec<DescendantRow> {
    let store: Arc<dyn SessionStore> =
        Arc::new(JsonlStore::new(world.dir.path().join("sessions"), Durability::None).unwrap());
    let harness = Harness::builder(store.clone()).build().unwrap();
    let runtime = SubagentRuntime::new(Arc::new(harness), store, RuntimeConfig::default());
    let rows = bounded(
        "a cold listing",
        runtime.list_descendants(world.lead.id(), &CancellationToken::new()),
    )
    .await
    .unwrap();
    bounded("the reader's shutdown", runtime.shutdown()).await;
    rows
}

/// The listed name, provider and mode of each row, and whether it is a leaf.
fn summary(rows: &[DescendantRow]) -> Vec<(String, String, ChildMode, bool)> {
    rows.iter()
        .map(|row| {
            (
                row.entry.name.clone().unwrap_or_default(),
                row.entry.provider.clone(),
                row.entry.mode.clone(),
                !row.has_children,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_rogue_child_is_announced_listed_and_its_outcome_kept() {
    let world = world(vec![quick(peers().rogue(&["--ignore-eof"]))]).await;
    let (_subscription, mut events) = world.runtime.events().subscribe();
    let mut spec = world.spec("acp", "say hello from the scout");
    spec.name = Some("scout".into());
    let activation = world.start(spec).await;
    let result = result_of(&activation).await;
    assert_eq!(result.stop_reason, StopReason::COMPLETED, "{result:?}");
    let child = activation.child_id().clone();

    // launch() announced the foreground activation, start then end.
    let start = bounded("subagent/start", events.recv()).await.unwrap();
    let end = bounded("subagent/end", events.recv()).await.unwrap();
    match (&start, &end) {
        (SubagentEvent::Start(started), SubagentEvent::End(ended, outcome)) => {
            assert_eq!(started.child_id, child);
            assert_eq!(started, ended);
            assert!(!started.local);
            assert_eq!(started.parent_session_id, *world.lead.id());
            assert_eq!(outcome, &RunOutcome::Settled(result.clone()));
        }
        other => panic!("not a start and an end: {other:?}"),
    }
    assert_eq!(activation.name(), "scout");

    // Its membership and outcome are in the lead's log, and never as a
    // catalog entry, which an older reader would fold.
    let log = lead_events(&world).await;
    assert!(records(&log, CATALOG_EVENT).is_empty(), "{log:?}");
    assert_eq!(records(&log, FOREGROUND_EVENT).len(), 1);
    let outcomes = records(&log, OUTCOME_EVENT);
    assert_eq!(outcomes.len(), 1);
    let outcome: ExternalOutcome = serde_json::from_value(outcomes[0].clone()).unwrap();
    assert_eq!(outcome.child_id, child);
    assert_eq!(outcome.output, "hello from the scout");
    assert_eq!(outcome.diagnostic, None);

    let expected = vec![(
        "scout".to_owned(),
        "acp".to_owned(),
        ChildMode::EXTERNAL,
        true,
    )];
    let live = bounded(
        "a live listing",
        world
            .runtime
            .list_descendants(world.lead.id(), &CancellationToken::new()),
    )
    .await
    .unwrap();
    assert_eq!(summary(&live), expected);
    assert_eq!(summary(&cold_rows(&world).await), expected);
    assert_eq!(
        heard_from(&log, &child, "scout"),
        ["[scout completed; stop reason: completed]\n\nhello from the scout"]
    );

    // The name is taken: a sibling cannot have it.
    let mut again = world.spec("acp", "say again");
    again.name = Some("scout".into());
    let err = bounded("a second scout", world.runtime.start_activation(again))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "NAME_TAKEN", "{err}");
    world.assert_no_process_left_soon().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_foreground_childs_diagnostic_is_kept_bounded() {
    let world = world(vec![quick(peers().rogue(&["--ignore-eof"]))]).await;
    let mut spec = world.spec("acp", "say half an answer; error");
    spec.name = Some("broken".into());
    let activation = world.start(spec).await;
    let result = result_of(&activation).await;
    assert_eq!(result.stop_reason, StopReason::ERROR);

    let log = lead_events(&world).await;
    let outcome: ExternalOutcome =
        serde_json::from_value(records(&log, OUTCOME_EVENT).remove(0)).unwrap();
    assert_eq!(outcome.stop_reason, StopReason::ERROR);
    assert_eq!(outcome.output, "half an answer");
    let diagnostic = outcome.diagnostic.unwrap();
    assert!(diagnostic.contains("error code -32603"), "{diagnostic}");
    assert!(
        diagnostic.len() <= MAX_DIAGNOSTIC_BYTES,
        "{}",
        diagnostic.len()
    );
    let heard = heard_from(&log, activation.child_id(), "broken");
    assert_eq!(heard.len(), 1);
    assert!(
        heard[0]
            .starts_with("[broken failed; stop reason: error]\n\nhalf an answer\n\nDiagnostic: "),
        "{}",
        heard[0]
    );
    assert_eq!(
        summary(&cold_rows(&world).await),
        [(
            "broken".to_owned(),
            "acp".to_owned(),
            ChildMode::EXTERNAL,
            true
        )]
    );
    world.assert_no_process_left_soon().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_foreground_child_is_listed_before_it_settles() {
    let world = world(vec![quick(peers().rogue(&["--ignore-eof"]))]).await;
    let mut spec = world.spec("acp", "say partial; wait_cancel");
    spec.name = Some("waiter".into());
    let activation = world.start(spec).await;
    // Running: listed already (live and cold), nothing settled yet.
    let live = bounded(
        "a live listing",
        world
            .runtime
            .list_descendants(world.lead.id(), &CancellationToken::new()),
    )
    .await
    .unwrap();
    let expected = vec![(
        "waiter".to_owned(),
        "acp".to_owned(),
        ChildMode::EXTERNAL,
        true,
    )];
    assert_eq!(summary(&live), expected);
    assert_eq!(summary(&cold_rows(&world).await), expected);
    assert!(heard_from(&lead_events(&world).await, activation.child_id(), "waiter").is_empty());

    bounded("dispose", activation.dispose()).await.unwrap();
    let log = lead_events(&world).await;
    let outcome: ExternalOutcome =
        serde_json::from_value(records(&log, OUTCOME_EVENT).remove(0)).unwrap();
    assert_eq!(outcome.stop_reason, StopReason::ABORTED);
    world.assert_no_process_left_soon().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_sdk_agents_are_listed_with_what_they_said() {
    let peers = peers();
    let world = world(vec![
        peers.ts().permission(PermissionPolicy::Allow).name("ts"),
        peers.py("echo_agent.py").name("py-echo"),
    ])
    .await;
    let mut ts = world.spec("ts", "Improve the project");
    ts.name = Some("typescript".into());
    let mut py = world.spec("py-echo", "echo me");
    py.name = Some("python".into());
    let ts = world.start(ts).await;
    let py = world.start(py).await;
    let (ts_result, py_result) = tokio::join!(result_of(&ts), result_of(&py));
    assert_eq!(ts_result.stop_reason, StopReason::COMPLETED);
    assert_eq!(py_result.stop_reason, StopReason::COMPLETED);

    let mut rows = summary(&cold_rows(&world).await);
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        rows,
        [
            (
                "python".to_owned(),
                "py-echo".to_owned(),
                ChildMode::EXTERNAL,
                true
            ),
            (
                "typescript".to_owned(),
                "ts".to_owned(),
                ChildMode::EXTERNAL,
                true
            ),
        ]
    );
    let log = lead_events(&world).await;
    let heard: Vec<String> = heard_from(&log, py.child_id(), "python");
    assert_eq!(
        heard,
        ["[python completed; stop reason: completed]\n\necho me"]
    );
    let heard = heard_from(&log, ts.child_id(), "typescript");
    assert_eq!(heard.len(), 1);
    assert!(
        heard[0].ends_with("The changes have been applied."),
        "{}",
        heard[0]
    );
    world.assert_no_process_left_soon().await;
}
