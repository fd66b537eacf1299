//! `dsh.toml`: the configuration file, found in the working directory, then
//! in the user's configuration directory (`$XDG_CONFIG_HOME/dsh/dsh.toml`,
//! else `~/.config/dsh/dsh.toml`), or named by `--config`; only the first
//! found is read. Every key is optional and overridden by its flag (and a
//! flag's environment variable, such as `DSH_MODEL`). Unknown keys and bad
//! values are refused with one line naming the file and the key, exit code
//! [`EXIT_USAGE`](crate::error::EXIT_USAGE), before anything runs.
//!
//! This module reads and checks; it resolves the file and the flags into
//! [`Settings`], and never reads an API key itself (only the name of the
//! variable that holds it).
//!
//! The `[acp]` table's reading is the [`acp`](mod@acp) module; roles and budgets
//! are read here and checked in [`crate::roles`] and [`crate::budget`].
//!
//! Past 800 lines because its unit tests live here (about 275 lines): the
//! code itself is one concept, each key's reading beside its check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::acp::PermissionPolicy;
use dsh_core::Durability;
use dsh_tool_workspace::Level;
use serde::Deserialize;

use crate::error::CliError;
use crate::model::{ApiModel, ModelChoice, parse_spec};
use crate::roles::{AgentRole, RoleSpec};

mod acp;
#[cfg(not(feature = "acp"))]
use acp::no_acp;
#[cfg(feature = "acp")]
use acp::{acp, named_agents};

/// The configuration file's name.
pub const FILE_NAME: &str = "dsh.toml";

/// The file as written: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `demo`, `<provider>:<model>`, or `<provider>` (its default model).
    pub model: Option<String>,
    /// OpenAI-compatible APIs by name (`openai` is built in).
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// The tree's limits.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// An ACP agent offered as the `acp` tool.
    pub acp: Option<AcpSection>,
    /// Prices by model id, for the cost shown with the tokens.
    #[serde(default)]
    pub prices: BTreeMap<String, Price>,
    /// What the workspace tools may do: `read-only` (the default),
    /// `workspace-write` or `full`.
    pub sandbox: Option<String>,
    /// Give the lead a team (the ten team tools, in place of the control
    /// tools' `send_message`, `list_agents` and `interrupt_agent`).
    pub team: Option<bool>,
    /// When the session logs are forced to stable storage: `none`,
    /// `turn-boundary` (the default), `every-event`, `grouped` or
    /// `batched` (write-behind; flushed before a successful exit).
    pub durability: Option<String>,
    /// Agent roles by name (`[agents.NAME]`), as role files define them.
    #[serde(default)]
    pub agents: BTreeMap<String, RoleSpec>,
    /// Where the sessions live and run: the local store (the default) or
    /// a Restate cluster (`crate::engine`).
    pub engine: Option<crate::engine::EngineSection>,
    /// MCP servers whose tools every agent is offered.
    pub mcp: Option<crate::mcp::McpSection>,
}

/// One OpenAI-compatible API.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The base URL (`.../v1`); required but for `openai`.
    pub base_url: Option<String>,
    /// The variable holding the key; absent sends no key (a local server),
    /// but for `openai`, whose default is `OPENAI_API_KEY`.
    pub api_key_env: Option<String>,
    /// The model used when `--model` names only the provider.
    pub model: Option<String>,
}

/// The tree's limits.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Live children at once in one tree.
    pub max_live_children: Option<usize>,
    /// How deep the tree may grow (the lead's children are at depth 1).
    pub max_depth: Option<u32>,
    /// Model requests in one turn of one agent.
    pub max_turn_steps: Option<u32>,
    /// Tokens (input plus output) the whole tree may use.
    pub max_tokens: Option<u64>,
    /// Dollars the whole tree may spend (needs `[prices]` for every model
    /// in use).
    pub max_cost: Option<f64>,
    /// A child's token budget when its start names none.
    pub child_token_budget: Option<u64>,
    /// A child's time limit in seconds when its start names none.
    pub child_time_limit: Option<u64>,
}

/// The `[acp]` table as written, read only to be refused: this `dsh` was
/// built without the `acp` feature.
#[cfg(not(feature = "acp"))]
pub type AcpSection = toml::Table;

