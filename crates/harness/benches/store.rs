//! Session store benchmarks: append throughput of the JSONL store under each
//! durability setting and of the memory store, replay (load) throughput of a
//! 100,000-event JSONL log, and durable log creation: the fsync floor (a bare
//! exclusive create, one write and `fdatasync`, in a loop), the store's
//! create under `TurnBoundary` (which syncs the file and its directory; and
//! the temporary-file-and-link path a seeded create takes, every create's
//! path before), and
//! a durable child's log (create, a turn's events, checkpoint, close) under
//! `TurnBoundary` and `Grouped`, one after another and many at once. They
//! write only under a fresh directory in the system temporary directory;
//! nothing is deleted before the end (creating files soon after deleting
//! many would measure the file system's allocator), when it all is.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark code")]

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dsh_core::content::ContentBlock;
use dsh_core::message::{InboxTarget, MessageSource, ToolCall, Usage, UserMessage};
use dsh_core::session::{
    AssistantEntry, EventPayload, InboxAccepted, InboxIds, SessionEvent, SessionHeader, StepStart,
    ToolResultEntry, TurnEnd, TurnStart, UserEntry,
};
use dsh_core::{CallId, Durability, MessageId, SessionId, SessionStore, StopReason};
use dsh_harness::store::{JsonlStore, MemoryStore};
use tokio::runtime::Runtime;

/// Events per turn in the append benchmarks: a checkpoint follows each turn.
const TURN: u64 = 12;

const ASSISTANT_TEXT: &str = "I looked at the failing test: the parser treats a trailing comma as the \
end of the list, so the last element is dropped. I will change the loop to check for the closing \
bracket first and then add a regression test.";

const TOOL_OUTPUT: &str = "fn parse_list(input: &str) -> Vec<Item> {\n    let mut items = Vec::new();\n    \
for part in input.split(',') {\n        if part.trim().is_empty() { break; }\n        \
items.push(Item::from(part));\n    }\n    items\n}\n";

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn scratch_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("dsh-store-bench-{}-{name}", std::process::id()))
}

fn header(id: &SessionId) -> SessionHeader {
    SessionHeader::new(id.clone(), "/work/project")
}

fn event(seq: u64, payload: EventPayload) -> SessionEvent {
    SessionEvent {
        seq,
        time: 1_700_000_000_000 + seq * 37,
        payload,
    }
}

/// The event appended one per call: an assistant message of ~200 bytes.
fn assistant(seq: u64) -> SessionEvent {
    event(
        seq,
        EventPayload::AssistantMessage(AssistantEntry {
            content: vec![ContentBlock::text(ASSISTANT_TEXT)],
        }),
    )
}

/// The `seq`-th event of a realistic log: turns of inbox traffic, a user
/// message, two steps with text, a tool call and its result, and usage.
fn mixed(seq: u64) -> SessionEvent {
    let turn = seq / 13;
    let message_id = MessageId::new(format!("m-{turn:08x}"));
    let call_id = CallId::new(format!("c-{turn:08x}"));
    let payload = match seq % 13 {
        0 => EventPayload::TurnStart(TurnStart { turn }),
        1 => EventPayload::InboxAccepted(InboxAccepted {
            message: UserMessage {
                id: message_id,
                content: vec![ContentBlock::text(
                    "Please fix the parser bug in src/list.rs and add a test.",
                )],
                source: MessageSource::User,
            },
            target: InboxTarget::NextTurn,
            wake: true,
        }),
        2 => EventPayload::InboxClaimed(InboxIds {
            message_ids: vec![message_id],
        }),
        3 => EventPayload::UserMessage(UserEntry {
            message: UserMessage {
                id: message_id,
                content: vec![ContentBlock::text(
                    "Please fix the parser bug in src/list.rs and add a test.",
                )],
                source: MessageSource::User,
            },
        }),
        4 | 9 => EventPayload::StepStart(StepStart {
            turn,
            step: u64::from(seq % 13 == 9),
        }),
        5 | 10 => EventPayload::AssistantMessage(AssistantEntry {
            content: vec![ContentBlock::text(ASSISTANT_TEXT)],
        }),
        6 => EventPayload::ToolCall(ToolCall {
            call_id,
            name: "read_file".into(),
            input: serde_json::json!({"path": "src/list.rs", "offset": 0, "limit": 200}),
        }),
        7 => EventPayload::ToolResult(ToolResultEntry {
            call_id,
            name: "read_file".into(),
            content: vec![ContentBlock::text(TOOL_OUTPUT)],
            is_error: false,
        }),
        8 | 11 => EventPayload::Usage(Usage {
            input_tokens: 4_000 + seq,
            output_tokens: 120,
            ..Usage::default()
        }),
        _ => EventPayload::TurnEnd(TurnEnd {
            turn,
            stop_reason: StopReason::COMPLETED,
            diagnostic: None,
        }),
    };
    event(seq, payload)
}

