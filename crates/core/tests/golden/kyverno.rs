//! Kyverno: escapeToHost's Pod Security policies and cocoWorkload's runtime-class mutations,
//! through namespaced and cluster bindings (virtualPatch is in `virtual_patch`).

use crate::builders::*;
use nimbus_core::catalog::Engine;
use nimbus_core::engines::pss::{self, Level};
use nimbus_core::engines::{self, EngineSet, Environment, KyvernoApi, KyvernoKinds, NativeKind};
use nimbus_core::namespaces::ProtectedNamespaces;
use serde_json::{Value, json};

fn no_generate() -> Value {
    json!({"clone": {}, "cloneList": {}})
}

/// A Kyverno `Policy` in `shop` owned by NimbusPolicy `np`.
pub fn kyverno_policy(np: &str, name: &str, description: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "kyverno.io/v1",
        "kind": "Policy",
        "metadata": meta(name, Some(NS), "kyverno", Some(description), np_owner(np)),
        "spec": spec,
    })
}

/// A Kyverno `ClusterPolicy` owned by the ClusterNimbusPolicy.
fn kyverno_cluster_policy(name: &str, description: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": meta(name, None, "kyverno", Some(description), cwnp_owner()),
        "spec": spec,
    })
}

/// `match` with one filter on `kind` (difference 2: the whole selector, ANDed).
pub fn kyverno_match(kinds: &[&str], namespaces: Option<Value>, selector: Option<Value>) -> Value {
    let mut resources = json!({"kinds": kinds});
    if let Some(ns) = namespaces {
        resources["namespaces"] = ns;
    }
    if let Some(s) = selector {
        resources["selector"] = s;
    }
    json!({"any": [{"resources": resources}], "resources": {}})
}

/// What escapeToHost's podSecurity rule matches: pods and every pod controller, named (Kyverno
/// generates no controller rules for a rule whose match has a selector).
const POD_SECURITY_KINDS: &[&str] = &[
    "v1/Pod",
    "apps/v1/Deployment",
    "apps/v1/ReplicaSet",
    "apps/v1/StatefulSet",
    "apps/v1/DaemonSet",
    "v1/ReplicationController",
    "batch/v1/Job",
    "batch/v1/CronJob",
];

/// Exclude of a cluster policy: the protected namespaces (by default kube-system and k8tls's;
/// Nimbus excluded only kube-system), then the excluded names.
fn cluster_exclude(exclude_names: Option<Value>) -> Value {
    let mut any = vec![json!({"resources": {"namespaces": ["kube-system", "nimbus-k8tls-env"]}})];
    if let Some(names) = exclude_names {
        any.push(json!({"resources": {"namespaces": names}}));
    }
    json!({"any": any, "resources": {}})
}

fn pod_security_rule(r#match: Value, exclude: Value, level: &str) -> Value {
    json!({
        "name": "pod-security-standard",
        "match": r#match,
        "exclude": exclude,
        "mutate": {},
        "validate": {"podSecurity": {"level": level, "version": "latest"}},
        "generate": no_generate(),
    })
}

pub fn runtime_patch(class: &str) -> Value {
    json!({"spec": {"template": {"spec": {"runtimeClassName": class}}}})
}

