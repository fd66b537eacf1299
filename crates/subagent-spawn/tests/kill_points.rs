//! The process-level crash harness (B51, B54): a delegating run (a root
//! starting children in turn, each settling with a notice, and messages
//! resuming cold children) runs in a child process that the test kills
//! with SIGKILL at 50 pseudo-random points of the run, from a printed seed.
//! After each kill the test opens what the process left on disk in a new
//! world and checks the
//! crash-point invariants: the tree lists; every cataloged child has a log
//! that loads; every log a kill left outside the catalog (between a
//! child's creation and its catalog entry) is removed, and nothing else; lost notices are delivered exactly once (a second pass finds
//! none, and no notice id repeats in the root's log); a message to a cold
//! child is delivered and answered within a bound, or refused as
//! `NOT_RESUMABLE` when the child never took its task; and every line the
//! logs held when the process died (each accepted message, the "one more
//! thing" messages and notices among them, and each tool result) is still
//! there, unchanged and once, after all that (`dsh_test_support::acknowledged`;
//! only an orphan log may go). It reports how many kills lost a notice, left
//! an orphan log or an untasked child, and fails if no kill landed inside a
//! run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::hash::RandomState;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsh_core::{
    CancellationToken, ContentBlock, Durability, EventPayload, MessageSource, SessionStore,
};
use dsh_subagent::{ChildMode, SubagentEvent};
use dsh_test_support::acknowledged::{Held, OnDisk};
use dsh_test_support::wait::{bounded, until};
use dsh_test_support::world::process::{child_process, runtime, start_ready};
use dsh_test_support::world::{World, sid};

/// The variable that turns the child-process run on, naming its directory.
const DIR_VAR: &str = "DSH_KILL_POINTS_DIR";

/// Kills per test run.
const KILLS: usize = 50;

/// Children the run starts, one after the other.
const ROUNDS: usize = 6;

/// How long the test waits for the child process to get ready.
const BOUND: Duration = Duration::from_secs(30);

const DURABILITY: Durability = Durability::None;

/// The run a killed process makes: a root that delegates in rounds.
async fn delegating_run(dir: PathBuf) {
    let sessions = dir.join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let world = World::in_dir(&sessions, DURABILITY).await;
    std::fs::write(dir.join("ready"), b"").unwrap();
    for round in 0..ROUNDS {
        let name = format!("c{round}");
        let mut spec = world.spec(Some(&name));
        spec.child_id = Some(sid(&name));
        let child = world.runtime.start_activation(spec).await.unwrap();
        if round > 0 {
            world
                .runtime
                .send_message(
                    world.root.agent(),
                    &sid(&format!("c{}", round - 1)),
                    vec![ContentBlock::text("one more thing")],
                    &CancellationToken::new(),
                )
                .await
                .unwrap();
        }
        child.result().await.unwrap();
    }
    until(|| world.runtime.tasks().is_empty()).await;
    std::fs::write(dir.join("finished"), b"").unwrap();
}

#[test]
fn kill_points_child_process() {
    child_process(DIR_VAR, delegating_run);
}

/// Run the child process; kill it `after` its readiness, or let it finish.
/// How long it ran, and whether the kill landed inside the run.
fn run(dir: &Path, after: Option<Duration>) -> (Duration, bool) {
    let mut child = start_ready("kill_points_child_process", DIR_VAR, dir, BOUND);
    let started = Instant::now();
    let mut process = child.take();
    let landed = match after {
        Some(after) => {
            std::thread::sleep(after);
            process.kill().unwrap();
            let status = process.wait().unwrap();
            // A run that finished before the kill exits normally.
            assert!(
                status.signal() == Some(9) || status.success(),
                "killed by SIGKILL: {status}"
            );
            status.signal() == Some(9) && !dir.join("finished").exists()
        }
        None => {
            let status = process.wait().unwrap();
            assert!(status.success(), "the uninterrupted run: {status}");
            assert!(dir.join("finished").exists());
            false
        }
    };
    (started.elapsed(), landed)
}

/// What one kill left behind.
#[derive(Debug, Default)]
struct Found {
    lost_notices: usize,
    orphans: usize,
    untasked: usize,
    /// What the logs held when the process died, all found again.
    held: Held,
}

