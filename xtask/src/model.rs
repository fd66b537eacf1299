//! The public surface of a tree of crates, read with `syn`: every library
//! under `crates/*/src/lib.rs`, its modules (following `mod foo;` to
//! `foo.rs` or `foo/mod.rs`), its items, the inherent methods and trait
//! impls attached to them, and the paths under which each item is public.
//!
//! An item is public when it is `pub` and reachable from the crate root:
//! defined in a chain of `pub mod`s, or re-exported by a `pub use` in a
//! public module (chains and globs of local re-exports are followed). Code
//! under `#[cfg(test)]` and items marked `#[doc(hidden)]` are not part of
//! the surface (attributes are read as attributes, never as words). Nothing
//! is compiled. A crate's own `macro_rules!` macros are expanded where they
//! are invoked as items or impl items ([`crate::expand`]), so the ids
//! `opaque_id!` makes are public items; any other macro's output is
//! invisible here.
//!
//! One file of about 1,300 lines: the surface walk, the item model and the
//! re-export resolution share their private types, and a split would make
//! them public to each other without making any one easier to read.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{LineColumn, TokenStream};
use quote::ToTokens;
use syn::parse::Parser as _;
use syn::spanned::Spanned;

use crate::error::Error;

/// A position in a source file: 1-based line, 0-based column in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 0-based column, in characters.
    pub column: usize,
}

impl From<LineColumn> for Pos {
    fn from(lc: LineColumn) -> Self {
        Self {
            line: lc.line,
            column: lc.column,
        }
    }
}

/// Where a definition sits in its file: from its first attribute (doc
/// comments included) to its last token, and where its body opens, for a
/// function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// The first token (the first attribute, if any).
    pub start: Pos,
    /// Just past the last token.
    pub end: Pos,
    /// The opening brace of a function's body.
    pub body: Option<Pos>,
}

impl Extent {
    fn of(tokens: TokenStream, body: Option<Pos>) -> Self {
        let mut iter = tokens.into_iter();
        let first = iter.next();
        let last = iter.last().or_else(|| first.clone());
        let start = first.map_or(Pos { line: 1, column: 0 }, |tt| tt.span().start().into());
        let end = last.map_or(start, |tt| tt.span().end().into());
        Self { start, end, body }
    }
}

/// What kind of item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `struct`
    Struct,
    /// `enum`
    Enum,
    /// `union`
    Union,
    /// `trait`
    Trait,
    /// `fn`
    Fn,
    /// `const`
    Const,
    /// `static`
    Static,
    /// `type`
    Type,
}

impl Kind {
    /// The word the catalogue uses.
    pub fn word(self) -> &'static str {
        match self {
            Self::Struct => "struct",
            Self::Enum => "enum",
            Self::Union => "union",
            Self::Trait => "trait",
            Self::Fn => "fn",
            Self::Const => "const",
            Self::Static => "static",
            Self::Type => "type",
        }
    }
}

/// What kind of member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberKind {
    /// A named or positional field of a struct or struct-like variant.
    Field,
    /// An enum variant.
    Variant,
    /// An inherent method or associated function, or a trait's.
    Method,
    /// An associated constant.
    Const,
    /// An associated type of a trait.
    Type,
}

/// A field, variant, method or associated item of an item.
#[derive(Clone)]
pub struct Member {
    /// Its name (`0`, `1`, ... for positional fields).
    pub name: String,
    /// Its kind.
    pub kind: MemberKind,
    /// Its file, relative to the tree's root.
    pub file: String,
    /// Where it is.
    pub extent: Extent,
    /// 1-based line of its name.
    pub line: usize,
    /// Its doc comment, unindented; `None` when it has none.
    pub doc: Option<String>,
    /// The fields of a struct-like or tuple variant.
    pub fields: Vec<Member>,
    /// The method, when this is an inherent method (used to read event and
    /// error-code tables from its body).
    pub method: Option<Box<syn::ImplItemFn>>,
    /// The signature: a field's `name: Type`, a variant's shape, a
    /// method's one-line signature.
    pub signature: String,
}

/// One public item.
#[derive(Clone)]
pub struct Item {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: Kind,
    /// The module that defines it (index into [`Crate::modules`]).
    pub module: usize,
    /// Its file, relative to the tree's root.
    pub file: String,
    /// Where it is.
    pub extent: Extent,
    /// 1-based line of its name.
    pub line: usize,
    /// Its doc comment, unindented; `None` when it has none.
    pub doc: Option<String>,
    /// The definition.
    pub ast: syn::Item,
    /// Fields, variants, trait items, inherent methods and constants.
    pub members: Vec<Member>,
    /// Derived and implemented traits, in source order.
    pub implements: Vec<String>,
    /// Every public path, the canonical one first; empty when the item is
    /// not reachable from the crate root.
    pub paths: Vec<String>,
}

impl Item {
    /// The canonical public path, if it is public.
    pub fn path(&self) -> Option<&str> {
        self.paths.first().map(String::as_str)
    }
}

