//! One file per team tool, as codex-rs keeps its tool handlers: each holds
//! the tool's description, its input schema, its input type and its `run`.
//! What they share (schema builders, parsing, refusals, result shapes) is
//! in [`crate::common`].

pub(crate) mod followup_task;
pub(crate) mod interrupt_agent;
pub(crate) mod list_agents;
pub(crate) mod send_message;
pub(crate) mod spawn_teammate;
pub(crate) mod team_task_create;
pub(crate) mod team_task_get;
pub(crate) mod team_task_list;
pub(crate) mod team_task_update;
pub(crate) mod wait_agent;
