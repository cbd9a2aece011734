//! The `admission` engine: Kubernetes' own CEL admission policies, evaluated by the API server
//! itself (no webhook, nothing to install). A ValidatingAdmissionPolicy and its binding per
//! validating rule, a MutatingAdmissionPolicy and its binding per mutating one.
//!
//! Only ClusterNimbusPolicies (cluster bindings): the policies and their bindings are
//! cluster-scoped, and the garbage collector never deletes a cluster-scoped object whose owner
//! is namespaced (it treats the owner as unresolvable), whereas a ClusterNimbusPolicy owns them
//! and its deletion takes them (the rule k8tls follows).
//!
//! MutatingAdmissionPolicy is GA and served by default from Kubernetes 1.36; on older API
//! servers it is not served, the validating rules still are, and the mutating intents say so in
//! status (see [`super::EngineSpec::optional_kinds`]). A mutating policy has no form that reports
//! without acting, so its intents write nothing when audited.
//!
//! What CEL admission cannot do, and this engine therefore does not: change objects that
//! already exist (admission sees only writes), watch processes or files at run time
//! (KubeArmor's intents), or filter traffic (NetworkPolicy's).

use super::Engine;
use super::pss;
use super::{
    AuditForm, CLUSTER, Enforces, EngineSpec, Environment, MUTATING_ADMISSION_POLICY,
    MUTATING_ADMISSION_POLICY_BINDING, NativeKind, Output, PolicyInput, Rule,
    VALIDATING_ADMISSION_POLICY, VALIDATING_ADMISSION_POLICY_BINDING, excepted, excepted_cel,
    metadata, namespace_selector, native_name, object, selector_json,
};
use crate::exceptions::Excepted;
use crate::intents::{id, param, param_value};
use crate::names::MAX_NAME_LEN;
use kube::core::DynamicObject;
use serde_json::{Value, json};

pub(super) const SPEC: EngineSpec = EngineSpec {
    engine: Engine::Admission,
    name: "admission",
    manager: "nimbus-admission",
    enforces: &[
        Enforces {
            intent: id::ESCAPE_TO_HOST,
            origins: CLUSTER,
            reads: &[],
            // `validationActions: [Audit, Warn]`: the API server admits and warns.
            audit: AuditForm::Reports,
            effect: "the API server refuses pods, ephemeral containers added to them (kubectl \
                     debug), and Deployments, StatefulSets, DaemonSets, ReplicaSets, \
                     ReplicationControllers, Jobs and CronJobs whose pod template, that break \
                     the Pod Security Standard (psaLevel), one message per failed check; \
                     cluster bindings only",
        },
        Enforces {
            intent: id::COCO_WORKLOAD,
            origins: CLUSTER,
            reads: &[],
            // A mutation acts on what it admits, audited or not.
            audit: AuditForm::None,
            effect: "the API server sets the confidential runtime class on the selected \
                     Deployments' pod templates when they are created or updated (existing \
                     Deployments are not changed until then); needs MutatingAdmissionPolicy \
                     (Kubernetes 1.36); cluster bindings only",
        },
        Enforces {
            intent: id::UNAUTHORIZED_SA_TOKEN_ACCESS,
            origins: CLUSTER,
            reads: &[],
            audit: AuditForm::None,
            effect: "the API server sets automountServiceAccountToken: false on the selected \
                     pods it admits, so no token is mounted (a token volume the pod projects \
                     itself is not removed); needs MutatingAdmissionPolicy (Kubernetes 1.36); \
                     cluster bindings only",
        },
    ],
    kinds: &[
        &VALIDATING_ADMISSION_POLICY,
        &VALIDATING_ADMISSION_POLICY_BINDING,
        &MUTATING_ADMISSION_POLICY,
        &MUTATING_ADMISSION_POLICY_BINDING,
    ],
    confined_to_k8tls_namespace: false,
    translate,
    optional_kinds: &[
        &MUTATING_ADMISSION_POLICY,
        &MUTATING_ADMISSION_POLICY_BINDING,
    ],
    tenant_proof: None,
    honours_exceptions: &[id::ESCAPE_TO_HOST],
};

