//! `dsh team [tree]`: the agent team of the most recent (or a named) tree,
//! read cold from the logs: the roster with each member's derived status,
//! the task board (readiness, owners, blockers, write scopes and their
//! overlap warnings) and the mailbox (every message queued or delivered).
//! The team is the fold of the lead's own log ([`fold_team`]); a member's
//! own log is read only for its last turn. No agent is resumed and nothing
//! is written: a member is `inactive` here because no process of this
//! command holds it (a `dsh run` may still be running the tree).
//!
//! A `dsh run --team` prints the same report for its tree when it ends.

use std::fmt::Write as _;
use std::path::Path;

use dsh_agent_team::{MemberPhase, Queued, TaskStatus, TeamId, TeamState, fold_team};
use dsh_core::content::joined_text;
use dsh_core::{SessionEvent, SessionId, SessionStore};

use serde::Serialize;

use crate::error::CliError;
use crate::observe::compact;
use crate::sessions;

/// Run the command.
///
/// # Cancel safety
/// Cancel safe: it only reads the logs.
pub async fn team(dir: &Path, tree: Option<&str>, json: bool) -> Result<(), CliError> {
    let store = sessions::existing_store(dir)?;
    let scan = sessions::scan(store.as_ref()).await?;
    scan.warn();
    let root = scan.pick_root(dir, tree)?;
    let (state, statuses) = fold(store.as_ref(), &root).await?;
    if json {
        print!("{}", crate::json::document(&document(&state, &statuses)));
    } else {
        print!("{}", render(&root, &state, &statuses));
    }
    Ok(())
}

/// The team of the tree rooted at `root`, as `dsh team` prints it.
///
/// # Errors
/// The lead's log cannot be read (missing, corrupt, unreadable). A
/// member's unreadable log is shown in its row instead.
///
/// # Cancel safety
/// Cancel safe: it only reads the logs.
pub async fn report(store: &dyn SessionStore, root: &SessionId) -> Result<String, CliError> {
    let (state, statuses) = fold(store, root).await?;
    Ok(render(root, &state, &statuses))
}

/// The team of the tree rooted at `root` and the statuses of the lead and
/// then each member in roster order.
async fn fold(
    store: &dyn SessionStore,
    root: &SessionId,
) -> Result<(TeamState, Vec<String>), CliError> {
    let lead = store.load(root).await?;
    let state = fold_team(&TeamId(root.clone()), &lead.events);
    let mut statuses = vec![cold_status(&lead.events, lead.header.seed_len)];
    for member in state.members() {
        let record = &member.record;
        statuses.push(match record.phase {
            MemberPhase::Provisioning => "provisioning".to_owned(),
            MemberPhase::Failed => "failed".to_owned(),
            MemberPhase::Active => match store.load(&record.id).await {
                Ok(log) => cold_status(&log.events, log.header.seed_len),
                Err(err) => format!("inactive, log unreadable ({})", err.code()),
            },
        });
    }
    Ok((state, statuses))
}

/// Whether the tree rooted at `root` has a team: its lead's log holds a
/// team record of its own team.
///
/// # Errors
/// The lead's log cannot be read.
///
/// # Cancel safety
/// Cancel safe: it only reads the log.
pub async fn has_team(store: &dyn SessionStore, root: &SessionId) -> Result<bool, CliError> {
    let lead = store.load(root).await?;
    Ok(fold_team(&TeamId(root.clone()), &lead.events).applied() > 0)
}

/// A member no process of this command holds: `inactive`, with how its own
/// last turn ended (a fork's inherited turns are not its own).
fn cold_status(events: &[SessionEvent], seed_len: u64) -> String {
    let own = events
        .get(usize::try_from(seed_len).unwrap_or(usize::MAX)..)
        .unwrap_or_default();
    match dsh_subagent::result::last_stop(own) {
        Some((reason, _)) => format!("inactive, last turn {reason}"),
        None => "inactive, no turn yet".to_owned(),
    }
}

/// What a task's readiness looks like on the board.
fn readiness(state: &TeamState, status: TaskStatus, blocked_by: &[String]) -> String {
    match status {
        TaskStatus::Pending => {
            let open: Vec<&str> = blocked_by
                .iter()
                .filter(|id| {
                    state
                        .task(id)
                        .is_none_or(|task| task.status != TaskStatus::Completed)
                })
                .map(String::as_str)
                .collect();
            if open.is_empty() {
                "ready".to_owned()
            } else {
                format!("blocked by {}", open.join(", "))
            }
        }
        other => other.as_str().replace('_', " "),
    }
}

