//! The runtime's errors, each with a stable code that tools and hosts branch
//! on, and a message that says what to do about it. [`SubagentError`] is
//! split by concern so a caller matches one level deep: the provider
//! registry, admission of new work, addressing and delivery to an existing
//! agent, and infrastructure (catalogs, providers, teardown), plus
//! cancellation and the agent layer's own errors.

use dsh_core::{AgentError, AttachmentError, SessionId, StoreError};

/// Why a subagent operation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SubagentError {
    /// The provider registry refused a registration or a lookup.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// New work (a start, a resume) was not admitted.
    #[error(transparent)]
    Admission(#[from] AdmissionError),
    /// An agent could not be addressed, was not the caller's to act on, or
    /// could not take the input now.
    #[error(transparent)]
    Delivery(#[from] DeliveryError),
    /// The runtime's own machinery failed: a catalog, a provider, a teardown.
    #[error(transparent)]
    Infra(#[from] InfraError),
    /// The caller's token fired before the operation took effect.
    #[error("the subagent start was cancelled before the child was published")]
    Cancelled,
    /// The agent layer failed.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The attachment store refused a prompt's attachments, or failed.
    #[error(transparent)]
    Attachment(#[from] AttachmentError),
}

/// Why the provider registry refused.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// A provider with this name is already registered.
    #[error(
        "a subagent provider named `{0}` is already registered; remove it first or pick another name"
    )]
    DuplicateProvider(String),
    /// No provider with this name is registered.
    #[error("no subagent provider named `{0}` is registered")]
    NoProvider(String),
}

/// Why new work was not admitted: the request's checks, depth, names,
/// capacity and drain.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum AdmissionError {
    /// The request needs a start-time capability the provider lacks, or the
    /// provider implements neither execution path.
    #[error("provider `{provider}` does not support {capability}")]
    UnsupportedCapability {
        /// The provider.
        provider: String,
        /// The capability, by its flag name.
        capability: &'static str,
    },
    /// The provider honours the option, but not this value of it: an
    /// external agent that offers other models, say. Code
    /// `UNSUPPORTED_CAPABILITY`, like a missing capability.
    #[error(
        "provider `{provider}` cannot use {option} `{value}`; it offers {}",
        offered_list(offered)
    )]
    UnsupportedValue {
        /// The provider.
        provider: String,
        /// The option, by its name (`model`).
        option: &'static str,
        /// The value asked for.
        value: String,
        /// The values the provider offers.
        offered: Vec<String>,
    },
    /// The request itself is malformed (an unknown tool in the filter, a
    /// persona with an unknown variable, an unknown preset, a bad cwd).
    #[error("invalid subagent request: {0}")]
    InvalidRequest(String),
    /// A prompt's client time zone is not `UTC` or a known IANA
    /// `Area/Location` name.
    #[error(
        "`{0}` is not a time zone: give `UTC` or an IANA Area/Location name such as `Europe/Paris`"
    )]
    InvalidTimeZone(String),
    /// The child would be deeper than allowed.
    #[error(
        "delegation depth limit reached: a child here would be at depth {depth}, and the limit is {max}. Solve the task yourself."
    )]
    DepthLimit {
        /// The depth the child would have.
        depth: u32,
        /// The limit.
        max: u32,
    },
    /// The requested name breaks the naming rules.
    #[error("invalid agent name `{name}`: {reason}")]
    InvalidName {
        /// The name asked for.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// Another child of the same parent already has this name.
    #[error(
        "the name `{0}` is already used by another child of this agent; choose a different name"
    )]
    NameTaken(String),
    /// The tree already has as many live children as allowed.
    #[error("too many live subagents in this tree (limit {0}); wait for some to finish")]
    Capacity(usize),
    /// Admission below this tree is closed while it drains.
    #[error("the tree is shutting down; no new work is admitted")]
    Draining,
    /// The child's token budget does not fit in what is left of the
    /// budget of this agent or one of its ancestors.
    #[error(
        "a child here cannot have a token budget of {requested}: only {remaining} tokens are left in this agent's budget. Ask for at most {remaining} tokens, or do the work yourself."
    )]
    OverBudget {
        /// The budget asked for.
        requested: u64,
        /// The tokens left in the tightest budget above the child.
        remaining: u64,
    },
    /// Nothing is left of the token budget of this agent or one of its
    /// ancestors, so no child can start.
    #[error(
        "this agent's token budget is spent: no tokens are left for a child. Finish the task with what you have."
    )]
    BudgetSpent,
    /// The requested budget or time limit is above the host's ceiling.
    #[error(
        "a {option} of {requested} is above this host's ceiling of {ceiling}; ask for at most {ceiling}"
    )]
    AboveCeiling {
        /// The option (`token_budget`, `timeout_seconds`).
        option: &'static str,
        /// The value asked for.
        requested: u64,
        /// The host's ceiling.
        ceiling: u64,
    },
}

