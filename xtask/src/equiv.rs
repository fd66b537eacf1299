//! `rust type-equiv` blocks: fenced Rust in the Markdown pages that mirrors
//! a source item, named by the block's first line (`// crate::path::Item`).
//! A block matches its item when both lex to the same tokens once doc
//! comments are set aside (ordinary comments and layout never count), and
//! their doc comments say the same thing line for line (surrounding
//! whitespace aside). Syncing rewrites a block's body from the source text
//! of its item, so a page is fixed by one command, never by hand.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

use crate::Problem;
use crate::catalog::CATALOG_PATH;
use crate::error::Error;
use crate::model::{Crate, Extent, Item, Kind, Member, MemberKind, Workspace};

/// One `rust type-equiv` block of a page.
#[derive(Debug, Clone)]
pub struct Block {
    /// The page, relative to the tree's root.
    pub file: String,
    /// 1-based line of the opening fence.
    pub line: usize,
    /// 0-based index of the first line inside the fence.
    body_start: usize,
    /// 0-based index of the closing fence line.
    body_end: usize,
    /// The item the first line names, if it names one.
    pub target: Option<String>,
    /// The block's text after the naming line.
    pub code: String,
}

/// Whether a fence's info string opens a `type-equiv` block.
fn is_equiv_info(info: &str) -> bool {
    let mut words = info.split(|c: char| c.is_whitespace() || c == ',');
    words.next() == Some("rust") && words.any(|w| w == "type-equiv")
}

/// The opening of a fence: its marker (three or more backticks or tildes)
/// and info string.
fn fence_open(line: &str) -> Option<(String, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let ch = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let marker: String = rest.chars().take_while(|&c| c == ch).collect();
    if marker.len() < 3 {
        return None;
    }
    let info = rest[marker.len()..].trim();
    if ch == '`' && info.contains('`') {
        return None;
    }
    Some((marker, info))
}

fn fence_closes(line: &str, marker: &str) -> bool {
    let trimmed = line.trim();
    let ch = marker.chars().next().unwrap_or('`');
    trimmed.len() >= marker.len() && trimmed.chars().all(|c| c == ch)
}

/// Every `type-equiv` block of a page; an unterminated one is a problem.
pub fn blocks(file: &str, text: &str) -> (Vec<Block>, Vec<Problem>) {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut problems = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some((marker, info)) = fence_open(lines[i]) else {
            i += 1;
            continue;
        };
        let open = i;
        let close = (open + 1..lines.len()).find(|&j| fence_closes(lines[j], &marker));
        if is_equiv_info(info) {
            match close {
                None => problems.push(Problem::new(
                    format!("{file}:{}", open + 1),
                    "a type-equiv block is not terminated (no closing fence)",
                )),
                Some(close) => {
                    let body = &lines[open + 1..close];
                    let target = body.first().and_then(|first| {
                        let first = first.trim();
                        (first.starts_with("//") && !first.starts_with("///"))
                            .then(|| first.trim_start_matches('/').trim().to_owned())
                            .filter(|t| !t.is_empty())
                    });
                    let code = body.get(1..).unwrap_or(&[]).join("\n");
                    found.push(Block {
                        file: file.to_owned(),
                        line: open + 1,
                        body_start: open + 1,
                        body_end: close,
                        target,
                        code,
                    });
                }
            }
        }
        i = close.map_or(lines.len(), |c| c + 1);
    }
    (found, problems)
}

