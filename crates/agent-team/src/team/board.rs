//! The task board: a graph of tasks, each changed only by a
//! compare-and-set on its revision. Every change writes a whole new
//! snapshot of the task (revision + 1); a deletion is a tombstone.
//! Claiming needs a ready (pending, unblocked, unowned) task; only the
//! lead assigns; a failed or stopped owner's in-progress tasks are given
//! back with a durable note.

use std::sync::Arc;

use dsh_core::Agent;

use super::Team;
use crate::error::TeamError;
use crate::fold::TeamState;
use crate::record::{LEAD_NAME, TaskRecord, TaskStatus, TeamEvent, TeamId, task_id};
use crate::rules::normalise_scope;

/// A task with what views add: readiness and scope warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskView {
    /// The latest snapshot.
    pub task: TaskRecord,
    /// Pending with every blocker completed.
    pub ready: bool,
    /// Write-scope overlaps with other in-progress tasks (advisory).
    pub warnings: Vec<String>,
}

/// A task to create.
#[derive(Debug, Clone, Default)]
pub struct CreateTask {
    /// One line.
    pub subject: String,
    /// The details.
    pub description: String,
    /// Tasks that must complete first.
    pub blocked_by: Vec<String>,
    /// Advisory write scopes.
    pub write_scopes: Vec<String>,
}

/// A change to a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskAction {
    /// Change any of the fields given.
    Edit {
        /// A new subject.
        subject: Option<String>,
        /// A new description.
        description: Option<String>,
        /// New blockers.
        blocked_by: Option<Vec<String>>,
        /// New write scopes.
        write_scopes: Option<Vec<String>>,
    },
    /// Take a ready unowned task for oneself.
    Claim,
    /// Give the task to a member (lead only).
    Assign {
        /// The new owner's name.
        owner: String,
    },
    /// Give the task back (pending, unowned).
    Release,
    /// Mark it done.
    Complete,
    /// Make a completed task pending again.
    Reopen,
    /// Delete it (a tombstone).
    Delete,
}

/// A compare-and-set update of one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateTask {
    /// The task.
    pub id: String,
    /// The revision the caller last saw.
    pub expected_revision: u64,
    /// What to do.
    pub action: TaskAction,
}

impl Team {
    /// Create a pending, unowned task at revision 1.
    ///
    /// # Errors
    /// `TEAM_NOT_A_MEMBER`, `TEAM_TASK_LIMIT`, `TEAM_INVALID_SCOPE`,
    /// `TEAM_TASK_INVALID_DEPENDENCY`, `TEAM_TASK_NOT_FOUND` (a blocker).
    ///
    /// # Cancel safety
    /// The checks run before the first await; the write runs on the team's
    /// tracker, so a dropped future leaves the task created or not at all.
    pub async fn create_task(
        &self,
        caller: &Arc<dyn Agent>,
        request: CreateTask,
    ) -> Result<TaskView, TeamError> {
        let by = self.role_of(caller)?.name().to_owned();
        let write_scopes = normalise_scopes(&request.write_scopes)?;
        let limit = self.inner.config.limits.max_live_tasks;
        let team = self.clone();
        let build = move |state: &TeamState| {
            if state.live_tasks() >= limit {
                return Err(TeamError::Limit {
                    what: "task",
                    limit,
                });
            }
            Ok(TeamEvent::Task(TaskRecord {
                team: TeamId(state.team().0.clone()),
                id: task_id(state.tasks().len() + 1),
                revision: 1,
                subject: request.subject,
                description: request.description,
                status: TaskStatus::Pending,
                owner: None,
                blocked_by: request.blocked_by,
                write_scopes,
                by,
                note: None,
            }))
        };
        self.detach(async move {
            let event = team.commit(build).await?;
            team.task_view_of(&event)
        })
        .await
    }

    /// Apply one compare-and-set change to a task.
    ///
    /// # Errors
    /// `TEAM_TASK_STALE_REVISION` when `expected_revision` is not current;
    /// `TEAM_UNAUTHORIZED` (not the owner or the lead; assigning as a
    /// teammate); `TEAM_INVALID_TRANSITION`; `TEAM_TASK_INVALID_DEPENDENCY`;
    /// `TEAM_TASK_HAS_DEPENDENTS`; `TEAM_INVALID_SCOPE`.
    ///
    /// # Cancel safety
    /// As [`Team::create_task`].
    pub async fn update_task(
        &self,
        caller: &Arc<dyn Agent>,
        request: UpdateTask,
    ) -> Result<TaskView, TeamError> {
        let by = self.role_of(caller)?.name().to_owned();
        if let TaskAction::Assign { .. } = request.action
            && by != LEAD_NAME
        {
            return Err(TeamError::Unauthorized(
                "only the lead assigns tasks".into(),
            ));
        }
        let scopes = match &request.action {
            TaskAction::Edit {
                write_scopes: Some(scopes),
                ..
            } => Some(normalise_scopes(scopes)?),
            _ => None,
        };
        let team = self.clone();
        self.detach(async move {
            let event = team
                .commit(|state| next_snapshot(state, &request, &by, scopes).map(TeamEvent::Task))
                .await?;
            team.task_view_of(&event)
        })
        .await
    }

    fn task_view_of(&self, event: &TeamEvent) -> Result<TaskView, TeamError> {
        let TeamEvent::Task(task) = event else {
            return Err(TeamError::InvalidRequest("not a task record".into()));
        };
        self.task_view(&task.id)
    }

