//! Policy reports: the posture in the format the tools platform teams already watch read
//! (Policy Reporter, Rancher, Open Cluster Management, Lula): OpenReports' `Report`
//! (`openreports.io/v1alpha1`), or the `wgpolicyk8s.io/v1alpha2` `PolicyReport` it succeeds,
//! which has the same shape. One report per workload that a bound intent selects, scoped to the
//! workload and owned by it; one result per intent.

use crate::engines::{Acts, MANAGED_BY, NativeKind, POLICY_REPORT};
use crate::names;
use crate::posture::{Workload, workload_posture_name};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use nimbus_api::posture::{EngineState, IntentCoverage, Verdict, WorkloadPosture};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The `source` of every report and result.
pub const SOURCE: &str = "nimbus";
/// The `app.kubernetes.io/managed-by` label of every report: the operator watches only these.
pub const MANAGER: &str = "nimbus-reports";
/// Results per report: a workload rarely has more intents; the rest are left out, and the
/// summary counts only what is listed.
pub const MAX_RESULTS: usize = 500;

/// OpenReports' namespaced report kind.
pub const OPEN_REPORT: NativeKind = NativeKind {
    group: "openreports.io",
    version: "v1alpha1",
    kind: "Report",
    plural: "reports",
    namespaced: true,
    crd: Some("reports.openreports.io"),
    entry: "Report",
    listed: false,
    acts: Acts::OnWrite,
};

/// Which report kind the operator writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReportFormat {
    /// OpenReports where served, else `wgpolicyk8s.io` PolicyReports where served, else none.
    #[default]
    Auto,
    /// OpenReports `Report` only.
    Openreports,
    /// `wgpolicyk8s.io/v1alpha2` `PolicyReport` only.
    Policyreports,
    /// No reports.
    Off,
}

impl ReportFormat {
    /// The kinds it may write, in order of preference.
    pub fn candidates(self) -> &'static [&'static NativeKind] {
        match self {
            Self::Auto => &[&OPEN_REPORT, &POLICY_REPORT],
            Self::Openreports => &[&OPEN_REPORT],
            Self::Policyreports => &[&POLICY_REPORT],
            Self::Off => &[],
        }
    }

    /// The kind to write: the first candidate served.
    pub fn kind(self, served: impl Fn(&NativeKind) -> bool) -> Option<&'static NativeKind> {
        self.candidates().iter().copied().find(|k| served(k))
    }
}

/// One result, as written (`timestamp` apart: it says when the result was first found, so it
/// is carried over while the result stays the same).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReportResult {
    pub source: String,
    /// The SecurityIntent (its ID when it no longer exists).
    pub policy: String,
    /// The intent's ID.
    pub rule: String,
    pub category: String,
    /// `pass`, `fail`, `warn` or `skip`.
    pub result: String,
    pub scored: bool,
    pub message: String,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// The report the posture of one workload gives.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredReport {
    pub namespace: String,
    pub name: String,
    /// The workload, which owns the report (so the report goes with it).
    pub owner: Option<OwnerReference>,
    pub scope: Value,
    pub results: Vec<ReportResult>,
}

/// The report of `workload`, whose posture is `posture`; `None` when no bound intent selects it
/// (a report of nothing would be noise; the posture API lists those workloads).
pub fn workload_report(workload: &Workload, posture: &WorkloadPosture) -> Option<DesiredReport> {
    if posture.intents.is_empty() {
        return None;
    }
    let mut results: Vec<ReportResult> = posture.intents.iter().map(result).collect();
    results.sort_by(|a, b| {
        (&a.rule, &a.policy, &a.properties).cmp(&(&b.rule, &b.policy, &b.properties))
    });
    results.truncate(MAX_RESULTS);
    let owner = workload.uid.as_ref().map(|uid| OwnerReference {
        api_version: workload.api_version.clone(),
        kind: workload.kind.clone(),
        name: workload.name.clone(),
        uid: uid.clone(),
        ..OwnerReference::default()
    });
    Some(DesiredReport {
        namespace: workload.namespace.clone(),
        name: names::fit(
            &format!(
                "nimbus-{}",
                workload_posture_name(&workload.kind, &workload.name)
            ),
            253,
        ),
        owner,
        scope: json!({
            "apiVersion": workload.api_version,
            "kind": workload.kind,
            "namespace": workload.namespace,
            "name": workload.name,
            "uid": workload.uid,
        }),
        results,
    })
}

