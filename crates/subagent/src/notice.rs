//! Settlement notices (B28) and terminal records (B54): the runtime's own
//! account of a child ending, sent to its still-live direct creator. A
//! creator whose tree is draining, or that takes no more input, gets it
//! injected (it must not wake); an idle one gets a turn; a running one sees
//! it at its next step.
//!
//! Every activation writes an `subagent/activation` record into the child's
//! log when it launches (its delivery), and a notice's message id names the
//! child and the seq of the turn end it reports. So a notice lost to a crash
//! between a child's last turn and its notice is found later, by comparing
//! the child's log with the notices already in its creator's log, and
//! delivered exactly once ([`SubagentRuntime::deliver_lost_notices`]).

use crate::DeliveryError;
use std::collections::HashSet;
use std::sync::Arc;

use dsh_core::{
    Agent, AgentStatus, ContentBlock, EventPayload, MessageId, MessageSource, SessionEvent,
    SessionHeader, SessionId, StopReason, UserMessage,
};

use crate::activation::Activation;
use crate::catalog::ChildMode;
use crate::error::SubagentError;
use crate::request::Delivery;
use crate::result::{SubagentResult, final_output, last_stop, summary_line};
use crate::runtime::{SubagentRuntime, lock};

/// The extension event an activation writes into its child's log at launch.
pub(crate) const ACTIVATION_EVENT: &str = "subagent/activation";

/// The payload of an activation record: `{"delivery":"parent"}` or
/// `{"delivery":"caller"}`, written by the codec's hand writer.
pub(crate) fn activation_payload(delivery: Delivery) -> dsh_core::ExtensionPayload {
    let delivery = match delivery {
        Delivery::Parent => "parent",
        Delivery::Caller => "caller",
    };
    let mut object = dsh_core::codec::ObjectWriter::new();
    object.string("delivery", delivery);
    object.finish()
}

/// The id of the notice reporting `child`'s turn that ended at `seq`: the
/// same whoever sends it, so a creator's log shows whether it arrived.
pub(crate) fn notice_id(child: &SessionId, seq: u64) -> MessageId {
    MessageId::new(format!("notice-{child}-{seq}"))
}

/// The id of the notice that a child never accepted its task.
fn untasked_id(child: &SessionId) -> MessageId {
    MessageId::new(format!("notice-{child}-untasked"))
}

/// The seq of the last turn end in `events`.
pub(crate) fn last_turn_end(events: &[SessionEvent]) -> Option<u64> {
    events.iter().rev().find_map(|event| match &event.payload {
        EventPayload::TurnEnd(_) => Some(event.seq),
        _ => None,
    })
}

/// What a cold child's log says its creator is owed.
enum Owed {
    /// The last activation ended a turn at this seq, with this result.
    Settled(u64, Box<SubagentResult>),
    /// The child was cataloged but never accepted its task.
    Untasked,
}

/// Read a cold child's log: a notice is owed for its last activation when
/// that activation was delivered to the parent and its last turn ended
/// (not a turn cut off mid-way); an activation record with no accepted
/// input at all means the child never took its task.
fn owed(header: &SessionHeader, events: &[SessionEvent]) -> Option<Owed> {
    let seed = usize::try_from(header.seed_len).unwrap_or(usize::MAX);
    let own = events.get(seed..).unwrap_or_default();
    let launched = own.iter().rposition(|event| {
        matches!(&event.payload, EventPayload::Extension { kind, .. } if kind == ACTIVATION_EVENT)
    })?;
    let accepted_any = own
        .iter()
        .any(|event| matches!(event.payload, EventPayload::InboxAccepted(_)));
    if !accepted_any {
        return Some(Owed::Untasked);
    }
    let record = &own[launched];
    let EventPayload::Extension { payload, .. } = &record.payload else {
        return None;
    };
    #[derive(serde::Deserialize)]
    struct Record {
        delivery: String,
    }
    if payload.parse::<Record>().ok()?.delivery != "parent" {
        return None;
    }
    let activation = &own[launched..];
    if crate::resume::is_parked(activation, crate::resume::has_pending(header, events)) {
        // Interrupted with its input kept: it has not settled (B54 waits
        // for the turn that input runs).
        return None;
    }
    let ended = last_turn_end(activation)?;
    let open = activation
        .iter()
        .any(|event| event.seq > ended && matches!(event.payload, EventPayload::TurnStart(_)));
    if open {
        return None;
    }
    let (stop_reason, diagnostic) = last_stop(activation).unwrap_or((StopReason::ABORTED, None));
    let mut result = SubagentResult {
        output: final_output(activation),
        structured: None,
        diagnostic: None,
        stop_reason,
        usage: crate::result::usage_of(activation),
        subtree_usage: crate::budget::subtree_of(activation),
    };
    if !result.stop_reason.is_completed()
        && let Some(diagnostic) = diagnostic
    {
        result = result.with_diagnostic(diagnostic);
    }
    Some(Owed::Settled(ended, Box::new(result)))
}

