#![doc = include_str!("../README.md")]

pub mod config;
pub mod fault;
pub mod process;
pub mod progress;
mod run;
mod transport;

use dsh_subagent::AdmissionError;
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::observe::EventBus;
use dsh_subagent::{
    ResolvedStartRequest, StartExternal, SubagentCapabilities, SubagentError, SubagentProvider,
    SubagentRun,
};

pub use config::{
    AcpConfig, Asker, ConfigError, DEFAULT_ANSWERED_GRACE, DEFAULT_INHERITED_ENV, PermissionAnswer,
    PermissionAsker, PermissionPolicy, PermissionQuestion,
};
pub use fault::{AGENT_TEXT_LIMIT, ExitFact, Fault, Phase, agent_text, map_stop_reason};
pub use progress::{AcpProgress, PlanStep, ProgressUpdate};
pub use run::AcpRun;

/// The ACP provider: one configured agent program, a fresh process per run.
#[derive(Debug, Clone)]
pub struct AcpProvider {
    config: Arc<AcpConfig>,
    progress: EventBus<AcpProgress>,
}

impl AcpProvider {
    /// A provider for `config`.
    ///
    /// # Errors
    /// The configuration is unusable.
    pub fn new(config: AcpConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            config: Arc::new(config),
            progress: EventBus::new(),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &AcpConfig {
        &self.config
    }

    /// Progress of every run this provider starts, tagged with the run id
    /// (the activation's child id).
    pub fn progress(&self) -> &EventBus<AcpProgress> {
        &self.progress
    }

    /// Start one run directly (the runtime calls this through
    /// [`StartExternal`]); the concrete handle exposes its settled result.
    ///
    /// # Errors
    /// As [`StartExternal::start`].
    ///
    /// # Cancel safety
    /// Cancel safe: a start dropped at any await kills the agent's process
    /// group (a drop guard) and leaves no process and no run behind.
    pub async fn start_run(&self, request: ResolvedStartRequest) -> Result<AcpRun, SubagentError> {
        refuse_unsupported(&self.config.name, &request)?;
        if request.cancel.is_cancelled() {
            return Err(SubagentError::Cancelled);
        }
        let cwd = self.config.cwd.clone().unwrap_or(request.cwd);
        run::start(
            &self.config,
            self.progress.clone(),
            cwd,
            &request.prompt,
            &request.cancel,
        )
        .await
    }
}

/// The runtime checks flags before calling a provider; this repeats the
/// check so a direct caller cannot slip an option past an external agent.
fn refuse_unsupported(provider: &str, request: &ResolvedStartRequest) -> Result<(), SubagentError> {
    let requested: [(bool, &'static str); 5] = [
        (request.agent_options.is_some(), "agent_options"),
        (request.output_schema.is_some(), "output_schema"),
        (request.max_depth.is_some(), "depth_limit"),
        (request.tool_filter.is_some(), "tool_filter"),
        (request.persona.is_some(), "persona"),
    ];
    match requested.into_iter().find(|(asked, _)| *asked) {
        Some((_, capability)) => Err(SubagentError::Admission(
            AdmissionError::UnsupportedCapability {
                provider: provider.to_owned(),
                capability,
            },
        )),
        None => Ok(()),
    }
}

impl SubagentProvider for AcpProvider {
    fn name(&self) -> &str {
        &self.config.name
    }

    /// None: see the crate documentation.
    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities::default()
    }

    fn inherits_parent_context(&self) -> bool {
        false
    }

    fn external(&self) -> Option<&dyn StartExternal> {
        Some(self)
    }
}

#[async_trait]
impl StartExternal for AcpProvider {
    async fn start(
        &self,
        request: ResolvedStartRequest,
    ) -> Result<Arc<dyn SubagentRun>, SubagentError> {
        Ok(Arc::new(self.start_run(request).await?))
    }
}
