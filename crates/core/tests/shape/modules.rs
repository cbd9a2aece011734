//! A crate's module graph: its modules (files and inline non-test modules), and an edge from
//! module A to module B wherever A's non-test code names an item of B through a `crate::`,
//! `super::` or `self::` path, or a path starting with one of A's child modules or imports.
//!
//! How a path counts:
//! - It resolves to the deepest module it names: `crate::engines::kyverno::translate` names
//!   `crate::engines::kyverno`; `crate::engines::Engine` names `crate::engines`.
//! - A name that a module imports (`use`, `pub use`, `use x::*`) is followed to the module that
//!   defines it, so a child reaching `super::Item` where the parent only re-exports
//!   `Item` from a sibling depends on that sibling, not on the parent.
//! - A module's `use` of its own descendants (`pub use child::Item`, `use child::*`) and its
//!   `mod child;` declarations are its surface: what its users and its children reach through
//!   it, not a use of the child's logic, so they make no edge by themselves. The module's own
//!   code naming such an import does (`Item::new()` there is an edge to `child`). Every other
//!   `use` is an edge, and so is every path in code.
//! - A name alone in code (`translate(..)`) is an edge when the module imports it, by name or
//!   through a glob; otherwise it is the module's own item, a local or the prelude's.
//! - `use super::*` names the parent module as a whole: an edge to the parent.
//! - Test code (`#[cfg(test)]` items at any depth) is not looked at.
//! - Paths in macro invocations count where their tokens read `crate::a::b`, `super::a`,
//!   `self::a` (the macro body is not parsed).
//! - Modules declared by a macro (the `engines!` registry declares its engines' modules) are
//!   found from the file layout: a source file that no `mod` declaration reaches belongs to the
//!   module its path names.

