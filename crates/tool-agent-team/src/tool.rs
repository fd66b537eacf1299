//! The one [`Tool`] type the host installs ten times: [`TeamTool`] of a
//! [`TeamToolKind`], which finds the caller's team, waits for a
//! provisioning teammate's `active` record, and hands the call to that
//! kind's file in [`crate::tools`].

use std::sync::Arc;

use async_trait::async_trait;
use dsh_agent_team::Team;
use dsh_core::{Agent, Tool, ToolContext, ToolError, ToolOutput};
use serde_json::Value;

use crate::TeamDirectory;
use crate::common::{Refusal, refusal_output, render};
use crate::tools::{
    followup_task, interrupt_agent, list_agents, send_message, spawn_teammate, team_task_create,
    team_task_get, team_task_list, team_task_update, wait_agent,
};

/// Which of the ten tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TeamToolKind {
    /// `spawn_teammate`
    SpawnTeammate,
    /// `send_message`
    SendMessage,
    /// `followup_task`
    FollowupTask,
    /// `list_agents`
    ListAgents,
    /// `wait_agent`
    WaitAgent,
    /// `interrupt_agent`
    InterruptAgent,
    /// `team_task_create`
    TaskCreate,
    /// `team_task_get`
    TaskGet,
    /// `team_task_list`
    TaskList,
    /// `team_task_update`
    TaskUpdate,
}

impl TeamToolKind {
    /// All ten, in catalogue order.
    pub const ALL: [Self; 10] = [
        Self::SpawnTeammate,
        Self::SendMessage,
        Self::FollowupTask,
        Self::ListAgents,
        Self::WaitAgent,
        Self::InterruptAgent,
        Self::TaskCreate,
        Self::TaskGet,
        Self::TaskList,
        Self::TaskUpdate,
    ];

    /// The tool's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::SpawnTeammate => "spawn_teammate",
            Self::SendMessage => "send_message",
            Self::FollowupTask => "followup_task",
            Self::ListAgents => "list_agents",
            Self::WaitAgent => "wait_agent",
            Self::InterruptAgent => "interrupt_agent",
            Self::TaskCreate => "team_task_create",
            Self::TaskGet => "team_task_get",
            Self::TaskList => "team_task_list",
            Self::TaskUpdate => "team_task_update",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Self::SpawnTeammate => spawn_teammate::DESCRIPTION,
            Self::SendMessage => send_message::DESCRIPTION,
            Self::FollowupTask => followup_task::DESCRIPTION,
            Self::ListAgents => list_agents::DESCRIPTION,
            Self::WaitAgent => wait_agent::DESCRIPTION,
            Self::InterruptAgent => interrupt_agent::DESCRIPTION,
            Self::TaskCreate => team_task_create::DESCRIPTION,
            Self::TaskGet => team_task_get::DESCRIPTION,
            Self::TaskList => team_task_list::DESCRIPTION,
            Self::TaskUpdate => team_task_update::DESCRIPTION,
        }
    }

    fn schema(self) -> Value {
        match self {
            Self::SpawnTeammate => spawn_teammate::schema(),
            Self::SendMessage => send_message::schema(),
            Self::FollowupTask => followup_task::schema(),
            Self::ListAgents => list_agents::schema(),
            Self::WaitAgent => wait_agent::schema(),
            Self::InterruptAgent => interrupt_agent::schema(),
            Self::TaskCreate => team_task_create::schema(),
            Self::TaskGet => team_task_get::schema(),
            Self::TaskList => team_task_list::schema(),
            Self::TaskUpdate => team_task_update::schema(),
        }
    }
}

/// One team tool.
#[derive(Debug, Clone)]
pub struct TeamTool {
    kind: TeamToolKind,
    directory: TeamDirectory,
}

impl TeamTool {
    /// The tool `kind`, acting on the teams of `directory`.
    pub fn new(kind: TeamToolKind, directory: TeamDirectory) -> Self {
        Self { kind, directory }
    }

    /// All ten tools over `directory`.
    pub fn all(directory: &TeamDirectory) -> Vec<Arc<dyn Tool>> {
        TeamToolKind::ALL
            .into_iter()
            .map(|kind| Arc::new(Self::new(kind, directory.clone())) as Arc<dyn Tool>)
            .collect()
    }
}

impl TeamTool {
    async fn run(
        &self,
        team: &Team,
        caller: &Arc<dyn Agent>,
        input: Value,
        ctx: &ToolContext,
    ) -> Result<Value, Refusal> {
        match self.kind {
            TeamToolKind::SpawnTeammate => spawn_teammate::run(team, caller, input).await,
            TeamToolKind::SendMessage => send_message::run(team, caller, input).await,
            TeamToolKind::FollowupTask => followup_task::run(team, caller, input).await,
            TeamToolKind::ListAgents => list_agents::run(team, caller, input),
            TeamToolKind::WaitAgent => wait_agent::run(team, caller, input, ctx).await,
            TeamToolKind::InterruptAgent => interrupt_agent::run(team, caller, input).await,
            TeamToolKind::TaskCreate => team_task_create::run(team, caller, input).await,
            TeamToolKind::TaskGet => team_task_get::run(team, caller, input),
            TeamToolKind::TaskList => team_task_list::run(team, caller, input),
            TeamToolKind::TaskUpdate => team_task_update::run(team, caller, input).await,
        }
    }
}

#[async_trait]
impl Tool for TeamTool {
    fn name(&self) -> &str {
        self.kind.name()
    }

    fn description(&self) -> String {
        self.kind.description().to_owned()
    }

    fn input_schema(&self) -> Value {
        self.kind.schema()
    }

    fn offered_to(&self, agent: &dyn Agent) -> bool {
        self.directory.membership(agent).is_some()
    }

    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let Some((team, _)) = self.directory.membership(ctx.agent.as_ref()) else {
            return Ok(ToolOutput::error(format!(
                "TEAM_NOT_A_MEMBER: `{}` is not a member of an agent team",
                ctx.agent.id()
            )));
        };
        // A teammate's first step may run before its `active` record.
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => {
                return Ok(ToolOutput::error("CANCELLED: the call was cancelled"));
            }
            () = team.provisioned(ctx.agent.id()) => {}
        }
        let caller = ctx.agent.clone();
        Ok(match self.run(&team, &caller, input, &ctx).await {
            Ok(value) => render(&value),
            Err(refusal) => refusal_output(refusal),
        })
    }
}
