//! dsh on the Restate durable-execution engine (work in progress, issue
//! 35; `docs/distributed.md`). The only crate of the workspace that sees
//! the Restate SDK (`restate-sdk`, pinned exactly).
//!
//! Each agent session is two Restate virtual objects keyed by its session
//! id: `dsh.Session` holds the log (header, event chunks, head) and will
//! run the turns; `dsh.Inbox` holds the input waiting for a turn, so input
//! is never stuck behind a running turn. The objects' state is in
//! [`state`], plain types tested without a server; the handlers in
//! [`object`]; [`client::RestateClient`] calls them from outside, and
//! [`store::RestateSessionStore`] reads sessions through it.

pub mod client;
pub mod export;
pub mod object;
pub mod state;
pub mod store;
pub mod tree;
pub mod worker;