use crate::source::{impl_item_attrs, is_test_only, item_attrs, trait_item_attrs};
use proc_macro2::{TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// Reads a source file (relative to the workspace root), `None` if it does not exist.
pub type Read<'a> = dyn Fn(&Path) -> Option<String> + 'a;

#[derive(Debug)]
pub struct Module {
    /// `crate::engines::kyverno`
    pub name: String,
    pub file: PathBuf,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// Names of the items (other than modules) it defines.
    defines: BTreeSet<String>,
    /// Names it imports, with the path they are imported from.
    imports: BTreeMap<String, Vec<String>>,
    /// Paths it glob-imports (`use path::*`).
    globs: Vec<Vec<String>>,
    references: Vec<Reference>,
}

#[derive(Debug)]
struct Reference {
    segments: Vec<String>,
    line: usize,
    kind: ReferenceKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReferenceKind {
    /// A `use` item of the module (not one in a function body): no edge when it names the
    /// module's own descendant.
    Use,
    /// A path of two or more segments in code (`crate::a::f()`, `child::f()`).
    Path,
    /// A name alone in code (`f()`, `Type`): an edge only when it is imported.
    Bare,
}

/// One place where a module names another module's item.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub file: PathBuf,
    pub line: usize,
    pub path: String,
}

pub struct CrateModules {
    pub modules: Vec<Module>,
    /// Files declared by `#[cfg(test)] mod x;`: test code, not modules of the graph.
    pub test_files: BTreeSet<PathBuf>,
}

impl CrateModules {
    /// The modules of the crate rooted at `root_file` (`crates/x/src/lib.rs`), including the
    /// files of `src_dir` that no declaration reaches.
    pub fn load(read: &Read, root_file: &Path, src_dir: &Path, all_files: &[PathBuf]) -> Self {
        let mut loader = Loader {
            read,
            modules: Vec::new(),
            test_files: BTreeSet::new(),
        };
        let text = read(root_file).expect("the crate root exists");
        let syntax = crate::source::parse(root_file, &text);
        let root = loader.add_module("crate".into(), root_file.into(), None);
        loader.add_items(root, &syntax.items, &module_dir(root_file));
        loader.add_undeclared_files(src_dir, root_file, all_files);
        CrateModules {
            modules: loader.modules,
            test_files: loader.test_files,
        }
    }

    /// Every edge, in module order, then in source order.
    pub fn edges(&self) -> Vec<Edge> {
        let mut edges = Vec::new();
        for (from, module) in self.modules.iter().enumerate() {
            for reference in &module.references {
                let mut seen = BTreeSet::new();
                let to = match reference.kind {
                    ReferenceKind::Bare => {
                        self.resolve_bare(from, &reference.segments[0], &mut seen)
                    }
                    ReferenceKind::Path | ReferenceKind::Use => {
                        self.resolve(from, &reference.segments, &mut seen)
                    }
                };
                let Some(to) = to else { continue };
                if to == from
                    || (reference.kind == ReferenceKind::Use && self.is_ancestor(from, to))
                {
                    continue;
                }
                edges.push(Edge {
                    from,
                    to,
                    file: module.file.clone(),
                    line: reference.line,
                    path: reference.segments.join("::"),
                });
            }
        }
        edges
    }

    fn is_ancestor(&self, ancestor: usize, mut module: usize) -> bool {
        loop {
            if module == ancestor {
                return true;
            }
            match self.modules[module].parent {
                Some(parent) => module = parent,
                None => return false,
            }
        }
    }

    /// The deepest module of this crate that `segments`, written in module `from`, names;
    /// `None` for another crate's item.
    fn resolve(&self, from: usize, segments: &[String], seen: &mut Seen) -> Option<usize> {
        let (first, rest) = segments.split_first()?;
        match first.as_str() {
            "crate" => self.walk(0, rest, seen),
            "super" => self.walk(self.modules[from].parent?, rest, seen),
            "self" => self.walk(from, rest, seen),
            name if self.names_locally(from, name) => self.walk(from, segments, seen),
            name => self.through_globs(from, name, segments, seen),
        }
    }

    /// The module a name used alone in `from`'s code (`translate(..)`, `Engine`) comes from:
    /// only through imports, since a bare name that is not imported is `from`'s own item, a
    /// local variable, or the prelude's.
    fn resolve_bare(&self, from: usize, name: &str, seen: &mut Seen) -> Option<usize> {
        let module = &self.modules[from];
        if module.defines.contains(name) {
            return None;
        }
        let segments = [name.to_string()];
        match module.imports.get(name) {
            Some(imported) => self.resolve(from, imported, seen),
            None => self.through_globs(from, name, &segments, seen),
        }
    }

    fn names_locally(&self, module: usize, name: &str) -> bool {
        let module = &self.modules[module];
        module.children.contains_key(name)
            || module.defines.contains(name)
            || module.imports.contains_key(name)
    }

    /// `segments`, whose first is `name`, found through one of `at`'s glob imports.
    fn through_globs(
        &self,
        at: usize,
        name: &str,
        segments: &[String],
        seen: &mut Seen,
    ) -> Option<usize> {
        if !seen.insert((at, name.to_string())) {
            return None; // Already looking `name` up here: a loop of glob imports.
        }
        self.modules[at].globs.iter().find_map(|glob| {
            let target = self.resolve(at, glob, seen)?;
            (target != at && self.names_locally(target, name))
                .then(|| self.walk(target, segments, seen))
                .flatten()
        })
    }

    fn walk(&self, mut at: usize, segments: &[String], seen: &mut Seen) -> Option<usize> {
        for (i, segment) in segments.iter().enumerate() {
            let module = &self.modules[at];
            if segment == "super" {
                at = module.parent?;
            } else if segment == "self" {
                continue;
            } else if let Some(&child) = module.children.get(segment) {
                at = child;
            } else if module.defines.contains(segment) {
                return Some(at);
            } else if let Some(imported) = module.imports.get(segment) {
                if !seen.insert((at, segment.clone())) {
                    return None; // An import loop (the name is defined by a macro).
                }
                let path: Vec<String> =
                    imported.iter().chain(&segments[i + 1..]).cloned().collect();
                return self.resolve(at, &path, seen);
            } else {
                // Through a glob import, or else an item the parser cannot see (declared by a
                // macro, like `engines!`'s `Engine`): this module's.
                let found = self.through_globs(at, segment, &segments[i..], seen);
                return Some(found.unwrap_or(at));
            }
        }
        Some(at)
    }
}

/// Names being looked up, by module: stops loops of imports.
type Seen = BTreeSet<(usize, String)>;

struct Loader<'r> {
    read: &'r Read<'r>,
    modules: Vec<Module>,
    /// Files declared by `#[cfg(test)] mod x;`: test code, not modules of the graph.
    test_files: BTreeSet<PathBuf>,
}

