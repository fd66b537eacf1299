#![doc = include_str!("../README.md")]

pub mod survey;
pub use survey::{SURVEY_TOOL_NAME, SurveyTool};

use dsh_subagent::{AdmissionError, AgentRoute, BudgetPolicy, RegistryError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

mod model_selection;

pub use model_selection::{
    ModelSelectionError, ModelSelectionSettings, SubagentModelSelectionConfig,
};

use async_trait::async_trait;
use dsh_core::content::joined_text;
use dsh_core::{
    Agent, AgentOptions, AgentRef, ContentBlock, StopReason, Tool, ToolContext, ToolError,
    ToolOutput, ToolRestriction, Usage,
};
use dsh_subagent::budget::usage_line;
use dsh_subagent::{
    ActivationSpec, Delivery, StartRequest, SubagentActivation, SubagentError, SubagentProvider,
    SubagentResult, SubagentRuntime,
};
use serde::Deserialize;
use serde_json::{Value, json};

/// The tool name used when the configuration names none.
pub const DEFAULT_TOOL_NAME: &str = "subagent";

/// The depth cap the runtime's user setting starts at.
pub use dsh_subagent::DEFAULT_MAX_DEPTH;

/// How deep the children started through the tool may nest.
pub use dsh_subagent::MaxDepth;

/// The configuration of one `subagent` tool instance.
#[derive(Debug, Clone, PartialEq)]
pub struct SubagentToolConfig {
    /// The model-facing tool name; unique among an agent's tools.
    pub tool_name: String,
    /// The registered provider the tool starts children on.
    pub provider: String,
    /// The depth cap sent with every start, resolved at each call by
    /// [`SubagentRuntime::resolve_max_depth`]: `None` follows the runtime's
    /// current user setting.
    pub max_depth: Option<MaxDepth>,
    /// Agent options for every child (needs the `agent_options` capability).
    pub agent_options: Option<AgentOptions>,
    /// A persona for every child (needs the `persona` capability).
    pub persona: Option<String>,
    /// A tool restriction for every child (needs the `tool_filter`
    /// capability); it must name at least one tool.
    pub tool_filter: Option<ToolRestriction>,
    /// Whether the model may run children in the background (and does by
    /// default); when off, every call waits for its child.
    pub background: bool,
    /// The host's model-selection setting (seed 002's
    /// `ctx.subagentModelSelection`): with it, the tool takes `provider`
    /// and `model`, and a top-level session may choose its child's route
    /// among the routes it was allowed when the tool was first offered to
    /// it (needs the `agent_options` capability).
    pub model_selection: Option<SubagentModelSelectionConfig>,
    /// The host's defaults and ceilings for a child's token budget and
    /// time limit: a call may ask for less than a ceiling, never more, and
    /// one that asks for nothing gets the default. A token budget needs the
    /// provider's `token_budget` capability; a time limit needs none.
    pub budget: BudgetPolicy,
}

impl SubagentToolConfig {
    /// The defaults for `provider`: tool name `subagent`, the runtime's
    /// depth setting, no child options, background mode on.
    pub fn new(provider: impl Into<String>) -> Self {
        Self {
            tool_name: DEFAULT_TOOL_NAME.to_owned(),
            provider: provider.into(),
            max_depth: None,
            agent_options: None,
            persona: None,
            tool_filter: None,
            background: true,
            model_selection: None,
            budget: BudgetPolicy::default(),
        }
    }
}

/// A configuration that cannot work, refused when the tool is installed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    /// The tool name is empty.
    #[error("the subagent tool needs a non-empty tool name")]
    EmptyToolName,
    /// The provider name is empty.
    #[error("the subagent tool `{0}` names no provider")]
    EmptyProvider(String),
    /// The tool filter names no tool, so it either hides every tool or
    /// changes nothing.
    #[error(
        "the subagent tool `{0}` has a tool filter that names no tool; remove the filter or name the tools it allows or denies"
    )]
    EmptyToolFilter(String),
    /// The provider lacks a capability the configuration needs.
    #[error(
        "the subagent tool `{tool}` needs the `{capability}` capability, which provider `{provider}` does not have{hint}"
    )]
    MissingCapability {
        /// The tool.
        tool: String,
        /// The provider.
        provider: String,
        /// The capability, by its flag name.
        capability: &'static str,
        /// What to change, when there is an obvious fix.
        hint: &'static str,
    },
}