/// One mailbox line.
fn message_line(queued: &Queued) -> String {
    let record = &queued.record;
    format!(
        "  {}  {} -> {}  {}  {}  {}",
        record.id,
        record.from,
        record.to,
        match record.delivery {
            dsh_agent_team::DeliveryMode::Quiet => "quiet ",
            dsh_agent_team::DeliveryMode::Wakeup => "waking",
        },
        if queued.delivered {
            "delivered"
        } else {
            "queued   "
        },
        compact(&joined_text(&record.content), 100)
    )
}

/// `dsh team --json`: the team as one document (the schema is in
/// docs/cli-json.md).
#[derive(Debug, Serialize)]
struct Document<'a> {
    /// [`crate::json::SCHEMA_VERSION`].
    schema: u32,
    /// The team (its lead's session).
    team: &'a SessionId,
    /// The lead, then each member in roster order.
    members: Vec<MemberDoc<'a>>,
    /// The board, deleted tasks left out.
    tasks: Vec<TaskDoc<'a>>,
    /// How many tasks were deleted.
    deleted_tasks: usize,
    /// Every message, queued or delivered, in order.
    mailbox: Vec<MessageDoc<'a>>,
    /// Team records the fold refused, with why.
    refused: Vec<RefusedDoc<'a>>,
}

/// One member of a [`Document`].
#[derive(Debug, Serialize)]
struct MemberDoc<'a> {
    /// Its name in the team (`lead` for the lead).
    name: &'a str,
    /// Its session.
    session: &'a SessionId,
    /// `lead` or `member`.
    role: &'static str,
    /// As the text report shows it (`inactive, last turn completed`).
    status: &'a str,
    /// What it was asked to do (empty for the lead).
    description: &'a str,
    /// The provider that made it (`root` for the lead).
    provider: &'a str,
    /// Messages queued for it.
    queued: usize,
    /// The tasks it has in progress.
    owns: Vec<&'a str>,
    /// Its worktree's directory, when it has one.
    worktree: Option<&'a Path>,
    /// Why it could not be created, when it could not.
    error: Option<&'a str>,
}

/// One task of a [`Document`].
#[derive(Debug, Serialize)]
struct TaskDoc<'a> {
    /// Its id.
    id: &'a str,
    /// Its revision.
    revision: u64,
    /// `pending`, `in_progress` or `completed`.
    status: &'static str,
    /// `ready`, `blocked by ...` or the status, as the report shows it.
    readiness: String,
    /// Its owner, when it has one.
    owner: Option<&'a str>,
    /// Its subject.
    subject: &'a str,
    /// The tasks it waits for.
    blocked_by: &'a [String],
    /// The paths it may write.
    write_scopes: &'a [String],
    /// Scope overlaps with other tasks.
    warnings: Vec<String>,
    /// Its note, when it has one.
    note: Option<&'a str>,
}

/// One message of a [`Document`].
#[derive(Debug, Serialize)]
struct MessageDoc<'a> {
    /// Its id.
    id: String,
    /// The sender's name.
    from: &'a str,
    /// The addressee's name.
    to: &'a str,
    /// `quiet` or `wakeup`.
    delivery: &'a dsh_agent_team::DeliveryMode,
    /// Whether the addressee has read it.
    delivered: bool,
    /// Its text.
    text: String,
}

/// One refused record of a [`Document`].
#[derive(Debug, Serialize)]
struct RefusedDoc<'a> {
    /// Its seq in the lead's log.
    seq: u64,
    /// Why the fold refused it.
    reason: &'a str,
}