/// cocoWorkload's namespaced Kyverno policies, with difference 5: `<np>-mutateexisting` (always) then `<np>-mutateoncreate`.
pub fn coco_policies(
    np: &str,
    description: &str,
    vfa: &str,
    selector: Option<Value>,
    class: &str,
    suffix: &str,
) -> Vec<Value> {
    let mut target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": NS});
    if let Some(s) = &selector {
        target["selector"] = s.clone();
    }
    vec![
        kyverno_policy(
            np,
            &format!("{np}-mutateexisting{suffix}"),
            description,
            json!({
                "rules": [{
                    "name": "add runtime",
                    "match": {
                        "any": [{"resources": {
                            "kinds": ["intent.security.nimbus.com/v1alpha1/NimbusPolicy"],
                            "name": np,
                        }}],
                        "resources": {},
                    },
                    "exclude": {"resources": {}},
                    "mutate": {"targets": [target], "patchStrategicMerge": runtime_patch(class)},
                    "generate": no_generate(),
                }],
                "validationFailureAction": vfa,
                "background": true,
                "mutateExistingOnPolicyUpdate": true,
            }),
        ),
        kyverno_policy(
            np,
            &format!("{np}-mutateoncreate{suffix}"),
            description,
            json!({
                "rules": [{
                    "name": "add runtime",
                    "match": kyverno_match(&["apps/v1/Deployment"], None, selector),
                    "exclude": {"resources": {}},
                    "mutate": {"patchStrategicMerge": runtime_patch(class)},
                    "generate": no_generate(),
                }],
                "validationFailureAction": vfa,
                "background": true,
            }),
        ),
    ]
}

/// cocoWorkload's cluster Kyverno policy, with difference 4 (runtimeClass honoured).
fn cluster_coco_policy(
    description: &str,
    r#match: Value,
    exclude: Value,
    class: &str,
    vfa: &str,
) -> Value {
    kyverno_cluster_policy(
        &format!("{CWNP}-cocoworkload"),
        description,
        json!({
            "rules": [{
                "name": "add-runtime-class-to-pods",
                "match": r#match,
                "exclude": exclude,
                "mutate": {"patchStrategicMerge": runtime_patch(class)},
                "generate": no_generate(),
            }, {
                "name": "add-runtime-class-to-existing-pods",
                "match": r#match,
                "exclude": exclude,
                "mutate": {
                    "targets": [{
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "namespace": "{{ request.object.metadata.namespace }}",
                        "name": "{{ request.object.metadata.name }}",
                    }],
                    "patchStrategicMerge": runtime_patch(class),
                    "mutateExistingOnPolicyUpdate": true,
                },
                "generate": no_generate(),
            }],
            "validationFailureAction": vfa,
        }),
    )
}

