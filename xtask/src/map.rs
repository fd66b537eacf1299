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
//!   (an item, a module, a field or variant, a method of any impl), and a
//!   segment after a type must be one of that type's members; a path that
//!   starts with a type is looked up in every crate of the workspace. A
//!   path into a known outside crate (`std`, `tokio`, ...) is not checked.
//! - a single CamelCase name (`LoopAgent`) must be defined in some crate,
//!   or be one of the outside types the map mentions.
//!
//! Anything else (commands, event names, codes, placeholders with `<>`) is
//! prose. Every `###` section under `## Code map` has an
//! `**Architecture invariant:**` and an `**API boundary:**` line. The file must be at most [`MAX_BYTES`], and `docs/performance.md`,
//! where the numbers it leaves out live, must exist.

use std::collections::{BTreeMap, BTreeSet};
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
    let defined: Vec<Defs> = dirs
        .iter()
        .filter(|dir| root.join(dir).join("src").is_dir())
        .map(|dir| definitions(root, dir, ws))
        .collect();
    shape(&text, &mut problems);
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

/// The markers every crate section of the code map carries.
const MARKERS: [&str; 2] = ["**Architecture invariant:**", "**API boundary:**"];

/// Every `###` section under `## Code map` has an invariant and a boundary.
fn shape(text: &str, problems: &mut Vec<Problem>) {
    let mut in_map = false;
    let mut sections: Vec<(usize, &str, String)> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if let Some(title) = line.strip_prefix("## ") {
            in_map = title.trim() == "Code map";
        } else if let Some(title) = line.strip_prefix("### ").filter(|_| in_map) {
            sections.push((n + 1, title, String::new()));
        } else if let Some((_, _, body)) = sections.last_mut().filter(|_| in_map) {
            body.push_str(line);
            body.push('\n');
        }
    }
    for (line, title, body) in sections {
        for marker in MARKERS.iter().filter(|m| !body.contains(*m)) {
            problems.push(Problem::new(
                format!("{MAP_PATH}:{line}"),
                format!("the section {title} has no {marker} line"),
            ));
        }
    }
}

