//! `dsh-restate-worker`: serves dsh's Restate objects (`dsh.Inbox`,
//! `dsh.Session`) over HTTP/2 for a Restate server to call. Any number of
//! identical workers may run; register each (or the one address in front
//! of them) with the server's admin API. Until `dsh worker` exists this is
//! the worker the tests start as a real process.
//!
//! Usage: `dsh-restate-worker [--listen ADDR] [--script FILE]` (default
//! `127.0.0.1:9080`; port 0 picks one). Once bound it prints `listening on
//! http://ADDR` on stdout; it stops on SIGTERM or Ctrl-C, finishing the
//! requests in flight. Its sessions run the scripted model and test tools
//! of `script` ([`script::ScriptEnv`]).

mod script;

use std::net::SocketAddr;
use std::process::ExitCode;

use std::path::PathBuf;
use std::sync::Arc;

/// Why the worker could not start.
#[derive(Debug, thiserror::Error)]
enum WorkerError {
    #[error("usage: dsh-restate-worker [--listen ADDR] [--script FILE]")]
    Usage,
    #[error("--listen {0}: not an address (ADDR is IP:PORT)")]
    Address(String),
    #[error("{0}")]
    Script(String),
    #[error("starting the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("listening on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("dsh-restate-worker: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), WorkerError> {
    let (addr, script) = parse_args(std::env::args().skip(1))?;
    let env = script::ScriptEnv::load(script.as_deref()).map_err(WorkerError::Script)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(WorkerError::Runtime)?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| WorkerError::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| WorkerError::Bind { addr, source })?;
        println!("listening on http://{bound}");
        dsh_restate::worker::serve(listener, Arc::new(env), stopped())
            .await
            .map_err(|source| WorkerError::Bind { addr, source })
    })
}

/// The address of `--listen ADDR` (or the default) and `--script FILE`.
fn parse_args(
    mut args: impl Iterator<Item = String>,
) -> Result<(SocketAddr, Option<PathBuf>), WorkerError> {
    let mut text = "127.0.0.1:9080".to_owned();
    let mut script = None;
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--listen", Some(addr)) => text = addr,
            ("--script", Some(file)) => script = Some(PathBuf::from(file)),
            _ => return Err(WorkerError::Usage),
        }
    }
    let addr = text.parse().map_err(|_| WorkerError::Address(text))?;
    Ok((addr, script))
}

/// Resolves at SIGTERM or Ctrl-C (or never, if neither can be watched).
async fn stopped() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = terminate => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