/// A `pub use` of something outside the crate.
#[derive(Debug, Clone)]
pub struct Reexport {
    /// The public path it gets here.
    pub path: String,
    /// The path it comes from.
    pub target: String,
    /// The module that re-exports it (index into [`Crate::modules`]).
    pub module: usize,
    /// The declaring file.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// Its doc comment.
    pub doc: Option<String>,
}

/// One module of a crate.
#[derive(Debug, Clone)]
pub struct Module {
    /// Its path below the crate root (empty for the root).
    pub path: Vec<String>,
    /// Its parent (none for the root).
    pub parent: Option<usize>,
    /// Whether it is reachable by a chain of `pub mod`s.
    pub public: bool,
    /// The file that declares it (`lib.rs` for the root).
    pub file: String,
    /// 1-based line of its declaration.
    pub line: usize,
    /// Its doc comment (inner `//!` or outer `///`).
    pub doc: Option<String>,
    children: BTreeMap<String, usize>,
    uses: Vec<UseEntry>,
    defined: BTreeMap<String, usize>,
}

/// One name a `use` declaration brings into a module.
#[derive(Debug, Clone)]
struct UseEntry {
    /// The path it names (for a glob, the module whose items it brings).
    segments: Vec<String>,
    /// The name it gets here (empty for a glob).
    alias: String,
    glob: bool,
    public: bool,
    line: usize,
    doc: Option<String>,
}

/// One library crate.
#[derive(Clone)]
pub struct Crate {
    /// The package name (`dsh-core`), from `Cargo.toml`; the directory's
    /// name when there is no manifest (fixture trees).
    pub package: String,
    /// The library name (`dsh_core`).
    pub lib: String,
    /// Its directory, relative to the tree's root (`crates/core`).
    pub dir: String,
    /// The crate-level doc comment.
    pub doc: Option<String>,
    /// Its modules; the root is the first.
    pub modules: Vec<Module>,
    /// Every item defined outside test code, public or not.
    pub items: Vec<Item>,
    /// Re-exports of foreign items.
    pub reexports: Vec<Reexport>,
    /// The source text of every file read, by relative path.
    pub files: BTreeMap<String, String>,
}

impl Crate {
    /// The items reachable from the crate root, in catalogue order: by
    /// canonical module, then file and position.
    pub fn public_items(&self) -> impl Iterator<Item = &Item> {
        self.items.iter().filter(|item| !item.paths.is_empty())
    }
}

/// The crates of a tree.
#[derive(Clone)]
pub struct Workspace {
    /// The tree's root.
    pub root: PathBuf,
    /// Its library crates, by package name.
    pub crates: Vec<Crate>,
}

impl Workspace {
    /// Read every library under `<root>/crates/*/src/lib.rs`.
    ///
    /// # Errors
    /// A file that cannot be read or does not parse.
    pub fn load(root: &Path) -> Result<Self, Error> {
        let crates_dir = root.join("crates");
        let mut dirs = Vec::new();
        if crates_dir.is_dir() {
            for entry in fs::read_dir(&crates_dir).map_err(|e| Error::io(&crates_dir, e))? {
                let entry = entry.map_err(|e| Error::io(&crates_dir, e))?;
                if entry.path().join("src/lib.rs").is_file() {
                    dirs.push(entry.file_name().to_string_lossy().into_owned());
                }
            }
        }
        let mut crates = dirs
            .into_iter()
            .map(|dir| load_crate(root, &format!("crates/{dir}")))
            .collect::<Result<Vec<_>, _>>()?;
        crates.sort_by(|a, b| a.package.cmp(&b.package));
        Ok(Self {
            root: root.to_path_buf(),
            crates,
        })
    }
}

/// The package name in a manifest's `[package]` table, read line by line
/// (the manifests here keep `name = "..."` on one line).
pub(crate) fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(rest) = line.strip_prefix("name") {
            let value = rest.trim_start().strip_prefix('=')?.trim();
            return Some(value.trim_matches('"').to_owned());
        }
    }
    None
}

fn load_crate(root: &Path, dir: &str) -> Result<Crate, Error> {
    let manifest = root.join(dir).join("Cargo.toml");
    let fallback = dir.rsplit('/').next().unwrap_or(dir).to_owned();
    let package = if manifest.is_file() {
        let text = fs::read_to_string(&manifest).map_err(|e| Error::io(&manifest, e))?;
        package_name(&text).unwrap_or(fallback)
    } else {
        fallback
    };
    let lib = package.replace('-', "_");
    let mut loader = Loader {
        root,
        krate: Crate {
            package,
            lib,
            dir: dir.to_owned(),
            doc: None,
            modules: Vec::new(),
            items: Vec::new(),
            reexports: Vec::new(),
            files: BTreeMap::new(),
        },
        impls: Vec::new(),
        macros: BTreeMap::new(),
    };
    let lib_rs = format!("{dir}/src/lib.rs");
    let file = loader.parse(&lib_rs)?;
    loader.krate.doc = crate_doc(&root.join(dir).join("src"), &file.attrs)?;
    loader.krate.modules.push(Module {
        path: Vec::new(),
        parent: None,
        public: true,
        file: lib_rs.clone(),
        line: 1,
        doc: loader.krate.doc.clone(),
        children: BTreeMap::new(),
        uses: Vec::new(),
        defined: BTreeMap::new(),
    });
    loader.walk(0, &file.items, &lib_rs, &format!("{dir}/src"))?;
    loader.attach_impls()?;
    loader.publish();
    Ok(loader.krate)
}

