//! The provider seam: one named transport for running children. Start-time
//! features are data ([`SubagentCapabilities`]) that the runtime checks
//! before any provider code runs; the two execution paths are discovered by
//! presence: [`SubagentProvider::continuable`] returns the implementation of
//! local, continuable creation, [`SubagentProvider::external`] the
//! implementation of one external execution. A provider can only claim what
//! it implements.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::schema::ObjectSchema;
use dsh_core::{
    Agent, AgentOptions, CancellationToken, ContentBlock, SessionEvent, SessionId, ToolRestriction,
};

use crate::error::SubagentError;
use crate::progress::ProgressSink;
use crate::result::SubagentResult;

/// Which start-time request options a provider honours. The runtime refuses
/// a request that needs a flag the provider lacks, with
/// `UNSUPPORTED_CAPABILITY`, before the provider is called.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubagentCapabilities {
    /// `agent_options`: provider, model, reasoning effort, output-token overrides.
    pub agent_options: bool,
    /// `agent_preset`: an independent preset for the child.
    pub agent_preset: bool,
    /// `output_schema`: structured output.
    pub output_schema: bool,
    /// `max_depth`: an absolute delegation-depth cap.
    pub depth_limit: bool,
    /// `tool_filter`: a tool restriction for the child.
    pub tool_filter: bool,
    /// `persona`: a persona for the child.
    pub persona: bool,
    /// `token_budget`: the child's usage reaches the runtime while it runs
    /// (a local child's log, an external agent's usage reports), so the
    /// runtime can stop it at its budget. Time limits need no capability:
    /// the runtime enforces them for every child.
    #[serde(default)]
    pub token_budget: bool,
}

impl SubagentCapabilities {
    /// Every flag set.
    pub const ALL: Self = Self {
        agent_options: true,
        agent_preset: true,
        output_schema: true,
        depth_limit: true,
        tool_filter: true,
        persona: true,
        token_budget: true,
    };
}

/// A provider-owned model route for its children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRoute {
    /// The provider route name.
    pub provider: String,
    /// The model id.
    pub model: String,
}

/// What the runtime asks a provider for while creating a continuable
/// child's first activation.
#[derive(Clone)]
pub struct ContinuableCreateRequest {
    /// The child's absolute starting directory.
    pub cwd: PathBuf,
    /// The reserved child session id.
    pub session_id: SessionId,
    /// The delegating parent, whose history a seeding provider reads.
    pub parent: Arc<dyn Agent>,
    /// The caller's token; it governs preparation only.
    pub cancel: CancellationToken,
}

/// A provider's contribution to a continuable child: data, never a
/// capability. The runtime owns everything else about the child.
#[derive(Debug, Clone, Default)]
pub struct ContinuableCreateSpec {
    /// A balanced completed-turn prefix to seed the child with (seqs from
    /// 0), or empty for a fresh child.
    pub seed: Vec<SessionEvent>,
}

/// Local, continuable creation.
#[async_trait]
pub trait PrepareContinuable: Send + Sync {
    /// Contribute the creation inputs of one child.
    ///
    /// # Errors
    /// A provider failure; nothing the provider made may remain.
    async fn prepare(
        &self,
        request: ContinuableCreateRequest,
    ) -> Result<ContinuableCreateSpec, SubagentError>;
}

/// A start request after the runtime checked it and resolved its directory.
#[derive(Clone)]
pub struct ResolvedStartRequest {
    /// The task label of the activation spec, as the parent's catalog
    /// keeps it.
    pub label: String,
    /// The child's absolute starting directory.
    pub cwd: PathBuf,
    /// The initial prompt.
    pub prompt: Vec<ContentBlock>,
    /// The delegating agent.
    pub parent: Arc<dyn Agent>,
    /// Option overrides, merged over the provider's default route when it
    /// has one.
    pub agent_options: Option<AgentOptions>,
    /// An independent preset for the child; only a provider with the
    /// `agent_preset` capability is given one (the runtime refuses it for
    /// any other, and for one whose children inherit the parent's context).
    pub agent_preset: Option<String>,
    /// Structured output schema.
    pub output_schema: Option<ObjectSchema>,
    /// Absolute depth cap.
    pub max_depth: Option<u32>,
    /// Tool restriction: the requested one narrowed over the parent's, so
    /// it never allows what the parent may not use.
    pub tool_filter: Option<ToolRestriction>,
    /// Persona.
    pub persona: Option<String>,
    /// The caller's token; it governs startup only.
    pub cancel: CancellationToken,
}

