//! A worker: the process that runs dsh's Restate objects for a server.
//! [`serve`] binds `dsh.Session` and `dsh.Inbox` over HTTP/2 on a listener
//! the caller opened (`dsh worker --listen ADDR`, the test worker) until a
//! shutdown future resolves. The model and tools a session's turns use
//! come from the caller's [`WorkerEnv`], asked afresh at each turn on
//! whichever worker runs it: every worker of one deployment must answer
//! alike (same configuration, same tools), or a replayed turn diverges.

use std::future::Future;
use std::sync::Arc;

use dsh_core::{AgentOptions, Model, SessionHeader, Tool};
use restate_sdk::prelude::{Endpoint, HttpServer};

use crate::object::{About, Inbox, Session};

/// What one session's turns run with.
pub struct Composed {
    /// The model the turn asks.
    pub model: Arc<dyn Model>,
    /// The tools its model may call (names unique).
    pub tools: Vec<Arc<dyn Tool>>,
    /// The model-visible system prompt.
    pub system: String,
    /// Model id, output cap, step limit.
    pub options: AgentOptions,
    /// The deepest delegation depth a child started by `subagent` or
    /// `fork` may have (the root is 0, its children 1), as a local run's
    /// `max-depth` setting.
    pub max_depth: u32,
}

impl std::fmt::Debug for Composed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tools: Vec<&str> = self.tools.iter().map(|tool| tool.name()).collect();
        f.debug_struct("Composed")
            .field("model", &self.model.name())
            .field("tools", &tools)
            .field("options", &self.options)
            .field("max_depth", &self.max_depth)
            .finish_non_exhaustive()
    }
}

/// Where a worker gets a session's model and tools from (the CLI: from
/// `dsh.toml`; tests: a scripted model and counting tools).
pub trait WorkerEnv: Send + Sync + 'static {
    /// Compose the agent `header` describes.
    ///
    /// # Errors
    /// A session this worker cannot run (an unknown model route, say): its
    /// turn fails for good with this text, named with the session id.
    fn compose(&self, header: &SessionHeader) -> Result<Composed, String>;
}

/// The SDK endpoint with every object of dsh bound over `env`.
pub fn endpoint(env: Arc<dyn WorkerEnv>) -> Endpoint {
    Endpoint::builder()
        .bind(About)
        .bind(Inbox)
        .bind(Session::new(env))
        .build()
}

/// Serve dsh's objects on `listener` until `shutdown` resolves, then
/// finish the requests in flight. Register the worker's address (or the
/// one address in front of several workers) with the server once
/// ([`RestateClient::register_deployment`](crate::client::RestateClient::register_deployment)).
///
/// The listener gets `TCP_NODELAY` first: see `no_delay`.
///
/// # Errors
/// The listener refused `TCP_NODELAY` (it is not a TCP socket); nothing
/// was served.
///
/// # Cancel safety
/// Dropped, the worker stops at once: the server retries the invocations
/// it was running on another worker (a journaled step is not run again).
pub async fn serve(
    listener: tokio::net::TcpListener,
    env: Arc<dyn WorkerEnv>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    no_delay(&listener)?;
    HttpServer::new(endpoint(env))
        .serve_with_cancel(listener, shutdown)
        .await;
    Ok(())
}

/// Set `TCP_NODELAY` on `listener`; the connections it accepts inherit it
/// (Linux, the BSDs, macOS). The server talks to a worker in small HTTP/2
/// frames, one journal entry at a time; with Nagle's algorithm on, a
/// frame written while the previous one waits for its delayed ACK waited
/// ~40 ms, and every call between objects and most journaled steps paid
/// that once or more (a one-step turn took ~380 ms on loopback, 40 ms
/// without; `docs/performance.md`). The SDK accepts the connections
/// itself, so the listener is the one place to set it.
///
/// # Errors
/// The socket refused the option (it is not a TCP socket).
fn no_delay(listener: &tokio::net::TcpListener) -> std::io::Result<()> {
    socket2::SockRef::from(listener).set_tcp_nodelay(true)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::net::TcpStream;

    #[tokio::test]
    async fn connections_a_worker_accepts_have_no_delay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        super::no_delay(&listener).unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = TcpStream::connect(addr).unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(accepted.nodelay().unwrap());
    }
}
