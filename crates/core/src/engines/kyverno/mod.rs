//! Kyverno engine: escapeToHost (Pod Security Standards) and cocoWorkload (runtime class) as a
//! `Policy` per NimbusPolicy of a namespaced binding, or a `ClusterPolicy` per
//! ClusterNimbusPolicy. virtualPatch lives in its own module, the choice of Kyverno API in
//! `api`, and the legacy policies both write in `legacy`.
//!
//! Where the cluster serves Kyverno's CEL policy kinds (`policies.kyverno.io/v1`), all three
//! are written in those instead ([`KyvernoApi::Cel`]): Kyverno 1.17 deprecated `Policy` and
//! `ClusterPolicy`, 1.20 refuses to create them and 1.21 removes them. virtualPatch's
//! generators are then `NamespacedGeneratingPolicy`s, an optional kind of the engine: where
//! Kyverno serves the other CEL kinds but not that one, virtualPatch is reported unenforced
//! (`EngineNotInstalled`) rather than the other intents left to the legacy kinds.
//!
//! Bodies follow Nimbus's adapter, including the empty rule sections its Go types always
//! serialized, but one: a mutate or generate rule carries no `validate: {}`. Kyverno's CRD
//! defaults that to `{allowExistingViolations: true}`, and Kyverno (1.19.1, run by the efficacy
//! tests) then refuses the policy: "only one operation (mutate,validate,generate,verifyImages) is
//! allowed per rule". Two more of Nimbus's bugs are fixed: the workload selector is matched as a
//! whole (Nimbus made one match entry per label, OR-ing them), and parameters come from the rule
//! being translated (Nimbus read the first rule's).

mod api;
mod cel_policy;
mod exceptions;
mod legacy;
pub mod virtual_patch;

pub use api::{KyvernoApi, KyvernoKinds};
use cel_policy::cel_policy;
use legacy::{Extra, build, failure_action};

use super::Engine;
use super::pss::{self, Level};
use super::{
    AuditForm, BINDING_OR_CLUSTER, Enforces, EngineSpec, Environment, Fact,
    KYVERNO_CEL_POLICY_EXCEPTION, KYVERNO_CLUSTER_POLICY, KYVERNO_MUTATING_POLICY,
    KYVERNO_NAMESPACED_GENERATING_POLICY, KYVERNO_NAMESPACED_MUTATING_POLICY,
    KYVERNO_NAMESPACED_VALIDATING_POLICY, KYVERNO_POLICY, KYVERNO_POLICY_EXCEPTION,
    KYVERNO_VALIDATING_POLICY, NAMESPACED, NativeKind, Output, PolicyInput, Rule, excepted,
    selector_cel, selector_json,
};
use crate::exceptions::Excepted;
use crate::intents::{id, param, param_value};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Resource;
use nimbus_api::PodSecurityControl as Control;
use nimbus_api::{GROUP, NimbusPolicy, VERSION, WORKLOAD_ALL_NAMESPACES};
use serde_json::{Value, json};
use std::collections::BTreeSet;

const POD: &str = "v1/Pod";
const DEPLOYMENT: &str = "apps/v1/Deployment";
/// Pods and the workload controllers whose pod template makes pods, which Kyverno's
/// `podSecurity` judges by that template. Named rather than left to Kyverno's autogen, which
/// skips every rule whose `match` has a `selector`: with one, a Deployment of privileged pods was
/// admitted, and only its pods refused.
const PODS_AND_CONTROLLERS: &[&str] = &[
    POD,
    DEPLOYMENT,
    "apps/v1/ReplicaSet",
    "apps/v1/StatefulSet",
    "apps/v1/DaemonSet",
    "v1/ReplicationController",
    "batch/v1/Job",
    "batch/v1/CronJob",
];

