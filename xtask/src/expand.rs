//! A small `macro_rules!` expander, so that items a crate's own macros
//! generate (`dsh_core::MessageId` from `opaque_id!`, builder methods from
//! a shared-setters macro) are part of the surface the model reads.
//!
//! It expands an invocation of a macro defined earlier in the same crate by
//! `macro_rules!`, trying the macro's arms in order. A matcher is the usual
//! language: literal tokens, delimited groups, `$name:fragment` and
//! `$( ... ) sep? op` repetitions. A fragment such as `expr`, `ty` or
//! `meta` takes the tokens up to the matcher token that follows it (or the
//! repetition's separator), which is what Rust's follow-set rules make
//! unambiguous; `ident`, `literal`, `lifetime`, `tt`, `block` and `vis`
//! take their exact shape. Nothing is evaluated, and hygiene does not
//! matter to a reader of signatures. An invocation no arm matches expands
//! to nothing, as before this module existed.

use std::collections::BTreeMap;

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream, TokenTree};

/// The arms of one `macro_rules!` macro.
#[derive(Clone)]
pub struct Rules {
    arms: Vec<(Vec<Matcher>, Vec<TokenTree>)>,
}

#[derive(Clone)]
enum Matcher {
    /// An ident, a punctuation character or a literal, by its text.
    Token(String),
    Group(Delimiter, Vec<Matcher>),
    Var(String, String),
    Repeat(Vec<Matcher>, Option<String>, char),
}

#[derive(Clone)]
enum Fragment {
    One(Vec<TokenTree>),
    Many(Vec<Fragment>),
}

type Bindings = BTreeMap<String, Fragment>;

/// The name and arms of a `macro_rules! name { ... }` item; `None` for any
/// other macro item, or arms this expander cannot read.
pub fn rules(item: &syn::ItemMacro) -> Option<(String, Rules)> {
    if !item.mac.path.is_ident("macro_rules") {
        return None;
    }
    let name = item.ident.as_ref()?.to_string();
    let tokens: Vec<TokenTree> = item.mac.tokens.clone().into_iter().collect();
    let mut arms = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let TokenTree::Group(pattern) = &tokens[i] else {
            return None;
        };
        let arrow = (tokens.get(i + 1)?, tokens.get(i + 2)?);
        if !matches!(arrow, (TokenTree::Punct(a), TokenTree::Punct(b)) if a.as_char() == '=' && b.as_char() == '>')
        {
            return None;
        }
        let TokenTree::Group(body) = tokens.get(i + 3)? else {
            return None;
        };
        arms.push((
            matchers(&pattern.stream().into_iter().collect::<Vec<_>>())?,
            body.stream().into_iter().collect(),
        ));
        i += 4;
        if matches!(tokens.get(i), Some(TokenTree::Punct(p)) if p.as_char() == ';') {
            i += 1;
        }
    }
    Some((name, Rules { arms }))
}

impl Rules {
    /// The tokens an invocation with `input` expands to, from the first arm
    /// that matches it.
    pub fn expand(&self, input: TokenStream) -> Option<TokenStream> {
        let input: Vec<TokenTree> = input.into_iter().collect();
        self.arms.iter().find_map(|(pattern, body)| {
            let mut bindings = Bindings::new();
            let used = match_seq(pattern, &input, None, &mut bindings)?;
            (used == input.len()).then(|| transcribe(body, &bindings))?
        })
    }
}

fn is_op(tt: &TokenTree) -> Option<char> {
    match tt {
        TokenTree::Punct(p) if matches!(p.as_char(), '*' | '+' | '?') => Some(p.as_char()),
        _ => None,
    }
}

fn is_dollar(tt: &TokenTree) -> bool {
    matches!(tt, TokenTree::Punct(p) if p.as_char() == '$')
}

fn matchers(tokens: &[TokenTree]) -> Option<Vec<Matcher>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            tt if is_dollar(tt) => match tokens.get(i + 1)? {
                TokenTree::Ident(name) => {
                    let colon = tokens.get(i + 2)?;
                    let TokenTree::Ident(fragment) = tokens.get(i + 3)? else {
                        return None;
                    };
                    if colon.to_string() != ":" {
                        return None;
                    }
                    out.push(Matcher::Var(name.to_string(), fragment.to_string()));
                    i += 4;
                }
                TokenTree::Group(g) if g.delimiter() == Delimiter::Parenthesis => {
                    let inner = matchers(&g.stream().into_iter().collect::<Vec<_>>())?;
                    let next = tokens.get(i + 2)?;
                    if let Some(op) = is_op(next) {
                        out.push(Matcher::Repeat(inner, None, op));
                        i += 3;
                    } else {
                        let op = is_op(tokens.get(i + 3)?)?;
                        out.push(Matcher::Repeat(inner, Some(next.to_string()), op));
                        i += 4;
                    }
                }
                _ => return None,
            },
            TokenTree::Group(g) => {
                let inner = matchers(&g.stream().into_iter().collect::<Vec<_>>())?;
                out.push(Matcher::Group(g.delimiter(), inner));
                i += 1;
            }
            other => {
                out.push(Matcher::Token(other.to_string()));
                i += 1;
            }
        }
    }
    Some(out)
}