/// The `[acp]` table: the agent offered as the `acp` tool, and named ones.
#[cfg(feature = "acp")]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcpSection {
    /// The agent program (a path, or a name on `PATH`); required unless
    /// the table only holds `agents`.
    #[serde(default)]
    pub command: Option<PathBuf>,
    /// More agents, by name: each is offered as a tool of that name (its
    /// provider id), so a model picks the agent per child.
    #[serde(default)]
    pub agents: BTreeMap<String, AcpAgentSection>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables passed through from `dsh`'s environment when set, besides
    /// the default few (`PATH`, `HOME`, ...); everything else is scrubbed.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// How the agent's permission requests are answered: `reject`, `allow`
    /// (`allow_once`), `allow_always`, or `ask` (the person at the
    /// terminal, as the workspace tools ask; rejected when nothing asks).
    #[serde(default)]
    pub permission: PermissionPolicy,
    /// How long the agent may take to exit after its stdin closes, and
    /// again after SIGTERM, before it is killed (milliseconds; default
    /// 3000 and 2000).
    #[serde(default)]
    pub teardown_grace_ms: Option<u64>,
}

/// One `[acp.agents.<name>]` table. Its fields repeat [`AcpSection`]'s on
/// purpose: a shared struct under `#[serde(flatten)]` would be read from a
/// buffered copy of the table, and every error in it would lose its key
/// path, its line and the list of expected fields (`acp: line 1: unknown
/// field` for `acp.bogus: line 3: unknown field ..., expected one of ...`);
/// the snapshot of bad configurations pins those texts.
#[cfg(feature = "acp")]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcpAgentSection {
    /// The agent program (a path, or a name on `PATH`).
    pub command: PathBuf,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables passed through from `dsh`'s environment when set.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// How its permission requests are answered (as `acp.permission`).
    #[serde(default)]
    pub permission: PermissionPolicy,
    /// As `acp.teardown_grace_ms`.
    #[serde(default)]
    pub teardown_grace_ms: Option<u64>,
}

/// A model's price in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million input (prompt) tokens.
    pub input: f64,
    /// Per million output (completion) tokens.
    pub output: f64,
}

impl Price {
    /// The cost of `input` and `output` tokens, in dollars.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let (input, output) = (input as f64, output as f64);
        (input * self.input + output * self.output) / 1_000_000.0
    }
}

/// What the flags say; each wins over the file's key.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--config`: this file, which must exist, instead of the search.
    pub config: Option<PathBuf>,
    /// `--model` / `DSH_MODEL`.
    pub model: Option<String>,
    /// `--base-url`.
    pub base_url: Option<String>,
    /// `--api-key-env`.
    pub api_key_env: Option<String>,
    /// `--max-live-children`.
    pub max_live_children: Option<usize>,
    /// `--max-depth`.
    pub max_depth: Option<u32>,
    /// `--max-turn-steps`.
    pub max_turn_steps: Option<u32>,
    /// `--acp-command`.
    pub acp_command: Option<PathBuf>,
    /// `--acp-arg` (replace the file's `args` when any is given).
    pub acp_args: Vec<String>,
    /// `--acp-env` (added to the file's `pass_env`).
    pub acp_env: Vec<String>,
    /// `--acp-permission`.
    pub acp_permission: Option<PermissionPolicy>,
    /// `--sandbox`.
    pub sandbox: Option<Level>,
    /// `--team` (only ever turns it on).
    pub team: bool,
    /// `--durability`.
    pub durability: Option<Durability>,
    /// `--max-tokens`.
    pub max_tokens: Option<u64>,
    /// `--max-cost`.
    pub max_cost: Option<f64>,
    /// `--mcp NAME=COMMAND` (a flag replaces the file's server of that name).
    pub mcp: Vec<String>,
}

/// The tree's limits, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Live children at once in one tree.
    pub max_live_children: usize,
    /// The deepest a child may be.
    pub max_depth: u32,
    /// Model requests per turn; `None` keeps the loop's default.
    pub max_turn_steps: Option<u32>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_live_children: dsh_subagent::RuntimeConfig::default().max_live_children_per_tree,
            max_depth: dsh_tool_subagent::DEFAULT_MAX_DEPTH,
            max_turn_steps: None,
        }
    }
}

/// Everything a command needs from the file and the flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The file read, if any.
    pub file: Option<PathBuf>,
    /// What drives the agents.
    pub model: ModelChoice,
    /// The tree's limits.
    pub limits: Limits,
    /// The ACP agent, when one is configured.
    pub acp: Option<crate::acp::AcpConfig>,
    /// The named ACP agents (`[acp.agents.<name>]`), each offered as the
    /// tool of its name.
    pub acp_agents: Vec<crate::acp::AcpConfig>,
    /// What the workspace tools may do without asking.
    pub sandbox: Level,
    /// Prices by model id.
    pub prices: BTreeMap<String, Price>,
    /// Whether the lead leads a team (`--team`, dsh.toml `team`).
    pub team: bool,
    /// When the session logs are forced to stable storage
    /// (`--durability`, dsh.toml `durability`; `turn-boundary` unless set).
    pub durability: Durability,
    /// The flags, for a command that resolves a model again (`send` over a
    /// tree that recorded its own).
    pub overrides: Overrides,
    /// The agent roles by name (`[agents.NAME]`, role files), read and
    /// checked against the model; their tools are checked when the world
    /// is built.
    pub roles: BTreeMap<String, AgentRole>,
    /// The tree's budgets.
    pub budgets: Budgets,
    /// The MCP servers (`[mcp.servers.NAME]`, `--mcp`), disabled ones included.
    pub mcp: Vec<dsh_mcp::McpServerConfig>,
}

