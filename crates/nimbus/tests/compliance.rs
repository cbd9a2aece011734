//! The compliance coverage's "proven" comes from a table in the core
//! (`nimbus_core::compliance::coverage::PROOFS`); this keeps it and the efficacy tests in
//! agreement: every proof names an efficacy test of its engine and a matrix the efficacy tests
//! measured (the book's docs/src/proofs.md shows exactly what they measure), and every measured matrix is a proof
//! or says why not.

use nimbus_core::compliance::coverage::{NOT_ENFORCEMENT, PROOFS};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each efficacy source file's text: `tests/efficacy/<engine>.rs` and its submodules, or
/// `tests/<engine>.rs` for an engine whose efficacy test needs a control plane of its own.
fn efficacy_sources() -> BTreeMap<String, String> {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let dir = tests.join("efficacy");
    let own_binaries = nimbus_core::catalog::Engine::ALL
        .into_iter()
        .map(|e| tests.join(format!("{}.rs", e.name())))
        .filter(|p| p.exists());
    // A module's submodules (`exceptions/named.rs`) are sources too.
    let read = |dir: &Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("entry").path())
            .collect()
    };
    read(&dir)
        .into_iter()
        .flat_map(|path| {
            if path.is_dir() {
                read(&path)
            } else {
                vec![path]
            }
        })
        .chain(own_binaries)
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("efficacy source");
            (
                path.file_name()
                    .expect("file name")
                    .to_string_lossy()
                    .into_owned(),
                text,
            )
        })
        .collect()
}

/// The test functions of a source: the `fn` after each `#[tokio::test(…)]` or `#[test]`.
fn tests_of(text: &str) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "#[test]" || line.trim().starts_with("#[tokio::test") {
            let next = lines.find(|l| l.contains("fn ")).expect("a test function");
            let name = next.split("fn ").nth(1).expect("fn name");
            out.insert(name.split(['(', '<']).next().expect("name").trim());
        }
    }
    out
}

/// The ids of the efficacy blocks docs/src/proofs.md shows.
fn proofs_page_blocks() -> BTreeSet<String> {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/proofs.md");
    let text = std::fs::read_to_string(page).expect("docs/src/proofs.md");
    text.split("<!-- efficacy:")
        .skip(1)
        .filter_map(|rest| Some(rest.split_once(" -->")?.0.to_owned()))
        .collect()
}

#[test]
fn the_proof_table_and_the_efficacy_tests_agree() {
    let sources = efficacy_sources();
    // The proofs page's efficacy blocks are what the efficacy tests measured: each test asserts
    // that its block shows exactly its measurement.
    let shown = proofs_page_blocks();
    assert!(shown.len() >= 8, "too few matrices found: {shown:?}");
    for p in PROOFS {
        let file = format!("{}.rs", p.engine.name());
        let text = sources
            .get(&file)
            .unwrap_or_else(|| panic!("{p:?}: no efficacy tests of {file}"));
        assert!(
            tests_of(text).contains(p.test),
            "{p:?}: {file} has no test `{}`",
            p.test
        );
        assert!(
            shown.contains(p.matrix),
            "{p:?}: no efficacy test measured the matrix {} (docs/src/proofs.md shows none)",
            p.matrix
        );
        let (engine, rest) = p.matrix.split_once('-').expect("engine-intent");
        assert!(
            engine == p.engine.name() && rest.split('-').any(|part| part == p.intent),
            "{p:?}: the matrix is another engine's or intent's"
        );
    }
    let proven: BTreeSet<&str> = PROOFS.iter().map(|p| p.matrix).collect();
    let excused: BTreeSet<&str> = NOT_ENFORCEMENT.iter().map(|(m, _)| *m).collect();
    for m in &shown {
        assert!(
            proven.contains(m.as_str()) ^ excused.contains(m.as_str()),
            "the efficacy matrix {m} is measured but is neither a proof nor excused"
        );
    }
}

/// The book's "Compliance" page (docs/src/compliance.md) shows the catalog's mapping exactly
/// (`NIMBUS_UPDATE_DOCS=1` rewrites it).
#[test]
fn the_compliance_page_shows_the_mapping() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/compliance.md");
    let text = std::fs::read_to_string(&path).expect("docs/src/compliance.md");
    let (begin, end) = (
        "<!-- compliance:mapping -->\n",
        "<!-- /compliance:mapping -->",
    );
    let block = format!("{begin}{}{end}", nimbus_core::compliance::markdown_table());
    let (b, e) = text
        .find(begin)
        .and_then(|b| Some((b, b + text[b..].find(end)? + end.len())))
        .expect("docs/src/compliance.md has a compliance:mapping block");
    if std::env::var_os("NIMBUS_UPDATE_DOCS").is_some() {
        std::fs::write(&path, format!("{}{block}{}", &text[..b], &text[e..]))
            .expect("writing docs/src/compliance.md");
        return;
    }
    assert!(
        text[b..e] == block,
        "docs/src/compliance.md does not show the mapping (NIMBUS_UPDATE_DOCS=1 rewrites it):\n{block}"
    );
}
