//! `nimbus fleet report`: the fleet roll-up (`nimbus fleet status`) for people, as one
//! self-contained HTML file in the look of the compliance report (`nimbus report`): inline CSS
//! and SVG, nothing fetched when it is opened.
//!
//! What it covers is what the hub knows: per cluster, each Nimbus template's compliance, since
//! when, the message the cluster's operator reported (its reasons, the workloads not
//! protected, what is audited and the shadow preview) and the compliance history the
//! replicated Policy keeps. Not each workload's posture: that stays on the cluster
//! (`nimbus report` there).
//!
//! Pure: the hub's Policies (JSON) in, entries and HTML out.

use super::rollup::{self, Row, Standing};
use super::tally::Workloads;
use crate::compliance::report::{CSS, esc};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// One report in a template's compliance history on one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// `None` when the message names no compliance (OCM's own errors, for one).
    pub compliance: Option<Standing>,
    /// Without its compliance (`Compliant; ` and the like).
    pub message: String,
    /// RFC 3339, as OCM wrote it.
    pub at: Option<String>,
}

/// A row of the roll-up and its template's history on the cluster, newest first (as OCM keeps
/// it, at most 10 reports).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub row: Row,
    pub history: Vec<Transition>,
}

/// The roll-up's rows ([`rollup::rollup`]), each with its history from the cluster's
/// replicated Policy (`status.details[].history`).
pub fn entries(roots: &[Value], replicated: &[Value]) -> Vec<Entry> {
    rollup::rows_with_details(roots, replicated)
        .into_iter()
        .map(|(row, detail)| Entry {
            row,
            history: detail.map(history).unwrap_or_default(),
        })
        .collect()
}

fn history(detail: &Value) -> Vec<Transition> {
    let reports = detail["history"].as_array().into_iter().flatten();
    reports
        .filter_map(|report| {
            let (compliance, message) = rollup::split_compliance(report["message"].as_str()?);
            Some(Transition {
                compliance,
                message: message.to_owned(),
                at: report["lastTimestamp"].as_str().map(str::to_owned),
            })
        })
        .collect()
}

/// What a report is made of.
pub struct Input<'a> {
    /// `every namespace of the hub`, `Policy policies/nimbus-shop`.
    pub scope: &'a str,
    /// RFC 3339.
    pub generated: &'a str,
    pub entries: &'a [Entry],
    /// Every ManagedCluster on the hub: those no chosen Policy places a Nimbus template on
    /// are listed apart, so that a cluster outside the rollout is seen, not silently absent.
    pub managed_clusters: &'a [String],
}

/// How many templates are Compliant, NonCompliant and Pending.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub compliant: usize,
    pub noncompliant: usize,
    pub pending: usize,
}

impl Counts {
    fn of<'e>(entries: impl IntoIterator<Item = &'e Entry>) -> Self {
        let mut counts = Self::default();
        for entry in entries {
            match entry.row.compliance {
                Standing::Compliant => counts.compliant += 1,
                Standing::NonCompliant => counts.noncompliant += 1,
                Standing::Pending => counts.pending += 1,
            }
        }
        counts
    }

    fn total(self) -> usize {
        self.compliant + self.noncompliant + self.pending
    }

    /// The counts as `data-` attributes, which the tests read back from a browser's DOM.
    fn attributes(self) -> String {
        format!(
            "data-compliant=\"{}\" data-noncompliant=\"{}\" data-pending=\"{}\"",
            self.compliant, self.noncompliant, self.pending
        )
    }

    fn text(self) -> String {
        format!(
            "{} Compliant, {} NonCompliant, {} Pending",
            self.compliant, self.noncompliant, self.pending
        )
    }
}

/// The entries per cluster, clusters by name, each cluster's in the roll-up's order.
pub fn by_cluster(entries: &[Entry]) -> BTreeMap<&str, Vec<&Entry>> {
    let mut clusters: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for entry in entries {
        clusters.entry(&entry.row.cluster).or_default().push(entry);
    }
    clusters
}

