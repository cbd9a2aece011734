//! Kyverno: virtualPatch's generator Policies, from the virtual-patch database in
//! `tests/fixtures/virtual-patch-db.json` (Nimbus's vp.json format).

use crate::builders::*;
use crate::kyverno::{kyverno_match, kyverno_policy};
use nimbus_api::condition;
use nimbus_core::engines::{EngineSet, Environment, Problem, Translation, VirtualPatches};
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
