//! The Karmada part of the health test: the chart's ResourceInterpreterCustomizations
//! (`files/karmada/interpreter.yaml`) run in Karmada's own declarative interpreter
//! (tools/karmada-judge, `github.com/karmada-io/karmada`) on the operator's live objects.
//! - Health: each live SecurityIntent, SecurityIntentBinding and ClusterSecurityIntentBinding
//!   as a member cluster's copy is Healthy exactly when it is in force for its current
//!   generation (Ready, neither Stalled nor Reconciling), which is when the other tools say
//!   Current/Healthy.
//! - Aggregation: live objects as the copies of one resource template on two member clusters,
//!   reflected and aggregated as Karmada's controllers do; the template's status is Ready only
//!   when both are, the GitOps tools read it as they read a member's, and the CRD's schema
//!   accepts it (a dry-run status update, as Karmada would write it to the template).

use super::{CURRENT, Case, FAILED, IN_PROGRESS, Judgement, Verdicts, api};
use kube::api::{DynamicObject, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};

/// The kinds the customizations cover: those a Karmada control plane propagates (the
/// NimbusPolicies are generated on each member).
pub const KINDS: [&str; 3] = [
    "SecurityIntent",
    "SecurityIntentBinding",
    "ClusterSecurityIntentBinding",
];

/// The annotation Karmada's execution controller stamps on each member's copy: the generation
/// of the resource template it was made from.
const TEMPLATE_GENERATION: &str = "resourcetemplate.karmada.io/generation";

#[derive(Deserialize, Debug)]
struct Answer {
    checks: Vec<Check>,
    objects: Vec<Object>,
    fleets: Vec<Fleet>,
}

#[derive(Deserialize, Debug)]
struct Check {
    customization: String,
    operation: String,
    #[serde(default)]
    error: String,
}

#[derive(Deserialize, Debug)]
struct Object {
    kind: String,
    name: String,
    #[serde(default)]
    health: String,
    #[serde(default)]
    errors: Vec<String>,
}

#[derive(Deserialize, Debug)]
struct Fleet {
    items: Vec<Value>,
    aggregated: Option<Value>,
    #[serde(default)]
    errors: Vec<String>,
}

/// Runs karmada-judge; every script of every customization must compile in Karmada's VM.
fn judge(request: &Value) -> Answer {
    let answer: Answer = crate::common::karmada_judge(request);
    let failed: Vec<String> = answer
        .checks
        .iter()
        .filter(|c| !c.error.is_empty())
        .map(|c| format!("{} {}: {}", c.customization, c.operation, c.error))
        .collect();
    assert!(failed.is_empty(), "Karmada's --check: {failed:#?}");
    assert_eq!(answer.checks.len(), 3 * KINDS.len(), "{:?}", answer.checks);
    answer
}

/// In force for the current generation, read off the object itself: Ready=True, neither
/// Stalled nor Reconciling (a bad parameter is Ready, its default in force, and Stalled, the
/// intent as written not), and observedGeneration equal to the generation.
fn in_force_for_generation(obj: &Value) -> bool {
    let status = &obj["status"];
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let is_true = |kind: &str| {
        conditions
            .iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    };
    is_true("Ready")
        && !is_true("Stalled")
        && !is_true("Reconciling")
        && status["observedGeneration"].as_i64().is_some()
        && status["observedGeneration"] == obj["metadata"]["generation"]
}

/// Karmada's health of each case of a covered kind (`objects` are the cases' live objects, in
/// order, `Null` when missing; `judged` the GitOps tools' judgements of the present ones, in
/// order): Healthy exactly when the case is expected Current/Healthy, when the tools say so
/// on this very snapshot, and when the object is in force for its current generation.
/// Returns the mismatches.
pub fn health_mismatches(cases: &[Case], objects: &[Value], judged: &[Judgement]) -> Vec<String> {
    let mut covered = Vec::new();
    let mut argocd = judged.iter();
    for (case, obj) in cases.iter().zip(objects) {
        if obj.is_null() {
            continue;
        }
        let argocd_healthy = argocd.next().is_some_and(|j| j.verdicts().1 == "Healthy");
        if KINDS.contains(&case.kind) {
            covered.push((case, obj, argocd_healthy));
        }
    }
    if covered.is_empty() {
        return Vec::new();
    }
    let request = json!({"objects": covered.iter().map(|(_, obj, _)| obj).collect::<Vec<_>>()});
    let answer = judge(&request);
    let mut mismatches = Vec::new();
    for ((case, obj, argocd_healthy), judged) in covered.iter().zip(&answer.objects) {
        assert_eq!(
            (judged.kind.as_str(), judged.name.as_str()),
            (case.kind, case.name.as_str())
        );
        assert!(
            judged.errors.is_empty(),
            "{}: {:?}",
            case.what,
            judged.errors
        );
        let healthy = judged.health == "Healthy";
        let expected = case.expected == CURRENT;
        if healthy != expected
            || healthy != *argocd_healthy
            || healthy != in_force_for_generation(obj)
        {
            mismatches.push(format!(
                "{}: {} {}: Karmada says {}, expected {} (Argo CD healthy: {argocd_healthy}); \
                 generation {}, status {}",
                case.what,
                case.kind,
                case.name,
                judged.health,
                if expected { "Healthy" } else { "Unhealthy" },
                obj["metadata"]["generation"],
                obj["status"],
            ));
        }
    }
    mismatches
}

