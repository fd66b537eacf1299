//! The process-level kill test (issue 13): the real `dsh run` of the
//! offline demo (a lead delegating to a spawn child and a fork child, a
//! message by name, two settlement notices) SIGKILLed at 50 random points
//! chosen from a printed seed (`DSH_KILL_SEED=<n>` replays a run), most
//! over one session directory that accumulates what every kill left, some
//! over a fresh one. At least half the kills must land inside a run (the
//! rest find it finished). After each kill:
//! - no process of the run is left behind;
//! - every complete line of every log parses (only an unterminated last
//!   line, a torn tail that the next open cuts, may not);
//! - `dsh agents` succeeds and lists every tree (every root log);
//! - a `dsh send` to a cold child of the killed tree answers within a
//!   bound (or, for a child whose task never reached its log, is refused in
//!   one line instead of taking the message as its task);
//! - after that resume, every tool call of the resumed logs has a result,
//!   every child of the tree whose turn ended has a settlement notice in
//!   the root's log (B54: a notice lost to the kill is delivered once the
//!   tree is live again), and no message or notice was accepted twice;
//! - no hidden temporary file is left once the store has opened;
//! - every line the logs held when the run died (each accepted message,
//!   tool result and notice, in every tree of the directory) is still there,
//!   unchanged and once, after `dsh agents` and after the send
//!   (`dsh_test_support::acknowledged`).
//!
//! Every wait is bounded, so a hang fails the test instead of blocking it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsh_test_support::acknowledged::{Held, OnDisk};
use serde_json::Value;
use support::{BOUND, Scratch, dir_bytes, kill_once_written, text, within};

/// How many kills.
const KILLS: usize = 50;
/// How long a reply to a cold child may take.
const SEND_BOUND: Duration = Duration::from_secs(20);
/// After this many sends that did not answer, later kills skip the send
/// (each costs [`SEND_BOUND`]); the failures are reported all the same.
const MAX_HUNG_SENDS: usize = 3;

/// One log as it is on disk.
struct Log {
    id: String,
    header: Value,
    events: Vec<Value>,
}

/// Every log of `dir`; fails on a complete line that does not parse.
fn logs(dir: &Path) -> Vec<Log> {
    let mut logs = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return logs;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".jsonl") else {
            continue;
        };
        if id.starts_with('.') {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let mut lines = bytes[..complete]
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .enumerate()
            .map(|(index, line)| {
                serde_json::from_slice::<Value>(line).unwrap_or_else(|err| {
                    panic!(
                        "{}:{}: a complete line does not parse: {err}",
                        path.display(),
                        index + 1
                    )
                })
            });
        // A file whose header line is torn holds no session yet.
        let Some(header) = lines.next() else {
            continue;
        };
        logs.push(Log {
            id: id.to_owned(),
            header,
            events: lines.collect(),
        });
    }
    logs
}

fn is_root(log: &Log) -> bool {
    log.header.get("parent_session").is_none_or(Value::is_null)
}

/// Live processes whose command line mentions `needle`.
fn processes(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{name}/cmdline")).unwrap_or_default();
        let state = std::fs::read_to_string(format!("/proc/{name}/stat")).unwrap_or_default();
        let zombie = state
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if !zombie && String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(format!("{name}: {}", String::from_utf8_lossy(&cmdline)));
        }
    }
    found
}

/// The first continuable child of `root`'s tree in a listing: its name and
/// session id.
fn cold_child(agents: &str, root: &str) -> Option<(String, String)> {
    let header = format!("tree {root}");
    agents
        .lines()
        .skip_while(|line| !line.starts_with(&header))
        .skip(1)
        .take_while(|line| !line.is_empty() && !line.starts_with("tree "))
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|row| {
            row.len() >= 4 && row[2] == "continuable" && !row.iter().any(|w| w.starts_with('('))
        })
        .map(|row| (row[0].to_owned(), row[3].to_owned()))
}

/// Whether a child's own events (after its seed) accepted a message: a
/// child catalogued whose task never reached its log has none, and must
/// refuse a message rather than take it as its task (B54).
fn has_taken_a_task(log: &Log) -> bool {
    let seed = log.header["seed_len"].as_u64().unwrap_or(0) as usize;
    log.events
        .iter()
        .skip(seed)
        .any(|e| e["type"] == "inbox/accepted")
}