impl InstallError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::EmptyToolName => "EMPTY_TOOL_NAME",
            Self::EmptyProvider(_) => "EMPTY_PROVIDER",
            Self::EmptyToolFilter(_) => "EMPTY_TOOL_FILTER",
            Self::MissingCapability { .. } => "MISSING_CAPABILITY",
        }
    }
}

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
struct Args {
    description: String,
    prompt: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    run_in_background: Option<bool>,
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    token_budget: Option<u64>,
    #[serde(default)]
    timeout_seconds: Option<u64>,
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
        let mut request =
            StartRequest::new(ctx.agent.clone(), vec![ContentBlock::text(args.prompt)]);
        request.agent_options.clone_from(&self.config.agent_options);
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
        let limits = match self.config.budget.resolve(
            args.token_budget,
            args.timeout_seconds.map(std::time::Duration::from_secs),
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
        let mut text = description(self.inherits(), self.config.background);
        if self.config.model_selection.is_some() {
            text.push_str(" You may choose the subagent's model with `provider` and `model` (both or neither); only the routes this session was allowed are accepted, and a refused choice names them. Leave them out for the default.");
        }
        text
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
        self.run(args, ctx).await
    }
}

/// Refuse a configuration the provider cannot honour.
fn check_capabilities(
    config: &SubagentToolConfig,
    provider: &dyn SubagentProvider,
) -> Result<(), InstallError> {
    let caps = provider.capabilities();
    let missing = |capability: &'static str, hint: &'static str| InstallError::MissingCapability {
        tool: config.tool_name.clone(),
        provider: config.provider.clone(),
        capability,
        hint,
    };
    if config.max_depth != Some(MaxDepth::ProviderManaged) && !caps.depth_limit {
        return Err(missing(
            "depth_limit",
            "; set the depth to provider-managed to leave recursion to the provider",
        ));
    }
    if (config.agent_options.is_some() || config.model_selection.is_some()) && !caps.agent_options {
        return Err(missing("agent_options", ""));
    }
    if config.persona.is_some() && !caps.persona {
        return Err(missing("persona", ""));
    }
    if config.tool_filter.is_some() && !caps.tool_filter {
        return Err(missing("tool_filter", ""));
    }
    if (config.budget.default_tokens.is_some() || config.budget.max_tokens.is_some())
        && !caps.token_budget
    {
        return Err(missing(
            "token_budget",
            "; remove the token budget from the tool's settings",
        ));
    }
    Ok(())
}

/// The tool description for a provider whose children do (`inherits`) or do
/// not see the parent's conversation.
fn description(inherits: bool, background: bool) -> String {
    let what = if inherits {
        "Delegate a task to a subagent that starts from this conversation: it sees every completed turn so far (not the turn in progress). Use it for work that builds on this context, such as a follow-up analysis, a review or a continuation, without spending this conversation's context on the work itself. You get its result, not its intermediate steps."
    } else {
        "Delegate a self-contained task to a subagent: a separate agent with its own context. Use it to offload focused, independent work, such as research, a scoped change or an analysis, without spending this conversation's context on it. You get its result, not its intermediate steps. It does not see this conversation, so give it a complete, standalone prompt."
    };
    let when = if background {
        " By default it runs in the background: the call returns the subagent's name at once and its result arrives later in your inbox as a notice. Start independent subagents together and keep working while they run. Set `run_in_background` to false when your next step needs the result."
    } else {
        " The call waits for the subagent and returns its result."
    };
    format!("{what}{when}")
}

/// The input schema for `config`: `run_in_background` only when background
/// runs are on, `provider` and `model` only with model selection,
/// `token_budget` only for a provider that meters tokens (`budgets`),
/// `timeout_seconds` always (each bounded by the host's ceiling), and the
/// prompt worded for a child that does (`inherits`) or does not see the
/// parent's conversation.
fn input_schema(config: &SubagentToolConfig, inherits: bool, budgets: bool) -> Value {
    let prompt = if inherits {
        "What the subagent should do next. It already sees this conversation's completed turns, so state only what is new: the task and anything decided since."
    } else {
        "The complete task for the subagent. It does not see this conversation, so include everything it needs: the goal, the relevant files or facts, and what to report back."
    };
    let mut properties = json!({
        "description": {
            "type": "string",
            "minLength": 1,
            "description": "A short (3-5 word) label for the task, shown in agent listings."
        },
        "prompt": {
            "type": "string",
            "minLength": 1,
            "description": prompt
        },
        "name": {
            "type": "string",
            "description": "An optional name to address the subagent by later: 1-32 lower-case letters, digits and hyphens, starting with a letter, unique among your subagents. Omitted, it is named agent-N."
        }
    });
    if config.model_selection.is_some()
        && let Some(map) = properties.as_object_mut()
    {
        map.insert(
            "provider".to_owned(),
            json!({
                "type": "string",
                "minLength": 1,
                "description": "The model provider route for the subagent; give it with `model`, or leave both out for the default."
            }),
        );
        map.insert(
            "model".to_owned(),
            json!({
                "type": "string",
                "minLength": 1,
                "description": "The model id for the subagent, under `provider`."
            }),
        );
    }
    if let Some(map) = properties.as_object_mut() {
        if budgets {
            let mut budget = json!({
                "type": "integer",
                "minimum": 1,
                "description": "The most tokens (input plus output) the subagent and any subagents it starts may use; it is stopped when they are spent and you get what it had so far. It must fit in what is left of your own budget, if you have one."
            });
            if let Some(ceiling) = config.budget.max_tokens {
                budget["maximum"] = json!(ceiling);
            }
            map.insert("token_budget".to_owned(), budget);
        }
        let mut timeout = json!({
            "type": "integer",
            "minimum": 1,
            "description": "The most seconds the subagent may run; it is stopped when they are up and you get what it had so far."
        });
        if let Some(ceiling) = config.budget.max_time {
            timeout["maximum"] = json!(ceiling.as_secs());
        }
        map.insert("timeout_seconds".to_owned(), timeout);
    }
    if config.background
        && let Some(map) = properties.as_object_mut()
    {
        map.insert(
            "run_in_background".to_owned(),
            json!({
                "type": "boolean",
                "description": "Run in the background and return the subagent's name at once (the default), or set false to wait for its result."
            }),
        );
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": ["description", "prompt"],
        "additionalProperties": false
    })
}

