//! What every golden module shares: the input policies (and their rules), running the
//! translators, the generated objects as JSON, and the metadata every expected object carries.

use nimbus_api::{ALLOW_SENSITIVE_ANNOTATION, ClusterNimbusPolicy, NimbusPolicy};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{
    EngineSet, Environment, Generated, PolicyInput, Translation, translate, virtual_patch,
};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

pub const NS: &str = "shop";
/// The NimbusPolicy of a SecurityIntentBinding is named after it.
pub const SIB_NP: &str = "web-binding";
/// A ClusterSecurityIntentBinding `web-csib`: its per-namespace NimbusPolicy, and its
/// ClusterNimbusPolicy (named after it).
pub const CSIB: &str = "web-csib";
pub const CSIB_NP: &str = "nimbus-ctlr-gen-web-csib";
pub const CWNP: &str = "web-csib";
pub const UID: &str = "policy-uid-1";
pub const API_VERSION: &str = "intent.security.nimbus.com/v1alpha1";
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const KYVERNO_DESCRIPTION: &str = "policies.kyverno.io/description";
pub const K8TLS_NS: &str = "nimbus-k8tls-env";
/// The fixtures' policies carry their binding's opt-in to both sensitive intents.
pub const OPTED_IN: &str = "namespaceSandbox,assessTLS";

/// A rule as the operator compiles it from a SecurityIntent.
pub fn rule(id: &str, action: &str, description: Option<&str>, params: Value) -> Value {
    let mut rule = json!({"id": id, "rule": {"action": action}});
    if let Some(d) = description {
        rule["description"] = d.into();
    }
    if !params.is_null() {
        rule["rule"]["params"] = params;
    }
    rule
}

pub fn block(id: &str, description: &str) -> Value {
    rule(id, "Block", Some(description), Value::Null)
}

/// A namespaceSandbox rule.
pub fn sandbox_rule(params: Value) -> Value {
    rule("namespaceSandbox", "Block", Some("Sandbox"), params)
}

/// A virtualPatch rule for the one CVE of the fixture database.
pub fn vp_rule() -> Value {
    rule(
        "virtualPatch",
        "Block",
        Some("Patch CVEs"),
        json!({"cveList": ["CVE-2024-4439"]}),
    )
}

pub fn labels() -> Value {
    json!({"app": "web", "tier": "front"})
}

pub fn selector() -> Value {
    json!({"matchLabels": labels()})
}

pub fn all_namespaces() -> Value {
    json!({"matchNames": ["*"]})
}

