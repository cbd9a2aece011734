//! Kyverno: virtualPatch's generator Policies, from the virtual-patch database in
//! `tests/fixtures/virtual-patch-db.json` (Nimbus's vp.json format).

use crate::builders::*;
use crate::kyverno::{kyverno_match, kyverno_policy};
use nimbus_api::condition;
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{
    self, EngineSet, Environment, KyvernoApi, Problem, Translation, VirtualPatches,
};
use serde_json::{Value, json};

fn runs_nginx() -> Value {
    json!({"key": "nginx:latest", "operator": "AnyIn", "value": "{{ request.object.spec.containers[].image }}"})
}

fn pod_name_context() -> Value {
    json!({"name": "podName", "variable": {"jmesPath": "request.object.metadata.name"}})
}

/// A virtual patch's generator Policy `<np>-cve-2024-4439-<engine>-1`.
fn vp_generator(np: &str, engine: &str, rule: Value) -> Value {
    kyverno_policy(
        np,
        &format!("{np}-cve-2024-4439-{engine}-1"),
        "Patch CVEs",
        json!({
            "rules": [rule],
            "validationFailureAction": "Enforce",
            "background": true,
            "generateExisting": true,
        }),
    )
}

fn vp_owner_in_data(np: &str) -> Value {
    json!([np_owner(np)])
}

fn vp_karmor(np: &str) -> Value {
    let mut generated_labels = labels();
    generated_labels["kubearmor.io/container.name"] = "{{ containerName }}".into();
    vp_generator(
        np,
        "karmor",
        json!({
            "name": "cve-2024-4439-virtual-patch-karmor", // Nimbus lacked the hyphen
            "context": [
                {"name": "containerName", "variable": {"jmesPath": "request.object.spec.containers[?(@.image=='nginx:latest')].name | [0]"}},
                pod_name_context(),
            ],
            "match": kyverno_match(&["v1/Pod"], None, Some(selector())),
            "exclude": {"resources": {}},
            "preconditions": {"all": [runs_nginx()]},
            "mutate": {},
            "generate": {
                "apiVersion": "security.kubearmor.com/v1",
                "kind": "KubeArmorPolicy",
                "namespace": NS,
                "name": "block-pkg-mgmt-tools-exec-{{ podName }}",
                "data": {
                    "metadata": {"name": "block-pkg-mgmt-tools-exec", "ownerReferences": vp_owner_in_data(np)},
                    "spec": {
                        "action": "Block",
                        "process": {"matchPaths": [{"path": "/usr/bin/apt"}, {"path": "/usr/bin/apt-get"}]},
                        "selector": {"matchLabels": generated_labels},
                    },
                },
                "clone": {},
                "cloneList": {},
            },
        }),
    )
}

fn vp_kyverno(np: &str) -> Value {
    vp_generator(
        np,
        "kyverno",
        json!({
            "name": "cve-2024-4439-virtual-patch-kyverno",
            "match": kyverno_match(&["v1/Pod"], None, Some(selector())),
            "exclude": {"resources": {}},
            "mutate": {},
            "generate": {
                "apiVersion": "kyverno.io/v1",
                "kind": "Policy",
                "namespace": NS,
                "name": "disallow-latest-tag",
                "data": {
                    "name": "CVE_NUMBER-Virtual-Patch-Kyverno",
                    "metadata": {"name": "disallow-latest-tag", "ownerReferences": vp_owner_in_data(np)},
                    "spec": {
                        "validationFailureAction": "Enforce",
                        "background": true,
                        "rules": [{
                            "name": "validate-image-tag",
                            "match": {"any": [{"resources": {"kinds": ["Pod"], "selector": selector()}}]},
                            // Fixed: the image condition comes first and the patch's own
                            // `all` conditions are kept (Nimbus dropped them); its `any`
                            // conditions are kept as they are.
                            "preconditions": {
                                "all": [
                                    runs_nginx(),
                                    {"key": "busybox", "operator": "AnyIn", "value": "{{ images.containers.*.name }}"},
                                ],
                                "any": [{"key": "x", "operator": "Equals", "value": "x"}],
                            },
                            "validate": {
                                "message": "Using a mutable image tag e.g. 'latest' is not allowed.",
                                "pattern": {"spec": {"containers": [{"image": "!*:latest"}]}},
                            },
                        }],
                    },
                },
                "clone": {},
                "cloneList": {},
            },
        }),
    )
}

