//! Kyverno's own reports as the preview of its validate rules: each report filed under the
//! workload its resource belongs to, and what the rules of our policies would refuse.

use super::listing::{MAX_EXAMPLES, WorkloadKey, key};
use crate::posture::Workload;
use nimbus_api::posture::{EngineCoverage, Reason, Reference, Refusal};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One resource's report from Kyverno's background scan (a `wgpolicyk8s.io/v1alpha2`
/// PolicyReport: since Kyverno 1.13, one per resource, named by its `scope`).
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The resource reported on.
    pub scope: Reference,
    pub results: Vec<ReportResult>,
}

/// One rule's result for the resource.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportResult {
    /// The policy as Kyverno keys it: `<namespace>/<name>` for a `Policy`, `<name>` for a
    /// `ClusterPolicy`.
    pub policy: String,
    pub rule: String,
    /// `pass`, `fail`, `warn`, `error` or `skip`.
    pub result: String,
    pub message: String,
}

impl Report {
    /// Reads a PolicyReport; `None` when it has no namespaced scope (reports of the
    /// namespace-wide kind, or malformed ones, say nothing of a workload).
    pub fn from_json(report: &Value) -> Option<Self> {
        let scope = &report["scope"];
        let text = |v: &Value| v.as_str().map(str::to_owned);
        Some(Self {
            scope: Reference {
                kind: text(&scope["kind"])?,
                namespace: Some(text(&scope["namespace"])?),
                name: text(&scope["name"])?,
            },
            results: report["results"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| {
                    Some(ReportResult {
                        policy: text(&r["policy"])?,
                        rule: text(&r["rule"]).unwrap_or_default(),
                        result: text(&r["result"])?,
                        message: text(&r["message"]).unwrap_or_default(),
                    })
                })
                .collect(),
        })
    }
}

/// Why Kyverno's reports cannot be read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unreadable {
    /// The PolicyReport kind is not served: Kyverno runs without its reports controller.
    NotServed,
    /// Served, but not listed yet.
    NotListed,
}

/// The reports of each workload: its own, and those of its pods and their controllers (a
/// Deployment's ReplicaSets); or why there are none to read.
pub type Reported<'a> = Result<BTreeMap<WorkloadKey, Vec<&'a Report>>, Unreadable>;

/// Files each report under the workload its resource belongs to.
pub fn reported<'a>(
    workloads: &[Workload],
    reports: &'a Result<Vec<Report>, Unreadable>,
) -> Reported<'a> {
    let reports = reports.as_ref().map_err(|why| *why)?;
    // The reports by their resource; then each workload looks up its own resources (there
    // are far more pods than reports, and most have none).
    let mut by_resource: HashMap<(&str, &str, &str), Vec<&Report>> = HashMap::new();
    for report in reports {
        let scope = &report.scope;
        let ns = scope.namespace.as_deref().unwrap_or_default();
        by_resource
            .entry((ns, scope.kind.as_str(), scope.name.as_str()))
            .or_default()
            .push(report);
    }
    let mut by_workload: BTreeMap<WorkloadKey, Vec<&Report>> = BTreeMap::new();
    if by_resource.is_empty() {
        return Ok(by_workload);
    }
    for w in workloads {
        let ns = w.namespace.as_str();
        let mut resources = BTreeSet::from([(ns, w.kind.as_str(), w.name.as_str())]);
        for pod in &w.pods {
            resources.insert((ns, "Pod", pod.name.as_str()));
            if let Some(c) = &pod.controller {
                resources.insert((ns, c.kind.as_str(), c.name.as_str()));
            }
        }
        let found: Vec<&Report> = resources
            .iter()
            .filter_map(|r| by_resource.get(r))
            .flatten()
            .copied()
            .collect();
        if !found.is_empty() {
            by_workload.insert(key(w), found);
        }
    }
    Ok(by_workload)
}

/// How Kyverno keys a policy in its reports.
pub(super) fn kyverno_key(policy: &Reference) -> String {
    match &policy.namespace {
        Some(ns) => format!("{ns}/{}", policy.name),
        None => policy.name.clone(),
    }
}

/// What Kyverno's reports say of one audited intent on a workload: the rules its resources
/// break, or why that cannot be told.
pub(super) fn refusals(
    intent: &str,
    kyverno: &EngineCoverage,
    reports: &[&Report],
) -> Result<Vec<Refusal>, Reason> {
    let policies: BTreeMap<String, &Reference> = kyverno
        .objects
        .iter()
        .map(|p| (kyverno_key(p), p))
        .collect();
    let mut scanned = false;
    // (policy key, rule) -> (resources in order, the message of each)
    let mut broken: BTreeMap<(&str, &str), BTreeMap<&Reference, &str>> = BTreeMap::new();
    for report in reports {
        for result in report
            .results
            .iter()
            .filter(|r| policies.contains_key(&r.policy))
        {
            scanned = true;
            if result.result == "fail" {
                broken
                    .entry((&result.policy, &result.rule))
                    .or_default()
                    .insert(&report.scope, &result.message);
            }
        }
    }
    if !scanned {
        return Err(Reason {
            reason: "NotScannedYet".to_owned(),
            message: format!(
                "kyverno: its background scan has not reported on this workload for {} yet",
                policies.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        });
    }
    Ok(broken
        .into_iter()
        .filter_map(|((policy, rule), resources)| {
            let (_, message) = resources.first_key_value()?;
            Some(Refusal {
                intent: intent.to_owned(),
                policy: (*policies.get(policy)?).clone(),
                rule: rule.to_owned(),
                message: (*message).to_owned(),
                count: u32::try_from(resources.len()).unwrap_or(u32::MAX),
                resources: resources.into_keys().take(MAX_EXAMPLES).cloned().collect(),
            })
        })
        .collect())
}
