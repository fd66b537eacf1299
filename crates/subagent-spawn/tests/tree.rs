//! Tree reads through the subagent runtime, against the real harness and the
//! real JSONL store: name resolution (B29) and descendant listings (B34).
//! Trees are built from real `spawn` children (kept running by a gated
//! scripted model, with reserved ids so listings are deterministic) plus
//! catalog entries recorded by hand for what this crate cannot start
//! (external runs, unknown and unsupported modes, unnamed levels, dangling,
//! duplicate and cyclic entries). Ordering is made with gates, never with
//! sleeps; timeouts only turn a hang into a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_test_support::wait::{bounded, until};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use dsh_core::{
    Agent, AgentHandle, CancellationToken, ContentBlock, RegistryEvent, SessionHeader, SessionId,
    SessionStore, StopReason,
};
use dsh_harness::ScriptedModel;
use dsh_subagent::catalog::{CATALOG_EVENT, catalog_payload};
use dsh_subagent::{
    ActivationSpec, CatalogEntry, ChildActivity, ChildMode, Delivery, DescendantRow, RowDiagnostic,
    StartRequest, SubagentActivation, SubagentError,
};
use dsh_subagent_spawn::SpawnProvider;
use dsh_test_support::store::{FaultStore, Op, SharedStore};
use dsh_test_support::world::{WorldBuilder, models, named_spec, sid};
use serde_json::json;
use tokio::sync::Semaphore;

// ---------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------

/// The root agent's session id.
const LEAD: &str = "lead-session";

/// A world over a JSONL store in a temp dir (logs in `sessions/`, agents in
/// `project/`) counted per session by the kit's `FaultStore`, with `spawn`
/// registered and the root `lead-session`.
type World = dsh_test_support::world::World<FaultStore<SharedStore>>;

async fn world(model: &Arc<ScriptedModel>) -> World {
    WorldBuilder::project()
        .counting()
        .model(model.clone())
        .provider(Arc::new(SpawnProvider::new()))
        .build()
        .await
}

/// The reads (`load`) per session since the last reset.
fn loads(world: &World) -> BTreeMap<String, usize> {
    world
        .store
        .calls_by_log(Op::Load)
        .into_iter()
        .map(|(id, count)| (id.to_string(), usize::try_from(count).unwrap()))
        .collect()
}

/// The opens for writing (which only resuming an agent does) since the last
/// reset.
fn opens(world: &World) -> u64 {
    world.store.calls(Op::Open)
}

/// Write a log for `id` whose middle line is not JSON: the store reports
/// it corrupt.
async fn corrupt_log(world: &World, id: &str) {
    let log = world
        .jsonl()
        .create(&SessionHeader::new(sid(id), world.project()), &[])
        .await
        .unwrap();
    drop(log);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(world.jsonl().log_path(&sid(id)))
        .unwrap();
    file.write_all(b"{not json\n{not json either\n").unwrap();
}

async fn resolve(
    world: &World,
    caller: &Arc<dyn Agent>,
    name: &str,
) -> Result<String, SubagentError> {
    let cancel = CancellationToken::new();
    bounded(world.runtime.resolve_name(caller, name, &cancel))
        .await
        .map(|id| id.to_string())
}

async fn list(world: &World, root: &str) -> Result<Vec<DescendantRow>, SubagentError> {
    let cancel = CancellationToken::new();
    bounded(world.runtime.list_descendants(&sid(root), &cancel)).await
}

/// A caller-delivered spawn named `name` with the reserved id `id` under
/// `parent`, whose prompt (and label) is `hold: <name>`.
fn child(parent: &Arc<dyn Agent>, name: &str, id: &str) -> ActivationSpec {
    let prompt = format!("hold: {name}");
    ActivationSpec {
        provider: "spawn".into(),
        label: prompt.clone(),
        name: Some(name.into()),
        child_id: Some(sid(id)),
        cancel: CancellationToken::new(),
        delivery: Delivery::Caller,
        request: StartRequest::new(parent.clone(), vec![ContentBlock::text(prompt)]),
    }
}