pub(super) const SPEC: EngineSpec = EngineSpec {
    engine: Engine::Kyverno,
    name: "kyverno",
    manager: "nimbus-kyverno",
    enforces: &[
        Enforces {
            intent: id::ESCAPE_TO_HOST,
            origins: BINDING_OR_CLUSTER,
            reads: &[],
            // Validate rules: `validationFailureAction: Audit` reports and admits.
            audit: AuditForm::Reports,
            effect: "Kyverno refuses pods, ephemeral containers added to them (kubectl debug), \
                     and workloads whose pod template, that break the Pod Security Standard \
                     (psaLevel) at admission",
        },
        Enforces {
            intent: id::COCO_WORKLOAD,
            origins: BINDING_OR_CLUSTER,
            reads: &[],
            // A mutate rule changes the pods it admits, audited or not.
            audit: AuditForm::None,
            effect: "Kyverno sets the confidential runtime class on the selected workloads (new and existing)",
        },
        Enforces {
            intent: id::VIRTUAL_PATCH,
            origins: NAMESPACED,
            reads: &[Fact::VirtualPatchDb],
            // Generate rules create the patches' policies, audited or not.
            audit: AuditForm::None,
            effect: "Kyverno generates the CVE database's patch policies for pods running a listed image",
        },
    ],
    kinds: &[
        &KYVERNO_POLICY,
        &KYVERNO_CLUSTER_POLICY,
        &KYVERNO_NAMESPACED_VALIDATING_POLICY,
        &KYVERNO_VALIDATING_POLICY,
        &KYVERNO_NAMESPACED_MUTATING_POLICY,
        &KYVERNO_MUTATING_POLICY,
        &KYVERNO_NAMESPACED_GENERATING_POLICY,
        &KYVERNO_POLICY_EXCEPTION,
        &KYVERNO_CEL_POLICY_EXCEPTION,
    ],
    confined_to_k8tls_namespace: false,
    translate,
    // Not in [`KyvernoApi::Cel`]'s kinds: they say whether Kyverno is installed. virtualPatch's
    // generating policies: its other intents do not need them. PolicyExceptions: written only
    // for exceptions; without them the engine still enforces, and says an exception is not
    // honoured.
    optional_kinds: &[
        &KYVERNO_NAMESPACED_GENERATING_POLICY,
        &KYVERNO_POLICY_EXCEPTION,
        &KYVERNO_CEL_POLICY_EXCEPTION,
    ],
    tenant_proof: None,
    honours_exceptions: &[id::ESCAPE_TO_HOST],
};

fn translate(policy: &PolicyInput, rule: &Rule, env: &Environment) -> Output {
    // virtualPatch writes in either API (see its module).
    if env.kyverno == KyvernoApi::Cel && rule.spec.id != id::VIRTUAL_PATCH {
        return translate_cel(policy, rule, env);
    }
    let cluster = policy.namespace.is_none();
    let policies = match (rule.spec.id.as_str(), cluster) {
        (id::ESCAPE_TO_HOST, _) => {
            let level = param_value(rule.spec, param::PSA_LEVEL).unwrap_or_default();
            let body = json!({
                "name": "pod-security-standard",
                "match": matching(policy, PODS_AND_CONTROLLERS),
                "exclude": excluding(policy, env),
                "mutate": {},
                "validate": {"podSecurity": {"level": level, "version": "latest"}},
                "generate": no_generate(),
            });
            let built = build(policy, rule, rule.key, vec![body], Extra::Background);
            // A level Kyverno knows and we do not (`privileged`) checks nothing to except.
            let checked = Level::parse(&level).map(pss::controls).unwrap_or_default();
            let excepting = exceptions::legacy(
                policy,
                rule,
                &excepted(policy, rule),
                &built.1,
                "pod-security-standard",
                PODS_AND_CONTROLLERS,
                &checked,
            );
            std::iter::once(built).chain(excepting).collect()
        }
        (id::COCO_WORKLOAD, false) => coco_workload_in_namespace(policy, rule),
        (id::COCO_WORKLOAD, true) => {
            // Deployments created or updated in the selected namespaces are patched at
            // admission; those that exist when the policy is written are patched in place by
            // Kyverno's background controller (each Deployment the rule matches targets itself).
            // Nimbus had only the second rule, with every Deployment of the namespace as its
            // target: new Deployments kept their runtime class (the efficacy tests, against
            // Kyverno 1.19.1, found it), and unselected Deployments beside a selected one lost it.
            let patch = runtime_class_patch(rule);
            let on_create = json!({
                "name": "add-runtime-class-to-pods",
                "match": matching(policy, &[DEPLOYMENT]),
                "exclude": excluding(policy, env),
                "mutate": {"patchStrategicMerge": patch},
                "generate": no_generate(),
            });
            let existing = json!({
                "name": "add-runtime-class-to-existing-pods",
                "match": matching(policy, &[DEPLOYMENT]),
                "exclude": excluding(policy, env),
                "mutate": {
                    "targets": [{
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "namespace": "{{ request.object.metadata.namespace }}",
                        "name": "{{ request.object.metadata.name }}",
                    }],
                    "patchStrategicMerge": patch,
                    // Per rule: Kyverno refuses it on the policy unless every rule has targets.
                    "mutateExistingOnPolicyUpdate": true,
                },
                "generate": no_generate(),
            });
            vec![build(
                policy,
                rule,
                rule.key,
                vec![on_create, existing],
                Extra::Nothing,
            )]
        }
        (id::VIRTUAL_PATCH, false) => return virtual_patch::translate(policy, rule, env),
        _ => return rule.untranslated(Engine::Kyverno),
    };
    Ok(policies.into())
}