/// The id of the notice a cold child's log says its creator is owed (the
/// creator's own log may hold it already).
pub(crate) fn owed_notice_id(
    child: &SessionId,
    header: &SessionHeader,
    events: &[SessionEvent],
) -> Option<MessageId> {
    match owed(header, events)? {
        Owed::Settled(seq, _) => Some(notice_id(child, seq)),
        Owed::Untasked => Some(untasked_id(child)),
    }
}

/// The ids of the settlement notices a creator's log holds.
fn notices_in(creator: &dyn Agent) -> HashSet<MessageId> {
    notice_ids(&creator.events())
}

/// The ids of the settlement notices among `events`.
pub(crate) fn notice_ids(events: &[SessionEvent]) -> HashSet<MessageId> {
    events
        .iter()
        .filter_map(|event| match &event.payload {
            EventPayload::InboxAccepted(accepted)
                if matches!(
                    accepted.message.source,
                    MessageSource::SubagentSettled { .. }
                ) =>
            {
                Some(accepted.message.id.clone())
            }
            _ => None,
        })
        .collect()
}

impl SubagentRuntime {
    /// The B28 notice: to a still-live direct creator, for parent delivery.
    /// `turn_end` is the seq of the child's turn end it reports, which
    /// names it (see [`notice_id`]); without one (an external run, a child
    /// that ended no turn) it gets a fresh id.
    pub(crate) async fn notify_parent(
        &self,
        activation: &Activation,
        result: &SubagentResult,
        turn_end: Option<u64>,
    ) {
        if activation.delivery() != Delivery::Parent {
            return;
        }
        let id = turn_end.map_or_else(MessageId::generate, |seq| {
            notice_id(activation.child_id(), seq)
        });
        let Some(parent) = self.registry().resolve(activation.parent()) else {
            return;
        };
        let sent = self
            .send_notice(
                &parent,
                activation.child_id(),
                activation.name(),
                result,
                id,
            )
            .await;
        if let Err(err) = sent {
            tracing::warn!(child = %activation.child_id(), "the settlement notice was not delivered: {err}");
        }
    }

    async fn send_notice(
        &self,
        creator: &Arc<dyn Agent>,
        child: &SessionId,
        name: &str,
        result: &SubagentResult,
        id: MessageId,
    ) -> Result<MessageId, dsh_core::AgentError> {
        let summary = summary_line(name, result);
        let mut message = UserMessage::new(
            render_notice(&summary, result),
            MessageSource::SubagentSettled {
                summary,
                stop_reason: Some(result.stop_reason.clone()),
                sender_session_id: child.clone(),
            },
        );
        message.id = id;
        if self.is_stopping(&creator.reference()) {
            creator.inject(message).await
        } else {
            match creator.status() {
                AgentStatus::Idle => creator.followup(message).await,
                AgentStatus::Running => creator.steer(message).await,
            }
        }
    }

