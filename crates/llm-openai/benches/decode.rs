//! Placeholder until the decode benchmark lands.
fn main() {}