/// The tree's budgets, resolved: the whole tree's tokens and cost, and a
/// child's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budgets {
    /// Tokens the whole tree may use (`--max-tokens`, `limits.max_tokens`).
    pub max_tokens: Option<u64>,
    /// Dollars the whole tree may spend (`--max-cost`, `limits.max_cost`).
    pub max_cost: Option<f64>,
    /// A child's token budget when its start names none.
    pub child_tokens: Option<u64>,
    /// A child's time limit when its start names none.
    pub child_time: Option<std::time::Duration>,
}

impl Budgets {
    /// Whether the whole tree is metered.
    pub fn meters_tree(&self) -> bool {
        self.max_tokens.is_some() || self.max_cost.is_some()
    }

    /// The defaults and ceilings the delegation tools give a child: the
    /// child defaults, and the tree's tokens as the largest budget a call
    /// may ask for.
    pub fn child_policy(&self) -> dsh_subagent::BudgetPolicy {
        dsh_subagent::BudgetPolicy {
            default_tokens: self.child_tokens,
            max_tokens: self.max_tokens,
            default_time: self.child_time,
            max_time: None,
        }
    }
}

impl Settings {
    /// The model for a tree that recorded `recorded`: `--model` wins, then
    /// the recorded one (with `--base-url` and `--api-key-env` over it),
    /// then the file's or the demo.
    pub fn for_tree(&self, recorded: Option<ModelChoice>) -> ModelChoice {
        if self.overrides.model.is_some() {
            return self.model.clone();
        }
        match recorded {
            Some(ModelChoice::Api(mut api)) => {
                if let Some(url) = &self.overrides.base_url {
                    api.base_url.clone_from(url);
                }
                if let Some(var) = &self.overrides.api_key_env {
                    api.api_key_env = Some(var.clone());
                }
                ModelChoice::Api(api)
            }
            Some(ModelChoice::Demo) => ModelChoice::Demo,
            None => self.model.clone(),
        }
    }

    /// The price of the model in use, when one is configured.
    pub fn price(&self) -> Option<Price> {
        match &self.model {
            ModelChoice::Demo => None,
            ModelChoice::Api(api) => self.prices.get(&api.model).copied(),
        }
    }
}

/// A bad key of `file`.
/// The durability mode of a name as dsh.toml and `--durability` spell it
/// (kebab-case: `none`, `turn-boundary`, `every-event`, `grouped`,
/// `batched`).
pub fn durability(name: &str) -> Option<Durability> {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).ok()
}

fn bad(file: &Path, key: &str, reason: impl Into<String>) -> CliError {
    CliError::Config {
        file: file.to_owned(),
        key: key.to_owned(),
        reason: reason.into(),
    }
}

/// Where the file is looked for, in order, when `--config` is not given.
pub fn search_path(cwd: &Path) -> Vec<PathBuf> {
    let mut paths = vec![cwd.join(FILE_NAME)];
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute());
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute());
    if let Some(dir) = xdg.or_else(|| home.map(|home| home.join(".config"))) {
        paths.push(dir.join("dsh").join(FILE_NAME));
    }
    paths
}

/// Read the configuration (the `--config` file, else the first of
/// [`search_path`] that exists) and resolve it with the flags.
pub fn load(overrides: &Overrides) -> Result<Settings, CliError> {
    let cwd = std::env::current_dir()?;
    let (file, mut parsed) = read(overrides.config.as_deref())?;
    let tables = std::mem::take(&mut parsed.agents);
    let mut settings = resolve(file.as_deref(), parsed, overrides)?;
    let source = file.unwrap_or_else(|| PathBuf::from(FILE_NAME));
    settings.roles = crate::roles::load(&source, tables, &crate::roles::search_dirs(&cwd))?;
    check_roles(&settings)?;
    Ok(settings)
}