fn cluster_escape(r#match: Value, exclude: Value) -> Value {
    kyverno_cluster_policy(
        "web-csib-escapetohost",
        "No breakouts",
        json!({
            "rules": [pod_security_rule(r#match, exclude, "baseline")],
            "validationFailureAction": "Enforce",
            "background": true,
        }),
    )
}

// ---------------------------------------------------------------------------------------------
// escapeToHost
// ---------------------------------------------------------------------------------------------

/// A namespaced binding's escapeToHost: one Pod Security Policy next to its 3 KSPs.
#[test]
fn kyverno_escape_to_host_namespaced_bindings() {
    let cases = [
        (
            "baseline, enforced, with labels",
            sib_np(selector(), vec![block("escapeToHost", "No breakouts")]),
            Some(selector()),
            "baseline",
            "Enforce",
        ),
        (
            "restricted, audited, without labels",
            sib_np(
                json!({}),
                vec![rule(
                    "escapeToHost",
                    "Audit",
                    Some("No breakouts"),
                    json!({"psaLevel": ["restricted"]}),
                )],
            ),
            None,
            "restricted",
            "Audit",
        ),
    ];
    for (case, np, pods, level, vfa) in cases {
        let t = run_np(&np);
        no_problems_in(case, &t);
        assert_objects_in(
            case,
            &of(&t, Engine::Kyverno),
            &[kyverno_policy(
                SIB_NP,
                "web-binding-escapetohost",
                "No breakouts",
                json!({
                    "rules": [pod_security_rule(
                        kyverno_match(POD_SECURITY_KINDS, None, pods),
                        json!({"resources": {}}),
                        level,
                    )],
                    "validationFailureAction": vfa,
                    "background": true,
                }),
            )],
        );
        // 3 KSPs + 1 Kyverno Policy, as the e2e status assert expects.
        assert_eq!(t.objects.len(), 4, "{case}");
    }
}

/// Kyverno does not act on the NimbusPolicies of cluster bindings: their escapeToHost is one
/// ClusterPolicy on the ClusterNimbusPolicy.
#[test]
fn kyverno_escape_to_host_cluster_binding_namespace_policy_has_only_ksps() {
    let t = run_np(&csib_np(selector(), vec![block("escapeToHost", "d")]));
    no_problems(&t);
    assert_objects(&of(&t, Engine::Kyverno), &[]);
    assert_eq!(of(&t, Engine::KubeArmor).len(), 3);
}

/// The ClusterPolicy of a cluster binding's escapeToHost, for each way of selecting namespaces
/// and workloads. Difference 7: excludeNames alone works (Nimbus panicked on `matchNames[0]`).
#[test]
fn kyverno_escape_to_host_cluster_policies() {
    let cases = [
        (
            "matchNames",
            json!({"matchNames": ["shop", "blog"]}),
            selector(),
            kyverno_match(
                POD_SECURITY_KINDS,
                Some(json!(["shop", "blog"])),
                Some(selector()),
            ),
            cluster_exclude(None),
        ),
        (
            "matchNames without labels",
            json!({"matchNames": ["shop"]}),
            Value::Null,
            kyverno_match(POD_SECURITY_KINDS, Some(json!(["shop"])), None),
            cluster_exclude(None),
        ),
        (
            "all namespaces",
            json!({"matchNames": ["*"]}),
            selector(),
            kyverno_match(POD_SECURITY_KINDS, None, Some(selector())),
            cluster_exclude(None),
        ),
        (
            "all namespaces, no labels at all: every Pod",
            json!({"matchNames": ["*"]}),
            json!({}),
            kyverno_match(POD_SECURITY_KINDS, None, None),
            cluster_exclude(None),
        ),
        (
            "all but excluded",
            json!({"matchNames": ["*"], "excludeNames": ["dev", "test"]}),
            Value::Null,
            kyverno_match(POD_SECURITY_KINDS, None, None),
            cluster_exclude(Some(json!(["dev", "test"]))),
        ),
        (
            "excludeNames only (difference 7)",
            json!({"excludeNames": ["dev"]}),
            selector(),
            kyverno_match(POD_SECURITY_KINDS, None, Some(selector())),
            cluster_exclude(Some(json!(["dev"]))),
        ),
    ];
    for (case, ns_selector, workloads, r#match, exclude) in cases {
        let t = run_cwnp(&cwnp(
            ns_selector,
            workloads,
            vec![block("escapeToHost", "No breakouts")],
        ));
        no_problems_in(case, &t);
        assert_objects_in(case, &all(&t), &[cluster_escape(r#match, exclude)]);
        assert_eq!(
            entries(&t),
            ["KyvernoClusterPolicy/web-csib-escapetohost"],
            "{case}"
        );
    }
}

/// The operator's own namespace, when protected, is exempt from cluster-wide admission rules
/// like kube-system: a cluster binding must not be able to stop the operator's pods.
#[test]
fn kyverno_cluster_policies_exclude_every_protected_namespace() {
    let env = Environment {
        protected_namespaces: ProtectedNamespaces::defaults(Some("nimbus-system"), "scans"),
        ..Environment::default()
    };
    let t = run_cwnp_with(
        &cwnp(
            json!({"matchNames": ["*"]}),
            Value::Null,
            vec![block("escapeToHost", "No breakouts")],
        ),
        &env,
    );
    let policy = &all(&t)[0];
    assert_eq!(
        policy["spec"]["rules"][0]["exclude"]["any"][0],
        json!({"resources": {"namespaces": ["kube-system", "nimbus-system", "scans"]}})
    );
}

// ---------------------------------------------------------------------------------------------
// cocoWorkload
// ---------------------------------------------------------------------------------------------

/// A namespaced binding's cocoWorkload: its two policies (difference 5), with the default
/// runtime class or the rule's.
#[test]
fn kyverno_coco_namespaced_bindings() {
    let cases = [
        (
            "default runtime class",
            sib_np(selector(), vec![block("cocoWorkload", "Confidential")]),
            "Enforce",
            Some(selector()),
            "kata-clh",
        ),
        (
            "the rule's runtime class, without labels",
            sib_np(
                json!({}),
                vec![rule(
                    "cocoWorkload",
                    "Block",
                    Some("Confidential"),
                    json!({"runtimeClass": ["kata-qemu"]}),
                )],
            ),
            "Enforce",
            None,
            "kata-qemu",
        ),
    ];
    for (case, np, vfa, pods, class) in cases {
        let t = run_np(&np);
        no_problems_in(case, &t);
        assert_objects_in(
            case,
            &all(&t),
            &coco_policies(SIB_NP, "Confidential", vfa, pods, class, ""),
        );
        assert_eq!(
            entries(&t),
            [
                "KyvernoPolicy/web-binding-mutateexisting",
                "KyvernoPolicy/web-binding-mutateoncreate",
            ],
            "{case}"
        );
    }
}

#[test]
fn kyverno_coco_cluster_binding_namespace_policy_generates_nothing() {
    let t = run_np(&csib_np(selector(), vec![block("cocoWorkload", "d")]));
    no_problems(&t);
    assert_objects(&all(&t), &[]);
}

/// The ClusterPolicy of a cluster binding's cocoWorkload, for each way of selecting namespaces
/// and workloads, with the rule's runtime class (difference 4) or the default.
#[test]
fn kyverno_coco_cluster_policies() {
    // (Audited, cocoWorkload writes nothing: a mutate rule has no audit form; see `audit`.)
    let block = || rule("cocoWorkload", "Block", Some("Confidential"), Value::Null);
    let cases = [
        (
            "matchNames with a runtime class",
            json!({"matchNames": ["shop", "blog"]}),
            selector(),
            rule(
                "cocoWorkload",
                "Block",
                Some("Confidential"),
                json!({"runtimeClass": ["kata-qemu"]}),
            ),
            kyverno_match(
                &["apps/v1/Deployment"],
                Some(json!(["shop", "blog"])),
                Some(selector()),
            ),
            cluster_exclude(None),
            "kata-qemu",
            "Enforce",
        ),
        (
            "all namespaces",
            json!({"matchNames": ["*"]}),
            Value::Null,
            block(),
            kyverno_match(&["apps/v1/Deployment"], None, None),
            cluster_exclude(None),
            "kata-clh",
            "Enforce",
        ),
        (
            "all but excluded, with labels",
            json!({"matchNames": ["*"], "excludeNames": ["dev"]}),
            selector(),
            block(),
            kyverno_match(&["apps/v1/Deployment"], None, Some(selector())),
            cluster_exclude(Some(json!(["dev"]))),
            "kata-clh",
            "Enforce",
        ),
        (
            "excludeNames only",
            json!({"excludeNames": ["dev", "test"]}),
            Value::Null,
            block(),
            kyverno_match(&["apps/v1/Deployment"], None, None),
            cluster_exclude(Some(json!(["dev", "test"]))),
            "kata-clh",
            "Enforce",
        ),
    ];
    for (case, ns_selector, workloads, coco, r#match, exclude, class, vfa) in cases {
        let t = run_cwnp(&cwnp(ns_selector, workloads, vec![coco]));
        no_problems_in(case, &t);
        assert_objects_in(
            case,
            &all(&t),
            &[cluster_coco_policy(
                "Confidential",
                r#match,
                exclude,
                class,
                vfa,
            )],
        );
        assert_eq!(
            entries(&t),
            ["KyvernoClusterPolicy/web-csib-cocoworkload"],
            "{case}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Both
// ---------------------------------------------------------------------------------------------

/// Nimbus always sets the description annotation, empty without a description.
#[test]
fn kyverno_description_annotation_is_always_set() {
    let np = sib_np(
        selector(),
        vec![rule("escapeToHost", "Block", None, Value::Null)],
    );
    let t = run_np(&np);
    let kyverno = of(&t, Engine::Kyverno);
    assert_eq!(kyverno.len(), 1);
    assert_eq!(
        kyverno[0]["metadata"],
        meta(
            "web-binding-escapetohost",
            Some(NS),
            "kyverno",
            Some(""),
            np_owner(SIB_NP)
        )
    );
}

/// Difference 3: each Kyverno policy takes the parameters of its own rule.
#[test]
fn kyverno_params_come_from_the_matching_rule() {
    let np = sib_np(
        selector(),
        vec![
            rule(
                "cocoWorkload",
                "Block",
                Some("c"),
                json!({"runtimeClass": ["kata-qemu"]}),
            ),
            rule(
                "escapeToHost",
                "Block",
                Some("e"),
                json!({"psaLevel": ["restricted"]}),
            ),
        ],
    );
    let t = run_np(&np);
    no_problems(&t);
    let kyverno = of(&t, Engine::Kyverno);
    assert_eq!(kyverno.len(), 3);
    assert_eq!(
        kyverno[2]["spec"]["rules"][0]["validate"]["podSecurity"]["level"],
        "restricted"
    );
    assert_eq!(
        kyverno[1]["spec"]["rules"][0]["mutate"]["patchStrategicMerge"],
        runtime_patch("kata-qemu")
    );
}

// ---------------------------------------------------------------------------------------------
// Kyverno's CEL policy kinds
// ---------------------------------------------------------------------------------------------

fn cel_env() -> Environment {
    Environment {
        kyverno: KyvernoApi::Cel,
        ..Environment::default()
    }
}

/// The CEL expressions of the checks of `level`, as the policy lists them.
fn pss_validations(level: Level) -> Value {
    pss::checks(level, pss::OBJECT)
        .into_iter()
        .map(|c| json!({"expression": c.expression, "message": c.message}))
        .collect()
}

/// `want` (escapeToHost's policy of pods) and its twin for the ephemeral containers added to
/// pods: the same checks on `pods/ephemeralcontainers`, at admission only (Kyverno derives the
/// pod controllers' checks only from a policy matching `pods` alone).
fn and_ephemeral(want: Value) -> [Value; 2] {
    let mut twin = want.clone();
    let name = format!("{}-ephemeral", want["metadata"]["name"].as_str().unwrap());
    twin["metadata"]["name"] = json!(name);
    twin["spec"]["evaluation"]["background"]["enabled"] = json!(false);
    twin["spec"]["matchConstraints"]["resourceRules"][0]["resources"] =
        json!(["pods/ephemeralcontainers"]);
    [want, twin]
}

/// A namespaced binding's escapeToHost in the CEL kinds: one NamespacedValidatingPolicy per
/// rule, `Deny` or `Audit` as the action says, selecting pods by labels (a CEL match condition
/// Kyverno rewrites for pod controllers' templates), with the checks of the level.
#[test]
fn kyverno_cel_escape_to_host_namespaced_binding() {
    let np = sib_np(
        json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "NotIn", "values": ["db"]},
            {"key": "canary", "operator": "DoesNotExist"},
        ]}),
        vec![rule(
            "escapeToHost",
            "Audit",
            Some("No breakouts"),
            json!({"psaLevel": ["restricted"]}),
        )],
    );
    let t = run_np_with(&np, &cel_env(), &EngineSet::all());
    let want = json!({
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "NamespacedValidatingPolicy",
        "metadata": meta(&format!("{SIB_NP}-escapetohost"), Some(NS), "kyverno", Some("No breakouts"), np_owner(SIB_NP)),
        "spec": {
            "validationActions": ["Audit"],
            "evaluation": {"background": {"enabled": true}},
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["pods"],
            }]},
            "matchConditions": [{
                "name": "workload-selector",
                "expression": "object.metadata.?labels.orValue({})[?\"app\"] == optional.of(\"web\") \
                    && !(object.metadata.?labels.orValue({})[?\"tier\"].orValue(null) in [\"db\"]) \
                    && !(\"canary\" in object.metadata.?labels.orValue({}))",
            }],
            "validations": pss_validations(Level::Restricted),
        },
    });
    assert_objects(&of(&t, Engine::Kyverno), &and_ephemeral(want));
}

/// A cluster binding's escapeToHost in the CEL kinds: a ValidatingPolicy over the selected
/// namespaces but the protected and the excluded ones, enforcing.
#[test]
fn kyverno_cel_escape_to_host_cluster_binding() {
    let t = run_cwnp_with(
        &cwnp(
            json!({"matchNames": ["shop", "web"], "excludeNames": ["web"]}),
            Value::Null,
            vec![block("escapeToHost", "No breakouts")],
        ),
        &cel_env(),
    );
    let want = json!({
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "ValidatingPolicy",
        "metadata": meta(&format!("{CWNP}-escapetohost"), None, "kyverno", Some("No breakouts"), cwnp_owner()),
        "spec": {
            "validationActions": ["Deny"],
            "evaluation": {"background": {"enabled": true}},
            "matchConstraints": {
                "resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["pods"],
                }],
                "namespaceSelector": {"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                     "values": ["kube-system", "nimbus-k8tls-env", "web"]},
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["shop", "web"]},
                ]},
            },
            "validations": pss_validations(Level::Baseline),
        },
    });
    assert_objects(&of(&t, Engine::Kyverno), &and_ephemeral(want));
}