/// Why an existing agent could not be addressed, acted on or given input.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DeliveryError {
    /// The agent (a parent, a sender, a tree root) is not the exact live
    /// agent it is claimed to be.
    #[error("agent `{0}` is not live")]
    NotLive(SessionId),
    /// A live agent is neither a tree root nor the child of a live activation.
    #[error("agent `{0}` is not a member of a live agent tree")]
    NotAMember(SessionId),
    /// A name (a slash path, or a token that is not a session id) names no
    /// member of the caller's tree.
    #[error("no agent named `{0}` in this tree; use list_agents to see the names")]
    AgentNameNotFound(String),
    /// The host's authoriser refused the caller access to the agent; the
    /// text is the authoriser's.
    #[error("{0}")]
    Unauthorized(String),
    /// The caller of an interrupt is neither the user nor an exact live
    /// ancestor of the target (B31).
    #[error("only the user or an ancestor of `{0}` may interrupt it")]
    NotAncestor(SessionId),
    /// A message addressed to its own sender.
    #[error("an agent cannot send a message to itself")]
    MessageToSelf,
    /// The target is not a member of the sender's tree.
    #[error("`{0}` is not a member of this agent tree")]
    NotInTree(SessionId),
    /// The target is an external run, a leaf that takes no follow-up
    /// messages (B42).
    #[error("`{0}` is an external agent; it cannot receive follow-up messages")]
    External(SessionId),
    /// The target's mode does not accept messages (one-shot, unknown).
    #[error("`{0}` cannot receive messages")]
    NotMessageable(SessionId),
    /// A user prompt addressed to a tree root, which is not a child.
    #[error("`{0}` is a root, not a child of a tree")]
    NotAChild(SessionId),
    /// The child cannot be resumed; retrying will not help.
    #[error("agent `{id}` cannot be resumed: {reason}. Do not retry; start a new agent instead")]
    NotResumable {
        /// The child.
        id: SessionId,
        /// Why.
        reason: String,
    },
    /// The child could be resumed, but the tree has no capacity now.
    #[error(
        "agent `{0}` cannot take messages right now: the tree is at its live-agent limit; try again after some agents finish"
    )]
    DeliveryUnavailable(SessionId),
}