/// The NimbusPolicy of SecurityIntentBinding `web-binding` in `shop`. Its own labels must not
/// reach the generated objects.
pub fn sib_np(selector: Value, rules: Vec<Value>) -> NimbusPolicy {
    serde_json::from_value(json!({
        "apiVersion": API_VERSION,
        "kind": "NimbusPolicy",
        "metadata": {
            "name": SIB_NP,
            "namespace": NS,
            "labels": {"team": "a"},
            "annotations": {ALLOW_SENSITIVE_ANNOTATION: OPTED_IN},
            "ownerReferences": [{
                "apiVersion": API_VERSION, "kind": "SecurityIntentBinding", "name": SIB_NP,
                "uid": "sib-uid", "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {"selector": selector, "rules": rules},
    }))
    .unwrap()
}

/// The NimbusPolicy ClusterSecurityIntentBinding `web-csib` keeps in `shop`.
pub fn csib_np(selector: Value, rules: Vec<Value>) -> NimbusPolicy {
    serde_json::from_value(json!({
        "apiVersion": API_VERSION,
        "kind": "NimbusPolicy",
        "metadata": {
            "name": CSIB_NP,
            "namespace": NS,
            "labels": {"team": "a"},
            "annotations": {ALLOW_SENSITIVE_ANNOTATION: OPTED_IN},
            "ownerReferences": [{
                "apiVersion": API_VERSION, "kind": "ClusterSecurityIntentBinding", "name": CSIB,
                "uid": "csib-uid", "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {"selector": selector, "rules": rules},
    }))
    .unwrap()
}

/// ClusterNimbusPolicy `web-csib` with the given namespace and workload selectors.
pub fn cwnp(
    ns_selector: Value,
    workload_selector: Value,
    rules: Vec<Value>,
) -> ClusterNimbusPolicy {
    let mut spec = json!({"nodeSelector": {}, "nsSelector": ns_selector, "rules": rules});
    if !workload_selector.is_null() {
        spec["workloadSelector"] = workload_selector;
    }
    serde_json::from_value(json!({
        "apiVersion": API_VERSION,
        "kind": "ClusterNimbusPolicy",
        "metadata": {
            "name": CWNP,
            "labels": {"team": "a"},
            "annotations": {ALLOW_SENSITIVE_ANNOTATION: OPTED_IN},
            "ownerReferences": [{
                "apiVersion": API_VERSION, "kind": "ClusterSecurityIntentBinding", "name": CSIB,
                "uid": "csib-uid", "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
    }))
    .unwrap()
}

/// The virtual-patch database every test of the workspace uses (Nimbus's vp.json format).
pub const VP_DATABASE: &str = include_str!("../fixtures/virtual-patch-db.json");

/// An environment with [`VP_DATABASE`] as ConfigMap `nimbus/vp-db`.
pub fn vp_env() -> Environment {
    let data = BTreeMap::from([(
        virtual_patch::DATABASE_KEY.to_owned(),
        VP_DATABASE.to_owned(),
    )]);
    Environment {
        virtual_patches: virtual_patch::from_config_map("nimbus/vp-db", Some(&data)),
        ..Environment::default()
    }
}

pub fn engines(enabled: &[Engine], installed: &[Engine]) -> EngineSet {
    EngineSet {
        enabled: enabled.iter().copied().collect(),
        installed: installed.iter().copied().collect(),
        ..EngineSet::default()
    }
}

pub fn all_but(engine: Engine) -> Vec<Engine> {
    Engine::ALL.into_iter().filter(|e| *e != engine).collect()
}

// ---------------------------------------------------------------------------------------------
// Running the translators, and what they generated
// ---------------------------------------------------------------------------------------------

pub fn run_np_with(np: &NimbusPolicy, env: &Environment, engines: &EngineSet) -> Translation {
    translate(&PolicyInput::namespaced(np, UID), env, engines)
}

pub fn run_np(np: &NimbusPolicy) -> Translation {
    run_np_with(np, &Environment::default(), &EngineSet::all())
}

pub fn run_cwnp_with(cwnp: &ClusterNimbusPolicy, env: &Environment) -> Translation {
    run_cwnp_with_engines(cwnp, env, &EngineSet::all())
}

pub fn run_cwnp_with_engines(
    cwnp: &ClusterNimbusPolicy,
    env: &Environment,
    engines: &EngineSet,
) -> Translation {
    translate(&PolicyInput::cluster(cwnp, UID), env, engines)
}

pub fn run_cwnp(cwnp: &ClusterNimbusPolicy) -> Translation {
    run_cwnp_with(cwnp, &Environment::default())
}

fn json_of(g: &Generated) -> Value {
    serde_json::to_value(&g.object).unwrap()
}

/// The objects one engine generated, as JSON, in order.
pub fn of(t: &Translation, engine: Engine) -> Vec<Value> {
    t.objects
        .iter()
        .filter(|g| g.engine == engine)
        .map(json_of)
        .collect()
}

pub fn all(t: &Translation) -> Vec<Value> {
    t.objects.iter().map(json_of).collect()
}

pub fn entries(t: &Translation) -> Vec<String> {
    t.objects.iter().map(Generated::entry).collect()
}

/// The `metadata.name`s of `objects`.
pub fn names(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[track_caller]
pub fn no_problems(t: &Translation) {
    no_problems_in("", t);
}

/// [`no_problems`] for one case of a table-driven test: the failure names `case`.
#[track_caller]
pub fn no_problems_in(case: &str, t: &Translation) {
    assert_eq!(t.problems, vec![], "{}unexpected problems", prefix(case));
}

/// `case: `, or nothing outside a table-driven test.
fn prefix(case: &str) -> String {
    if case.is_empty() {
        String::new()
    } else {
        format!("{case}: ")
    }
}

/// Where two JSON values differ, as `path: got != want` lines.
fn diff(path: &str, got: &Value, want: &Value, out: &mut Vec<String>) {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            let keys: BTreeSet<&String> = g.keys().chain(w.keys()).collect();
            for k in keys {
                let (gv, wv) = (g.get(k), w.get(k));
                let p = format!("{path}/{k}");
                match (gv, wv) {
                    (Some(gv), Some(wv)) => diff(&p, gv, wv, out),
                    (Some(gv), None) => out.push(format!("{p}: unexpected {gv}")),
                    (None, Some(wv)) => out.push(format!("{p}: missing, want {wv}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(g), Value::Array(w)) if g.len() == w.len() => {
            for (i, (gv, wv)) in g.iter().zip(w).enumerate() {
                diff(&format!("{path}/{i}"), gv, wv, out);
            }
        }
        _ if got != want => out.push(format!("{path}: got {got}, want {want}")),
        _ => {}
    }
}

/// Compares element by element first, so a failure points at the object and the fields that
/// differ.
#[track_caller]
pub fn assert_objects(got: &[Value], want: &[Value]) {
    assert_objects_in("", got, want);
}

/// [`assert_objects`] for one case of a table-driven test: the failure names `case`.
#[track_caller]
pub fn assert_objects_in(case: &str, got: &[Value], want: &[Value]) {
    let case = prefix(case);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let mut differences = Vec::new();
        diff("", g, w, &mut differences);
        assert!(
            differences.is_empty(),
            "{case}object #{i} ({}) differs:\n  {}\nwhole object: {}",
            g["metadata"]["name"],
            differences.join("\n  "),
            serde_json::to_string_pretty(g).unwrap(),
        );
    }
    let names = |v: &[Value]| -> Vec<String> {
        v.iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap_or("?").to_owned())
            .collect()
    };
    assert_eq!(
        got.len(),
        want.len(),
        "{case}object count differs: got {:?}, want {:?}",
        names(got),
        names(want)
    );
}

// ---------------------------------------------------------------------------------------------
// Metadata of expected objects, as Nimbus writes it (plus the deliberate differences)
// ---------------------------------------------------------------------------------------------

pub fn owner(kind: &str, name: &str) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": kind, "name": name, "uid": UID,
        "controller": true, "blockOwnerDeletion": true,
    })
}

pub fn np_owner(name: &str) -> Value {
    owner("NimbusPolicy", name)
}

pub fn cwnp_owner() -> Value {
    owner("ClusterNimbusPolicy", CWNP)
}

/// Metadata of a generated object: name, namespace, the managed-by annotation (and Kyverno's
/// description), the managed-by label (difference 1) and the controller reference.
pub fn meta(
    name: &str,
    namespace: Option<&str>,
    engine: &str,
    description: Option<&str>,
    owner: Value,
) -> Value {
    let manager = format!("nimbus-{engine}");
    let mut annotations = json!({ MANAGED_BY: manager });
    if let Some(d) = description {
        annotations[KYVERNO_DESCRIPTION] = d.into();
    }
    let mut meta = json!({
        "name": name,
        "labels": { MANAGED_BY: manager },
        "annotations": annotations,
        "ownerReferences": [owner],
    });
    if let Some(ns) = namespace {
        meta["namespace"] = ns.into();
    }
    meta
}