/// cocoWorkload in the CEL kinds: a policy patching Deployments at admission, and one whose
/// background run patches those that exist (Kyverno does one or the other per policy).
#[test]
fn kyverno_cel_coco_workload_patches_new_and_existing_deployments() {
    let np = sib_np(
        selector(),
        vec![rule(
            "cocoWorkload",
            "Block",
            None,
            json!({"runtimeClass": ["kata-qemu"]}),
        )],
    );
    let t = run_np_with(&np, &cel_env(), &EngineSet::all());
    let constraints = json!({
        "resourceRules": [{
            "apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["deployments"],
        }],
        "objectSelector": selector(),
    });
    let patch = json!([{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
        "Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{runtimeClassName: \"kata-qemu\"}}}}"}}]);
    let policy = |name: String, spec: Value| {
        json!({
            "apiVersion": "policies.kyverno.io/v1",
            "kind": "NamespacedMutatingPolicy",
            "metadata": meta(&name, Some(NS), "kyverno", Some(""), np_owner(SIB_NP)),
            "spec": spec,
        })
    };
    let want = [
        policy(
            format!("{SIB_NP}-cocoworkload"),
            json!({
                "evaluation": {"background": {"enabled": false}},
                "matchConstraints": constraints,
                "mutations": patch,
            }),
        ),
        policy(
            format!("{SIB_NP}-cocoworkload-existing"),
            json!({
                "evaluation": {
                    "admission": {"enabled": false},
                    "background": {"enabled": true},
                    "mutateExisting": {"enabled": true},
                },
                "matchConstraints": constraints,
                "targetMatchConstraints": constraints,
                "mutations": patch,
            }),
        ),
    ];
    assert_objects(&of(&t, Engine::Kyverno), &want);
}