/// What a background start tells the model.
fn started_in_background(name: &str, continuable: bool) -> String {
    let follow_up = if continuable {
        format!(" It keeps its conversation afterwards, so you can address it later as `{name}`.")
    } else {
        " It is an external agent: it cannot take follow-up messages.".to_owned()
    };
    format!(
        "Started subagent `{name}` in the background. Its result will arrive in your inbox as a notice when it finishes.{follow_up}"
    )
}

/// A start the runtime refused, as a sentence the model can act on.
fn refusal(err: &SubagentError) -> String {
    match err {
        SubagentError::Admission(AdmissionError::DepthLimit { .. })
        | SubagentError::Admission(AdmissionError::Capacity(_))
        | SubagentError::Admission(AdmissionError::Draining) => {
            format!("No subagent was started: {}.", sentence(err))
        }
        SubagentError::Admission(AdmissionError::NameTaken(name)) => format!(
            "No subagent was started: the name `{name}` is already taken by another of your subagents. Choose a different name, or leave `name` out."
        ),
        SubagentError::Admission(AdmissionError::InvalidName { name, reason }) => format!(
            "No subagent was started: `{name}` cannot be used as a name ({reason}). Choose another name, or leave `name` out."
        ),
        SubagentError::Registry(RegistryError::NoProvider(provider)) => format!(
            "No subagent was started: the `{provider}` provider is not available right now. Do the task yourself or try again later."
        ),
        SubagentError::Cancelled => "The subagent start was cancelled.".to_owned(),
        other => format!("No subagent was started: {}.", sentence(other)),
    }
}

/// An error's message without its closing full stop, to end a sentence with.
fn sentence(err: &SubagentError) -> String {
    err.to_string().trim_end_matches('.').to_owned()
}

/// A settled foreground result as the model sees it: the child's output when
/// it completed; otherwise an error result with a headline for the stop
/// reason, the diagnostic and any partial output.
fn render_result(name: &str, result: &SubagentResult) -> ToolOutput {
    if result.stop_reason == StopReason::COMPLETED {
        let mut content = result.output.clone();
        if let Some(structured) = &result.structured {
            content.push(ContentBlock::text(format!(
                "Structured output:\n{}",
                serde_json::to_string_pretty(structured).unwrap_or_default()
            )));
        }
        if content.is_empty() {
            content.push(ContentBlock::text(format!(
                "The subagent `{name}` finished without a final message."
            )));
        }
        return ToolOutput {
            content,
            is_error: false,
            end_turn: false,
        };
    }
    let mut text = headline(name, &result.stop_reason);
    if let Some(diagnostic) = &result.diagnostic {
        text.push_str("\nDiagnostic: ");
        text.push_str(diagnostic);
    }
    if result.subtree_usage != Usage::default() {
        text.push_str("\nUsage: ");
        text.push_str(&usage_line(&result.subtree_usage));
    }
    let partial = joined_text(&result.output);
    if !partial.is_empty() {
        text.push_str("\nPartial output before it ended:\n");
        text.push_str(&partial);
    }
    ToolOutput::error(text)
}