/// A catalog entry written by hand.
fn entry(id: &str, name: Option<&str>, mode: ChildMode) -> CatalogEntry {
    CatalogEntry {
        child_id: sid(id),
        name: name.map(str::to_owned),
        label: format!("{mode} {id}"),
        provider: "by-hand".into(),
        mode,
    }
}

fn mode(text: &str) -> ChildMode {
    serde_json::from_value(json!(text)).unwrap()
}

/// Record `entry` in `parent`'s catalog.
async fn record(parent: &Arc<dyn Agent>, entry: &CatalogEntry) {
    parent
        .record(CATALOG_EVENT, catalog_payload(entry))
        .await
        .unwrap();
}

async fn completed(activation: &SubagentActivation) {
    let result = bounded(activation.result()).await.unwrap();
    assert_eq!(result.stop_reason, StopReason::COMPLETED);
}

/// The failure for a name that names no member.
#[track_caller]
fn assert_name_not_found(result: Result<String, SubagentError>, name: &str) {
    let err = result.expect_err(name);
    assert_eq!(err.code(), "AGENT_NAME_NOT_FOUND", "{name}: {err}");
    assert!(err.to_string().contains(name), "{err}");
}

// ---------------------------------------------------------------------------
// B29: resolve_name
// ---------------------------------------------------------------------------

// B29
#[tokio::test]
async fn b29_lead_and_full_paths_resolve_through_the_catalogs() {
    let gate = Arc::new(Semaphore::new(0));
    let model = models::holding(&gate);
    let world = world(&model).await;
    let lead_handle = world.root.clone();
    let lead = lead_handle.agent().clone();

    let a = world.start(child(&lead, "a", "child-a")).await;
    let a_agent = world.live(a.child_id());
    let b = world.start(child(&a_agent, "b", "child-b")).await;
    let b_agent = world.live(b.child_id());
    assert_eq!(b.name(), "a/b");

    // `lead` is the root, from the root and from any member.
    assert_eq!(resolve(&world, &lead, "lead").await.unwrap(), LEAD);
    assert_eq!(resolve(&world, &b_agent, "lead").await.unwrap(), LEAD);
    // Full names are paths from the root, whoever asks.
    for caller in [&lead, &a_agent, &b_agent] {
        assert_eq!(resolve(&world, caller, "a").await.unwrap(), "child-a");
        assert_eq!(resolve(&world, caller, "a/b").await.unwrap(), "child-b");
    }

    // A slash path naming no member fails; it is never taken as an id.
    for path in ["a/zzz", "zzz/b", "a/b/c", "a//b", "a/", "/a", "lead/a"] {
        assert_name_not_found(resolve(&world, &lead, path).await, path);
    }
    // A single token that names no child of the root is a session id as it
    // is (a grandchild's bare name included); resolution grants nothing.
    assert_eq!(resolve(&world, &lead, "child-b").await.unwrap(), "child-b");
    assert_eq!(resolve(&world, &lead, "b").await.unwrap(), "b");
    assert_eq!(
        resolve(&world, &lead, "s-no-such-session").await.unwrap(),
        "s-no-such-session"
    );
    // A token that cannot be a session id either names nothing.
    for token in ["", "no such agent", "../escape"] {
        assert_name_not_found(resolve(&world, &lead, token).await, token);
    }

    // External and unknown children are leaves: their names resolve, but a
    // name below them fails the same way. A one-shot child is not a leaf
    // (seed 002): resolution reads its catalog, here a missing log.
    record(&lead, &entry("ext-run", Some("ext"), ChildMode::EXTERNAL)).await;
    record(
        &lead,
        &entry("ghost-run", Some("ghost"), ChildMode::UNKNOWN),
    )
    .await;
    record(
        &lead,
        &entry("legacy-run", Some("legacy"), ChildMode::ONE_SHOT),
    )
    .await;
    assert_eq!(resolve(&world, &lead, "ext").await.unwrap(), "ext-run");
    assert_eq!(
        resolve(&world, &b_agent, "ghost").await.unwrap(),
        "ghost-run"
    );
    for path in ["ext/x", "ghost/x", "ext/x/y"] {
        assert_name_not_found(resolve(&world, &lead, path).await, path);
    }
    let err = resolve(&world, &lead, "legacy/x").await.unwrap_err();
    assert_eq!(err.code(), "SESSION_NOT_FOUND", "{err}");

    // A catalog along the path that cannot be read is an error, not a miss.
    record(
        &lead,
        &entry("lost-session", Some("lost"), ChildMode::CONTINUABLE),
    )
    .await;
    assert_eq!(
        resolve(&world, &lead, "lost").await.unwrap(),
        "lost-session"
    );
    let err = resolve(&world, &lead, "lost/x").await.unwrap_err();
    assert_eq!(err.code(), "SESSION_NOT_FOUND", "{err}");
    b_agent
        .record(CATALOG_EVENT, json!({"bogus": 1}).into())
        .await
        .unwrap();
    let err = resolve(&world, &lead, "a/b/c").await.unwrap_err();
    assert_eq!(err.code(), "CORRUPT_CATALOG", "{err}");
    assert_eq!(resolve(&world, &lead, "a/b").await.unwrap(), "child-b");

    // A cancelled resolution reads nothing and fails.
    let cancel = CancellationToken::new();
    cancel.cancel();
    world.store.reset_calls();
    let err = world
        .runtime
        .resolve_name(&lead, "a/b", &cancel)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "CANCELLED");
    assert!(loads(&world).is_empty());

    // Only the exact live agent may resolve: a settled child is not live,
    // and neither is a root's earlier epoch.
    gate.add_permits(2);
    completed(&b).await;
    completed(&a).await;
    let err = resolve(&world, &b_agent, "lead").await.unwrap_err();
    assert_eq!(err.code(), "NOT_LIVE");
    bounded(lead_handle.dispose()).await;
    let resumed = world.resume(LEAD).await;
    let err = resolve(&world, &lead, "a/b").await.unwrap_err();
    assert_eq!(err.code(), "NOT_LIVE");
    // The new epoch resolves through the durable catalogs of cold members.
    let lead = resumed.agent().clone();
    assert_eq!(resolve(&world, &lead, "a/b").await.unwrap(), "child-b");
    resumed.dispose().await;
}

