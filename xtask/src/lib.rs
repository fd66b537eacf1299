//! `xtask` is the workspace's automation, run as `cargo xtask <command>`
//! (an alias in `.cargo/config.toml`). It reads the library crates'
//! source with `syn` (nothing is compiled, no nightly rustdoc) and owns two
//! generated or checked artefacts:
//!
//! - `docs/api-catalog.md`, written by `cargo xtask gen-catalog`: every
//!   public item with its signature, doc comment and source file, then the
//!   events, error codes and model-facing tools (the conventions that find
//!   them are written in the catalogue's preamble; a tool crate commits each
//!   tool's spec as `crates/<crate>/tools/<tool-name>.json`).
//! - the `rust type-equiv` blocks of the Markdown pages (`docs/**/*.md` and
//!   the top-level `*.md`), rewritten from the source by `cargo xtask
//!   sync-docs`.
//!
//! - `ARCHITECTURE.md`, the map, checked by [`map`]: every path and item it
//!   names exists, every crate has a paragraph, and it stays short.
//!
//! `cargo xtask check-docs` fails, naming the file and the item, when the
//! catalogue is stale, when a block differs from its item or names one that
//! does not exist, when a public item has no doc comment, or when the map
//! names what does not exist. The same check runs as an ordinary test
//! (`tests/workspace.rs`, and `tests/map.rs` for the map), so `cargo test`
//! covers it. The workspace's tidy test (`tests/tidy.rs`: every file opens
//! with its `//!`, nothing unfinished is left) lives here too.
//!
//! # The `type-equiv` convention
//!
//! A block that mirrors a source definition is fenced as
//! ```` ```rust type-equiv ````, and its first line is an ordinary comment
//! naming the item by a public path: `// dsh_subagent::provider::SubagentCapabilities`
//! (the library name, with `_`; a re-export path works too). A method or
//! associated item is named through its type:
//! `// dsh_subagent::runtime::SubagentActivation::dispose`. The rest of the
//! block is the definition as the source has it, doc comments and
//! attributes included; for a function or method, the signature ended by
//! `;` (the body is not the API). Layout and `//` comments never count; the
//! tokens and the doc comments do. Never edit a block by hand: edit the
//! source and run `cargo xtask sync-docs`.
//!
//! It never changes a crate's source, and it reads only the tree it is
//! given: `crates/*/src/**.rs`, `crates/*/Cargo.toml`,
//! `crates/*/tools/*.json`, `xtask/src/**.rs` (for the map) and the
//! Markdown pages.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

pub mod bench;
pub mod catalog;
pub mod equiv;
pub mod error;
pub mod expand;
pub mod map;
pub mod model;
pub mod render;

pub use error::Error;
pub use model::Workspace;

use model::MemberKind;

/// One thing `check-docs` found wrong: where, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `path` or `path:line`, relative to the tree's root.
    pub location: String,
    /// What is wrong, naming the item, and the command that fixes it when
    /// one does.
    pub message: String,
}

