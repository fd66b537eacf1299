//! Wiring one process's agent world: the JSONL store, the harness over it
//! with the chosen model, the subagent runtime over the harness, the `spawn`
//! and `fork` providers, and the host tools every agent gets (the
//! `subagent` tool for spawn, the `fork` tool for fork, and the five control
//! tools) and, for the commands that run agents, the workspace tools over
//! the working directory under the `--sandbox` level; plus, when an ACP agent command is configured, the `acp` provider
//! and its `acp` tool, and for each named ACP agent its provider and the
//! tool of its name ([`World::add_acp`]); and, for a team run (`--team`),
//! the ten team tools over a [`TeamDirectory`], which replace the three
//! control tools of the same names (`send_message`, `list_agents`,
//! `interrupt_agent`: one registry holds one tool, and one compiled schema,
//! per name); each tool is wrapped for the reporter when there is one; and
//! the tree's MCP servers and their `mcp__<server>__<tool>` tools
//! ([`World::start_mcp`], stopped by [`World::shutdown`]). This
//! module only assembles; it starts no agent (a team is opened for a lead
//! the command created or resumed, [`World::open_team`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use dsh_agent_team::{Recovery, Role, Team, TeamConfig, TeamId};
use dsh_core::{
    Agent, AgentOptions, AgentSetup, Model, Preset, PresetCatalog, SessionId, SessionStore, Tool,
};
use dsh_harness::{Harness, SystemPrompt};
use dsh_subagent::{RuntimeConfig, SubagentRuntime};
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_tool_agent_team::{SHARED_WITH_CONTROL, TeamDirectory, TeamTool, policy_for};
use dsh_tool_subagent::{SubagentRoles, SubagentTool, SubagentToolConfig};
use dsh_tool_subagent_control::ControlTools;
use dsh_tool_workspace::{Level, Policy, WorkspaceTools};

use crate::acp::{self, AcpConfig};
use crate::config::{Budgets, Limits};
use crate::error::CliError;
use crate::model::ModelChoice;
use crate::observe::{Observed, Reporter};
use crate::roles::{AgentRole, RunFacts};

/// The system prompt every agent shares.
pub(crate) const SYSTEM_PROMPT: &str = "You are an agent in dsh, a harness in which agents delegate work to subagents. \
Use the `subagent` tool to start a fresh subagent with a self-contained task, and the `fork` tool to start one that \
shares this conversation. Background subagents report back with a settlement notice in your inbox: call `wait` \
when you have nothing else to do, `list_agents` to recall names, and `send_message` to talk to an agent by name. \
Answer concisely.";

/// The system prompt's section for a team run, which every agent shares
/// (the harness has no per-agent section; each tool is offered only to the
/// agents it is for).
const TEAM_PROMPT: &str = "This run has an agent team: the root is `lead`, and teammates are named agents the lead \
creates with `spawn_teammate`. Team members coordinate through the shared task board (`team_task_create`, \
`team_task_list`, `team_task_get`, `team_task_update` with the task's latest revision; write scopes warn about \
overlaps and lock nothing) and through messages by member name: `send_message` adds context quietly, \
`followup_task` becomes the target's next turn. `list_agents` shows the roster, `wait_agent` waits for the \
team to change, and `wait` for your own inbox. Only the lead spawns, reassigns and interrupts.";

/// The prompt variable that holds the lead's team policy section.
const TEAM_POLICY_VAR: &str = "team_policy";

/// The assembled world.
pub struct World {
    /// The session store.
    pub store: Arc<dyn SessionStore>,
    /// The agent factory.
    pub harness: Harness,
    /// The subagent runtime over the harness.
    pub runtime: SubagentRuntime,
    /// The teams the team tools act on, in a team run.
    pub teams: Option<TeamDirectory>,
    /// The tree's MCP servers, once started; dropping them SIGKILLs their
    /// process groups.
    mcp: std::sync::Mutex<Option<Arc<dsh_mcp::McpServers>>>,
}

pub(crate) fn install_error(err: impl std::fmt::Display) -> CliError {
    CliError::Refused(format!("cannot install the tools: {err}"))
}