// ---------------------------------------------------------------------------
// B34: list_descendants
// ---------------------------------------------------------------------------

/// The mixed tree of the B34 tests (pre-order, with what each row shows):
///
/// ```text
/// lead-session
/// ├─ a          child-a       spawned, continuable
/// │  ├─ b       child-b       spawned, continuable
/// │  │  ├─ (unnamed) child-u  a live agent recorded by hand: no path below
/// │  │  │  └─ v child-v       external leaf (no path: a level is unnamed)
/// │  │  ├─ back → lead-session   a cycle to the root: skipped
/// │  │  └─ up   → child-a        a cycle to an ancestor: skipped
/// │  └─ k       child-k       spawned; its catalog is corrupt: the branch
/// │                           stops (its `hidden` child is not listed)
/// ├─ ext        ext-run       external leaf
/// ├─ ghost      ghost-run     unknown mode: unsupported, traversed (no log)
/// ├─ q          quantum-run   mode `quantum`: unsupported, traversed (no log)
/// ├─ lost       lost-session  no log: unavailable
/// ├─ dup        child-b       already listed: skipped
/// ├─ f          child-f       a log with a corrupt middle line: corrupt
/// └─ o          child-o       one-shot, traversed
///    └─ p       child-p       external leaf
/// ```
struct MixedTree {
    activations: Vec<SubagentActivation>,
    handles: Vec<AgentHandle>,
}

