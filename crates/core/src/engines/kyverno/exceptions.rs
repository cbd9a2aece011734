//! SecurityIntentExceptions in force, as Kyverno honours them: a `PolicyException` per
//! exception and rule, in the excepted workloads' namespace, naming the policies (and for the
//! legacy kinds the rule) the workloads are let out of. Kyverno must run with
//! `--enablePolicyException` and accept exceptions there (`--exceptionNamespace`).
//!
//! Kyverno does not drop an expired exception from its background scans (kyverno#17473): the
//! operator deletes each at its exception's `expiresAt`. The CEL kind carries `expiresAt` too,
//! so that Kyverno's admission stops honouring it then even while the operator is down.

use crate::engines::{
    Engine, KYVERNO_CEL_POLICY_EXCEPTION, KYVERNO_POLICY_EXCEPTION, NativeKind, PolicyInput, Rule,
    excepted_cel, metadata, native_name, object, selector_cel, selector_json,
};
use crate::exceptions::Excepted;
use crate::names::MAX_NAME_LEN;
use kube::ResourceExt;
use kube::core::DynamicObject;
use serde_json::{Value, json};

/// The annotation carrying the SecurityIntentException a PolicyException stands for.
pub(super) const EXCEPTION: &str = "exceptions.security.nimbus.com/exception";

/// Legacy PolicyExceptions letting `excepted`'s workloads out of `rule_name` of `excepting`
/// (a `Policy` or `ClusterPolicy` just built), for the `kinds` that rule matches.
pub(super) fn legacy(
    policy: &PolicyInput,
    rule: &Rule,
    excepted: &[&Excepted],
    excepting: &DynamicObject,
    rule_name: &str,
    kinds: &[&str],
) -> Vec<(&'static NativeKind, DynamicObject)> {
    let policy_name = match excepting.namespace() {
        Some(ns) => format!("{ns}/{}", excepting.name_any()),
        None => excepting.name_any(),
    };
    excepted
        .iter()
        .map(|e| {
            let mut resources = json!({"kinds": kinds, "namespaces": [e.namespace]});
            if selector_cel(&e.selector).is_some() {
                resources["selector"] = selector_json(&e.selector);
            }
            let spec = json!({
                "background": true,
                "exceptions": [{"policyName": policy_name, "ruleNames": [rule_name]}],
                "match": {"any": [{"resources": resources}]},
            });
            exception(policy, rule, e, &KYVERNO_POLICY_EXCEPTION, spec)
        })
        .collect()
}

/// CEL PolicyExceptions letting `excepted`'s workloads out of the CEL policies `excepting`.
pub(super) fn cel(
    policy: &PolicyInput,
    rule: &Rule,
    excepted: &[&Excepted],
    excepting: &[&DynamicObject],
) -> Vec<(&'static NativeKind, DynamicObject)> {
    let refs: Vec<Value> = excepting
        .iter()
        .map(|p| {
            let kind = p.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
            json!({"kind": kind, "name": p.name_any()})
        })
        .collect();
    excepted
        .iter()
        .map(|e| {
            let expression = excepted_cel(&[e]).unwrap_or_default();
            let spec = json!({
                "policyRefs": refs,
                "matchConditions": [{"name": "excepted-workloads", "expression": expression}],
                "expiresAt": e.expires_at.to_string(),
            });
            exception(policy, rule, e, &KYVERNO_CEL_POLICY_EXCEPTION, spec)
        })
        .collect()
}

fn exception(
    policy: &PolicyInput,
    rule: &Rule,
    e: &Excepted,
    kind: &'static NativeKind,
    spec: Value,
) -> (&'static NativeKind, DynamicObject) {
    let name = native_name(policy, &format!("{}-{}", rule.key, e.key()), MAX_NAME_LEN);
    let meta = metadata(
        policy,
        Engine::Kyverno,
        name,
        Some(e.namespace.clone()),
        &[(EXCEPTION, &e.describe())],
    );
    object(kind, meta, json!({ "spec": spec }))
}
