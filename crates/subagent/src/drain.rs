//! Tree shutdown and joining: `drain_descendants` closes admission below
//! some roots and stops their trees child-first, waiting for every start
//! and teardown; `wait_for_tree_work` joins the work in progress below one
//! root so a host knows when a run is really over. Unrelated trees are
//! never touched.

use crate::InfraError;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use dsh_core::{Agent, AgentRef, AgentStatus};

use crate::error::SubagentError;
use crate::runtime::SubagentRuntime;

impl SubagentRuntime {
    /// Close admission below `roots` (`DRAINING`) until each root leaves the
    /// registry, cancel their starts and resumes not yet published, and stop
    /// their trees child-first: every member whose creator is not itself a
    /// live member is stopped (its stop reaches what it owns), and only those
    /// are waited for. Trees of other roots keep running.
    ///
    /// # Errors
    /// Every teardown failure, reported together after all branches settled.
    ///
    /// # Cancel safety
    /// Admission is closed and the work in flight cancelled before the first
    /// await. A drop while waiting for work in flight stops nothing more
    /// (call again to finish); a drop after the stops only stops the
    /// waiting: the runtime finishes every teardown it started.
    pub async fn drain_descendants(&self, roots: &[Arc<dyn Agent>]) -> Result<(), SubagentError> {
        let references: Vec<AgentRef> = roots.iter().map(|root| root.reference()).collect();
        self.inner.admissions.close(&references);
        let mut failures = Vec::new();
        for root in roots {
            let root_id = root.id();
            // Work admitted before the close publishes or rolls back first.
            self.inner.admissions.settled(root_id).await;
            let members = self.inner.activations.tree(root_id);
            let top: Vec<_> = members
                .iter()
                .filter(|member| {
                    !members
                        .iter()
                        .any(|creator| creator.is_agent(&member.parent))
                })
                .cloned()
                .collect();
            for member in &top {
                member.stop.cancel();
            }
            for member in &top {
                let mut settled = member.settled.subscribe();
                let _ = settled.wait_for(Option::is_some).await;
            }
            // Every member below a stopped one settled before it did.
            for member in &members {
                if let Some(Err(err)) = member
                    .settled
                    .borrow()
                    .as_ref()
                    .map(|settled| settled.teardown.clone())
                {
                    failures.push(format!("{}: {err}", member.child_id));
                }
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(SubagentError::Infra(InfraError::Teardown(
                failures.join("; "),
            )))
        }
    }

    /// Join the progressing work of `root`'s tree: wait until every member
    /// is settled or idle and waiting (on parked input, or on children of
    /// its own, which are joined in their turn). Returns whether there was
    /// any such work; a host re-checks the root's own idleness after `true`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits; a drop changes nothing.
    pub async fn wait_for_tree_work(&self, root: &Arc<dyn Agent>) -> bool {
        let members = self.inner.activations.tree(root.id());
        let mut joined = false;
        for member in members {
            let Some(agent) = self.registry().get(&member.child_id) else {
                continue;
            };
            // Idle and not about to settle: parked, or waiting on its own children.
            let parked = || {
                agent.status() == AgentStatus::Idle
                    && (member.parked.load(Ordering::SeqCst) || member.owns_children())
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