async fn mixed_tree(world: &World) -> MixedTree {
    let lead = world.root.clone();
    let unnamed = world.agent("child-u").await;
    let one_shot = world.agent("child-o").await;
    let lead_agent = lead.agent().clone();

    let a = world.start(child(&lead_agent, "a", "child-a")).await;
    let a_agent = world.live(a.child_id());
    let b = world.start(child(&a_agent, "b", "child-b")).await;
    let b_agent = world.live(b.child_id());
    let k = world.start(child(&a_agent, "k", "child-k")).await;
    let k_agent = world.live(k.child_id());

    record(&b_agent, &entry("child-u", None, ChildMode::CONTINUABLE)).await;
    record(&b_agent, &entry(LEAD, Some("back"), ChildMode::CONTINUABLE)).await;
    record(
        &b_agent,
        &entry("child-a", Some("up"), ChildMode::CONTINUABLE),
    )
    .await;
    record(
        unnamed.agent(),
        &entry("child-v", Some("v"), ChildMode::EXTERNAL),
    )
    .await;
    record(
        &k_agent,
        &entry("hidden-run", Some("hidden"), ChildMode::EXTERNAL),
    )
    .await;
    k_agent
        .record(CATALOG_EVENT, json!({"bogus": 1}).into())
        .await
        .unwrap();

    record(
        &lead_agent,
        &entry("ext-run", Some("ext"), ChildMode::EXTERNAL),
    )
    .await;
    record(
        &lead_agent,
        &entry("ghost-run", Some("ghost"), ChildMode::UNKNOWN),
    )
    .await;
    record(
        &lead_agent,
        &entry("quantum-run", Some("q"), mode("quantum")),
    )
    .await;
    record(
        &lead_agent,
        &entry("lost-session", Some("lost"), ChildMode::CONTINUABLE),
    )
    .await;
    record(
        &lead_agent,
        &entry("child-b", Some("dup"), ChildMode::CONTINUABLE),
    )
    .await;
    corrupt_log(world, "child-f").await;
    record(
        &lead_agent,
        &entry("child-f", Some("f"), ChildMode::CONTINUABLE),
    )
    .await;
    record(
        &lead_agent,
        &entry("child-o", Some("o"), ChildMode::ONE_SHOT),
    )
    .await;
    record(
        one_shot.agent(),
        &entry("child-p", Some("p"), ChildMode::EXTERNAL),
    )
    .await;

    MixedTree {
        activations: vec![a, b, k],
        handles: vec![lead, unnamed, one_shot],
    }
}

/// One line per row: `depth parent child path diagnostic`.
fn outline(rows: &[DescendantRow]) -> Vec<String> {
    rows.iter()
        .map(|row| {
            format!(
                "{} {} {} {} {}",
                row.depth,
                row.parent_id,
                row.entry.child_id,
                row.path.as_deref().unwrap_or("-"),
                row.diagnostic
                    .map(|d| serde_json::to_value(d)
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_owned())
                    .unwrap_or_else(|| "-".into()),
            )
        })
        .collect()
}

