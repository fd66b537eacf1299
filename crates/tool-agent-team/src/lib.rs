#![doc = include_str!("../README.md")]

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use dsh_agent_team::{
    CreateTask, DeliveryMode, MemberContext, MemberView, Role, SendMessage, SendOutcome,
    SpawnTeammate, TaskAction, TaskView, Team, TeamError, UpdateTask, WaitOutcome,
};
use dsh_core::{Agent, ContentBlock, Tool, ToolContext, ToolError, ToolOutput};
use serde::Deserialize;
use serde_json::{Value, json};

/// The default `wait_agent` bound, in milliseconds.
pub const DEFAULT_WAIT_MS: u64 = 30_000;

/// The team tool names that `dsh-tool-subagent-control` uses too. One
/// harness registry holds one tool per name (its schema compiled once), so
/// a host that installs the team tools leaves these three control tools
/// out: the team set replaces them.
pub const SHARED_WITH_CONTROL: [&str; 3] = ["send_message", "list_agents", "interrupt_agent"];

/// The teams the tools act on: one per lead the host opened.
#[derive(Debug, Clone, Default)]
pub struct TeamDirectory {
    teams: Arc<Mutex<Vec<Team>>>,
}

impl TeamDirectory {
    /// An empty directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a team (replacing one of the same lead).
    pub fn insert(&self, team: Team) {
        let mut teams = self.teams.lock().unwrap_or_else(PoisonError::into_inner);
        teams.retain(|known| known.id() != team.id());
        teams.push(team);
    }

    /// Remove the team of `lead`; whether there was one.
    pub fn remove(&self, lead: &dsh_core::SessionId) -> bool {
        let mut teams = self.teams.lock().unwrap_or_else(PoisonError::into_inner);
        let before = teams.len();
        teams.retain(|team| &team.id().0 != lead);
        teams.len() != before
    }