/// Open what a killed run left and check the crash-point invariants.
async fn check(dir: &Path) -> Found {
    let mut found = Found::default();
    let acked = OnDisk::read(&dir.join("sessions"));
    let after = World::restarted(&dir.join("sessions"), DURABILITY).await;
    let lead = after.root.agent().clone();
    let rows = after.descendants().await.unwrap();
    let cataloged: HashSet<_> = rows.iter().map(|row| row.entry.child_id.clone()).collect();
    let orphans = || async {
        let mut orphans = 0;
        for id in after.store.list().await.unwrap() {
            if id != *lead.id() && !cataloged.contains(&id) {
                orphans += 1;
            }
        }
        orphans
    };
    found.orphans = orphans().await;
    let removed = after.runtime.remove_orphans(&lead).await.unwrap();
    assert_eq!(removed.len(), found.orphans, "every orphan log is removed");
    assert_eq!(orphans().await, 0, "nothing is left outside the catalog");
    found.lost_notices = after.runtime.deliver_lost_notices(&lead).await.unwrap();
    until(|| after.runtime.tasks().is_empty()).await;
    bounded(lead.wait_idle()).await;
    assert_eq!(
        after.runtime.deliver_lost_notices(&lead).await.unwrap(),
        0,
        "a lost notice is delivered once"
    );
    let mut ids = HashSet::new();
    for event in lead.events() {
        if let EventPayload::InboxAccepted(accepted) = &event.payload
            && matches!(
                accepted.message.source,
                MessageSource::SubagentSettled { .. }
            )
        {
            assert!(
                ids.insert(accepted.message.id.clone()),
                "notice {} repeated",
                accepted.message.id
            );
        }
    }
    let mut answered = false;
    for row in rows
        .iter()
        .filter(|row| row.entry.mode == ChildMode::CONTINUABLE)
    {
        let child = &row.entry.child_id;
        let log = after.store.load(child).await.unwrap();
        let tasked = log
            .events
            .iter()
            .any(|event| matches!(event.payload, EventPayload::InboxAccepted(_)));
        if !tasked {
            found.untasked += 1;
        }
        if answered || after.runtime.registry().get(child).is_some() {
            continue;
        }
        let (_subscription, mut events) = after.runtime.events().subscribe();
        let sent = after
            .runtime
            .send_message(
                &lead,
                child,
                vec![ContentBlock::text("are you there?")],
                &CancellationToken::new(),
            )
            .await;
        match sent {
            Ok(_) => {
                bounded(async {
                    while let Some(event) = events.recv().await {
                        if let SubagentEvent::End(info, _) = event
                            && &info.child_id == child
                        {
                            return;
                        }
                    }
                })
                .await;
                answered = true;
            }
            Err(err) if !tasked => assert_eq!(err.code(), "NOT_RESUMABLE", "{err}"),
            Err(err) => panic!("a message to the cold child {child} failed: {err}"),
        }
    }
    until(|| after.runtime.tasks().is_empty()).await;
    let lost = acked.lost_in(&OnDisk::read(&dir.join("sessions")));
    assert!(lost.is_empty(), "{}", lost.join("\n"));
    found.held = acked.held();
    found
}

#[test]
fn kill_points_a_delegating_run_killed_at_50_points_recovers() {
    let runtime = runtime();
    // The uninterrupted run sets the span the kill points are drawn from.
    let whole = tempfile::tempdir().unwrap();
    let (span, _) = run(whole.path(), None);
    runtime.block_on(check(whole.path()));
    // A new seed each run, so runs explore new points; printed, and
    // `DSH_KILL_POINTS_SEED=<n>` replays it (on a machine of like speed:
    // a point is a time).
    let mut seed: u64 = std::env::var("DSH_KILL_POINTS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| std::hash::BuildHasher::hash_one(&RandomState::new(), KILLS))
        .max(1);
    eprintln!("DSH_KILL_POINTS_SEED={seed}");
    let mut totals = Found::default();
    let mut landed = 0;
    for kill in 0..KILLS {
        // xorshift64 (never 0 from a seed that is not): points across the
        // whole span.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let nanos = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX).max(1);
        let after = Duration::from_nanos(seed % nanos);
        let dir = tempfile::tempdir().unwrap();
        let (_, killed) = run(dir.path(), Some(after));
        landed += usize::from(killed);
        let found = runtime.block_on(check(dir.path()));
        eprintln!("kill {kill} after {after:?}: {found:?}");
        totals.lost_notices += found.lost_notices;
        totals.orphans += found.orphans;
        totals.untasked += found.untasked;
        totals.held.accepted += found.held.accepted;
        totals.held.results += found.held.results;
    }
    eprintln!("{KILLS} kills over a {span:?} run, {landed} inside it: {totals:?}");
    assert!(landed > 0, "no kill of {KILLS} landed inside the run");
    assert!(
        totals.held.accepted > 0,
        "no kill left an accepted message to check: {totals:?}"
    );
}