/// `obj` as Karmada leaves it on a member cluster: under the template's name, stamped with
/// the template's generation.
fn copy_on_member(obj: &Value, name: &str, template_generation: i64) -> Value {
    let mut copy = obj.clone();
    copy["metadata"]["name"] = json!(name);
    copy["metadata"]["annotations"][TEMPLATE_GENERATION] = json!(template_generation.to_string());
    copy
}

/// One aggregation: a template, its members' live objects (cluster name, object, the template
/// generation stamped on it), and what is expected of the result.
struct Aggregation<'a> {
    what: &'static str,
    template: &'a Value,
    members: Vec<(&'static str, &'a Value, i64)>,
    ready: &'static str,
    reason: &'static str,
    /// How many members the Ready message counts Ready.
    ready_on: usize,
    health: Vec<&'static str>,
    gitops: Verdicts,
}

/// The live objects the aggregations are made of, after the first step of the health test
/// (everything settled): bindings in force, waiting and stalled, of each kind.
pub struct Live {
    pub binding_ok: Value,
    pub binding_waiting: Value,
    pub binding_stalled: Value,
    pub cluster_ok: Value,
    pub cluster_stalled: Value,
    pub intent_ok: Value,
    pub intent_stalled: Value,
}

pub async fn aggregations_are_honest(client: &kube::Client, live: &Live) {
    let generation = |obj: &Value| obj["metadata"]["generation"].as_i64().unwrap_or_default();
    let g = generation(&live.binding_ok);
    // The template changed on the Karmada control plane (generation g + 1), applied on one
    // member so far.
    let mut changed = live.binding_ok.clone();
    changed["metadata"]["generation"] = json!(g + 1);
    #[rustfmt::skip]
    let cases = [
        Aggregation { what: "one member Ready, one waiting", template: &live.binding_ok,
            members: vec![("east", &live.binding_ok, g), ("west", &live.binding_waiting, g)],
            ready: "False", reason: "EngineNotInstalled", ready_on: 1, health: vec!["Healthy", "Unhealthy"], gitops: IN_PROGRESS },
        Aggregation { what: "both members Ready", template: &live.binding_ok,
            members: vec![("east", &live.binding_ok, g), ("west", &live.binding_ok, g)],
            ready: "True", reason: "Ready", ready_on: 2, health: vec!["Healthy", "Healthy"], gitops: CURRENT },
        Aggregation { what: "one member Ready, one stalled", template: &live.binding_ok,
            members: vec![("east", &live.binding_ok, g), ("west", &live.binding_stalled, g)],
            ready: "False", reason: "UnsupportedIntent", ready_on: 1, health: vec!["Healthy", "Unhealthy"], gitops: FAILED },
        Aggregation { what: "a member on the template's previous generation", template: &changed,
            members: vec![("east", &live.binding_ok, g + 1), ("west", &live.binding_ok, g)],
            ready: "False", reason: "NotReported", ready_on: 1, health: vec!["Healthy", "Healthy"], gitops: IN_PROGRESS },
        Aggregation { what: "propagated nowhere yet", template: &live.binding_ok, members: vec![],
            ready: "False", reason: "NotPropagated", ready_on: 0, health: vec![], gitops: IN_PROGRESS },
        Aggregation { what: "cluster binding: one member Ready, one stalled", template: &live.cluster_ok,
            members: vec![("east", &live.cluster_ok, generation(&live.cluster_ok)),
                          ("west", &live.cluster_stalled, generation(&live.cluster_ok))],
            ready: "False", reason: "UnsupportedIntent", ready_on: 1, health: vec!["Healthy", "Unhealthy"], gitops: FAILED },
        Aggregation { what: "cluster binding: both members Ready", template: &live.cluster_ok,
            members: vec![("east", &live.cluster_ok, generation(&live.cluster_ok)),
                          ("west", &live.cluster_ok, generation(&live.cluster_ok))],
            ready: "True", reason: "Ready", ready_on: 2, health: vec!["Healthy", "Healthy"], gitops: CURRENT },
        Aggregation { what: "intent: one member Ready, one stalled", template: &live.intent_ok,
            members: vec![("east", &live.intent_ok, generation(&live.intent_ok)),
                          ("west", &live.intent_stalled, generation(&live.intent_ok))],
            ready: "False", reason: "UnsupportedIntent", ready_on: 1, health: vec!["Healthy", "Unhealthy"], gitops: FAILED },
    ];
    let fleets: Vec<Value> = cases
        .iter()
        .map(|case| {
            let name = &case.template["metadata"]["name"];
            let members: Vec<Value> = case
                .members
                .iter()
                .map(|(cluster, obj, stamped)| {
                    json!({"cluster": cluster,
                           "object": copy_on_member(obj, name.as_str().unwrap_or_default(), *stamped)})
                })
                .collect();
            json!({"template": case.template, "members": members})
        })
        .collect();
    let answer = judge(&json!({"fleets": fleets}));
    assert_eq!(answer.fleets.len(), cases.len());

    let mut aggregated = Vec::new();
    for (case, fleet) in cases.iter().zip(&answer.fleets) {
        assert!(fleet.errors.is_empty(), "{}: {:?}", case.what, fleet.errors);
        let health: Vec<&str> = fleet
            .items
            .iter()
            .map(|i| i["health"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            health, case.health,
            "{}: items {:#?}",
            case.what, fleet.items
        );
        let Some(result) = &fleet.aggregated else {
            panic!("{}: nothing aggregated", case.what);
        };
        let conditions = result["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let ready = conditions.iter().find(|c| c["type"] == "Ready");
        assert_eq!(
            ready.map(|c| (c["status"].clone(), c["reason"].clone())),
            Some((json!(case.ready), json!(case.reason))),
            "{}: {:#}",
            case.what,
            result["status"]
        );
        let counted = format!(
            "Ready on {} of {} clusters",
            case.ready_on,
            case.members.len()
        );
        let ready_message = ready
            .and_then(|c| c["message"].as_str())
            .unwrap_or_default();
        assert!(
            case.members.is_empty() || ready_message.starts_with(&counted),
            "{}: {ready_message:?} should start with {counted:?}",
            case.what
        );
        aggregated.push(result.clone());
    }

    // The template's status speaks the operator's vocabulary: the GitOps tools read it as they
    // read a member's.
    let judged: Vec<Judgement> = crate::common::health_judge(&aggregated);
    for ((case, j), result) in cases.iter().zip(&judged).zip(&aggregated) {
        assert_eq!(
            j.verdicts(),
            case.gitops,
            "{}: the GitOps tools on the aggregated status {:#}",
            case.what,
            result["status"]
        );
    }

    // And the CRD's schema takes it whole, as Karmada would write it to the template's status.
    let dry_run = PostParams {
        dry_run: true,
        field_manager: Some("karmada-controller-manager".into()),
    };
    for (case, result) in cases.iter().zip(&aggregated) {
        let kind = result["kind"].as_str().unwrap_or_default();
        let namespace = result["metadata"]["namespace"].as_str();
        let name = result["metadata"]["name"].as_str().unwrap_or_default();
        let api = api(client, kind, namespace);
        // The status subresource takes updates of the object as it is now (the operator may
        // have written it since), with the generation the server keeps.
        let now = api
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{}: {kind} {name}: {e}", case.what));
        let mut update = result.clone();
        update["metadata"]["resourceVersion"] = json!(now.metadata.resource_version);
        update["metadata"]["generation"] = json!(now.metadata.generation);
        let object: DynamicObject = serde_json::from_value(update).expect("an object");
        let written = api
            .replace_status(name, &dry_run, &object)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{}: the API server refuses the aggregated status: {e}",
                    case.what
                )
            });
        // Nothing pruned: every field aggregated is one the schema knows.
        let written = serde_json::to_value(written).expect("an object");
        assert_eq!(written["status"], result["status"], "{}", case.what);
    }
}