    /// Every team in the directory, in insertion order.
    pub fn teams(&self) -> Vec<Team> {
        self.teams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The team `agent`'s session belongs to, and its role there.
    pub fn membership(&self, agent: &dyn Agent) -> Option<(Team, Role)> {
        let teams = self.teams.lock().unwrap_or_else(PoisonError::into_inner);
        teams.iter().find_map(|team| {
            team.role_of_session(agent.id())
                .map(|role| (team.clone(), role))
        })
    }
}

/// The stable policy section of a member's system prompt: its role, name
/// and team, and the rules of working together.
pub fn policy_section(team: &Team, role: &Role) -> String {
    policy_for(&team.id(), role)
}

/// [`policy_section`] for the team `team` before it is open (a host
/// renders the lead's prompt before the lead, and so its team, exists).
pub fn policy_for(team: &dsh_agent_team::TeamId, role: &Role) -> String {
    let identity = match role {
        Role::Lead => format!("You are `lead`, the lead of agent team `{team}`."),
        Role::Member(name) => {
            format!("You are `{name}`, a teammate in agent team `{team}`; `lead` leads it.")
        }
    };
    let duties = match role {
        Role::Lead => {
            "Create teammates (spawn_teammate) only when the user asks for a team or \
            teammates. Only you spawn, assign (team_task_update reassign) and interrupt. Before \
            you answer the user, wait (wait_agent) until the work you delegated is done."
        }
        Role::Member(_) => {
            "Work on the task you were given and the tasks you claim; report to \
            `lead` with send_message or followup_task. You cannot spawn, assign or interrupt."
        }
    };
    format!(
        "# Agent team\n{identity}\n{duties}\nEvery member shares one working directory: a file \
         may change under you, so re-read before you edit and coordinate through the task board \
         (team_task_*) and its write scopes, which warn about overlaps but lock nothing; shell \
         commands, formatters and generators can write anywhere. send_message adds context \
         quietly and never wakes an idle member; followup_task becomes the target's next turn. \
         A message reported `queued` is accepted for good: never send it again. Task changes \
         need the latest revision (team_task_get or team_task_list)."
    )
}

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
            Self::SpawnTeammate => {
                "Create one named, durable teammate with its first task. Only the team lead may \
                 call this tool."
            }
            Self::SendMessage => {
                "Send durable information to another team member without starting an idle \
                 member: a live member sees it at its next step, an inactive one when it next \
                 wakes."
            }
            Self::FollowupTask => {
                "Send a durable follow-up task to another team member; it becomes the member's \
                 next turn, resuming it when it is inactive."
            }
            Self::ListAgents => {
                "List the lead and every teammate with its phase, live status (running, idle, \
                 inactive), pending messages and owned tasks."
            }
            Self::WaitAgent => {
                "Wait for the next teammate status, mailbox or task change after this call \
                 starts. It never wakes inactive members and returns no_progress at once when no \
                 other member is running or provisioning. Re-list after it returns instead of \
                 polling."
            }
            Self::InterruptAgent => {
                "Interrupt one teammate's current turn; its pending messages and its tasks are \
                 kept. Team lead only."
            }
            Self::TaskCreate => "Create one unowned pending task on the shared task board.",
            Self::TaskGet => {
                "Read the complete latest value of one shared task (deleted ones included) \
                 before changing or executing it."
            }
            Self::TaskList => {
                "List the shared tasks that are not deleted, with readiness, owner, revision, \
                 blockers and write-scope warnings."
            }
            Self::TaskUpdate => {
                "Compare-and-set one task change using the latest revision from team_task_get \
                 or team_task_list. The owner or the lead may edit, release, complete, reopen \
                 or delete; any member may claim a ready unowned task; only the lead reassigns."
            }
        }
    }

    fn schema(self) -> Value {
        let string = |description: &str| json!({"type": "string", "description": description});
        let strings = |description: &str| json!({"type": "array", "description": description, "items": {"type": "string"}});
        let object = |properties: Value, required: &[&str]| {
            json!({
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            })
        };
        let message = || {
            object(
                json!({
                    "target": string("Team member name, or lead."),
                    "message": string("Self-contained message for the target."),
                }),
                &["target", "message"],
            )
        };
        match self {
            Self::SpawnTeammate => object(
                json!({
                    "name": string("Unique lowercase kebab-case teammate name, at most 64 characters; never reused."),
                    "description": string("Short description of the delegated responsibility."),
                    "prompt": string("Complete initial task for the teammate."),
                    "context": {
                        "type": "string",
                        "enum": ["fresh", "fork"],
                        "description": "fresh starts without the lead's history; fork inherits the lead's completed turns. Defaults to fresh.",
                    },
                    "worktree": {
                        "type": "boolean",
                        "description": "Give the teammate its own git worktree, on a branch of the lead's repository, as its working directory. Defaults to false.",
                    },
                }),
                &["name", "description", "prompt"],
            ),
            Self::SendMessage | Self::FollowupTask => message(),
            Self::ListAgents => object(json!({}), &[]),
            Self::WaitAgent => object(
                json!({
                    "timeout_ms": {
                        "type": "integer",
                        "description": "Wait bound in milliseconds, from 10000 through 3600000. Defaults to 30000.",
                    },
                }),
                &[],
            ),
            Self::InterruptAgent => {
                object(json!({"target": string("Teammate name.")}), &["target"])
            }
            Self::TaskCreate => object(
                json!({
                    "subject": string("Concise task title."),
                    "description": string("Complete task details and acceptance criteria."),
                    "blocked_by": strings("Task ids that must complete first."),
                    "write_scopes": strings("Advisory workspace-relative file or directory prefixes this task expects to modify."),
                }),
                &["subject", "description"],
            ),
            Self::TaskGet => object(
                json!({"task_id": string("Shared task id (task-<n>).")}),
                &["task_id"],
            ),
            Self::TaskList => object(
                json!({
                    "status": {
                        "type": "string",
                        "enum": ["pending", "in_progress", "completed"],
                        "description": "Optional exact status filter.",
                    },
                    "owner": string("Optional member-name filter; unowned for tasks without an owner."),
                    "ready": {"type": "boolean", "description": "Optional readiness filter."},
                }),
                &[],
            ),
            Self::TaskUpdate => object(
                json!({
                    "task_id": string("Shared task id (task-<n>)."),
                    "expected_revision": {
                        "type": "integer",
                        "description": "The task's current revision: the compare-and-set precondition.",
                    },
                    "action": {
                        "type": "string",
                        "enum": ["claim", "release", "edit", "set_dependencies", "complete", "reopen", "reassign", "delete"],
                        "description": "The change to make.",
                    },
                    "subject": string("Replacement title, for edit."),
                    "description": string("Replacement details, for edit."),
                    "blocked_by": strings("The complete blocker list, for set_dependencies."),
                    "write_scopes": strings("Replacement advisory write scopes, for edit."),
                    "owner": string("Member name, for the lead-only reassign; omit to unassign."),
                }),
                &["task_id", "expected_revision", "action"],
            ),
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpawnInput {
    name: String,
    description: String,
    prompt: String,
    #[serde(default)]
    context: Option<String>,
    #[serde(default)]
    worktree: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageInput {
    target: String,
    message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitInput {
    #[serde(default)]
    timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TargetInput {
    target: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateInput {
    subject: String,
    description: String,
    #[serde(default)]
    blocked_by: Vec<String>,
    #[serde(default)]
    write_scopes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetInput {
    task_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListInput {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    owner: Option<String>,
    #[serde(default)]
    ready: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateInput {
    task_id: String,
    expected_revision: u64,
    action: String,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    blocked_by: Option<Vec<String>>,
    #[serde(default)]
    write_scopes: Option<Vec<String>>,
    #[serde(default)]
    owner: Option<String>,
}

/// Why a call produced an error result.
enum Refusal {
    Input(String),
    Team(TeamError),
}

impl From<TeamError> for Refusal {
    fn from(err: TeamError) -> Self {
        Self::Team(err)
    }
}

fn parse<T: for<'de> Deserialize<'de>>(input: Value) -> Result<T, Refusal> {
    serde_json::from_value(input).map_err(|err| Refusal::Input(err.to_string()))
}

fn render(value: &Value) -> ToolOutput {
    ToolOutput::text(serde_json::to_string_pretty(value).unwrap_or_default())
}

/// A roster row as the model sees it.
pub fn member_json(row: &MemberView) -> Value {
    let mut value = json!({
        "name": row.name,
        "phase": row.phase.as_str(),
        "status": row.status.as_str(),
        "description": row.description,
        "pending_messages": row.pending_messages,
        "owned_tasks": row.owned_tasks,
    });
    if let Some(error) = &row.error {
        value["error"] = json!(error);
    }
    value
}

/// A task as the model sees it.
pub fn task_json(view: &TaskView) -> Value {
    let task = &view.task;
    json!({
        "id": task.id,
        "revision": task.revision,
        "subject": task.subject,
        "description": task.description,
        "status": task.status.as_str(),
        "owner": task.owner,
        "blocked_by": task.blocked_by,
        "write_scopes": task.write_scopes,
        "ready": view.ready,
        "warnings": view.warnings,
        "note": task.note,
    })
}

/// A send receipt as the model sees it.
pub fn receipt_json(target: &str, outcome: &SendOutcome) -> Value {
    json!({
        "message_id": outcome.id.as_str(),
        "target": target,
        "status": if outcome.delivered { "delivered" } else { "queued" },
        "note": if outcome.delivered {
            "The target holds the message."
        } else {
            "Accepted durably; it reaches the target when it next runs. Do not send it again."
        },
    })
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
            TeamToolKind::SpawnTeammate => {
                let input: SpawnInput = parse(input)?;
                let context = match input.context.as_deref() {
                    None | Some("fresh") => MemberContext::Fresh,
                    Some("fork") => MemberContext::Fork,
                    Some(other) => {
                        return Err(Refusal::Input(format!(
                            "context is fresh or fork, not `{other}`"
                        )));
                    }
                };
                let row = team
                    .spawn_teammate(
                        caller,
                        SpawnTeammate {
                            name: input.name,
                            description: input.description,
                            prompt: vec![ContentBlock::text(input.prompt)],
                            context,
                            worktree: input.worktree,
                        },
                    )
                    .await?;
                Ok(json!({"spawned": member_json(&row)}))
            }
            TeamToolKind::SendMessage | TeamToolKind::FollowupTask => {
                let input: MessageInput = parse(input)?;
                let delivery = if self.kind == TeamToolKind::SendMessage {
                    DeliveryMode::Quiet
                } else {
                    DeliveryMode::Wakeup
                };
                let outcome = team
                    .send_message(
                        caller,
                        SendMessage {
                            to: input.target.clone(),
                            content: vec![ContentBlock::text(input.message)],
                            delivery,
                        },
                    )
                    .await?;
                Ok(receipt_json(&input.target, &outcome))
            }
            TeamToolKind::ListAgents => {
                let _: Empty = parse(input)?;
                let rows = team.list_members(caller)?;
                let you = team.role_of(caller)?;
                Ok(json!({
                    "team": team.id().to_string(),
                    "you": you.name(),
                    "members": rows.iter().map(member_json).collect::<Vec<_>>(),
                }))
            }
            TeamToolKind::WaitAgent => {
                let input: WaitInput = parse(input)?;
                let timeout = Duration::from_millis(input.timeout_ms.unwrap_or(DEFAULT_WAIT_MS));
                let outcome = team.wait_for_progress(caller, timeout, &ctx.cancel).await?;
                Ok(match outcome {
                    WaitOutcome::NoProgress => json!({
                        "outcome": "no_progress",
                        "note": "No other member is running or provisioning, so nothing will change by waiting. Re-list with list_agents and give an inactive member work with followup_task.",
                    }),
                    WaitOutcome::Changed | WaitOutcome::TimedOut => json!({
                        "outcome": if outcome == WaitOutcome::Changed { "changed" } else { "timed_out" },
                        "note": "Earlier changes are not replayed: re-read with list_agents or team_task_list.",
                    }),
                })
            }
            TeamToolKind::InterruptAgent => {
                let input: TargetInput = parse(input)?;
                let previous = team.interrupt(caller, &input.target).await?;
                Ok(json!({"target": input.target, "previous_status": previous.as_str()}))
            }
            TeamToolKind::TaskCreate => {
                let input: CreateInput = parse(input)?;
                let view = team
                    .create_task(
                        caller,
                        CreateTask {
                            subject: input.subject,
                            description: input.description,
                            blocked_by: input.blocked_by,
                            write_scopes: input.write_scopes,
                        },
                    )
                    .await?;
                Ok(json!({"task": task_json(&view)}))
            }
            TeamToolKind::TaskGet => {
                let input: GetInput = parse(input)?;
                Ok(json!({"task": task_json(&team.get_task(caller, &input.task_id)?)}))
            }
            TeamToolKind::TaskList => {
                let input: ListInput = parse(input)?;
                let tasks: Vec<Value> =
                    team.list_tasks(caller)?
                        .iter()
                        .filter(|view| {
                            input
                                .status
                                .as_deref()
                                .is_none_or(|status| view.task.status.as_str() == status)
                                && input.owner.as_deref().is_none_or(|owner| {
                                    match &view.task.owner {
                                        Some(name) => name == owner,
                                        None => owner == "unowned",
                                    }
                                })
                                && input.ready.is_none_or(|ready| view.ready == ready)
                        })
                        .map(task_json)
                        .collect();
                Ok(json!({"tasks": tasks}))
            }
            TeamToolKind::TaskUpdate => {
                let input: UpdateInput = parse(input)?;
                let action = match input.action.as_str() {
                    "claim" => TaskAction::Claim,
                    "release" => TaskAction::Release,
                    "edit" => TaskAction::Edit {
                        subject: input.subject,
                        description: input.description,
                        blocked_by: None,
                        write_scopes: input.write_scopes,
                    },
                    "set_dependencies" => TaskAction::Edit {
                        subject: None,
                        description: None,
                        blocked_by: Some(input.blocked_by.unwrap_or_default()),
                        write_scopes: None,
                    },
                    "complete" => TaskAction::Complete,
                    "reopen" => TaskAction::Reopen,
                    "reassign" => match input.owner {
                        Some(owner) => TaskAction::Assign { owner },
                        None => TaskAction::Release,
                    },
                    "delete" => TaskAction::Delete,
                    other => return Err(Refusal::Input(format!("unknown action `{other}`"))),
                };
                if input.action == "reassign" && !team.role_of(caller)?.is_lead() {
                    return Err(
                        TeamError::Unauthorized("only the lead reassigns tasks".into()).into(),
                    );
                }
                let view = team
                    .update_task(
                        caller,
                        UpdateTask {
                            id: input.task_id,
                            expected_revision: input.expected_revision,
                            action,
                        },
                    )
                    .await?;
                Ok(json!({"task": task_json(&view)}))
            }
        }
    }
}

/// The error result for a refusal: its stable code, then the sentence.
fn refusal_output(refusal: Refusal) -> ToolOutput {
    match refusal {
        Refusal::Input(reason) => ToolOutput::error(format!("TEAM_INVALID_INPUT: {reason}")),
        Refusal::Team(err @ TeamError::StaleRevision { .. }) => ToolOutput::error(format!(
            "{}: {err}. Read the task again (team_task_get) and retry with its current revision.",
            err.code()
        )),
        Refusal::Team(err) => ToolOutput::error(format!("{}: {err}", err.code())),
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