/// Every `tool/call` of `log` without a `tool/result`.
fn unanswered(log: &Log) -> Vec<String> {
    let mut calls = Vec::new();
    let mut answered = HashSet::new();
    for event in &log.events {
        let call = event["payload"]["call_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match event["type"].as_str() {
            Some("tool/call") => calls.push(call),
            Some("tool/result") => {
                answered.insert(call);
            }
            _ => {}
        }
    }
    calls.retain(|call| !answered.contains(call));
    calls
}

/// The children of `root` (by catalog) whose own log has a finished turn
/// and that have no settlement notice in `root`'s log.
fn unnoticed(root: &Log, all: &HashMap<String, &Log>) -> Vec<String> {
    let children: Vec<String> = root
        .events
        .iter()
        .filter(|e| e["type"] == "subagent/child")
        .filter_map(|e| e["payload"]["child_id"].as_str().map(str::to_owned))
        .collect();
    let noticed: HashSet<&str> = root
        .events
        .iter()
        .filter(|e| e["type"] == "inbox/accepted")
        .map(|e| &e["payload"]["message"]["source"])
        .filter(|source| source["kind"] == "subagent-settled")
        .filter_map(|source| source["sender_session_id"].as_str())
        .collect();
    children
        .into_iter()
        .filter(|child| {
            all.get(child).is_some_and(|log| {
                let seed = log.header["seed_len"].as_u64().unwrap_or(0) as usize;
                log.events
                    .iter()
                    .skip(seed)
                    .any(|e| e["type"] == "turn/end")
            })
        })
        .filter(|child| !noticed.contains(child.as_str()))
        .collect()
}

/// Message ids accepted more than once by `log`'s inbox (a notice or a
/// message delivered twice).
fn accepted_twice(log: &Log) -> Vec<String> {
    let mut seen = HashSet::new();
    log.events
        .iter()
        .filter(|e| e["type"] == "inbox/accepted")
        .filter_map(|e| e["payload"]["message"]["id"].as_str())
        .filter(|id| !seen.insert(*id))
        .map(str::to_owned)
        .collect()
}