/// The configuration file (`config`, else the first of [`search_path`]
/// that exists) parsed but not resolved, with its path; the defaults when
/// there is none.
pub fn read(config: Option<&Path>) -> Result<(Option<PathBuf>, ConfigFile), CliError> {
    let cwd = std::env::current_dir()?;
    let found = match config {
        Some(path) => Some(path.to_owned()),
        None => search_path(&cwd).into_iter().find(|path| path.exists()),
    };
    match found {
        None => Ok((None, ConfigFile::default())),
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|err| bad(&path, "", format!("cannot read it: {err}")))?;
            let parsed = parse(&path, &text)?;
            Ok((Some(path), parsed))
        }
    }
}

/// Refuse what the roles ask of the run that it cannot give: a model route
/// it does not have, or, under a cost limit, a model without a price.
pub fn check_roles(settings: &Settings) -> Result<(), CliError> {
    let mut models = Vec::new();
    if let ModelChoice::Api(api) = &settings.model {
        models.push(api.model.clone());
    }
    for role in settings.roles.values() {
        if let Some(model) = role.model_id(&settings.model)? {
            models.push(model);
        }
    }
    if settings.budgets.max_cost.is_some()
        && let Some(model) = models
            .iter()
            .find(|model| !settings.prices.contains_key(*model))
    {
        let source = settings
            .file
            .clone()
            .unwrap_or_else(|| PathBuf::from(FILE_NAME));
        return Err(bad(
            &source,
            &format!("prices.{model}"),
            format!(
                "missing: a cost limit needs the price of every model in use, and `{model}` has none (add [prices.\"{model}\"] with `input` and `output`)"
            ),
        ));
    }
    Ok(())
}

/// Parse the text of `file`.
pub fn parse(file: &Path, text: &str) -> Result<ConfigFile, CliError> {
    let line_of = |span: Option<std::ops::Range<usize>>| {
        span.map(|span| {
            text.get(..span.start)
                .unwrap_or(text)
                .bytes()
                .filter(|b| *b == b'\n')
                .count()
                + 1
        })
    };
    let deserializer = toml::Deserializer::parse(text).map_err(|err| {
        let at = line_of(err.span())
            .map(|line| format!("line {line}: "))
            .unwrap_or_default();
        bad(
            file,
            "",
            format!("{at}not valid TOML: {}", crate::one_line(err.message())),
        )
    })?;
    serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let path = err.path().to_string();
        let key = if path == "." { String::new() } else { path };
        let at = line_of(err.inner().span())
            .map(|line| format!("line {line}: "))
            .unwrap_or_default();
        bad(
            file,
            &key,
            format!("{at}{}", crate::one_line(err.inner().message())),
        )
    })
}

/// Resolve a parsed file and the flags into [`Settings`].
pub fn resolve(
    file: Option<&Path>,
    parsed: ConfigFile,
    overrides: &Overrides,
) -> Result<Settings, CliError> {
    let source = file.unwrap_or(Path::new(FILE_NAME));
    for (name, provider) in &parsed.providers {
        check_name(name).map_err(|reason| bad(source, &format!("providers.{name}"), reason))?;
        if name != "openai" && provider.base_url.is_none() {
            return Err(bad(
                source,
                &format!("providers.{name}.base_url"),
                "missing: a provider other than `openai` needs its API's base URL",
            ));
        }
        if let Some(var) = &provider.api_key_env {
            check_var(var)
                .map_err(|reason| bad(source, &format!("providers.{name}.api_key_env"), reason))?;
        }
    }
    let model = match (&overrides.model, &parsed.model) {
        (Some(spec), _) => {
            let spec = parse_spec(spec).map_err(|reason| CliError::BadModel {
                spec: spec.clone(),
                reason,
            })?;
            choose(spec, "--model", file, &parsed, overrides)?
        }
        (None, Some(spec)) => {
            let parsed_spec = parse_spec(spec).map_err(|reason| bad(source, "model", reason))?;
            choose(parsed_spec, "model", file, &parsed, overrides)?
        }
        (None, None) => ModelChoice::Demo,
    };
    let defaults = Limits::default();
    let positive = |value: Option<u32>, key: &str, flag: Option<u32>| match flag.or(value) {
        Some(0) if flag.is_some() => Err(CliError::BadFlag(format!("--{key}: must be positive"))),
        Some(0) => Err(bad(
            source,
            &format!("limits.{}", key.replace('-', "_")),
            "must be positive",
        )),
        other => Ok(other),
    };
    let max_depth = positive(parsed.limits.max_depth, "max-depth", overrides.max_depth)?
        .unwrap_or(defaults.max_depth);
    let max_turn_steps = positive(
        parsed.limits.max_turn_steps,
        "max-turn-steps",
        overrides.max_turn_steps,
    )?;
    let max_live_children = match overrides
        .max_live_children
        .or(parsed.limits.max_live_children)
    {
        Some(0) if overrides.max_live_children.is_some() => {
            return Err(CliError::BadFlag(
                "--max-live-children: must be positive".to_owned(),
            ));
        }
        Some(0) => {
            return Err(bad(source, "limits.max_live_children", "must be positive"));
        }
        Some(n) => n,
        None => defaults.max_live_children,
    };
    let budgets = budgets(source, &parsed.limits, overrides)?;
    for (id, price) in &parsed.prices {
        for (field, value) in [("input", price.input), ("output", price.output)] {
            if !value.is_finite() || value < 0.0 {
                return Err(bad(
                    source,
                    &format!("prices.{id}.{field}"),
                    "must be a non-negative number of dollars per million tokens",
                ));
            }
        }
    }
    #[cfg(feature = "acp")]
    let (acp_agents, acp) = (
        named_agents(source, parsed.acp.as_ref())?,
        acp(source, parsed.acp, overrides)?,
    );
    #[cfg(not(feature = "acp"))]
    let (acp_agents, acp) = no_acp(source, parsed.acp.as_ref(), overrides)?;
    let sandbox = match (overrides.sandbox, &parsed.sandbox) {
        (Some(level), _) => level,
        (None, Some(name)) => name
            .parse::<Level>()
            .map_err(|err| bad(source, "sandbox", err.to_string()))?,
        (None, None) => Level::default(),
    };
    let durability = match (overrides.durability, &parsed.durability) {
        (Some(mode), _) => mode,
        (None, Some(name)) => durability(name).ok_or_else(|| {
            bad(
                source,
                "durability",
                format!(
                    "`{name}` is not one of none, turn-boundary, every-event, grouped, batched"
                ),
            )
        })?,
        (None, None) => Durability::default(),
    };
    let mcp = crate::mcp::resolve(source, parsed.mcp, &overrides.mcp)?;
    Ok(Settings {
        file: file.map(Path::to_owned),
        model,
        limits: Limits {
            max_live_children,
            max_depth,
            max_turn_steps,
        },
        acp,
        acp_agents,
        sandbox,
        prices: parsed.prices,
        team: overrides.team || parsed.team.unwrap_or(false),
        durability,
        overrides: overrides.clone(),
        roles: BTreeMap::new(),
        budgets,
        mcp,
    })
}