/// Match `pattern` against a prefix of `input`; how many tokens it took.
/// `follow` is the token text that comes after the sequence, which ends a
/// fragment that is last in it.
fn match_seq(
    pattern: &[Matcher],
    input: &[TokenTree],
    follow: Option<&str>,
    bindings: &mut Bindings,
) -> Option<usize> {
    let mut pos = 0;
    for (k, matcher) in pattern.iter().enumerate() {
        let next = match pattern.get(k + 1) {
            Some(Matcher::Token(text)) => Some(text.as_str()),
            Some(_) => None,
            None => follow,
        };
        match matcher {
            Matcher::Token(text) => {
                if input.get(pos)?.to_string() != *text {
                    return None;
                }
                pos += 1;
            }
            Matcher::Group(delimiter, inner) => {
                let TokenTree::Group(g) = input.get(pos)? else {
                    return None;
                };
                let tokens: Vec<TokenTree> = g.stream().into_iter().collect();
                if g.delimiter() != *delimiter
                    || match_seq(inner, &tokens, None, bindings)? != tokens.len()
                {
                    return None;
                }
                pos += 1;
            }
            Matcher::Var(name, fragment) => {
                let rest = &input[pos..];
                let taken = take_fragment(fragment, rest, next)?;
                bindings.insert(name.clone(), Fragment::One(rest[..taken].to_vec()));
                pos += taken;
            }
            Matcher::Repeat(inner, separator, op) => {
                let stop = separator.as_deref().or(next);
                let mut rounds: Vec<Bindings> = Vec::new();
                loop {
                    let mut at = pos;
                    if !rounds.is_empty()
                        && let Some(separator) = separator
                    {
                        if input.get(at).map(ToString::to_string).as_deref()
                            != Some(separator.as_str())
                        {
                            break;
                        }
                        at += 1;
                    }
                    let mut round = Bindings::new();
                    match match_seq(inner, &input[at..], stop, &mut round) {
                        Some(taken) if taken > 0 => {
                            pos = at + taken;
                            rounds.push(round);
                        }
                        _ => break,
                    }
                    if *op == '?' {
                        break;
                    }
                }
                if *op == '+' && rounds.is_empty() {
                    return None;
                }
                let mut names = Vec::new();
                variables(inner, &mut names);
                for name in names {
                    let each = rounds
                        .iter_mut()
                        .map(|round| round.remove(&name).unwrap_or(Fragment::Many(Vec::new())))
                        .collect();
                    bindings.insert(name, Fragment::Many(each));
                }
            }
        }
    }
    Some(pos)
}

fn variables(pattern: &[Matcher], out: &mut Vec<String>) {
    for matcher in pattern {
        match matcher {
            Matcher::Var(name, _) => out.push(name.clone()),
            Matcher::Group(_, inner) | Matcher::Repeat(inner, _, _) => variables(inner, out),
            Matcher::Token(_) => {}
        }
    }
}

/// How many tokens at the start of `input` make a `fragment`.
fn take_fragment(fragment: &str, input: &[TokenTree], follow: Option<&str>) -> Option<usize> {
    let first = input.first();
    match fragment {
        "ident" => matches!(first?, TokenTree::Ident(_)).then_some(1),
        "tt" => first.map(|_| 1),
        "block" => {
            matches!(first?, TokenTree::Group(g) if g.delimiter() == Delimiter::Brace).then_some(1)
        }
        "lifetime" => {
            (first?.to_string() == "'" && matches!(input.get(1)?, TokenTree::Ident(_))).then_some(2)
        }
        "literal" => match first? {
            TokenTree::Literal(_) => Some(1),
            TokenTree::Punct(p) if p.as_char() == '-' => {
                matches!(input.get(1)?, TokenTree::Literal(_)).then_some(2)
            }
            _ => None,
        },
        "vis" => match first {
            Some(TokenTree::Ident(i)) if i == "pub" => Some(
                1 + usize::from(
                    matches!(input.get(1), Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis),
                ),
            ),
            _ => Some(0),
        },
        _ => {
            // Up to the follow token at angle-bracket depth zero.
            let mut depth = 0usize;
            let mut taken = 0;
            for (i, tt) in input.iter().enumerate() {
                let text = tt.to_string();
                if depth == 0 && follow == Some(text.as_str()) {
                    break;
                }
                let arrow = i > 0
                    && matches!(&input[i - 1], TokenTree::Punct(p) if matches!(p.as_char(), '-' | '='));
                match text.as_str() {
                    "<" => depth += 1,
                    ">" if !arrow => depth = depth.saturating_sub(1),
                    _ => {}
                }
                taken = i + 1;
            }
            (taken > 0).then_some(taken)
        }
    }
}

