//! A verdict matrix (cases × subjects): what was measured against what the intent promises,
//! and the block of the book's docs/src/proofs.md that shows it.

use std::fmt::Write as _;
use std::sync::Mutex;

/// The book's page that shows every measured matrix ("What enforcement is proven").
const PROOFS_PAGE_PATH: &str = "docs/src/proofs.md";

/// Measured verdicts; `expected` holds the documented ones.
pub struct Matrix {
    /// The id of its block in docs/src/proofs.md.
    pub id: String,
    pub title: String,
    /// What the first column names (e.g. "traffic").
    pub case_header: &'static str,
    pub subjects: Vec<String>,
    /// `(case, measured verdict per subject)`.
    pub rows: Vec<(String, Vec<String>)>,
    pub expected: Vec<(String, Vec<String>)>,
}

impl Matrix {
    /// Both checks: the measurement keeps the promise, and the book shows it.
    pub fn assert(&self) {
        self.assert_as_promised();
        self.assert_in_docs();
    }

    /// Fails with every cell where the measurement differs from the promise (a measured
    /// `denied (reason)` keeps the promise `denied`).
    fn assert_as_promised(&self) {
        let mut wrong = Vec::new();
        for ((case, got), (_, want)) in self.rows.iter().zip(&self.expected) {
            for ((subject, got), want) in self.subjects.iter().zip(got).zip(want) {
                if !keeps(got, want) {
                    wrong.push(format!("{case} / {subject}: {got}, promised {want}"));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "{}: {} cells differ from the intent's meaning:\n{}\n\nmeasured:\n{}",
            self.title,
            wrong.len(),
            wrong.join("\n"),
            self.markdown()
        );
    }

    pub fn markdown(&self) -> String {
        let mut out = format!("**{}**\n\n| {} |", self.title, self.case_header);
        for s in &self.subjects {
            let _ = write!(out, " {s} |");
        }
        out.push_str("\n|---|");
        out.push_str(&"---|".repeat(self.subjects.len()));
        for (case, cells) in &self.rows {
            let _ = write!(out, "\n| {case} |");
            for c in cells {
                let _ = write!(out, " {c} |");
            }
        }
        out.push('\n');
        out
    }

    /// docs/src/proofs.md's block for this matrix must show exactly what was measured.
    fn assert_in_docs(&self) {
        static PROOFS_PAGE: Mutex<()> = Mutex::new(());
        let _one_writer = PROOFS_PAGE.lock().unwrap_or_else(|e| e.into_inner());
        let path = crate::common::workspace_root().join(PROOFS_PAGE_PATH);
        let text = std::fs::read_to_string(&path).expect(PROOFS_PAGE_PATH);
        let (begin, end) = (
            format!("<!-- efficacy:{} -->\n", self.id),
            format!("<!-- /efficacy:{} -->", self.id),
        );
        let block = format!("{begin}{}{end}", self.markdown());
        let current = text
            .find(&begin)
            .and_then(|b| Some((b, b + text[b..].find(&end)? + end.len())));
        if std::env::var_os("NIMBUS_UPDATE_DOCS").is_some() {
            let updated = match current {
                Some((b, e)) => format!("{}{block}{}", &text[..b], &text[e..]),
                None => panic!("{PROOFS_PAGE_PATH} has no {begin} … {end} block to update"),
            };
            std::fs::write(&path, updated).expect("writing the proofs page");
            return;
        }
        let shown = current.map(|(b, e)| &text[b..e]);
        assert!(
            shown == Some(block.as_str()),
            "{PROOFS_PAGE_PATH} does not show the measured matrix {} (NIMBUS_UPDATE_DOCS=1 rewrites it):\n{block}",
            self.id
        );
    }
}

/// Whether the measured cell `got` is the promised `want`.
pub fn keeps(got: &str, want: &str) -> bool {
    got == want
        || got
            .strip_prefix(want)
            .is_some_and(|rest| rest.starts_with(" ("))
}

/// `allowed` / `denied`.
pub fn verdict(allowed: bool) -> String {
    if allowed { "allowed" } else { "denied" }.to_owned()
}