struct PendingImpl {
    module: usize,
    file: String,
    imp: syn::ItemImpl,
}

struct Loader<'a> {
    root: &'a Path,
    krate: Crate,
    impls: Vec<PendingImpl>,
    /// The crate's `macro_rules!` macros seen so far, by name; `None` for
    /// one whose arms the expander cannot read.
    macros: BTreeMap<String, Option<crate::expand::Rules>>,
}

/// Whether attributes hide the item from the public surface: `#[doc(hidden)]`,
/// or a `#[cfg(..)]` that holds only under `test`. Attributes are read as
/// attributes: the words of a doc comment never count.
fn excluded(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        if attr.path().is_ident("cfg") {
            attr.parse_args::<syn::Meta>()
                .is_ok_and(|meta| only_under_test(&meta))
        } else if attr.path().is_ident("doc") {
            doc_hidden(attr)
        } else {
            false
        }
    })
}

/// Whether `#[doc(..)]` says `hidden` (a `#[doc = "..."]` comment never does).
fn doc_hidden(attr: &syn::Attribute) -> bool {
    let syn::Meta::List(_) = &attr.meta else {
        return false;
    };
    let mut hidden = false;
    // Other `doc(..)` arguments (`alias = "x"`, `cfg(..)`) are skipped whole.
    let _ = attr.parse_nested_meta(|nested| {
        if nested.path.is_ident("hidden") {
            hidden = true;
        } else if nested.input.peek(syn::Token![=]) {
            nested.value()?.parse::<syn::Expr>()?;
        } else if nested.input.peek(syn::token::Paren) {
            let _content;
            syn::parenthesized!(_content in nested.input);
        }
        Ok(())
    });
    hidden
}

/// Whether a `cfg` predicate can hold only in a test build: `test`, an
/// `all(..)` with such a part, an `any(..)` whose every part is such.
/// `not(..)` and anything else (`feature = "test"`, `unix`) can hold in a
/// library build.
fn only_under_test(meta: &syn::Meta) -> bool {
    match meta {
        syn::Meta::Path(path) => path.is_ident("test"),
        syn::Meta::List(list) => {
            let parts = list.parse_args_with(
                syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
            );
            let Ok(parts) = parts else { return false };
            if list.path.is_ident("all") {
                parts.iter().any(only_under_test)
            } else if list.path.is_ident("any") {
                !parts.is_empty() && parts.iter().all(only_under_test)
            } else {
                false
            }
        }
        syn::Meta::NameValue(_) => false,
    }
}

/// The doc comment of an item: its `doc` attributes joined by newlines,
/// with the common leading whitespace removed (as rustdoc does).
pub fn doc_of(attrs: &[syn::Attribute]) -> Option<String> {
    let mut lines = Vec::new();
    for attr in attrs {
        if !attr.path().is_ident("doc") {
            continue;
        }
        if let syn::Meta::NameValue(nv) = &attr.meta
            && let Some(text) = doc_text(&nv.value)
        {
            lines.extend(text.split('\n').map(str::to_owned));
        }
    }
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let text = lines
        .iter()
        .map(|l| l.get(indent..).unwrap_or("").trim_end())
        .collect::<Vec<_>>()
        .join("\n");
    let text = text.trim_matches('\n').to_owned();
    (!text.trim().is_empty()).then_some(text)
}

/// The text of a `#[doc = ...]` value: a string literal, or a `concat!` of
/// literals (a macro's way to put its argument into a doc comment).
fn doc_text(value: &syn::Expr) -> Option<String> {
    match value {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) => Some(s.value()),
        syn::Expr::Macro(m) if m.mac.path.is_ident("concat") => {
            let parts = m
                .mac
                .parse_body_with(
                    syn::punctuated::Punctuated::<syn::Lit, syn::Token![,]>::parse_terminated,
                )
                .ok()?;
            let mut text = String::new();
            for part in parts {
                match part {
                    syn::Lit::Str(s) => text.push_str(&s.value()),
                    syn::Lit::Char(c) => text.push(c.value()),
                    syn::Lit::Int(i) => text.push_str(i.base10_digits()),
                    syn::Lit::Float(f) => text.push_str(f.base10_digits()),
                    syn::Lit::Bool(b) => text.push_str(if b.value { "true" } else { "false" }),
                    _ => return None,
                }
            }
            Some(text)
        }
        _ => None,
    }
}