/// The runtime's machinery failed; nothing the caller asked for was wrong.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum InfraError {
    /// A provider's run id collides with a live run or a local session.
    #[error("provider `{provider}` returned run id `{id}`, which is already in use")]
    DuplicateRunId {
        /// The provider.
        provider: String,
        /// The colliding id.
        id: SessionId,
    },
    /// A persisted catalog names the same child name twice.
    #[error("the subagent catalog of `{parent}` names `{name}` twice")]
    DuplicateName {
        /// The parent session.
        parent: SessionId,
        /// The repeated name.
        name: String,
    },
    /// A catalog event in a parent's log could not be read.
    #[error("the subagent catalog of `{parent}` is corrupt at seq {seq}: {message}")]
    CorruptCatalog {
        /// The parent session.
        parent: SessionId,
        /// The offending event.
        seq: u64,
        /// What is wrong.
        message: String,
    },
    /// A walk up the stored parent links from this agent did not reach a
    /// root (a cycle, or a chain longer than any tree allows).
    #[error("the lineage of `{0}` does not end")]
    LineageCycle(SessionId),
    /// A provider failed to start or prepare a child.
    #[error("provider `{provider}` failed: {message}")]
    Provider {
        /// The provider.
        provider: String,
        /// What went wrong.
        message: String,
    },
    /// Teardown of an activation failed; its result, if any, stands.
    #[error("teardown failed: {0}")]
    Teardown(String),
    /// A local child was created and cataloged but did not accept its
    /// initial prompt; it was torn down without running.
    #[error("child `{child}` did not accept its initial prompt: {reason}")]
    InitialPrompt {
        /// The child.
        child: SessionId,
        /// Why the prompt was refused.
        reason: String,
    },
}

impl From<StoreError> for SubagentError {
    fn from(err: StoreError) -> Self {
        Self::Agent(AgentError::Store(err))
    }
}

impl SubagentError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Registry(err) => err.code(),
            Self::Admission(err) => err.code(),
            Self::Delivery(err) => err.code(),
            Self::Infra(err) => err.code(),
            Self::Cancelled => "CANCELLED",
            Self::Agent(err) => err.code(),
            Self::Attachment(err) => err.code(),
        }
    }
}

impl RegistryError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::DuplicateProvider(_) => "DUPLICATE_PROVIDER",
            Self::NoProvider(_) => "NO_PROVIDER",
        }
    }
}

impl AdmissionError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnsupportedCapability { .. } | Self::UnsupportedValue { .. } => {
                "UNSUPPORTED_CAPABILITY"
            }
            Self::InvalidRequest(_) => "INVALID_REQUEST",
            Self::InvalidTimeZone(_) => "INVALID_TIME_ZONE",
            Self::DepthLimit { .. } => "DEPTH_LIMIT",
            Self::InvalidName { .. } => "INVALID_NAME",
            Self::NameTaken(_) => "NAME_TAKEN",
            Self::Capacity(_) => "CAPACITY",
            Self::Draining => "DRAINING",
            Self::OverBudget { .. } | Self::BudgetSpent => "OVER_BUDGET",
            Self::AboveCeiling { .. } => "ABOVE_CEILING",
        }
    }
}

