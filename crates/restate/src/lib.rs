//! dsh on the Restate durable-execution engine (issue 35;
//! `docs/distributed.md`). The only crate of the workspace that sees the
//! Restate SDK (`restate-sdk`, pinned exactly).
//!
//! Each agent session is two Restate virtual objects keyed by its session
//! id: `dsh.Session` holds the log (header, event chunks, head) and runs
//! the turns, the harness's turn machine with every effect journaled;
//! `dsh.Inbox` holds the input waiting for a turn and schedules turns, so
//! input is never stuck behind a running turn. The objects' state is in
//! [`state`], plain types tested without a server; the handlers in
//! [`object`]; [`worker::serve`] serves them with the model and tools of a
//! [`worker::WorkerEnv`]. From outside, [`client::RestateClient`] starts
//! sessions, sends input and reads status; [`tree`] lists and drains a
//! tree; [`store::RestateSessionStore`] reads sessions as a `SessionStore`
//! (so dsh-cli's one export, over any store, writes a cluster's tree as
//! JSONL).

pub mod client;
pub mod object;
pub mod state;
pub mod store;
pub mod tree;
pub mod worker;