// B34
#[tokio::test]
async fn b34_a_mixed_tree_lists_in_pre_order_the_same_live_and_cold_without_loading_agents() {
    let gate = Arc::new(Semaphore::new(0));
    let model = models::holding(&gate);
    let world = world(&model).await;
    let tree = mixed_tree(&world).await;

    // Live: the spawned members and the hand-made agents are read through
    // the registry; only the sessions with no live agent come from the store.
    world.store.reset_calls();
    let live = list(&world, LEAD).await.unwrap();
    assert_eq!(
        outline(&live),
        [
            "1 lead-session child-a a -",
            "2 child-a child-b a/b -",
            "3 child-b child-u - -",
            "4 child-u child-v - -",
            "2 child-a child-k a/k corrupt",
            "1 lead-session ext-run ext -",
            "1 lead-session ghost-run ghost unsupported",
            "1 lead-session quantum-run q unsupported",
            "1 lead-session lost-session lost unavailable",
            "1 lead-session child-f f corrupt",
            "1 lead-session child-o o -",
            "2 child-o child-p o/p -",
        ]
    );
    insta::assert_json_snapshot!("mixed_tree", live);
    assert_eq!(
        loads(&world),
        BTreeMap::from(
            ["child-f", "lost-session", "ghost-run", "quantum-run"].map(|id| (id.to_owned(), 1))
        ),
        "live catalogs are read from their agents; leaves are never read"
    );
    assert_eq!(opens(&world), 0);

    // Everyone goes away: the same listing from the logs alone.
    gate.add_permits(3);
    for activation in &tree.activations {
        completed(activation).await;
    }
    for handle in &tree.handles {
        bounded(handle.dispose()).await;
    }
    assert!(world.runtime.registry().is_empty());
    assert_eq!(world.runtime.live_activations(), 0);

    let published = Arc::new(Mutex::new(0_usize));
    let _published = world.runtime.registry().events().listen({
        let published = published.clone();
        move |event| {
            if matches!(event, RegistryEvent::Published(_)) {
                *published.lock().unwrap() += 1;
            }
        }
    });
    world.store.reset_calls();
    let cold = list(&world, LEAD).await.unwrap();
    // Identical but for the activity (nothing is live any more) and the
    // usage each settled child's parent recorded.
    assert!(
        cold.iter()
            .all(|row| row.activity == ChildActivity::Inactive)
    );
    assert!(
        cold.iter()
            .filter(|row| row.entry.provider == "spawn")
            .all(|row| !row.usage.is_empty()),
        "a settled spawn child's usage is recorded"
    );
    let at_rest = |rows: &[DescendantRow]| -> Vec<DescendantRow> {
        rows.iter()
            .map(|row| DescendantRow {
                activity: ChildActivity::Inactive,
                usage: Default::default(),
                ..row.clone()
            })
            .collect()
    };
    let (cold_rows, live_rows) = (at_rest(&cold), at_rest(&live));
    assert_eq!(cold_rows, live_rows, "cold and live listings are identical");
    assert_eq!(
        loads(&world),
        BTreeMap::from(
            [
                LEAD,
                "child-a",
                "child-b",
                "child-u",
                "child-k",
                "ghost-run",
                "quantum-run",
                "lost-session",
                "child-f",
                "child-o",
            ]
            .map(|id| (id.to_owned(), 1))
        ),
        "each reachable catalog is read once; leaves are never read"
    );
    assert_eq!(opens(&world), 0, "no agent is opened or resumed");
    assert_eq!(*published.lock().unwrap(), 0, "no agent is loaded");
    assert!(world.runtime.registry().is_empty());
    assert_eq!(world.runtime.live_activations(), 0);
    assert!(world.harness.tasks().is_empty());

    // Any member lists its own subtree: depth and path count from it.
    assert_eq!(
        outline(&list(&world, "child-o").await.unwrap()),
        ["1 child-o child-p p -"]
    );
    assert_eq!(
        list(&world, "child-p").await.unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
}

// B34
#[tokio::test]
async fn b34_a_root_that_cannot_be_read_fails_the_whole_listing() {
    let model = models::holding(&Arc::new(Semaphore::new(0)));
    let world = world(&model).await;

    let err = list(&world, "no-such-root").await.unwrap_err();
    assert_eq!(err.code(), "SESSION_NOT_FOUND", "{err}");

    corrupt_log(&world, "torn-root").await;
    let err = list(&world, "torn-root").await.unwrap_err();
    assert_eq!(err.code(), "SESSION_CORRUPT", "{err}");

    let lead = world.root.clone();
    record(
        lead.agent(),
        &entry("ext-run", Some("ext"), ChildMode::EXTERNAL),
    )
    .await;
    lead.agent()
        .record(CATALOG_EVENT, json!({"bogus": 1}).into())
        .await
        .unwrap();
    let err = list(&world, LEAD).await.unwrap_err();
    assert_eq!(err.code(), "CORRUPT_CATALOG", "{err}");
    bounded(lead.dispose()).await;
    let err = list(&world, LEAD).await.unwrap_err();
    assert_eq!(
        err.code(),
        "CORRUPT_CATALOG",
        "the same from the log: {err}"
    );

    // A root with no children lists nothing.
    let empty = world.agent("empty-root").await;
    assert_eq!(list(&world, "empty-root").await.unwrap(), []);
    bounded(empty.dispose()).await;
    assert_eq!(list(&world, "empty-root").await.unwrap(), []);
}

// B34
#[tokio::test]
async fn b34_a_cancelled_listing_fails_and_reads_nothing() {
    let model = models::holding(&Arc::new(Semaphore::new(0)));
    let world = world(&model).await;
    let lead = world.root.clone();
    record(
        lead.agent(),
        &entry("lost-session", Some("lost"), ChildMode::CONTINUABLE),
    )
    .await;
    bounded(lead.dispose()).await;

    let cancel = CancellationToken::new();
    cancel.cancel();
    world.store.reset_calls();
    let err = world
        .runtime
        .list_descendants(&sid(LEAD), &cancel)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "CANCELLED");
    assert!(loads(&world).is_empty());

    // Uncancelled, the same listing succeeds.
    let rows = list(&world, LEAD).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].diagnostic, Some(RowDiagnostic::Unavailable));
}