/// A crate's own doc: its `//!` lines and `#![doc = "..."]` attributes, and
/// the text of every `#![doc = include_str!("path")]` (the per-crate
/// README), read relative to `src_dir` as rustc reads it, in their order.
///
/// # Errors
/// An included file that cannot be read.
pub fn crate_doc(src_dir: &Path, attrs: &[syn::Attribute]) -> Result<Option<String>, Error> {
    let mut parts = Vec::new();
    let mut run: Vec<syn::Attribute> = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("doc")) {
        let included = match &attr.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Macro(m) if m.mac.path.is_ident("include_str") => {
                    m.mac.parse_body::<syn::LitStr>().ok()
                }
                _ => None,
            },
            _ => None,
        };
        let Some(path) = included else {
            run.push(attr.clone());
            continue;
        };
        parts.extend(doc_of(&std::mem::take(&mut run)));
        let file = src_dir.join(path.value());
        let text = fs::read_to_string(&file).map_err(|e| Error::io(&file, e))?;
        parts.push(text.trim_matches('\n').to_owned());
    }
    parts.extend(doc_of(&run));
    let text = parts.join("\n\n");
    Ok((!text.trim().is_empty()).then_some(text))
}

fn strip_attrs(attrs: &mut Vec<syn::Attribute>) {
    attrs.clear();
}

