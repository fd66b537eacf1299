//! The directory of open teams the tools act on, and the one question a
//! tool asks it: which team, and which role, does this agent hold?

use std::sync::{Arc, Mutex, PoisonError};

use dsh_agent_team::{Role, Team};
use dsh_core::Agent;

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