fn vp_netpol(np: &str) -> Value {
    vp_generator(
        np,
        "netpol",
        json!({
            "name": "cve-2024-4439-virtual-patch-netpol", // Nimbus lacked the hyphen
            "context": [pod_name_context()],
            "match": kyverno_match(&["v1/Pod"], None, Some(selector())),
            "exclude": {"resources": {}},
            "preconditions": {"all": [runs_nginx()]},
            "mutate": {},
            "generate": {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "namespace": NS,
                "name": "test-network-policy",
                "data": {
                    "metadata": {"name": "test-network-policy", "ownerReferences": vp_owner_in_data(np)},
                    "spec": {
                        "podSelector": selector(),
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"protocol": "TCP", "port": 5978}]}],
                    },
                    // The patch's own keys are kept.
                    "unknownKey": 1,
                },
                "clone": {},
                "cloneList": {},
            },
        }),
    )
}

fn vp_objects() -> Translation {
    run_np_with(
        &sib_np(selector(), vec![vp_rule()]),
        &vp_env(),
        &EngineSet::all(),
    )
}

/// One generator Policy per patch, named after the NimbusPolicy: Nimbus's cluster path
/// produced an empty ClusterPolicy (a bug); here every namespace a cluster binding selects gets
/// the generators, through its per-namespace NimbusPolicy.
#[test]
fn virtual_patch_names_and_entries() {
    let cases = [
        (
            "namespaced binding",
            sib_np(selector(), vec![vp_rule()]),
            [
                "web-binding-cve-2024-4439-karmor-1",
                "web-binding-cve-2024-4439-kyverno-1",
                "web-binding-cve-2024-4439-netpol-1",
            ],
        ),
        (
            "cluster binding's namespace policy",
            csib_np(selector(), vec![vp_rule()]),
            [
                "nimbus-ctlr-gen-web-csib-cve-2024-4439-karmor-1",
                "nimbus-ctlr-gen-web-csib-cve-2024-4439-kyverno-1",
                "nimbus-ctlr-gen-web-csib-cve-2024-4439-netpol-1",
            ],
        ),
    ];
    for (case, np, want) in cases {
        let t = run_np_with(&np, &vp_env(), &EngineSet::all());
        no_problems_in(case, &t);
        assert_eq!(names(&all(&t)), want, "{case}");
        assert_eq!(
            entries(&t),
            want.map(|n| format!("KyvernoPolicy/{n}")),
            "{case}"
        );
    }
}

/// The generator Policy of each of the fixture's patches, in the database's order.
#[test]
fn virtual_patch_generators() {
    let objects = all(&vp_objects());
    let cases = [
        ("karmor", vp_karmor(SIB_NP)),
        ("kyverno", vp_kyverno(SIB_NP)),
        ("netpol", vp_netpol(SIB_NP)),
    ];
    for (i, (case, want)) in cases.iter().enumerate() {
        assert_objects_in(case, &objects[i..i + 1], std::slice::from_ref(want));
    }
    assert_eq!(objects.len(), cases.len(), "{:?}", names(&objects));
}

/// Nimbus wrote an empty, rule-less ClusterPolicy `<cwnp>-virtualpatch` (a bug).
#[test]
fn virtual_patch_cluster_nimbus_policy_generates_nothing() {
    let t = run_cwnp_with(
        &cwnp(json!({"matchNames": ["*"]}), selector(), vec![vp_rule()]),
        &vp_env(),
    );
    assert_objects(&all(&t), &[]);
}

#[test]
fn virtual_patch_without_database_is_not_ready() {
    let t = run_np(&sib_np(selector(), vec![vp_rule()]));
    assert!(t.objects.is_empty());
    assert_eq!(
        t.problems,
        vec![Problem {
            intent: "virtualPatch".into(),
            reason: condition::REASON_ENGINE_NOT_READY,
            message: "no virtual-patch database is configured (--virtual-patch-db)".into(),
            blocking: true,
        }]
    );
    let env = Environment {
        virtual_patches: VirtualPatches::Invalid("ConfigMap nimbus/vp-db not found".into()),
        ..Environment::default()
    };
    let t = run_np_with(
        &sib_np(selector(), vec![vp_rule()]),
        &env,
        &EngineSet::all(),
    );
    assert_eq!(t.problems.len(), 1);
    assert_eq!(t.problems[0].message, "ConfigMap nimbus/vp-db not found");
    assert!(t.problems[0].blocking);
}

