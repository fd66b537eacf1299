//! `dsh-agent-team` is the agent team: every runtime root is the implicit
//! lead of a team whose [`TeamId`] is its session id, with a roster of
//! named continuable direct children (teammates), a durable mailbox between
//! members and a shared task graph. The whole team state is a fold of the
//! lead's own log ([`fold_team`], [`TeamProjection`]), selected by team id;
//! [`Team`] is the live service that checks every record against that fold
//! before it appends it. It works on the core traits and the subagent
//! runtime only.

pub mod config;
pub mod error;
pub mod fold;
pub mod record;
pub mod rules;
pub mod team;
pub mod worktree;

pub use config::{TeamConfig, TeamLimits};
pub use error::TeamError;
pub use fold::{Member, Queued, Role, TeamProjection, TeamState, fold_team};
pub use record::{
    DELIVERED_EVENT, DeliveredRecord, DeliveryMode, LEAD_NAME, MEMBER_EVENT, MESSAGE_EVENT,
    MemberContext, MemberPhase, MemberRecord, MessageRecord, TASK_EVENT, TaskRecord, TaskStatus,
    TeamEvent, TeamId,
};
pub use rules::{normalise_scope, scopes_overlap, validate_member_name};
pub use team::{
    CreateTask, MemberStatus, MemberView, Recovery, SendMessage, SendOutcome, SpawnTeammate,
    TaskAction, TaskView, Team, UpdateTask, WaitOutcome, heading, log_holds,
};
pub use worktree::{WorktreeRecord, WorktreeRemoval};
