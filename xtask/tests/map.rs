//! The architecture map's check (`xtask::map`): on the workspace, the map
//! names only paths and items that exist, names every crate, stays within
//! its size and has its numbers page; on a scratch copy of the fixture
//! tree, each way a map can drift fails naming the line and the span.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::Path;

use xtask::map::{MAP_PATH, MAX_BYTES, PERFORMANCE_PATH};
use xtask::{Problem, Tree, Workspace};

fn check(root: &Path) -> Vec<Problem> {
    let ws = Workspace::load(root).unwrap();
    xtask::map::check(root, &ws).unwrap()
}

#[test]
fn the_workspace_map_names_only_what_exists() {
    let tree = Tree::workspace();
    let problems = check(tree.root());
    assert!(problems.is_empty(), "\n{}", xtask::report(&problems));
    assert!(tree.root().join(MAP_PATH).is_file());
}

const MAP: &str = "# Architecture\n\n\
    ## Code map\n\n\
    ### `crates/demo`\n\n\
    Ids live in `crates/demo/src/ids.rs`; `crates/*/src/lib.rs` roots each crate.\n\
    `demo::ids::Words::check` and `Words::check` and `TicketId` exist.\n\
    `std::sync::Arc` is outside; `turn/start`, `dsh run` and `<id>.jsonl` are prose.\n\n\
    **Architecture invariant:** none.\n\n**API boundary:** all.\n\n\
    ```\n`crates/fenced/nothing.rs` is code\n```\n";

/// A copy of the fixture tree with a map and a numbers page.
fn scratch(map: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    common::copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/demo"),
        dir.path(),
    );
    fs::write(dir.path().join(MAP_PATH), map).unwrap();
    fs::write(dir.path().join(PERFORMANCE_PATH), "# Performance\n").unwrap();
    dir
}

fn lines(problems: &[Problem]) -> Vec<String> {
    problems.iter().map(Problem::to_string).collect()
}

#[test]
fn a_map_that_names_what_exists_passes() {
    let dir = scratch(MAP);
    assert_eq!(lines(&check(dir.path())), Vec::<String>::new());
}

#[test]
fn a_missing_file_item_or_crate_paragraph_fails_naming_its_line() {
    let map = MAP
        .replace("ids.rs", "names.rs")
        .replace("Words::check", "Words::verify")
        .replace("`TicketId`", "`TokenId`")
        .replace("### `crates/demo`", "### demo");
    let dir = scratch(&map);
    assert_eq!(
        lines(&check(dir.path())),
        [
            "ARCHITECTURE.md:7: `crates/demo/src/names.rs` does not exist",
            "ARCHITECTURE.md:8: `demo::ids::Words::verify`: `demo` defines no `verify`",
            "ARCHITECTURE.md:8: `Words::verify` is defined in no crate of the workspace",
            "ARCHITECTURE.md:8: `TokenId` is defined in no crate of the workspace",
            "ARCHITECTURE.md: the map never names `crates/demo`: give it a paragraph",
        ]
    );
}

#[test]
fn a_relative_file_or_a_crateless_path_cannot_be_checked_and_fails() {
    let dir = scratch(&format!("{MAP}See `src/ids.rs` and `ids::Words`.\n"));
    assert_eq!(
        lines(&check(dir.path())),
        [
            "ARCHITECTURE.md:18: `src/ids.rs`: name a file from the workspace root (`crates/<crate>/src/...`), so it can be checked",
            "ARCHITECTURE.md:18: `ids::Words`: start an item path with its crate (`dsh_core::...`) or its type",
        ]
    );
}

#[test]
fn a_long_map_or_a_missing_numbers_page_fails() {
    let dir = scratch(&format!("{MAP}{}\n", "word ".repeat(MAX_BYTES / 5)));
    fs::remove_file(dir.path().join(PERFORMANCE_PATH)).unwrap();
    let found = lines(&check(dir.path()));
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].starts_with("ARCHITECTURE.md: the map is 30"),
        "{found:?}"
    );
    assert!(found[1].starts_with("docs/performance.md: "), "{found:?}");
}

#[test]
fn a_member_named_on_the_wrong_type_fails() {
    let dir = scratch(&format!(
        "{MAP}`demo::ids::Words::fresh` and `Words::fresh` name TicketId's method.\n"
    ));
    assert_eq!(
        lines(&check(dir.path())),
        [
            "ARCHITECTURE.md:18: `demo::ids::Words::fresh`: `Words` has no `fresh`",
            "ARCHITECTURE.md:18: `Words::fresh` is defined in no crate of the workspace",
        ]
    );
}

#[test]
fn a_crate_section_without_its_invariant_or_boundary_fails() {
    let dir = scratch(&MAP.replace("**API boundary:** all.", ""));
    assert_eq!(
        lines(&check(dir.path())),
        ["ARCHITECTURE.md:5: the section `crates/demo` has no **API boundary:** line"]
    );
}
