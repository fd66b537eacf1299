//! The architecture map's check: `ARCHITECTURE.md` names only what exists,
//! names every crate, and stays short enough to read in one sitting.
//!
//! Every backticked span outside a fenced block is classified by its shape:
//! - a path from the workspace root (`crates/...`, `xtask/...`, `docs/...`,
//!   a top-level file such as `Cargo.toml`) must exist; a `*` segment
//!   matches any name. A `.rs` file named from anywhere else is a problem,
//!   since only a path from the root can be checked.
//! - an item path (`dsh_core::store::SessionStore`, `Durability::Grouped`)
//!   must have each segment after the crate defined in that crate's source
//!   (an item, a module, a field or variant, a method of any impl); one
//!   that starts with a type, in some crate of the workspace. A path into a
//!   known outside crate (`std`, `tokio`, ...) is not checked.
//! - a single CamelCase name (`LoopAgent`) must be defined in some crate,
//!   or be one of the outside types the map mentions.
//!
//! Anything else (commands, event names, codes, placeholders with `<>`) is
//! prose. The file must be at most [`MAX_BYTES`], and `docs/performance.md`,
//! where the numbers it leaves out live, must exist.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::model::Workspace;
use crate::{Error, Problem};

/// Where the map lives, relative to the tree's root.
pub const MAP_PATH: &str = "ARCHITECTURE.md";

/// Where the numbers the map leaves out live.
pub const PERFORMANCE_PATH: &str = "docs/performance.md";

/// The most the map may weigh, in bytes.
pub const MAX_BYTES: usize = 30_000;

/// The top-level directories a path from the root may start with.
const ROOT_DIRS: &[&str] = &[
    "crates", "xtask", "tests", "examples", "docs", ".ci", ".cargo",
];

/// Outside crates whose paths the map may name without a check.
const OUTSIDE_CRATES: &[&str] = &[
    "std",
    "core",
    "alloc",
    "tokio",
    "tokio_util",
    "serde",
    "serde_json",
    "futures",
    "syn",
    "uuid",
    "reqwest",
    "rustls",
    "criterion",
    "insta",
    "proptest",
    "jiff",
    "clap",
    "agent_client_protocol",
    "mimalloc",
    "landlock",
    "zstd",
    "libc",
];

/// Outside types the map may name alone.
const OUTSIDE_TYPES: &[&str] = &[
    "Arc",
    "Weak",
    "Box",
    "Vec",
    "String",
    "Option",
    "Result",
    "Mutex",
    "RwLock",
    "HashMap",
    "BTreeMap",
    "Value",
    "RawValue",
    "CancellationToken",
    "TaskTracker",
    "JoinHandle",
    "File",
    "Ok",
    "Err",
    "Some",
    "Drop",
    "Future",
    "Send",
    "Sync",
    "Deserialize",
    "Serialize",
    "Semaphore",
    "Notify",
    "PoisonError",
    "SipHash",
    "Debug",
    "Display",
    "Clone",
    "Default",
    "Channel",
];

/// Every problem with the tree's map; none when it has no map.
///
/// # Errors
/// The map or a crate's source cannot be read.
pub fn check(root: &Path, ws: &Workspace) -> Result<Vec<Problem>, Error> {
    let path = root.join(MAP_PATH);
    let Ok(text) = fs::read_to_string(&path) else {
        return Ok(Vec::new());
    };
    let mut problems = Vec::new();
    if text.len() > MAX_BYTES {
        problems.push(Problem::new(
            MAP_PATH,
            format!(
                "the map is {} bytes, more than {MAX_BYTES}: move mechanisms into module docs and numbers into {PERFORMANCE_PATH}",
                text.len()
            ),
        ));
    }
    if !root.join(PERFORMANCE_PATH).is_file() {
        problems.push(Problem::new(
            PERFORMANCE_PATH,
            "the map's numbers have no page: write docs/performance.md",
        ));
    }
    let mut dirs: Vec<String> = ["xtask".to_owned()].into();
    if let Ok(entries) = fs::read_dir(root.join("crates")) {
        for entry in entries.flatten() {
            dirs.push(format!("crates/{}", entry.file_name().to_string_lossy()));
        }
    }
    let defined: Vec<(String, BTreeSet<String>)> = dirs
        .iter()
        .filter(|dir| root.join(dir).join("src").is_dir())
        .map(|dir| definitions(root, dir, ws))
        .collect();
    let spans = spans(&text);
    for (line, span) in &spans {
        let location = format!("{MAP_PATH}:{line}");
        if let Some(message) = judge(root, &defined, span) {
            problems.push(Problem::new(location, message));
        }
    }
    let named: BTreeSet<&str> = spans
        .iter()
        .map(|(_, span)| span.trim_end_matches('/'))
        .collect();
    let mut wanted: Vec<String> = ["xtask", "tests", "examples"]
        .iter()
        .filter(|dir| root.join(dir).is_dir())
        .map(|dir| (*dir).to_owned())
        .collect();
    if let Ok(entries) = fs::read_dir(root.join("crates")) {
        for entry in entries.flatten() {
            if entry.path().is_dir() {
                wanted.push(format!("crates/{}", entry.file_name().to_string_lossy()));
            }
        }
    }
    wanted.sort();
    for dir in wanted {
        if !named.contains(dir.as_str()) {
            problems.push(Problem::new(
                MAP_PATH,
                format!("the map never names `{dir}`: give it a paragraph"),
            ));
        }
    }
    Ok(problems)
}