/// One sentence on how a child that did not complete ended.
fn headline(name: &str, reason: &StopReason) -> String {
    match reason.as_str() {
        "aborted" => format!("The subagent `{name}` was stopped before it finished."),
        "error" => format!("The subagent `{name}` failed."),
        "max-tokens" => {
            format!("The subagent `{name}` ran out of output tokens before it finished.")
        }
        "refusal" => format!("The subagent `{name}` declined the task."),
        "budget-exhausted" => {
            format!("The subagent `{name}` used up its token budget before it finished.")
        }
        "timed-out" => format!("The subagent `{name}` ran out of time before it finished."),
        other => format!("The subagent `{name}` ended without finishing (`{other}`)."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(reason: &str, output: &str, diagnostic: Option<&str>) -> SubagentResult {
        SubagentResult {
            output: if output.is_empty() {
                Vec::new()
            } else {
                vec![ContentBlock::text(output)]
            },
            structured: None,
            diagnostic: diagnostic.map(str::to_owned),
            stop_reason: StopReason::new(reason.to_owned()),
            usage: Default::default(),
            subtree_usage: Default::default(),
        }
    }

    #[test]
    fn every_stop_reason_renders_a_headline_with_diagnostic_and_partial_output() {
        let rendered: Vec<(String, bool, String)> = [
            ("completed", "All done.", None),
            ("completed", "", None),
            ("aborted", "half of it", None),
            ("error", "", Some("model error: rate-limited")),
            (
                "max-tokens",
                "the first part",
                Some("output limit 100 reached"),
            ),
            ("refusal", "I will not do that.", None),
            ("timed-out", "", Some("the agent took too long")),
            (
                "budget-exhausted",
                "what it found so far",
                Some("the subagent's subtree used 120 tokens of its budget of 100"),
            ),
        ]
        .into_iter()
        .map(|(reason, output, diagnostic)| {
            let mut result = result(reason, output, diagnostic);
            if reason == "budget-exhausted" || output == "All done." {
                result.subtree_usage = Usage {
                    input_tokens: 100,
                    output_tokens: 20,
                    cached_input_tokens: 40,
                    reasoning_tokens: 0,
                };
            }
            let out = render_result("scout", &result);
            (reason.to_owned(), out.is_error, joined_text(&out.content))
        })
        .collect();
        insta::assert_debug_snapshot!(rendered);
    }

    #[test]
    fn the_input_struct_accepts_exactly_what_its_schema_accepts() {
        let selecting = SubagentToolConfig {
            model_selection: Some(SubagentModelSelectionConfig::default()),
            ..SubagentToolConfig::new("spawn")
        };
        for config in [SubagentToolConfig::new("spawn"), selecting] {
            let schema =
                dsh_core::schema::JsonSchema::compile(input_schema(&config, false, true)).unwrap();
            for input in [
                json!({"description": "a", "prompt": "b"}),
                json!({"description": "a", "prompt": "b", "name": "scout", "run_in_background": false}),
                json!({"description": "a"}),
                json!({"prompt": "b"}),
                json!({"description": "a", "prompt": "b", "extra": 1}),
                json!({"description": "a", "prompt": 2}),
                json!({"description": "a", "prompt": "b", "provider": "p", "model": "m"}),
                json!({"description": "a", "prompt": "b", "model": 3}),
                json!({"description": "a", "prompt": "b", "token_budget": 500, "timeout_seconds": 60}),
                json!({"description": "a", "prompt": "b", "token_budget": "many"}),
            ] {
                // What `execute` accepts: the struct, and the selection
                // parameters only when the tool has a selection setting.
                let parsed = serde_json::from_value::<Args>(input.clone()).is_ok_and(|args| {
                    config.model_selection.is_some()
                        || (args.provider.is_none() && args.model.is_none())
                });
                assert_eq!(schema.validate(&input).is_ok(), parsed, "{input}");
            }
        }
    }

    #[test]
    fn refusals_are_sentences() {
        let refusals: Vec<String> = [
            SubagentError::Admission(AdmissionError::DepthLimit { depth: 4, max: 3 }),
            SubagentError::Admission(AdmissionError::Capacity(8)),
            SubagentError::Admission(AdmissionError::NameTaken("scout".into())),
            SubagentError::Admission(AdmissionError::InvalidName {
                name: "Scout".into(),
                reason: "a name starts with a lower-case letter",
            }),
            SubagentError::Registry(RegistryError::NoProvider("fork".into())),
            SubagentError::Admission(AdmissionError::Draining),
            SubagentError::Admission(AdmissionError::OverBudget {
                requested: 5000,
                remaining: 1200,
            }),
            SubagentError::Admission(AdmissionError::BudgetSpent),
            SubagentError::Admission(AdmissionError::AboveCeiling {
                option: "timeout_seconds",
                requested: 7200,
                ceiling: 3600,
            }),
            SubagentError::Cancelled,
        ]
        .iter()
        .map(refusal)
        .collect();
        insta::assert_debug_snapshot!(refusals);
    }
}
