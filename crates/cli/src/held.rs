//! Waiting for a tree another process holds (another `dsh` working in it
//! has its root's log locked), as `dsh send` and `dsh resume` do: try
//! again every [`HELD_POLL`] up to the command's `--wait` seconds, after
//! one line naming the holder's pid; then refuse with
//! [`CliError::Held`], naming it again. The holder is read from the
//! kernel's lock table ([`sessions::holder`]).

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::CliError;
use crate::observe::Reporter;
use crate::sessions;

/// How often a held tree is tried again.
const HELD_POLL: Duration = Duration::from_millis(100);

/// One command's wait for a held tree: its deadline and whether the
/// person was told.
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

/// Wait, up to `wait` seconds, until no process holds the log at `path`
/// (the kernel's lock table names it by device and inode; where it
/// cannot, this returns at once and a held log is refused later by the
/// store), after one line on stderr naming the holder; then refuse,
/// naming it again.
///
/// # Errors
/// [`CliError::Held`] when the log is still held after the wait.
///
/// # Cancel safety
/// Cancel safe: it only reads the lock table.
pub(crate) async fn wait_free(path: &Path, name: &str, wait: u64) -> Result<(), CliError> {
    let mut waiting = HeldWait::new(name, wait);
    while let Some(pid) = sessions::holder(path.to_path_buf(), false).await {
        waiting.held(Some(pid), None).await?;
    }
    Ok(())
}