/// The tree's budgets from `[limits]` and the flags; a zero is refused.
fn budgets(
    source: &Path,
    limits: &LimitsConfig,
    overrides: &Overrides,
) -> Result<Budgets, CliError> {
    let zero = |flag: Option<&str>, key: &str| match flag {
        Some(flag) => CliError::BadFlag(format!("{flag}: must be positive")),
        None => bad(source, &format!("limits.{key}"), "must be positive"),
    };
    let tokens = |flag: Option<u64>, file: Option<u64>, name: &str, key: &str| match flag.or(file) {
        Some(0) => Err(zero(flag.is_some().then_some(name), key)),
        other => Ok(other),
    };
    let max_tokens = tokens(
        overrides.max_tokens,
        limits.max_tokens,
        "--max-tokens",
        "max_tokens",
    )?;
    let child_tokens = tokens(None, limits.child_token_budget, "", "child_token_budget")?;
    let child_time = tokens(None, limits.child_time_limit, "", "child_time_limit")?
        .map(std::time::Duration::from_secs);
    let max_cost = match overrides.max_cost.or(limits.max_cost) {
        Some(cost) if !cost.is_finite() || cost <= 0.0 => {
            return Err(zero(
                overrides.max_cost.is_some().then_some("--max-cost"),
                "max_cost",
            ));
        }
        other => other,
    };
    Ok(Budgets {
        max_tokens,
        max_cost,
        child_tokens,
        child_time,
    })
}