    /// Deliver the notices `creator` is owed by its cold continuable
    /// children and never got (the process died between a child's last
    /// turn and its notice), each exactly once; a child cataloged that never
    /// accepted its task is reported as failed. Returns how many were sent.
    /// The runtime calls it when it resumes a member; a host calls it when
    /// it resumes a root.
    ///
    /// # Errors
    /// `NOT_LIVE` unless `creator` is the exact live agent; a corrupt catalog.
    ///
    /// # Cancel safety
    /// Each notice is checked against the creator's log right before it is
    /// sent, so a drop between children leaves the rest for the next call,
    /// and a drop during one send may still deliver that one (as
    /// `Agent::send` says), never twice.
    pub async fn deliver_lost_notices(
        &self,
        creator: &Arc<dyn Agent>,
    ) -> Result<usize, SubagentError> {
        let reference = creator.reference();
        if !self.registry().is_live(&reference) {
            return Err(SubagentError::Delivery(DeliveryError::NotLive(
                reference.id,
            )));
        }
        let entries = self.with_live_catalog(creator, |fold| fold.catalog().entries().to_vec())?;
        let mut sent = 0;
        for entry in entries {
            if entry.mode != ChildMode::CONTINUABLE
                || self.registry().get(&entry.child_id).is_some()
            {
                continue;
            }
            let Ok(loaded) = self.store().load(&entry.child_id).await else {
                continue;
            };
            let (id, result) = match owed(&loaded.header, &loaded.events) {
                None => continue,
                Some(Owed::Settled(seq, result)) => (notice_id(&entry.child_id, seq), *result),
                Some(Owed::Untasked) => (
                    untasked_id(&entry.child_id),
                    SubagentResult::stopped(StopReason::ERROR).with_diagnostic(
                        "the child was created but never accepted its task; start a new agent",
                    ),
                ),
            };
            let Some(_in_flight) = self.notices().claim((creator.id().clone(), id.clone())) else {
                continue;
            };
            let outcome = if notices_in(creator.as_ref()).contains(&id) {
                Ok(false)
            } else {
                let name = entry
                    .name
                    .as_deref()
                    .and_then(|name| self.full_name(creator.id(), name))
                    .unwrap_or_else(|| entry.child_id.to_string());
                self.send_notice(creator, &entry.child_id, &name, &result, id)
                    .await
                    .map(|_| true)
            };
            if outcome? {
                sent += 1;
            }
        }
        Ok(sent)
    }

    /// Whether the exact live agent `agent` is a child being stopped or
    /// taking no more input, a root whose tree is draining, or a member of
    /// a quiet tree (its notices must not wake it).
    fn is_stopping(&self, agent: &dsh_core::AgentRef) -> bool {
        let activation = self.activations().of_agent(agent);
        let stopping = activation.as_ref().is_some_and(|activation| {
            activation.stop().is_cancelled() || activation.input_closed()
        });
        let root = activation
            .as_ref()
            .map_or(&agent.id, |activation| activation.root());
        stopping
            || self.quiet_trees().contains(root)
            || self.admissions().is_draining(self.registry(), agent)
    }

    /// Keep settlement notices from waking any agent of `root`'s tree while
    /// the returned guard lives: each is still delivered exactly once, but
    /// injected, so a running agent reads it at its next step boundary if
    /// its turn goes on (else in its next turn), and an idle one keeps it
    /// queued for its next turn instead of starting one. Lost
    /// notices ([`SubagentRuntime::deliver_lost_notices`]) are delivered
    /// the same way. Nothing else changes: the tree's agents run, start
    /// children and take messages as before.
    ///
    /// For a host that wakes one member for one piece of work and stops the
    /// tree after it (`dsh send <child>`): without it, the child's notice
    /// would start its creator on a model call that the stop then
    /// interrupts, or that races the stop and wins. Guards nest; the tree
    /// is quiet until the last one is dropped.
    pub fn quiet_tree(&self, root: &SessionId) -> QuietTree {
        self.quiet_trees().hold(root)
    }
}

/// The roots of quiet trees, each with how many [`QuietTree`] guards hold it.
#[derive(Default)]
pub(crate) struct QuietTrees {
    held: Arc<std::sync::Mutex<crate::ids::IdMap<SessionId, usize>>>,
}

impl QuietTrees {
    fn hold(&self, root: &SessionId) -> QuietTree {
        *lock(&self.held).entry(root.clone()).or_insert(0) += 1;
        QuietTree {
            held: Arc::clone(&self.held),
            root: root.clone(),
        }
    }

    fn contains(&self, root: &SessionId) -> bool {
        lock(&self.held).contains_key(root)
    }
}

/// A tree kept quiet by [`SubagentRuntime::quiet_tree`] until this is
/// dropped: its settlement notices wake no one.
#[must_use = "the tree is quiet only while the guard lives"]
pub struct QuietTree {
    held: Arc<std::sync::Mutex<crate::ids::IdMap<SessionId, usize>>>,
    root: SessionId,
}

impl std::fmt::Debug for QuietTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuietTree")
            .field("root", &self.root)
            .finish()
    }
}

impl Drop for QuietTree {
    fn drop(&mut self) {
        let mut held = lock(&self.held);
        if let Some(count) = held.get_mut(&self.root) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.root);
            }
        }
    }
}

