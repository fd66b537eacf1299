//! Tree shutdown and joining: `drain_descendants` closes admission below
//! some roots and stops their trees child-first, waiting for every start
//! and teardown; `wait_for_tree_work` joins the work in progress below one
//! root so a host knows when a run is really over. Unrelated trees are
//! never touched.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use dsh_core::{Agent, AgentStatus, SessionId};

use crate::error::SubagentError;
use crate::runtime::{Activation, SubagentRuntime, lock};

impl SubagentRuntime {
    /// The live activations of `root`'s tree.
    fn tree_activations(&self, root: &SessionId) -> Vec<Arc<Activation>> {
        lock(&self.inner.activations)
            .values()
            .filter(|activation| &activation.root == root)
            .cloned()
            .collect()
    }

    /// Close admission below `roots` (`DRAINING`) until each root leaves the
    /// registry, stop their trees child-first, and wait for every start in
    /// flight and every teardown. Trees of other roots keep running.
    ///
    /// # Errors
    /// Every teardown failure, reported together after all branches settled.
    pub async fn drain_descendants(&self, roots: &[Arc<dyn Agent>]) -> Result<(), SubagentError> {
        {
            let mut draining = lock(&self.inner.draining);
            for root in roots {
                draining.insert(root.reference());
            }
        }
        let mut failures = Vec::new();
        for root in roots {
            let root_id = root.id().clone();
            // Starts already admitted finish (publish or roll back) first.
            loop {
                let started = self.inner.started.notified();
                if !lock(&self.inner.starting).contains_key(&root_id) {
                    break;
                }
                started.await;
            }
            // Stopping the top-level activations stops their subtrees child-first.
            let members = self.tree_activations(&root_id);
            for member in &members {
                if member.parent.id == root_id {
                    member.stop.cancel();
                }
            }
            for member in members {
                let mut settled = member.settled.subscribe();
                let _ = settled.wait_for(Option::is_some).await;
                if let Err(err) = self.teardown_of(&member.child_id) {
                    failures.push(format!("{}: {err}", member.child_id));
                }
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(SubagentError::Teardown(failures.join("; ")))
        }
    }

    /// Join the progressing work of `root`'s tree: wait until every member
    /// is settled or idle and waiting (on parked input, or on children of
    /// its own, which are joined in their turn). Returns whether there was
    /// any such work; a host re-checks the root's own idleness after `true`.
    pub async fn wait_for_tree_work(&self, root: &Arc<dyn Agent>) -> bool {
        let members = self.tree_activations(root.id());
        let mut joined = false;
        for member in members {
            let Some(agent) = self.registry().get(&member.child_id) else {
                continue;
            };
            // Idle and not about to settle: parked, or waiting on its own children.
            let parked = || {
                agent.status() == AgentStatus::Idle
                    && (member.parked.load(Ordering::SeqCst) || !member.owned().is_empty())
            };
            if member.settled.borrow().is_some() || parked() {
                continue;
            }
            joined = true;
            let mut settled = member.settled.subscribe();
            let mut status = agent.watch_status();
            loop {
                if settled.borrow().is_some() || parked() {
                    break;
                }
                tokio::select! {
                    changed = settled.changed() => if changed.is_err() { break },
                    changed = status.changed() => if changed.is_err() { break },
                }
            }
        }
        joined
    }
}