/// The API model a parsed spec names, with its provider's settings.
fn choose(
    (provider, model): (String, Option<String>),
    key: &str,
    file: Option<&Path>,
    parsed: &ConfigFile,
    overrides: &Overrides,
) -> Result<ModelChoice, CliError> {
    let source = file.unwrap_or(Path::new(FILE_NAME));
    let refuse = |reason: String| -> CliError {
        if key == "model" {
            bad(source, key, reason)
        } else {
            CliError::BadModel {
                spec: overrides.model.clone().unwrap_or_default(),
                reason,
            }
        }
    };
    if provider == "demo" {
        return Ok(ModelChoice::Demo);
    }
    let configured = parsed.providers.get(&provider);
    if configured.is_none() && provider != "openai" {
        let known: Vec<&str> = std::iter::once("openai")
            .chain(
                parsed
                    .providers
                    .keys()
                    .map(String::as_str)
                    .filter(|name| *name != "openai"),
            )
            .collect();
        return Err(refuse(format!(
            "unknown provider `{provider}`; known: {} (add one under [providers.{provider}] in {FILE_NAME})",
            known.join(", ")
        )));
    }
    let model = match model.or_else(|| configured.and_then(|p| p.model.clone())) {
        Some(model) => model,
        None => {
            return Err(refuse(format!(
                "no model for provider `{provider}`: write `{provider}:<model>` or set providers.{provider}.model"
            )));
        }
    };
    let env_base = (provider == "openai")
        .then(|| std::env::var(crate::model::BASE_URL_ENV).ok())
        .flatten()
        .filter(|url| !url.trim().is_empty());
    let base_url = overrides
        .base_url
        .clone()
        .or(env_base)
        .or_else(|| configured.and_then(|p| p.base_url.clone()))
        .unwrap_or_else(|| dsh_llm_openai::DEFAULT_BASE_URL.to_owned());
    let (api_key_env, key_origin) = match (
        &overrides.api_key_env,
        configured.and_then(|p| p.api_key_env.clone()),
    ) {
        (Some(var), _) => {
            check_var(var)
                .map_err(|reason| CliError::BadFlag(format!("--api-key-env `{var}`: {reason}")))?;
            (Some(var.clone()), None)
        }
        (None, Some(var)) => (
            Some(var),
            Some((
                source.to_owned(),
                format!("providers.{provider}.api_key_env"),
            )),
        ),
        (None, None) if provider == "openai" => {
            (Some(dsh_llm_openai::DEFAULT_API_KEY_ENV.to_owned()), None)
        }
        (None, None) => (None, None),
    };
    Ok(ModelChoice::Api(ApiModel {
        provider,
        model,
        base_url,
        api_key_env,
        key_origin,
    }))
}

/// A provider name: lowercase letters, digits, `-` and `_`, not `demo`.
fn check_name(name: &str) -> Result<(), String> {
    if name == "demo" {
        return Err("`demo` is the offline demo, not a provider".to_owned());
    }
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    {
        return Err("a provider name is lowercase letters, digits, `-` and `_`".to_owned());
    }
    Ok(())
}