// ---------------------------------------------------------------------------
// Cold messages: what a message to a cold member reads
// ---------------------------------------------------------------------------

/// Send `text` from `sender` to `target` under a token nobody cancels, and
/// wait until every activation it started has settled again.
async fn message_and_settle(world: &World, sender: &Arc<dyn Agent>, target: &str) {
    world
        .runtime
        .send_message(
            sender,
            &sid(target),
            vec![ContentBlock::text("more")],
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    until(|| world.runtime.live_activations() == 0).await;
}

/// Start a spawn child `name` (id `s-<name>`) of `parent`; its prompt holds
/// its turns behind the world's gate when `hold`.
async fn start_named(world: &World, parent: &Arc<dyn Agent>, name: &str, hold: bool) -> SessionId {
    let prompt = if hold {
        format!("hold {name}")
    } else {
        format!("work {name}")
    };
    world
        .start(named_spec(parent, "spawn", name, &prompt))
        .await
        .child_id()
        .clone()
}

#[tokio::test]
async fn a_cold_lineage_is_read_once_however_often_its_deepest_member_is_messaged() {
    let gate = Arc::new(Semaphore::new(0));
    let model = models::holding(&gate);
    let world = world(&model).await;
    let lead = world.lead();
    // lead → a → b → c → d, each held live until the next one is started.
    let mut parent = lead.clone();
    for name in ["a", "b", "c", "d"] {
        let id = start_named(&world, &parent, name, true).await;
        parent = world.live(&id);
    }
    gate.add_permits(1_000);
    until(|| world.runtime.live_activations() == 0).await;

    world.store.reset_calls();
    message_and_settle(&world, &lead, "s-d").await;
    let first = loads(&world);
    // Each level's header and catalog, each read at most once.
    for id in ["s-a", "s-b", "s-c", "s-d"] {
        assert!(first.get(id).copied().unwrap_or(0) <= 2, "{first:?}");
    }
    assert_eq!(opens(&world), 1, "only the target is resumed");

    for round in 0..3 {
        world.store.reset_calls();
        message_and_settle(&world, &lead, "s-d").await;
        assert_eq!(
            loads(&world),
            BTreeMap::new(),
            "round {round}: headers and catalog entries are not read again"
        );
        assert_eq!(opens(&world), 1);
    }
}

#[tokio::test]
async fn messaging_every_cold_child_of_a_cold_parent_reads_its_catalog_once() {
    let gate = Arc::new(Semaphore::new(0));
    let model = models::holding(&gate);
    let world = world(&model).await;
    let lead = world.lead();
    let p = start_named(&world, &lead, "p", true).await;
    let p_agent = world.live(&p);
    let mut children = Vec::new();
    for n in 0..6 {
        children.push(start_named(&world, &p_agent, &format!("c{n}"), false).await);
    }
    gate.add_permits(1_000);
    until(|| world.runtime.live_activations() == 0).await;

    world.store.reset_calls();
    for child in &children {
        message_and_settle(&world, &lead, child.as_str()).await;
    }
    let read = loads(&world);
    // The parent's header once and its catalog once, not once per message.
    assert!(read.get("s-p").copied().unwrap_or(0) <= 2, "{read:?}");
    for child in &children {
        assert!(
            read.get(child.as_str()).copied().unwrap_or(0) <= 1,
            "{read:?}"
        );
    }
    assert_eq!(opens(&world), children.len() as u64);
}

#[tokio::test]
async fn a_message_to_a_cold_child_of_the_live_root_reads_nothing_of_it_but_its_resume() {
    let model = models::echo();
    let world = world(&model).await;
    let lead = world.lead();
    let children = [
        start_named(&world, &lead, "a", false).await,
        start_named(&world, &lead, "b", false).await,
    ];
    until(|| world.runtime.live_activations() == 0).await;

    world.store.reset_calls();
    for child in &children {
        message_and_settle(&world, &lead, child.as_str()).await;
    }
    // Membership and mode come from the live root's catalog: no header of
    // the child is read before the open that resumes it.
    assert_eq!(loads(&world), BTreeMap::new());
    assert_eq!(opens(&world), children.len() as u64);
}

/// A cold log for `id` under `parent` whose catalog lists `children`, each
/// a continuable child named after its id.
async fn cold_log(world: &World, id: &str, parent: Option<&str>, children: &[String]) {
    let mut header = SessionHeader::new(sid(id), world.project());
    header.parent_session = parent.map(sid);
    let seed: Vec<dsh_core::SessionEvent> = (0_u64..)
        .zip(children)
        .map(|(seq, child)| dsh_core::SessionEvent {
            seq,
            time: 1,
            payload: dsh_core::EventPayload::Extension {
                kind: CATALOG_EVENT.into(),
                payload: catalog_payload(&entry(child, Some(child), ChildMode::CONTINUABLE)),
            },
        })
        .collect();
    drop(world.jsonl().create(&header, &seed).await.unwrap());
}

// B34: a cold level wider than a read-ahead batch, with a child listed
// twice: first under an earlier sibling (so it is visited out of its
// parent's catalog order) and again under the root, where it is skipped.
#[tokio::test]
async fn a_wide_cold_level_lists_in_pre_order_and_reads_each_catalog_once() {
    let model = models::holding(&Arc::new(Semaphore::new(0)));
    let world = world(&model).await;
    let ids: Vec<String> = (0..600).map(|n| format!("w{n:03}")).collect();
    cold_log(&world, "wide-root", None, &ids).await;
    for id in &ids {
        let children = match id.as_str() {
            // Lists a child of the root from a later batch, and one of its own.
            "w001" => vec!["w500".to_owned(), "w001-own".to_owned()],
            _ => Vec::new(),
        };
        cold_log(&world, id, Some("wide-root"), &children).await;
    }
    cold_log(&world, "w001-own", Some("w001"), &[]).await;

    world.store.reset_calls();
    let rows = list(&world, "wide-root").await.unwrap();
    let listed: Vec<(u32, &str)> = rows
        .iter()
        .map(|row| (row.depth, row.entry.child_id.as_str()))
        .collect();
    let mut expected: Vec<(u32, &str)> =
        vec![(1, "w000"), (1, "w001"), (2, "w500"), (2, "w001-own")];
    expected.extend(
        ids.iter()
            .skip(2)
            .filter(|id| id.as_str() != "w500")
            .map(|id| (1, id.as_str())),
    );
    assert_eq!(listed, expected);
    assert!(rows.iter().all(|row| row.diagnostic.is_none()));
    assert_eq!(rows[1].path.as_deref(), Some("w001"));
    assert_eq!(rows[2].path.as_deref(), Some("w001/w500"));
    assert!(rows[1].has_children && !rows[2].has_children);
    let read = loads(&world);
    assert_eq!(read.len(), 602, "the root, its children and w001-own");
    assert!(read.values().all(|&count| count == 1), "{read:?}");
}
