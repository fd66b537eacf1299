//! Crash recovery: what a kill can leave behind and its removal. A child's
//! log is created before its catalog entry is written into its creator's
//! log (B9), so a kill in between leaves a log nobody lists; and a create
//! killed before its header leaves a torn log that is nobody's session.
//! [`SubagentRuntime::remove_orphans`] removes both, never a log that took
//! input of its own, is listed, or is held. (Notices a kill lost are
//! delivered by [`SubagentRuntime::deliver_lost_notices`], in `notice.rs`.)

use crate::DeliveryError;
use std::collections::HashSet;
use std::sync::Arc;

use dsh_core::{Agent, EventPayload, SessionId};

use crate::error::SubagentError;
use crate::runtime::SubagentRuntime;

impl SubagentRuntime {
    /// Remove the logs a crash left between a child's creation and its
    /// catalog entry (B9 after a kill): stored sessions whose header names
    /// `creator` as their parent, that `creator`'s catalog does not list,
    /// that never accepted input of their own and that no writer holds;
    /// and any log a create that crashed before writing its header left
    /// (torn, header-only: nobody's session, see
    /// `SessionStore::remove_torn`). Returns the ids removed. A host calls
    /// it when it resumes a root, with
    /// [`SubagentRuntime::deliver_lost_notices`].
    ///
    /// # Errors
    /// `NOT_LIVE` unless `creator` is the exact live agent; a corrupt
    /// catalog; a store failure other than a log being held.
    ///
    /// # Cancel safety
    /// Each removal is one store call; a drop leaves the rest for the next
    /// call.
    pub async fn remove_orphans(
        &self,
        creator: &Arc<dyn Agent>,
    ) -> Result<Vec<SessionId>, SubagentError> {
        let reference = creator.reference();
        if !self.registry().is_live(&reference) {
            return Err(SubagentError::Delivery(DeliveryError::NotLive(
                reference.id,
            )));
        }
        let cataloged: HashSet<SessionId> = self.with_live_catalog(creator, |fold| {
            fold.catalog()
                .entries()
                .iter()
                .map(|entry| entry.child_id.clone())
                .collect()
        })?;
        let mut removed = Vec::new();
        for id in self.store().list().await? {
            if cataloged.contains(&id) || self.registry().get(&id).is_some() {
                continue;
            }
            let loaded = match self.store().load(&id).await {
                Ok(loaded) => loaded,
                // A create that crashed before its header: nobody's session.
                // The store removes it only if it is still torn and unheld.
                Err(dsh_core::StoreError::TornCreate { .. }) => {
                    match self.store().remove_torn(&id).await {
                        Ok(true) => removed.push(id),
                        Ok(false)
                        | Err(dsh_core::StoreError::Busy(_) | dsh_core::StoreError::Locked(_)) => {}
                        Err(err) => return Err(err.into()),
                    }
                    continue;
                }
                // Being created or removed right now, or unreadable: not ours to judge.
                Err(_) => continue,
            };
            if loaded.header.parent_session.as_ref() != Some(creator.id()) {
                continue;
            }
            // A child gets its task only after its catalog entry: a log with
            // any input of its own was never an orphan of that window.
            let seed = usize::try_from(loaded.header.seed_len).unwrap_or(usize::MAX);
            let tasked = loaded
                .events
                .get(seed..)
                .unwrap_or_default()
                .iter()
                .any(|event| matches!(event.payload, EventPayload::InboxAccepted(_)));
            if tasked {
                continue;
            }
            // Recheck under the catalog: a start may have just recorded it.
            let listed =
                self.with_live_catalog(creator, |fold| fold.catalog().get(&id).is_some())?;
            if listed {
                continue;
            }
            self.cold().forget(&id);
            match self.store().remove(&id).await {
                Ok(()) => removed.push(id),
                Err(
                    dsh_core::StoreError::Busy(_)
                    | dsh_core::StoreError::Locked(_)
                    | dsh_core::StoreError::NotFound(_),
                ) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(removed)
    }
}
