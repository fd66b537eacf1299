//! `dsh worker --listen ADDR`: serve dsh's Restate objects for a Restate
//! server to call, one of any number of identical workers behind the
//! address registered with the server (`docs/distributed.md`). Once bound
//! it prints `listening on http://ADDR` on stdout; SIGINT, SIGTERM or
//! SIGHUP stops it after the calls in flight (the server sends what was cut
//! to another worker).
//!
//! Not built yet: the turns (`dsh.Session`'s `run_turn`, with the model and
//! tools dsh.toml names, built as `dsh run` builds them) land with the
//! engine of issue 35; today a worker serves the logs and the inboxes.

use std::net::SocketAddr;

use crate::error::CliError;
use crate::signals::Signals;

/// Run the command.
///
/// # Cancel safety
/// Dropped, the worker stops at once; the server retries what it was
/// running on another worker.
pub async fn worker(listen: &str) -> Result<(), CliError> {
    let addr: SocketAddr = listen
        .parse()
        .map_err(|_| CliError::BadFlag(format!("--listen `{listen}`: not an address (IP:PORT)")))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| CliError::Refused(format!("cannot listen on {addr}: {err}")))?;
    let bound = listener.local_addr()?;
    let mut signals = Signals::install()?;
    {
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on http://{bound}")?;
        stdout.flush()?;
    }
    dsh_restate::serve::serve(listener, async move {
        signals.recv().await;
    })
    .await;
    Ok(())
}