/// What is wrong with one span, if it is a path or an item that does not
/// exist.
fn judge(root: &Path, defined: &[(String, BTreeSet<String>)], span: &str) -> Option<String> {
    if span
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '<' | '>' | '{' | '"'))
    {
        return None;
    }
    let first = span.split('/').next().unwrap_or(span);
    let top_file = !span.contains('/')
        && [".md", ".toml", ".lock"]
            .iter()
            .any(|ext| span.ends_with(ext))
        && span.starts_with(|c: char| c.is_ascii_uppercase());
    if ROOT_DIRS.contains(&first) || top_file {
        return (!exists(root, span.trim_end_matches('/')))
            .then(|| format!("`{span}` does not exist"));
    }
    if span.ends_with(".rs") {
        return Some(format!(
            "`{span}`: name a file from the workspace root (`crates/<crate>/src/...`), so it can be checked"
        ));
    }
    let item = span.strip_suffix("()").unwrap_or(span);
    let segments: Vec<&str> = item.split("::").collect();
    let identifier = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if !segments.iter().all(|s| identifier(s)) {
        return None;
    }
    let head = segments[0];
    if segments.len() == 1 {
        let camel = head.starts_with(|c: char| c.is_ascii_uppercase())
            && head.chars().any(|c| c.is_ascii_lowercase());
        if !camel || OUTSIDE_TYPES.contains(&head) || defined.iter().any(|(_, d)| d.contains(head))
        {
            return None;
        }
        return Some(format!("`{span}` is defined in no crate of the workspace"));
    }
    if OUTSIDE_CRATES.contains(&head) {
        return None;
    }
    if let Some((_, names)) = defined.iter().find(|(lib, _)| lib == head) {
        let missing: Vec<&str> = segments[1..]
            .iter()
            .copied()
            .filter(|s| !names.contains(*s))
            .collect();
        return (!missing.is_empty())
            .then(|| format!("`{span}`: `{head}` defines no `{}`", missing.join("`, `")));
    }
    if head.starts_with(|c: char| c.is_ascii_uppercase()) {
        let found = defined
            .iter()
            .any(|(_, names)| segments.iter().all(|s| names.contains(*s)));
        return (!found).then(|| format!("`{span}` is defined in no crate of the workspace"));
    }
    Some(format!(
        "`{span}`: start an item path with its crate (`dsh_core::...`) or its type"
    ))
}

/// Whether a path from the root exists; a `*` segment matches any entry.
fn exists(root: &Path, path: &str) -> bool {
    let mut current = vec![root.to_path_buf()];
    for segment in path.split('/') {
        let mut next = Vec::new();
        for dir in &current {
            if segment.contains('*') {
                let (before, after) = segment.split_once('*').unwrap_or((segment, ""));
                for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if name.len() >= before.len() + after.len()
                        && name.starts_with(before)
                        && name.ends_with(after)
                    {
                        next.push(entry.path());
                    }
                }
            } else if dir.join(segment).exists() {
                next.push(dir.join(segment));
            }
        }
        current = next;
    }
    !current.is_empty()
}

