//! The `agentTeam` projection: a fold of the lead's log into the roster,
//! the mailbox (queued minus delivered, in queue order) and the task board.
//! It selects records by [`TeamId`], so records a fork child inherited in
//! its seed (which name the ancestor's team) never enter another team. Every
//! record is checked against the folded state before it is applied
//! ([`TeamState::check`]); the live team runs the same check before it
//! appends, so a record that would be refused is never written, and a
//! replay applies exactly what the live team applied.

use std::collections::{BTreeMap, HashMap, HashSet};

use dsh_core::projection::Projection;
use dsh_core::{MessageId, SessionEvent, SessionHeader, SessionId};

use crate::error::TeamError;
use crate::record::{
    DeliveredRecord, LEAD_NAME, MemberPhase, MemberRecord, MessageRecord, TaskRecord, TaskStatus,
    TeamEvent, TeamId, task_id, task_number,
};
use crate::rules::{scopes_overlap, validate_member_name};

/// One roster row as folded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The latest record.
    pub record: MemberRecord,
    /// The seq of the record that provisioned it.
    pub since: u64,
}

/// A queued message and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// The queued record.
    pub record: MessageRecord,
    /// The seq it was queued at (queue order).
    pub seq: u64,
    /// Whether its acknowledgement was written.
    pub delivered: bool,
}

/// A team's whole folded state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeamState {
    team: TeamId,
    members: Vec<Member>,
    by_name: HashMap<String, usize>,
    by_session: HashMap<SessionId, usize>,
    messages: HashMap<MessageId, Queued>,
    /// Undelivered messages by queue seq.
    pending: BTreeMap<u64, MessageId>,
    tasks: Vec<TaskRecord>,
    live_tasks: usize,
    /// How many team records were applied (a change counter).
    applied: u64,
    /// Records in the log that the fold refused (never written by a live team).
    refused: Vec<(u64, String)>,
}

/// Who acts: the lead or a named teammate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    /// The team's lead.
    Lead,
    /// A teammate, by name.
    Member(String),
}

impl Role {
    /// The model-facing name.
    pub fn name(&self) -> &str {
        match self {
            Self::Lead => LEAD_NAME,
            Self::Member(name) => name,
        }
    }

    /// Whether this is the lead.
    pub fn is_lead(&self) -> bool {
        matches!(self, Self::Lead)
    }
}

impl TeamState {
    /// The empty state of `team`.
    pub fn new(team: TeamId) -> Self {
        Self {
            team,
            members: Vec::new(),
            by_name: HashMap::new(),
            by_session: HashMap::new(),
            messages: HashMap::new(),
            pending: BTreeMap::new(),
            tasks: Vec::new(),
            live_tasks: 0,
            applied: 0,
            refused: Vec::new(),
        }
    }

    /// The team.
    pub fn team(&self) -> &TeamId {
        &self.team
    }

    /// The roster in creation order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// A member by name.
    pub fn member(&self, name: &str) -> Option<&Member> {
        self.by_name.get(name).map(|at| &self.members[*at])
    }

    /// A member by session id.
    pub fn member_by_session(&self, id: &SessionId) -> Option<&Member> {
        self.by_session.get(id).map(|at| &self.members[*at])
    }

    /// Every task, tombstones included, in creation order.
    pub fn tasks(&self) -> &[TaskRecord] {
        &self.tasks
    }

    /// A task by id, tombstones included.
    pub fn task(&self, id: &str) -> Option<&TaskRecord> {
        let n = task_number(id)?;
        self.tasks.get(n.checked_sub(1)?)
    }

    /// Non-deleted tasks.
    pub fn live_tasks(&self) -> usize {
        self.live_tasks
    }

    /// A queued message by id.
    pub fn message(&self, id: &MessageId) -> Option<&Queued> {
        self.messages.get(id)
    }

    /// Every message ever queued, in queue order.
    pub fn messages(&self) -> Vec<&Queued> {
        let mut all: Vec<&Queued> = self.messages.values().collect();
        all.sort_by_key(|queued| queued.seq);
        all
    }

