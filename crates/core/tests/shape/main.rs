//! Shape rules the build enforces, not a reviewer (issue #43): no source file over
//! [`MAX_NON_TEST_LINES`] lines of non-test code, and no import circle between the modules of
//! a crate. They walk every crate of the workspace (`crates/*/src`), so they hold after the
//! next feature too; each failure names what to split or which path to cut.

mod modules;
mod source;

use modules::{CrateModules, Edge};
use petgraph::algo::tarjan_scc;
use petgraph::graph::DiGraph;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A file past this has more than one reason to change: split it by what each part decides.
const MAX_NON_TEST_LINES: usize = 600;

#[test]
fn no_source_file_has_more_than_600_non_test_lines() {
    let root = source::workspace_root();
    let mut too_long = Vec::new();
    for src in source::crate_source_dirs(&root) {
        let test_files = test_only_files(&root, &src);
        for file in source::rust_files(&root, &src) {
            if test_files.contains(&file) {
                continue;
            }
            let text = std::fs::read_to_string(root.join(&file)).expect("readable source");
            let lines = source::non_test_lines(&text, &source::parse(&file, &text));
            if lines > MAX_NON_TEST_LINES {
                too_long.push(format!("{}: {lines} non-test lines", file.display()));
            }
        }
    }
    assert!(
        too_long.is_empty(),
        "source files over {MAX_NON_TEST_LINES} lines of non-test code (lines outside \
         #[cfg(test)] items); split each by what its parts decide:\n  {}",
        too_long.join("\n  ")
    );
}

#[test]
fn no_import_circle_between_modules() {
    let root = source::workspace_root();
    let read = |file: &Path| std::fs::read_to_string(root.join(file)).ok();
    let mut circles = Vec::new();
    for src in source::crate_source_dirs(&root) {
        let files = source::rust_files(&root, &src);
        for crate_root in ["lib.rs", "main.rs"].map(|f| src.join(f)) {
            if files.contains(&crate_root) {
                let modules = CrateModules::load(&read, &crate_root, &src, &files);
                circles.extend(import_circles(&crate_root, &modules));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles between modules (each edge with one place it comes from); cut one edge \
         of each, e.g. by moving what both sides need into a module of its own:\n{}",
        circles.join("\n")
    );
}

/// Every set of modules that reach each other through their paths, with the edges between
/// them (one place per edge), as a message.
fn import_circles(crate_root: &Path, modules: &CrateModules) -> Vec<String> {
    let edges = modules.edges();
    let mut graph = DiGraph::<usize, ()>::new();
    let nodes: Vec<_> = (0..modules.modules.len())
        .map(|m| graph.add_node(m))
        .collect();
    for edge in &edges {
        graph.update_edge(nodes[edge.from], nodes[edge.to], ());
    }
    let mut circles = Vec::new();
    for component in tarjan_scc(&graph) {
        if component.len() < 2 {
            continue;
        }
        let members: BTreeSet<usize> = component.iter().map(|n| graph[*n]).collect();
        let names: Vec<&str> = members
            .iter()
            .map(|m| modules.modules[*m].name.as_str())
            .collect();
        let mut message = format!(
            "{}: circle between {}:",
            crate_root.display(),
            names.join(", ")
        );
        for edge in first_place_per_edge(&edges, &members) {
            message.push_str(&format!(
                "\n    {} -> {}  at {}:{} (`{}`)",
                modules.modules[edge.from].name,
                modules.modules[edge.to].name,
                edge.file.display(),
                edge.line,
                edge.path
            ));
        }
        circles.push(message);
    }
    circles
}

/// The first place each edge between `members` comes from.
fn first_place_per_edge<'e>(edges: &'e [Edge], members: &BTreeSet<usize>) -> Vec<&'e Edge> {
    let mut seen = BTreeSet::new();
    edges
        .iter()
        .filter(|e| members.contains(&e.from) && members.contains(&e.to))
        .filter(|e| seen.insert((e.from, e.to)))
        .collect()
}

/// Files only test builds compile: declared by `#[cfg(test)] mod x;` somewhere in `src`.
fn test_only_files(root: &Path, src: &Path) -> BTreeSet<PathBuf> {
    let read = |file: &Path| std::fs::read_to_string(root.join(file)).ok();
    let files = source::rust_files(root, src);
    let mut test_files = BTreeSet::new();
    for crate_root in ["lib.rs", "main.rs"].map(|f| src.join(f)) {
        if files.contains(&crate_root) {
            let modules = CrateModules::load(&read, &crate_root, src, &files);
            test_files.extend(modules.test_files);
        }
    }
    let test_dirs: Vec<PathBuf> = test_files.iter().map(|f| f.with_extension("")).collect();
    files
        .into_iter()
        .filter(|f| test_files.contains(f) || test_dirs.iter().any(|d| f.starts_with(d)))
        .collect()
}
