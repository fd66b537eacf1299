//! The team's ledger: the folded state, the commit lock and the change
//! counter, private to this module. A record is built from the state,
//! checked against it, appended to the lead's log and only then applied,
//! all under the commit lock, so the live state is always the fold of
//! what was written; every applied record bumps the change counter that
//! waits watch.

use std::sync::Mutex;

use dsh_core::Agent;
use tokio::sync::watch;

use super::lock;
use crate::error::TeamError;
use crate::fold::TeamState;
use crate::record::TeamEvent;

/// The folded team state and the one way to change it.
pub(super) struct Ledger {
    state: Mutex<TeamState>,
    commit: tokio::sync::Mutex<()>,
    changed: watch::Sender<u64>,
}

impl Ledger {
    /// A ledger over an already folded state.
    pub(super) fn new(state: TeamState) -> Self {
        let (changed, _) = watch::channel(0);
        Self {
            state: Mutex::new(state),
            commit: tokio::sync::Mutex::new(()),
            changed,
        }
    }

    /// Read the state under its lock (never held across an await).
    pub(super) fn read<R>(&self, read: impl FnOnce(&TeamState) -> R) -> R {
        read(&lock(&self.state))
    }

    /// A receiver that sees every applied record as a new version.
    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Check, append to `lead`'s log and apply one record built from the
    /// current state.
    ///
    /// # Cancel safety
    /// Dropped before the append, nothing is written; dropped during it,
    /// the record may be in the log but not applied, which is why every
    /// caller runs this on the team's tracker.
    pub(super) async fn commit(
        &self,
        lead: &dyn Agent,
        build: impl FnOnce(&TeamState) -> Result<TeamEvent, TeamError>,
    ) -> Result<TeamEvent, TeamError> {
        let _guard = self.commit.lock().await;
        let event = {
            let state = lock(&self.state);
            let event = build(&state)?;
            state.check(&event)?;
            event
        };
        let payload = event
            .to_payload()
            .map_err(|err| TeamError::InvalidRequest(err.to_string()))?;
        let seq = lead.record(event.kind(), payload).await?;
        lock(&self.state).apply(event.clone(), seq);
        self.changed.send_modify(|version| *version += 1);
        Ok(event)
    }
}