    /// Undelivered messages (the recovery set), in queue order.
    pub fn pending(&self) -> impl Iterator<Item = &Queued> {
        self.pending.values().filter_map(|id| self.messages.get(id))
    }

    /// Undelivered messages for `target`, in queue order.
    pub fn pending_for<'a>(&'a self, target: &'a str) -> impl Iterator<Item = &'a Queued> + 'a {
        self.pending()
            .filter(move |queued| queued.record.to == target)
    }

    /// How many team records were applied.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Records of this team in the log that the fold refused, with why.
    pub fn refused(&self) -> &[(u64, String)] {
        &self.refused
    }

    /// Whether a task is ready: pending with every blocker completed.
    pub fn is_ready(&self, task: &TaskRecord) -> bool {
        task.status == TaskStatus::Pending && self.blockers_done(task)
    }

    fn blockers_done(&self, task: &TaskRecord) -> bool {
        task.blocked_by.iter().all(|blocker| {
            self.task(blocker)
                .is_some_and(|blocker| blocker.status == TaskStatus::Completed)
        })
    }

    /// Advisory warnings for `task`: each write scope that overlaps a scope
    /// of another in-progress task.
    pub fn scope_warnings(&self, task: &TaskRecord) -> Vec<String> {
        let mut warnings = Vec::new();
        for other in &self.tasks {
            if other.id == task.id || other.status != TaskStatus::InProgress {
                continue;
            }
            for mine in &task.write_scopes {
                if let Some(theirs) = other
                    .write_scopes
                    .iter()
                    .find(|theirs| scopes_overlap(mine, theirs))
                {
                    warnings.push(format!(
                        "write scope `{mine}` overlaps `{theirs}` of in-progress {}",
                        other.id
                    ));
                }
            }
        }
        warnings
    }

    /// Whether `name` names the lead or an active teammate.
    fn is_active(&self, name: &str) -> bool {
        name == LEAD_NAME
            || self
                .member(name)
                .is_some_and(|member| member.record.phase == MemberPhase::Active)
    }

    fn require_active(&self, name: &str, what: &str) -> Result<(), TeamError> {
        if self.is_active(name) {
            return Ok(());
        }
        Err(match self.member(name) {
            Some(member) => TeamError::MemberUnavailable {
                name: name.to_owned(),
                phase: member.record.phase.as_str(),
            },
            None => TeamError::UnknownMember(format!("{name} ({what})")),
        })
    }

    /// Check `event` against the state: the record is for this team, and
    /// the transition it makes is allowed.
    ///
    /// # Errors
    /// The reason it would be refused.
    pub fn check(&self, event: &TeamEvent) -> Result<(), TeamError> {
        if event.team() != &self.team {
            return Err(TeamError::ForeignTeam(event.team().to_string()));
        }
        match event {
            TeamEvent::Member(record) => self.check_member(record),
            TeamEvent::Message(record) => self.check_message(record),
            TeamEvent::Delivered(record) => self.check_delivered(record),
            TeamEvent::Task(record) => self.check_task(record),
        }
    }

    fn check_member(&self, record: &MemberRecord) -> Result<(), TeamError> {
        validate_member_name(&record.name)?;
        match (self.member(&record.name), record.phase) {
            (None, MemberPhase::Provisioning) => {
                if record.id == self.team.0 || self.by_session.contains_key(&record.id) {
                    return Err(TeamError::InvalidTransition(format!(
                        "session `{}` is already in the team",
                        record.id
                    )));
                }
                Ok(())
            }
            (None, _) => Err(TeamError::InvalidTransition(format!(
                "`{}` was never provisioned",
                record.name
            ))),
            (Some(_), MemberPhase::Provisioning) => Err(TeamError::NameTaken(record.name.clone())),
            (Some(member), _) if member.record.id != record.id => {
                Err(TeamError::InvalidTransition(format!(
                    "`{}` is session `{}`, not `{}`",
                    record.name, member.record.id, record.id
                )))
            }
            (Some(member), phase) if member.record.phase != MemberPhase::Provisioning => {
                Err(TeamError::InvalidTransition(format!(
                    "`{}` is already {}; it cannot become {}",
                    record.name,
                    member.record.phase.as_str(),
                    phase.as_str()
                )))
            }
            (Some(_), _) => Ok(()),
        }
    }

    fn check_message(&self, record: &MessageRecord) -> Result<(), TeamError> {
        if self.messages.contains_key(&record.id) {
            return Err(TeamError::InvalidMailbox(format!(
                "message `{}` is already queued",
                record.id
            )));
        }
        if record.from == record.to {
            return Err(TeamError::InvalidRequest(
                "a member cannot send a message to itself".into(),
            ));
        }
        self.require_active(&record.from, "sender")?;
        self.require_active(&record.to, "target")
    }

    fn check_delivered(&self, record: &DeliveredRecord) -> Result<(), TeamError> {
        match self.messages.get(&record.id) {
            None => Err(TeamError::InvalidMailbox(format!(
                "message `{}` was never queued",
                record.id
            ))),
            Some(queued) if queued.delivered => Err(TeamError::InvalidMailbox(format!(
                "message `{}` is already delivered",
                record.id
            ))),
            Some(queued) if queued.record.to != record.to => {
                Err(TeamError::InvalidMailbox(format!(
                    "message `{}` is for `{}`, not `{}`",
                    record.id, queued.record.to, record.to
                )))
            }
            Some(_) => Ok(()),
        }
    }

    fn check_task(&self, next: &TaskRecord) -> Result<(), TeamError> {
        let number =
            task_number(&next.id).ok_or_else(|| TeamError::UnknownTask(next.id.clone()))?;
        self.require_active(&next.by, "author")?;
        let previous = match number.cmp(&(self.tasks.len() + 1)) {
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Less => Some(&self.tasks[number - 1]),
            std::cmp::Ordering::Greater => {
                return Err(TeamError::UnknownTask(format!(
                    "{} (the next task is {})",
                    next.id,
                    task_id(self.tasks.len() + 1)
                )));
            }
        };
        match previous {
            None => {
                if next.revision != 1 || next.status != TaskStatus::Pending || next.owner.is_some()
                {
                    return Err(TeamError::InvalidTransition(
                        "a task is created pending, unowned, at revision 1".into(),
                    ));
                }
            }
            Some(previous) => {
                if previous.status == TaskStatus::Deleted {
                    return Err(TeamError::InvalidTransition(format!(
                        "{} is deleted",
                        next.id
                    )));
                }
                if next.revision != previous.revision + 1 {
                    return Err(TeamError::StaleRevision {
                        id: next.id.clone(),
                        expected: next.revision.saturating_sub(1),
                        current: previous.revision,
                    });
                }
                self.check_authority(previous, next)?;
            }
        }
        // Unchanged edges were checked when they were written, and a
        // blocker cannot be deleted under them: only new edges can close a
        // cycle.
        let edges_changed = previous.is_none_or(|previous| previous.blocked_by != next.blocked_by);
        self.check_edges(next, edges_changed)?;
        self.check_status(previous, next)
    }

    /// Only the owner or the lead edits, releases, completes, reopens or
    /// deletes; anyone may claim a ready unowned task for itself; only the
    /// lead assigns.
    fn check_authority(&self, previous: &TaskRecord, next: &TaskRecord) -> Result<(), TeamError> {
        if next.by == LEAD_NAME || previous.owner.as_deref() == Some(next.by.as_str()) {
            if next.owner != previous.owner
                && next.owner.is_some()
                && next.owner.as_deref() != Some(next.by.as_str())
                && next.by != LEAD_NAME
            {
                return Err(TeamError::Unauthorized(
                    "only the lead assigns tasks".into(),
                ));
            }
            return Ok(());
        }
        let claim = previous.owner.is_none()
            && next.owner.as_deref() == Some(next.by.as_str())
            && next.status == TaskStatus::InProgress
            && previous.status == TaskStatus::Pending
            && next.subject == previous.subject
            && next.description == previous.description
            && next.blocked_by == previous.blocked_by
            && next.write_scopes == previous.write_scopes;
        if claim {
            return Ok(());
        }
        if next.owner != previous.owner && next.owner.is_some() {
            return Err(TeamError::Unauthorized(
                "only the lead assigns tasks".into(),
            ));
        }
        Err(TeamError::Unauthorized(format!(
            "only the owner or the lead may change {}",
            next.id
        )))
    }

    fn check_edges(&self, next: &TaskRecord, search_cycles: bool) -> Result<(), TeamError> {
        let mut seen = HashSet::new();
        for blocker in &next.blocked_by {
            if blocker == &next.id {
                return Err(TeamError::InvalidDependency(format!(
                    "{} cannot block itself",
                    next.id
                )));
            }
            if !seen.insert(blocker.as_str()) {
                return Err(TeamError::InvalidDependency(format!(
                    "{blocker} is named twice"
                )));
            }
            match self.task(blocker) {
                Some(task) if task.status != TaskStatus::Deleted => {}
                Some(_) => {
                    return Err(TeamError::InvalidDependency(format!(
                        "{blocker} is deleted"
                    )));
                }
                None => return Err(TeamError::UnknownTask(blocker.clone())),
            }
        }
        if !search_cycles {
            return Ok(());
        }
        // A cycle through `next` is a path from one of its blockers back
        // to it, over the edges as they would be.
        let mut stack: Vec<&str> = next.blocked_by.iter().map(String::as_str).collect();
        let mut visited = HashSet::new();
        while let Some(at) = stack.pop() {
            if at == next.id {
                return Err(TeamError::InvalidDependency(format!(
                    "{} would depend on itself through a cycle",
                    next.id
                )));
            }
            if !visited.insert(at) {
                continue;
            }
            if let Some(task) = self.task(at) {
                stack.extend(task.blocked_by.iter().map(String::as_str));
            }
        }
        Ok(())
    }

    fn check_status(
        &self,
        previous: Option<&TaskRecord>,
        next: &TaskRecord,
    ) -> Result<(), TeamError> {
        match (next.status, next.owner.as_deref()) {
            (TaskStatus::InProgress, None) => {
                return Err(TeamError::InvalidTransition(
                    "an in-progress task has an owner".into(),
                ));
            }
            (TaskStatus::InProgress, Some(owner)) => {
                self.require_active(owner, "owner")?;
                let starting = previous.is_some_and(|p| p.status != TaskStatus::InProgress);
                if starting && !self.blockers_done(next) {
                    return Err(TeamError::InvalidTransition(format!(
                        "{} is blocked; it can start once its blockers complete",
                        next.id
                    )));
                }
            }
            (TaskStatus::Pending | TaskStatus::Deleted, Some(_)) => {
                return Err(TeamError::InvalidTransition(format!(
                    "a {} task has no owner",
                    next.status.as_str()
                )));
            }
            _ => {}
        }
        if next.status == TaskStatus::Deleted
            && let Some(dependent) = self.tasks.iter().find(|task| {
                task.status != TaskStatus::Deleted && task.blocked_by.contains(&next.id)
            })
        {
            return Err(TeamError::HasDependents {
                id: next.id.clone(),
                dependent: dependent.id.clone(),
            });
        }
        Ok(())
    }

    /// Apply a checked record written at `seq`.
    pub fn apply(&mut self, event: TeamEvent, seq: u64) {
        self.applied += 1;
        match event {
            TeamEvent::Member(record) => match self.by_name.get(&record.name) {
                Some(at) => self.members[*at].record = record,
                None => {
                    let at = self.members.len();
                    self.by_name.insert(record.name.clone(), at);
                    self.by_session.insert(record.id.clone(), at);
                    self.members.push(Member { record, since: seq });
                }
            },
            TeamEvent::Message(record) => {
                self.pending.insert(seq, record.id.clone());
                self.messages.insert(
                    record.id.clone(),
                    Queued {
                        record,
                        seq,
                        delivered: false,
                    },
                );
            }
            TeamEvent::Delivered(record) => {
                if let Some(queued) = self.messages.get_mut(&record.id) {
                    queued.delivered = true;
                    self.pending.remove(&queued.seq);
                }
            }
            TeamEvent::Task(record) => {
                let deleted = record.status == TaskStatus::Deleted;
                match task_number(&record.id).and_then(|n| n.checked_sub(1)) {
                    Some(at) if at < self.tasks.len() => {
                        let was_deleted = self.tasks[at].status == TaskStatus::Deleted;
                        if deleted && !was_deleted {
                            self.live_tasks -= 1;
                        }
                        self.tasks[at] = record;
                    }
                    _ => {
                        if !deleted {
                            self.live_tasks += 1;
                        }
                        self.tasks.push(record);
                    }
                }
            }
        }
    }

    /// Fold one log event: a record of this team is checked and applied (or
    /// kept in [`TeamState::refused`]); anything else is ignored.
    pub fn fold_event(&mut self, event: &SessionEvent) {
        match TeamEvent::from_event(event) {
            None => {}
            Some(Err(err)) => self.refused.push((event.seq, err.to_string())),
            Some(Ok(record)) if record.team() != &self.team => {}
            Some(Ok(record)) => match self.check(&record) {
                Ok(()) => self.apply(record, event.seq),
                Err(err) => self.refused.push((event.seq, err.to_string())),
            },
        }
    }
}