#[test]
fn virtual_patch_unknown_cves_are_reported_without_blocking() {
    let np = sib_np(
        selector(),
        vec![rule(
            "virtualPatch",
            "Block",
            Some("Patch CVEs"),
            json!({"cveList": ["CVE-2024-4439", "CVE-2099-0001"]}),
        )],
    );
    let t = run_np_with(&np, &vp_env(), &EngineSet::all());
    assert_eq!(t.objects.len(), 3);
    assert_eq!(
        t.problems,
        vec![Problem {
            intent: "virtualPatch".into(),
            reason: condition::REASON_ENGINE_NOT_READY,
            message: "no virtual patch known for CVE-2099-0001".into(),
            blocking: false,
        }]
    );
}

// ---------------------------------------------------------------------------------------------
// Kyverno's CEL policy kinds
// ---------------------------------------------------------------------------------------------

fn cel_vp_env() -> Environment {
    Environment {
        kyverno: KyvernoApi::Cel,
        ..vp_env()
    }
}

/// A NamespacedGeneratingPolicy `<np>-cve-2024-4439-<engine>-1`: triggered by the selected
/// Pods (existing ones too), running nginx:latest unless `runs_nginx` is false, generating
/// `literal`.
fn cel_generator(np: &str, engine: &str, runs_nginx: bool, literal: &str) -> Value {
    let mut spec = json!({
        "evaluation": {"generateExisting": {"enabled": true}},
        "matchConstraints": {
            "resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["pods"],
            }],
            "objectSelector": selector(),
        },
        "generate": [{"expression": format!("generator.Apply([{literal}])")}],
    });
    if runs_nginx {
        spec["matchConditions"] = json!([{
            "name": "runs-image",
            "expression": "object.spec.containers.exists(c, c.image == \"nginx:latest\")",
        }]);
    }
    json!({
        "apiVersion": "policies.kyverno.io/v1",
        "kind": "NamespacedGeneratingPolicy",
        "metadata": meta(
            &format!("{np}-cve-2024-4439-{engine}-1"),
            Some(NS),
            "kyverno",
            Some("Patch CVEs"),
            np_owner(np),
        ),
        "spec": spec,
    })
}

/// The owner reference of a generated object, as CEL.
fn owner_literal(np: &str) -> String {
    format!(
        r#"dyn([dyn({{"apiVersion": dyn("{API_VERSION}"), "blockOwnerDeletion": dyn(true), "controller": dyn(true), "kind": dyn("NimbusPolicy"), "name": dyn("{np}"), "uid": dyn("{UID}")}})])"#
    )
}