/// One intent on the workload: `pass` when every engine enforces it, `warn` when it is audited
/// (its action, or shadow mode), `skip` when all that is missing is an engine that is not
/// installed, `fail` otherwise, with the posture's reasons.
fn result(intent: &IntentCoverage) -> ReportResult {
    let not_enforcing: Vec<_> = intent
        .engines
        .iter()
        .filter(|e| e.state != EngineState::Enforcing)
        .collect();
    let reasons = || {
        intent
            .reasons
            .iter()
            .map(|r| format!("{}: {}", r.reason, r.message))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let engines = |state: Option<EngineState>| {
        intent
            .engines
            .iter()
            .filter(|e| state.is_none_or(|s| e.state == s))
            .map(|e| e.engine.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (result, message) = match intent.verdict {
        Verdict::Protected => ("pass", format!("enforced by {}", engines(None))),
        Verdict::Audited => ("warn", format!("audited, not enforced: {}", reasons())),
        // Once the exceptions expire, the verdict (and the result) is the intent's again.
        Verdict::Excepted => ("skip", format!("excepted, not enforced: {}", reasons())),
        _ if !not_enforcing.is_empty()
            && not_enforcing
                .iter()
                .all(|e| e.state == EngineState::NotInstalled) =>
        {
            let missing = engines(Some(EngineState::NotInstalled));
            ("skip", format!("engine not installed: {missing}"))
        }
        _ => ("fail", reasons()),
    };
    let properties = properties(intent);
    ReportResult {
        source: SOURCE.to_owned(),
        policy: intent.intent.clone().unwrap_or_else(|| intent.id.clone()),
        rule: intent.id.clone(),
        category: "SecurityIntent".to_owned(),
        result: result.to_owned(),
        scored: true,
        message,
        properties,
    }
}

/// A result's properties: where the intent comes from, which engines and objects enforce it,
/// what lets the workload out of it, and who wrote it.
fn properties(intent: &IntentCoverage) -> BTreeMap<String, String> {
    let describe = |r: &nimbus_api::posture::Reference| match &r.namespace {
        Some(ns) => format!("{} {ns}/{}", r.kind, r.name),
        None => format!("{} {}", r.kind, r.name),
    };
    let mut properties = BTreeMap::from([
        ("policy".to_owned(), describe(&intent.policy)),
        ("action".to_owned(), intent.action.clone()),
        (
            "engines".to_owned(),
            intent
                .engines
                .iter()
                .map(|e| format!("{}={:?}", e.engine, e.state))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    ]);
    if let Some(binding) = &intent.binding {
        properties.insert("binding".to_owned(), describe(binding));
    }
    if !intent.exceptions.is_empty() {
        let exceptions: Vec<String> = intent
            .exceptions
            .iter()
            .map(|e| match e.controls.is_empty() {
                true => format!("{} {} (until {})", e.kind, e.name, e.expires_at.0),
                false => format!(
                    "{} {} (until {}; controls: {})",
                    e.kind,
                    e.name,
                    e.expires_at.0,
                    e.controls.join(", ")
                ),
            })
            .collect();
        properties.insert("exceptions".to_owned(), exceptions.join(", "));
    }
    if let Some(proof) = intent.tenant_proof {
        let said = match proof {
            true => "yes: the namespace's tenants cannot undo it",
            false => {
                "no: the namespace's tenants can undo it (a NetworkPolicy of theirs reopens it)"
            }
        };
        properties.insert("tenantProof".to_owned(), said.to_owned());
    }
    if let Some(name) = &intent.intent {
        let writer = nimbus_api::IntentWriter {
            name: name.clone(),
            generation: 0,
            written_by: intent.written_by.clone(),
            written_at: intent.written_at.clone(),
        };
        properties.insert(
            "intentWrittenBy".to_owned(),
            format!(
                "{} at {}",
                crate::authors::who(&writer),
                crate::authors::when(&writer.written_at)
            ),
        );
    }
    let objects: Vec<String> = intent
        .engines
        .iter()
        .flat_map(|e| e.objects.iter().map(describe))
        .collect();
    if !objects.is_empty() {
        properties.insert("objects".to_owned(), objects.join(", "));
    }
    properties
}

/// What the writer keeps of one of its stored reports, from [`condense`].
#[derive(Serialize, Deserialize, Debug, Default, PartialEq)]
struct Condensed {
    /// The UIDs of its owners.
    #[serde(default)]
    owners: Vec<String>,
    #[serde(default)]
    scope: Value,
    #[serde(default)]
    results: Vec<CondensedResult>,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct CondensedResult {
    /// Of what [`up_to_date`] compares ([`digest`]).
    digest: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timestamp: Option<Value>,
}

/// A stored result as the API server serves it.
#[derive(Deserialize)]
struct StoredResult {
    #[serde(flatten)]
    result: ReportResult,
    #[serde(default)]
    timestamp: Option<Value>,
}

/// A result's digest: equal digests, equal results (the writer compares results by it).
fn digest(result: &ReportResult) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(result)
}

/// What the writer keeps of a stored report (`report`, the whole object as JSON): its owners'
/// UIDs, its scope, and of each result its digest and timestamp. Reports are one per workload an
/// intent selects, and a result's properties name objects and reasons: kept whole, they cost
/// several kilobytes each; this, some hundred bytes. [`up_to_date`] and [`report_object`] read
/// it.
pub fn condense(report: &Value) -> Value {
    #[derive(Deserialize, Default)]
    struct Whole {
        #[serde(default)]
        scope: Value,
        #[serde(default)]
        results: Vec<StoredResult>,
    }
    let whole: Whole = serde_json::from_value(report.clone()).unwrap_or_default();
    let owners = report["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten();
    let condensed = Condensed {
        owners: owners
            .filter_map(|o| o["uid"].as_str().map(str::to_owned))
            .collect(),
        scope: whole.scope,
        results: (whole.results.into_iter())
            .map(|r| CondensedResult {
                digest: digest(&r.result),
                timestamp: r.timestamp,
            })
            .collect(),
    };
    serde_json::to_value(condensed).unwrap_or_default()
}

fn condensed(existing: &Value) -> Condensed {
    serde_json::from_value(existing.clone()).unwrap_or_default()
}

/// Whether the stored report (`existing`, as [`condense`] keeps it) already says what `desired`
/// says (timestamps apart), so that nothing is written at steady state.
pub fn up_to_date(desired: &DesiredReport, existing: &Value) -> bool {
    let stored = condensed(existing);
    let owners_match =
        (desired.owner.as_ref()).is_none_or(|owner| stored.owners.contains(&owner.uid));
    owners_match
        && stored.scope == desired.scope
        && stored.results.len() == desired.results.len()
        && (stored.results.iter().zip(&desired.results)).all(|(s, d)| s.digest == digest(d))
}

/// The whole report object to apply as `kind`: each result keeps the timestamp of the same
/// result in `existing` (as [`condense`] keeps it), and a new or changed one is stamped `now`
/// (Unix seconds).
pub fn report_object(
    desired: &DesiredReport,
    kind: &NativeKind,
    existing: Option<&Value>,
    now: i64,
) -> Value {
    let before = existing.map(condensed).unwrap_or_default();
    let mut summary: BTreeMap<&str, u32> = ["pass", "fail", "warn", "error", "skip"]
        .into_iter()
        .map(|r| (r, 0))
        .collect();
    let results: Vec<Value> = desired
        .results
        .iter()
        .map(|r| {
            if let Some(count) = summary.get_mut(r.result.as_str()) {
                *count += 1;
            }
            let digest = digest(r);
            let timestamp = (before.results.iter())
                .find(|s| s.digest == digest)
                .and_then(|s| s.timestamp.clone())
                .unwrap_or_else(|| json!({"seconds": now, "nanos": 0}));
            let mut value = json!(r);
            value["timestamp"] = timestamp;
            value
        })
        .collect();
    let mut metadata = json!({
        "name": desired.name,
        "namespace": desired.namespace,
        "labels": {MANAGED_BY: MANAGER},
    });
    if let Some(owner) = &desired.owner {
        metadata["ownerReferences"] = json!([owner]);
    }
    let mut report = json!({
        "apiVersion": kind.api_version(),
        "kind": kind.kind,
        "metadata": metadata,
        "scope": desired.scope,
        "summary": summary,
        "results": results,
    });
    // An OpenReports Report names its source once; a `wgpolicyk8s.io` PolicyReport has no such
    // field (kube-apiserver refuses to apply an undeclared one), only each result's.
    if kind == &OPEN_REPORT {
        report["source"] = SOURCE.into();
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::posture::Pod;
    use nimbus_api::posture::{EngineCoverage, Reason, Reference};

    fn intent(id: &str, verdict: Verdict, engines: &[(&str, EngineState)]) -> IntentCoverage {
        IntentCoverage {
            intent: Some(id.to_lowercase()),
            id: id.into(),
            bundle: None,
            action: "Block".into(),
            written_by: None,
            written_at: None,
            binding: Some(Reference {
                kind: "SecurityIntentBinding".into(),
                namespace: Some("shop".into()),
                name: "web".into(),
            }),
            policy: Reference {
                kind: "NimbusPolicy".into(),
                namespace: Some("shop".into()),
                name: "web".into(),
            },
            verdict,
            engines: engines
                .iter()
                .map(|(engine, state)| EngineCoverage {
                    engine: (*engine).into(),
                    state: *state,
                    objects: vec![],
                })
                .collect(),
            reasons: vec![Reason {
                reason: "Why".into(),
                message: "because".into(),
            }],
            tenant_proof: None,
            liveness: None,
            exceptions: Vec::new(),
        }
    }

    fn web() -> Workload {
        Workload {
            namespace: "shop".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            uid: Some("d-1".into()),
            created: None,
            pods: vec![Pod::default()],
        }
    }

    fn posture(intents: Vec<IntentCoverage>) -> WorkloadPosture {
        let mut posture = crate::posture::workload_posture(&web(), &[]);
        posture.intents = intents;
        posture
    }

    /// pass when enforced, warn when audited, skip when only an uninstalled engine is
    /// missing, fail otherwise; one result per intent, in order.
    /// An engine whose enforcement probe was admitted fails the intent (the posture's verdict
    /// and reasons), even though its objects are in the cluster.
    #[test]
    fn enforcement_not_live_fails() {
        let report = workload_report(
            &web(),
            &posture(vec![intent(
                "escapeToHost",
                Verdict::Unprotected,
                &[("kyverno", EngineState::NotLive)],
            )]),
        )
        .expect("a report");
        assert_eq!(report.results[0].result, "fail");
    }

    #[test]
    fn each_intent_is_one_result_judged_as_the_posture_judges_it() {
        use EngineState::*;
        let report = workload_report(
            &web(),
            &posture(vec![
                intent(
                    "escapeToHost",
                    Verdict::Protected,
                    &[("kyverno", Enforcing)],
                ),
                intent(
                    "dnsManipulation",
                    Verdict::Audited,
                    &[("kubearmor", Auditing)],
                ),
                intent(
                    "cocoWorkload",
                    Verdict::Unprotected,
                    &[("kyverno", NotInstalled)],
                ),
                IntentCoverage {
                    tenant_proof: Some(false),
                    exceptions: Vec::new(),
                    ..intent(
                        "denyExternalNetworkAccess",
                        Verdict::Partial,
                        &[("netpol", Enforcing), ("kubearmor", Pending)],
                    )
                },
            ]),
        )
        .expect("a report");
        let got: Vec<(&str, &str)> = report
            .results
            .iter()
            .map(|r| (r.rule.as_str(), r.result.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("cocoWorkload", "skip"),
                ("denyExternalNetworkAccess", "fail"),
                ("dnsManipulation", "warn"),
                ("escapeToHost", "pass"),
            ]
        );
        assert_eq!(report.results[1].message, "Why: because");
        // Said where known, and only there.
        assert!(report.results[1].properties["tenantProof"].starts_with("no: "));
        assert!(!report.results[3].properties.contains_key("tenantProof"));
        assert_eq!(
            report.results[3].properties["binding"],
            "SecurityIntentBinding shop/web"
        );
        // Who last wrote each intent: unknown here (no stamp).
        assert!(
            report.results[3].properties["intentWrittenBy"]
                .starts_with("an unknown user (no intent.security.nimbus.com/last-written-by"),
            "{:?}",
            report.results[3].properties
        );
        assert_eq!(report.name, "nimbus-deployment-web");
        assert_eq!(report.owner.as_ref().map(|o| o.uid.as_str()), Some("d-1"));
        assert_eq!(workload_report(&web(), &posture(vec![])), None);
    }

    /// Timestamps survive an unchanged result and only it; a stored report that says the same
    /// is up to date whatever its timestamps.
    #[test]
    fn a_result_keeps_its_timestamp_until_it_changes() {
        let pass = intent(
            "escapeToHost",
            Verdict::Protected,
            &[("kyverno", EngineState::Enforcing)],
        );
        let fail = intent(
            "dnsManipulation",
            Verdict::Unprotected,
            &[("netpol", EngineState::Pending)],
        );
        let before = workload_report(&web(), &posture(vec![pass.clone(), fail])).expect("a report");
        let written = report_object(&before, &OPEN_REPORT, None, 100);
        assert_eq!(written["summary"]["pass"], 1);
        assert_eq!(written["summary"]["fail"], 1);
        // What the writer keeps of it once stored.
        let stored = condense(&written);
        assert!(up_to_date(&before, &stored));
        assert!(
            serde_json::to_string(&stored).expect("JSON").len()
                < serde_json::to_string(&written).expect("JSON").len() / 3,
            "{stored}"
        );

        let fixed = intent(
            "dnsManipulation",
            Verdict::Protected,
            &[("netpol", EngineState::Enforcing)],
        );
        let after = workload_report(&web(), &posture(vec![pass, fixed])).expect("a report");
        assert!(!up_to_date(&after, &stored));
        let rewritten = report_object(&after, &OPEN_REPORT, Some(&stored), 200);
        let stamps: Vec<(&str, &Value)> = rewritten["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| {
                (
                    r["rule"].as_str().expect("rule"),
                    &r["timestamp"]["seconds"],
                )
            })
            .collect();
        assert_eq!(
            stamps,
            [
                ("dnsManipulation", &json!(200)),
                ("escapeToHost", &json!(100))
            ]
        );
        assert_eq!(rewritten["summary"]["pass"], 2);
    }

    /// A stored report is up to date only with the same owner, scope and results.
    #[test]
    fn a_condensed_report_differs_by_owner_scope_and_results() {
        let pass = intent(
            "escapeToHost",
            Verdict::Protected,
            &[("kyverno", EngineState::Enforcing)],
        );
        let desired = workload_report(&web(), &posture(vec![pass])).expect("a report");
        let written = report_object(&desired, &OPEN_REPORT, None, 100);
        assert!(up_to_date(&desired, &condense(&written)));
        let mut other_owner = written.clone();
        other_owner["metadata"]["ownerReferences"][0]["uid"] = json!("d-2");
        let mut other_scope = written.clone();
        other_scope["scope"]["name"] = json!("api");
        let mut other_result = written.clone();
        other_result["results"][0]["properties"]["objects"] = json!("NetworkPolicy shop/x");
        let mut no_results = written.clone();
        no_results["results"] = json!([]);
        for (what, stored) in [
            ("another owner", other_owner),
            ("another scope", other_scope),
            ("another result", other_result),
            ("no result", no_results),
            ("not a report", json!({"spec": {}})),
        ] {
            assert!(!up_to_date(&desired, &condense(&stored)), "{what}");
        }
    }

    #[test]
    fn the_kind_written_is_the_first_served_candidate() {
        let only_wg = |k: &NativeKind| *k == POLICY_REPORT;
        assert_eq!(ReportFormat::Auto.kind(|_| true), Some(&OPEN_REPORT));
        assert_eq!(ReportFormat::Auto.kind(only_wg), Some(&POLICY_REPORT));
        assert_eq!(ReportFormat::Openreports.kind(only_wg), None);
        assert_eq!(ReportFormat::Off.kind(|_| true), None);
    }

    /// The properties `schema` declares, as (name, its schema) pairs.
    fn declared(schema: &Value) -> BTreeMap<String, Value> {
        schema["properties"]
            .as_object()
            .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Each kind's object, at its top level and in each result, holds only fields the schema
    /// of the CRD its project ships declares: kube-apiserver refuses to apply any other.
    #[test]
    fn each_report_kind_writes_only_what_its_crd_declares() {
        let failing = intent(
            "escapeToHost",
            Verdict::Unprotected,
            &[("kyverno", EngineState::Pending)],
        );
        let desired = workload_report(&web(), &posture(vec![failing])).expect("a report");
        let upstream = concat!(env!("CARGO_MANIFEST_DIR"), "/../../upstream/");
        for (kind, crd) in [
            (&OPEN_REPORT, "openreports/openreports.io_reports.yaml"),
            (&POLICY_REPORT, "kyverno/wgpolicyk8s.io_policyreports.yaml"),
        ] {
            let text = std::fs::read_to_string(format!("{upstream}{crd}")).expect(crd);
            let crd: Value = serde_yaml_ng::from_str(&text).expect(crd);
            let version = crd["spec"]["versions"]
                .as_array()
                .and_then(|v| v.iter().find(|v| v["name"] == kind.version))
                .expect("the kind's version");
            let schema = &version["schema"]["openAPIV3Schema"];
            let object = report_object(&desired, kind, None, 100);
            let top: Vec<&String> = object.as_object().expect("object").keys().collect();
            let top_declared = declared(schema);
            let undeclared: Vec<_> = top
                .iter()
                .filter(|k| !top_declared.contains_key(**k))
                .collect();
            assert!(undeclared.is_empty(), "{}: {undeclared:?}", kind.kind);
            let result_declared = declared(&top_declared["results"]["items"]);
            for result in object["results"].as_array().expect("results") {
                let keys = result.as_object().expect("a result").keys();
                let undeclared: Vec<_> =
                    keys.filter(|k| !result_declared.contains_key(*k)).collect();
                assert!(
                    undeclared.is_empty(),
                    "{} results: {undeclared:?}",
                    kind.kind
                );
            }
        }
    }
}