/// The backticked spans outside fenced blocks, with their 1-based lines.
fn spans(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let run: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        if run.len() >= 3 && run.chars().all(|c| c == run.chars().next().unwrap_or('`')) {
            match &fence {
                Some(open) if run.starts_with(open.as_str()) => fence = None,
                Some(_) => {}
                None => fence = Some(run),
            }
            continue;
        }
        if fence.is_some() {
            continue;
        }
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != b'`' {
                i += 1;
                continue;
            }
            let width = bytes[i..].iter().take_while(|&&b| b == b'`').count();
            let start = i + width;
            let mut j = start;
            let mut close = None;
            while j < bytes.len() {
                if bytes[j] == b'`' {
                    let w = bytes[j..].iter().take_while(|&&b| b == b'`').count();
                    if w == width {
                        close = Some(j);
                        break;
                    }
                    j += w;
                } else {
                    j += 1;
                }
            }
            let Some(end) = close else { break };
            out.push((n + 1, line[start..end].trim().to_owned()));
            i = end + width;
        }
    }
    out
}

/// A crate's library name and every name its source defines: items,
/// modules, fields, variants and the items of every impl, in any file under
/// its `src/` (a binary's too, test code included), and the items its own
/// macros make.
fn definitions(root: &Path, dir: &str, ws: &Workspace) -> (String, BTreeSet<String>) {
    let fallback = dir.rsplit('/').next().unwrap_or(dir).to_owned();
    let package = fs::read_to_string(root.join(dir).join("Cargo.toml"))
        .ok()
        .and_then(|manifest| crate::model::package_name(&manifest))
        .unwrap_or(fallback);
    let mut names = BTreeSet::new();
    if let Some(krate) = ws.crates.iter().find(|k| k.dir == dir) {
        names.extend(krate.items.iter().map(|item| item.name.clone()));
    }
    let mut files = Vec::new();
    rust_files(&root.join(dir).join("src"), &mut files);
    for file in files {
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        if let Ok(parsed) = syn::parse_file(&text) {
            items(&parsed.items, &mut names);
        }
        if let Some(stem) = file.file_stem() {
            names.insert(stem.to_string_lossy().into_owned());
        }
    }
    (package.replace('-', "_"), names)
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn items(items_: &[syn::Item], names: &mut BTreeSet<String>) {
    let fields = |fields: &syn::Fields, names: &mut BTreeSet<String>| {
        names.extend(
            fields
                .iter()
                .filter_map(|f| f.ident.as_ref().map(ToString::to_string)),
        );
    };
    for item in items_ {
        match item {
            syn::Item::Const(i) => {
                names.insert(i.ident.to_string());
            }
            syn::Item::Static(i) => {
                names.insert(i.ident.to_string());
            }
            syn::Item::Type(i) => {
                names.insert(i.ident.to_string());
            }
            syn::Item::Fn(i) => {
                names.insert(i.sig.ident.to_string());
            }
            syn::Item::Struct(i) => {
                names.insert(i.ident.to_string());
                fields(&i.fields, names);
            }
            syn::Item::Union(i) => {
                names.insert(i.ident.to_string());
            }
            syn::Item::Enum(i) => {
                names.insert(i.ident.to_string());
                for variant in &i.variants {
                    names.insert(variant.ident.to_string());
                    fields(&variant.fields, names);
                }
            }
            syn::Item::Trait(i) => {
                names.insert(i.ident.to_string());
                for ti in &i.items {
                    match ti {
                        syn::TraitItem::Fn(f) => names.insert(f.sig.ident.to_string()),
                        syn::TraitItem::Const(c) => names.insert(c.ident.to_string()),
                        syn::TraitItem::Type(t) => names.insert(t.ident.to_string()),
                        _ => false,
                    };
                }
            }
            syn::Item::Impl(i) => {
                for ii in &i.items {
                    match ii {
                        syn::ImplItem::Fn(f) => names.insert(f.sig.ident.to_string()),
                        syn::ImplItem::Const(c) => names.insert(c.ident.to_string()),
                        syn::ImplItem::Type(t) => names.insert(t.ident.to_string()),
                        _ => false,
                    };
                }
            }
            syn::Item::Mod(i) => {
                names.insert(i.ident.to_string());
                if let Some((_, inner)) = &i.content {
                    items(inner, names);
                }
            }
            syn::Item::Macro(i) => {
                if let Some(ident) = &i.ident {
                    names.insert(ident.to_string());
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_skip_fences_and_read_double_backticks() {
        let text = "a `one` b ``two ` x`` c\n```\n`fenced`\n```\nd `three`";
        let got: Vec<(usize, String)> = spans(text);
        assert_eq!(
            got,
            [
                (1, "one".to_owned()),
                (1, "two ` x".to_owned()),
                (5, "three".to_owned())
            ]
        );
    }
}
