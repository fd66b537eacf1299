//! Placeholder replaced by the team benchmark.
fn main() {}
