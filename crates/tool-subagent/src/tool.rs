//! The `subagent` tool itself: install, the per-agent model-selection
//! sample, and one call (start the child, then answer at once in the
//! background or wait for its result in the foreground, disposing it if
//! the call goes away first).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use dsh_core::{
    Agent, AgentOptions, AgentRef, ContentBlock, Tool, ToolContext, ToolError, ToolOutput,
    ToolRestriction,
};
use dsh_subagent::{
    ActivationSpec, AgentRoute, Delivery, StartRequest, SubagentActivation, SubagentProvider,
    SubagentRuntime,
};
use serde::Deserialize;
use serde_json::Value;

use crate::ModelSelectionSettings;
use crate::config::{InstallError, SubagentToolConfig, check_capabilities};
use crate::render::{refusal, render_result, started_in_background};
use crate::role;
use crate::spec::{full_description, input_schema};

/// The `subagent` tool for one provider. See the crate documentation.
pub struct SubagentTool {
    runtime: SubagentRuntime,
    config: SubagentToolConfig,
    /// The model-selection setting as each exact agent sampled it.
    sampled: Mutex<HashMap<AgentRef, ModelSelectionSettings>>,
}

impl std::fmt::Debug for SubagentTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentTool")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What the model passes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Args {
    pub(crate) description: String,
    pub(crate) prompt: String,
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) run_in_background: Option<bool>,
    #[serde(default)]
    pub(crate) provider: Option<String>,
    #[serde(default)]
    pub(crate) model: Option<String>,
    #[serde(default)]
    pub(crate) token_budget: Option<u64>,
    #[serde(default)]
    pub(crate) timeout_seconds: Option<u64>,
    #[serde(default)]
    pub(crate) agent: Option<String>,
}

impl SubagentTool {
    /// Check `config` and build the tool. When the provider is registered
    /// now, the configuration is checked against its capabilities here; a
    /// provider registered later that cannot honour it leaves the tool
    /// unavailable (and says why in the log) rather than failing calls.
    ///
    /// # Errors
    /// An [`InstallError`] for a configuration that cannot work: an empty
    /// tool or provider name, a tool filter that names no tool, or a
    /// capability the registered provider lacks (a numeric depth cap without
    /// `depth_limit`, agent options, persona or tool filter without theirs).
    pub fn install(
        runtime: &SubagentRuntime,
        config: SubagentToolConfig,
    ) -> Result<Arc<Self>, InstallError> {
        if config.tool_name.is_empty() {
            return Err(InstallError::EmptyToolName);
        }
        if config.provider.is_empty() {
            return Err(InstallError::EmptyProvider(config.tool_name));
        }
        if let Some(filter) = &config.tool_filter
            && filter.names().is_empty()
        {
            return Err(InstallError::EmptyToolFilter(config.tool_name));
        }
        match runtime.get(&config.provider) {
            Some(provider) => check_capabilities(&config, provider.as_ref())?,
            None => tracing::info!(
                tool = %config.tool_name,
                provider = %config.provider,
                "subagent provider not registered yet; the tool is offered once it is"
            ),
        }
        Ok(Arc::new(Self {
            runtime: runtime.clone(),
            config,
            sampled: Mutex::new(HashMap::new()),
        }))
    }

    /// The model-selection setting as `agent` sampled it: taken from the
    /// host setting the first time, kept for that exact agent after. Only a
    /// top-level session gets selection; a child samples it disabled.
    fn model_selection_of(&self, agent: &dyn Agent) -> ModelSelectionSettings {
        let Some(config) = &self.config.model_selection else {
            return ModelSelectionSettings::default();
        };
        let reference = agent.reference();
        let mut sampled = self.sampled.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(settings) = sampled.get(&reference) {
            return settings.clone();
        }
        let settings = if agent.header().parent_session.is_none() {
            config.current()
        } else {
            ModelSelectionSettings::default()
        };
        // Agents that went away no longer need theirs.
        let registry = self.runtime.registry();
        sampled.retain(|reference, _| registry.is_live(reference));
        sampled.insert(reference, settings.clone());
        settings
    }

    /// The route the call's `provider` and `model` choose under the
    /// caller's sampled setting, or the sentence refusing them.
    fn chosen_route(
        &self,
        agent: &dyn Agent,
        provider: Option<String>,
        model: Option<String>,
    ) -> Result<Option<AgentRoute>, String> {
        let settings = self.model_selection_of(agent);
        let route = match (provider, model) {
            (None, None) => {
                return Ok(settings
                    .enabled
                    .then(|| settings.default_model.clone())
                    .flatten());
            }
            (Some(provider), Some(model)) => AgentRoute { provider, model },
            _ => {
                return Err(
                    "No subagent was started: give both `provider` and `model`, or neither."
                        .to_owned(),
                );
            }
        };
        if settings.allows(&route) {
            return Ok(Some(route));
        }
        if !settings.enabled {
            return Err("No subagent was started: this session may not choose a subagent's model. Call again without `provider` and `model`.".to_owned());
        }
        let allowed: Vec<String> = settings
            .allowed_models
            .iter()
            .map(|route| format!("{}:{}", route.provider, route.model))
            .collect();
        Err(format!(
            "No subagent was started: {}:{} is not an allowed model. Allowed: {}.",
            route.provider,
            route.model,
            allowed.join(", ")
        ))
    }

