//! The checker on a small fixture crate (`tests/fixtures/demo`, plain files
//! read as text, never compiled): the fresh tree passes, and each kind of
//! drift fails with a message that names the file, the item and the fix.
//! The fixture's catalogue is also an insta snapshot, so a change in the
//! generator's output is a reviewed diff.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use xtask::{Problem, Tree, check_docs, generate_catalog, sync_docs, write_catalog};

const FIXTURE: &str = "xtask/tests/fixtures/demo";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/demo")
}

/// A scratch copy of the fixture, to break in one way.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        common::copy_dir(&fixture(), dir.path());
        Self { dir }
    }

    fn tree(&self) -> Tree {
        Tree::at(self.dir.path(), Some("scratch"))
    }

    fn edit(&self, file: &str, from: &str, to: &str) {
        let path = self.dir.path().join(file);
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{file} has no {from:?}");
        fs::write(&path, text.replacen(from, to, 1)).unwrap();
    }

    fn problems(&self) -> Vec<Problem> {
        check_docs(&self.tree()).unwrap()
    }
}

fn only(problems: Vec<Problem>) -> Problem {
    assert_eq!(problems.len(), 1, "{}", xtask::report(&problems));
    problems.into_iter().next().unwrap()
}

#[test]
fn the_fresh_fixture_passes() {
    let problems = check_docs(&Tree::at(fixture(), Some(FIXTURE))).unwrap();
    assert!(problems.is_empty(), "{}", xtask::report(&problems));
}

#[test]
fn a_drifted_block_fails_naming_the_page_the_item_and_the_fix() {
    let scratch = Scratch::new();
    scratch.edit("docs/demo.md", "pub height: f64,", "pub height: f32,");
    let problem = only(scratch.problems());
    assert_eq!(problem.location, "docs/demo.md:5");
    assert!(
        problem.message.contains(
            "block for `demo::shapes::Shape` differs from its source at crates/demo/src/shapes.rs:5"
        ) && problem
            .message
            .contains("the block has `… : f64, pub height : f32, label")
            && problem
                .message
                .ends_with("run `cargo xtask sync-docs --root scratch`"),
        "{problem}"
    );
}

#[test]
fn a_drifted_doc_comment_fails_even_when_the_tokens_match() {
    let scratch = Scratch::new();
    scratch.edit(
        "docs/demo.md",
        "/// Whether the area is zero.",
        "/// Whether it is empty.",
    );
    let problem = only(scratch.problems());
    assert!(
        problem.message.contains("`demo::Area`")
            && problem.message.contains("doc comment line 3 differs")
            && problem.message.contains("\"Whether it is empty.\""),
        "{problem}"
    );
}

#[test]
fn layout_and_ordinary_comments_do_not_count() {
    let scratch = Scratch::new();
    scratch.edit(
        "docs/demo.md",
        "    factor: f64,\n    label: impl Into<String>,\n) -> Self;",
        "    factor: f64, // how much\n    label: impl Into<String>) -> Self;",
    );
    let problems = scratch.problems();
    assert!(problems.is_empty(), "{}", xtask::report(&problems));
}

#[test]
fn a_renamed_item_leaves_a_block_that_names_nothing() {
    let scratch = Scratch::new();
    scratch.edit(
        "crates/demo/src/shapes.rs",
        "pub trait Area {",
        "pub trait Surface {",
    );
    scratch.edit(
        "crates/demo/src/shapes.rs",
        "impl Area for",
        "impl Surface for",
    );
    scratch.edit(
        "crates/demo/src/lib.rs",
        "shapes::{Area, Shape}",
        "shapes::{Shape, Surface}",
    );
    write_catalog(&scratch.tree()).unwrap();
    let problem = only(scratch.problems());
    assert_eq!(problem.location, "docs/demo.md:20");
    assert_eq!(
        problem.message,
        "the type-equiv block names `demo::Area`, which is not a public item of the workspace"
    );
}

#[test]
fn a_block_whose_item_moved_suggests_where_it_went() {
    let scratch = Scratch::new();
    scratch.edit(
        "docs/demo.md",
        "// demo::shapes::Shape\n",
        "// demo::figures::Shape\n",
    );
    let problem = only(scratch.problems());
    assert!(
        problem
            .message
            .contains("did you mean `demo::Shape` or `demo::shapes::Shape`?"),
        "{problem}"
    );
}

#[test]
fn a_block_must_name_its_item() {
    let scratch = Scratch::new();
    scratch.edit("docs/demo.md", "// demo::Area\n", "");
    let problem = only(scratch.problems());
    assert!(
        problem.message.contains("must name the item it mirrors"),
        "{problem}"
    );
}

#[test]
fn a_missing_doc_fails_naming_the_item() {
    let scratch = Scratch::new();
    scratch.edit(
        "crates/demo/src/shapes.rs",
        "    /// A square of this side.\n",
        "",
    );
    scratch.edit(
        "crates/demo/src/events.rs",
        "        /// The offending side.\n",
        "",
    );
    write_catalog(&scratch.tree()).unwrap();
    let problems = scratch.problems();
    let lines: Vec<String> = problems.iter().map(Problem::to_string).collect();
    assert_eq!(
        lines,
        [
            "crates/demo/src/events.rs:32: field `demo::events::DemoError::TooLarge::side` has no doc comment",
            "crates/demo/src/shapes.rs:17: method `demo::shapes::Shape::square` has no doc comment",
        ]
    );
}

