//! `nimbus report`: the posture's compliance coverage for people, as one self-contained HTML
//! file (inline CSS and SVG: nothing is fetched when it is opened), and for machines as OSCAL
//! assessment results.

use super::coverage::{PROOFS, roll_up};
use super::{Framework, control};
use nimbus_api::posture::{FrameworkCoverage, NamespacePosture, Verdict, WorkloadPosture};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// What a report is made of, as read from the posture API.
pub struct Input<'a> {
    /// `namespace shop`, `the cluster`.
    pub scope: &'a str,
    /// RFC 3339.
    pub generated: &'a str,
    pub namespaces: &'a [NamespacePosture],
    pub workloads: &'a [WorkloadPosture],
}

impl Input<'_> {
    /// The namespaces' coverage summed per framework.
    pub fn coverage(&self) -> Vec<FrameworkCoverage> {
        roll_up(self.namespaces.iter().flat_map(|n| n.compliance.iter()))
    }

    fn gaps(&self) -> Vec<&WorkloadPosture> {
        let mut gaps: Vec<_> = self
            .workloads
            .iter()
            .filter(|w| w.verdict != Verdict::Protected)
            .collect();
        gaps.sort_by_key(|w| (w.metadata.namespace.clone(), w.metadata.name.clone()));
        gaps
    }
}