    /// Whether the provider registered now gives its children the parent's
    /// conversation.
    fn inherits(&self) -> bool {
        self.runtime
            .get(&self.config.provider)
            .is_some_and(|provider| provider.inherits_parent_context())
    }

    /// Whether the provider registered now can be given a token budget.
    fn meters_tokens(&self) -> bool {
        self.runtime
            .get(&self.config.provider)
            .is_some_and(|provider| provider.capabilities().token_budget)
    }

    /// The configuration it was installed with.
    pub fn config(&self) -> &SubagentToolConfig {
        &self.config
    }

    /// The provider, when it is registered and can honour the configuration.
    /// Asked at every step, so it stays quiet; a call explains the refusal.
    fn provider(&self) -> Option<Arc<dyn SubagentProvider>> {
        let provider = self.runtime.get(&self.config.provider)?;
        check_capabilities(&self.config, provider.as_ref())
            .is_ok()
            .then_some(provider)
    }

    /// Start the child and, in the foreground, wait for its result.
    async fn run(&self, args: Args, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let Some(provider) = self.provider() else {
            if let Some(provider) = self.runtime.get(&self.config.provider)
                && let Err(err) = check_capabilities(&self.config, provider.as_ref())
            {
                tracing::warn!(tool = %self.config.tool_name, "subagent tool unavailable: {err}");
            }
            return Ok(ToolOutput::error(format!(
                "The `{}` provider is not available right now, so no subagent was started. Do the task yourself or try again later.",
                self.config.provider
            )));
        };
        let background = match (self.config.background, args.run_in_background) {
            (true, requested) => requested.unwrap_or(true),
            (false, Some(true)) => {
                return Ok(ToolOutput::error(
                    "Background runs are turned off for this tool; call it again without `run_in_background` to wait for the result.",
                ));
            }
            (false, _) => false,
        };
        let role = match &args.agent {
            Some(name) => match self.config.roles.get(name) {
                Some(role) => Some(role),
                None => {
                    return Ok(ToolOutput::error(role::unknown(name, &self.config.roles)));
                }
            },
            None => None,
        };
        let mut request =
            StartRequest::new(ctx.agent.clone(), vec![ContentBlock::text(args.prompt)]);
        request.agent_options.clone_from(&self.config.agent_options);
        if let Some(route) = role.and_then(|role| role.options.as_ref()) {
            request.agent_options =
                Some(route.merged_over(&request.agent_options.unwrap_or_default()));
        }
        match self.chosen_route(ctx.agent.as_ref(), args.provider, args.model) {
            Ok(Some(route)) => {
                let chosen = AgentOptions {
                    provider: Some(route.provider),
                    model: Some(route.model),
                    ..AgentOptions::default()
                };
                request.agent_options =
                    Some(chosen.merged_over(&request.agent_options.unwrap_or_default()));
            }
            Ok(None) => {}
            Err(refused) => return Ok(ToolOutput::error(refused)),
        }
        request.persona.clone_from(&self.config.persona);
        request.tool_filter.clone_from(&self.config.tool_filter);
        request.max_depth = self.runtime.resolve_max_depth(self.config.max_depth);
        // The caller's own role bounds the depth of whatever it starts.
        let caller_role = ctx
            .agent
            .composition()
            .preset
            .as_ref()
            .and_then(|name| self.config.roles.get(name));
        for cap in [caller_role, role].into_iter().flatten() {
            request.max_depth = capped(request.max_depth, cap.max_depth);
        }
        if let (Some(name), Some(role)) = (&args.agent, role) {
            request.agent_preset = Some(name.clone());
            if role.persona.is_some() {
                request.persona.clone_from(&role.persona);
            }
            request.tool_filter = narrowed(request.tool_filter.take(), role.tool_filter.as_ref());
        }
        let limits = match self.config.budget.resolve(
            args.token_budget
                .or_else(|| role.and_then(|role| role.token_budget)),
            args.timeout_seconds
                .map(std::time::Duration::from_secs)
                .or_else(|| role.and_then(|role| role.time_limit)),
        ) {
            Ok(limits) => limits,
            Err(err) => return Ok(ToolOutput::error(refusal(&err.into()))),
        };
        request.token_budget = limits.tokens;
        request.time_limit = limits.time;
        let spec = ActivationSpec {
            provider: self.config.provider.clone(),
            label: args.description,
            name: args.name,
            child_id: None,
            cancel: ctx.cancel.clone(),
            delivery: if background {
                Delivery::Parent
            } else {
                Delivery::Caller
            },
            request,
        };
        let activation = match self.runtime.start_activation(spec).await {
            Ok(activation) => activation,
            Err(err) => return Ok(ToolOutput::error(refusal(&err))),
        };
        if background {
            return Ok(ToolOutput::text(started_in_background(
                activation.name(),
                provider.continuable().is_some(),
            )));
        }
        let guard = DisposeOnDrop {
            activation: Some(activation.clone()),
            runtime: self.runtime.clone(),
        };
        let result = tokio::select! {
            result = activation.result() => result,
            () = ctx.cancel.cancelled() => {
                // Stopped means stopped: the teardown is awaited (a drop
                // from here on hands it to the guard) before the model is
                // told.
                let stopped = activation.dispose().await;
                guard.defuse();
                return Ok(ToolOutput::error(match stopped {
                    Ok(()) => format!(
                        "The call was cancelled, and the subagent `{}` was stopped.",
                        activation.name()
                    ),
                    Err(err) => format!(
                        "The call was cancelled, but stopping the subagent `{}` failed: {err}",
                        activation.name()
                    ),
                }));
            }
        };
        guard.defuse();
        match result {
            Ok(result) => Ok(render_result(activation.name(), &result)),
            Err(err) => Ok(ToolOutput::error(format!(
                "The subagent `{}` could not deliver a result: {err}",
                activation.name()
            ))),
        }
    }
}