/// Which API the engine writes in: `auto` prefers the CEL kinds, and a forced choice the
/// cluster does not serve leaves Kyverno not installed.
#[test]
fn kyverno_kinds_in_force() {
    let legacy: &[&NativeKind] = KyvernoApi::Legacy.kinds();
    let cel: &[&NativeKind] = KyvernoApi::Cel.kinds();
    let both: Vec<&NativeKind> = legacy.iter().chain(cel).copied().collect();
    let partial = &cel[..2];
    for (choice, served, want) in [
        (KyvernoKinds::Auto, &both[..], Some(KyvernoApi::Cel)),
        (KyvernoKinds::Auto, legacy, Some(KyvernoApi::Legacy)),
        (KyvernoKinds::Auto, cel, Some(KyvernoApi::Cel)),
        (KyvernoKinds::Auto, partial, None),
        (KyvernoKinds::Auto, &[], None),
        (KyvernoKinds::Legacy, &both[..], Some(KyvernoApi::Legacy)),
        (KyvernoKinds::Legacy, cel, None),
        (KyvernoKinds::Cel, legacy, None),
        (KyvernoKinds::Cel, &both[..], Some(KyvernoApi::Cel)),
    ] {
        let got = choice.in_force(|k| served.contains(&k));
        assert_eq!(got, want, "{choice} with {} kinds served", served.len());
        assert_eq!(
            engines::installed(Engine::Kyverno, choice, |k| served.contains(&k)),
            want.is_some()
        );
    }
    for name in KyvernoKinds::NAMES {
        assert_eq!(name.parse::<KyvernoKinds>().unwrap().to_string(), name);
    }
    assert!("v2".parse::<KyvernoKinds>().is_err());
}

