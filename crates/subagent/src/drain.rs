//! Tree shutdown and joining: `drain_descendants` closes admission below
//! some roots and stops their trees child-first, waiting for every start
//! and teardown; `drain_continuable_children` stops some live children of
//! one parent and waits for them, closing nothing; `wait_for_tree_work` joins the work in progress below one
//! root so a host knows when a run is really over. Unrelated trees are
//! never touched.

use crate::{DeliveryError, InfraError};
use std::sync::Arc;

use dsh_core::{Agent, AgentRef, AgentStatus, SessionId};

use crate::activation::Activation;
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
        self.admissions().close(&references);
        let mut failures = Vec::new();
        for root in roots {
            let root_id = root.id();
            // Work admitted before the close publishes or rolls back first.
            self.admissions().settled(root_id).await;
            let members = self.activations().tree(root_id);
            let top: Vec<_> = members
                .iter()
                .filter(|member| {
                    !members
                        .iter()
                        .any(|creator| creator.is_agent(member.parent()))
                })
                .cloned()
                .collect();
            stop_and_wait(&top).await;
            // Every member below a stopped one settled before it did.
            teardown_failures(&members, &mut failures);
        }
        failed(failures)
    }

    /// The seed's second drain: stop the live continuable children `ids`
    /// of the exact live `parent` (each stop reaches what that child owns,
    /// child-first) and wait until they settled. Unlike
    /// [`SubagentRuntime::drain_descendants`] it closes no admission: the
    /// parent may start or resume children again at once. An id that is
    /// not a live local child of this parent (an external run, a cold or
    /// settled child, another agent's child) is left alone.
    ///
    /// # Errors
    /// `NOT_LIVE` when `parent` is not the exact live agent; every
    /// teardown failure of the stopped children, reported together after
    /// all of them settled.
    ///
    /// # Cancel safety
    /// The stops are requested before the first await; a drop only stops
    /// the waiting: the runtime finishes every teardown it started.
    pub async fn drain_continuable_children(
        &self,
        parent: &Arc<dyn Agent>,
        ids: &[SessionId],
    ) -> Result<(), SubagentError> {
        let reference = parent.reference();
        if !self.registry().is_live(&reference) {
            return Err(SubagentError::Delivery(DeliveryError::NotLive(
                reference.id,
            )));
        }
        let targets: Vec<_> = ids
            .iter()
            .filter_map(|id| self.activations().get(id))
            .filter(|child| child.parent() == &reference && child.agent().is_some())
            .collect();
        stop_and_wait(&targets).await;
        let mut failures = Vec::new();
        teardown_failures(&targets, &mut failures);
        failed(failures)
    }

    /// Join the progressing work of `root`'s tree: wait until every member
    /// is settled or idle and waiting (on parked input, or on children of
    /// its own, which are joined in their turn). Returns whether there was
    /// any such work; a host re-checks the root's own idleness after `true`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits; a drop changes nothing.
    pub async fn wait_for_tree_work(&self, root: &Arc<dyn Agent>) -> bool {
        let members = self.activations().tree(root.id());
        let mut joined = false;
        for member in members {
            let Some(agent) = self.registry().get(member.child_id()) else {
                continue;
            };
            // Idle and not about to settle: parked, or waiting on its own children.
            let parked = || {
                agent.status() == AgentStatus::Idle
                    && (member.is_parked() || member.owns_children())
            };
            if member.settled().borrow().is_some() || parked() {
                continue;
            }
            joined = true;
            let mut settled = member.settled();
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

/// Stop `members` and wait until each settled.
async fn stop_and_wait(members: &[Arc<Activation>]) {
    for member in members {
        member.stop().cancel();
    }
    for member in members {
        let mut settled = member.settled();
        let _ = settled.wait_for(Option::is_some).await;
    }
}

/// Add the teardown failure of each settled member of `members`.
fn teardown_failures(members: &[Arc<Activation>], failures: &mut Vec<String>) {
    for member in members {
        if let Some(Err(err)) = member
            .settled()
            .borrow()
            .as_ref()
            .map(|settled| settled.teardown.clone())
        {
            failures.push(format!("{}: {err}", member.child_id()));
        }
    }
}

/// All the teardown failures as one error, if there were any.
fn failed(failures: Vec<String>) -> Result<(), SubagentError> {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(SubagentError::Infra(InfraError::Teardown(
            failures.join("; "),
        )))
    }
}
