//! The workspace's own docs, checked by `cargo test` exactly as `cargo
//! xtask check-docs` checks them: the catalogue is fresh, every `rust
//! type-equiv` block matches its source item, every public item is
//! documented. A failure names each file and item and the command to run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use xtask::{Tree, check_docs, report};

#[test]
fn the_workspace_docs_match_the_source() {
    let problems = check_docs(&Tree::workspace()).unwrap();
    assert!(problems.is_empty(), "\n{}", report(&problems));
}