/// What a world is built from.
pub struct WorldConfig<'a> {
    /// The session store.
    pub store: Arc<dyn SessionStore>,
    /// The model every agent uses.
    pub model: Arc<dyn Model>,
    /// Hears every tool call and, when it wants them, the streamed text.
    pub reporter: Option<&'a Arc<Reporter>>,
    /// The `acp` provider and its tool.
    pub acp: Option<AcpConfig>,
    /// The tree's bounds (live children, depth) and every turn's (steps).
    pub limits: Limits,
    /// The six workspace tools over this root, under this policy (its
    /// level, and who asks above it).
    pub workspace: Option<(&'a std::path::Path, Policy)>,
    /// The ten team tools in place of the three control tools they share
    /// names with.
    pub team: bool,
    /// The agent roles the `subagent` tool offers, checked here against
    /// the tools that exist, `model` and `sandbox`.
    pub roles: &'a BTreeMap<String, AgentRole>,
    /// The run's model (a role's route must be its provider's).
    pub model_choice: &'a ModelChoice,
    /// The run's sandbox level (a role can only narrow it).
    pub sandbox: Level,
    /// A child's default budget and time limit, and the tree's tokens as
    /// the largest budget one child may get.
    pub budgets: Budgets,
}

impl World {
    /// Build the world `config` describes.
    pub fn build(config: WorldConfig<'_>) -> Result<Self, CliError> {
        let WorldConfig {
            store,
            model,
            reporter,
            acp,
            limits,
            workspace,
            team,
            roles,
            model_choice,
            sandbox,
            budgets,
        } = config;
        let mut prompt = SystemPrompt::new().section("role", SYSTEM_PROMPT);
        if team {
            // The lead's own policy comes with its setup (`lead_setup`);
            // the runtime creates teammates with none, so theirs is empty.
            prompt = prompt
                .section("team", TEAM_PROMPT)
                .section("team_policy", format!("{{{{{TEAM_POLICY_VAR}}}}}"))
                .var(TEAM_POLICY_VAR, "");
        }
        let mut builder = Harness::builder(store.clone());
        if let Some(reporter) = reporter.filter(|r| r.wants().deltas) {
            builder = builder.text_observer(reporter.clone());
        }
        // Each role is a preset of its name, so a role child's header
        // records its role (`composition.preset`). The preset is only that
        // name: the header records the role's instructions, tools and route
        // in full, so a role child whose role was removed since still
        // resumes (an open-ended catalog takes its name as an empty preset).
        let presets = roles
            .keys()
            .fold(PresetCatalog::new().open_ended(), |presets, name| {
                presets.with(Preset {
                    id: name.clone(),
                    persona: None,
                    tools: None,
                    options: AgentOptions::default(),
                })
            });
        let checked_prompt = prompt.clone();
        let harness = builder
            .model(model)
            .presets(presets)
            .prompt(prompt)
            .defaults(AgentOptions {
                max_turn_steps: limits.max_turn_steps,
                ..AgentOptions::default()
            })
            .build()
            .map_err(install_error)?;
        let runtime = SubagentRuntime::new(
            Arc::new(harness.clone()),
            store.clone(),
            RuntimeConfig {
                max_live_children_per_tree: limits.max_live_children,
            },
        );
        // The user's depth setting, which the spawn and fork tools follow.
        runtime.set_max_depth(limits.max_depth);
        runtime.register(Arc::new(SpawnProvider::new()))?;
        runtime.register(Arc::new(ForkProvider::new()))?;
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        if let Some(acp) = acp {
            tools.push(acp::tool(&runtime, acp)?);
        }
        let teams = team.then(TeamDirectory::new);
        match &teams {
            Some(directory) => {
                tools.extend(
                    ControlTools::new(runtime.clone())
                        .into_iter()
                        .filter(|tool| !SHARED_WITH_CONTROL.contains(&tool.name())),
                );
                tools.extend(TeamTool::all(directory));
            }
            None => tools.extend(ControlTools::new(runtime.clone())),
        }
        tools.push(Arc::new(dsh_tool_subagent::SurveyTool::new(
            runtime.clone(),
        )));
        if let Some((root, policy)) = workspace {
            // With no asker, an action above the level is refused with a
            // sentence the model can act on.
            let workspace = WorkspaceTools::new(root, policy)
                .map_err(|err| CliError::Refused(format!("cannot use the workspace: {err}")))?;
            tools.extend(workspace);
        }
        let spawn = SubagentToolConfig {
            budget: budgets.child_policy(),
            ..SubagentToolConfig::new("spawn")
        };
        let fork = SubagentToolConfig {
            tool_name: "fork".to_owned(),
            budget: budgets.child_policy(),
            ..SubagentToolConfig::new("fork")
        };
        let names: BTreeSet<String> = tools
            .iter()
            .map(|tool| tool.name().to_owned())
            .chain([spawn.tool_name.clone(), fork.tool_name.clone()])
            .collect();
        let spawn = SubagentToolConfig {
            roles: checked_roles(roles, &names, model_choice, sandbox, &checked_prompt)?,
            ..spawn
        };
        // The delegation tools first, as they always were.
        let delegation = [spawn, fork]
            .into_iter()
            .map(|config| SubagentTool::install(&runtime, config).map(|tool| tool as Arc<dyn Tool>))
            .collect::<Result<Vec<_>, _>>()
            .map_err(install_error)?;
        tools.splice(0..0, delegation);
        for tool in tools {
            let tool = match reporter {
                Some(reporter) => Observed::wrap(tool, reporter),
                None => tool,
            };
            harness.add_tool(tool).map_err(install_error)?;
        }
        Ok(Self {
            store,
            harness,
            runtime,
            teams,
            mcp: std::sync::Mutex::new(None),
        })
    }