/// The most bytes of a child's output a settlement notice carries into its
/// creator's log and context; a longer output is cut on a character
/// boundary and ends with " [output truncated]". (The child's own log
/// keeps the whole output.)
pub(crate) const MAX_NOTICE_OUTPUT_BYTES: usize = 64 * 1024;

/// The text of a settlement notice: the summary, then what the child
/// produced (at most 64 KiB of its output). Public for a host that sends
/// notices itself (a Restate worker) and must word them alike.
pub fn render_notice(summary: &str, result: &SubagentResult) -> Vec<ContentBlock> {
    let mut text = format!("[{summary}; stop reason: {}]", result.stop_reason);
    if result.subtree_usage != dsh_core::Usage::default() {
        text.push_str("\nUsage: ");
        text.push_str(&crate::budget::usage_line(&result.subtree_usage));
        if result.subtree_usage != result.usage {
            text.push_str(&format!(
                " including its subagents; {} of them its own",
                crate::budget::budget_tokens(&result.usage)
            ));
        }
    }
    let output = crate::result::bound_text(
        dsh_core::content::joined_text(&result.output),
        MAX_NOTICE_OUTPUT_BYTES,
        crate::result::OUTPUT_CUT,
    );
    if !output.is_empty() {
        text.push_str("\n\n");
        text.push_str(&output);
    }
    if let Some(structured) = &result.structured {
        text.push_str("\n\nStructured result: ");
        text.push_str(&structured.to_string());
    }
    if let Some(diagnostic) = &result.diagnostic {
        text.push_str("\n\nDiagnostic: ");
        text.push_str(diagnostic);
    }
    vec![ContentBlock::text(text)]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written activation record is serde's bytes for the
    /// record it stands for.
    #[test]
    fn an_activation_payload_is_the_records_serde_form() {
        #[derive(serde::Serialize)]
        struct Record {
            delivery: &'static str,
        }
        for (delivery, text) in [(Delivery::Parent, "parent"), (Delivery::Caller, "caller")] {
            let serde = serde_json::to_string(&Record { delivery: text }).ok();
            assert_eq!(Some(activation_payload(delivery).get()), serde.as_deref());
        }
    }

    /// A notice carries at most the bound of a child's output, cut on a
    /// character boundary; an output within the bound is carried whole.
    #[test]
    fn a_notice_carries_a_bounded_output() {
        for unit in ["a", "é", "€", "😀", "ab€"] {
            let around = MAX_NOTICE_OUTPUT_BYTES / unit.len();
            for repeat in [0, 1, around - 1, around, around + 1, around * 3] {
                let output = unit.repeat(repeat);
                let result = SubagentResult {
                    output: vec![ContentBlock::text(output.clone())],
                    ..SubagentResult::stopped(dsh_core::StopReason::COMPLETED)
                };
                let rendered = render_notice("done", &result);
                let [ContentBlock::Text { text }] = rendered.as_slice() else {
                    panic!("one text block: {rendered:?}");
                };
                let carried = text.split_once("\n\n").map_or("", |(_, rest)| rest);
                assert!(
                    carried.len() <= MAX_NOTICE_OUTPUT_BYTES,
                    "{unit} x {repeat}"
                );
                if output.len() <= MAX_NOTICE_OUTPUT_BYTES {
                    assert_eq!(carried, output, "{unit} x {repeat}");
                } else {
                    let kept = carried
                        .strip_suffix(crate::result::OUTPUT_CUT)
                        .unwrap_or_default();
                    assert!(
                        !kept.is_empty() && output.starts_with(kept),
                        "{unit} x {repeat}"
                    );
                }
            }
        }
    }

    /// Guards nest: a tree stays quiet until its last guard is dropped, and
    /// quieting one tree leaves another as it was.
    #[test]
    fn a_tree_is_quiet_until_its_last_guard_is_dropped() {
        let quiet = QuietTrees::default();
        let root = SessionId::new("r-1").unwrap();
        let other = SessionId::new("r-2").unwrap();
        let outer = quiet.hold(&root);
        let inner = quiet.hold(&root);
        assert!(quiet.contains(&root));
        assert!(!quiet.contains(&other));
        drop(inner);
        assert!(quiet.contains(&root), "one guard still holds it");
        drop(outer);
        assert!(!quiet.contains(&root));
    }
}
