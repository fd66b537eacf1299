//! Signatures as a reader wants them: printed with `prettyplease` from the
//! syntax tree, stripped of attributes, doc comments, bodies and private
//! fields, and for list entries folded onto one line.

use quote::ToTokens;

fn unparse(item: syn::Item) -> String {
    prettyplease::unparse(&syn::File {
        shebang: None,
        attrs: Vec::new(),
        items: vec![item],
    })
}

/// Fold a printed signature onto one line, undoing the vertical layout
/// `prettyplease` chooses for long parameter and argument lists.
pub fn one_line(text: &str) -> String {
    let mut line = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    for (from, to) in [
        ("( ", "("),
        (", )", ")"),
        (" )", ")"),
        ("< ", "<"),
        (", >", ">"),
    ] {
        while line.contains(from) {
            line = line.replace(from, to);
        }
    }
    line.trim_end_matches(',').to_owned()
}

/// Tokens as text, for the rare piece that has no better printer.
pub fn tokens(node: &impl ToTokens) -> String {
    node.to_token_stream().to_string()
}

/// A type, printed.
pub fn ty(ty: &syn::Type) -> String {
    let alias: syn::Item = syn::parse_quote!(type __T = #ty;);
    let printed = unparse(alias);
    let printed = printed.trim();
    let printed = printed.strip_prefix("type __T =").unwrap_or(printed);
    one_line(printed.strip_suffix(';').unwrap_or(printed))
}

/// One path segment with its generic arguments (`From<StoreError>`).
pub fn path_segment(seg: &syn::PathSegment) -> String {
    ty(&syn::Type::Path(syn::TypePath {
        qself: None,
        path: syn::Path {
            leading_colon: None,
            segments: std::iter::once(seg.clone()).collect(),
        },
    }))
}

/// A variant's shape on one line: `Start(RunInfo)`, `Corrupt { path: PathBuf, .. }`.
pub fn variant(v: &syn::Variant) -> String {
    let mut v = v.clone();
    v.attrs.clear();
    for field in v.fields.iter_mut() {
        field.attrs.clear();
    }
    let item: syn::Item = syn::parse_quote!(enum __E { #v });
    let printed = unparse(item);
    let inner = printed
        .trim()
        .strip_prefix("enum __E {")
        .and_then(|s| s.strip_suffix('}'))
        .unwrap_or(&printed);
    one_line(inner)
}

/// A function's signature on one line, without its body.
pub fn fn_line(vis: &syn::Visibility, sig: &syn::Signature) -> String {
    one_line(&fn_block(vis, sig))
}

/// A function's signature as `prettyplease` lays it out, without its body.
fn fn_block(vis: &syn::Visibility, sig: &syn::Signature) -> String {
    let item = syn::Item::Fn(syn::ItemFn {
        attrs: Vec::new(),
        vis: vis.clone(),
        sig: sig.clone(),
        block: Box::new(syn::Block {
            brace_token: Default::default(),
            stmts: Vec::new(),
        }),
    });
    let printed = unparse(item);
    let printed = printed.trim_end();
    printed
        .strip_suffix("{}")
        .unwrap_or(printed)
        .trim_end()
        .to_owned()
}

/// A constant's value is shown when it fits on a short line.
fn const_value(expr: &syn::Expr) -> Option<String> {
    let item: syn::Item = syn::parse_quote!(const __C: () = #expr;);
    let printed = unparse(item);
    let value = printed
        .trim()
        .strip_prefix("const __C: () =")?
        .strip_suffix(';')?
        .trim();
    (!value.contains('\n') && value.len() <= 60).then(|| value.to_owned())
}

fn const_line(
    vis: &syn::Visibility,
    ident: &syn::Ident,
    ty: &syn::Type,
    expr: &syn::Expr,
) -> String {
    let vis = match vis {
        syn::Visibility::Public(_) => "pub ",
        _ => "",
    };
    match const_value(expr) {
        Some(value) => format!("{vis}const {ident}: {} = {value}", self::ty(ty)),
        None => format!("{vis}const {ident}: {}", self::ty(ty)),
    }
}

/// An associated constant on one line.
pub fn assoc_const(c: &syn::ImplItemConst) -> String {
    const_line(&c.vis, &c.ident, &c.ty, &c.expr)
}

/// The signature block of an item: a struct or enum with its public shape
/// (private fields elided), a trait with its items' signatures, a function
/// without its body.
pub fn item_signature(item: &syn::Item) -> String {
    match item {
        syn::Item::Struct(s) => {
            let mut s = s.clone();
            s.attrs.clear();
            let mut private = false;
            match &mut s.fields {
                syn::Fields::Named(named) => {
                    let kept = named
                        .named
                        .iter()
                        .filter(|f| matches!(f.vis, syn::Visibility::Public(_)))
                        .cloned()
                        .map(|mut f| {
                            f.attrs.clear();
                            f
                        })
                        .collect::<syn::punctuated::Punctuated<_, _>>();
                    private = kept.len() != named.named.len();
                    named.named = kept;
                }
                syn::Fields::Unnamed(unnamed) => {
                    for field in unnamed.unnamed.iter_mut() {
                        field.attrs.clear();
                        if !matches!(field.vis, syn::Visibility::Public(_)) {
                            field.ty = syn::Type::Infer(syn::TypeInfer {
                                underscore_token: Default::default(),
                            });
                        }
                    }
                }
                syn::Fields::Unit => {}
            }
            let printed = unparse(syn::Item::Struct(s)).trim_end().to_owned();
            if private {
                elide_private(&printed)
            } else {
                printed
            }
        }
        syn::Item::Enum(e) => {
            let mut e = e.clone();
            e.attrs.clear();
            for v in e.variants.iter_mut() {
                v.attrs.clear();
                for f in v.fields.iter_mut() {
                    f.attrs.clear();
                }
            }
            unparse(syn::Item::Enum(e)).trim_end().to_owned()
        }
        syn::Item::Union(u) => {
            let mut u = u.clone();
            u.attrs.clear();
            for f in u.fields.named.iter_mut() {
                f.attrs.clear();
            }
            unparse(syn::Item::Union(u)).trim_end().to_owned()
        }
        syn::Item::Trait(t) => {
            let mut t = t.clone();
            t.attrs.clear();
            for ti in t.items.iter_mut() {
                match ti {
                    syn::TraitItem::Fn(f) => {
                        f.attrs.clear();
                        f.default = None;
                        f.semi_token = Some(Default::default());
                    }
                    syn::TraitItem::Const(c) => {
                        c.attrs.clear();
                        c.default = None;
                    }
                    syn::TraitItem::Type(ty) => {
                        ty.attrs.clear();
                        ty.default = None;
                    }
                    _ => {}
                }
            }
            unparse(syn::Item::Trait(t)).trim_end().to_owned()
        }
        syn::Item::Fn(f) => fn_block(&f.vis, &f.sig),
        syn::Item::Const(c) => const_line(&c.vis, &c.ident, &c.ty, &c.expr),
        syn::Item::Static(s) => {
            let line = const_line(&s.vis, &s.ident, &s.ty, &s.expr);
            line.replacen("const ", "static ", 1)
        }
        syn::Item::Type(t) => {
            let mut t = t.clone();
            t.attrs.clear();
            unparse(syn::Item::Type(t)).trim_end().to_owned()
        }
        other => tokens(other),
    }
}

/// Mark a struct printed without its private fields.
fn elide_private(printed: &str) -> String {
    if let Some(head) = printed.strip_suffix(" {}") {
        return format!("{head} {{\n    /* private fields */\n}}");
    }
    match printed.strip_suffix('}') {
        Some(head) => format!("{head}    /* private fields */\n}}"),
        None => printed.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_signatures_fold_onto_one_line() {
        let f: syn::ItemFn = syn::parse_quote! {
            pub async fn start(
                &self,
                request: ResolvedStartRequest,
                another_rather_long_argument: Option<Vec<ContentBlock>>,
            ) -> Result<Arc<dyn SubagentRun>, SubagentError> { self.go(request) }
        };
        assert_eq!(
            fn_line(&f.vis, &f.sig),
            "pub async fn start(&self, request: ResolvedStartRequest, another_rather_long_argument: Option<Vec<ContentBlock>>) -> Result<Arc<dyn SubagentRun>, SubagentError>"
        );
    }

    #[test]
    fn structs_hide_private_fields() {
        let item: syn::Item = syn::parse_quote! {
            #[derive(Debug)]
            pub struct S { pub a: u32, b: String }
        };
        assert_eq!(
            item_signature(&item),
            "pub struct S {\n    pub a: u32,\n    /* private fields */\n}"
        );
        let item: syn::Item = syn::parse_quote!(
            pub struct Opaque {
                inner: u8,
            }
        );
        assert_eq!(
            item_signature(&item),
            "pub struct Opaque {\n    /* private fields */\n}"
        );
        let item: syn::Item = syn::parse_quote!(
            pub struct Id(String);
        );
        assert_eq!(item_signature(&item), "pub struct Id(_);");
    }

    #[test]
    fn short_constants_show_their_value() {
        let item: syn::Item = syn::parse_quote!(
            pub const MAX: usize = 4096;
        );
        assert_eq!(item_signature(&item), "pub const MAX: usize = 4096");
        let item: syn::Item = syn::parse_quote!(
            pub const EVENT: &str = "subagent/child";
        );
        assert_eq!(
            item_signature(&item),
            "pub const EVENT: &str = \"subagent/child\""
        );
    }

    #[test]
    fn variants_and_trait_paths_print_compactly() {
        let v: syn::Variant = syn::parse_quote!(Corrupt {
            path: PathBuf,
            line: u64
        });
        assert_eq!(variant(&v), "Corrupt { path: PathBuf, line: u64 }");
        let p: syn::Path = syn::parse_quote!(std::convert::From<StoreError>);
        assert_eq!(path_segment(p.segments.last().unwrap()), "From<StoreError>");
    }
}