fn translate(policy: &PolicyInput, rule: &Rule, env: &Environment) -> Output {
    if policy.namespace.is_some() {
        return rule.untranslated(Engine::Admission);
    }
    let name = native_name(policy, rule.key, MAX_NAME_LEN);
    let matching = match_resources(policy, env);
    let objects = match rule.spec.id.as_str() {
        id::ESCAPE_TO_HOST => {
            let level = param_value(rule.spec, param::PSA_LEVEL).unwrap_or_default();
            let Some(checked) = pss::Level::parse(&level) else {
                return rule.untranslated(Engine::Admission);
            };
            // Exceptions of the whole intent leave the workloads unjudged (`not-excepted`
            // below); those of some controls pass them in those controls' validations only.
            let (whole, scoped): (Vec<&Excepted>, Vec<&Excepted>) = excepted(policy, rule)
                .into_iter()
                .partition(|e| e.controls.is_none());
            let validations: Vec<Value> = pss::checks(checked, POD)
                .into_iter()
                .map(|c| {
                    let letting_out: Vec<&Excepted> = (scoped.iter().copied())
                        .filter(|e| e.lets_out_of(c.control))
                        .collect();
                    c.unless(excepted_cel(&letting_out).as_deref())
                })
                .map(|c| {
                    json!({
                        "expression": c.expression,
                        "message": format!(
                            "escapeToHost ({level} Pod Security Standard): {}",
                            c.message
                        ),
                        // As PodSecurity admission refuses (the default is 422 Invalid).
                        "reason": "Forbidden",
                    })
                })
                .collect();
            let mut conditions =
                vec![json!({"name": "pod-spec-written", "expression": POD_SPEC_WRITTEN})];
            // The workloads exceptions in force let out are not judged; when one expires the
            // condition goes, and they are judged again.
            if let Some(excepted) = excepted_cel(&whole) {
                conditions
                    .push(json!({"name": "not-excepted", "expression": format!("!({excepted})")}));
            }
            let spec = json!({
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": workload_rules()},
                "matchConditions": conditions,
                "variables": pod_variables(),
                "validations": validations,
            });
            // `Audit` records each failure in the API server's audit log, `Warn` tells the
            // client: the workload is admitted.
            let actions = if rule.spec.rule.action == "Block" {
                json!(["Deny"])
            } else {
                json!(["Audit", "Warn"])
            };
            let binding = json!({
                "policyName": name,
                "validationActions": actions,
                "matchResources": matching,
            });
            vec![
                built(policy, &VALIDATING_ADMISSION_POLICY, &name, spec),
                built(policy, &VALIDATING_ADMISSION_POLICY_BINDING, &name, binding),
            ]
        }
        id::COCO_WORKLOAD => {
            let class = param_value(rule.spec, param::RUNTIME_CLASS).unwrap_or_default();
            let expression = format!(
                "Object{{spec: Object.spec{{template: Object.spec.template{{spec: \
                 Object.spec.template.spec{{runtimeClassName: {}}}}}}}}}",
                literal(&class)
            );
            let deployments = json!([{
                "apiGroups": ["apps"], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["deployments"],
            }]);
            mutating(policy, &name, deployments, &expression, matching)
        }
        // A mutation rather than a validation: whether a token is mounted also depends on the
        // pod's ServiceAccount (`automountServiceAccountToken` there), which a validating
        // policy cannot see, so it would refuse pods that get no token and is no more
        // truthful; setting the pod's field decides it whatever the ServiceAccount says.
        id::UNAUTHORIZED_SA_TOKEN_ACCESS => {
            let pods = json!([{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"],
            }]);
            let expression = "Object{spec: Object.spec{automountServiceAccountToken: false}}";
            mutating(policy, &name, pods, expression, matching)
        }
        _ => return rule.untranslated(Engine::Admission),
    };
    Ok(objects.into())
}