impl Loader<'_> {
    fn parse(&mut self, rel: &str) -> Result<syn::File, Error> {
        let path = self.root.join(rel);
        let text = fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let file = syn::parse_file(&text).map_err(|e| Error::Parse {
            path: rel.to_owned(),
            line: e.span().start().line,
            message: e.to_string(),
        })?;
        self.krate.files.insert(rel.to_owned(), text);
        Ok(file)
    }

    /// Walk the items of module `module`, declared in `file`; `dir` is
    /// where the files of its child modules live.
    fn walk(
        &mut self,
        module: usize,
        items: &[syn::Item],
        file: &str,
        dir: &str,
    ) -> Result<(), Error> {
        for item in items {
            let (attrs, vis) = match item {
                syn::Item::Const(i) => (&i.attrs, Some(&i.vis)),
                syn::Item::Enum(i) => (&i.attrs, Some(&i.vis)),
                syn::Item::Fn(i) => (&i.attrs, Some(&i.vis)),
                syn::Item::Mod(i) => (&i.attrs, Some(&i.vis)),
                syn::Item::Static(i) => (&i.attrs, Some(&i.vis)),
                syn::Item::Struct(i) => (&i.attrs, Some(&i.vis)),
                syn::Item::Trait(i) => (&i.attrs, Some(&i.vis)),
                syn::Item::Type(i) => (&i.attrs, Some(&i.vis)),
                syn::Item::Union(i) => (&i.attrs, Some(&i.vis)),
                syn::Item::Use(i) => (&i.attrs, Some(&i.vis)),
                syn::Item::Impl(i) => (&i.attrs, None),
                syn::Item::Macro(i) => (&i.attrs, None),
                _ => continue,
            };
            if excluded(attrs) {
                continue;
            }
            let public = matches!(vis, Some(syn::Visibility::Public(_)));
            match item {
                syn::Item::Mod(m) => self.walk_mod(module, m, public, file, dir)?,
                syn::Item::Use(u) => {
                    let mut entries = Vec::new();
                    flatten_use(&u.tree, &mut Vec::new(), &mut entries);
                    let line = u.span().start().line;
                    for (segments, alias, glob) in entries {
                        self.krate.modules[module].uses.push(UseEntry {
                            segments,
                            alias,
                            glob,
                            public,
                            line,
                            doc: doc_of(&u.attrs),
                        });
                    }
                }
                syn::Item::Macro(mac) => self.walk_macro(module, mac, file, dir)?,
                syn::Item::Impl(imp) => self.impls.push(PendingImpl {
                    module,
                    file: file.to_owned(),
                    imp: imp.clone(),
                }),
                _ => {
                    if let Some(new) = new_item(item, module, file, public) {
                        let index = self.krate.items.len();
                        self.krate.modules[module]
                            .defined
                            .insert(new.name.clone(), index);
                        self.krate.items.push(new);
                    }
                }
            }
        }
        Ok(())
    }

    /// Record a `macro_rules!` definition, or expand an invocation of one
    /// in place: the items it makes belong to `module` and `file`, and
    /// their extent is the invocation's.
    fn walk_macro(
        &mut self,
        module: usize,
        mac: &syn::ItemMacro,
        file: &str,
        dir: &str,
    ) -> Result<(), Error> {
        if mac.mac.path.is_ident("macro_rules") {
            if let Some(name) = &mac.ident {
                let rules = crate::expand::rules(mac).map(|(_, rules)| rules);
                self.macros.insert(name.to_string(), rules);
            }
            return Ok(());
        }
        let Some(expanded) = self.expansion(&mac.mac, file)? else {
            return Ok(());
        };
        let parsed = syn::parse2::<syn::File>(expanded)
            .map_err(|err| unexpandable(&mac.mac, file, &err.to_string()))?;
        let first = self.krate.items.len();
        self.walk(module, &parsed.items, file, dir)?;
        let at = Extent::of(mac.to_token_stream(), None);
        for item in &mut self.krate.items[first..] {
            item.extent = at;
        }
        Ok(())
    }

    /// The tokens an invocation of one of the crate's macros expands to;
    /// `None` for a macro from elsewhere.
    ///
    /// # Errors
    /// One of the crate's macros that the expander cannot expand: its items
    /// would silently be missing from the surface.
    fn expansion(&self, mac: &syn::Macro, file: &str) -> Result<Option<TokenStream>, Error> {
        let Some(name) = mac.path.get_ident() else {
            return Ok(None);
        };
        let Some(rules) = self.macros.get(&name.to_string()) else {
            return Ok(None);
        };
        let Some(rules) = rules else {
            return Err(unexpandable(
                mac,
                file,
                "its arms use a form the expander does not read",
            ));
        };
        rules
            .expand(mac.tokens.clone())
            .map(Some)
            .ok_or_else(|| unexpandable(mac, file, "no arm matches the invocation"))
    }

    fn walk_mod(
        &mut self,
        parent: usize,
        m: &syn::ItemMod,
        public: bool,
        file: &str,
        dir: &str,
    ) -> Result<(), Error> {
        let name = m.ident.to_string();
        let mut path = self.krate.modules[parent].path.clone();
        path.push(name.clone());
        let index = self.krate.modules.len();
        let line = m.span().start().line;
        self.krate.modules.push(Module {
            path,
            parent: Some(parent),
            public: public && self.krate.modules[parent].public,
            file: file.to_owned(),
            line,
            doc: doc_of(&m.attrs),
            children: BTreeMap::new(),
            uses: Vec::new(),
            defined: BTreeMap::new(),
        });
        self.krate.modules[parent]
            .children
            .insert(name.clone(), index);
        match &m.content {
            Some((_, items)) => self.walk(index, items, file, &format!("{dir}/{name}")),
            None => {
                let flat = format!("{dir}/{name}.rs");
                let nested = format!("{dir}/{name}/mod.rs");
                let rel = if self.root.join(&flat).is_file() {
                    flat
                } else if self.root.join(&nested).is_file() {
                    nested
                } else {
                    return Err(Error::MissingModule {
                        path: file.to_owned(),
                        line,
                        module: name,
                    });
                };
                let parsed = self.parse(&rel)?;
                if self.krate.modules[index].doc.is_none() {
                    self.krate.modules[index].doc = doc_of(&parsed.attrs);
                }
                self.walk(index, &parsed.items, &rel, &format!("{dir}/{name}"))
            }
        }
    }

    /// Attach inherent methods and constants, and implemented traits, to
    /// the items they belong to.
    fn attach_impls(&mut self) -> Result<(), Error> {
        for pending in std::mem::take(&mut self.impls) {
            let Some(target) = self.impl_target(pending.module, &pending.imp.self_ty) else {
                continue;
            };
            if let Some((_, trait_path, _)) = &pending.imp.trait_ {
                let name = trait_path
                    .segments
                    .last()
                    .map(crate::render::path_segment)
                    .unwrap_or_default();
                let implements = &mut self.krate.items[target].implements;
                if !implements.contains(&name) {
                    implements.push(name);
                }
                continue;
            }
            for impl_item in &pending.imp.items {
                if let syn::ImplItem::Macro(mac) = impl_item {
                    if excluded(&mac.attrs) {
                        continue;
                    }
                    let made = match self.expansion(&mac.mac, &pending.file)? {
                        Some(tokens) => impl_items.parse2(tokens).map_err(|err| {
                            unexpandable(&mac.mac, &pending.file, &err.to_string())
                        })?,
                        None => Vec::new(),
                    };
                    for made in &made {
                        if let Some(member) = impl_member(made, &pending.file) {
                            self.krate.items[target].members.push(member);
                        }
                    }
                } else if let Some(member) = impl_member(impl_item, &pending.file) {
                    self.krate.items[target].members.push(member);
                }
            }
        }
        Ok(())
    }

    /// The item an `impl` block's self type names, resolved from the
    /// block's module; a unique name in the crate otherwise.
    fn impl_target(&self, module: usize, ty: &syn::Type) -> Option<usize> {
        let syn::Type::Path(tp) = ty else { return None };
        let name = tp.path.segments.last()?.ident.to_string();
        if let Some(Target::Item(index)) = self.resolve(module, std::slice::from_ref(&name), 0) {
            return Some(index);
        }
        let mut found = self.krate.items.iter().enumerate().filter(|(_, item)| {
            item.name == name && matches!(item.kind, Kind::Struct | Kind::Enum | Kind::Union)
        });
        let first = found.next().map(|(index, _)| index);
        if found.next().is_some() { None } else { first }
    }

    /// Resolve a use path from a module.
    fn resolve(&self, module: usize, segments: &[String], depth: usize) -> Option<Target> {
        if depth > 16 {
            return None;
        }
        let (first, rest) = segments.split_first()?;
        let modules = &self.krate.modules;
        let (mut current, rest) = match first.as_str() {
            "crate" => (0, rest),
            "self" => (module, rest),
            "super" => {
                let mut current = modules[module].parent?;
                let mut rest = rest;
                while rest.first().map(String::as_str) == Some("super") {
                    current = modules[current].parent?;
                    rest = &rest[1..];
                }
                (current, rest)
            }
            _ if modules[module].children.contains_key(first)
                || modules[module].defined.contains_key(first)
                || modules[module].uses.iter().any(|u| &u.alias == first) =>
            {
                (module, segments)
            }
            _ => return Some(Target::External(segments.join("::"))),
        };
        let Some((last, middle)) = rest.split_last() else {
            return Some(Target::Module(current));
        };
        for segment in middle {
            current = match self.lookup(current, segment, depth)? {
                Target::Module(next) => next,
                _ => return None,
            };
        }
        self.lookup(current, last, depth)
    }

    /// A name in a module: a definition, a child module, a `use`d name or a
    /// name brought by a glob.
    fn lookup(&self, module: usize, name: &str, depth: usize) -> Option<Target> {
        let m = &self.krate.modules[module];
        if let Some(&index) = m.defined.get(name) {
            return Some(Target::Item(index));
        }
        if let Some(&index) = m.children.get(name) {
            return Some(Target::Module(index));
        }
        if let Some(entry) = m.uses.iter().find(|u| !u.glob && u.alias == name) {
            return self.resolve(module, &entry.segments, depth + 1);
        }
        m.uses.iter().filter(|u| u.glob).find_map(|u| {
            match self.resolve(module, &u.segments, depth + 1)? {
                Target::Module(from) => self.lookup(from, name, depth + 1),
                _ => None,
            }
        })
    }

    /// Give every reachable item its public paths, and record foreign
    /// re-exports.
    fn publish(&mut self) {
        let lib = self.krate.lib.clone();
        let qualified = |module: &Module, name: &str| {
            let mut parts = vec![lib.clone()];
            parts.extend(module.path.iter().cloned());
            parts.push(name.to_owned());
            parts.join("::")
        };
        let mut aliases: Vec<(usize, String)> = Vec::new();
        let mut reexports = Vec::new();
        for (index, module) in self.krate.modules.iter().enumerate() {
            if !module.public {
                continue;
            }
            for entry in module.uses.iter().filter(|u| u.public) {
                if entry.glob {
                    if let Some(Target::Module(from)) = self.resolve(index, &entry.segments, 0) {
                        for (name, &item) in &self.krate.modules[from].defined {
                            if self.item_is_pub(item) {
                                aliases.push((item, qualified(module, name)));
                            }
                        }
                    }
                    continue;
                }
                match self.resolve(index, &entry.segments, 0) {
                    Some(Target::Item(item)) if self.item_is_pub(item) => {
                        aliases.push((item, qualified(module, &entry.alias)));
                    }
                    Some(Target::External(target)) => reexports.push(Reexport {
                        path: qualified(module, &entry.alias),
                        target,
                        module: index,
                        file: module_file(&self.krate, index),
                        line: entry.line,
                        doc: entry.doc.clone(),
                    }),
                    _ => {}
                }
            }
        }
        for (index, item) in self.krate.items.iter_mut().enumerate() {
            let module = &self.krate.modules[item.module];
            let defined_public = self_pub(&item.ast) && module.public;
            let mut others: Vec<String> = aliases
                .iter()
                .filter(|(i, _)| *i == index)
                .map(|(_, path)| path.clone())
                .collect();
            others.sort_by(|a, b| {
                let depth = |p: &str| p.matches("::").count();
                depth(b).cmp(&depth(a)).then_with(|| a.cmp(b))
            });
            others.dedup();
            let mut paths = Vec::new();
            if defined_public {
                paths.push(qualified(module, &item.name));
            }
            for other in others {
                if !paths.contains(&other) {
                    paths.push(other);
                }
            }
            item.paths = paths;
        }
        self.krate.reexports = reexports;
    }

    fn item_is_pub(&self, item: usize) -> bool {
        self_pub(&self.krate.items[item].ast)
    }
}

