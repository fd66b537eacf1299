//! The stable policy section of a member's system prompt: its role, name
//! and team, and the rules of working together. Model-visible: its text
//! is snapshot-tested.

use dsh_agent_team::{Role, Team};

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
