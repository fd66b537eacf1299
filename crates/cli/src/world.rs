//! Wiring one process's agent world: the JSONL store, the harness over it
//! with the chosen model, the subagent runtime over the harness, the `spawn`
//! and `fork` providers, and the host tools every agent gets (the
//! `subagent` tool for spawn, the `fork` tool for fork, and the five control
//! tools) and, for the commands that run agents, the workspace tools over
//! the working directory under the `--sandbox` level; plus, when an ACP agent command is configured, the `acp` provider
//! and its `acp` tool; each tool is wrapped for the reporter when there is
//! one. This module only assembles; it starts no agent.

use std::sync::Arc;

use dsh_core::{AgentOptions, Model, SessionStore, Tool};
use dsh_harness::{Harness, SystemPrompt};
use dsh_subagent::{RuntimeConfig, SubagentRuntime};
use dsh_subagent_acp::{AcpConfig, AcpProvider};
use dsh_subagent_fork::ForkProvider;
use dsh_subagent_spawn::SpawnProvider;
use dsh_tool_subagent::{MaxDepth, SubagentTool, SubagentToolConfig};
use dsh_tool_subagent_control::ControlTools;
use dsh_tool_workspace::{Level, Policy, WorkspaceTools};

use crate::config::Limits;
use crate::error::CliError;
use crate::observe::{Observed, Reporter};

/// The system prompt every agent shares.
const SYSTEM_PROMPT: &str = "You are an agent in dsh, a harness in which agents delegate work to subagents. \
Use the `subagent` tool to start a fresh subagent with a self-contained task, and the `fork` tool to start one that \
shares this conversation. Background subagents report back with a settlement notice in your inbox: call `wait` \
when you have nothing else to do, `list_agents` to recall names, and `send_message` to talk to an agent by name. \
Answer concisely.";

/// The assembled world.
pub struct World {
    /// The session store.
    pub store: Arc<dyn SessionStore>,
    /// The agent factory.
    pub harness: Harness,
    /// The subagent runtime over the harness.
    pub runtime: SubagentRuntime,
}

fn install_error(err: impl std::fmt::Display) -> CliError {
    CliError::Refused(format!("cannot install the tools: {err}"))
}

impl World {
    /// Build the world over `store` with `model`; tools report to `reporter`;
    /// `acp`, when given, adds the `acp` provider and its tool; `limits`
    /// bound the tree (live children, depth) and every turn (steps);
    /// `workspace`, when given, adds the six workspace tools over that root
    /// at that level.
    pub fn build(
        store: Arc<dyn SessionStore>,
        model: Arc<dyn Model>,
        reporter: Option<&Arc<Reporter>>,
        acp: Option<AcpConfig>,
        limits: Limits,
        workspace: Option<(&std::path::Path, Level)>,
    ) -> Result<Self, CliError> {
        let harness = Harness::builder(store.clone())
            .model(model)
            .prompt(SystemPrompt::new().section("role", SYSTEM_PROMPT))
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
        runtime.register(Arc::new(SpawnProvider::new()))?;
        runtime.register(Arc::new(ForkProvider::new()))?;
        let spawn = SubagentToolConfig {
            max_depth: MaxDepth::Limit(limits.max_depth),
            ..SubagentToolConfig::new("spawn")
        };
        let fork = SubagentToolConfig {
            tool_name: "fork".to_owned(),
            max_depth: MaxDepth::Limit(limits.max_depth),
            ..SubagentToolConfig::new("fork")
        };
        let mut configs = vec![spawn, fork];
        if let Some(acp) = acp {
            let provider = AcpProvider::new(acp).map_err(install_error)?;
            runtime.register(Arc::new(provider))?;
            // An external agent manages its own recursion: no depth flag.
            configs.push(SubagentToolConfig {
                tool_name: "acp".to_owned(),
                max_depth: MaxDepth::ProviderManaged,
                ..SubagentToolConfig::new("acp")
            });
        }
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        for config in configs {
            tools.push(SubagentTool::install(&runtime, config).map_err(install_error)?);
        }
        tools.extend(ControlTools::new(runtime.clone()));
        tools.push(Arc::new(dsh_tool_subagent::SurveyTool::new(
            runtime.clone(),
        )));
        if let Some((root, level)) = workspace {
            // No asker: an action above the level is refused with a
            // sentence the model can act on.
            let workspace = WorkspaceTools::new(root, Policy::new(level, None))
                .map_err(|err| CliError::Refused(format!("cannot use the workspace: {err}")))?;
            tools.extend(workspace);
        }
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
        })
    }

    /// Stop every activation, then every agent, and wait for their tasks.
    ///
    /// # Cancel safety
    /// A drop part-way leaves the activations and agents not yet stopped
    /// live (every acknowledged write is already in its log); calling it again
    /// finishes the work.
    pub async fn shutdown(&self) {
        self.runtime.shutdown().await;
        self.harness.shutdown().await;
    }
}
