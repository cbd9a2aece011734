//! The compliance coverage's "proven" comes from a table in the core
//! (`nimbus_core::compliance::coverage::PROOFS`); this keeps it and the efficacy tests in
//! agreement: every proof names an efficacy test of its engine and a matrix the efficacy tests
//! measured (the README shows exactly what they measure), and every measured matrix is a proof
//! or says why not.

use nimbus_core::compliance::coverage::{NOT_ENFORCEMENT, PROOFS};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each efficacy source file's text.
fn efficacy_sources() -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/efficacy");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("entry").path();
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

/// The test functions of a source: the `fn` after each `#[tokio::test]` or `#[test]`.
fn tests_of(text: &str) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if matches!(line.trim(), "#[tokio::test]" | "#[test]") {
            let next = lines.find(|l| l.contains("fn ")).expect("a test function");
            let name = next.split("fn ").nth(1).expect("fn name");
            out.insert(name.split(['(', '<']).next().expect("name").trim());
        }
    }
    out
}

fn readme_blocks() -> BTreeSet<String> {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(readme).expect("README.md");
    text.split("<!-- efficacy:")
        .skip(1)
        .filter_map(|rest| Some(rest.split_once(" -->")?.0.to_owned()))
        .collect()
}

#[test]
fn the_proof_table_and_the_efficacy_tests_agree() {
    let sources = efficacy_sources();
    // The README's efficacy blocks are what the efficacy tests measured: each test asserts
    // that its block shows exactly its measurement.
    let readme = readme_blocks();
    assert!(readme.len() >= 8, "too few matrices found: {readme:?}");
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
            readme.contains(p.matrix),
            "{p:?}: no efficacy test measured the matrix {} (the README shows none)",
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
    for m in &readme {
        assert!(
            proven.contains(m.as_str()) ^ excused.contains(m.as_str()),
            "the efficacy matrix {m} is measured but is neither a proof nor excused"
        );
    }
}

/// README's "Compliance" section shows the catalog's mapping exactly
/// (`NIMBUS_UPDATE_README=1` rewrites it).
#[test]
fn the_readme_shows_the_mapping() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(&path).expect("README.md");
    let (begin, end) = (
        "<!-- compliance:mapping -->\n",
        "<!-- /compliance:mapping -->",
    );
    let block = format!("{begin}{}{end}", nimbus_core::compliance::markdown_table());
    let (b, e) = text
        .find(begin)
        .and_then(|b| Some((b, b + text[b..].find(end)? + end.len())))
        .expect("README.md has a compliance:mapping block");
    if std::env::var_os("NIMBUS_UPDATE_README").is_some() {
        std::fs::write(&path, format!("{}{block}{}", &text[..b], &text[e..]))
            .expect("writing README.md");
        return;
    }
    assert!(
        text[b..e] == block,
        "README.md does not show the mapping (NIMBUS_UPDATE_README=1 rewrites it):\n{block}"
    );
}