fn transcribe(body: &[TokenTree], bindings: &Bindings) -> Option<TokenStream> {
    let mut out = TokenStream::new();
    let mut i = 0;
    while i < body.len() {
        match &body[i] {
            tt if is_dollar(tt) => match body.get(i + 1) {
                Some(TokenTree::Ident(name)) if name == "crate" => {
                    out.extend([TokenTree::Ident(Ident::new("crate", Span::call_site()))]);
                    i += 2;
                }
                Some(TokenTree::Ident(name)) => {
                    match bindings.get(&name.to_string())? {
                        Fragment::One(tokens) => out.extend(tokens.iter().cloned()),
                        Fragment::Many(_) => return None,
                    }
                    i += 2;
                }
                Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis => {
                    let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                    let next = body.get(i + 2)?;
                    let separator = if is_op(next).is_some() {
                        i += 3;
                        None
                    } else {
                        is_op(body.get(i + 3)?)?;
                        i += 4;
                        Some(next.clone())
                    };
                    let mut names = Vec::new();
                    used(&inner, &mut names);
                    let repeated: Vec<(&String, &Vec<Fragment>)> = names
                        .iter()
                        .filter_map(|name| match bindings.get(name) {
                            Some(Fragment::Many(each)) => Some((name, each)),
                            _ => None,
                        })
                        .collect();
                    let rounds = repeated.first()?.1.len();
                    if repeated.iter().any(|(_, each)| each.len() != rounds) {
                        return None;
                    }
                    for round in 0..rounds {
                        if round > 0
                            && let Some(separator) = &separator
                        {
                            out.extend([separator.clone()]);
                        }
                        let mut these = bindings.clone();
                        for (name, each) in &repeated {
                            these.insert((*name).clone(), each[round].clone());
                        }
                        out.extend(transcribe(&inner, &these)?);
                    }
                }
                _ => {
                    out.extend([body[i].clone()]);
                    i += 1;
                }
            },
            TokenTree::Group(g) => {
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                let mut group = Group::new(g.delimiter(), transcribe(&inner, bindings)?);
                group.set_span(g.span());
                out.extend([TokenTree::Group(group)]);
                i += 1;
            }
            other => {
                out.extend([other.clone()]);
                i += 1;
            }
        }
    }
    Some(out)
}

/// The `$name`s a transcriber uses, at any depth.
fn used(body: &[TokenTree], out: &mut Vec<String>) {
    for (i, tt) in body.iter().enumerate() {
        match tt {
            TokenTree::Ident(name) if i > 0 && is_dollar(&body[i - 1]) => {
                out.push(name.to_string());
            }
            TokenTree::Group(g) => used(&g.stream().into_iter().collect::<Vec<_>>(), out),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(definition: &str, input: &str) -> Option<String> {
        let item: syn::ItemMacro = syn::parse_str(definition).ok()?;
        let (_, rules) = rules(&item)?;
        rules
            .expand(input.parse().ok()?)
            .map(|tokens| tokens.to_string())
    }

    #[test]
    fn an_id_macro_expands_with_its_docs() {
        let got = expand(
            "macro_rules! id { ($(#[$doc:meta])* $name:ident, $prefix:literal) => { \
             $(#[$doc])* pub struct $name(String); \
             impl $name { pub fn prefix() -> &'static str { $prefix } } }; }",
            "#[doc = \" One.\"] #[doc = \" Two.\"] MessageId, \"m-\"",
        );
        assert_eq!(
            got.as_deref(),
            Some(
                "# [doc = \" One.\"] # [doc = \" Two.\"] pub struct MessageId (String) ; \
                 impl MessageId { pub fn prefix () -> &'static str { \"m-\" } }"
            )
        );
    }

    #[test]
    fn separated_repetitions_and_later_arms() {
        let definition = "macro_rules! m { () => { struct None; }; \
             ($($t:ty),+ $(,)?) => { $(impl X for $t {})* }; }";
        assert_eq!(expand(definition, "").as_deref(), Some("struct None ;"));
        assert_eq!(
            expand(definition, "Vec<(A, B)>, u8,").as_deref(),
            Some("impl X for Vec < (A , B) >{ } impl X for u8 { }")
        );
        let literal = "macro_rules! k { (x $a:ident) => { struct $a; }; }";
        assert_eq!(expand(literal, "x A").as_deref(), Some("struct A ;"));
        assert_eq!(expand(literal, "y A"), None);
    }
}
