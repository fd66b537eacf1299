//! Measurements that are not a time per iteration (bytes per event on
//! disk, heap bytes per idle child, a ratio of two runs), recorded by the
//! benches where `cargo xtask bench` finds them next to criterion's own
//! estimates: one JSON file per measurement under
//! `target/bench-results/`. Also the events of a realistic log
//! ([`mixed_event`]), which the store and replay benches write.

use std::path::PathBuf;

use dsh_core::content::ContentBlock;
use dsh_core::message::{InboxTarget, MessageSource, ToolCall, Usage, UserMessage};
use dsh_core::session::{
    AssistantEntry, EventPayload, InboxAccepted, InboxIds, SessionEvent, StepStart,
    ToolResultEntry, TurnEnd, TurnStart, UserEntry,
};
use dsh_core::{CallId, MessageId, StopReason};
use serde::Serialize;

/// One measurement a bench made outside criterion's timing.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement<'a> {
    /// What was measured, as the `cargo xtask bench` table names it, for
    /// example `"resident idle child, heap"`.
    pub workload: &'a str,
    /// The size of the workload (children, events), if it has one.
    pub n: Option<u64>,
    /// The measured value, in `unit`.
    pub value: f64,
    /// The unit of `value`, for example `"B/child"` or `"B/event"`.
    pub unit: &'a str,
}

/// Where measurements go: `$DSH_BENCH_RESULTS` when set, otherwise
/// `bench-results/` in the target directory the running bench was built
/// into.
pub fn results_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("DSH_BENCH_RESULTS") {
        return PathBuf::from(dir);
    }
    target_dir().join("bench-results")
}

/// The target directory the running bench was built into: a bench runs
/// as `<target>/<profile>/deps/<name>-<hash>`.
fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// The directory `cargo xtask bench` keeps the benches' stores in,
/// `bench-stores/` in the target directory, and removes once its table is
/// printed.
pub fn stores_root() -> PathBuf {
    target_dir().join(STORES)
}

/// The name of [`stores_root`] inside the target directory.
pub const STORES: &str = "bench-stores";

/// A fresh, empty directory for the logs of the bench `name` (under
/// [`stores_root`], named after it, this process and the call's number
/// within it), which the bench must
/// not delete. On this machine's ext4, creating files within minutes of
/// deleting many costs up to ten times more (the inode allocator skips, one
/// inode-table lookup each, every inode freed in the last minutes): a bench
/// that removes its thousands of logs when it ends slows every create of
/// the benches that run after it, and they would measure the allocator
/// instead of the store. `cargo xtask bench` removes them all after the
/// last bench; after a plain `cargo bench`, `cargo clean` or removing the
/// directory does.
///
/// # Panics
/// When the directory cannot be created: a bench cannot run without it.
#[allow(clippy::expect_used)]
pub fn store_dir(name: &str) -> PathBuf {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = stores_root().join(format!("{name}-{}-{call}", std::process::id()));
    // A leftover of an earlier process with the same pid is moved aside,
    // not deleted (deleting is what must not happen mid-run).
    if dir.exists() {
        let aside = dir.with_extension(format!(
            "old-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |since| since.as_nanos())
        ));
        std::fs::rename(&dir, aside).expect("move an old bench store aside");
    }
    std::fs::create_dir_all(&dir).expect("create a bench store directory");
    dir
}

/// Records `measurement` (replacing an earlier one of the same workload
/// and size) and prints it, so a plain `cargo bench` shows it too.
///
/// # Errors
/// When the results directory cannot be created or written.
pub fn record(measurement: &Measurement<'_>) -> std::io::Result<()> {
    let dir = results_dir();
    std::fs::create_dir_all(&dir)?;
    let slug: String = measurement
        .workload
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = match measurement.n {
        Some(n) => format!("{slug}-{n}.json"),
        None => format!("{slug}.json"),
    };
    let json = serde_json::to_vec(measurement).map_err(std::io::Error::other)?;
    std::fs::write(dir.join(name), json)?;
    println!(
        "{}{}: {:.3} {}",
        measurement.workload,
        measurement
            .n
            .map(|n| format!(" (N={n})"))
            .unwrap_or_default(),
        measurement.value,
        measurement.unit
    );
    Ok(())
}

/// Runs `work` to completion as a task on one of `runtime`'s workers and
/// returns its output.
///
/// `Runtime::block_on` polls its future on the calling thread, which is
/// not one of the runtime's workers, so every task that future spawns
/// lands in the shared queue and must wake a parked worker, and every
/// result must wake the calling thread back: two cross-thread wake-ups
/// (a futex or an eventfd write each, tens of microseconds on this virtual
/// machine) per hand-off. In the product, a parent's tool call runs inside
/// its agent's driver task, on a worker, so a child's tasks are spawned
/// from a worker. A bench that times a hand-off runs its body here so that
/// it measures that path.
///
/// # Panics
/// When `work` panics (the panic is resumed here).
pub fn on_worker<F>(runtime: &tokio::runtime::Runtime, work: F) -> F::Output
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    match runtime.block_on(runtime.spawn(work)) {
        Ok(output) => output,
        Err(error) => match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(error) => panic!("bench task cancelled: {error}"),
        },
    }
}

/// The text of an assistant message in [`mixed_event`] (~200 bytes).
pub const ASSISTANT_TEXT: &str = "I looked at the failing test: the parser treats a trailing comma as the \
end of the list, so the last element is dropped. I will change the loop to check for the closing \
bracket first and then add a regression test.";

/// The output of the tool call in [`mixed_event`].
const TOOL_OUTPUT: &str = "fn parse_list(input: &str) -> Vec<Item> {\n    let mut items = Vec::new();\n    \
for part in input.split(',') {\n        if part.trim().is_empty() { break; }\n        \
items.push(Item::from(part));\n    }\n    items\n}\n";

/// The `seq`-th event of a realistic log: turns of inbox traffic, a user
/// message, two steps with text, a tool call and its result, and usage.
///
/// Thirteen events per turn; `time` grows by 37 ms an event.
pub fn mixed_event(seq: u64) -> SessionEvent {
    let turn = seq / 13;
    let message_id = MessageId::new(format!("m-{turn:08x}"));
    let call_id = CallId::new(format!("c-{turn:08x}"));
    let message = || UserMessage {
        id: message_id.clone(),
        content: vec![ContentBlock::text(
            "Please fix the parser bug in src/list.rs and add a test.",
        )],
        source: MessageSource::User,
    };
    let payload = match seq % 13 {
        0 => EventPayload::TurnStart(TurnStart { turn }),
        1 => EventPayload::InboxAccepted(InboxAccepted {
            message: message(),
            target: InboxTarget::NextTurn,
            wake: true,
        }),
        2 => EventPayload::InboxClaimed(InboxIds {
            message_ids: vec![message_id],
        }),
        3 => EventPayload::UserMessage(UserEntry { message: message() }),
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
            input: serde_json::json!({"path": "src/list.rs", "offset": 0, "limit": 200}).into(),
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
    SessionEvent {
        seq,
        time: 1_700_000_000_000 + seq * 37,
        payload,
    }
}
