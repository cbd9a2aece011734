//! The compliance catalog: which controls of which framework each intent addresses, fully or
//! partly, and the public source that says so. Every control named here exists in the
//! framework's published list, vendored under `upstream/` (see upstream/README.md); the unit
//! tests check the names and IDs against those files and each machine-checkable source
//! against the text it cites.

pub mod bundles;
mod controls;
pub mod coverage;
mod mappings;
mod model;
pub mod report;
mod sources;

pub use controls::{CONTROLS, control, controls};
pub use mappings::{MAPPINGS, UNMAPPED, mappings, unmapped};
pub use model::{Control, Evidence, Framework, Mapping, Source, Strength};

/// The mapping as a Markdown table, one row per intent and framework (the book's "Compliance", docs/src/compliance.md).
pub fn markdown_table() -> String {
    let mut out = String::from("| Intent | Framework | Controls (source) |\n|---|---|---|\n");
    for intent in crate::catalog::INTENTS {
        for framework in Framework::ALL {
            let mut cells: Vec<String> = Vec::new();
            for m in mappings(intent.id).filter(|m| m.framework == framework) {
                let c = m.control();
                let partial = match m.strength {
                    Strength::Addresses => "",
                    Strength::PartiallyAddresses => ", partially",
                };
                let withdrawn = if c.withdrawn { ", withdrawn" } else { "" };
                cells.push(format!(
                    "{} {}{partial}{withdrawn} ([source]({}))",
                    c.id, c.name, m.source.url
                ));
            }
            if !cells.is_empty() {
                out.push_str(&format!(
                    "| {} | {} | {} |\n",
                    intent.id,
                    framework.title(),
                    cells.join("; ")
                ));
            }
        }
        if let Some(why) = unmapped(intent.id) {
            out.push_str(&format!("| {} | none | {why} |\n", intent.id));
        }
    }
    out
}

#[cfg(test)]
mod tests;