/// A handle to one external execution, owned by the runtime once returned.
#[async_trait]
pub trait SubagentRun: Send + Sync {
    /// A provider-minted id, unique in this runtime.
    fn id(&self) -> &SessionId;

    /// Wait for the terminal result. A child failure is a stop reason; `Err`
    /// is an infrastructure fault.
    ///
    /// # Errors
    /// An infrastructure fault the result cannot represent.
    async fn result(&self) -> Result<SubagentResult, SubagentError>;

    /// What the provider needs to continue this run's session in a later
    /// activation ([`StartExternal::resume`]), even in a later process; the
    /// runtime records it in the creator's log with the catalog entry.
    /// `None` (the default): the child is a leaf that takes no follow-up.
    fn resume_token(&self) -> Option<serde_json::Value> {
        None
    }

    /// The runtime hands the run the sink its progress goes to, once, when
    /// it starts watching the published run. The default reports nothing.
    fn observe(&self, progress: ProgressSink) {
        drop(progress);
    }

    /// Cancel remaining work, reach quiescence, release resources. Idempotent.
    ///
    /// # Errors
    /// A teardown failure.
    async fn dispose(&self) -> Result<(), SubagentError>;
}

/// One external execution path.
#[async_trait]
pub trait StartExternal: Send + Sync {
    /// Establish one execution and return its handle only once it has
    /// started. On failure or cancellation the provider has already cleaned
    /// up everything it made.
    ///
    /// # Errors
    /// A provider failure or [`SubagentError::Cancelled`].
    async fn start(
        &self,
        request: ResolvedStartRequest,
    ) -> Result<Arc<dyn SubagentRun>, SubagentError>;

    /// Continue the session a run of `child` left (`token` is its
    /// [`SubagentRun::resume_token`]) with `request.prompt` as the next
    /// prompt, returning a run whose id is `child`. The default refuses, as
    /// for any external child (`EXTERNAL_TARGET`).
    ///
    /// # Errors
    /// The session cannot be continued, or a provider failure.
    ///
    /// # Cancel safety
    /// As [`StartExternal::start`]: a drop leaves nothing behind.
    async fn resume(
        &self,
        child: &SessionId,
        token: &serde_json::Value,
        request: ResolvedStartRequest,
    ) -> Result<Arc<dyn SubagentRun>, SubagentError> {
        drop((token, request));
        Err(crate::error::DeliveryError::External(child.clone()).into())
    }
}

/// One registered transport for running child agents.
pub trait SubagentProvider: Send + Sync + 'static {
    /// The unique registry name (`spawn`, `fork`, `acp`, ...).
    fn name(&self) -> &str;

    /// The start-time options it honours.
    fn capabilities(&self) -> SubagentCapabilities;

    /// Whether the child sees the parent's completed-turn prefix. Descriptive
    /// only: it says nothing of tools or authority.
    fn inherits_parent_context(&self) -> bool;

    /// A provider-owned default model route; requires `agent_options`.
    fn agent_route_defaults(&self) -> Option<AgentRoute> {
        None
    }

    /// Local continuable creation, if the provider implements it.
    fn continuable(&self) -> Option<&dyn PrepareContinuable> {
        None
    }

    /// External execution, if the provider implements it.
    fn external(&self) -> Option<&dyn StartExternal> {
        None
    }
}

/// What a provider says about itself, read once: the data a
/// `subagent/provider-added` listener or a survey shows without holding
/// the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderDescriptor {
    /// The registry name.
    pub name: String,
    /// The start-time options it honours.
    pub capabilities: SubagentCapabilities,
    /// Whether its children see the parent's completed-turn prefix.
    pub inherits_parent_context: bool,
    /// Whether it creates local, continuable children
    /// ([`SubagentProvider::continuable`] is present).
    pub continuable: bool,
    /// Whether it runs external children ([`SubagentProvider::external`]
    /// is present).
    pub external: bool,
    /// Its default model route, if any.
    pub agent_route_defaults: Option<AgentRoute>,
}

impl ProviderDescriptor {
    /// Read `provider`'s descriptor.
    pub fn of(provider: &dyn SubagentProvider) -> Self {
        Self {
            name: provider.name().to_owned(),
            capabilities: provider.capabilities(),
            inherits_parent_context: provider.inherits_parent_context(),
            continuable: provider.continuable().is_some(),
            external: provider.external().is_some(),
            agent_route_defaults: provider.agent_route_defaults(),
        }
    }
}
