//! The suites' view of the one Restate harness,
//! [`dsh_test_support::restate`]: the namespace, the server, the workers,
//! the front and the cluster under the names these suites have always
//! used.
#![allow(dead_code, unused_imports)]

pub mod cluster;
pub mod logs;

pub use dsh_test_support::restate::{
    Front, Server, WORKER_ADDR, Worker, in_namespace, inside, isolated, run, test_worker,
};