fn append(c: &mut Criterion) {
    let rt = runtime();
    let root = scratch_dir("append");
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Elements(1));
    for (name, durability) in [
        ("none", Durability::None),
        ("turn-boundary", Durability::TurnBoundary),
        ("every-event", Durability::EveryEvent),
    ] {
        if durability == Durability::EveryEvent {
            group.sample_size(10);
            group.warm_up_time(Duration::from_millis(500));
        }
        let store = JsonlStore::new(root.join(name), durability).unwrap();
        let mut logs = 0u64;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                // A fresh log per sample keeps the files small.
                logs += 1;
                let id = SessionId::new(format!("bench-{logs}")).unwrap();
                let log = rt.block_on(store.create(&header(&id), &[])).unwrap();
                let mut batch = [assistant(0)];
                let start = Instant::now();
                for seq in 0..iters {
                    batch[0].seq = seq;
                    rt.block_on(log.append(&batch)).unwrap();
                    if seq % TURN == TURN - 1 {
                        rt.block_on(log.checkpoint()).unwrap();
                    }
                }
                let elapsed = start.elapsed();
                drop(log);
                elapsed
            });
        });
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&root);
}

/// The events of one short turn of a child, after its create: what a
/// one-shot child writes before its turn-end checkpoint.
fn child_turn() -> Vec<SessionEvent> {
    (0..13).map(mixed).collect()
}

/// One durable child's log: create, a turn, the turn-end checkpoint, close.
async fn durable_child(store: &JsonlStore, id: SessionId, turn: &[SessionEvent]) {
    let log = store.create(&header(&id), &[]).await.unwrap();
    log.append(turn).await.unwrap();
    log.checkpoint().await.unwrap();
    log.close().await;
}

