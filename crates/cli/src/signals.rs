//! The signals that stop a command cleanly: SIGINT (Ctrl-C), SIGTERM and
//! SIGHUP are handled alike by `dsh run` and `dsh send` (the tree is
//! interrupted and drained, its sessions kept, and the exit code is
//! `128 + n`), so no agent process, an ACP child included, is left running
//! under init when a terminal closes or a supervisor stops `dsh`. SIGKILL
//! cannot be caught: after one, the sessions are what the store made
//! durable, and the next command finds them as a crash left them.

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::error::{CliError, SIGHUP, SIGINT, SIGTERM};

/// The installed handlers.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    /// Install the handlers; from now on these signals no longer end the
    /// process by themselves.
    ///
    /// # Errors
    /// [`CliError::Signals`] when the OS refuses a handler.
    pub fn install() -> Result<Self, CliError> {
        let install = |kind: SignalKind| signal(kind).map_err(CliError::Signals);
        Ok(Self {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
        })
    }

    /// The next of the three signals to arrive, by number.
    ///
    /// # Cancel safety
    /// Cancel-safe: a signal that arrives while no `recv` is polled is kept
    /// for the next one.
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => SIGINT,
            _ = self.terminate.recv() => SIGTERM,
            _ = self.hangup.recv() => SIGHUP,
        }
    }
}
