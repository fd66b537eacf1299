//! The durable team records: four extension event types in the lead's own
//! log (`team/member`, `team/message`, `team/delivered`, `team/task`), each a
//! whole snapshot carrying the [`TeamId`] it belongs to. Their JSON shape is
//! a durable format: change it only by adding optional fields.

use std::fmt;

use dsh_core::{ContentBlock, EventPayload, MessageId, SessionEvent, SessionId};
use serde::{Deserialize, Serialize};

/// The roster event type.
pub const MEMBER_EVENT: &str = "team/member";
/// The queued-message event type.
pub const MESSAGE_EVENT: &str = "team/message";
/// The delivery acknowledgement event type.
pub const DELIVERED_EVENT: &str = "team/delivered";
/// The task snapshot event type.
pub const TASK_EVENT: &str = "team/task";

/// The model-facing name of a team's lead.
pub const LEAD_NAME: &str = "lead";

/// A team's identity: the session id of its lead.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TeamId(pub SessionId);

impl fmt::Display for TeamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A member's durable roster phase. Live status (`running`, `idle`,
/// `inactive`) is derived and never written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberPhase {
    /// Written before the child is created.
    Provisioning,
    /// The child exists and holds its initial message.
    Active,
    /// The child could not be created (or recovery could not prove it was).
    Failed,
}

impl MemberPhase {
    /// The phase as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Provisioning => "provisioning",
            Self::Active => "active",
            Self::Failed => "failed",
        }
    }
}

/// How a teammate's child is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberContext {
    /// A fresh child (a spawn provider).
    Fresh,
    /// A child seeded with the lead's completed turns (a fork provider).
    Fork,
}

/// `team/member`: a whole roster entry, written on every phase change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// The team.
    pub team: TeamId,
    /// The teammate's session (its persistent identity).
    pub id: SessionId,
    /// Its immutable name.
    pub name: String,
    /// What it is for.
    #[serde(default)]
    pub description: String,
    /// The provider that creates it.
    pub provider: String,
    /// Fresh or forked.
    pub context: MemberContext,
    /// The phase this record moves it to.
    pub phase: MemberPhase,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its own git worktree, when it was isolated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<crate::worktree::WorktreeRecord>,
}

/// Whether a message wakes its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    /// Context for a live target's next step; an inactive target keeps it queued.
    Quiet,
    /// The target's next turn, resuming it when it is cold.
    Wakeup,
}

/// `team/message`: a message accepted by the team and queued for delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageRecord {
    /// The team.
    pub team: TeamId,
    /// The message id the target's inbox keeps.
    pub id: MessageId,
    /// The sender's name (`lead` or a teammate).
    pub from: String,
    /// The target's name.
    pub to: String,
    /// Quiet or waking.
    pub delivery: DeliveryMode,
    /// The sender's blocks, unchanged.
    pub content: Vec<ContentBlock>,
}

/// `team/delivered`: the target's log holds the message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveredRecord {
    /// The team.
    pub team: TeamId,
    /// The message.
    pub id: MessageId,
    /// Its target (checked against the queued record).
    pub to: String,
}

/// A task's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Not started, or released.
    Pending,
    /// Owned and being worked on.
    InProgress,
    /// Done; satisfies its dependents.
    Completed,
    /// A tombstone that keeps the id stable.
    Deleted,
}

impl TaskStatus {
    /// The status as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
            Self::Deleted => "deleted",
        }
    }
}

/// `team/task`: a whole task snapshot; every mutation adds one to `revision`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The team.
    pub team: TeamId,
    /// `task-<n>`, allocated in creation order from 1.
    pub id: String,
    /// The compare-and-set value: 1 at creation, +1 per mutation.
    pub revision: u64,
    /// A one-line subject.
    pub subject: String,
    /// The details.
    #[serde(default)]
    pub description: String,
    /// The state.
    pub status: TaskStatus,
    /// The owner's name (`in_progress` always has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Tasks that must complete first.
    #[serde(default)]
    pub blocked_by: Vec<String>,
    /// Normalised advisory workspace-relative path prefixes.
    #[serde(default)]
    pub write_scopes: Vec<String>,
    /// Who made this revision (`lead` or a teammate).
    pub by: String,
    /// Why the team itself made it (an owner released after a failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One team record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TeamEvent {
    /// `team/member`
    Member(MemberRecord),
    /// `team/message`
    Message(MessageRecord),
    /// `team/delivered`
    Delivered(DeliveredRecord),
    /// `team/task`
    Task(TaskRecord),
}

impl TeamEvent {
    /// The event type written to the log.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Member(_) => MEMBER_EVENT,
            Self::Message(_) => MESSAGE_EVENT,
            Self::Delivered(_) => DELIVERED_EVENT,
            Self::Task(_) => TASK_EVENT,
        }
    }

    /// The team the record belongs to.
    pub fn team(&self) -> &TeamId {
        match self {
            Self::Member(record) => &record.team,
            Self::Message(record) => &record.team,
            Self::Delivered(record) => &record.team,
            Self::Task(record) => &record.team,
        }
    }

    /// The payload as JSON.
    ///
    /// # Errors
    /// Serialisation failed (it does not for these plain types).
    pub fn to_value(&self) -> serde_json::Result<serde_json::Value> {
        match self {
            Self::Member(record) => serde_json::to_value(record),
            Self::Message(record) => serde_json::to_value(record),
            Self::Delivered(record) => serde_json::to_value(record),
            Self::Task(record) => serde_json::to_value(record),
        }
    }

    /// The payload this record is written as, serialised once, straight
    /// from the record (what [`Agent::record`](dsh_core::Agent::record)
    /// takes).
    ///
    /// # Errors
    /// Serialisation failed (it does not for these plain types).
    pub fn to_payload(&self) -> serde_json::Result<dsh_core::ExtensionPayload> {
        match self {
            Self::Member(record) => dsh_core::ExtensionPayload::new(record),
            Self::Message(record) => dsh_core::ExtensionPayload::new(record),
            Self::Delivered(record) => dsh_core::ExtensionPayload::new(record),
            Self::Task(record) => dsh_core::ExtensionPayload::new(record),
        }
    }

    /// The team record a log event holds: `None` for any other event,
    /// `Some(Err)` for a team event type whose payload does not parse.
    pub fn from_event(event: &SessionEvent) -> Option<serde_json::Result<Self>> {
        let EventPayload::Extension { kind, payload } = &event.payload else {
            return None;
        };
        Some(match kind.as_str() {
            MEMBER_EVENT => payload.parse().map(Self::Member),
            MESSAGE_EVENT => payload.parse().map(Self::Message),
            DELIVERED_EVENT => payload.parse().map(Self::Delivered),
            TASK_EVENT => payload.parse().map(Self::Task),
            _ => return None,
        })
    }
}

/// The id of the `n`th task.
pub fn task_id(n: usize) -> String {
    format!("task-{n}")
}

/// The number of a `task-<n>` id.
pub fn task_number(id: &str) -> Option<usize> {
    let digits = id.strip_prefix("task-")?;
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_round_trip_and_reject_odd_forms() {
        assert_eq!(task_number(&task_id(12)), Some(12));
        for bad in ["task-", "task-01", "task-x", "t-1", "task-1a"] {
            assert_eq!(task_number(bad), None, "{bad}");
        }
    }
}
