//! Placeholder until the overhead benchmark lands.
fn main() {}