/// Every Markdown page that may hold blocks: the top-level `*.md` files and
/// everything under `docs/` but the catalogue, sorted.
pub fn pages(root: &Path) -> Result<Vec<String>, Error> {
    fn walk(root: &Path, rel: &str, out: &mut Vec<String>) -> Result<(), Error> {
        let dir = root.join(rel);
        for entry in fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let child = format!("{rel}/{name}");
            let kind = entry.file_type().map_err(|e| Error::io(entry.path(), e))?;
            if kind.is_dir() {
                walk(root, &child, out)?;
            } else if name.ends_with(".md") && child != CATALOG_PATH {
                out.push(child);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for entry in fs::read_dir(root).map_err(|e| Error::io(root, e))? {
        let entry = entry.map_err(|e| Error::io(root, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") && entry.path().is_file() {
            out.push(name);
        }
    }
    if root.join("docs").is_dir() {
        walk(root, "docs", &mut out)?;
    }
    out.sort();
    Ok(out)
}

/// What a block can mirror.
#[derive(Clone, Copy)]
pub enum Mirror<'a> {
    /// A whole item.
    Item(&'a Crate, &'a Item),
    /// A method or associated item (`Type::method`).
    Member(&'a Crate, &'a Item, &'a Member),
}

impl Mirror<'_> {
    /// `path:line` of the mirrored definition.
    pub fn location(&self) -> String {
        match self {
            Mirror::Item(_, item) => format!("{}:{}", item.file, item.line),
            Mirror::Member(_, _, member) => format!("{}:{}", member.file, member.line),
        }
    }

    /// The source text a block must equal: the definition from its first
    /// attribute to its last token; for a function, the signature ended by
    /// `;` (its body is not the API).
    pub fn source(&self) -> Option<String> {
        let (krate, file, extent, is_fn) = match self {
            Mirror::Item(krate, item) => (krate, &item.file, item.extent, item.kind == Kind::Fn),
            Mirror::Member(krate, _, member) => (
                krate,
                &member.file,
                member.extent,
                member.kind == MemberKind::Method,
            ),
        };
        slice(krate.files.get(file)?, extent, is_fn)
    }
}

/// Cut a definition out of its file and undo its indentation.
fn slice(text: &str, extent: Extent, signature_only: bool) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let end = match (signature_only, extent.body) {
        (true, Some(body)) => body,
        _ => extent.end,
    };
    let first = extent.start.line.checked_sub(1)?;
    let last = end.line.checked_sub(1)?;
    let mut out: Vec<String> = lines
        .get(first..=last)?
        .iter()
        .map(|l| (*l).to_owned())
        .collect();
    if let Some(tail) = out.last_mut() {
        *tail = tail.chars().take(end.column).collect();
    }
    let indent: String = out
        .first()?
        .chars()
        .take_while(|c| c.is_whitespace())
        .collect();
    let mut text = out
        .iter()
        .map(|l| l.strip_prefix(indent.as_str()).unwrap_or(l).trim_end())
        .collect::<Vec<_>>()
        .join("\n");
    if signature_only && extent.body.is_some() {
        text = text.trim_end().trim_end_matches(',').to_owned();
        text.push(';');
    }
    Some(text)
}

/// Every public path a block may name, with what it names.
pub fn index(ws: &Workspace) -> BTreeMap<String, Mirror<'_>> {
    let mut map = BTreeMap::new();
    for krate in &ws.crates {
        for item in krate.public_items() {
            for path in &item.paths {
                map.insert(path.clone(), Mirror::Item(krate, item));
                for member in item.members.iter().filter(|m| {
                    matches!(
                        m.kind,
                        MemberKind::Method | MemberKind::Const | MemberKind::Type
                    )
                }) {
                    map.insert(
                        format!("{path}::{}", member.name),
                        Mirror::Member(krate, item, member),
                    );
                }
            }
        }
    }
    map
}

/// Tokens of a text with doc comments set aside: the structure as a list
/// of token texts, and the doc lines in order.
fn lex(text: &str) -> Result<(Vec<Tok>, Vec<String>), String> {
    let stream: TokenStream = text.parse().map_err(|e| format!("does not lex: {e}"))?;
    let mut tokens = Vec::new();
    let mut docs = Vec::new();
    flatten(stream, &mut tokens, &mut docs);
    Ok((tokens, docs))
}

