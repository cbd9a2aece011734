//! Reading the workspace's sources: which files exist, which of their lines are test code.

use proc_macro2::{TokenStream, TokenTree};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use syn::spanned::Spanned;
use syn::visit::Visit;

/// The workspace root: this crate is `crates/core`.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `crates/*/src`, sorted, relative to the workspace root.
pub fn crate_source_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/ is readable")
        .map(|entry| entry.expect("crates/ entry").path().join("src"))
        .filter(|src| src.is_dir())
        .map(|src| {
            src.strip_prefix(root)
                .expect("under the root")
                .to_path_buf()
        })
        .collect();
    dirs.sort();
    dirs
}

/// Every `.rs` file under `dir` (relative to `root`), sorted.
pub fn rust_files(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![root.join(dir)];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("source directory is readable") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(
                    path.strip_prefix(root)
                        .expect("under the root")
                        .to_path_buf(),
                );
            }
        }
    }
    files.sort();
    files
}

pub fn parse(path: &Path, text: &str) -> syn::File {
    syn::parse_file(text).unwrap_or_else(|e| {
        panic!(
            "{}:{}: does not parse: {e}",
            path.display(),
            e.span().start().line
        )
    })
}

/// Whether `attrs` make an item exist only in test builds: `#[cfg(test)]` or
/// `#[cfg(all(.., test, ..))]`. `cfg(any(test, ..))` and `cfg(not(test))` are built without
/// tests too, so they are not test code.
pub fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .meta
                .require_list()
                .is_ok_and(|list| predicate_requires_test(list.tokens.clone()))
    })
}

/// Whether the cfg predicate `tokens` holds only when `test` does.
fn predicate_requires_test(tokens: TokenStream) -> bool {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    match tokens.as_slice() {
        [TokenTree::Ident(ident)] => ident == "test",
        [TokenTree::Ident(all), TokenTree::Group(group)] if all == "all" => {
            split_on_commas(group.stream())
                .into_iter()
                .any(predicate_requires_test)
        }
        _ => false,
    }
}

fn split_on_commas(tokens: TokenStream) -> Vec<TokenStream> {
    let mut parts = vec![TokenStream::new()];
    for token in tokens {
        match &token {
            TokenTree::Punct(p) if p.as_char() == ',' => parts.push(TokenStream::new()),
            _ => parts
                .last_mut()
                .expect("starts with one part")
                .extend([token]),
        }
    }
    parts
}

/// The lines of `text` that are not test code: every line but those of `#[cfg(test)]` items
/// (from their first attribute or doc comment to their closing brace), at any depth.
pub fn non_test_lines(text: &str, syntax: &syn::File) -> usize {
    let mut test_items = TestItemLines::default();
    test_items.visit_file(syntax);
    text.lines().count() - test_items.lines.len()
}

#[derive(Default)]
struct TestItemLines {
    lines: BTreeSet<usize>,
}

impl TestItemLines {
    fn skip_if_test(&mut self, attrs: &[syn::Attribute], span: proc_macro2::Span) -> bool {
        let test = is_test_only(attrs);
        if test {
            self.lines.extend(span.start().line..=span.end().line);
        }
        test
    }
}

impl<'ast> Visit<'ast> for TestItemLines {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !self.skip_if_test(item_attrs(item), item.span()) {
            syn::visit::visit_item(self, item);
        }
    }
    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        if !self.skip_if_test(impl_item_attrs(item), item.span()) {
            syn::visit::visit_impl_item(self, item);
        }
    }
    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        if !self.skip_if_test(trait_item_attrs(item), item.span()) {
            syn::visit::visit_trait_item(self, item);
        }
    }
}

pub fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

pub fn impl_item_attrs(item: &syn::ImplItem) -> &[syn::Attribute] {
    match item {
        syn::ImplItem::Const(i) => &i.attrs,
        syn::ImplItem::Fn(i) => &i.attrs,
        syn::ImplItem::Type(i) => &i.attrs,
        syn::ImplItem::Macro(i) => &i.attrs,
        _ => &[],
    }
}

pub fn trait_item_attrs(item: &syn::TraitItem) -> &[syn::Attribute] {
    match item {
        syn::TraitItem::Const(i) => &i.attrs,
        syn::TraitItem::Fn(i) => &i.attrs,
        syn::TraitItem::Type(i) => &i.attrs,
        syn::TraitItem::Macro(i) => &i.attrs,
        _ => &[],
    }
}

#[test]
fn test_only_cfg_predicates() {
    let cases = [
        ("#[cfg(test)]", true),
        ("#[cfg(all(test, feature = \"dev\"))]", true),
        ("#[cfg(all(unix, all(test)))]", true),
        ("#[cfg(any(test, feature = \"dev\"))]", false),
        ("#[cfg(not(test))]", false),
        ("#[cfg(feature = \"test\")]", false),
        ("#[cfg_attr(test, allow(dead_code))]", false),
        ("#[test]", false),
    ];
    for (attr, expected) in cases {
        let item: syn::ItemFn = syn::parse_str(&format!("{attr} fn f() {{}}")).expect(attr);
        assert_eq!(is_test_only(&item.attrs), expected, "{attr}");
    }
}

#[test]
fn counts_lines_outside_test_items() {
    let cases = [
        ("fn a() {}\nfn b() {}\n", 2),
        // The test module, its attribute and doc comment are not counted; what follows is.
        (
            "fn a() {}\n/// Tests.\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\nfn b() {}\n",
            2,
        ),
        // A test-only helper inside an impl block.
        (
            "impl A {\n    #[cfg(test)]\n    fn helper() {}\n    fn real() {}\n}\n",
            3,
        ),
        // A test-only module declared here, defined in its own file.
        ("#[cfg(test)]\nmod tests;\nfn a() {}\n", 1),
        ("#[cfg(any(test, unix))]\nfn a() {}\n", 2),
    ];
    for (text, expected) in cases {
        let syntax = parse(Path::new("case.rs"), text);
        assert_eq!(non_test_lines(text, &syntax), expected, "{text}");
    }
}
