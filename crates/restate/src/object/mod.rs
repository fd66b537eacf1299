//! The Restate virtual objects, registered with the SDK: `dsh.Inbox`
//! ([`Inbox`]) and `dsh.Session` ([`Session`]), and [`endpoint`], the SDK
//! endpoint a worker serves. Each handler loads its state, calls the pure
//! rules of `crate::state` and stores the result; a refusal the caller must
//! see (a draining inbox, an existing session) is a terminal error with the
//! runtime's code, anything else is retried by the server.

mod inbox;
mod session;

pub use inbox::Inbox;
pub use session::{EventPage, Session, SessionSeed};

use restate_sdk::prelude::{Endpoint, TerminalError};

/// The HTTP status of a refusal: the request conflicts with the object's
/// state.
const CONFLICT: u16 = 409;

/// The SDK endpoint with every object of dsh bound, for a worker to serve.
pub fn endpoint() -> Endpoint {
    Endpoint::builder().bind(Inbox).bind(Session).build()
}

/// A terminal refusal: `CODE: message`, so a caller can tell it by code.
fn refused(code: &str, message: impl std::fmt::Display) -> TerminalError {
    TerminalError::new_with_code(CONFLICT, format!("{code}: {message}"))
}
