//! The objects' state as plain Rust types, independent of the SDK: the
//! `Session` object's log ([`log`]) and the `Inbox` object's lists
//! ([`inbox`]). The handlers in `crate::object` only load, call and store
//! them, so every rule here is tested without a server.

pub mod inbox;
pub mod log;
