//! The compliance coverage's "proven" comes from a table in the core
//! (`nimbus_core::compliance::coverage::PROOFS`); this keeps it and the efficacy tests in
//! agreement: every proof names an efficacy test and a matrix that test measures and the
//! README shows, and every measured matrix is a proof or says why not.

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

/// The matrix IDs a source names: string literals `"<engine>-<intent>..."` (found by their
/// opening quote, so that an escaped quote elsewhere cannot shift the pairing).
fn matrices_of(text: &str) -> BTreeSet<&str> {
    nimbus_core::catalog::Engine::ALL
        .iter()
        .flat_map(|e| {
            let opening = format!("\"{}-", e.name());
            text.match_indices(&opening)
                .map(|(at, _)| at)
                .collect::<Vec<_>>()
        })
        .filter_map(|at| {
            let rest = &text[at + 1..];
            Some(&rest[..rest.find('"')?])
        })
        .filter(|s| {
            s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && s.chars().any(|c| c.is_ascii_uppercase())
        })
        .collect()
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
    let readme = readme_blocks();
    let measured: BTreeSet<&str> = sources.values().flat_map(|t| matrices_of(t)).collect();
    assert!(measured.len() >= 8, "too few matrices found: {measured:?}");
    for p in PROOFS {
        let file = sources
            .iter()
            .find(|(_, text)| tests_of(text).contains(p.test))
            .unwrap_or_else(|| panic!("{p:?}: no efficacy test `{}`", p.test));
        assert!(
            matrices_of(file.1).contains(p.matrix),
            "{p:?}: {} does not measure the matrix {}",
            file.0,
            p.matrix
        );
        assert!(
            readme.contains(p.matrix),
            "{p:?}: the README shows no such matrix"
        );
        // `kyverno-cel-…`: the same engine's matrix on Kyverno's CEL policy kinds.
        let (engine, intent) = (p.engine.name(), p.intent);
        assert!(
            p.matrix.starts_with(&format!("{engine}-{intent}"))
                || p.matrix.starts_with(&format!("{engine}-cel-{intent}")),
            "{p:?}: the matrix is another engine's or intent's"
        );
    }
    let proven: BTreeSet<&str> = PROOFS.iter().map(|p| p.matrix).collect();
    let excused: BTreeSet<&str> = NOT_ENFORCEMENT.iter().map(|(m, _)| *m).collect();
    for m in measured
        .iter()
        .copied()
        .chain(readme.iter().map(String::as_str))
    {
        assert!(
            proven.contains(m) ^ excused.contains(m),
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