/// Where the API `--kyverno-kinds` insists on is not served, the status says which of its kinds
/// are missing, and whether the other API is served; `auto` says no more than any engine whose
/// CRDs are missing.
#[test]
fn kyverno_not_installed_names_the_kinds_asked_for() {
    let legacy: &[&NativeKind] = KyvernoApi::Legacy.kinds();
    let cel: &[&NativeKind] = KyvernoApi::Cel.kinds();
    for (choice, served, want) in [
        (KyvernoKinds::Auto, &[][..], None),
        (KyvernoKinds::Auto, legacy, None),
        (KyvernoKinds::Cel, cel, None),
        (
            KyvernoKinds::Cel,
            legacy,
            Some(
                "--kyverno-kinds cel asks for its CEL policy kinds, NamespacedValidatingPolicy, \
                 ValidatingPolicy, NamespacedMutatingPolicy, MutatingPolicy not served; its \
                 legacy kinds are served (--kyverno-kinds auto writes those)",
            ),
        ),
        (
            KyvernoKinds::Cel,
            &cel[..2],
            Some(
                "--kyverno-kinds cel asks for its CEL policy kinds, NamespacedMutatingPolicy, \
                 MutatingPolicy not served",
            ),
        ),
        (KyvernoKinds::Legacy, legacy, None),
        (
            KyvernoKinds::Legacy,
            cel,
            Some(
                "--kyverno-kinds legacy asks for its legacy policy kinds, Policy, ClusterPolicy \
                 not served; its CEL kinds are served (--kyverno-kinds auto writes those)",
            ),
        ),
        (
            KyvernoKinds::Legacy,
            &[],
            Some(
                "--kyverno-kinds legacy asks for its legacy policy kinds, Policy, ClusterPolicy \
                 not served",
            ),
        ),
    ] {
        assert_eq!(
            choice.missing(|k| served.contains(&k)).as_deref(),
            want,
            "{choice} with {} kinds served",
            served.len()
        );
    }
    let mut engines = EngineSet::all();
    engines.installed.remove(&Engine::Kyverno);
    engines.not_installed = [(Engine::Kyverno, "the reason".to_owned())].into();
    let t = run_np_with(&sib_np(selector(), vec![vp_rule()]), &vp_env(), &engines);
    let messages: Vec<&str> = t.problems.iter().map(|p| p.message.as_str()).collect();
    assert_eq!(
        messages,
        ["intent `virtualPatch` is not enforced: kyverno (not installed: the reason)"]
    );
}