fn unexpandable(mac: &syn::Macro, file: &str, why: &str) -> Error {
    Error::Macro {
        path: file.to_owned(),
        line: mac.path.span().start().line,
        name: mac.path.to_token_stream().to_string(),
        message: why.to_owned(),
    }
}

/// The items of an impl block, as a macro expands to them.
fn impl_items(input: syn::parse::ParseStream<'_>) -> syn::Result<Vec<syn::ImplItem>> {
    let mut items = Vec::new();
    while !input.is_empty() {
        items.push(input.parse()?);
    }
    Ok(items)
}

fn module_file(krate: &Crate, module: usize) -> String {
    // The file of a module's own items: the declaring file of an inline
    // module, else the file that was parsed for it.
    let m = &krate.modules[module];
    krate
        .items
        .iter()
        .find(|item| item.module == module)
        .map_or_else(|| m.file.clone(), |item| item.file.clone())
}

/// A resolved use path.
#[derive(Debug, Clone)]
enum Target {
    Item(usize),
    Module(usize),
    External(String),
}

fn self_pub(item: &syn::Item) -> bool {
    let vis = match item {
        syn::Item::Const(i) => &i.vis,
        syn::Item::Enum(i) => &i.vis,
        syn::Item::Fn(i) => &i.vis,
        syn::Item::Static(i) => &i.vis,
        syn::Item::Struct(i) => &i.vis,
        syn::Item::Trait(i) => &i.vis,
        syn::Item::Type(i) => &i.vis,
        syn::Item::Union(i) => &i.vis,
        _ => return false,
    };
    matches!(vis, syn::Visibility::Public(_))
}