/// `a`, `b` and `c` (each quoted), or "nothing".
fn offered_list(offered: &[String]) -> String {
    let quoted: Vec<String> = offered.iter().map(|value| format!("`{value}`")).collect();
    match quoted.as_slice() {
        [] => "nothing".to_owned(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

impl DeliveryError {
    /// The stable code. Both authority refusals ([`Self::Unauthorized`],
    /// [`Self::NotAncestor`]) are `UNAUTHORIZED`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotLive(_) => "NOT_LIVE",
            Self::NotAMember(_) => "NOT_A_MEMBER",
            Self::AgentNameNotFound(_) => "AGENT_NAME_NOT_FOUND",
            Self::Unauthorized(_) | Self::NotAncestor(_) => "UNAUTHORIZED",
            Self::MessageToSelf => "MESSAGE_TO_SELF",
            Self::NotInTree(_) => "NOT_IN_TREE",
            Self::External(_) => "EXTERNAL_TARGET",
            Self::NotMessageable(_) => "NOT_MESSAGEABLE",
            Self::NotAChild(_) => "NOT_A_CHILD",
            Self::NotResumable { .. } => "NOT_RESUMABLE",
            Self::DeliveryUnavailable(_) => "DELIVERY_UNAVAILABLE",
        }
    }
}

impl InfraError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::DuplicateRunId { .. } => "DUPLICATE_RUN_ID",
            Self::DuplicateName { .. } => "DUPLICATE_NAME",
            Self::CorruptCatalog { .. } => "CORRUPT_CATALOG",
            Self::LineageCycle(_) => "LINEAGE_CYCLE",
            Self::Provider { .. } => "PROVIDER_FAILED",
            Self::Teardown(_) => "TEARDOWN_FAILED",
            Self::InitialPrompt { .. } => "INITIAL_PROMPT_FAILED",
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::fmt::Write as _;

    /// Every variant with its code and message, so a changed code is a
    /// visible snapshot change.
    #[test]
    fn every_variant_with_its_code() {
        let id = SessionId::new("s-child").unwrap();
        let errors: Vec<SubagentError> = vec![
            RegistryError::DuplicateProvider("spawn".into()).into(),
            RegistryError::NoProvider("acp".into()).into(),
            AdmissionError::UnsupportedCapability {
                provider: "acp".into(),
                capability: "fork",
            }
            .into(),
            AdmissionError::InvalidRequest("unknown tool `x`".into()).into(),
            AdmissionError::InvalidTimeZone("EST".into()).into(),
            AdmissionError::DepthLimit { depth: 4, max: 3 }.into(),
            AdmissionError::InvalidName {
                name: "A B".into(),
                reason: "spaces are not allowed",
            }
            .into(),
            AdmissionError::NameTaken("researcher".into()).into(),
            AdmissionError::Capacity(8).into(),
            AdmissionError::Draining.into(),
            AdmissionError::OverBudget {
                requested: 5000,
                remaining: 1200,
            }
            .into(),
            AdmissionError::BudgetSpent.into(),
            AdmissionError::AboveCeiling {
                option: "token_budget",
                requested: 90000,
                ceiling: 50000,
            }
            .into(),
            DeliveryError::NotLive(id.clone()).into(),
            DeliveryError::NotAMember(id.clone()).into(),
            DeliveryError::AgentNameNotFound("nobody".into()).into(),
            DeliveryError::Unauthorized("the host refused access to `s-child`".into()).into(),
            DeliveryError::NotAncestor(id.clone()).into(),
            DeliveryError::MessageToSelf.into(),
            DeliveryError::NotInTree(id.clone()).into(),
            DeliveryError::External(id.clone()).into(),
            DeliveryError::NotMessageable(id.clone()).into(),
            DeliveryError::NotAChild(id.clone()).into(),
            DeliveryError::NotResumable {
                id: id.clone(),
                reason: "its log is gone".into(),
            }
            .into(),
            DeliveryError::DeliveryUnavailable(id.clone()).into(),
            InfraError::DuplicateRunId {
                provider: "acp".into(),
                id: id.clone(),
            }
            .into(),
            InfraError::DuplicateName {
                parent: id.clone(),
                name: "researcher".into(),
            }
            .into(),
            InfraError::CorruptCatalog {
                parent: id.clone(),
                seq: 7,
                message: "missing field `child_id`".into(),
            }
            .into(),
            InfraError::LineageCycle(id.clone()).into(),
            InfraError::Provider {
                provider: "acp".into(),
                message: "peer exited".into(),
            }
            .into(),
            InfraError::Teardown("peer did not exit".into()).into(),
            InfraError::InitialPrompt {
                child: id.clone(),
                reason: "inbox closed".into(),
            }
            .into(),
            SubagentError::Cancelled,
            StoreError::NotFound(id).into(),
            AttachmentError::TooLarge {
                bytes: 30_000_000,
                limit: 20_971_520,
            }
            .into(),
            AttachmentError::UnsupportedType("image/tiff".into()).into(),
            AttachmentError::Unknown(dsh_core::AttachmentId::new("up-404")).into(),
            AttachmentError::Store("the disk is full".into()).into(),
        ];
        let mut text = String::new();
        for err in &errors {
            writeln!(text, "{}: {err}", err.code()).unwrap();
        }
        insta::assert_snapshot!(text);
    }
}
