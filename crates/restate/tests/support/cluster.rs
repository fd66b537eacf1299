//! [`Cluster`]: a server and two test workers behind one failover front
//! ([`dsh_test_support::restate::cluster`]).

pub use dsh_test_support::restate::cluster::{Cluster, POLL, lead};