/// What is wrong with one span, if it is a path or an item that does not
/// exist.
fn judge(root: &Path, defined: &[Defs], span: &str) -> Option<String> {
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
        if !camel || OUTSIDE_TYPES.contains(&head) || defined.iter().any(|d| d.names.contains(head))
        {
            return None;
        }
        return Some(format!("`{span}` is defined in no crate of the workspace"));
    }
    if OUTSIDE_CRATES.contains(&head) {
        return None;
    }
    if let Some(defs) = defined.iter().find(|d| d.lib == head) {
        return defs
            .missing(&segments[1..])
            .map(|why| format!("`{span}`: {why}"));
    }
    if head.starts_with(|c: char| c.is_ascii_uppercase()) {
        let found = defined.iter().any(|d| d.missing(&segments).is_none());
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

/// What a crate defines, read from every file under its `src/` (a
/// binary's too, test code included), with the items its own macros make.
fn definitions(root: &Path, dir: &str, ws: &Workspace) -> Defs {
    let fallback = dir.rsplit('/').next().unwrap_or(dir).to_owned();
    let package = fs::read_to_string(root.join(dir).join("Cargo.toml"))
        .ok()
        .and_then(|manifest| crate::model::package_name(&manifest))
        .unwrap_or(fallback);
    let mut defs = Defs {
        lib: package.replace('-', "_"),
        ..Defs::default()
    };
    if let Some(krate) = ws.crates.iter().find(|k| k.dir == dir) {
        for item in &krate.items {
            defs.define(&item.name);
            for member in &item.members {
                let owner = syn::Ident::new(&item.name, proc_macro2::Span::call_site());
                defs.member(&owner, &member.name);
            }
        }
    }
    let mut files = Vec::new();
    rust_files(&root.join(dir).join("src"), &mut files);
    for file in files {
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        if let Ok(parsed) = syn::parse_file(&text) {
            defs.items(&parsed.items);
        }
        if let Some(stem) = file.file_stem() {
            defs.define(stem.to_string_lossy());
        }
    }
    defs
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

/// What one crate defines.
#[derive(Default)]
struct Defs {
    /// The library name (`dsh_core`).
    lib: String,
    /// Every name defined: items, modules, files, fields, variants, the
    /// items of traits and impls.
    names: BTreeSet<String>,
    /// For each type or trait, the names defined inside it: fields,
    /// variants, trait items, the items of every impl of it.
    members: BTreeMap<String, BTreeSet<String>>,
}

impl Defs {
    fn define(&mut self, name: impl ToString) {
        self.names.insert(name.to_string());
    }

    fn member(&mut self, owner: &syn::Ident, name: impl ToString) {
        let name = name.to_string();
        self.names.insert(name.clone());
        self.members
            .entry(owner.to_string())
            .or_default()
            .insert(name);
    }

    fn fields(&mut self, owner: &syn::Ident, fields: &syn::Fields) {
        for field in fields {
            if let Some(name) = &field.ident {
                self.member(owner, name);
            }
        }
    }

    /// Why `segments` (the path after the crate) names nothing here: a
    /// segment defined nowhere in the crate, or a member its type lacks.
    fn missing(&self, segments: &[&str]) -> Option<String> {
        let undefined: Vec<&str> = segments
            .iter()
            .copied()
            .filter(|s| !self.names.contains(*s))
            .collect();
        if !undefined.is_empty() {
            return Some(format!(
                "`{}` defines no `{}`",
                self.lib,
                undefined.join("`, `")
            ));
        }
        segments.windows(2).find_map(|pair| {
            let members = self.members.get(pair[0])?;
            let nested = self.members.contains_key(pair[1]);
            (!members.contains(pair[1]) && !nested)
                .then(|| format!("`{}` has no `{}`", pair[0], pair[1]))
        })
    }

    fn items(&mut self, items: &[syn::Item]) {
        for item in items {
            match item {
                syn::Item::Const(i) => self.define(&i.ident),
                syn::Item::Static(i) => self.define(&i.ident),
                syn::Item::Type(i) => self.define(&i.ident),
                syn::Item::Fn(i) => self.define(&i.sig.ident),
                syn::Item::Union(i) => self.define(&i.ident),
                syn::Item::Struct(i) => {
                    self.define(&i.ident);
                    self.members.entry(i.ident.to_string()).or_default();
                    self.fields(&i.ident, &i.fields);
                }
                syn::Item::Enum(i) => {
                    self.define(&i.ident);
                    for variant in &i.variants {
                        self.member(&i.ident, &variant.ident);
                        self.fields(&i.ident, &variant.fields);
                    }
                }
                syn::Item::Trait(i) => {
                    self.define(&i.ident);
                    self.members.entry(i.ident.to_string()).or_default();
                    for ti in &i.items {
                        match ti {
                            syn::TraitItem::Fn(f) => self.member(&i.ident, &f.sig.ident),
                            syn::TraitItem::Const(c) => self.member(&i.ident, &c.ident),
                            syn::TraitItem::Type(t) => self.member(&i.ident, &t.ident),
                            _ => {}
                        }
                    }
                }
                syn::Item::Impl(i) => {
                    let syn::Type::Path(ty) = &*i.self_ty else {
                        continue;
                    };
                    let Some(owner) = ty.path.segments.last().map(|s| s.ident.clone()) else {
                        continue;
                    };
                    for ii in &i.items {
                        match ii {
                            syn::ImplItem::Fn(f) => self.member(&owner, &f.sig.ident),
                            syn::ImplItem::Const(c) => self.member(&owner, &c.ident),
                            syn::ImplItem::Type(t) => self.member(&owner, &t.ident),
                            _ => {}
                        }
                    }
                }
                syn::Item::Mod(i) => {
                    self.define(&i.ident);
                    if let Some((_, inner)) = &i.content {
                        self.items(inner);
                    }
                }
                syn::Item::Macro(i) => {
                    if let Some(ident) = &i.ident {
                        self.define(ident);
                    }
                }
                _ => {}
            }
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