/// An environment variable's name.
pub(crate) fn check_var(var: &str) -> Result<(), String> {
    if var.is_empty() || var.contains(['=', '\0']) || var.chars().any(char::is_whitespace) {
        return Err("not an environment variable's name".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn settings(text: &str, overrides: &Overrides) -> Result<Settings, String> {
        let file = Path::new("/cfg/dsh.toml");
        parse(file, text)
            .and_then(|parsed| resolve(Some(file), parsed, overrides))
            .map_err(|err| format!("{} (exit {})", err, err.exit_code()))
    }

    // The example and the flags name an ACP agent, refused without the
    // feature.
    #[cfg(feature = "acp")]
    #[test]
    fn the_documented_example_parses_and_every_key_is_used() {
        let text = include_str!("../../dsh.example.toml");
        let settings = settings(text, &Overrides::default()).unwrap();
        let ModelChoice::Api(api) = &settings.model else {
            panic!("{:?}", settings.model);
        };
        assert_eq!(api.provider, "deepseek");
        assert_eq!(api.model, "deepseek-chat");
        assert_eq!(api.base_url, "https://api.deepseek.com/v1");
        assert_eq!(api.api_key_env.as_deref(), Some("DEEPSEEK_API_KEY"));
        assert_eq!(
            settings.limits,
            Limits {
                max_live_children: 8,
                max_depth: 2,
                max_turn_steps: Some(40),
            }
        );
        let acp = settings.acp.unwrap();
        assert_eq!(acp.command, PathBuf::from("codex-acp"));
        assert!(acp.inherit_env.contains(&"CODEX_HOME".to_owned()));
        assert!(acp.inherit_env.contains(&"PATH".to_owned()));
        assert_eq!(acp.permission, PermissionPolicy::Reject);
        assert_eq!(acp.eof_grace, std::time::Duration::from_secs(3));
        let [claude] = settings.acp_agents.as_slice() else {
            panic!("{:?}", settings.acp_agents);
        };
        assert_eq!(
            (claude.name.as_str(), claude.command.as_path()),
            ("claude", Path::new("claude-code-acp"))
        );
        assert!(claude.inherit_env.contains(&"ANTHROPIC_API_KEY".to_owned()));
        assert_eq!(claude.permission, PermissionPolicy::Ask);
        assert_eq!(claude.term_grace, std::time::Duration::from_secs(1));
        assert_eq!(settings.sandbox, Level::WorkspaceWrite);
        assert!(settings.team);
        assert_eq!(settings.durability, Durability::Batched);
        assert_eq!(settings.budgets.max_tokens, Some(2_000_000));
        assert_eq!(settings.budgets.max_cost, Some(5.0));
        assert_eq!(settings.budgets.child_tokens, Some(400_000));
        let mut parsed = parse(Path::new("/cfg/dsh.toml"), text).unwrap();
        let roles = crate::roles::load(
            Path::new("/cfg/dsh.toml"),
            std::mem::take(&mut parsed.agents),
            &[],
        )
        .unwrap();
        assert_eq!(roles["reviewer"].spec.token_budget, Some(100_000));
        let cost = settings.prices["deepseek-chat"].cost(1_000_000, 500_000);
        assert!((cost - (0.27 + 0.55)).abs() < 1e-9, "{cost}");
    }

    // The example and the flags name an ACP agent, refused without the
    // feature.
    #[cfg(feature = "acp")]
    #[test]
    fn flags_win_over_the_file() {
        let text = "model = \"openai:gpt-4o\"\ndurability = \"grouped\"\n[limits]\nmax_depth = 2\n[acp]\ncommand = \"a\"\nargs = [\"x\"]\npass_env = [\"CODEX_HOME\"]\n";
        let overrides = Overrides {
            model: Some("openai:gpt-4o-mini".into()),
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key_env: Some("MY_KEY".into()),
            max_depth: Some(5),
            max_live_children: Some(3),
            max_turn_steps: Some(9),
            acp_command: Some("b".into()),
            acp_args: vec!["y".into()],
            acp_env: vec!["EXTRA".into()],
            acp_permission: Some(PermissionPolicy::Allow),
            sandbox: Some(Level::Full),
            team: true,
            durability: Some(Durability::Batched),
            config: None,
            max_tokens: None,
            max_cost: None,
            mcp: Vec::new(),
        };
        let from_file = settings(text, &Overrides::default()).unwrap();
        assert_eq!(from_file.durability, Durability::Grouped);
        let settings = settings(text, &overrides).unwrap();
        assert_eq!(
            settings.model,
            ModelChoice::Api(ApiModel {
                provider: "openai".into(),
                model: "gpt-4o-mini".into(),
                base_url: "http://127.0.0.1:9/v1".into(),
                api_key_env: Some("MY_KEY".into()),
                key_origin: None,
            })
        );
        assert_eq!(
            settings.limits,
            Limits {
                max_live_children: 3,
                max_depth: 5,
                max_turn_steps: Some(9)
            }
        );
        let acp = settings.acp.unwrap();
        assert_eq!(acp.command, PathBuf::from("b"));
        assert_eq!(acp.args, vec!["y".to_owned()]);
        assert!(acp.inherit_env.contains(&"CODEX_HOME".to_owned()));
        assert!(acp.inherit_env.contains(&"EXTRA".to_owned()));
        assert_eq!(acp.permission, PermissionPolicy::Allow);
        assert_eq!(settings.sandbox, Level::Full);
        assert!(settings.team);
        assert_eq!(settings.durability, Durability::Batched);
    }

    #[test]
    fn no_file_and_no_flags_is_the_demo_with_the_default_limits() {
        let settings = resolve(None, ConfigFile::default(), &Overrides::default()).unwrap();
        assert_eq!(settings.model, ModelChoice::Demo);
        assert_eq!(settings.limits, Limits::default());
        assert!(settings.acp.is_none());
        assert!(!settings.team);
        assert_eq!(settings.durability, Durability::TurnBoundary);
    }

    #[test]
    fn every_bad_configuration_is_one_line_naming_the_file_and_key() {
        let cases = [
            "modle = \"demo\"",
            "model = 3",
            "model = \"gpt-4o\"",
            "model = \"nobody:x\"",
            "model = \"openai\"",
            "[limits]\nmax_depth = \"deep\"",
            "[limits]\nmax_depth = 0",
            "[limits]\nmax_live_children = -1",
            "[limits]\ndepth = 2",
            "[providers.local]\napi_key_env = \"K\"",
            "[providers.Local]\nbase_url = \"http://x\"",
            "[providers.local]\nbase_url = \"http://x\"\napi_key_env = \"A B\"",
            "[providers.local]\nbase_url = \"http://x\"\nkey = \"sk-1\"",
            "[acp]\nargs = []",
            "[acp]\ncommand = \"a\"\npermission = \"maybe\"",
            "[acp.agents.wait]\ncommand = \"a\"",
            "[acp.agents.Codex]\ncommand = \"a\"",
            "[acp.agents.codex]\nargs = []",
            "[acp.agents.codex]\ncommand = \"a\"\npass_env = [\"A B\"]",
            "[prices.gpt-4o]\ninput = -1.0\noutput = 1.0",
            "[prices.gpt-4o]\ninput = 1.0",
            "model = \"demo",
            "sandbox = \"yolo\"",
            "durability = \"fast\"",
            "[acp]\ncommand = \"a\"\nbogus = 1",
            "[acp.agents.codex]\ncommand = \"a\"\nbogus = 1",
            "[acp.agents.codex]\ncommand = \"a\"\nargs = 3",
        ];
        let lines: Vec<String> = cases
            .iter()
            .map(|text| {
                let err = settings(text, &Overrides::default()).unwrap_err();
                assert_eq!(err.lines().count(), 1, "{err}");
                assert!(err.starts_with("/cfg/dsh.toml: "), "{err}");
                format!("{text:?}\n  -> {err}")
            })
            .collect();
        insta::assert_snapshot!(lines.join("\n"));
    }

    #[test]
    fn a_zero_budget_and_a_cost_limit_without_prices_are_refused_naming_them() {
        let refused = |text: &str, overrides: &Overrides| {
            let file = Path::new("/cfg/dsh.toml");
            let settings =
                match parse(file, text).and_then(|parsed| resolve(Some(file), parsed, overrides)) {
                    Ok(settings) => settings,
                    Err(err) => return Some(format!("{err} (exit {})", err.exit_code())),
                };
            check_roles(&settings)
                .err()
                .map(|err| format!("{err} (exit {})", err.exit_code()))
        };
        let none = Overrides::default();
        let lines: Vec<String> = [
            ("[limits]\nmax_tokens = 0", none.clone()),
            ("[limits]\nmax_cost = 0.0", none.clone()),
            ("[limits]\nchild_token_budget = 0", none.clone()),
            ("[limits]\nchild_time_limit = 0", none.clone()),
            (
                "",
                Overrides {
                    max_tokens: Some(0),
                    ..none.clone()
                },
            ),
            (
                "",
                Overrides {
                    max_cost: Some(-1.0),
                    ..none.clone()
                },
            ),
            (
                "model = \"openai:gpt-4o\"\n[limits]\nmax_cost = 1.5",
                none.clone(),
            ),
            (
                "model = \"openai:gpt-4o\"",
                Overrides {
                    max_cost: Some(2.0),
                    ..none.clone()
                },
            ),
        ]
        .iter()
        .map(|(text, overrides)| {
            let err = refused(text, overrides).unwrap();
            assert!(err.ends_with("(exit 2)"), "{err}");
            format!("{text:?}\n  -> {err}")
        })
        .collect();
        insta::assert_snapshot!(lines.join("\n"));
        // With the price, or without a cost limit, it runs; the demo is free.
        assert_eq!(
            refused(
                "model = \"openai:gpt-4o\"\n[limits]\nmax_cost = 1.5\n[prices.gpt-4o]\ninput = 1.0\noutput = 2.0",
                &none
            ),
            None
        );
        assert_eq!(
            refused("model = \"openai:gpt-4o\"\n[limits]\nmax_tokens = 9", &none),
            None
        );
        assert_eq!(refused("[limits]\nmax_cost = 1.5", &none), None);
        let settings = settings(
            "[limits]\nmax_tokens = 9000\nchild_token_budget = 800\nchild_time_limit = 60",
            &Overrides {
                max_cost: Some(0.5),
                ..none
            },
        )
        .unwrap();
        assert_eq!(
            settings.budgets,
            Budgets {
                max_tokens: Some(9000),
                max_cost: Some(0.5),
                child_tokens: Some(800),
                child_time: Some(std::time::Duration::from_secs(60)),
            }
        );
    }

    #[test]
    fn a_roles_model_without_a_price_is_refused_under_a_cost_limit() {
        let file = Path::new("/cfg/dsh.toml");
        let text = "model = \"openai:gpt-4o\"\n[limits]\nmax_cost = 1.5\n[prices.gpt-4o]\ninput = 1.0\noutput = 2.0\n[agents.reviewer]\ndescription = \"r\"\nmodel = \"openai:o3\"\n";
        let mut parsed = parse(file, text).unwrap();
        let tables = std::mem::take(&mut parsed.agents);
        let mut settings = resolve(Some(file), parsed, &Overrides::default()).unwrap();
        settings.roles = crate::roles::load(file, tables, &[]).unwrap();
        let err = check_roles(&settings).unwrap_err().to_string();
        assert!(
            err.starts_with("/cfg/dsh.toml: prices.o3: missing"),
            "{err}"
        );
    }

    #[test]
    fn the_search_looks_in_the_working_directory_first() {
        let paths = search_path(Path::new("/work/here"));
        assert_eq!(paths.first(), Some(&PathBuf::from("/work/here/dsh.toml")));
    }
}
