//! SecurityIntentExceptions in force, as Kyverno honours them: a `PolicyException` per
//! exception and rule, in the excepted workloads' namespace, naming the policies (and for the
//! legacy kinds the rule) the workloads are let out of. Kyverno must run with
//! `--enablePolicyException` and accept exceptions there (`--exceptionNamespace`).
//!
//! An exception of some Pod Security controls (`podSecurityControls`) lets the workloads out of
//! only those: the legacy kind lists them as `podSecurity` exclusions, which Kyverno applies to
//! its `podSecurity` rule; the CEL kind carries their names as `allowedValues`, which the
//! validations of those controls read (`exceptions.allowedValues`), the others not.
//!
//! Kyverno does not drop an expired exception from its background scans (kyverno#17473): the
//! operator deletes each at its exception's `expiresAt`. The CEL kind carries `expiresAt` too,
//! but Kyverno 1.19.1 reads it only when it compiles a policy (`ListExceptions` in
//! `pkg/cel/engine/exception.go`), not per request: the deletion is what ends it at expiry; the
//! field keeps an expired exception out of the next compilation (a restart, a policy edit)
//! should the operator be down then.

use crate::engines::{
    Engine, KYVERNO_CEL_POLICY_EXCEPTION, KYVERNO_POLICY_EXCEPTION, NativeKind, PolicyInput, Rule,
    excepted_cel, metadata, native_name, object, selector_cel, selector_json,
};
use crate::exceptions::Excepted;
use crate::exceptions::workloads::{self, Reach};
use crate::names::MAX_NAME_LEN;
use kube::ResourceExt;
use kube::core::DynamicObject;
use nimbus_api::PodSecurityControl as Control;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The annotation carrying the SecurityIntentException a PolicyException stands for.
pub(super) const EXCEPTION: &str = "exceptions.security.nimbus.com/exception";

/// Legacy PolicyExceptions letting `excepted`'s workloads out of `rule_name` of `excepting`
/// (a `Policy` or `ClusterPolicy` just built), for the `kinds` that rule matches: out of the
/// whole rule, or of those of its controls (`checked`: the controls its level checks) an
/// exception names.
pub(super) fn legacy(
    policy: &PolicyInput,
    rule: &Rule,
    excepted: &[&Excepted],
    excepting: &DynamicObject,
    rule_name: &str,
    kinds: &[&str],
    checked: &BTreeSet<Control>,
) -> Vec<(&'static NativeKind, DynamicObject)> {
    let policy_name = match excepting.namespace() {
        Some(ns) => format!("{ns}/{}", excepting.name_any()),
        None => excepting.name_any(),
    };
    // A legacy PolicyException names resources, but not a pod by the workload that made it (its
    // `conditions` hold for the whole exception, and a pod's name is its ReplicaSet's plus a
    // suffix): one naming workloads is left out, so the policy still enforces on them, and the
    // translation says so rather than let out every workload with the same labels.
    excepted
        .iter()
        .filter(|e| workloads::honoured(Reach::Labels, e))
        .filter_map(|e| {
            let mut resources = json!({"kinds": kinds, "namespaces": [e.namespace]});
            if selector_cel(&e.selector).is_some() {
                resources["selector"] = selector_json(&e.selector);
            }
            let mut spec = json!({
                "background": true,
                "exceptions": [{"policyName": policy_name, "ruleNames": [rule_name]}],
                "match": {"any": [{"resources": resources}]},
            });
            if let Some(controls) = &e.controls {
                let exclusions = pod_security(controls & checked);
                // Controls the level does not check: nothing to let out of.
                if exclusions.is_empty() {
                    return None;
                }
                spec["podSecurity"] = exclusions.into();
            }
            Some(exception(policy, rule, e, &KYVERNO_POLICY_EXCEPTION, spec))
        })
        .collect()
}

/// Kyverno's `podSecurity` exclusions of `controls`, of every container and the pod. Kyverno
/// refuses a container-level control without `images` and a pod-level one with them; a control
/// of both levels excludes the pod's fields without `images`, and the containers' with them, so
/// it takes two entries.
fn pod_security(controls: BTreeSet<Control>) -> Vec<Value> {
    let every_container = json!(["*"]);
    controls
        .into_iter()
        .flat_map(|control| {
            let name = control.name();
            let pod = json!({"controlName": name});
            let containers = json!({"controlName": name, "images": every_container});
            match scope_of(control) {
                Scope::Pod => vec![pod],
                Scope::Containers => vec![containers],
                Scope::Both => vec![pod, containers],
            }
        })
        .collect()
}

/// Where a control's fields are, as Kyverno 1.19 classes them (`pkg/pss/utils/mapping.go`):
/// it validates `images` by it.
enum Scope {
    Pod,
    Containers,
    Both,
}

fn scope_of(control: Control) -> Scope {
    match control {
        Control::HostNamespaces
        | Control::HostPathVolumes
        | Control::Sysctls
        | Control::VolumeTypes => Scope::Pod,
        Control::Capabilities
        | Control::PrivilegedContainers
        | Control::HostPorts
        | Control::ProcMountType
        | Control::PrivilegeEscalation => Scope::Containers,
        Control::HostProcess
        | Control::SeLinux
        | Control::AppArmor
        | Control::Seccomp
        | Control::RunningAsNonRoot
        | Control::RunningAsNonRootUser => Scope::Both,
    }
}

/// What a CEL validation of `control` reads to let a workload out of it: whether a
/// PolicyException matching the workload names the control among its `allowedValues`.
pub(super) fn allowed(control: Control) -> String {
    format!("'{}' in exceptions.allowedValues", control.name())
}

/// CEL PolicyExceptions letting `excepted`'s workloads out of the CEL policies `excepting`:
/// wholly, or out of the validations of the controls (of `checked`, those the level checks) an
/// exception names, which Kyverno then evaluates with their names in `allowedValues`.
pub(super) fn cel(
    policy: &PolicyInput,
    rule: &Rule,
    excepted: &[&Excepted],
    excepting: &[&DynamicObject],
    checked: &BTreeSet<Control>,
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
        .filter_map(|e| {
            let expression = excepted_cel(&[e]).unwrap_or_default();
            let mut spec = json!({
                "policyRefs": refs,
                "matchConditions": [{"name": "excepted-workloads", "expression": expression}],
                "expiresAt": e.expires_at.to_string(),
            });
            if let Some(controls) = &e.controls {
                let names: Vec<&str> = (controls & checked)
                    .into_iter()
                    .map(Control::name)
                    .collect();
                // Kyverno takes an exception without `allowedValues` (or images) for a whole
                // one: one of controls the level does not check is not written at all.
                if names.is_empty() {
                    return None;
                }
                spec["allowedValues"] = json!(names);
            }
            Some(exception(
                policy,
                rule,
                e,
                &KYVERNO_CEL_POLICY_EXCEPTION,
                spec,
            ))
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