/// Flatten a use tree into `(path, local name, glob)` triples.
fn flatten_use(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, String, bool)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                if let Some(last) = prefix.last() {
                    out.push((prefix.clone(), last.clone(), false));
                }
            } else {
                let mut path = prefix.clone();
                path.push(name.clone());
                out.push((path, name, false));
            }
        }
        syn::UseTree::Rename(r) => {
            let alias = r.rename.to_string();
            if alias == "_" {
                return;
            }
            let mut path = prefix.clone();
            let name = r.ident.to_string();
            if name != "self" {
                path.push(name);
            }
            out.push((path, alias, false));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), String::new(), true)),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                flatten_use(tree, prefix, out);
            }
        }
    }
}

fn derives(attrs: &[syn::Attribute]) -> Vec<String> {
    let mut names = Vec::new();
    for attr in attrs.iter().filter(|a| a.path().is_ident("derive")) {
        let parsed = attr.parse_args_with(
            syn::punctuated::Punctuated::<syn::Path, syn::Token![,]>::parse_terminated,
        );
        if let Ok(paths) = parsed {
            for path in paths {
                if let Some(seg) = path.segments.last() {
                    names.push(seg.ident.to_string());
                }
            }
        }
    }
    names
}

fn new_item(item: &syn::Item, module: usize, file: &str, _public: bool) -> Option<Item> {
    let extent = Extent::of(item.to_token_stream(), fn_body(item));
    let (name, kind, attrs, members) = match item {
        syn::Item::Struct(s) => (
            s.ident.to_string(),
            Kind::Struct,
            &s.attrs,
            fields(&s.fields, file, true),
        ),
        syn::Item::Union(u) => (
            u.ident.to_string(),
            Kind::Union,
            &u.attrs,
            named_fields(&u.fields.named, file, true),
        ),
        syn::Item::Enum(e) => (
            e.ident.to_string(),
            Kind::Enum,
            &e.attrs,
            e.variants
                .iter()
                .filter(|v| !excluded(&v.attrs))
                .map(|v| Member {
                    name: v.ident.to_string(),
                    kind: MemberKind::Variant,
                    file: file.to_owned(),
                    extent: Extent::of(v.to_token_stream(), None),
                    line: v.ident.span().start().line,
                    doc: doc_of(&v.attrs),
                    fields: fields(&v.fields, file, false),
                    method: None,
                    signature: crate::render::variant(v),
                })
                .collect(),
        ),
        syn::Item::Trait(t) => (
            t.ident.to_string(),
            Kind::Trait,
            &t.attrs,
            t.items
                .iter()
                .filter_map(|ti| trait_member(ti, file))
                .collect(),
        ),
        syn::Item::Fn(f) => (f.sig.ident.to_string(), Kind::Fn, &f.attrs, Vec::new()),
        syn::Item::Const(c) => (c.ident.to_string(), Kind::Const, &c.attrs, Vec::new()),
        syn::Item::Static(s) => (s.ident.to_string(), Kind::Static, &s.attrs, Vec::new()),
        syn::Item::Type(t) => (t.ident.to_string(), Kind::Type, &t.attrs, Vec::new()),
        _ => return None,
    };
    let line = item_ident_line(item);
    Some(Item {
        name,
        kind,
        module,
        file: file.to_owned(),
        extent,
        line,
        doc: doc_of(attrs),
        ast: item.clone(),
        members,
        implements: derives(attrs),
        paths: Vec::new(),
    })
}

fn item_ident_line(item: &syn::Item) -> usize {
    let ident = match item {
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Const(i) => &i.ident,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        other => return other.span().start().line,
    };
    ident.span().start().line
}

fn fn_body(item: &syn::Item) -> Option<Pos> {
    match item {
        syn::Item::Fn(f) => Some(f.block.brace_token.span.open().start().into()),
        _ => None,
    }
}