impl Loader<'_> {
    fn add_module(&mut self, name: String, file: PathBuf, parent: Option<usize>) -> usize {
        let index = self.modules.len();
        self.modules.push(Module {
            name,
            file,
            parent,
            children: BTreeMap::new(),
            defines: BTreeSet::new(),
            imports: BTreeMap::new(),
            globs: Vec::new(),
            references: Vec::new(),
        });
        if let Some(parent) = parent {
            let short = self.modules[index]
                .name
                .rsplit("::")
                .next()
                .expect("named")
                .to_string();
            self.modules[parent].children.insert(short, index);
        }
        index
    }

    /// Adds the items of `module`, whose child module files live in `dir`.
    fn add_items(&mut self, module: usize, items: &[syn::Item], dir: &Path) {
        for item in items {
            if is_test_only(item_attrs(item)) {
                if let syn::Item::Mod(declared) = item {
                    self.test_files.extend(child_files(dir, declared));
                }
                continue;
            }
            match item {
                syn::Item::Mod(declared) => self.add_child(module, declared, dir),
                syn::Item::Use(import) => self.add_use(module, import),
                other => {
                    if let Some(name) = defined_name(other) {
                        self.modules[module].defines.insert(name);
                    }
                    let mut paths = PathCollector::default();
                    paths.visit_item(other);
                    let references = paths.references.into_iter().map(|(segments, line)| {
                        let kind = if segments.len() == 1 {
                            ReferenceKind::Bare
                        } else {
                            ReferenceKind::Path
                        };
                        Reference {
                            segments,
                            line,
                            kind,
                        }
                    });
                    self.modules[module].references.extend(references);
                }
            }
        }
    }

    fn add_child(&mut self, parent: usize, declared: &syn::ItemMod, dir: &Path) {
        let name = format!("{}::{}", self.modules[parent].name, declared.ident);
        if let Some((_, items)) = &declared.content {
            let file = self.modules[parent].file.clone();
            let child = self.add_module(name, file, Some(parent));
            self.add_items(child, items, &dir.join(declared.ident.to_string()));
            return;
        }
        let Some((file, text)) = child_files(dir, declared)
            .into_iter()
            .find_map(|file| (self.read)(&file).map(|text| (file, text)))
        else {
            panic!(
                "{}: `mod {};` has no file",
                self.modules[parent].file.display(),
                declared.ident
            );
        };
        let syntax = crate::source::parse(&file, &text);
        let child = self.add_module(name, file.clone(), Some(parent));
        self.add_items(child, &syntax.items, &module_dir(&file));
    }

    fn add_use(&mut self, module: usize, import: &syn::ItemUse) {
        for (segments, leaf, line) in flatten_use(&import.tree) {
            let module = &mut self.modules[module];
            match leaf {
                UseLeaf::Name(name) => {
                    module.imports.insert(name, segments.clone());
                }
                UseLeaf::Glob => module.globs.push(segments.clone()),
            }
            module.references.push(Reference {
                segments,
                line,
                kind: ReferenceKind::Use,
            });
        }
    }

    /// Files of `src_dir` no declaration reached (modules a macro declares): each belongs to
    /// the module its path names, under the nearest loaded ancestor.
    fn add_undeclared_files(&mut self, src_dir: &Path, root_file: &Path, all_files: &[PathBuf]) {
        let loaded: BTreeSet<PathBuf> = self.modules.iter().map(|m| m.file.clone()).collect();
        // Parents before children: `a/mod.rs` sorts before `a/b.rs` once `mod.rs` is its dir.
        let mut pending: Vec<(Vec<String>, &PathBuf)> = all_files
            .iter()
            .filter(|f| f.starts_with(src_dir) && !loaded.contains(*f))
            .filter(|f| {
                !self
                    .test_files
                    .iter()
                    .any(|t| f.starts_with(t.with_extension("")))
            })
            .filter(|f| !self.test_files.contains(*f))
            .filter(|f| f.as_path() != root_file && !is_other_root(src_dir, f))
            .map(|f| (module_path(src_dir, f), f))
            .collect();
        pending.sort_by_key(|(path, _)| path.len());
        for (path, file) in pending {
            let (name, parents) = path.split_last().expect("not the root");
            let parent = self.find_or_add(parents, src_dir);
            let text = (self.read)(file).expect("listed files exist");
            let syntax = crate::source::parse(file, &text);
            let full = format!("{}::{name}", self.modules[parent].name);
            let module = self.add_module(full, file.clone(), Some(parent));
            self.add_items(module, &syntax.items, &module_dir(file));
        }
    }

    fn find_or_add(&mut self, path: &[String], src_dir: &Path) -> usize {
        let mut at = 0;
        for segment in path {
            at = match self.modules[at].children.get(segment) {
                Some(&child) => child,
                None => {
                    let name = format!("{}::{segment}", self.modules[at].name);
                    let file = src_dir.join(path.join("/")).join("mod.rs");
                    self.add_module(name, file, Some(at))
                }
            };
        }
        at
    }
}