/// In the CEL kinds, one NamespacedGeneratingPolicy per patch, named as the legacy generator,
/// triggered by the same Pods and generating the same object: the KubeArmorPolicy named after
/// the Pod and selecting its container running the image, the NetworkPolicy, and the Kyverno
/// Policy (whose own rules check the image, so any selected Pod triggers it).
#[test]
fn virtual_patch_generators_in_cel_kinds() {
    let t = run_np_with(
        &sib_np(selector(), vec![vp_rule()]),
        &cel_vp_env(),
        &EngineSet::all(),
    );
    no_problems(&t);
    let owner = owner_literal(SIB_NP);
    let labels = r#"dyn({"app": dyn("web"), "tier": dyn("front")})"#;
    let karmor = format!(
        r#"{{"apiVersion": dyn("security.kubearmor.com/v1"), "kind": dyn("KubeArmorPolicy"), "metadata": dyn({{"name": dyn("block-pkg-mgmt-tools-exec" + "-" + object.metadata.name), "namespace": dyn("{NS}"), "ownerReferences": {owner}}}), "spec": dyn({{"action": dyn("Block"), "process": dyn({{"matchPaths": dyn([dyn({{"path": dyn("/usr/bin/apt")}}), dyn({{"path": dyn("/usr/bin/apt-get")}})])}}), "selector": dyn({{"matchLabels": dyn({{"app": dyn("web"), "kubearmor.io/container.name": dyn(object.spec.containers.filter(c, c.image == "nginx:latest")[0].name), "tier": dyn("front")}})}})}})}}"#
    );
    let kyverno = format!(
        r#"{{"apiVersion": dyn("kyverno.io/v1"), "kind": dyn("Policy"), "metadata": dyn({{"name": dyn("disallow-latest-tag"), "namespace": dyn("{NS}"), "ownerReferences": {owner}}}), "name": dyn("CVE_NUMBER-Virtual-Patch-Kyverno"), "spec": dyn({{"background": dyn(true), "rules": dyn([dyn({{"match": dyn({{"any": dyn([dyn({{"resources": dyn({{"kinds": dyn([dyn("Pod")]), "selector": dyn({{"matchLabels": {labels}}})}})}})])}}), "name": dyn("validate-image-tag"), "preconditions": dyn({{"all": dyn([dyn({{"key": dyn("nginx:latest"), "operator": dyn("AnyIn"), "value": dyn("{{{{ request.object.spec.containers[].image }}}}")}}), dyn({{"key": dyn("busybox"), "operator": dyn("AnyIn"), "value": dyn("{{{{ images.containers.*.name }}}}")}})]), "any": dyn([dyn({{"key": dyn("x"), "operator": dyn("Equals"), "value": dyn("x")}})])}}), "validate": dyn({{"message": dyn("Using a mutable image tag e.g. 'latest' is not allowed."), "pattern": dyn({{"spec": dyn({{"containers": dyn([dyn({{"image": dyn("!*:latest")}})])}})}})}})}})]), "validationFailureAction": dyn("Enforce")}})}}"#
    );
    let netpol = format!(
        r#"{{"apiVersion": dyn("networking.k8s.io/v1"), "kind": dyn("NetworkPolicy"), "metadata": dyn({{"name": dyn("test-network-policy"), "namespace": dyn("{NS}"), "ownerReferences": {owner}}}), "spec": dyn({{"egress": dyn([dyn({{"ports": dyn([dyn({{"port": dyn(5978), "protocol": dyn("TCP")}})]), "to": dyn([dyn({{"ipBlock": dyn({{"cidr": dyn("10.0.0.0/24")}})}})])}})]), "podSelector": dyn({{"matchLabels": {labels}}}), "policyTypes": dyn([dyn("Egress")])}}), "unknownKey": dyn(1)}}"#
    );
    let want = [
        cel_generator(SIB_NP, "karmor", true, &karmor),
        cel_generator(SIB_NP, "kyverno", false, &kyverno),
        cel_generator(SIB_NP, "netpol", true, &netpol),
    ];
    assert_objects(&of(&t, Engine::Kyverno), &want);
}

/// Where Kyverno serves the other CEL kinds but not NamespacedGeneratingPolicy, virtualPatch is
/// not enforced, and the policy says which kind is missing; escapeToHost still is.
#[test]
fn virtual_patch_in_cel_kinds_needs_the_generating_policy_kind_served() {
    let mut engines = EngineSet::all();
    engines.unserved = [&engines::KYVERNO_NAMESPACED_GENERATING_POLICY].into();
    let t = run_np_with(
        &sib_np(
            selector(),
            vec![vp_rule(), block("escapeToHost", "No breakouts")],
        ),
        &cel_vp_env(),
        &engines,
    );
    let kinds: Vec<Value> = of(&t, Engine::Kyverno)
        .iter()
        .map(|o| o["kind"].clone())
        .collect();
    assert_eq!(
        kinds,
        [
            json!("NamespacedValidatingPolicy"),
            json!("NamespacedValidatingPolicy")
        ]
    );
    assert_eq!(
        t.problems,
        vec![Problem {
            intent: "virtualPatch".into(),
            reason: condition::REASON_ENGINE_NOT_INSTALLED,
            message: "kyverno enforces intent `virtualPatch` with a NamespacedGeneratingPolicy, \
                      which the API server does not serve (policies.kyverno.io/v1)"
                .into(),
            blocking: true,
        }]
    );
}
