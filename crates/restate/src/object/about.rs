//! `dsh.Worker`: a stateless service that says which build of dsh the
//! deployment runs, so a client can refuse to drive a cluster whose
//! workers are another version ([`RestateClient::check_worker`](crate::client::RestateClient::check_worker))
//! instead of meeting the difference later as a journal mismatch.

use restate_sdk::prelude::*;

/// The dsh version this worker was built as.
pub const WORKER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The `dsh.Worker` service.
pub struct About;

#[restate_sdk::service(name = "dsh.Worker", client_visibility = "pub(crate)")]
impl About {
    /// The dsh version the worker runs.
    #[handler]
    async fn version(&self, _ctx: Context<'_>) -> HandlerResult<String> {
        Ok(WORKER_VERSION.to_owned())
    }
}