    /// What the lead `lead` is created or resumed with: in a team run, its
    /// team policy section (its role, name and team) for the prompt.
    pub fn lead_setup(&self, lead: &SessionId) -> AgentSetup {
        let mut setup = AgentSetup::default();
        if self.teams.is_some() {
            let team = TeamId(lead.clone());
            setup
                .vars
                .insert(TEAM_POLICY_VAR.to_owned(), policy_for(&team, &Role::Lead));
        }
        setup
    }

    /// In a team run, open the team `lead` leads (recovering what a
    /// crash left: provisioning members decided, queued messages
    /// delivered) and give it to the team tools; `None` otherwise.
    ///
    /// # Errors
    /// The team cannot be opened (the lead is not a live root, or a
    /// recovery record cannot be written).
    ///
    /// # Cancel safety
    /// Recovery runs on the team's own tasks: a drop leaves it running to
    /// completion, its records whole, and the team not in the directory.
    pub async fn open_team(&self, lead: &Arc<dyn Agent>) -> Result<Option<Recovery>, CliError> {
        let Some(directory) = &self.teams else {
            return Ok(None);
        };
        let (team, recovery) = Team::open(
            lead.clone(),
            self.runtime.clone(),
            self.store.clone(),
            TeamConfig::default(),
        )
        .await
        .map_err(|err| CliError::Refused(format!("cannot open the team: {err}")))?;
        directory.insert(team);
        Ok(Some(recovery))
    }

    /// Add an ACP agent: its provider (named as its configuration is) and
    /// the tool of that name, reporting to `reporter`.
    pub fn add_acp(
        &self,
        acp: AcpConfig,
        reporter: Option<&Arc<Reporter>>,
    ) -> Result<(), CliError> {
        let tool = acp::tool(&self.runtime, acp)?;
        let tool = match reporter {
            Some(reporter) => Observed::wrap(tool, reporter),
            None => tool,
        };
        self.harness.add_tool(tool).map_err(install_error)
    }

    /// Start the enabled MCP servers of `servers` (one set for the whole
    /// tree) and offer their tools to every agent, reporting to `reporter`.
    ///
    /// # Errors
    /// A server that does not start (its stderr's last lines in the
    /// message), or a tool whose name clashes with another.
    ///
    /// # Cancel safety
    /// A drop part-way leaves the servers started so far to be SIGKILLed
    /// when they are dropped (with the future).
    pub async fn start_mcp(
        &self,
        servers: Vec<dsh_mcp::McpServerConfig>,
        cwd: &std::path::Path,
        reporter: Option<&Arc<Reporter>>,
    ) -> Result<(), CliError> {
        if servers.iter().all(|server| !server.enabled) {
            return Ok(());
        }
        let servers = Arc::new(crate::mcp::server_set(servers, cwd)?);
        let tools = servers
            .tools()
            .await
            .map_err(|err| CliError::Refused(err.to_string()))?;
        let wrap = {
            let reporter = reporter.cloned();
            move |tool: Arc<dyn Tool>| match &reporter {
                Some(reporter) => Observed::wrap(tool, reporter),
                None => tool,
            }
        };
        for tool in tools {
            self.harness.add_tool(wrap(tool)).map_err(install_error)?;
        }
        // A tool a server adds later is offered to the agents created after.
        let harness = self.harness.clone();
        servers.on_new_tools(move |tool| {
            if let Err(err) = harness.add_tool(wrap(tool)) {
                tracing::warn!("a tool an MCP server added is not offered: {err}");
            }
        });
        *self
            .mcp
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(servers);
        Ok(())
    }

