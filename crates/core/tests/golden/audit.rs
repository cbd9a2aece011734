//! `action: Audit` never enforces. For every intent of the catalog, audited, in every kind of
//! policy that binds it, with every engine installed: no field of any generated object blocks,
//! mutates, generates or grants, and an engine with no form that reports without enforcing
//! writes nothing and says so.

use crate::builders::*;
use nimbus_core::catalog::{Engine, INTENTS};
use nimbus_core::engines::{AuditForm, EngineSet, Preference, Translation};
use serde_json::{Value, json};

/// Parameters an intent needs to generate anything.
fn params(id: &str) -> Value {
    match id {
        "virtualPatch" => json!({"cveList": ["CVE-2024-4439"]}),
        "namespaceSandbox" => json!({"group": ["team-a"]}),
        "assessTLS" => json!({"schedule": ["@daily"]}),
        _ => Value::Null,
    }
}

/// Every `action` anywhere in `value`.
fn actions(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, field) in map {
                match (key.as_str(), field) {
                    ("action", Value::String(a)) => out.push(a.clone()),
                    _ => actions(field, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| actions(i, out)),
        _ => {}
    }
}

/// Why `object` would enforce something, if it would.
fn enforces(object: &Value) -> Option<String> {
    let kind = object["kind"].as_str().unwrap_or_default();
    match kind {
        "KubeArmorPolicy" => {
            let mut found = Vec::new();
            actions(&object["spec"], &mut found);
            found
                .iter()
                .any(|a| a != "Audit")
                .then(|| format!("actions {found:?}"))
        }
        "Policy" | "ClusterPolicy" => {
            let spec = &object["spec"];
            if spec["validationFailureAction"] != "Audit" {
                return Some(format!(
                    "validationFailureAction {}",
                    spec["validationFailureAction"]
                ));
            }
            let rules = spec["rules"].as_array().cloned().unwrap_or_default();
            // (Nimbus's rules carry empty `mutate` and `generate` objects: they do nothing.)
            rules.iter().find_map(|r| {
                let acts = ["generate", "mutate", "verifyImages"]
                    .iter()
                    .any(|k| !is_empty(&r[*k]))
                    || r["validate"]
                        .get("failureAction")
                        .is_some_and(|a| a != "Audit");
                acts.then(|| format!("rule {}", r["name"]))
            })
        }
        // A scan reports what it finds; it blocks nothing.
        "CronJob" | "ConfigMap" => None,
        // A validating policy acts only through its bindings' actions.
        "ValidatingAdmissionPolicy" => None,
        "ValidatingAdmissionPolicyBinding" => {
            let actions = &object["spec"]["validationActions"];
            (actions
                .as_array()
                .is_none_or(|a| a.iter().any(|a| a == "Deny")))
            .then(|| format!("validationActions {actions}"))
        }
        other => Some(format!("a {other} enforces whatever it is called")),
    }
}

/// Whether `value` holds nothing but empty objects and lists.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.values().all(is_empty),
        Value::Array(items) => items.iter().all(is_empty),
        _ => false,
    }
}

fn audited(t: &Translation, case: &str, engine_has_no_audit_form: &[Engine]) {
    for g in &t.objects {
        let object = serde_json::to_value(&g.object).unwrap();
        if let Some(why) = enforces(&object) {
            panic!(
                "{case}: {} {} enforces under Audit: {why}\n{object:#}",
                object["kind"], object["metadata"]["name"]
            );
        }
        assert!(
            !engine_has_no_audit_form.contains(&g.engine),
            "{case}: {} has no audit form but wrote {}",
            g.engine,
            object["metadata"]["name"]
        );
    }
    if !engine_has_no_audit_form.is_empty() {
        assert!(
            t.problems.iter().any(|p| p.reason == "NoAuditForm"),
            "{case}: {engine_has_no_audit_form:?} wrote nothing and must say so: {:?}",
            t.problems
        );
    }
}

#[test]
fn no_audited_intent_enforces_in_any_engine() {
    let env = vp_env();
    let mut generated = 0;
    for intent in INTENTS {
        let rules = vec![rule(intent.id, "Audit", Some("audited"), params(intent.id))];
        // Engines active for this intent whose declaration has no audit form.
        let no_form: Vec<Engine> = Engine::ALL
            .into_iter()
            .filter(|e| {
                e.spec()
                    .enforces
                    .iter()
                    .any(|x| x.intent == intent.id && x.audit == AuditForm::None)
            })
            .collect();
        let cases = [
            (
                "namespaced",
                run_np_with(
                    &sib_np(selector(), rules.clone()),
                    &env,
                    &engines(&Engine::ALL, &Engine::ALL),
                ),
            ),
            (
                "cluster binding namespace",
                run_np_with(
                    &csib_np(selector(), rules.clone()),
                    &env,
                    &engines(&Engine::ALL, &Engine::ALL),
                ),
            ),
            (
                "cluster",
                run_cwnp_with(&cwnp(all_namespaces(), selector(), rules.clone()), &env),
            ),
            (
                "cluster (admission preferred)",
                run_cwnp_with_engines(
                    &cwnp(all_namespaces(), selector(), rules.clone()),
                    &env,
                    &admission_first(),
                ),
            ),
        ];
        for (kind, t) in &cases {
            let case = format!("{} in a {kind} policy", intent.id);
            let acting: Vec<Engine> = no_form
                .iter()
                .copied()
                .filter(|e| intent_acts(intent.id, *e, kind))
                .collect();
            audited(t, &case, &acting);
            generated += t.objects.len();
        }
    }
    // The check above means something only if audited intents do generate objects.
    assert!(generated >= 10, "only {generated} objects generated");
}

/// Every engine installed, the admission engine preferred to Kyverno.
fn admission_first() -> EngineSet {
    EngineSet {
        preference: Preference::new(&[Engine::Admission]).unwrap(),
        ..EngineSet::all()
    }
}

/// Whether `engine` acts on `intent` in a policy of this kind (the catalog's origins), and is
/// not standing by for another engine of its mechanism (the engine preference).
fn intent_acts(intent: &str, engine: Engine, kind: &str) -> bool {
    use nimbus_core::catalog::Origin;
    let origin = match kind {
        "namespaced" => Origin::Binding,
        "cluster binding namespace" => Origin::ClusterBindingNamespace,
        _ => Origin::Cluster,
    };
    let engines = if kind == "cluster (admission preferred)" {
        admission_first()
    } else {
        EngineSet::all()
    };
    nimbus_core::catalog::intent(intent).is_some_and(|i| i.handled_by(engine, origin))
        && !engines.preference.stands_by(engine, origin, &engines)
}

/// The same intents under `Block` do enforce: the checks above can tell.
#[test]
fn blocked_intents_do_enforce() {
    let t = run_np(&sib_np(
        selector(),
        vec![rule("dnsManipulation", "Block", None, Value::Null)],
    ));
    let enforcing: Vec<String> = t
        .objects
        .iter()
        .filter_map(|g| enforces(&serde_json::to_value(&g.object).unwrap()))
        .collect();
    assert_eq!(enforcing.len(), t.objects.len(), "{enforcing:?}");
    assert!(!t.objects.is_empty());
}
