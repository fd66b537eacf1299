//! [`serve`]: run dsh's objects ([`crate::object::endpoint`]) over HTTP/2
//! on a listener the caller opened, for `dsh worker`, so that the CLI
//! never sees the SDK. Stands until the worker that composes each
//! session's model and tools lands (`worker::serve` with its environment,
//! issue 35), which replaces it.

use std::future::Future;

use restate_sdk::prelude::HttpServer;

/// Serve dsh's objects on `listener` until `shutdown` resolves, then
/// finish the requests in flight. Register the worker's address with the
/// server once
/// ([`RestateClient::register_deployment`](crate::client::RestateClient::register_deployment)).
///
/// # Cancel safety
/// Dropped, the worker stops at once: the server retries the invocations
/// it was running on another worker.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    HttpServer::new(crate::object::endpoint())
        .serve_with_cancel(listener, shutdown)
        .await;
}