fn fields(fields: &syn::Fields, file: &str, only_pub: bool) -> Vec<Member> {
    match fields {
        syn::Fields::Named(named) => named_fields(&named.named, file, only_pub),
        syn::Fields::Unnamed(unnamed) => unnamed
            .unnamed
            .iter()
            .enumerate()
            .filter(|(_, f)| !only_pub || matches!(f.vis, syn::Visibility::Public(_)))
            .map(|(index, f)| Member {
                name: index.to_string(),
                kind: MemberKind::Field,
                file: file.to_owned(),
                extent: Extent::of(f.to_token_stream(), None),
                line: f.ty.span().start().line,
                doc: doc_of(&f.attrs),
                fields: Vec::new(),
                method: None,
                signature: format!("{index}: {}", crate::render::ty(&f.ty)),
            })
            .collect(),
        syn::Fields::Unit => Vec::new(),
    }
}

fn named_fields(
    named: &syn::punctuated::Punctuated<syn::Field, syn::Token![,]>,
    file: &str,
    only_pub: bool,
) -> Vec<Member> {
    named
        .iter()
        .filter(|f| !only_pub || matches!(f.vis, syn::Visibility::Public(_)))
        .filter(|f| !excluded(&f.attrs))
        .filter_map(|f| {
            let name = f.ident.as_ref()?.to_string();
            Some(Member {
                signature: format!("{name}: {}", crate::render::ty(&f.ty)),
                name,
                kind: MemberKind::Field,
                file: file.to_owned(),
                extent: Extent::of(f.to_token_stream(), None),
                line: f.ident.as_ref().map_or(0, |i| i.span().start().line),
                doc: doc_of(&f.attrs),
                fields: Vec::new(),
                method: None,
            })
        })
        .collect()
}

fn trait_member(ti: &syn::TraitItem, file: &str) -> Option<Member> {
    let line = match ti {
        syn::TraitItem::Fn(f) => f.sig.ident.span().start().line,
        syn::TraitItem::Const(c) => c.ident.span().start().line,
        syn::TraitItem::Type(t) => t.ident.span().start().line,
        other => other.span().start().line,
    };
    let (name, kind, attrs, signature, body) = match ti {
        syn::TraitItem::Fn(f) => {
            let mut sig_only = f.clone();
            strip_attrs(&mut sig_only.attrs);
            (
                f.sig.ident.to_string(),
                MemberKind::Method,
                &f.attrs,
                crate::render::fn_line(&syn::Visibility::Inherited, &f.sig),
                f.default
                    .as_ref()
                    .map(|b| Pos::from(b.brace_token.span.open().start())),
            )
        }
        syn::TraitItem::Const(c) => (
            c.ident.to_string(),
            MemberKind::Const,
            &c.attrs,
            format!("const {}: {}", c.ident, crate::render::ty(&c.ty)),
            None,
        ),
        syn::TraitItem::Type(t) => (
            t.ident.to_string(),
            MemberKind::Type,
            &t.attrs,
            crate::render::one_line(&format!("type {}", crate::render::tokens(&t.ident))),
            None,
        ),
        _ => return None,
    };
    if excluded(attrs) {
        return None;
    }
    Some(Member {
        name,
        kind,
        file: file.to_owned(),
        extent: Extent::of(ti.to_token_stream(), body),
        line,
        doc: doc_of(attrs),
        fields: Vec::new(),
        method: None,
        signature,
    })
}

fn impl_member(ii: &syn::ImplItem, file: &str) -> Option<Member> {
    match ii {
        syn::ImplItem::Fn(f)
            if matches!(f.vis, syn::Visibility::Public(_)) && !excluded(&f.attrs) =>
        {
            Some(Member {
                name: f.sig.ident.to_string(),
                kind: MemberKind::Method,
                file: file.to_owned(),
                extent: Extent::of(
                    ii.to_token_stream(),
                    Some(f.block.brace_token.span.open().start().into()),
                ),
                line: f.sig.ident.span().start().line,
                doc: doc_of(&f.attrs),
                fields: Vec::new(),
                method: Some(Box::new(f.clone())),
                signature: crate::render::fn_line(&f.vis, &f.sig),
            })
        }
        syn::ImplItem::Const(c)
            if matches!(c.vis, syn::Visibility::Public(_)) && !excluded(&c.attrs) =>
        {
            Some(Member {
                name: c.ident.to_string(),
                kind: MemberKind::Const,
                file: file.to_owned(),
                extent: Extent::of(ii.to_token_stream(), None),
                line: c.ident.span().start().line,
                doc: doc_of(&c.attrs),
                fields: Vec::new(),
                method: None,
                signature: crate::render::assoc_const(c),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_come_from_the_package_table() {
        let manifest = "[workspace]\nname = \"no\"\n[package]\nname = \"dsh-core\"\n";
        assert_eq!(package_name(manifest).as_deref(), Some("dsh-core"));
        assert_eq!(package_name("[dependencies]\nname = \"x\""), None);
    }

    #[test]
    fn docs_are_unindented_and_trimmed() {
        let item: syn::ItemStruct = syn::parse_quote! {
            /// First line.
            ///
            ///     indented code
            pub struct S;
        };
        assert_eq!(
            doc_of(&item.attrs).as_deref(),
            Some("First line.\n\n    indented code")
        );
    }
}