/// `text` as HTML text or an attribute value (quoted with `"`): what the cluster says is data,
/// never markup. The fleet report escapes with it too.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The reports' look, shared with the fleet report (`crate::fleet::report`).
pub(crate) const CSS: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:70em}\
h1{margin-bottom:0}.meta{color:#666}section{margin:2em 0}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}\
.score{font-size:1.6em;font-weight:bold}.proven{fill:#1a7f37}.unproven{fill:#9bd3a8}\
.audited{fill:#e3b341}.not-covered{fill:#d0d7de}.legend span{display:inline-block;width:1em;height:1em;margin:0 .3em 0 1em;vertical-align:middle}\
svg text{font-size:12px}";

const BAR: f64 = 420.0;
const ROW: usize = 22;

/// The HTML report.
pub fn html(input: &Input) -> String {
    let coverage = input.coverage();
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>Nimbus compliance report</title><style>{CSS}</style></head><body>\n\
         <h1>Compliance report</h1><p class=\"meta\">Scope: {} &middot; generated {} from the \
         posture API (posture.security.nimbus.com/v1alpha1)</p>\n\
         <p class=\"legend\"><span style=\"background:#1a7f37\"></span>proven\
         <span style=\"background:#9bd3a8\"></span>enforced, unproven\
         <span style=\"background:#e3b341\"></span>audited only\
         <span style=\"background:#d0d7de\"></span>not covered</p>\n",
        esc(input.scope),
        esc(input.generated)
    );
    if coverage.is_empty() {
        out.push_str("<p id=\"empty\">No workloads in scope.</p>\n");
    }
    for f in &coverage {
        framework_section(&mut out, f);
    }
    out.push_str(
        "<section id=\"unprotected\"><h2>Workloads not fully protected</h2>\n<table>\
         <tr><th>Namespace</th><th>Workload</th><th>Verdict</th><th>Why</th></tr>\n",
    );
    for w in input.gaps() {
        let reasons: Vec<String> = w.reasons.iter().map(|r| esc(&r.message)).collect();
        let _ = writeln!(
            out,
            "<tr class=\"gap\" data-namespace=\"{}\" data-workload=\"{}/{}\"><td>{}</td>\
             <td>{}/{}</td><td>{}</td><td>{}</td></tr>",
            esc(w.metadata.namespace.as_deref().unwrap_or_default()),
            esc(&w.workload.kind),
            esc(&w.workload.name),
            esc(w.metadata.namespace.as_deref().unwrap_or_default()),
            esc(&w.workload.kind),
            esc(&w.workload.name),
            w.verdict.as_str(),
            if reasons.is_empty() {
                "no intent selects it".to_owned()
            } else {
                reasons.join("<br>")
            }
        );
    }
    out.push_str("</table></section>\n");
    proofs_section(&mut out, &coverage);
    out.push_str("</body></html>\n");
    out
}

fn framework_section(out: &mut String, f: &FrameworkCoverage) {
    let _ = write!(
        out,
        "<section class=\"framework\" data-framework=\"{name}\"><h2>{title}</h2>\n\
         <p><span class=\"score\" data-score=\"{score}\">{score}%</span> of (control, workload) \
         pairs covered, <span class=\"proven-score\" data-proven-score=\"{proven}\">{proven}%\
         </span> proven, on <span class=\"workloads\">{workloads}</span> workloads</p>\n\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         role=\"img\" aria-label=\"{title}: coverage per control\">\n",
        name = esc(&f.framework),
        title = esc(&f.title),
        score = f.score,
        proven = f.proven_score,
        workloads = f.workloads,
        width = 100.0 + BAR + 330.0,
        height = ROW * f.controls.len() + 4,
    );
    for (row, c) in f.controls.iter().enumerate() {
        let y = row * ROW;
        let total = f64::from(c.proven + c.unproven + c.audited + c.not_covered).max(1.0);
        let _ = write!(
            out,
            "<g class=\"control\" data-control=\"{id}\" data-proven=\"{}\" data-unproven=\"{}\" \
             data-audited=\"{}\" data-not-covered=\"{}\"><title>{id} {name}</title>\
             <text x=\"0\" y=\"{ty}\">{id}</text>",
            c.proven,
            c.unproven,
            c.audited,
            c.not_covered,
            id = esc(&c.id),
            name = esc(&c.name),
            ty = y + 15,
        );
        let mut x = 100.0;
        for (class, n) in [
            ("proven", c.proven),
            ("unproven", c.unproven),
            ("audited", c.audited),
            ("not-covered", c.not_covered),
        ] {
            let w = BAR * f64::from(n) / total;
            if n > 0 {
                let _ = write!(
                    out,
                    "<rect class=\"{class}\" x=\"{x:.1}\" y=\"{}\" width=\"{w:.1}\" height=\"16\"/>",
                    y + 3
                );
            }
            x += w;
        }
        let _ = writeln!(
            out,
            "<text class=\"counts\" x=\"{}\" y=\"{}\">{} proven, {} unproven, {} audited, {} not \
             covered</text></g>",
            110.0 + BAR,
            y + 15,
            c.proven,
            c.unproven,
            c.audited,
            c.not_covered
        );
    }
    out.push_str("</svg>\n<table><tr><th>Control</th><th>Name</th><th>Proof</th></tr>\n");
    let framework = f.framework.parse::<Framework>().ok();
    for c in &f.controls {
        let url = framework
            .map(|fw| fw.control_url(&c.id))
            .unwrap_or_default();
        let proofs: Vec<String> = c
            .proofs
            .iter()
            .map(|p| format!("<a href=\"#proof-{0}\">{0}</a>", esc(p)))
            .collect();
        let _ = writeln!(
            out,
            "<tr><td><a href=\"{}\">{}</a></td><td>{}</td><td>{}</td></tr>",
            esc(&url),
            esc(&c.id),
            esc(&c.name),
            proofs.join(", ")
        );
    }
    out.push_str("</table></section>\n");
}

fn proofs_section(out: &mut String, coverage: &[FrameworkCoverage]) {
    let used: BTreeSet<&str> = coverage
        .iter()
        .flat_map(|f| &f.controls)
        .flat_map(|c| c.proofs.iter().map(|p| &**p))
        .collect();
    out.push_str(
        "<section id=\"proofs\"><h2>The proof behind \"proven\"</h2>\n<p>Each is an efficacy \
         test that runs the engine's own code against the policies the operator wrote \
         (the book, docs/src/proofs.md: <em>What enforcement is proven</em>).</p>\n<table><tr><th>Matrix</th>\
         <th>Intent</th><th>Engine</th><th>Test</th></tr>\n",
    );
    for p in PROOFS.iter().filter(|p| used.contains(p.matrix)) {
        let _ = writeln!(
            out,
            "<tr class=\"proof\" id=\"proof-{m}\"><td>{m}</td><td>{}</td><td>{}</td>\
             <td>crates/nimbus/tests/efficacy: {}</td></tr>",
            esc(p.intent),
            p.engine.name(),
            esc(p.test),
            m = esc(p.matrix),
        );
    }
    out.push_str("</table></section>\n");
}

/// A deterministic UUID (version 5 layout, as OSCAL's schema requires) for `name`.
fn uuid(name: &str) -> String {
    let h = Sha256::digest(name.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h[..16]);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// An OSCAL token for a control: letters first (`cis-5.2.2`, `t1611`).
fn control_token(framework: &str, id: &str) -> String {
    let id = id.to_lowercase();
    match framework {
        "cis-kubernetes" => format!("cis-{id}"),
        _ => id,
    }
}

/// The same coverage as OSCAL assessment results (OSCAL 1.2.1): one result, one finding per
/// framework control, one observation per finding.
pub fn oscal(input: &Input) -> Value {
    let coverage = input.coverage();
    let seed = format!("{}|{}", input.scope, input.generated);
    let mut selected = Vec::new();
    let mut findings = Vec::new();
    let mut observations = Vec::new();
    for f in &coverage {
        for c in &f.controls {
            let token = control_token(&f.framework, &c.id);
            let key = format!("{seed}|{}|{}", f.framework, c.id);
            let observation = uuid(&format!("{key}|observation"));
            let covered = c.proven + c.unproven;
            let total = covered + c.audited + c.not_covered;
            let name = f
                .framework
                .parse::<Framework>()
                .ok()
                .and_then(|fw| control(fw, &c.id))
                .map_or(&*c.name, |c| c.name);
            selected.push(json!({"control-id": token}));
            let mut props = vec![
                json!({"name": "framework", "ns": "https://nimbus.security/ns/oscal", "value": f.framework}),
            ];
            for (n, v) in [
                ("proven", c.proven),
                ("unproven", c.unproven),
                ("audited", c.audited),
                ("not-covered", c.not_covered),
            ] {
                props.push(json!({"name": n, "ns": "https://nimbus.security/ns/oscal", "value": v.to_string()}));
            }
            observations.push(json!({
                "uuid": observation,
                "title": format!("{} {}", c.id, name),
                "description": format!(
                    "{} of {total} workloads covered ({} with proven enforcement{}), {} audited only, {} not covered.",
                    covered, c.proven,
                    if c.proofs.is_empty() { String::new() } else { format!(": {}", c.proofs.join(", ")) },
                    c.audited, c.not_covered
                ),
                "props": props,
                "methods": ["TEST"],
                "collected": input.generated,
            }));
            findings.push(json!({
                "uuid": uuid(&format!("{key}|finding")),
                "title": format!("{} {} {}", f.title, c.id, name),
                "description": format!("Coverage of {} {} on the workloads in scope.", f.title, c.id),
                "target": {
                    "type": "objective-id",
                    "target-id": token,
                    "status": {"state": if total > 0 && covered == total { "satisfied" } else { "not-satisfied" }},
                },
                "related-observations": [{"observation-uuid": observation}],
            }));
        }
    }
    let mut result = json!({
        "uuid": uuid(&format!("{seed}|result")),
        "title": format!("Nimbus compliance coverage of {}", input.scope),
        "description": "Controls of MITRE ATT&CK for Containers, the CIS Kubernetes Benchmark, \
                        the NSA/CISA Kubernetes Hardening Guide and MITRE FiGHT that the bound \
                        intents address, per workload, from the posture API.",
        "start": input.generated,
        "reviewed-controls": {"control-selections": [{"include-controls": selected}]},
    });
    if !observations.is_empty() {
        result["observations"] = json!(observations);
        result["findings"] = json!(findings);
    }
    json!({"assessment-results": {
        "uuid": uuid(&format!("{seed}|assessment-results")),
        "metadata": {
            "title": format!("Nimbus compliance report: {}", input.scope),
            "last-modified": input.generated,
            "version": env!("CARGO_PKG_VERSION"),
            "oscal-version": "1.2.1",
        },
        "import-ap": {"href": "#nimbus-intent-catalog"},
        "results": [result],
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_stable_and_of_version_five() {
        let u = uuid("x");
        assert_eq!(u, uuid("x"));
        assert_ne!(u, uuid("y"));
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "5");
        assert!("89ab".contains(&u[19..20]), "{u}");
    }

    #[test]
    fn html_escapes_what_it_shows_and_needs_no_network() {
        let input = Input {
            scope: "namespace <a>",
            generated: "2026-11-26T00:00:00Z",
            namespaces: &[],
            workloads: &[],
        };
        let html = html(&input);
        assert!(html.contains("namespace &lt;a&gt;"));
        assert!(!html.contains("<script") && !html.contains("<link") && !html.contains("@import"));
        assert!(html.contains("No workloads in scope."));
    }
}