/// Fold the team `team` out of a log.
pub fn fold_team(team: &TeamId, events: &[SessionEvent]) -> TeamState {
    let mut state = TeamState::new(team.clone());
    for event in events {
        state.fold_event(event);
    }
    state
}

/// The `agentTeam` projection of a root's log: the team whose id is the
/// session's own.
#[derive(Debug, Clone, Copy, Default)]
pub struct TeamProjection;

impl Projection for TeamProjection {
    type State = TeamState;

    fn name(&self) -> &'static str {
        "agentTeam"
    }

    fn init(&self, header: &SessionHeader) -> TeamState {
        TeamState::new(TeamId(header.id.clone()))
    }

    fn apply(&self, state: &mut TeamState, event: &SessionEvent) {
        state.fold_event(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{DeliveryMode, MemberContext};
    use dsh_core::ContentBlock;

    fn team() -> TeamId {
        TeamId(SessionId::new("lead-session").unwrap())
    }

    fn member(name: &str, phase: MemberPhase) -> TeamEvent {
        TeamEvent::Member(MemberRecord {
            team: team(),
            id: SessionId::new(format!("s-{name}")).unwrap(),
            name: name.into(),
            description: String::new(),
            provider: "spawn".into(),
            context: MemberContext::Fresh,
            phase,
            error: None,
            worktree: None,
        })
    }

    fn task(n: usize, revision: u64, by: &str) -> TaskRecord {
        TaskRecord {
            team: team(),
            id: task_id(n),
            revision,
            subject: format!("task {n}"),
            description: String::new(),
            status: TaskStatus::Pending,
            owner: None,
            blocked_by: Vec::new(),
            write_scopes: Vec::new(),
            by: by.into(),
            note: None,
        }
    }

    fn state_with(events: Vec<TeamEvent>) -> TeamState {
        let mut state = TeamState::new(team());
        for (seq, event) in events.into_iter().enumerate() {
            state.check(&event).unwrap();
            state.apply(event, seq as u64);
        }
        state
    }

    fn code(state: &TeamState, event: TeamEvent) -> &'static str {
        state
            .check(&event)
            .map_err(|err| err.code())
            .err()
            .unwrap_or("OK")
    }

    #[test]
    fn members_reach_exactly_one_terminal_phase_and_names_are_never_reused() {
        let state = state_with(vec![
            member("alice", MemberPhase::Provisioning),
            member("alice", MemberPhase::Failed),
        ]);
        assert_eq!(
            code(&state, member("alice", MemberPhase::Active)),
            "TEAM_INVALID_TRANSITION"
        );
        assert_eq!(
            code(&state, member("alice", MemberPhase::Provisioning)),
            "TEAM_NAME_TAKEN"
        );
        assert_eq!(
            code(&state, member("bob", MemberPhase::Active)),
            "TEAM_INVALID_TRANSITION"
        );
        assert_eq!(code(&state, member("bob", MemberPhase::Provisioning)), "OK");
    }

    #[test]
    fn the_mailbox_refuses_duplicate_queue_and_ack_records() {
        let mut state = state_with(vec![
            member("alice", MemberPhase::Provisioning),
            member("alice", MemberPhase::Active),
        ]);
        let queued = MessageRecord {
            team: team(),
            id: MessageId::new("m-1"),
            from: "lead".into(),
            to: "alice".into(),
            delivery: DeliveryMode::Wakeup,
            content: vec![ContentBlock::text("hi")],
        };
        state.apply(TeamEvent::Message(queued.clone()), 9);
        assert_eq!(
            code(&state, TeamEvent::Message(queued)),
            "TEAM_INVALID_MAILBOX_RECORD"
        );
        let ack = |to: &str| {
            TeamEvent::Delivered(DeliveredRecord {
                team: team(),
                id: MessageId::new("m-1"),
                to: to.into(),
            })
        };
        assert_eq!(code(&state, ack("lead")), "TEAM_INVALID_MAILBOX_RECORD");
        assert_eq!(state.pending().count(), 1);
        state.apply(ack("alice"), 10);
        assert_eq!(state.pending().count(), 0);
        assert_eq!(code(&state, ack("alice")), "TEAM_INVALID_MAILBOX_RECORD");
    }

    #[test]
    fn task_edges_stay_acyclic_and_point_at_live_tasks() {
        let mut second = task(2, 1, "lead");
        second.blocked_by = vec![task_id(1)];
        let state = state_with(vec![
            TeamEvent::Task(task(1, 1, "lead")),
            TeamEvent::Task(second),
        ]);
        let mut cycle = task(1, 2, "lead");
        cycle.blocked_by = vec![task_id(2)];
        assert_eq!(
            code(&state, TeamEvent::Task(cycle)),
            "TEAM_TASK_INVALID_DEPENDENCY"
        );
        let mut own = task(1, 2, "lead");
        own.blocked_by = vec![task_id(1)];
        assert_eq!(
            code(&state, TeamEvent::Task(own)),
            "TEAM_TASK_INVALID_DEPENDENCY"
        );
        let mut twice = task(3, 1, "lead");
        twice.blocked_by = vec![task_id(1), task_id(1)];
        assert_eq!(
            code(&state, TeamEvent::Task(twice)),
            "TEAM_TASK_INVALID_DEPENDENCY"
        );
        let mut deleted = task(1, 2, "lead");
        deleted.status = TaskStatus::Deleted;
        assert_eq!(
            code(&state, TeamEvent::Task(deleted)),
            "TEAM_TASK_HAS_DEPENDENTS"
        );
        assert_eq!(
            code(&state, TeamEvent::Task(task(2, 1, "lead"))),
            "TEAM_TASK_STALE_REVISION"
        );
        assert_eq!(
            code(&state, TeamEvent::Task(task(5, 1, "lead"))),
            "TEAM_TASK_NOT_FOUND"
        );
    }

    #[test]
    fn records_of_another_team_are_ignored_by_the_fold() {
        let mut foreign = task(1, 1, "lead");
        foreign.team = TeamId(SessionId::new("other").unwrap());
        let event = SessionEvent {
            seq: 0,
            time: 0,
            payload: dsh_core::EventPayload::Extension {
                kind: crate::record::TASK_EVENT.into(),
                payload: serde_json::to_value(&foreign).unwrap().into(),
            },
        };
        let state = fold_team(&team(), &[event]);
        assert!(state.tasks().is_empty());
        assert!(state.refused().is_empty());
    }
}
