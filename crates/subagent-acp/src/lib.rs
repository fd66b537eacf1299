#![doc = include_str!("../README.md")]

pub mod advertised;
pub mod config;
pub mod fault;
pub mod process;
pub mod progress;
mod run;
mod transport;

use dsh_core::SessionId;
use dsh_core::{AgentOptions, CancellationToken};
use dsh_subagent::{AdmissionError, DeliveryError, InfraError};
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::observe::EventBus;
use dsh_subagent::{
    ResolvedStartRequest, StartExternal, SubagentCapabilities, SubagentError, SubagentProvider,
    SubagentRun,
};

pub use advertised::Advertised;
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
    advertised: advertised::AdvertisedCache,
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
            advertised: advertised::AdvertisedCache::default(),
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
        let model = refuse_unsupported(&self.config.name, &request, self.advertised().as_ref())?;
        if request.cancel.is_cancelled() {
            return Err(SubagentError::Cancelled);
        }
        let cwd = self.config.cwd.clone().unwrap_or(request.cwd);
        run::start(run::Start {
            config: &self.config,
            progress: self.progress.clone(),
            advertised: self.advertised.clone(),
            cwd,
            prompt: Some(&request.prompt),
            model,
            open: run::Open::New,
            run_id: None,
            cancel: &request.cancel,
        })
        .await
    }

    /// What the agent advertised when it last opened a session (a start or
    /// a [`probe`](Self::probe)), or `None` before it first did.
    pub fn advertised(&self) -> Option<Advertised> {
        self.advertised.get()
    }

    /// Start the agent, open a session in `cwd` (the configured directory
    /// wins), record what it advertises, and tear it down: a host calls
    /// this once at configuration so that the first child's flags are
    /// checked against the agent's own capabilities before it is accepted.
    ///
    /// # Errors
    /// The agent could not start (as [`StartExternal::start`]).
    ///
    /// # Cancel safety
    /// Cancel safe: a drop at any await kills the agent's process group
    /// (as [`Self::start_run`]); what was recorded before stays recorded.
    pub async fn probe(&self, cwd: std::path::PathBuf) -> Result<Advertised, SubagentError> {
        let cwd = self.config.cwd.clone().unwrap_or(cwd);
        let run = run::start(run::Start {
            config: &self.config,
            progress: self.progress.clone(),
            advertised: self.advertised.clone(),
            cwd,
            prompt: None,
            model: None,
            open: run::Open::New,
            run_id: None,
            cancel: &CancellationToken::new(),
        })
        .await?;
        let disposed = run.dispose().await;
        let advertised = self.advertised().ok_or_else(|| {
            SubagentError::Infra(InfraError::Provider {
                provider: self.config.name.clone(),
                message: "the probe opened no session".to_owned(),
            })
        })?;
        disposed.map(|()| advertised)
    }
}

/// The runtime checks flags before calling a provider; this repeats the
/// check so a direct caller cannot slip an option past an external agent,
/// and checks a model against what the agent is known to offer. Returns the
/// model to choose.
fn refuse_unsupported(
    provider: &str,
    request: &ResolvedStartRequest,
    advertised: Option<&Advertised>,
) -> Result<Option<String>, SubagentError> {
    let refuse = |capability| {
        SubagentError::Admission(AdmissionError::UnsupportedCapability {
            provider: provider.to_owned(),
            capability,
        })
    };
    let model = match &request.agent_options {
        None => None,
        Some(options) => {
            let only_model = AgentOptions {
                model: options.model.clone(),
                ..AgentOptions::default()
            };
            if *options != only_model || options.model.is_none() {
                return Err(refuse("agent_options other than `model`"));
            }
            options.model.clone()
        }
    };
    if let (Some(model), Some(advertised)) = (&model, advertised) {
        match &advertised.models {
            None => {
                return Err(refuse(
                    "agent_options (the agent advertises no model selector)",
                ));
            }
            Some(models) if !models.contains(model) => {
                return Err(SubagentError::Admission(AdmissionError::UnsupportedValue {
                    provider: provider.to_owned(),
                    option: "model",
                    value: model.clone(),
                    offered: models.clone(),
                }));
            }
            Some(_) => {}
        }
    }
    let requested: [(bool, &'static str); 4] = [
        (request.output_schema.is_some(), "output_schema"),
        (request.max_depth.is_some(), "depth_limit"),
        (request.tool_filter.is_some(), "tool_filter"),
        (request.persona.is_some(), "persona"),
    ];
    match requested.into_iter().find(|(asked, _)| *asked) {
        Some((_, capability)) => Err(refuse(capability)),
        None => Ok(model),
    }
}

impl SubagentProvider for AcpProvider {
    fn name(&self) -> &str {
        &self.config.name
    }

    /// `agent_options` unless the agent is known to have no model
    /// selector: see the crate documentation.
    fn capabilities(&self) -> SubagentCapabilities {
        SubagentCapabilities {
            agent_options: self
                .advertised()
                .is_none_or(|advertised| advertised.models.is_some()),
            ..SubagentCapabilities::default()
        }
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

    /// `session/load` of the session `token` names (in its own directory),
    /// then the prompt, as a run whose id is `child`.
    async fn resume(
        &self,
        child: &SessionId,
        token: &serde_json::Value,
        request: ResolvedStartRequest,
    ) -> Result<Arc<dyn SubagentRun>, SubagentError> {
        #[derive(serde::Deserialize)]
        struct Token {
            session_id: String,
            cwd: std::path::PathBuf,
        }
        let token: Token = serde_json::from_value(token.clone()).map_err(|err| {
            SubagentError::Delivery(DeliveryError::NotResumable {
                id: child.clone(),
                reason: format!("its recorded ACP session is unreadable: {err}"),
            })
        })?;
        if request.cancel.is_cancelled() {
            return Err(SubagentError::Cancelled);
        }
        let run = run::start(run::Start {
            config: &self.config,
            progress: self.progress.clone(),
            advertised: self.advertised.clone(),
            cwd: self.config.cwd.clone().unwrap_or(token.cwd),
            prompt: Some(&request.prompt),
            model: None,
            open: run::Open::Load(token.session_id.into()),
            run_id: Some(child.clone()),
            cancel: &request.cancel,
        })
        .await?;
        Ok(Arc::new(run))
    }
}