impl Problem {
    /// A problem at a location.
    pub fn new(location: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            location: location.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// A tree to work on: the workspace itself, or a fixture laid out like it.
#[derive(Debug, Clone)]
pub struct Tree {
    root: PathBuf,
    root_arg: Option<String>,
}

impl Tree {
    /// The workspace this crate belongs to.
    pub fn workspace() -> Self {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        Self {
            root: manifest.parent().unwrap_or(manifest).to_path_buf(),
            root_arg: None,
        }
    }

    /// Another tree; `root_arg` is how the `--root` option names it in the
    /// commands that messages suggest (`None` for the workspace).
    pub fn at(root: impl Into<PathBuf>, root_arg: Option<&str>) -> Self {
        Self {
            root: root.into(),
            root_arg: root_arg.map(str::to_owned),
        }
    }

    /// The tree's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The exact command that runs `task` on this tree.
    pub fn command(&self, task: &str) -> String {
        match &self.root_arg {
            Some(root) => format!("cargo xtask {task} --root {root}"),
            None => format!("cargo xtask {task}"),
        }
    }
}

/// The catalogue of a tree, as `gen-catalog` writes it.
///
/// # Errors
/// Source that cannot be read or parsed, or a malformed tool spec.
pub fn generate_catalog(tree: &Tree) -> Result<String, Error> {
    catalog::generate(&Workspace::load(tree.root())?)
}

/// Write the catalogue; returns whether the file changed.
///
/// # Errors
/// As [`generate_catalog`], or the file cannot be written.
pub fn write_catalog(tree: &Tree) -> Result<bool, Error> {
    let text = generate_catalog(tree)?;
    let path = tree.root().join(catalog::CATALOG_PATH);
    if fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
    Ok(true)
}

/// What `sync-docs` did.
#[derive(Debug, Clone, Default)]
pub struct Synced {
    /// The pages it rewrote.
    pub updated: Vec<String>,
    /// Blocks it could not sync (they name no item).
    pub problems: Vec<Problem>,
}

/// Rewrite every `type-equiv` block from its source item.
///
/// # Errors
/// Source or pages that cannot be read, or a page that cannot be written.
pub fn sync_docs(tree: &Tree) -> Result<Synced, Error> {
    let ws = Workspace::load(tree.root())?;
    let index = equiv::index(&ws);
    let mut synced = Synced::default();
    for page in equiv::pages(tree.root())? {
        let path = tree.root().join(&page);
        let text = fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let (found, problems) = equiv::blocks(&page, &text);
        synced.problems.extend(problems);
        synced
            .problems
            .extend(found.iter().filter_map(|b| block_target_problem(b, &index)));
        if let Some(new) = equiv::sync_page(&text, &found, &index) {
            fs::write(&path, new).map_err(|e| Error::io(&path, e))?;
            synced.updated.push(page);
        }
    }
    Ok(synced)
}

fn block_target_problem(
    block: &equiv::Block,
    index: &std::collections::BTreeMap<String, equiv::Mirror<'_>>,
) -> Option<Problem> {
    let location = format!("{}:{}", block.file, block.line);
    let Some(target) = &block.target else {
        return Some(Problem::new(
            location,
            "a type-equiv block must name the item it mirrors on its first line, as `// crate::path::Item`",
        ));
    };
    if index.contains_key(target) {
        return None;
    }
    let hints = equiv::suggestions(index, target);
    let hint = if hints.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = hints.iter().map(|h| format!("`{h}`")).collect();
        format!("; did you mean {}?", list.join(" or "))
    };
    Some(Problem::new(
        location,
        format!(
            "the type-equiv block names `{target}`, which is not a public item of the workspace{hint}"
        ),
    ))
}

/// Every problem with the docs of a tree: a stale catalogue, blocks that
/// drifted from or name no source item, public items without docs, and an
/// architecture map that names what does not exist ([`map`]).
///
/// # Errors
/// Source or pages that cannot be read.
pub fn check_docs(tree: &Tree) -> Result<Vec<Problem>, Error> {
    let ws = Workspace::load(tree.root())?;
    let mut problems = Vec::new();
    check_catalog(tree, &ws, &mut problems)?;
    let index = equiv::index(&ws);
    for page in equiv::pages(tree.root())? {
        let path = tree.root().join(&page);
        let text = fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let (found, unterminated) = equiv::blocks(&page, &text);
        problems.extend(unterminated);
        for block in &found {
            if let Some(problem) = block_target_problem(block, &index) {
                problems.push(problem);
                continue;
            }
            let Some(target) = &block.target else {
                continue;
            };
            let Some(mirror) = index.get(target) else {
                continue;
            };
            let Some(source) = mirror.source() else {
                continue;
            };
            if let Some(difference) = equiv::difference(&block.code, &source) {
                problems.push(Problem::new(
                    format!("{}:{}", block.file, block.line),
                    format!(
                        "the type-equiv block for `{target}` differs from its source at {}: {difference}; run `{}`",
                        mirror.location(),
                        tree.command("sync-docs")
                    ),
                ));
            }
        }
    }
    check_missing_docs(&ws, &mut problems);
    problems.extend(map::check(tree.root(), &ws)?);
    Ok(problems)
}

fn check_catalog(tree: &Tree, ws: &Workspace, problems: &mut Vec<Problem>) -> Result<(), Error> {
    let expected = catalog::generate(ws)?;
    let path = tree.root().join(catalog::CATALOG_PATH);
    let fix = tree.command("gen-catalog");
    let Ok(actual) = fs::read_to_string(&path) else {
        problems.push(Problem::new(
            catalog::CATALOG_PATH,
            format!("the API catalogue is missing; run `{fix}`"),
        ));
        return Ok(());
    };
    if actual == expected {
        return Ok(());
    }
    let mut expected_lines = expected.lines();
    let mut actual_lines = actual.lines();
    let mut line = 1;
    let (found, wanted) = loop {
        match (actual_lines.next(), expected_lines.next()) {
            (Some(a), Some(e)) if a == e => line += 1,
            (a, e) => break (a, e),
        }
    };
    // Show both lines from a little before their first difference.
    let from = match (found, wanted) {
        (Some(a), Some(e)) => a
            .chars()
            .zip(e.chars())
            .take_while(|(x, y)| x == y)
            .count()
            .saturating_sub(30),
        _ => 0,
    };
    let shorten = |text: Option<&str>| match text {
        None => "the end of the file".to_owned(),
        Some(t) => {
            let mut part: String = t.chars().skip(from).take(80).collect();
            if from > 0 {
                part.insert(0, '…');
            }
            if t.chars().count() > from + 80 {
                part.push('…');
            }
            format!("{part:?}")
        }
    };
    problems.push(Problem::new(
        format!("{}:{line}", catalog::CATALOG_PATH),
        format!(
            "the API catalogue is stale: this line is {} but the source gives {}; run `{fix}`",
            shorten(found),
            shorten(wanted)
        ),
    ));
    Ok(())
}

fn check_missing_docs(ws: &Workspace, problems: &mut Vec<Problem>) {
    let mut missing = |file: &str, line: usize, what: String| {
        problems.push(Problem::new(
            format!("{file}:{line}"),
            format!("{what} has no doc comment"),
        ));
    };
    for krate in &ws.crates {
        if krate.doc.is_none() {
            missing(
                &format!("{}/src/lib.rs", krate.dir),
                1,
                format!("crate `{}`", krate.package),
            );
        }
        for module in krate.modules.iter().skip(1).filter(|m| m.public) {
            if module.doc.is_none() {
                let path = format!("{}::{}", krate.lib, module.path.join("::"));
                missing(&module.file, module.line, format!("module `{path}`"));
            }
        }
        for item in krate.public_items() {
            let path = item.path().unwrap_or(&item.name);
            if item.doc.is_none() {
                missing(
                    &item.file,
                    item.line,
                    format!("{} `{path}`", item.kind.word()),
                );
            }
            for member in &item.members {
                let word = match member.kind {
                    MemberKind::Field => "field",
                    MemberKind::Variant => "variant",
                    MemberKind::Method => "method",
                    MemberKind::Const => "associated const",
                    MemberKind::Type => "associated type",
                };
                let positional = member.name.starts_with(|c: char| c.is_ascii_digit());
                if member.doc.is_none() && !positional {
                    missing(
                        &member.file,
                        member.line,
                        format!("{word} `{path}::{}`", member.name),
                    );
                }
                let undocumented = member.fields.iter().filter(|f| {
                    f.doc.is_none() && !f.name.starts_with(|c: char| c.is_ascii_digit())
                });
                for field in undocumented {
                    missing(
                        &field.file,
                        field.line,
                        format!("field `{path}::{}::{}`", member.name, field.name),
                    );
                }
            }
        }
    }
}

/// The report `check-docs` prints for its problems.
pub fn report(problems: &[Problem]) -> String {
    let mut out = String::new();
    for problem in problems {
        out.push_str(&problem.to_string());
        out.push('\n');
    }
    out.push_str(&format!(
        "check-docs: {} problem{}",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    ));
    out
}