/// Colours of the three standings, beside the compliance report's own.
const FLEET_CSS: &str = ".compliant{fill:#1a7f37;background:#1a7f37}\
.noncompliant{fill:#cf222e;background:#cf222e}.pending{fill:#d0d7de;background:#d0d7de}\
td.standing-Compliant{color:#1a7f37}td.standing-NonCompliant{color:#cf222e;font-weight:bold}\
ol.history{margin:0;padding-left:1.5em;color:#555}.note{color:#555}";

const BAR: f64 = 420.0;
const ROW: usize = 22;

/// The HTML report.
pub fn html(input: &Input) -> String {
    let clusters = by_cluster(input.entries);
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>Nimbus fleet compliance report</title><style>{CSS}{FLEET_CSS}</style></head>\
         <body>\n<h1>Fleet compliance report</h1><p class=\"meta\">Scope: {} &middot; generated \
         {} from the Open Cluster Management hub's Policies \
         (policy.open-cluster-management.io/v1)</p>\n\
         <p class=\"legend\"><span class=\"compliant\"></span>Compliant\
         <span class=\"noncompliant\"></span>NonCompliant\
         <span class=\"pending\"></span>Pending (nothing reported yet)</p>\n\
         <p class=\"note\">Each row is a SecurityIntent or binding an OCM Policy delivers, as \
         the operator on that cluster last judged it. The hub knows each template's compliance \
         and message, not each workload's posture: for that, run <code>nimbus report</code> \
         on the cluster.</p>\n",
        esc(input.scope),
        esc(input.generated)
    );
    summary_section(&mut out, &clusters);
    not_placed_section(&mut out, input, &clusters);
    for (cluster, entries) in &clusters {
        cluster_section(&mut out, cluster, entries);
    }
    out.push_str("</body></html>\n");
    out
}

fn summary_section(out: &mut String, clusters: &BTreeMap<&str, Vec<&Entry>>) {
    let all = Counts::of(clusters.values().flatten().copied());
    let _ = write!(
        out,
        "<section id=\"summary\"><h2>Summary</h2>\n<p class=\"totals\" data-clusters=\"{n}\" \
         {attrs}><span class=\"score\">{n}</span> clusters; templates: {text}</p>\n",
        n = clusters.len(),
        attrs = all.attributes(),
        text = all.text(),
    );
    if clusters.is_empty() {
        out.push_str(
            "<p id=\"empty\">No Nimbus template of an OCM Policy is placed on any cluster.</p>\
             </section>\n",
        );
        return;
    }
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" role=\"img\" \
         aria-label=\"templates per cluster by compliance\">",
        100.0 + BAR + 330.0,
        ROW * clusters.len() + 4,
    );
    for (row, (cluster, entries)) in clusters.iter().enumerate() {
        let counts = Counts::of(entries.iter().copied());
        let y = row * ROW;
        let total = (counts.total() as f64).max(1.0);
        let _ = write!(
            out,
            "<g class=\"cluster-bar\" data-cluster=\"{c}\"><title>{c}</title>\
             <text x=\"0\" y=\"{ty}\">{c}</text>",
            c = esc(cluster),
            ty = y + 15,
        );
        let mut x = 100.0;
        for (class, n) in [
            ("compliant", counts.compliant),
            ("noncompliant", counts.noncompliant),
            ("pending", counts.pending),
        ] {
            let width = BAR * n as f64 / total;
            if n > 0 {
                let _ = write!(
                    out,
                    "<rect class=\"{class}\" x=\"{x:.1}\" y=\"{}\" width=\"{width:.1}\" \
                     height=\"16\"/>",
                    y + 3
                );
            }
            x += width;
        }
        let _ = writeln!(
            out,
            "<text class=\"counts\" x=\"{}\" y=\"{}\">{}</text></g>",
            110.0 + BAR,
            y + 15,
            counts.text()
        );
    }
    out.push_str("</svg>\n</section>\n");
}