fn create(c: &mut Criterion) {
    const CHILDREN: u64 = 1_000;
    let root = scratch_dir("create");
    let mut group = c.benchmark_group("create");
    group.sample_size(10);
    let header_line = {
        let mut line = serde_json::to_vec(&header(&SessionId::new("floor-0").unwrap())).unwrap();
        line.push(b'\n');
        line
    };
    let mut round = 0u64;
    let mut fresh = |name: &str| {
        round += 1;
        let dir = root.join(format!("{name}-{round}"));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    };

    // The floor: what any durable create costs on this disk.
    group.throughput(Throughput::Elements(1));
    group.bench_function("floor/create-fdatasync", |b| {
        b.iter_custom(|iters| {
            let dir = fresh("floor");
            let start = Instant::now();
            for n in 0..iters {
                let mut file = std::fs::OpenOptions::new()
                    .append(true)
                    .create_new(true)
                    .open(dir.join(format!("floor-{n}.jsonl")))
                    .unwrap();
                std::io::Write::write_all(&mut file, &header_line).unwrap();
                file.sync_data().unwrap();
            }
            start.elapsed()
        });
    });
    let rt = runtime();
    group.bench_function("store/turn-boundary", |b| {
        b.iter_custom(|iters| {
            let store = JsonlStore::new(fresh("store"), Durability::TurnBoundary).unwrap();
            let start = Instant::now();
            for n in 0..iters {
                let id = SessionId::new(format!("c-{n}")).unwrap();
                let log = rt.block_on(store.create(&header(&id), &[])).unwrap();
                drop(log);
            }
            start.elapsed()
        });
    });
    // The path every create took before in-place creation (a seeded create
    // still takes it): temporary file, fsync, link, unlink, directory fsync.
    group.bench_function("store/turn-boundary-temp-link", |b| {
        b.iter_custom(|iters| {
            let store = JsonlStore::new(fresh("link"), Durability::TurnBoundary).unwrap();
            let seed = [mixed(0)];
            let start = Instant::now();
            for n in 0..iters {
                let id = SessionId::new(format!("c-{n}")).unwrap();
                let log = rt.block_on(store.create(&header(&id), &seed)).unwrap();
                drop(log);
            }
            start.elapsed()
        });
    });

    // A durable child's log, one after another and all at once.
    let turn = child_turn();
    let threads = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    group.throughput(Throughput::Elements(CHILDREN));
    for (name, durability) in [
        ("turn-boundary", Durability::TurnBoundary),
        ("grouped", Durability::Grouped),
    ] {
        for mode in ["sequential", "concurrent"] {
            group.bench_function(format!("child/{name}-{mode}/{CHILDREN}"), |b| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        let store = JsonlStore::new(fresh(name), durability).unwrap();
                        let ids =
                            (0..CHILDREN).map(|n| SessionId::new(format!("child-{n}")).unwrap());
                        let start = Instant::now();
                        threads.block_on(async {
                            if mode == "sequential" {
                                for id in ids {
                                    durable_child(&store, id, &turn).await;
                                }
                            } else {
                                let children = ids.map(|id| {
                                    let (store, turn) = (store.clone(), turn.clone());
                                    tokio::spawn(
                                        async move { durable_child(&store, id, &turn).await },
                                    )
                                });
                                for child in futures::future::join_all(children).await {
                                    child.unwrap();
                                }
                            }
                        });
                        spent += start.elapsed();
                    }
                    spent
                });
            });
        }
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&root);
}

fn replay(c: &mut Criterion) {
    const EVENTS: u64 = 100_000;
    let rt = runtime();
    let root = scratch_dir("replay");
    let store = JsonlStore::new(&root, Durability::None).unwrap();
    let id = SessionId::new("replay").unwrap();
    let log = rt.block_on(store.create(&header(&id), &[])).unwrap();
    for chunk in (0..EVENTS).collect::<Vec<_>>().chunks(1_000) {
        let batch: Vec<SessionEvent> = chunk.iter().map(|&seq| mixed(seq)).collect();
        rt.block_on(log.append(&batch)).unwrap();
    }
    drop(log);
    let size = std::fs::metadata(store.log_path(&id)).unwrap().len();
    let mut group = c.benchmark_group("replay");
    group.throughput(Throughput::Bytes(size));
    group.sample_size(30);
    group.bench_function("100k", |b| {
        // Timed: load() itself. Freeing the events afterwards is the caller's
        // cost; each result is freed before the next load, as in a host.
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let loaded = rt.block_on(store.load(&id)).unwrap();
                total += start.elapsed();
                assert_eq!(loaded.events.len() as u64, EVENTS);
                drop(black_box(loaded));
            }
            total
        });
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&root);
}

fn memory(c: &mut Criterion) {
    let rt = runtime();
    let store = MemoryStore::new();
    let mut logs = 0u64;
    let mut group = c.benchmark_group("memory");
    group.throughput(Throughput::Elements(1));
    group.bench_function("append", |b| {
        b.iter_custom(|iters| {
            logs += 1;
            let id = SessionId::new(format!("bench-{logs}")).unwrap();
            let log = rt.block_on(store.create(&header(&id), &[])).unwrap();
            let mut batch = [assistant(0)];
            let start = Instant::now();
            for seq in 0..iters {
                batch[0].seq = seq;
                rt.block_on(log.append(&batch)).unwrap();
            }
            let elapsed = start.elapsed();
            drop(log);
            rt.block_on(store.remove(&id)).unwrap();
            elapsed
        });
    });
    group.finish();
}

criterion_group!(benches, append, replay, memory, create);
criterion_main!(benches);