/// confidentialWorkload in a namespace: Deployments that exist are mutated when the policy
/// changes, those created later at admission.
fn coco_workload_in_namespace(
    policy: &PolicyInput,
    rule: &Rule,
) -> Vec<(&'static NativeKind, kube::core::DynamicObject)> {
    let patch = runtime_class_patch(rule);
    // Existing Deployments are mutated when the policy changes; the NimbusPolicy is
    // the trigger resource (as in Nimbus). Targets are selected by labels, not by the
    // names of the Deployments that existed when the policy was written.
    let mut target = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
    if let Some(ns) = &policy.namespace {
        target["namespace"] = ns.clone().into();
    }
    if !selector_is_empty(policy) {
        target["selector"] = selector_json(&policy.selector);
    }
    let existing = json!({
        "name": "add runtime",
        "match": {
            "any": [{"resources": {
                "kinds": [format!("{GROUP}/{VERSION}/{}", NimbusPolicy::kind(&()))],
                "name": policy.name,
            }}],
            "resources": {},
        },
        "exclude": {"resources": {}},
        "mutate": {"targets": [target], "patchStrategicMerge": patch},
        "generate": no_generate(),
    });
    let on_create = json!({
        "name": "add runtime",
        "match": matching(policy, &[DEPLOYMENT]),
        "exclude": {"resources": {}},
        "mutate": {"patchStrategicMerge": patch},
        "generate": no_generate(),
    });
    // Nimbus names these after the policy only; a second coco rule gets `-2`, ...
    let n = rule.key.strip_prefix("cocoworkload").unwrap_or_default();
    vec![
        build(
            policy,
            rule,
            &format!("mutateexisting{n}"),
            vec![existing],
            Extra::MutateExisting,
        ),
        build(
            policy,
            rule,
            &format!("mutateoncreate{n}"),
            vec![on_create],
            Extra::Background,
        ),
    ]
}

fn selector_is_empty(policy: &PolicyInput) -> bool {
    policy
        .selector
        .match_labels
        .as_ref()
        .is_none_or(|l| l.is_empty())
        && policy
            .selector
            .match_expressions
            .as_ref()
            .is_none_or(|e| e.is_empty())
}

/// `match` on objects of `kinds` selected by the policy's workload selector (all of them when it
/// is empty), within the selected namespaces of a cluster policy.
fn matching(policy: &PolicyInput, kinds: &[&str]) -> Value {
    let mut resources = json!({ "kinds": kinds });
    let named = policy
        .namespaces
        .as_ref()
        .and_then(|n| n.match_names.as_ref())
        .filter(|names| !names.iter().any(|n| n == WORKLOAD_ALL_NAMESPACES));
    if let Some(names) = named {
        resources["namespaces"] = json!(names);
    }
    if !selector_is_empty(policy) {
        resources["selector"] = selector_json(&policy.selector);
    }
    json!({"any": [{"resources": resources}], "resources": {}})
}