    fn task_view(&self, id: &str) -> Result<TaskView, TeamError> {
        self.inner.ledger.read(|state| {
            let task = state
                .task(id)
                .ok_or_else(|| TeamError::UnknownTask(id.to_owned()))?;
            Ok(view(state, task))
        })
    }

    /// One task, a tombstone included.
    ///
    /// # Errors
    /// `TEAM_NOT_A_MEMBER`, `TEAM_TASK_NOT_FOUND`.
    pub fn get_task(&self, caller: &Arc<dyn Agent>, id: &str) -> Result<TaskView, TeamError> {
        self.role_of(caller)?;
        self.task_view(id)
    }

    /// Non-deleted tasks in creation order.
    ///
    /// # Errors
    /// `TEAM_NOT_A_MEMBER`.
    pub fn list_tasks(&self, caller: &Arc<dyn Agent>) -> Result<Vec<TaskView>, TeamError> {
        self.role_of(caller)?;
        Ok(self.board())
    }

    /// The board, for hosts (no caller check): non-deleted tasks.
    pub fn board(&self) -> Vec<TaskView> {
        self.inner.ledger.read(|state| {
            state
                .tasks()
                .iter()
                .filter(|task| task.status != TaskStatus::Deleted)
                .map(|task| view(state, task))
                .collect()
        })
    }

    /// Give back every in-progress task `name` owns, with a durable record.
    pub(super) async fn release_tasks(
        &self,
        name: &str,
        note: &str,
    ) -> Result<Vec<String>, TeamError> {
        let owned = self.inner.ledger.read(|state| owned_tasks(state, name));
        let mut released = Vec::new();
        for id in owned {
            let event = self
                .commit(|state| {
                    let current = state
                        .task(&id)
                        .ok_or_else(|| TeamError::UnknownTask(id.clone()))?;
                    Ok(TeamEvent::Task(TaskRecord {
                        revision: current.revision + 1,
                        status: TaskStatus::Pending,
                        owner: None,
                        by: LEAD_NAME.into(),
                        note: Some(note.to_owned()),
                        ..current.clone()
                    }))
                })
                .await;
            if event.is_ok() {
                released.push(id);
            }
        }
        Ok(released)
    }
}

/// The ids of the in-progress tasks `name` owns, in creation order.
pub(super) fn owned_tasks(state: &TeamState, name: &str) -> Vec<String> {
    state
        .tasks()
        .iter()
        .filter(|task| task.status == TaskStatus::InProgress && task.owner.as_deref() == Some(name))
        .map(|task| task.id.clone())
        .collect()
}

fn view(state: &TeamState, task: &TaskRecord) -> TaskView {
    TaskView {
        ready: state.is_ready(task),
        warnings: state.scope_warnings(task),
        task: task.clone(),
    }
}

fn normalise_scopes(scopes: &[String]) -> Result<Vec<String>, TeamError> {
    let mut out: Vec<String> = Vec::new();
    for scope in scopes {
        let scope = normalise_scope(scope)?;
        if !out.contains(&scope) {
            out.push(scope);
        }
    }
    Ok(out)
}
/// The snapshot an update would write.
fn next_snapshot(
    state: &TeamState,
    request: &UpdateTask,
    by: &str,
    scopes: Option<Vec<String>>,
) -> Result<TaskRecord, TeamError> {
    let current = state
        .task(&request.id)
        .ok_or_else(|| TeamError::UnknownTask(request.id.clone()))?;
    if current.revision != request.expected_revision {
        return Err(TeamError::StaleRevision {
            id: current.id.clone(),
            expected: request.expected_revision,
            current: current.revision,
        });
    }
    let mut next = TaskRecord {
        revision: current.revision + 1,
        by: by.to_owned(),
        note: None,
        ..current.clone()
    };
    let refuse = |what: &str| {
        Err(TeamError::InvalidTransition(format!(
            "{} is {}; it cannot {what}",
            current.id,
            current.status.as_str()
        )))
    };
    match &request.action {
        TaskAction::Edit {
            subject,
            description,
            blocked_by,
            ..
        } => {
            if let Some(subject) = subject {
                next.subject = subject.clone();
            }
            if let Some(description) = description {
                next.description = description.clone();
            }
            if let Some(blocked_by) = blocked_by {
                next.blocked_by = blocked_by.clone();
            }
            if let Some(scopes) = scopes {
                next.write_scopes = scopes;
            }
        }
        TaskAction::Claim => {
            if current.status != TaskStatus::Pending || current.owner.is_some() {
                return refuse("be claimed");
            }
            next.status = TaskStatus::InProgress;
            next.owner = Some(by.to_owned());
        }
        TaskAction::Assign { owner } => {
            if !matches!(current.status, TaskStatus::Pending | TaskStatus::InProgress) {
                return refuse("be assigned");
            }
            next.status = TaskStatus::InProgress;
            next.owner = Some(owner.clone());
        }
        TaskAction::Release => {
            if current.status != TaskStatus::InProgress {
                return refuse("be released");
            }
            next.status = TaskStatus::Pending;
            next.owner = None;
        }
        TaskAction::Complete => {
            if !matches!(current.status, TaskStatus::Pending | TaskStatus::InProgress) {
                return refuse("be completed");
            }
            next.status = TaskStatus::Completed;
        }
        TaskAction::Reopen => {
            if current.status != TaskStatus::Completed {
                return refuse("be reopened");
            }
            next.status = TaskStatus::Pending;
            next.owner = None;
        }
        TaskAction::Delete => {
            next.status = TaskStatus::Deleted;
            next.owner = None;
        }
    }
    Ok(next)
}