/// A MutatingAdmissionPolicy applying `expression` (an apply configuration) to `resources`, and
/// its binding.
fn mutating(
    policy: &PolicyInput,
    name: &str,
    resources: Value,
    expression: &str,
    matching: Value,
) -> Vec<(&'static NativeKind, DynamicObject)> {
    let spec = json!({
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": resources},
        "reinvocationPolicy": "IfNeeded",
        "mutations": [{
            "patchType": "ApplyConfiguration",
            "applyConfiguration": {"expression": expression},
        }],
    });
    let binding = json!({"policyName": name, "matchResources": matching});
    vec![
        built(policy, &MUTATING_ADMISSION_POLICY, name, spec),
        built(policy, &MUTATING_ADMISSION_POLICY_BINDING, name, binding),
    ]
}

fn built(
    policy: &PolicyInput,
    kind: &'static NativeKind,
    name: &str,
    spec: Value,
) -> (&'static NativeKind, DynamicObject) {
    let meta = metadata(policy, Engine::Admission, name.to_owned(), None, &[]);
    object(kind, meta, json!({ "spec": spec }))
}

/// A binding's `matchResources`: the policy's namespaces (all, or those named) except the
/// protected and the excluded ones, as the Kyverno ClusterPolicies exclude them, and the
/// workloads its selector selects (by their own labels, as Kyverno matches them).
fn match_resources(policy: &PolicyInput, env: &Environment) -> Value {
    json!({
        "namespaceSelector": namespace_selector(policy, env),
        "objectSelector": selector_json(&policy.selector),
    })
}

/// A CEL string literal.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Pods (and the ephemeral containers added to them, through their own subresource, as
/// `kubectl debug` does), and the workload controllers whose pod template makes pods.
fn workload_rules() -> Value {
    let ops = json!(["CREATE", "UPDATE"]);
    json!([
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ops,
         "resources": ["pods", "pods/ephemeralcontainers"]},
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ops,
         "resources": ["replicationcontrollers"]},
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ops,
         "resources": ["deployments", "replicasets", "statefulsets", "daemonsets"]},
        {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ops,
         "resources": ["jobs", "cronjobs"]},
    ])
}

/// Updates are judged only when they change what runs: an update that only scales, or
/// relabels, a workload admitted before the policy is not refused for what it already was. A
/// workload's update is judged when it changes the pod template; a pod's when PodSecurity
/// admission judges it (`isSignificantPodUpdate` in k8s.io/pod-security-admission): a
/// container added or its image changed, an ephemeral container added (through the
/// `pods/ephemeralcontainers` subresource) or its image changed.
const POD_SPEC_WRITTEN: &str = "request.operation != 'UPDATE' || (\
     object.kind == 'Pod' ? \
     object.spec.containers.map(c, c.?image.orValue('')) != \
     oldObject.spec.containers.map(c, c.?image.orValue('')) || \
     object.spec.?initContainers.orValue([]).map(c, c.?image.orValue('')) != \
     oldObject.spec.?initContainers.orValue([]).map(c, c.?image.orValue('')) || \
     object.spec.?ephemeralContainers.orValue([]).exists(c, \
     !oldObject.spec.?ephemeralContainers.orValue([]).exists(o, \
     o.name == c.name && o.?image.orValue('') == c.?image.orValue(''))) : \
     object.kind == 'CronJob' ? \
     object.spec.jobTemplate != oldObject.spec.jobTemplate : \
     object.spec.template != oldObject.spec.template)";

/// The pod spec and its metadata's annotations, whether the object is a pod or a workload
/// controller: where the Pod Security checks look ([`POD`]).
fn pod_variables() -> Value {
    json!([
        {"name": "template", "expression":
            "object.kind == 'Pod' ? object : object.kind == 'CronJob' ? \
             object.spec.jobTemplate.spec.template : object.spec.template"},
        {"name": "spec", "expression": "variables.template.spec"},
        {"name": "annotations", "expression":
            "variables.template.?metadata.?annotations.orValue({})"},
    ])
}

