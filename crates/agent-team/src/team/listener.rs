//! The team's runtime listener: a member that starts may take its queued
//! quiet messages; a member whose activation fails gives its tasks back.
//!
//! It listens to the lead's tree only, and does no work on the runtime's
//! bus: the callback notes the member's name in a set (at most one entry
//! per member and kind, so bounded by the roster) and rings a doorbell
//! channel of capacity one. One task on the team's tracker drains the set
//! and runs each batch as one more tracked task, so a burst of events
//! costs one batch, not a task per event.

use std::sync::{Arc, Mutex, Weak};

use dsh_core::observe::Subscription;
use dsh_core::{SessionId, StopReason};
use dsh_subagent::SubagentEvent;
use tokio::sync::mpsc;

use super::ledger::Ledger;
use super::{Inner, Team, lock};

/// The listener's registration; dropping it (at shutdown) ends its task.
#[derive(Default)]
pub(super) struct Listener {
    subscription: Mutex<Option<Subscription>>,
}

impl Listener {
    /// Whether the listener is registered (its task counts as team work).
    pub(super) fn is_attached(&self) -> bool {
        lock(&self.subscription).is_some()
    }

    /// Unregister: the doorbell's sender goes with the callback, which ends
    /// the listener's task.
    pub(super) fn detach(&self) {
        lock(&self.subscription).take();
    }
}

/// What the listener owes the team: names to flush and names whose tasks
/// go back, each at most once.
#[derive(Debug, Default, PartialEq, Eq)]
struct Work {
    flush: Vec<String>,
    release: Vec<String>,
}

/// The callback's half: the pending work and the doorbell's sender. Only
/// the callback holds the sender, so unregistering it closes the channel
/// and ends the listener's task.
struct Doorbell {
    work: Arc<Mutex<Work>>,
    ring: mpsc::Sender<()>,
}

impl Doorbell {
    /// Note what `event` asks of the member `name_of` finds for it, and
    /// ring. Never blocks and never allocates more than one entry per
    /// member and kind.
    fn note(&self, event: &SubagentEvent, name_of: impl Fn(&SessionId) -> Option<String>) {
        let (list, info) = match event {
            SubagentEvent::Start(info) => (Kind::Flush, info),
            SubagentEvent::End(info, outcome) if outcome.stop_reason() == StopReason::ERROR => {
                (Kind::Release, info)
            }
            _ => return,
        };
        let Some(name) = name_of(&info.child_id) else {
            return;
        };
        {
            let mut work = lock(&self.work);
            let list = match list {
                Kind::Flush => &mut work.flush,
                Kind::Release => &mut work.release,
            };
            if !list.contains(&name) {
                list.push(name);
            }
        }
        // Full means a ring is pending already; closed means shutdown.
        let _ = self.ring.try_send(());
    }
}

/// Take what is owed so far.
fn take(work: &Mutex<Work>) -> Work {
    std::mem::take(&mut lock(work))
}

enum Kind {
    Flush,
    Release,
}

impl Team {
    /// Register the listener on the lead's tree and start its task.
    pub(super) fn listen(&self) {
        let (ring, mut rung) = mpsc::channel(1);
        let owed = Arc::new(Mutex::new(Work::default()));
        let doorbell = Doorbell {
            work: owed.clone(),
            ring,
        };
        let ledger: Arc<Ledger> = self.inner.ledger.clone();
        let subscription = self
            .inner
            .runtime
            .listen_tree(self.inner.lead.id(), move |event| {
                doorbell.note(event, |id| {
                    ledger.read(|state| {
                        state
                            .member_by_session(id)
                            .map(|member| member.record.name.clone())
                    })
                });
            });
        *lock(&self.inner.listener.subscription) = Some(subscription);
        let weak: Weak<Inner> = Arc::downgrade(&self.inner);
        self.inner.tasks.spawn(async move {
            while rung.recv().await.is_some() {
                let work = take(&owed);
                let Some(inner) = weak.upgrade() else { return };
                let team = Team { inner };
                let tasks = team.inner.tasks.clone();
                // One tracked task per batch, so the team counts as busy
                // while it runs.
                let _ = tasks.spawn(async move { team.owe(work).await }).await;
            }
        });
    }

    async fn owe(&self, work: Work) {
        // Errors stay visible: the messages stay queued, and the next send
        // or recovery retries and reports them.
        let flushes = work.flush.into_iter().map(|name| async move {
            let _ = self.flush(name).await;
        });
        let releases = work.release.into_iter().map(|name| async move {
            let note = format!("released: the owner `{name}` failed");
            let _ = self.release_tasks(&name, &note).await;
        });
        futures::future::join(
            futures::future::join_all(flushes),
            futures::future::join_all(releases),
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use dsh_subagent::{RunInfo, RunOutcome};

    use super::*;

    fn info(child: &SessionId) -> RunInfo {
        RunInfo {
            provider: "spawn".into(),
            name: child.to_string(),
            label: String::new(),
            child_id: child.clone(),
            parent_session_id: SessionId::generate(),
            root: SessionId::generate(),
            local: true,
        }
    }

    /// However many events arrive before the task drains them, the work
    /// holds each member once per kind, strangers not at all, and the
    /// doorbell one ring at most.
    #[test]
    fn a_burst_of_events_is_bounded_by_the_roster() {
        let (ring, mut rung) = mpsc::channel(1);
        let owed = Arc::new(Mutex::new(Work::default()));
        let doorbell = Doorbell {
            work: owed.clone(),
            ring,
        };
        let members: Vec<SessionId> = (0..3).map(|_| SessionId::generate()).collect();
        let strangers: Vec<SessionId> = (0..3).map(|_| SessionId::generate()).collect();
        let name_of = |id: &SessionId| {
            members
                .iter()
                .position(|member| member == id)
                .map(|i| format!("m{i}"))
        };
        for i in 0..1000usize {
            let id = if i % 2 == 0 {
                &members[i % 3]
            } else {
                &strangers[i % 3]
            };
            let event = match i % 5 {
                0 => SubagentEvent::End(info(id), RunOutcome::Error("boom".into())),
                1 => SubagentEvent::ProviderRemoved("spawn".into()),
                _ => SubagentEvent::Start(info(id)),
            };
            doorbell.note(&event, name_of);
        }
        let mut work = take(&owed);
        work.flush.sort();
        work.release.sort();
        assert_eq!(
            work,
            Work {
                flush: vec!["m0".into(), "m1".into(), "m2".into()],
                release: vec!["m0".into(), "m1".into(), "m2".into()],
            }
        );
        assert!(rung.try_recv().is_ok());
        assert!(rung.try_recv().is_err(), "one ring for the whole burst");
        assert_eq!(take(&owed), Work::default());
        drop(doorbell);
        assert!(
            rung.try_recv()
                .is_err_and(|err| err == mpsc::error::TryRecvError::Disconnected),
            "the callback's doorbell is the only sender"
        );
    }
}
