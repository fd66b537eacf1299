//! Team configuration: the providers teammates are created with and the
//! limits, all with the documented defaults.

use crate::record::MemberContext;

/// The team's limits; reaching one is a typed error with its own code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TeamLimits {
    /// Names ever provisioned, failed members included (names are never reused).
    pub max_members: usize,
    /// Non-deleted tasks.
    pub max_live_tasks: usize,
    /// Undelivered messages per target.
    pub max_pending_per_member: usize,
    /// Bytes of a framed message (its heading and its blocks).
    pub max_message_bytes: usize,
}

impl Default for TeamLimits {
    fn default() -> Self {
        Self {
            max_members: 8,
            max_live_tasks: 256,
            max_pending_per_member: 64,
            max_message_bytes: 64 * 1024,
        }
    }
}

/// How a team creates teammates, and its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamConfig {
    /// The registered provider for a fresh teammate (default `spawn`).
    pub fresh_provider: String,
    /// The registered provider for a forked teammate (default `fork`).
    pub fork_provider: String,
    /// The limits.
    pub limits: TeamLimits,
}

impl Default for TeamConfig {
    fn default() -> Self {
        Self {
            fresh_provider: "spawn".into(),
            fork_provider: "fork".into(),
            limits: TeamLimits::default(),
        }
    }
}

impl TeamConfig {
    /// The provider for `context`.
    pub fn provider_for(&self, context: MemberContext) -> &str {
        match context {
            MemberContext::Fresh => &self.fresh_provider,
            MemberContext::Fork => &self.fork_provider,
        }
    }
}
