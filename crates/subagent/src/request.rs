//! What a caller asks for: the start request (task and optional
//! capabilities) and the activation spec around it (provider, label, name,
//! reserved id, the caller's token and where the result goes).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dsh_core::schema::ObjectSchema;
use dsh_core::{Agent, AgentOptions, CancellationToken, ContentBlock, SessionId, ToolRestriction};

/// The task and its optional start-time options.
#[derive(Clone)]
pub struct StartRequest {
    /// The child's initial user message.
    pub prompt: Vec<ContentBlock>,
    /// The delegating agent; it must be the exact live agent.
    pub parent: Arc<dyn Agent>,
    /// The child's starting directory; relative paths resolve against the
    /// parent's; omitted means the parent's at admission.
    pub cwd: Option<PathBuf>,
    /// Provider, model, reasoning effort and output-token overrides
    /// (capability `agent_options`).
    pub agent_options: Option<AgentOptions>,
    /// An independent preset (capability `agent_preset`, and a provider that
    /// does not inherit parent context); omitted joins the parent's.
    pub agent_preset: Option<String>,
    /// Structured output (capability `output_schema`).
    pub output_schema: Option<ObjectSchema>,
    /// Absolute depth cap for the child (capability `depth_limit`).
    pub max_depth: Option<u32>,
    /// Tool restriction for the child only (capability `tool_filter`).
    pub tool_filter: Option<ToolRestriction>,
    /// Persona for the child only (capability `persona`).
    pub persona: Option<String>,
    /// The most tokens (input plus output) the child's subtree may use in
    /// this activation (capability `token_budget`); it must fit in what is
    /// left of every budget above it. Reaching it stops the child with
    /// `budget-exhausted`.
    pub token_budget: Option<u64>,
    /// The longest this activation may run; past it the child is stopped
    /// with `timed-out`. Enforced by the runtime for every provider.
    pub time_limit: Option<Duration>,
}

impl StartRequest {
    /// A request with just a prompt and a parent.
    pub fn new(parent: Arc<dyn Agent>, prompt: Vec<ContentBlock>) -> Self {
        Self {
            prompt,
            parent,
            cwd: None,
            agent_options: None,
            agent_preset: None,
            output_schema: None,
            max_depth: None,
            tool_filter: None,
            persona: None,
            token_budget: None,
            time_limit: None,
        }
    }
}

impl StartRequest {
    /// The token budget and time limit it asks for.
    pub fn limits(&self) -> crate::budget::Limits {
        crate::budget::Limits {
            tokens: self.token_budget,
            time: self.time_limit,
        }
    }
}

/// The depth the user setting allows when nothing else says (seed 002's
/// default of three).
pub const DEFAULT_MAX_DEPTH: u32 = 3;

/// A delegation tool's depth policy, resolved by
/// [`SubagentRuntime::resolve_max_depth`](crate::SubagentRuntime::resolve_max_depth)
/// (omitted: the runtime's current user setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxDepth {
    /// An absolute cap on a child's delegation depth (the root is 0, its
    /// children 1); the provider must have the `depth_limit` capability,
    /// and `0` forbids delegation altogether. It holds whatever the user
    /// setting is, above it included.
    Limit(u32),
    /// No cap: the provider (an external agent's own runtime, say) manages
    /// recursion itself.
    ProviderManaged,
}

/// Who is told the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The parent gets a settlement notice in its inbox (model-facing tools).
    Parent,
    /// Only the caller, through the activation's result; no notice.
    Caller,
}

/// One managed child execution.
#[derive(Clone)]
pub struct ActivationSpec {
    /// The registered provider to use.
    pub provider: String,
    /// A short task label kept in the parent's catalog.
    pub label: String,
    /// A requested name; omitted takes the first free `agent-N`.
    pub name: Option<String>,
    /// A reserved identity for a local child.
    pub child_id: Option<SessionId>,
    /// Cancels admission and setup only: once the child is published, the
    /// runtime owns it and this token no longer reaches it.
    pub cancel: CancellationToken,
    /// Where the result goes.
    pub delivery: Delivery,
    /// The task.
    pub request: StartRequest,
}
