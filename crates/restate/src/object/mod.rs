//! The Restate virtual objects, registered with the SDK: `dsh.Inbox`
//! ([`Inbox`]) and `dsh.Session` ([`Session`], whose turns `turn` hosts);
//! `crate::worker` binds them into the endpoint a worker serves. Each handler loads its state, calls the pure
//! rules of `crate::state` and stores the result; a refusal the caller must
//! see (a draining inbox, an existing session) is a terminal error with the
//! runtime's code, anything else is retried by the server.

mod about;
mod inbox;
mod session;
mod turn;
mod view;

pub use crate::state::inbox::InboxStatus;
pub use about::{About, WORKER_VERSION};
pub use inbox::{ClaimedItem, Inbox};
pub use session::{EventPage, Session, SessionSeed};
pub use turn::{MODEL_ATTEMPTS, UNMETERED, WORKER_STOPPED_TOOL_CALL};

use restate_sdk::prelude::TerminalError;

/// The HTTP status of a refusal: the request conflicts with the object's
/// state.
const CONFLICT: u16 = 409;

/// A terminal refusal: `CODE: message`, so a caller can tell it by code.
fn refused(code: &str, message: impl std::fmt::Display) -> TerminalError {
    TerminalError::new_with_code(CONFLICT, format!("{code}: {message}"))
}