/// `exclude`: nothing for a namespaced policy; the protected and the excluded namespaces for a
/// cluster policy (Nimbus excluded only kube-system: a cluster binding's admission rules then
/// also held pods of the operator's and k8tls's namespaces).
fn excluding(policy: &PolicyInput, env: &Environment) -> Value {
    let Some(namespaces) = &policy.namespaces else {
        return json!({"resources": {}});
    };
    let protected: Vec<&str> = env.protected_namespaces.iter().collect();
    let mut any = vec![json!({"resources": {"namespaces": protected}})];
    if let Some(excluded) = namespaces.exclude_names.as_ref().filter(|e| !e.is_empty()) {
        any.push(json!({"resources": {"namespaces": excluded}}));
    }
    json!({"any": any, "resources": {}})
}

fn no_generate() -> Value {
    json!({"clone": {}, "cloneList": {}})
}

fn runtime_class_patch(rule: &Rule) -> Value {
    let class = param_value(rule.spec, param::RUNTIME_CLASS).unwrap_or_default();
    json!({"spec": {"template": {"spec": {"runtimeClassName": class}}}})
}

/// escapeToHost and cocoWorkload in Kyverno's CEL kinds: one policy per rule, namespaced for a
/// NimbusPolicy, cluster-wide for a ClusterNimbusPolicy, selecting what the legacy policies
/// select and enforcing what they enforce.
fn translate_cel(policy: &PolicyInput, rule: &Rule, env: &Environment) -> Output {
    let policies = match rule.spec.id.as_str() {
        id::ESCAPE_TO_HOST => {
            let level = param_value(rule.spec, param::PSA_LEVEL).unwrap_or_default();
            let Some(level) = Level::parse(&level) else {
                return rule.untranslated(Engine::Kyverno);
            };
            let excepted = excepted(policy, rule);
            let validations = cel_validations(level, &excepted);
            let action = match failure_action(&rule.spec.rule.action) {
                "Enforce" => "Deny",
                _ => "Audit",
            };
            let spec = |resource: &str, background: bool| {
                let mut spec = json!({
                    "validationActions": [action],
                    "evaluation": {"background": {"enabled": background}},
                    "matchConstraints": constraints(policy, env, "", resource),
                    "validations": validations,
                });
                if let Some(condition) = selected(&policy.selector) {
                    spec["matchConditions"] = json!([condition]);
                }
                spec
            };
            let kinds = [
                &KYVERNO_NAMESPACED_VALIDATING_POLICY,
                &KYVERNO_VALIDATING_POLICY,
            ];
            // Two policies: Kyverno derives the pod controllers' checks only from a policy
            // that matches `pods` alone, and an ephemeral container is added through a
            // subresource of its own (`kubectl debug`), which `pods` does not match. The
            // background scans read whole pods, ephemeral containers included, so the second
            // policy judges admission only.
            let pods = cel_policy(policy, rule, rule.key, kinds, spec("pods", true));
            let ephemeral = cel_policy(
                policy,
                rule,
                &format!("{}-ephemeral", rule.key),
                kinds,
                spec("pods/ephemeralcontainers", false),
            );
            let excepting = exceptions::cel(
                policy,
                rule,
                &excepted,
                &[&pods.1, &ephemeral.1],
                &pss::controls(level),
            );
            [pods, ephemeral].into_iter().chain(excepting).collect()
        }
        id::COCO_WORKLOAD => {
            let class = param_value(rule.spec, param::RUNTIME_CLASS).unwrap_or_default();
            let class = serde_json::to_string(&class).unwrap_or_default();
            let mut constraints = constraints(policy, env, "apps", "deployments");
            if !selector_is_empty(policy) {
                constraints["objectSelector"] = selector_json(&policy.selector);
            }
            let patch = json!([{
                "patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": format!(
                    "Object{{spec: Object.spec{{template: Object.spec.template{{spec: \
                     Object.spec.template.spec{{runtimeClassName: {class}}}}}}}}}"
                )},
            }]);
            // Two policies, as Nimbus's legacy pair: Kyverno mutates at admission only what a
            // policy without mutateExisting matches, and mutates existing Deployments (its
            // background controller, once the policy is written) only from one with it, whose
            // targets are `targetMatchConstraints` (it ignores `matchConditions`, so Deployments
            // are selected by their own labels, as the legacy policies select them).
            let on_admission = json!({
                "evaluation": {"background": {"enabled": false}},
                "matchConstraints": constraints,
                "mutations": patch,
            });
            let existing = json!({
                "evaluation": {
                    "admission": {"enabled": false},
                    "background": {"enabled": true},
                    "mutateExisting": {"enabled": true},
                },
                "matchConstraints": constraints,
                "targetMatchConstraints": constraints,
                "mutations": patch,
            });
            let kinds = [
                &KYVERNO_NAMESPACED_MUTATING_POLICY,
                &KYVERNO_MUTATING_POLICY,
            ];
            vec![
                cel_policy(policy, rule, rule.key, kinds, on_admission),
                cel_policy(
                    policy,
                    rule,
                    &format!("{}-existing", rule.key),
                    kinds,
                    existing,
                ),
            ]
        }
        _ => return rule.untranslated(Engine::Kyverno),
    };
    Ok(policies.into())
}

