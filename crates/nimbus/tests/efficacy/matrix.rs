//! A verdict matrix (cases × subjects): what was measured against what the intent promises,
//! and the README block that shows it.

use std::fmt::Write as _;
use std::sync::Mutex;

/// Measured verdicts; `expected` holds the documented ones.
pub struct Matrix {
    /// The README block's id.
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
    /// Both checks: the measurement keeps the promise, and the README shows it.
    pub fn assert(&self) {
        self.assert_as_promised();
        self.assert_in_readme();
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

    /// The README's block for this matrix must show exactly what was measured.
    fn assert_in_readme(&self) {
        static README: Mutex<()> = Mutex::new(());
        let _one_writer = README.lock().unwrap_or_else(|e| e.into_inner());
        let path = crate::common::workspace_root().join("README.md");
        let text = std::fs::read_to_string(&path).expect("README.md");
        let (begin, end) = (
            format!("<!-- efficacy:{} -->\n", self.id),
            format!("<!-- /efficacy:{} -->", self.id),
        );
        let block = format!("{begin}{}{end}", self.markdown());
        let current = text
            .find(&begin)
            .and_then(|b| Some((b, b + text[b..].find(&end)? + end.len())));
        if std::env::var_os("NIMBUS_UPDATE_README").is_some() {
            let updated = match current {
                Some((b, e)) => format!("{}{block}{}", &text[..b], &text[e..]),
                None => panic!("README.md has no {begin} … {end} block to update"),
            };
            std::fs::write(&path, updated).expect("writing README.md");
            return;
        }
        let shown = current.map(|(b, e)| &text[b..e]);
        assert!(
            shown == Some(block.as_str()),
            "README.md does not show the measured matrix {} (NIMBUS_UPDATE_README=1 rewrites it):\n{block}",
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