#[test]
fn a_stale_catalogue_fails_with_the_command_that_fixes_it() {
    let scratch = Scratch::new();
    scratch.edit(
        "crates/demo/src/lib.rs",
        "/// Build the unit square.",
        "/// Build the unit square, one metre a side.",
    );
    let problem = only(scratch.problems());
    assert!(
        problem.location.starts_with("docs/api-catalog.md:"),
        "{problem}"
    );
    assert!(
        problem.message.starts_with("the API catalogue is stale")
            && problem
                .message
                .ends_with("run `cargo xtask gen-catalog --root scratch`"),
        "{problem}"
    );
    write_catalog(&scratch.tree()).unwrap();
    assert!(scratch.problems().is_empty());
}

#[test]
fn moving_lines_leaves_the_catalogue_fresh() {
    let scratch = Scratch::new();
    scratch.edit(
        "crates/demo/src/lib.rs",
        "/// The clock type the demo measures with.",
        "\n\n\n/// The clock type the demo measures with.",
    );
    scratch.edit(
        "crates/demo/src/shapes.rs",
        "pub trait Area {",
        "\n\npub trait Area {",
    );
    let problems = scratch.problems();
    assert!(problems.is_empty(), "{}", xtask::report(&problems));
}

#[test]
fn the_crate_doc_is_the_included_readme() {
    let scratch = Scratch::new();
    scratch.edit("crates/demo/README.md", "never compiled.", "never built.");
    let problem = only(scratch.problems());
    assert!(
        problem.message.contains("never built."),
        "the README's text is the crate doc the catalogue shows: {problem}"
    );
}

#[test]
fn sync_rewrites_drifted_blocks_from_the_source() {
    let scratch = Scratch::new();
    scratch.edit("docs/demo.md", "pub height: f64,", "pub height: f32,");
    scratch.edit(
        "docs/demo.md",
        "/// Whether the area is zero.",
        "/// Stale words.",
    );
    let synced = sync_docs(&scratch.tree()).unwrap();
    assert_eq!(synced.updated, ["docs/demo.md"]);
    assert!(synced.problems.is_empty());
    let original = fs::read_to_string(fixture().join("docs/demo.md")).unwrap();
    let repaired = fs::read_to_string(scratch.dir.path().join("docs/demo.md")).unwrap();
    assert_eq!(repaired, original);
    assert!(sync_docs(&scratch.tree()).unwrap().updated.is_empty());
}

#[test]
fn the_fixture_catalogue() {
    let catalogue = generate_catalog(&Tree::at(fixture(), None)).unwrap();
    insta::assert_snapshot!(catalogue);
}

#[test]
fn attributes_leave_an_item_out_and_the_words_of_a_doc_never_do() {
    let catalogue = generate_catalog(&Tree::at(fixture(), None)).unwrap();
    for kept in [
        "#### struct `Words`",
        "`pub fn check(&self)`",
        "#### struct `OutsideTests`",
        "#### struct `FeatureNamedTest`",
    ] {
        assert!(catalogue.contains(kept), "{kept} is missing");
    }
    for left_out in ["Concealed", "secret", "OnlyInTests", "AlsoOnlyInTests"] {
        assert!(!catalogue.contains(left_out), "{left_out} is listed");
    }
}

#[test]
fn an_id_a_macro_of_the_crate_makes_is_an_item() {
    let catalogue = generate_catalog(&Tree::at(fixture(), None)).unwrap();
    assert!(
        catalogue.contains("#### struct `TicketId`\n\n`demo::ids::TicketId`"),
        "{catalogue}"
    );
    assert!(catalogue.contains("A ticket's id, made by a macro."));
    assert!(catalogue.contains("`pub fn fresh() -> Self`"));
    assert!(catalogue.contains("A fresh id starting `t-`."));
}

#[test]
fn a_table_a_macro_of_the_crate_writes_is_an_event_table() {
    let catalogue = generate_catalog(&Tree::at(fixture(), None)).unwrap();
    let events = &catalogue[catalogue.find("\n## Events\n").unwrap()..];
    let table = "### `demo::events::Phase::kind` · \
                 [crates/demo/src/events.rs](../crates/demo/src/events.rs)\n\n\
                 A phase of a demo drawing.\n\n\
                 The table is the `match` of `demo::events::kind_of` · \
                 [crates/demo/src/events.rs](../crates/demo/src/events.rs)\n\n\
                 | event | variant | payload | meaning |\n|---|---|---|---|\n\
                 | `phase/begun` | `Begun` | — | The drawing began. |\n\
                 | `phase/ended` | `Ended` | — | The drawing ended. |\n";
    assert!(events.contains(table), "{events}");
}

#[test]
fn items_whose_docs_say_hidden_and_made_items_are_doc_checked() {
    let scratch = Scratch::new();
    scratch.edit(
        "crates/demo/src/ids.rs",
        "    /// Runs the test suite's hidden half. Still public.\n",
        "",
    );
    scratch.edit(
        "crates/demo/src/ids.rs",
        "    /// A ticket's id, made by a macro.\n",
        "",
    );
    write_catalog(&scratch.tree()).unwrap();
    let lines: Vec<String> = scratch.problems().iter().map(Problem::to_string).collect();
    assert_eq!(
        lines,
        [
            "crates/demo/src/ids.rs:21: struct `demo::ids::TicketId` has no doc comment",
            "crates/demo/src/ids.rs:29: method `demo::ids::Words::check` has no doc comment",
        ]
    );
}

#[test]
fn a_macro_of_the_crate_that_cannot_be_expanded_stops_the_check() {
    let scratch = Scratch::new();
    scratch.edit("crates/demo/src/ids.rs", "    \"t-\"\n", "    t_\n");
    let err = check_docs(&scratch.tree()).unwrap_err().to_string();
    assert!(
        err.starts_with("crates/demo/src/ids.rs:20: cannot expand `demo_id!` (no arm matches"),
        "{err}"
    );
}
