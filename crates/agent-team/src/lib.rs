#![doc = include_str!("../README.md")]

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