/// The ManagedClusters no chosen Policy places a Nimbus template on.
fn not_placed_section(out: &mut String, input: &Input, clusters: &BTreeMap<&str, Vec<&Entry>>) {
    let not_placed: BTreeSet<&str> = (input.managed_clusters.iter())
        .map(String::as_str)
        .filter(|c| !clusters.contains_key(c))
        .collect();
    if not_placed.is_empty() {
        return;
    }
    out.push_str(
        "<section id=\"not-placed\"><h2>Clusters without a Nimbus template</h2>\n<p>No Policy \
         in scope places a SecurityIntent or binding on these ManagedClusters: nothing of \
         Nimbus is known of them here.</p>\n<ul>",
    );
    for cluster in not_placed {
        let _ = write!(
            out,
            "<li class=\"not-placed\" data-cluster=\"{0}\">{0}</li>",
            esc(cluster)
        );
    }
    out.push_str("</ul></section>\n");
}

fn cluster_section(out: &mut String, cluster: &str, entries: &[&Entry]) {
    let counts = Counts::of(entries.iter().copied());
    let _ = write!(
        out,
        "<section class=\"cluster\" data-cluster=\"{c}\"><h2>Cluster {c}</h2>\n\
         <p class=\"counts\" {attrs}>{text}</p>\n<table><tr><th>Policy</th><th>Template</th>\
         <th>Compliance</th><th>Workloads</th><th>Engines in force</th><th>Since</th>\
         <th>Message</th></tr>\n",
        c = esc(cluster),
        attrs = counts.attributes(),
        text = counts.text(),
    );
    for Entry { row, history } in entries {
        let policy = esc(&format!("{}/{}", row.policy_namespace, row.policy));
        let template = esc(&format!("{}/{}", row.kind, row.name));
        let compliance = row.compliance.as_str();
        let _ = writeln!(
            out,
            "<tr class=\"template\" data-policy=\"{policy}\" data-template=\"{template}\" \
             data-compliance=\"{compliance}\"><td>{policy}</td><td>{template}</td>\
             <td class=\"standing-{compliance}\">{compliance}</td>{}<td class=\"engines\">{}</td>\
             <td class=\"since\">{}</td><td class=\"message\">{}</td></tr>",
            workloads_cell(row.workloads),
            esc(&row
                .engines
                .as_ref()
                .map_or("-".to_owned(), |e| e.join(", "))),
            esc(row.since.as_deref().unwrap_or("-")),
            esc(&row.message),
        );
        if history.is_empty() {
            continue;
        }
        let _ = write!(
            out,
            "<tr class=\"history\" data-policy=\"{policy}\" data-template=\"{template}\"><td>\
             </td><td colspan=\"6\">History, newest first:<ol class=\"history\">"
        );
        for transition in history {
            let compliance = transition.compliance.map_or("-", Standing::as_str);
            let _ = write!(
                out,
                "<li class=\"transition\" data-compliance=\"{compliance}\"><span class=\"at\">\
                 {}</span> <span class=\"standing\">{compliance}</span>: \
                 <span class=\"message\">{}</span></li>",
                esc(transition.at.as_deref().unwrap_or("-")),
                esc(&transition.message),
            );
        }
        out.push_str("</ol></td></tr>\n");
    }
    out.push_str("</table></section>\n");
}

/// A binding's workloads by verdict, in words and as `data-` attributes; `-` when the report
/// has no count.
fn workloads_cell(workloads: Option<Workloads>) -> String {
    match workloads {
        None => "<td class=\"workloads\">-</td>".to_owned(),
        Some(w) => format!(
            "<td class=\"workloads\" data-protected=\"{}\" data-audited=\"{}\" \
             data-excepted=\"{}\" data-unprotected=\"{}\">{w}</td>",
            w.protected, w.audited, w.excepted, w.unprotected
        ),
    }
}

#[cfg(test)]
mod tests;