/// The document of `state`; `statuses` as [`render`] takes them.
fn document<'a>(state: &'a TeamState, statuses: &'a [String]) -> Document<'a> {
    let status = |at: usize| statuses.get(at).map_or("-", String::as_str);
    let owns = |name: &str| -> Vec<&'a str> {
        state
            .tasks()
            .iter()
            .filter(|task| {
                task.status == TaskStatus::InProgress && task.owner.as_deref() == Some(name)
            })
            .map(|task| task.id.as_str())
            .collect()
    };
    let lead = MemberDoc {
        name: "lead",
        session: &state.team().0,
        role: "lead",
        status: status(0),
        description: "",
        provider: "root",
        queued: state.pending_for("lead").count(),
        owns: owns("lead"),
        worktree: None,
        error: None,
    };
    let members =
        std::iter::once(lead).chain(state.members().iter().enumerate().map(|(at, member)| {
            let record = &member.record;
            MemberDoc {
                name: &record.name,
                session: &record.id,
                role: "member",
                status: status(at + 1),
                description: &record.description,
                provider: &record.provider,
                queued: state.pending_for(&record.name).count(),
                owns: owns(&record.name),
                worktree: record.worktree.as_ref().map(|tree| tree.path.as_path()),
                error: record.error.as_deref(),
            }
        }));
    let tasks = state
        .tasks()
        .iter()
        .filter(|task| task.status != TaskStatus::Deleted);
    Document {
        schema: crate::json::SCHEMA_VERSION,
        team: &state.team().0,
        members: members.collect(),
        tasks: tasks
            .clone()
            .map(|task| TaskDoc {
                id: &task.id,
                revision: task.revision,
                status: task.status.as_str(),
                readiness: readiness(state, task.status, &task.blocked_by),
                owner: task.owner.as_deref(),
                subject: &task.subject,
                blocked_by: &task.blocked_by,
                write_scopes: &task.write_scopes,
                warnings: state.scope_warnings(task),
                note: task.note.as_deref(),
            })
            .collect(),
        deleted_tasks: state.tasks().len() - tasks.count(),
        mailbox: state
            .messages()
            .into_iter()
            .map(|queued| MessageDoc {
                id: queued.record.id.to_string(),
                from: &queued.record.from,
                to: &queued.record.to,
                delivery: &queued.record.delivery,
                delivered: queued.delivered,
                text: joined_text(&queued.record.content),
            })
            .collect(),
        refused: state
            .refused()
            .iter()
            .map(|(seq, reason)| RefusedDoc { seq: *seq, reason })
            .collect(),
    }
}