/// The pod the Pod Security checks read, from [`pod_variables`].
const POD: pss::Pod<'static> = pss::Pod {
    spec: "variables.spec",
    annotations: "variables.annotations",
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::{EngineSet, Generated, Preference, translate};
    use crate::intents::Origin;
    use crate::namespaces::ProtectedNamespaces;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use nimbus_api::{NamespaceSelector, NimbusRule, condition};
    use std::collections::{BTreeMap, BTreeSet};

    fn rule(id: &str, action: &str, params: &[(&str, &str)]) -> NimbusRule {
        NimbusRule {
            id: id.to_owned(),
            type_: None,
            description: None,
            rule: nimbus_api::Rule {
                action: action.to_owned(),
                params: (!params.is_empty()).then(|| {
                    params
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), vec![(*v).to_owned()]))
                        .collect()
                }),
            },
        }
    }

    fn cluster_policy(rules: &[NimbusRule]) -> PolicyInput<'_> {
        PolicyInput {
            origin: Origin::Cluster,
            name: "web".to_owned(),
            namespace: None,
            labels: BTreeMap::new(),
            owner: crate::objects::controller_reference::<nimbus_api::ClusterNimbusPolicy>(
                "web", "uid-1",
            ),
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                ..LabelSelector::default()
            },
            namespaces: Some(NamespaceSelector {
                match_names: Some(vec!["shop".into()]),
                exclude_names: Some(vec!["legacy".into()]),
            }),
            rules,
            allowed_sensitive: BTreeSet::new(),
            binding: None,
            exceptions: Vec::new(),
        }
    }

    /// Every engine installed, the admission engine preferred.
    fn admission_first() -> EngineSet {
        EngineSet {
            preference: Preference::new(&[Engine::Admission]).unwrap(),
            ..EngineSet::all()
        }
    }

    fn env() -> Environment {
        Environment {
            protected_namespaces: ProtectedNamespaces::new(["kube-system", "nimbus"]),
            ..Environment::default()
        }
    }

    fn admission_objects(t: &crate::engines::Translation) -> Vec<(&str, String)> {
        t.objects
            .iter()
            .filter(|g: &&Generated| g.engine == Engine::Admission)
            .map(|g| {
                (
                    g.kind.kind,
                    g.object.metadata.name.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn each_intent_translates_to_its_policy_and_binding() {
        // (intent, action, params, the kinds written)
        type Row<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
        let table: &[Row] = &[
            (
                "escapeToHost",
                "Block",
                &[],
                &[
                    "ValidatingAdmissionPolicy",
                    "ValidatingAdmissionPolicyBinding",
                ],
            ),
            (
                "escapeToHost",
                "Audit",
                &[("psaLevel", "restricted")],
                &[
                    "ValidatingAdmissionPolicy",
                    "ValidatingAdmissionPolicyBinding",
                ],
            ),
            (
                "cocoWorkload",
                "Block",
                &[],
                &["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"],
            ),
            // A mutation cannot only report: nothing is written for Audit.
            ("cocoWorkload", "Audit", &[], &[]),
            (
                "unAuthorizedSaTokenAccess",
                "Block",
                &[],
                &["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"],
            ),
            ("unAuthorizedSaTokenAccess", "Audit", &[], &[]),
        ];
        for (id, action, params, kinds) in table {
            let rules = [rule(id, action, params)];
            let t = translate(&cluster_policy(&rules), &env(), &admission_first());
            let got: Vec<&str> = admission_objects(&t).iter().map(|(k, _)| *k).collect();
            assert_eq!(got, *kinds, "{id} {action}");
            let name = format!("web-{}", id.to_lowercase());
            assert!(admission_objects(&t).iter().all(|(_, n)| *n == name));
            for g in &t.objects {
                let meta = &g.object.metadata;
                assert_eq!(
                    meta.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
                    "nimbus-admission"
                );
                let owner = &meta.owner_references.as_ref().unwrap()[0];
                assert_eq!(
                    (owner.kind.as_str(), owner.controller),
                    ("ClusterNimbusPolicy", Some(true))
                );
            }
            let no_audit_form = t
                .problems
                .iter()
                .any(|p| p.reason == condition::REASON_NO_AUDIT_FORM);
            assert_eq!(no_audit_form, kinds.is_empty(), "{id} {action}");
        }
    }

    fn binding_spec(t: &crate::engines::Translation, kind: &str) -> Value {
        t.objects
            .iter()
            .find(|g| g.kind.kind == kind)
            .map(|g| g.object.data["spec"].clone())
            .unwrap_or_else(|| panic!("no {kind}"))
    }

    #[test]
    fn actions_map_onto_validation_actions_and_bindings_select_as_the_policy_does() {
        for (action, want) in [
            ("Block", json!(["Deny"])),
            ("Audit", json!(["Audit", "Warn"])),
        ] {
            let rules = [rule("escapeToHost", action, &[])];
            let t = translate(&cluster_policy(&rules), &env(), &admission_first());
            let binding = binding_spec(&t, "ValidatingAdmissionPolicyBinding");
            assert_eq!(binding["validationActions"], want, "{action}");
            assert_eq!(binding["policyName"], "web-escapetohost");
            assert_eq!(
                binding["matchResources"]["namespaceSelector"],
                json!({"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                     "values": ["kube-system", "legacy", "nimbus"]},
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["shop"]},
                ]})
            );
            assert_eq!(
                binding["matchResources"]["objectSelector"],
                json!({"matchLabels": {"app": "web"}})
            );
        }
        // Every namespace: only the exclusions.
        let rules = [rule(
            "cocoWorkload",
            "Block",
            &[("runtimeClass", "kata-qemu")],
        )];
        let mut policy = cluster_policy(&rules);
        policy.namespaces = Some(NamespaceSelector {
            match_names: Some(vec!["*".into()]),
            exclude_names: None,
        });
        let t = translate(&policy, &env(), &admission_first());
        let binding = binding_spec(&t, "MutatingAdmissionPolicyBinding");
        assert_eq!(
            binding["matchResources"]["namespaceSelector"],
            json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                "operator": "NotIn", "values": ["kube-system", "nimbus"]}]})
        );
        let spec = binding_spec(&t, "MutatingAdmissionPolicy");
        assert!(
            spec["mutations"][0]["applyConfiguration"]["expression"]
                .as_str()
                .unwrap()
                .contains("runtimeClassName: 'kata-qemu'")
        );
    }

    #[test]
    fn restricted_runs_the_baseline_checks_and_its_own() {
        let count = |level: &str| {
            let rules = [rule("escapeToHost", "Block", &[("psaLevel", level)])];
            let t = translate(&cluster_policy(&rules), &env(), &admission_first());
            let spec = binding_spec(&t, "ValidatingAdmissionPolicy");
            let validations = spec["validations"].as_array().unwrap().clone();
            assert!(validations.iter().all(|v| {
                v["message"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("escapeToHost ({level} Pod Security Standard): "))
            }));
            validations.len()
        };
        let checks = |level| pss::checks(level, POD).len();
        assert_eq!(count("baseline"), checks(pss::Level::Baseline));
        assert_eq!(count("restricted"), checks(pss::Level::Restricted));
        assert!(checks(pss::Level::Restricted) > checks(pss::Level::Baseline));
    }

    #[test]
    fn namespaced_policies_are_left_to_other_engines() {
        let rules = [rule("escapeToHost", "Block", &[])];
        let mut policy = cluster_policy(&rules);
        policy.origin = Origin::Binding;
        policy.namespace = Some("shop".into());
        let t = translate(&policy, &env(), &admission_first());
        assert!(admission_objects(&t).is_empty());
        assert!(!Engine::Admission.handles("escapeToHost", Origin::Binding));
        assert!(!Engine::Admission.handles("escapeToHost", Origin::ClusterBindingNamespace));
    }

    #[test]
    fn the_preferred_engine_writes_and_the_other_stands_by() {
        let rules = [
            rule("escapeToHost", "Block", &[]),
            rule("cocoWorkload", "Block", &[]),
            rule("unAuthorizedSaTokenAccess", "Block", &[]),
        ];
        let policy = cluster_policy(&rules);
        let engines_of = |t: &crate::engines::Translation| -> BTreeSet<Engine> {
            t.objects.iter().map(|g| g.engine).collect()
        };
        // Default preference, Kyverno installed: Kyverno alone, as Nimbus.
        let t = translate(&policy, &env(), &EngineSet::all());
        assert_eq!(engines_of(&t), BTreeSet::from([Engine::Kyverno]));
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        // Kyverno not installed: the admission engine stands in, and the status says so.
        let mut no_kyverno = EngineSet::all();
        no_kyverno.installed.remove(&Engine::Kyverno);
        let t = translate(&policy, &env(), &no_kyverno);
        assert_eq!(engines_of(&t), BTreeSet::from([Engine::Admission]));
        assert!(t.problems.iter().all(|p| !p.blocking), "{:?}", t.problems);
        assert!(
            t.problems.iter().any(|p| p.message
                == "intent `escapeToHost` is enforced by admission in place of kyverno (not \
                    installed; engine preference kyverno,admission)"),
            "{:?}",
            t.problems
        );
        // Admission preferred: it writes, Kyverno stands by; no note, it is the first choice.
        let t = translate(&policy, &env(), &admission_first());
        assert_eq!(engines_of(&t), BTreeSet::from([Engine::Admission]));
        assert!(t.problems.is_empty(), "{:?}", t.problems);
    }

    #[test]
    fn mutating_intents_wait_for_a_served_mutating_admission_policy() {
        let rules = [
            rule("escapeToHost", "Block", &[]),
            rule("cocoWorkload", "Block", &[]),
        ];
        let mut engines = admission_first();
        engines.unserved = BTreeSet::from([
            &crate::engines::MUTATING_ADMISSION_POLICY,
            &crate::engines::MUTATING_ADMISSION_POLICY_BINDING,
        ]);
        let t = translate(&cluster_policy(&rules), &env(), &engines);
        let kinds: Vec<&str> = admission_objects(&t).iter().map(|(k, _)| *k).collect();
        assert_eq!(
            kinds,
            [
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding"
            ]
        );
        let problem = t
            .problems
            .iter()
            .find(|p| p.intent == "cocoWorkload")
            .expect("cocoWorkload reported");
        assert_eq!(problem.reason, condition::REASON_ENGINE_NOT_INSTALLED);
        assert!(problem.blocking);
        assert!(
            problem
                .message
                .contains("MutatingAdmissionPolicy, which the API server does not serve"),
            "{}",
            problem.message
        );
    }

    #[test]
    fn names_stay_within_limits() {
        let rules = [rule("escapeToHost", "Block", &[])];
        let mut policy = cluster_policy(&rules);
        policy.name = "x".repeat(260);
        let t = translate(&policy, &env(), &admission_first());
        for (_, name) in admission_objects(&t) {
            assert!(name.len() <= MAX_NAME_LEN, "{name}");
        }
        let names: BTreeSet<_> = admission_objects(&t).into_iter().map(|(_, n)| n).collect();
        assert_eq!(names.len(), 1, "the binding names its policy");
    }

    #[test]
    fn runtime_classes_are_quoted_as_cel_literals() {
        assert_eq!(literal("kata"), "'kata'");
        assert_eq!(literal("a'b\\"), "'a\\'b\\\\'");
    }
}