/// The tighter of a depth cap and a role's.
fn capped(cap: Option<u32>, role: Option<u32>) -> Option<u32> {
    match (cap, role) {
        (Some(cap), Some(role)) => Some(cap.min(role)),
        (cap, role) => cap.or(role),
    }
}

/// The tool's own filter narrowed by a role's: what both let through.
fn narrowed(
    filter: Option<ToolRestriction>,
    role: Option<&ToolRestriction>,
) -> Option<ToolRestriction> {
    let Some(role) = role else {
        return filter;
    };
    Some(match filter {
        None => role.clone(),
        Some(ToolRestriction::Allow(mine)) => {
            ToolRestriction::Allow(mine.into_iter().filter(|tool| role.permits(tool)).collect())
        }
        Some(ToolRestriction::Deny(mine)) => match role {
            ToolRestriction::Allow(theirs) => ToolRestriction::Allow(
                theirs
                    .iter()
                    .filter(|tool| !mine.contains(*tool))
                    .cloned()
                    .collect(),
            ),
            ToolRestriction::Deny(theirs) => {
                ToolRestriction::Deny(mine.union(theirs).cloned().collect())
            }
        },
    })
}

/// Disposes a foreground activation whose call went away before its result,
/// on the runtime's task tracker, so the teardown has an owner that
/// [`SubagentRuntime::shutdown`] waits for.
struct DisposeOnDrop {
    activation: Option<SubagentActivation>,
    runtime: SubagentRuntime,
}

impl DisposeOnDrop {
    /// The result arrived, or the teardown was awaited: nothing to dispose.
    fn defuse(mut self) {
        self.activation = None;
    }
}

impl Drop for DisposeOnDrop {
    fn drop(&mut self) {
        let Some(activation) = self.activation.take() else {
            return;
        };
        // Dropped by a cancelled turn: stop the child and finish its
        // teardown off this call (a failure also ends its run as an error,
        // which `subagent/end` reports).
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                self.runtime.tasks().spawn_on(async move {
                    if let Err(err) = activation.dispose().await {
                        tracing::warn!(child = %activation.child_id(), "disposing a cancelled foreground subagent failed: {err}");
                    }
                }, &handle);
            }
            Err(_) => tracing::error!(
                child = %activation.child_id(),
                "a cancelled foreground subagent could not be disposed: no runtime"
            ),
        }
    }
}

#[async_trait]
impl Tool for SubagentTool {
    fn name(&self) -> &str {
        &self.config.tool_name
    }

    fn description(&self) -> String {
        full_description(&self.config, self.inherits())
    }

    fn offered_to(&self, agent: &dyn Agent) -> bool {
        // Sampled before the agent's first model request with the tool.
        self.model_selection_of(agent);
        true
    }

    fn input_schema(&self) -> Value {
        // Rebuilt from the provider found now, as the description is: the
        // prompt's wording follows whether the child sees this conversation.
        input_schema(&self.config, self.inherits(), self.meters_tokens())
    }

    fn is_available(&self) -> bool {
        self.provider().is_some()
    }

    fn concurrency_safe(&self) -> bool {
        // Starting a child writes only the caller's catalog, which the
        // runtime serialises; parallel delegations are the point.
        true
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Args = serde_json::from_value(input)
            .map_err(|err| ToolError::new(format!("Invalid arguments: {err}.")))?;
        if self.config.model_selection.is_none()
            && (args.provider.is_some() || args.model.is_some())
        {
            return Err(ToolError::new(
                "Invalid arguments: `provider` and `model` are not parameters of this tool.",
            ));
        }
        if self.config.roles.is_empty() && args.agent.is_some() {
            return Err(ToolError::new(
                "Invalid arguments: `agent` is not a parameter of this tool: no roles are configured.",
            ));
        }
        self.run(args, ctx).await
    }
}