/// A `doc = "..."` attribute body's text.
fn doc_value(group: &proc_macro2::Group) -> Option<String> {
    if group.delimiter() != Delimiter::Bracket {
        return None;
    }
    let inner: Vec<TokenTree> = group.stream().into_iter().collect();
    match inner.as_slice() {
        [
            TokenTree::Ident(ident),
            TokenTree::Punct(eq),
            TokenTree::Literal(lit),
        ] if ident == "doc" && eq.as_char() == '=' => match syn::Lit::new(lit.clone()) {
            syn::Lit::Str(s) => Some(s.value()),
            _ => None,
        },
        _ => None,
    }
}

/// One token as compared: its text, and whether it is a punctuation mark
/// joined to the next (only for display: `->` rather than `- >`).
#[derive(Debug, Clone)]
struct Tok {
    text: String,
    joint: bool,
}

impl PartialEq for Tok {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

fn flatten(stream: TokenStream, tokens: &mut Vec<Tok>, docs: &mut Vec<String>) {
    let trees: Vec<TokenTree> = stream.into_iter().collect();
    let mut i = 0;
    while i < trees.len() {
        if let TokenTree::Punct(p) = &trees[i]
            && p.as_char() == '#'
        {
            let bang = matches!(trees.get(i + 1), Some(TokenTree::Punct(b)) if b.as_char() == '!');
            let at = if bang { i + 2 } else { i + 1 };
            if let Some(TokenTree::Group(g)) = trees.get(at)
                && let Some(doc) = doc_value(g)
            {
                docs.extend(doc.split('\n').map(|l| l.trim().to_owned()));
                i = at + 1;
                continue;
            }
        }
        let tok = |text: &str| Tok {
            text: text.to_owned(),
            joint: false,
        };
        match &trees[i] {
            TokenTree::Group(g) => {
                let (open, close) = match g.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Brace => ("{", "}"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::None => ("", ""),
                };
                if !open.is_empty() {
                    tokens.push(tok(open));
                }
                flatten(g.stream(), tokens, docs);
                if !close.is_empty() {
                    close_list(tokens);
                    tokens.push(tok(close));
                }
            }
            TokenTree::Punct(p) => {
                if p.as_char() == '>' {
                    close_list(tokens);
                }
                tokens.push(Tok {
                    text: p.as_char().to_string(),
                    joint: p.spacing() == Spacing::Joint,
                });
            }
            TokenTree::Ident(ident) => tokens.push(tok(&ident.to_string())),
            TokenTree::Literal(lit) => tokens.push(tok(&lit.to_string())),
        }
        i += 1;
    }
}

/// A trailing comma is layout: rustfmt adds one to every vertical list.
fn close_list(tokens: &mut Vec<Tok>) {
    if tokens.last().is_some_and(|t| t.text == ",") {
        tokens.pop();
    }
}

fn excerpt(tokens: &[Tok], at: usize) -> String {
    let from = at.saturating_sub(6);
    let to = (at + 6).min(tokens.len());
    let mut text = String::new();
    if from > 0 {
        text.push_str("… ");
    }
    for (n, tok) in tokens[from..to].iter().enumerate() {
        if matches!(tok.text.as_str(), "," | ";" | ")" | "]") && text.ends_with(' ') {
            text.pop();
        }
        text.push_str(&tok.text);
        let open = matches!(tok.text.as_str(), "(" | "[");
        if n + from + 1 < to && !tok.joint && !open {
            text.push(' ');
        }
    }
    if to < tokens.len() {
        text.push_str(" …");
    }
    if text.is_empty() {
        "(nothing)".to_owned()
    } else {
        text
    }
}

/// How a block differs from its source, or `None` when it matches.
pub fn difference(block: &str, source: &str) -> Option<String> {
    let (block_tokens, block_docs) = match lex(block) {
        Ok(lexed) => lexed,
        Err(message) => return Some(format!("the block {message}")),
    };
    let (source_tokens, source_docs) = match lex(source) {
        Ok(lexed) => lexed,
        Err(message) => return Some(format!("the source {message}")),
    };
    if block_tokens != source_tokens {
        let at = block_tokens
            .iter()
            .zip(&source_tokens)
            .position(|(a, b)| a != b)
            .unwrap_or(block_tokens.len().min(source_tokens.len()));
        return Some(format!(
            "the definition differs: the block has `{}` where the source has `{}`",
            excerpt(&block_tokens, at),
            excerpt(&source_tokens, at)
        ));
    }
    if block_docs != source_docs {
        let at = block_docs
            .iter()
            .zip(&source_docs)
            .position(|(a, b)| a != b);
        return Some(match at {
            Some(at) => format!(
                "doc comment line {} differs: the block says {:?}, the source says {:?}",
                at + 1,
                block_docs[at],
                source_docs[at]
            ),
            None => format!(
                "the doc comments differ: the block has {} doc lines, the source {}",
                block_docs.len(),
                source_docs.len()
            ),
        });
    }
    None
}

/// Public paths that end like `wanted`, to suggest for a name that does
/// not resolve.
pub fn suggestions(index: &BTreeMap<String, Mirror<'_>>, wanted: &str) -> Vec<String> {
    let last = wanted.rsplit("::").next().unwrap_or(wanted);
    index
        .keys()
        .filter(|path| path.rsplit("::").next() == Some(last))
        .take(3)
        .cloned()
        .collect()
}

/// Rewrite the blocks of one page from their sources; returns the new
/// text, or `None` when nothing changed. Blocks whose item cannot be found
/// are left as they are.
pub fn sync_page(
    text: &str,
    found: &[Block],
    index: &BTreeMap<String, Mirror<'_>>,
) -> Option<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut changed = false;
    for block in found.iter().rev() {
        let Some(target) = &block.target else {
            continue;
        };
        let Some(source) = index.get(target).and_then(Mirror::source) else {
            continue;
        };
        let mut body = vec![format!("// {target}")];
        body.extend(source.lines().map(str::to_owned));
        if lines[block.body_start..block.body_end] != body[..] {
            lines.splice(block.body_start..block.body_end, body);
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    let mut out = lines.join("\n");
    if text.ends_with('\n') {
        out.push('\n');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_found_by_info_string_and_named_by_their_first_line() {
        let page = "# Page\n\n````markdown\n```rust type-equiv\n// not::a::Block\n```\n````\n\n```rust type-equiv\n// demo::Thing\npub struct Thing;\n```\n\n```rust\nfn other() {}\n```\n";
        let (found, problems) = blocks("docs/p.md", page);
        assert!(problems.is_empty());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].line, 9);
        assert_eq!(found[0].target.as_deref(), Some("demo::Thing"));
        assert_eq!(found[0].code, "pub struct Thing;");
    }

    #[test]
    fn comments_and_layout_do_not_count_but_docs_do() {
        let source = "/// A thing.\n#[derive(Debug)]\npub struct Thing {\n    /// Its size.\n    pub size: u32,\n}";
        let same = "/// A thing.\n#[derive(Debug)] pub struct Thing { // note\n  /// Its size.\n  pub size: u32 }";
        assert_eq!(difference(same, source), None);
        let wider = same.replace("u32", "u64");
        assert_eq!(
            difference(&wider, source).as_deref(),
            Some(
                "the definition differs: the block has `… struct Thing { pub size : u64 }` where the source has `… struct Thing { pub size : u32 }`"
            )
        );
        let redoc = same.replace("Its size.", "Its width.");
        let diff = difference(&redoc, source).unwrap_or_default();
        assert!(diff.contains("doc comment line 2"), "{diff}");
    }

    #[test]
    fn functions_mirror_their_signature() {
        let text = "impl X {\n    /// Frob it.\n    pub fn frob(\n        &self,\n        a: u32,\n    ) -> u32 {\n        a\n    }\n}\n";
        let extent = Extent {
            start: crate::model::Pos { line: 2, column: 4 },
            end: crate::model::Pos { line: 8, column: 5 },
            body: Some(crate::model::Pos {
                line: 6,
                column: 13,
            }),
        };
        assert_eq!(
            slice(text, extent, true).as_deref(),
            Some("/// Frob it.\npub fn frob(\n    &self,\n    a: u32,\n) -> u32;")
        );
    }
}
