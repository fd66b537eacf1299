//! `wait`: block the caller until its own inbox holds something (a message
//! or a settlement notice) or a bounded timeout passes, then say what is
//! there: its kind, its sender, and where the model will read it. The
//! content itself is never copied into the result (B46): the loop claims
//! next-step items at the step boundary right after this call, so the model
//! reads each one exactly once, in its next request.
//!
//! Items already pending when `wait` starts end it at once: they arrived
//! while the model was producing this call and are about to be shown, so
//! waiting for "the next" item would hide them behind a timeout. The same
//! holds for items queued for the caller's next turn (a user's follow-up,
//! say): no step of this turn will show them, so `wait` reports them at
//! once and says to end the turn to read them. The result describes every
//! item pending when `wait` returns, whichever of these paths it took.
//!
//! The inbox is observed before anything is checked, so an item accepted
//! between the check and the wait still ends it. Each item is described
//! from its arrival announcement when `wait` saw one; only items pending
//! before it started are looked up in the log, read back from its end on
//! the blocking pool (the model may call `wait` thousands of times a
//! minute: a whole-log replay per call on an async worker is O(n²)).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::{
    Agent, EventPayload, InboxArrival, InboxTarget, MessageId, MessageSource, SessionId, Tool,
    ToolContext, ToolError, ToolOutput,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::RuntimeBinding;
use crate::error::ControlError;
use crate::tree::root_of;

/// The shortest timeout `wait` accepts, in milliseconds.
pub const MIN_WAIT_MS: u64 = 1;
/// The longest timeout `wait` accepts, in milliseconds (ten minutes).
pub const MAX_WAIT_MS: u64 = 600_000;
/// The timeout when the model gives none, in milliseconds (one minute).
pub const DEFAULT_WAIT_MS: u64 = 60_000;

/// The arguments of `wait`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitInput {
    /// How long to wait at most, in milliseconds
    /// ([`MIN_WAIT_MS`]..=[`MAX_WAIT_MS`]); [`DEFAULT_WAIT_MS`] when absent.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// The `wait` tool.
#[derive(Debug, Clone)]
pub struct WaitTool {
    binding: RuntimeBinding,
}

impl WaitTool {
    /// The tool, acting through `binding`'s runtime (used to name senders).
    pub fn new(binding: RuntimeBinding) -> Self {
        Self { binding }
    }
}

/// One inbox item as `wait` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    /// Its source's kind ([`MessageSource::kind`]).
    pub kind: String,
    /// Who sent it, when an agent did.
    pub sender: Option<SessionId>,
    /// The list it waits in.
    pub target: InboxTarget,
}

type Item = Arrival;

/// The items pending in `agent`'s inbox, in `pending`'s order (next-step
/// items first, acceptance order within each list). Items announced while
/// `wait` watched are described from their announcements; only the rest
/// (pending before it started, or lost to a lagging receiver) are looked up
/// in the log, on the blocking pool and reading back from its end, so a
/// call never replays or copies the caller's whole log on an async worker.
async fn pending_items(
    agent: &Arc<dyn Agent>,
    pending: Vec<MessageId>,
    mut announced: HashMap<MessageId, Item>,
) -> Vec<Item> {
    let missing: Vec<MessageId> = pending
        .iter()
        .filter(|id| !announced.contains_key(*id))
        .cloned()
        .collect();
    if !missing.is_empty() {
        let agent = agent.clone();
        let looked_up =
            tokio::task::spawn_blocking(move || accepted_items(agent.as_ref(), missing))
                .await
                .unwrap_or_default();
        announced.extend(looked_up);
    }
    pending
        .iter()
        .filter_map(|id| announced.remove(id))
        .collect()
}

/// The acceptance of each of `ids` in `agent`'s log, found by reading the
/// borrowed log back from its end until all are found.
fn accepted_items(agent: &dyn Agent, ids: Vec<MessageId>) -> HashMap<MessageId, Item> {
    let mut wanted: HashSet<MessageId> = ids.into_iter().collect();
    let mut found = HashMap::with_capacity(wanted.len());
    agent.visit_events_since(0, &mut |events| {
        for event in events.iter().rev() {
            if wanted.is_empty() {
                break;
            }
            if let EventPayload::InboxAccepted(accepted) = &event.payload
                && wanted.remove(&accepted.message.id)
            {
                found.insert(
                    accepted.message.id.clone(),
                    Item {
                        kind: accepted.message.source.kind().to_owned(),
                        sender: accepted.message.source.sender().cloned(),
                        target: accepted.target,
                    },
                );
            }
        }
    });
    found
}

/// Note an announced arrival.
fn note(announced: &mut HashMap<MessageId, Item>, arrival: InboxArrival) {
    announced.insert(
        arrival.message_id,
        Item {
            kind: arrival.source_kind,
            sender: arrival.sender,
            target: arrival.target,
        },
    );
}

#[async_trait]
impl Tool for WaitTool {
    fn name(&self) -> &str {
        "wait"
    }