/// Hidden files (a crash's temporaries) in `dir`.
fn hidden(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// How many bytes a whole demo run writes: each kill falls once the run
/// has written a random number of bytes up to that, so the kills cover the
/// whole run however fast this machine is.
fn calibrate() -> u64 {
    let scratch = Scratch::new();
    let run = scratch.dsh(&["run"], &[]);
    assert!(run.status.success(), "{}", text(&run.stderr));
    dir_bytes(&scratch.sessions())
}

#[test]
fn dsh_run_killed_at_random_points_leaves_sessions_every_command_can_use() {
    let seed = std::env::var("DSH_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("kill test seed: {seed} (DSH_KILL_SEED={seed} replays it)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let whole = calibrate();
    println!("a whole demo run writes {whole} bytes");

    let shared = Scratch::new();
    let mut fresh = None;
    let (mut sends, mut finished, mut unwritten, mut hung_sends) = (0, 0, 0, 0);
    let mut landed = 0;
    let mut checked = Held::default();
    let mut failures: Vec<String> = Vec::new();
    let mut temporaries: HashSet<PathBuf> = HashSet::new();
    let mut reported: HashSet<PathBuf> = HashSet::new();
    for kill in 0..KILLS {
        // Every fifth kill over a fresh directory.
        let scratch = if kill % 5 == 4 {
            fresh.insert(Scratch::new())
        } else {
            &shared
        };
        let dir = scratch.sessions();
        let earlier: HashSet<String> = logs(&dir)
            .into_iter()
            .filter(is_root)
            .map(|log| log.id)
            .collect();
        // Kill once the run has written `point` bytes (or just before).
        let point = rng.u64(0..whole);
        if kill_once_written(scratch, &["run"], point) {
            landed += 1;
        } else {
            finished += 1;
        }
        let at = format!("kill {kill} at byte {point}");

        // Nothing of the run survives it.
        let needle = dir.display().to_string();
        let deadline = Instant::now() + BOUND;
        while !processes(&needle).is_empty() {
            assert!(
                Instant::now() < deadline,
                "{at}: left behind: {:?}",
                processes(&needle)
            );
            std::thread::sleep(Duration::from_millis(10));
        }

        // What the logs held when the run died: all of it must survive.
        let acked = OnDisk::read(&dir);
        let held = acked.held();
        checked.accepted += held.accepted;
        checked.results += held.results;
        let lost = |failures: &mut Vec<String>, when: &str| {
            for loss in acked.lost_in(&OnDisk::read(&dir)) {
                failures.push(format!("{at}: after {when}: {loss}"));
            }
        };
        // Every complete line parses (checked by `logs`).
        let before = logs(&dir);
        let roots: Vec<&Log> = before.iter().filter(|log| is_root(log)).collect();
        for path in hidden(&dir) {
            temporaries.insert(path);
        }
        let agents = scratch.dsh(&["agents"], &[]);
        let listing = text(&agents.stdout);
        lost(&mut failures, "dsh agents");
        if roots.is_empty() {
            // Killed before the lead's header was written.
            unwritten += 1;
            continue;
        }
        assert!(
            agents.status.success(),
            "{at}: dsh agents: {}",
            text(&agents.stderr)
        );
        for root in &roots {
            assert!(
                listing.contains(&format!("tree {}", root.id)),
                "{at}: {} not listed:\n{listing}",
                root.id
            );
        }

        // The killed tree, if the kill left one.
        let Some(newest) = roots.iter().find(|log| !earlier.contains(&log.id)) else {
            unwritten += 1;
            continue;
        };
        let Some((name, child_id)) = cold_child(&listing, &newest.id) else {
            continue;
        };
        let tasked = before
            .iter()
            .find(|log| log.id == child_id)
            .is_some_and(has_taken_a_task);
        if hung_sends >= MAX_HUNG_SENDS {
            continue;
        }
        sends += 1;
        let send = within(
            scratch.spawn(
                &["send", &name, "Are you still there?", "--root", &newest.id],
                &[],
            ),
            SEND_BOUND,
        );
        let hung = send.is_err();
        let send = send.unwrap_or_else(|output| output);
        let reply = text(&send.stdout);
        if hung {
            hung_sends += 1;
            failures.push(format!(
                "{at}: dsh send {name} did not answer within {SEND_BOUND:?}{}",
                text(&send.stderr)
            ));
        } else if tasked && (!send.status.success() || !reply.starts_with(&format!("{name}: "))) {
            failures.push(format!(
                "{at}: dsh send {name} (exit {:?}): {}{}",
                send.status.code(),
                reply.trim(),
                text(&send.stderr).trim()
            ));
        } else if !tasked
            && (send.status.success()
                || !reply.is_empty()
                || text(&send.stderr).lines().count() != 1)
        {
            failures.push(format!(
                "{at}: dsh send {name}, a child that never accepted its task, was not refused in one line (exit {:?}): {}{}",
                send.status.code(),
                reply.trim(),
                text(&send.stderr).trim()
            ));
        }
        lost(&mut failures, "dsh send");
        let after = logs(&dir);
        let by_id: HashMap<String, &Log> = after.iter().map(|log| (log.id.clone(), log)).collect();
        let root = by_id[&newest.id];
        for log in [Some(root), by_id.get(&child_id).copied()]
            .into_iter()
            .flatten()
        {
            let open = unanswered(log);
            if !open.is_empty() {
                failures.push(format!(
                    "{at}: {} has tool calls without a result after resume: {open:?}",
                    log.id
                ));
            }
        }
        for log in [Some(root), by_id.get(&child_id).copied()]
            .into_iter()
            .flatten()
        {
            let twice = accepted_twice(log);
            if !twice.is_empty() {
                failures.push(format!(
                    "{at}: {} accepted messages twice: {twice:?}",
                    log.id
                ));
            }
        }
        let lost = unnoticed(root, &by_id);
        if !lost.is_empty() {
            failures.push(format!(
                "{at}: children without a settlement notice in {}: {lost:?}",
                root.id
            ));
        }
        // The sends opened the store: a crash's temporaries must be gone.
        // Each file is reported once, at the first kill it outlived.
        let left: Vec<PathBuf> = hidden(&dir)
            .into_iter()
            .filter(|path| reported.insert(path.clone()))
            .collect();
        if !left.is_empty() {
            failures.push(format!(
                "{at}: {} temporary files left after the store opened: {left:?}",
                left.len()
            ));
        }
        dsh_test_support::replays::assert_dir_replays(&dir);
    }
    if hung_sends >= MAX_HUNG_SENDS {
        failures.push(format!(
            "later sends skipped after {hung_sends} did not answer"
        ));
    }
    println!(
        "{KILLS} kills: {landed} inside a run, {finished} runs finished first, {unwritten} left no new tree, {sends} sends to a cold child, {} temporary files seen after kills; {checked:?} kept",
        temporaries.len()
    );
    assert!(
        landed >= KILLS / 2,
        "only {landed} of {KILLS} kills landed inside a run"
    );
    assert!(
        checked.accepted > 0 && checked.results > 0,
        "no kill left an acknowledged message and tool result to check: {checked:?}"
    );
    assert!(
        sends >= KILLS / 5,
        "too few kills left a child to message ({sends})"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
