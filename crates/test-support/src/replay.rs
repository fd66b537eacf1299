//! The replay workload of the benches, shared so that it is measured the
//! same way under each allocator: a 100,000-event log of realistic turns
//! ([`mixed_event`]) written to a JSONL store, its load, and its cold
//! resume until a follow-up is accepted. The harness's `replay` bench runs
//! it under the system allocator (what a library user gets by default),
//! the `dsh` crate's `resume` bench under the allocator the `dsh` binary
//! ships with. Every function panics on a failure, as a bench should.

#![allow(clippy::expect_used, reason = "bench workload: a failure panics")]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::{
    AgentFactory, CancellationToken, Durability, ResumeAgent, SessionEvent, SessionHeader,
    SessionId, SessionStore, UserMessage,
};
use dsh_harness::store::JsonlStore;
use dsh_harness::{Harness, Scripted, ScriptedModel};
use tokio::runtime::Runtime;

use crate::bench::mixed_event;

/// Events in the replay log.
pub const EVENTS: u64 = 100_000;

/// The runtime the replay benches run on: two workers, as on the machine
/// the aims are set for.
///
/// # Panics
/// When the runtime cannot be built.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a two-worker runtime")
}

/// A JSONL store without fsyncs in a temporary directory (removed when
/// it is dropped), for replay logs.
pub struct ReplayStore {
    store: JsonlStore,
    _root: tempfile::TempDir,
}

/// A replay log written to a [`ReplayStore`]: its id, file and size.
pub struct ReplayLog {
    /// The session.
    pub id: SessionId,
    /// Its file.
    pub path: PathBuf,
    /// Its size in bytes, as written.
    pub size: u64,
}

impl ReplayStore {
    /// A fresh store in a temporary directory named from `prefix`.
    ///
    /// # Panics
    /// When the directory or the store cannot be made.
    pub fn new(prefix: &str) -> Self {
        let root = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .expect("a temporary directory for the replay store");
        let store = JsonlStore::new(root.path(), Durability::None).expect("the replay store");
        Self { store, _root: root }
    }

    /// The store.
    pub fn store(&self) -> &JsonlStore {
        &self.store
    }

    /// Write the [`EVENTS`]-event log of `id`, in appends of a thousand
    /// events.
    ///
    /// # Panics
    /// When `id` is not a session id or the store fails.
    pub fn write(&self, rt: &Runtime, id: &str) -> ReplayLog {
        let id = SessionId::new(id).expect("a replay log's id");
        let header = SessionHeader::new(id.clone(), "/work/project");
        let log = rt
            .block_on(self.store.create(&header, &[]))
            .expect("create the replay log");
        for chunk in (0..EVENTS).collect::<Vec<_>>().chunks(1_000) {
            let batch: Vec<SessionEvent> = chunk.iter().map(|&seq| mixed_event(seq)).collect();
            rt.block_on(log.append(&batch))
                .expect("append to the replay log");
        }
        rt.block_on(log.close());
        drop(log);
        let path = self.store.log_path(&id);
        let size = std::fs::metadata(&path)
            .expect("the replay log's size")
            .len();
        ReplayLog { id, path, size }
    }
}

/// The time `iters` loads of `log` take; each loaded log is freed off the
/// clock.
///
/// # Panics
/// When a load fails or misses events.
pub fn time_loads(rt: &Runtime, store: &ReplayStore, log: &ReplayLog, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let start = Instant::now();
        let loaded = rt
            .block_on(store.store.load(&log.id))
            .expect("load the replay log");
        total += start.elapsed();
        assert_eq!(loaded.events.len() as u64, EVENTS);
        drop(black_box(loaded));
    }
    total
}

/// A harness over `store` whose model never answers: a resumed agent's
/// turn waits for it until the agent is disposed.
///
/// # Panics
/// When the harness cannot be built.
pub fn resume_harness(store: &ReplayStore) -> Harness {
    let model = ScriptedModel::new()
        .without_recording()
        .responder(|_| Scripted::Hang);
    Harness::builder(Arc::new(store.store.clone()))
        .model(Arc::new(model))
        .build()
        .expect("a harness over the replay store")
}

/// The time `iters` cold resumes of `log` take, each until a follow-up is
/// accepted. Off the clock, each resumed agent is disposed and the log
/// cut back to its length as written, so every resume reads the same log.
///
/// # Panics
/// When a resume or a follow-up fails, or the log cannot be cut back.
pub fn time_cold_resumes(rt: &Runtime, harness: &Harness, log: &ReplayLog, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let start = Instant::now();
        let handle = rt
            .block_on(harness.resume(ResumeAgent {
                id: log.id.clone(),
                setup: Default::default(),
                cancel: CancellationToken::new(),
            }))
            .expect("resume the replay log");
        rt.block_on(handle.agent().followup(UserMessage::user_text("go")))
            .expect("a follow-up to the resumed agent");
        total += start.elapsed();
        rt.block_on(handle.dispose());
        // Back to the log as written, for the next resume.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&log.path)
            .expect("open the replay log to cut it back");
        file.set_len(log.size).expect("cut the replay log back");
    }
    total
}
