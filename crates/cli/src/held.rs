//! Waiting for a tree another process holds (another `dsh` working in it
//! has its root's log locked), as `dsh send` and `dsh resume` do: try
//! again every [`HELD_POLL`] up to the command's `--wait` seconds, after
//! one line naming the holder's pid; then refuse with
//! [`CliError::Held`], naming it again. The holder is read from the
//! kernel's lock table ([`sessions::holder`]).
//!
//! Only taking the lock proves a tree free: a look at the lock table
//! ([`TreeWait::free`], done first so that nothing is built while the tree
//! is held) leaves a window in which another waiter takes the tree before
//! this one opens it. So the open itself waits too ([`take`]): a resume
//! that finds a log locked waits and tries again, under the same deadline
//! (before, the second of two waiters failed with a bare "locked by
//! another process"). The root's log is read by the resume, under the lock
//! it took; what a command read before (the recorded model, whether the
//! tree has a team, a child's catalog entry) is fixed once written.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use dsh_core::{SessionId, StoreError};

use tokio::time::Instant;

use crate::error::CliError;
use crate::observe::Reporter;
use crate::sessions;

/// How often a held tree is tried again.
const HELD_POLL: Duration = Duration::from_millis(100);

/// One command's wait for a held tree: its deadline and whether the
/// person was told.
#[derive(Debug, Clone)]
pub(crate) struct HeldWait {
    name: String,
    wait: u64,
    until: Instant,
    told: bool,
}

impl HeldWait {
    /// A wait of `wait` seconds, from now, for the tree the person named
    /// `name`.
    pub(crate) fn new(name: &str, wait: u64) -> Self {
        Self {
            name: name.to_owned(),
            wait,
            until: Instant::now() + Duration::from_secs(wait),
            told: false,
        }
    }

    /// The tree was found held by `pid` (when the system says): refuse
    /// once the wait is over; otherwise say so (the first time, on
    /// `reporter` or stderr) and pause until the next try.
    ///
    /// # Errors
    /// [`CliError::Held`] once the wait is over.
    ///
    /// # Cancel safety
    /// Cancel safe: a drop only ends the pause early.
    pub(crate) async fn held(
        &mut self,
        pid: Option<u32>,
        reporter: Option<&Reporter>,
    ) -> Result<(), CliError> {
        let now = Instant::now();
        if now >= self.until {
            return Err(CliError::Held {
                name: self.name.clone(),
                pid,
                waited: self.wait,
            });
        }
        if !self.told {
            self.told = true;
            let pid = pid.map(|pid| format!(" (pid {pid})")).unwrap_or_default();
            crate::run::say(
                reporter,
                &format!(
                    "`{}` is held by another process{pid}; waiting up to {} s for it",
                    self.name, self.wait
                ),
            );
        }
        tokio::time::sleep_until(self.until.min(now + HELD_POLL)).await;
        Ok(())
    }
}

/// The wait of a command that continues a whole tree (`dsh resume`, `dsh
/// send lead`): its [`HeldWait`] and the tree's root log.
#[derive(Debug, Clone)]
pub(crate) struct TreeWait {
    waiting: HeldWait,
    root_log: PathBuf,
}

impl TreeWait {
    /// A wait of `wait` seconds, from now, for the tree the person named
    /// `name`, whose root's log is `root_log`.
    pub(crate) fn new(name: &str, wait: u64, root_log: PathBuf) -> Self {
        Self {
            waiting: HeldWait::new(name, wait),
            root_log,
        }
    }

    /// Wait until no process holds the root's log (the kernel's lock
    /// table names it by device and inode; where it cannot, this returns
    /// at once), after one line on stderr naming the holder: the early
    /// look, before anything is built. The open still waits ([`take`]).
    ///
    /// # Errors
    /// [`CliError::Held`] when the log is still held after the wait.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads the lock table.
    pub(crate) async fn free(&mut self) -> Result<(), CliError> {
        while let Some(pid) = sessions::holder(self.root_log.clone(), false).await {
            self.waiting.held(Some(pid), None).await?;
        }
        Ok(())
    }

    /// [`take`] for this tree: the holder named is the root log's.
    ///
    /// # Errors
    /// As [`take`].
    ///
    /// # Cancel safety
    /// As [`take`].
    pub(crate) async fn take<T, Fut>(&mut self, open: impl FnMut() -> Fut) -> Result<T, CliError>
    where
        Fut: Future<Output = Result<T, CliError>>,
    {
        let root_log = self.root_log.clone();
        take(&mut self.waiting, |_| root_log.clone(), None, open).await
    }
}

/// Run `open` (a resume, which locks the logs it opens) until it does not
/// find a log another process holds; while it does, say so once (on
/// `reporter` or stderr), naming the holder of the log `log_of` gives for
/// the session the store named, and wait as [`HeldWait::held`] does.
///
/// # Errors
/// `open`'s own errors, or [`CliError::Held`] once the wait is over.
///
/// # Cancel safety
/// As `open`'s future: a drop during a pause leaves nothing open.
pub(crate) async fn take<T, Fut>(
    waiting: &mut HeldWait,
    log_of: impl Fn(&SessionId) -> PathBuf,
    reporter: Option<&Reporter>,
    mut open: impl FnMut() -> Fut,
) -> Result<T, CliError>
where
    Fut: Future<Output = Result<T, CliError>>,
{
    loop {
        match open().await {
            Err(CliError::Store(StoreError::Locked(held))) => {
                let pid = sessions::holder(log_of(&held), true).await;
                waiting.held(pid, reporter).await?;
            }
            other => return other,
        }
    }
}
