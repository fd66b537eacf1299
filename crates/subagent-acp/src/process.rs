//! The agent's process, as `dsh-process` starts and stops it (its own
//! group, a scrubbed environment, the parent-death signal, the stop
//! ladder): this module only says what to start for an [`AcpConfig`] and
//! turns a failed start into a [`Fault`]. [`ProcStat`] is re-exported for
//! the tests that look at the agents' processes.

use std::path::Path;

pub use dsh_process::ProcStat;
pub(crate) use dsh_process::{ProcessGroup, Spawned};

use crate::config::AcpConfig;
use crate::fault::Fault;

/// Start the agent in `cwd`.
pub(crate) fn spawn(config: &AcpConfig, cwd: &Path, run: &str) -> Result<Spawned, Fault> {
    dsh_process::spawn(&dsh_process::Launch {
        command: &config.command,
        args: &config.args,
        inherit_env: &config.inherit_env,
        env: &config.env,
        cwd,
        label: run,
    })
    .map_err(|err| Fault::Spawn {
        command: err.command,
        reason: err.reason,
    })
}