/// escapeToHost's validations at `level`. The controls an exception in force (`excepted`) lets
/// its workloads out of pass what a PolicyException names them for; the others read nothing of
/// exceptions, so the policy is as before while none names a control.
fn cel_validations(level: Level, excepted: &[&Excepted]) -> Vec<Value> {
    let named: BTreeSet<Control> = excepted
        .iter()
        .flat_map(|e| e.controls.iter().flatten().copied())
        .collect();
    pss::checks(level, pss::OBJECT)
        .into_iter()
        .map(|c| {
            let allowed = c
                .control
                .filter(|c| named.contains(c))
                .map(exceptions::allowed);
            c.unless(allowed.as_deref())
        })
        .map(|c| json!({"expression": c.expression, "message": c.message}))
        .collect()
}

/// `matchConstraints` on creating and updating `resource` (of API `group`, v1): in the policy's
/// namespace, or in the selected namespaces of a cluster policy but the protected and the
/// excluded ones (by their `kubernetes.io/metadata.name` label).
fn constraints(policy: &PolicyInput, env: &Environment, group: &str, resource: &str) -> Value {
    let mut constraints = json!({"resourceRules": [{
        "apiGroups": [group],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": [resource],
    }]});
    let Some(namespaces) = &policy.namespaces else {
        return constraints;
    };
    const NAME: &str = "kubernetes.io/metadata.name";
    let mut excluded: Vec<&str> = env.protected_namespaces.iter().collect();
    excluded.extend(
        namespaces
            .exclude_names
            .iter()
            .flatten()
            .map(String::as_str),
    );
    let mut expressions = vec![json!({"key": NAME, "operator": "NotIn", "values": excluded})];
    let named = namespaces
        .match_names
        .as_ref()
        .filter(|names| !names.iter().any(|n| n == WORKLOAD_ALL_NAMESPACES));
    if let Some(names) = named {
        expressions.push(json!({"key": NAME, "operator": "In", "values": names}));
    }
    constraints["namespaceSelector"] = json!({ "matchExpressions": expressions });
    constraints
}

/// The `matchConditions` entry selecting by the workload selector, as CEL over the object's
/// labels (an `objectSelector` would keep Kyverno from deriving the pod controllers' checks):
/// none when it selects everything.
fn selected(selector: &LabelSelector) -> Option<Value> {
    selector_cel(selector)
        .map(|expression| json!({"name": "workload-selector", "expression": expression}))
}