fn is_other_root(src_dir: &Path, file: &Path) -> bool {
    file == src_dir.join("main.rs")
        || file == src_dir.join("lib.rs")
        || file.starts_with(src_dir.join("bin"))
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are module `a::b`.
fn module_path(src_dir: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src_dir).expect("under src");
    let mut path: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

/// Where the files of a module's `mod child;` declarations live.
fn module_dir(file: &Path) -> PathBuf {
    let stem = file.file_stem().expect("a file name");
    if ["mod", "lib", "main"].iter().any(|root| stem == *root) {
        file.parent().expect("in a directory").to_path_buf()
    } else {
        file.with_extension("")
    }
}

/// The files `mod child;` may be in: its `#[path]`, else `child.rs`, else `child/mod.rs`.
fn child_files(dir: &Path, declared: &syn::ItemMod) -> Vec<PathBuf> {
    let explicit = declared.attrs.iter().find_map(|attr| match &attr.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    });
    match explicit {
        // `#[path]` is relative to the declaring file's directory (for mod.rs-style files).
        Some(path) => vec![normalize(&dir.join(path))],
        None => {
            let name = declared.ident.to_string();
            vec![
                dir.join(format!("{name}.rs")),
                dir.join(name).join("mod.rs"),
            ]
        }
    }
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn defined_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

enum UseLeaf {
    /// Imported under this name (`use a::b;`, `use a::b as c;`, `use a::{self};`).
    Name(String),
    Glob,
}

/// `use a::{b, c::*}` as (`a::b`, b) and (`a::c`, glob), each with its line.
fn flatten_use(tree: &syn::UseTree) -> Vec<(Vec<String>, UseLeaf, usize)> {
    fn walk(
        tree: &syn::UseTree,
        prefix: &mut Vec<String>,
        out: &mut Vec<(Vec<String>, UseLeaf, usize)>,
    ) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                walk(&p.tree, prefix, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let line = n.ident.span().start().line;
                if n.ident == "self" {
                    let name = prefix.last().cloned().unwrap_or_default();
                    out.push((prefix.clone(), UseLeaf::Name(name), line));
                } else {
                    let mut path = prefix.clone();
                    path.push(n.ident.to_string());
                    out.push((path, UseLeaf::Name(n.ident.to_string()), line));
                }
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                let line = r.ident.span().start().line;
                out.push((path, UseLeaf::Name(r.rename.to_string()), line));
            }
            syn::UseTree::Glob(g) => {
                out.push((
                    prefix.clone(),
                    UseLeaf::Glob,
                    g.star_token.span.start().line,
                ));
            }
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    walk(tree, prefix, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(tree, &mut Vec::new(), &mut out);
    out
}

/// The paths in non-test code, and `use` items inside function bodies.
#[derive(Default)]
struct PathCollector {
    references: Vec<(Vec<String>, usize)>,
}

impl<'ast> Visit<'ast> for PathCollector {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !is_test_only(item_attrs(item)) {
            syn::visit::visit_item(self, item);
        }
    }
    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        if !is_test_only(impl_item_attrs(item)) {
            syn::visit::visit_impl_item(self, item);
        }
    }
    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        if !is_test_only(trait_item_attrs(item)) {
            syn::visit::visit_trait_item(self, item);
        }
    }
    fn visit_item_use(&mut self, import: &'ast syn::ItemUse) {
        let paths = flatten_use(&import.tree).into_iter();
        self.references
            .extend(paths.map(|(segments, _, line)| (segments, line)));
    }
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = path.segments[0].ident.span().start().line;
            self.references.push((segments, line));
        }
        syn::visit::visit_path(self, path);
    }
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.references.extend(paths_in_tokens(mac.tokens.clone()));
        syn::visit::visit_macro(self, mac);
    }
}

/// `crate::a::b`, `super::a`, `self::a` token runs in a macro body.
fn paths_in_tokens(tokens: TokenStream) -> Vec<(Vec<String>, usize)> {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            TokenTree::Group(group) => found.extend(paths_in_tokens(group.stream())),
            TokenTree::Ident(ident) if ["crate", "super", "self"].iter().any(|k| ident == k) => {
                let line = ident.span().start().line;
                let mut segments = vec![ident.to_string()];
                while let (
                    Some(TokenTree::Punct(a)),
                    Some(TokenTree::Punct(b)),
                    Some(TokenTree::Ident(next)),
                ) = (tokens.get(i + 1), tokens.get(i + 2), tokens.get(i + 3))
                {
                    if a.as_char() != ':' || b.as_char() != ':' {
                        break;
                    }
                    segments.push(next.to_string());
                    i += 3;
                }
                if segments.len() > 1 {
                    found.push((segments, line));
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}