/// The report: `statuses` are the lead's, then each member's in roster order.
fn render(root: &SessionId, state: &TeamState, statuses: &[String]) -> String {
    let mut out = String::new();
    let tasks: Vec<_> = state
        .tasks()
        .iter()
        .filter(|task| task.status != TaskStatus::Deleted)
        .collect();
    let messages = state.messages();
    if state.members().is_empty() && state.tasks().is_empty() && messages.is_empty() {
        let _ = writeln!(
            out,
            "team {root}: no members, tasks or messages (`dsh run --team` gives a lead its team)"
        );
        return out;
    }
    let _ = writeln!(out, "team {root}");
    let _ = writeln!(out, "members ({}):", state.members().len() + 1);
    let status = |at: usize| statuses.get(at).map_or("-", String::as_str);
    let owned = |name: &str| -> Vec<&str> {
        tasks
            .iter()
            .filter(|task| {
                task.status == TaskStatus::InProgress && task.owner.as_deref() == Some(name)
            })
            .map(|task| task.id.as_str())
            .collect()
    };
    let extras = |name: &str| {
        let mut extras = String::new();
        let pending = state.pending_for(name).count();
        if pending > 0 {
            let _ = write!(extras, "  {pending} queued for it");
        }
        let owned = owned(name);
        if !owned.is_empty() {
            let _ = write!(extras, "  owns {}", owned.join(", "));
        }
        extras
    };
    let _ = writeln!(
        out,
        "  {:<14} {:<32} lead{}",
        "lead",
        status(0),
        extras("lead")
    );
    for (at, member) in state.members().iter().enumerate() {
        let record = &member.record;
        let mut line = format!(
            "  {:<14} {:<32} {} ({})",
            record.name,
            status(at + 1),
            compact(&record.description, 60),
            record.provider
        );
        line.push_str(&extras(&record.name));
        if let Some(worktree) = &record.worktree {
            let _ = write!(line, "  worktree {}", worktree.path.display());
        }
        if let Some(error) = &record.error {
            let _ = write!(line, "  error: {}", compact(error, 120));
        }
        let _ = writeln!(out, "{line}");
    }
    let deleted = state.tasks().len() - tasks.len();
    let deleted = if deleted > 0 {
        format!(", {deleted} deleted")
    } else {
        String::new()
    };
    let _ = writeln!(out, "tasks ({}{deleted}):", tasks.len());
    for task in &tasks {
        let owner = task
            .owner
            .as_deref()
            .map(|owner| format!("  owner {owner}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<8} {:<28} rev {}{owner}  {}",
            task.id,
            readiness(state, task.status, &task.blocked_by),
            task.revision,
            compact(&task.subject, 80)
        );
        if !task.write_scopes.is_empty() {
            let _ = writeln!(out, "           scopes {}", task.write_scopes.join(", "));
        }
        for warning in state.scope_warnings(task) {
            let _ = writeln!(out, "           warning: {warning}");
        }
        if let Some(note) = &task.note {
            let _ = writeln!(out, "           note: {}", compact(note, 120));
        }
    }
    let queued = messages.iter().filter(|queued| !queued.delivered).count();
    let _ = writeln!(
        out,
        "mailbox ({} messages, {queued} queued):",
        messages.len()
    );
    for queued in messages {
        let _ = writeln!(out, "{}", message_line(queued).trim_end());
    }
    for (seq, reason) in state.refused() {
        let _ = writeln!(
            out,
            "warning: the team record at seq {seq} was refused: {}",
            compact(reason, 160)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use dsh_agent_team::{
        DeliveredRecord, DeliveryMode, MemberContext, MemberRecord, MessageRecord, TaskRecord,
        TeamEvent,
    };
    use dsh_core::{ContentBlock, MessageId};

    use super::*;

    fn sid(text: &str) -> SessionId {
        SessionId::new(text).unwrap()
    }

    /// A board with an in-progress task whose scope overlaps another's, a
    /// blocked task and a ready one, a failed member, a deleted task and a
    /// mailbox with a delivered and a queued message: every part of the
    /// report, rendered.
    #[test]
    fn the_report_shows_readiness_owners_overlaps_and_the_mailbox() {
        let team = TeamId(sid("s-lead"));
        let mut state = TeamState::new(team.clone());
        let mut seq = 0;
        let mut apply = |state: &mut TeamState, event: TeamEvent| {
            state.check(&event).unwrap();
            state.apply(event, seq);
            seq += 1;
        };
        let member = |name: &str, id: &str, phase: MemberPhase| {
            TeamEvent::Member(MemberRecord {
                team: team.clone(),
                id: sid(id),
                name: name.into(),
                description: format!("{name}'s part"),
                provider: "spawn".into(),
                context: MemberContext::Fresh,
                phase,
                error: (phase == MemberPhase::Failed).then(|| "the provider refused".into()),
                worktree: None,
            })
        };
        for (name, id, phase) in [
            ("alice", "s-alice", MemberPhase::Active),
            ("bob", "s-bob", MemberPhase::Failed),
        ] {
            apply(&mut state, member(name, id, MemberPhase::Provisioning));
            apply(&mut state, member(name, id, phase));
        }
        let task = |n: usize, revision, status, owner: Option<&str>, blocked: &[&str], scope| {
            TeamEvent::Task(TaskRecord {
                team: team.clone(),
                id: format!("task-{n}"),
                revision,
                subject: format!("subject {n}"),
                description: String::new(),
                status,
                owner: owner.map(str::to_owned),
                blocked_by: blocked.iter().map(|id| (*id).to_owned()).collect(),
                write_scopes: vec![scope],
                by: owner.unwrap_or("lead").into(),
                note: None,
            })
        };
        apply(
            &mut state,
            task(1, 1, TaskStatus::Pending, None, &[], "src".into()),
        );
        apply(
            &mut state,
            task(2, 1, TaskStatus::Pending, None, &["task-1"], "src/a".into()),
        );
        apply(
            &mut state,
            task(3, 1, TaskStatus::Pending, None, &[], "docs".into()),
        );
        apply(
            &mut state,
            task(4, 1, TaskStatus::Pending, None, &[], "tmp".into()),
        );
        apply(
            &mut state,
            task(
                1,
                2,
                TaskStatus::InProgress,
                Some("alice"),
                &[],
                "src".into(),
            ),
        );
        apply(
            &mut state,
            task(4, 2, TaskStatus::Deleted, None, &[], "tmp".into()),
        );
        let message = |n: u8, to: &str| MessageRecord {
            team: team.clone(),
            id: MessageId::new(format!("m-{n:032x}")),
            from: "lead".into(),
            to: to.into(),
            delivery: if n == 1 {
                DeliveryMode::Quiet
            } else {
                DeliveryMode::Wakeup
            },
            content: vec![ContentBlock::text(format!("message {n}"))],
        };
        apply(&mut state, TeamEvent::Message(message(1, "alice")));
        apply(&mut state, TeamEvent::Message(message(2, "alice")));
        apply(
            &mut state,
            TeamEvent::Delivered(DeliveredRecord {
                team: team.clone(),
                id: message(1, "alice").id,
                to: "alice".into(),
            }),
        );
        let statuses = [
            "inactive, last turn completed".to_owned(),
            "inactive, no turn yet".to_owned(),
            "failed".to_owned(),
        ];
        insta::assert_snapshot!(render(&team.0, &state, &statuses));
        let empty = TeamState::new(team.clone());
        assert_eq!(
            render(&team.0, &empty, &statuses[..1]),
            "team s-lead: no members, tasks or messages (`dsh run --team` gives a lead its team)\n"
        );
    }
}