    fn description(&self) -> String {
        format!(
            "Wait until a message or a subagent's settlement notice arrives for you, or until the \
             timeout passes, and say what arrived and from whom. The content itself follows this \
             result in your conversation; it is not repeated here. Returns at once when \
             something is already waiting. Use it instead of polling list_agents when you have \
             nothing else to do until your subagents answer. timeout_ms is {MIN_WAIT_MS} to \
             {MAX_WAIT_MS} (default {DEFAULT_WAIT_MS})."
        )
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "timeout_ms": {
                    "type": "integer",
                    "minimum": MIN_WAIT_MS,
                    "maximum": MAX_WAIT_MS,
                    "description": format!("How long to wait at most, in milliseconds (default {DEFAULT_WAIT_MS}).")
                }
            },
            "additionalProperties": false
        })
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let WaitInput { timeout_ms } = crate::parse(self.name(), input)?;
        let timeout = timeout_ms.unwrap_or(DEFAULT_WAIT_MS);
        if !(MIN_WAIT_MS..=MAX_WAIT_MS).contains(&timeout) {
            return Err(ControlError::TimeoutOutOfRange {
                got: timeout,
                min: MIN_WAIT_MS,
                max: MAX_WAIT_MS,
            }
            .into());
        }
        let runtime = self.binding.runtime()?;
        let caller = &ctx.agent;
        // Observe first: whatever is accepted after this line is seen.
        let mut arrivals = caller.observe_inbox();
        if ctx.cancel.is_cancelled() {
            return Err(ControlError::WaitCancelled.into());
        }
        let deadline = tokio::time::sleep(Duration::from_millis(timeout));
        tokio::pin!(deadline);
        // An arrival is announced after its item is in the inbox, so an
        // announcement can come late, for an item the loop already claimed
        // (the input of this very turn, say): only a pending item counts.
        let mut announced = HashMap::new();
        let mut pending = caller.pending();
        while pending.is_empty() {
            let woke = tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => return Err(ControlError::WaitCancelled.into()),
                arrival = arrivals.recv() => arrival,
                () = &mut deadline => {
                    return Ok(ToolOutput::text(nothing_arrived(timeout)));
                }
            };
            match woke {
                Ok(arrival) => {
                    note(&mut announced, arrival);
                    pending = caller.pending();
                }
                Err(RecvError::Lagged(_)) => pending = caller.pending(),
                Err(RecvError::Closed) => return Err(ControlError::InboxClosed.into()),
            }
        }
        // Announcements that came with or after the items found pending.
        loop {
            match arrivals.try_recv() {
                Ok(arrival) => note(&mut announced, arrival),
                Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        let items = pending_items(caller, pending, announced).await;
        // Naming is best effort, read along each sender's lineage (never by
        // listing the tree): what cannot be read leaves the session id.
        let root = root_of(runtime, caller).ok();
        let mut names = HashMap::new();
        for sender in items.iter().filter_map(|item| item.sender.as_ref()) {
            if names.contains_key(sender) {
                continue;
            }
            let name = match &root {
                Some(root) => runtime.member_name(root, sender).await,
                None => sender.to_string(),
            };
            names.insert(sender.clone(), name);
        }
        let name = |id: &SessionId| names.get(id).cloned().unwrap_or_else(|| id.to_string());
        Ok(ToolOutput::text(arrivals_text(&items, name)))
    }
}

/// What `wait` says when nothing arrived within `timeout_ms`.
pub fn nothing_arrived(timeout_ms: u64) -> String {
    format!(
        "Nothing arrived within {}. Your agents may still be working: call wait again, or carry \
         on with other work.",
        duration_text(timeout_ms)
    )
}

/// `30 s` for whole seconds, else `1500 ms`.
fn duration_text(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// One item, for the model: its kind and its sender.
fn describe(item: &Item, name: &dyn Fn(&SessionId) -> String) -> String {
    let from = item.sender.as_ref().map(name);
    match (item.kind.as_str(), from) {
        (kind, _) if kind == MessageSource::User.kind() => "a message from the user".to_owned(),
        ("agent-message", Some(from)) => format!("a message from `{from}`"),
        ("subagent-settled", Some(from)) => format!("a settlement notice from `{from}`"),
        (kind, Some(from)) => format!("a `{kind}` item from `{from}`"),
        (kind, None) => format!("a `{kind}` item"),
    }
}

/// What `wait` says about the items pending when it returns (`name` names
/// a sender for the model). Says so when an arrival was discarded before
/// it could be described.
pub fn arrivals_text(items: &[Arrival], name: impl Fn(&SessionId) -> String) -> String {
    let list = |target: InboxTarget| -> Vec<String> {
        items
            .iter()
            .filter(|item| item.target == target)
            .map(|item| describe(item, &name))
            .collect()
    };
    let (now, later) = (list(InboxTarget::NextStep), list(InboxTarget::NextTurn));
    let mut parts = Vec::new();
    match now.len() {
        0 => {}
        1 => parts.push(format!(
            "1 item arrived for you: {}. It follows this result.",
            now[0]
        )),
        n => parts.push(format!(
            "{n} items arrived for you: {}. They follow this result.",
            now.join(", ")
        )),
    }
    match later.len() {
        0 => {}
        1 => parts.push(format!(
            "1 item is queued for your next turn: {}. End this turn to read it.",
            later[0]
        )),
        n => parts.push(format!(
            "{n} items are queued for your next turn: {}. End this turn to read them.",
            later.join(", ")
        )),
    }
    if parts.is_empty() {
        "Something arrived for you but was withdrawn before it could be shown. Call wait again."
            .to_owned()
    } else {
        parts.join(" ")
    }
}
