//! The workspace's own docs, checked by `cargo test` exactly as `cargo
//! xtask check-docs` checks them: the catalogue is fresh, every `rust
//! type-equiv` block matches its source item, every public item is
//! documented. A failure names each file and item and the command to run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use xtask::{Tree, check_docs, generate_catalog, report};

#[test]
fn the_workspace_docs_match_the_source() {
    let problems = check_docs(&Tree::workspace()).unwrap();
    assert!(problems.is_empty(), "\n{}", report(&problems));
}

/// `dsh_core`'s built-in event types are one macro table (`event_kinds!`,
/// behind `EventPayload::kind`); the catalogue reads its rows from there.
#[test]
fn the_catalogue_lists_the_built_in_event_types() {
    let catalogue = generate_catalog(&Tree::workspace()).unwrap();
    let events = &catalogue[catalogue.find("\n## Events\n").unwrap()..];
    let start = events
        .find("### `dsh_core::session::EventPayload::kind`")
        .expect("the built-in event table is missing");
    let table = &events[start..];
    let table = &table[..table[4..].find("\n### ").map_or(table.len(), |end| end + 4)];
    for row in [
        "| `turn/start` | `TurnStart` | `TurnStart` |",
        "| `inbox/claimed` | `InboxClaimed` | `InboxIds` |",
        "| `usage` | `Usage` | `Usage` |",
        "| (any other) | `Extension` | `{ kind: String, payload: ExtensionPayload }` |",
    ] {
        assert!(table.contains(row), "{row} is missing from\n{table}");
    }
}