    /// Wait for the teams' own work (deliveries, releases), then stop
    /// every activation, then every agent, and wait for their tasks; then
    /// stop the MCP servers.
    ///
    /// # Cancel safety
    /// A drop part-way leaves the activations and agents not yet stopped
    /// live (every acknowledged write is already in its log); calling it again
    /// finishes the work.
    pub async fn shutdown(&self) {
        for team in self.teams.iter().flat_map(TeamDirectory::teams) {
            team.shutdown().await;
        }
        self.runtime.shutdown().await;
        self.harness.shutdown().await;
        let mcp = self
            .mcp
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(mcp) = mcp {
            mcp.shutdown().await;
        }
    }
}

/// The roles resolved against the tools that exist (`names`), the run's
/// model and sandbox, each one's instructions rendered with the system
/// prompt as a child's would be.
fn checked_roles(
    roles: &BTreeMap<String, AgentRole>,
    names: &BTreeSet<String>,
    model: &ModelChoice,
    sandbox: Level,
    prompt: &SystemPrompt,
) -> Result<SubagentRoles, CliError> {
    let run = RunFacts {
        model,
        sandbox,
        tools: names,
    };
    let resolved = crate::roles::resolve_all(roles, &run)?;
    for (name, role) in &resolved {
        if let (Some(persona), Some(source)) = (&role.persona, roles.get(name))
            && let Err(err) = prompt.render(Some(persona), &BTreeMap::new())
        {
            return Err(CliError::Config {
                file: source.source.clone(),
                key: format!("{}instructions", source.prefix),
                reason: format!("expected text the system prompt can hold: {err}"),
            });
        }
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use dsh_core::{AgentFactory, CancellationToken, CreateAgent, SessionHeader, UserMessage};
    use dsh_harness::{MemoryStore, Scripted, ScriptedModel};

    use super::*;

    /// What a root's model is shown: in a team run, the team section and,
    /// for a lead created with `lead_setup`, its own policy naming its
    /// team; outside one, neither. The team tools and the control tools
    /// install side by side without a clash.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_team_run_shows_the_lead_its_policy_and_the_team_section() {
        for team in [false, true] {
            let model = Arc::new(ScriptedModel::new());
            model.push(Scripted::Text("ok".into()));
            let world = World::build(WorldConfig {
                store: Arc::new(MemoryStore::new()),
                model: model.clone(),
                reporter: None,
                acp: None,
                limits: Limits::default(),
                workspace: None,
                team,
                roles: &BTreeMap::new(),
                model_choice: &ModelChoice::Demo,
                sandbox: Level::ReadOnly,
                budgets: Budgets::default(),
            })
            .unwrap();
            let id = SessionId::generate();
            let handle = world
                .harness
                .create(CreateAgent {
                    setup: world.lead_setup(&id),
                    header: SessionHeader::new(id.clone(), std::env::temp_dir()),
                    seed: Vec::new(),
                    cancel: CancellationToken::new(),
                })
                .await
                .unwrap();
            let opened = world.open_team(handle.agent()).await.unwrap();
            assert_eq!(opened.is_some(), team);
            handle
                .agent()
                .followup(UserMessage::user_text("hi"))
                .await
                .unwrap();
            handle.agent().wait_idle().await;
            let request = model.requests().remove(0);
            let policy = format!("You are `lead`, the lead of agent team `{id}`.");
            assert_eq!(request.system.contains(&policy), team, "{}", request.system);
            assert_eq!(request.system.contains("This run has an agent team"), team);
            let tools: Vec<&str> = request
                .tools
                .iter()
                .map(|tool| tool.name.as_str())
                .collect();
            assert_eq!(tools.contains(&"spawn_teammate"), team, "{tools:?}");
            assert!(tools.contains(&"send_message") && tools.contains(&"wait"));
            world.shutdown().await;
        }
    }
}
