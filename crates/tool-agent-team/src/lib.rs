#![doc = include_str!("../README.md")]

mod common;
mod directory;
mod policy;
mod tool;
mod tools;

pub use common::{member_json, receipt_json, task_json};
pub use directory::TeamDirectory;
pub use policy::{policy_for, policy_section};
pub use tool::{TeamTool, TeamToolKind};

/// The default `wait_agent` bound, in milliseconds.
pub const DEFAULT_WAIT_MS: u64 = 30_000;

/// The team tool names that `dsh-tool-subagent-control` uses too. One
/// harness registry holds one tool per name (its schema compiled once), so
/// a host that installs the team tools leaves these three control tools
/// out: the team set replaces them.
pub const SHARED_WITH_CONTROL: [&str; 3] = ["send_message", "list_agents", "interrupt_agent"];
