//! The committed reference pages of the book (docs/src/reference/) are exactly what the code
//! generates (`make docs-reference`), as the committed CRDs are (tests/crds.rs).

#[test]
fn committed_reference_pages_match_the_generated_ones() {
    let mut stale = Vec::new();
    for page in ["cli", "crds", "intents"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_nimbus"))
            .args(["docs-reference", page])
            .output()
            .expect("running nimbus docs-reference");
        assert!(
            out.status.success(),
            "nimbus docs-reference {page}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let generated = String::from_utf8(out.stdout).expect("UTF-8");
        let path = format!("docs/src/reference/{page}.md");
        let full = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
        let committed =
            std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("reading {path}: {e}"));
        if committed != generated {
            stale.push(path);
        }
    }
    assert!(
        stale.is_empty(),
        "stale: {}: run `make docs-reference`",
        stale.join(", ")
    );
}
