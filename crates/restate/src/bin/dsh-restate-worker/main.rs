//! `dsh-restate-worker`: serves dsh's Restate objects (`dsh.Inbox`,
//! `dsh.Session`) over HTTP/2 for a Restate server to call. Any number of
//! identical workers may run; register each (or the one address in front
//! of them) with the server's admin API. Until `dsh worker` exists this is
//! the worker the tests start as a real process.
//!
//! Usage: `dsh-restate-worker [--listen ADDR]` (default `127.0.0.1:9080`;
//! port 0 picks one). Once bound it prints `listening on http://ADDR` on
//! stdout; it stops on SIGTERM or Ctrl-C, finishing the requests in flight.

use std::net::SocketAddr;
use std::process::ExitCode;

use restate_sdk::prelude::HttpServer;

/// Why the worker could not start.
#[derive(Debug, thiserror::Error)]
enum WorkerError {
    #[error("usage: dsh-restate-worker [--listen ADDR]")]
    Usage,
    #[error("--listen {0}: not an address (ADDR is IP:PORT)")]
    Address(String),
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
    let addr = listen_addr(std::env::args().skip(1))?;
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
        HttpServer::new(dsh_restate::object::endpoint())
            .serve_with_cancel(listener, stopped())
            .await;
        Ok(())
    })
}

/// The address of `--listen ADDR`, or the default.
fn listen_addr(mut args: impl Iterator<Item = String>) -> Result<SocketAddr, WorkerError> {
    let text = match (args.next().as_deref(), args.next(), args.next()) {
        (None, _, _) => "127.0.0.1:9080".to_owned(),
        (Some("--listen"), Some(addr), None) => addr,
        _ => return Err(WorkerError::Usage),
    };
    text.parse().map_err(|_| WorkerError::Address(text))
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
