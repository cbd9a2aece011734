//! The whole picture: every intent at once, the names of repeated rules (difference 9), where
//! a policy comes from, and the catalog and the translators agreeing.

use crate::builders::*;
use crate::kubearmor::Ksp;
use crate::kyverno::coco_policies;
use nimbus_core::catalog::{Engine, Origin};
use nimbus_core::engines::{EngineSet, Environment, PolicyInput};
use serde_json::{Value, json};
use std::collections::BTreeSet;

// ---------------------------------------------------------------------------------------------
// Several rules with the same ID (difference 9)
// ---------------------------------------------------------------------------------------------

#[test]
fn a_second_rule_with_the_same_id_gets_suffixed_names() {
    let np = sib_np(
        selector(),
        vec![
            block("dnsManipulation", "one"),
            block("escapeToHost", "one"),
            block("dnsManipulation", "two"),
            block("escapeToHost", "two"),
        ],
    );
    let t = run_np(&np);
    no_problems(&t);
    assert_eq!(
        entries(&t),
        [
            "NetworkPolicy/web-binding-dnsmanipulation",
            "KubeArmorPolicy/web-binding-dnsmanipulation",
            "KubeArmorPolicy/web-binding-escapetohost-disallowchroot",
            "KubeArmorPolicy/web-binding-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/web-binding-escapetohost-swdeploymenttools",
            "KyvernoPolicy/web-binding-escapetohost",
            "NetworkPolicy/web-binding-dnsmanipulation-2",
            "KubeArmorPolicy/web-binding-dnsmanipulation-2",
            "KubeArmorPolicy/web-binding-escapetohost-2-disallowchroot",
            "KubeArmorPolicy/web-binding-escapetohost-2-disallowcapabilities",
            "KubeArmorPolicy/web-binding-escapetohost-2-swdeploymenttools",
            "KyvernoPolicy/web-binding-escapetohost-2",
        ]
    );
    let ksp = Ksp {
        np: SIB_NP,
        labels: labels(),
        description: Some("two"),
        action: "Block",
    };
    let objects = all(&t);
    assert_objects(&objects[8..11], &ksp.escape_to_host("escapetohost-2"));
}

#[test]
fn a_second_coco_rule_gets_suffixed_names() {
    let np = sib_np(
        selector(),
        vec![
            block("cocoWorkload", "one"),
            rule(
                "cocoWorkload",
                "Block",
                Some("two"),
                json!({"runtimeClass": ["kata-qemu"]}),
            ),
        ],
    );
    let t = run_np(&np);
    no_problems(&t);
    let mut want = coco_policies(SIB_NP, "one", "Enforce", Some(selector()), "kata-clh", "");
    want.extend(coco_policies(
        SIB_NP,
        "two",
        "Enforce",
        Some(selector()),
        "kata-qemu",
        "-2",
    ));
    assert_objects(&all(&t), &want);
}

#[test]
fn a_second_cluster_rule_gets_suffixed_names() {
    let t = run_cwnp(&cwnp(
        all_namespaces(),
        Value::Null,
        vec![
            block("escapeToHost", "a"),
            block("cocoWorkload", "a"),
            block("escapeToHost", "b"),
            block("cocoWorkload", "b"),
        ],
    ));
    no_problems(&t);
    assert_eq!(
        entries(&t),
        [
            "KyvernoClusterPolicy/web-csib-escapetohost",
            "KyvernoClusterPolicy/web-csib-cocoworkload",
            "KyvernoClusterPolicy/web-csib-escapetohost-2",
            "KyvernoClusterPolicy/web-csib-cocoworkload-2",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Entries, origin, and the whole picture
// ---------------------------------------------------------------------------------------------

#[test]
fn namespaced_origin_follows_the_controlling_owner() {
    let sib = sib_np(selector(), vec![]);
    assert_eq!(PolicyInput::namespaced(&sib, UID).origin, Origin::Binding);
    let csib = csib_np(selector(), vec![]);
    assert_eq!(
        PolicyInput::namespaced(&csib, UID).origin,
        Origin::ClusterBindingNamespace
    );
    // A non-controlling reference to a cluster binding does not count.
    let mut loose = csib_np(selector(), vec![]);
    loose.metadata.owner_references.as_mut().unwrap()[0].controller = Some(false);
    assert_eq!(PolicyInput::namespaced(&loose, UID).origin, Origin::Binding);
    let cluster = cwnp(all_namespaces(), Value::Null, vec![]);
    assert_eq!(PolicyInput::cluster(&cluster, UID).origin, Origin::Cluster);
}

/// Every intent through a namespaced binding, in rule order then engine order (netpol,
/// kubearmor, kyverno, k8tls, rbac).
#[test]
fn entries_of_every_namespaced_intent() {
    let np = sib_np(
        selector(),
        vec![
            block("swDeploymentTools", "d"),
            block("unAuthorizedSaTokenAccess", "d"),
            block("dnsManipulation", "d"),
            block("denyExternalNetworkAccess", "d"),
            block("escapeToHost", "d"),
            block("preventExecutionFromTempOrLogsFolders", "d"),
            block("cocoWorkload", "d"),
        ],
    );
    let t = run_np(&np);
    no_problems(&t);
    assert_eq!(
        entries(&t),
        [
            "KubeArmorPolicy/web-binding-swdeploymenttools",
            "KubeArmorPolicy/web-binding-unauthorizedsatokenaccess",
            "NetworkPolicy/web-binding-dnsmanipulation",
            "KubeArmorPolicy/web-binding-dnsmanipulation",
            "NetworkPolicy/web-binding-denyexternalnetworkaccess",
            "KubeArmorPolicy/web-binding-escapetohost-disallowchroot",
            "KubeArmorPolicy/web-binding-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/web-binding-escapetohost-swdeploymenttools",
            "KyvernoPolicy/web-binding-escapetohost",
            "KubeArmorPolicy/web-binding-preventexecutionfromtemporlogsfolders",
            "KyvernoPolicy/web-binding-mutateexisting",
            "KyvernoPolicy/web-binding-mutateoncreate",
        ]
    );
    let engines: Vec<Engine> = t.objects.iter().map(|g| g.engine).collect();
    assert_eq!(
        engines,
        [
            Engine::KubeArmor,
            Engine::KubeArmor,
            Engine::NetworkPolicy,
            Engine::KubeArmor,
            Engine::NetworkPolicy,
            Engine::KubeArmor,
            Engine::KubeArmor,
            Engine::KubeArmor,
            Engine::Kyverno,
            Engine::KubeArmor,
            Engine::Kyverno,
            Engine::Kyverno,
        ]
    );
}

/// Every intent through a cluster binding: what the per-namespace policy and the cluster
/// policy generate between them.
#[test]
fn entries_of_every_cluster_bound_intent() {
    let rules = vec![
        block("swDeploymentTools", "d"),
        block("unAuthorizedSaTokenAccess", "d"),
        block("dnsManipulation", "d"),
        block("denyExternalNetworkAccess", "d"),
        block("escapeToHost", "d"),
        block("preventExecutionFromTempOrLogsFolders", "d"),
        block("cocoWorkload", "d"),
        block("assessTLS", "d"),
        sandbox_rule(json!({"group": ["g"]})),
    ];
    let t = run_np(&csib_np(selector(), rules.clone()));
    no_problems(&t);
    assert_eq!(
        entries(&t),
        [
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-swdeploymenttools",
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-unauthorizedsatokenaccess",
            "NetworkPolicy/nimbus-ctlr-gen-web-csib-dnsmanipulation",
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-dnsmanipulation",
            "NetworkPolicy/nimbus-ctlr-gen-web-csib-denyexternalnetworkaccess",
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-escapetohost-disallowchroot",
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-escapetohost-swdeploymenttools",
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-preventexecutionfromtemporlogsfolders",
            "RoleBinding/nimbus-ctlr-gen-web-csib-namespacesandbox-role-edit",
        ]
    );
    let t = run_cwnp(&cwnp(all_namespaces(), selector(), rules));
    no_problems(&t);
    assert_eq!(
        entries(&t),
        [
            "KyvernoClusterPolicy/web-csib-escapetohost",
            "KyvernoClusterPolicy/web-csib-cocoworkload",
            "nimbus-k8tls-env/CronJob/web-csib-assesstls",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// The catalog and the translators agree
// ---------------------------------------------------------------------------------------------

#[test]
fn every_catalog_intent_is_clean_with_every_engine() {
    // Valid rules of every intent, through both kinds of binding: no problem at all.
    let rules = vec![
        block("swDeploymentTools", "d"),
        block("unAuthorizedSaTokenAccess", "d"),
        block("dnsManipulation", "d"),
        block("denyExternalNetworkAccess", "d"),
        block("escapeToHost", "d"),
        block("preventExecutionFromTempOrLogsFolders", "d"),
        block("cocoWorkload", "d"),
        vp_rule(),
    ];
    no_problems(&run_np_with(
        &sib_np(selector(), rules.clone()),
        &vp_env(),
        &EngineSet::all(),
    ));
    // Sandboxes and TLS scans only through cluster bindings.
    let mut cluster_rules = rules;
    cluster_rules.push(sandbox_rule(json!({"group": ["g"]})));
    cluster_rules.push(block("assessTLS", "d"));
    no_problems(&run_np_with(
        &csib_np(selector(), cluster_rules.clone()),
        &vp_env(),
        &EngineSet::all(),
    ));
    no_problems(&run_cwnp_with(
        &cwnp(all_namespaces(), selector(), cluster_rules),
        &vp_env(),
    ));
}

#[test]
fn no_objects_for_inactive_engines() {
    let rules = vec![
        block("dnsManipulation", "d"),
        block("escapeToHost", "d"),
        block("cocoWorkload", "d"),
        sandbox_rule(json!({"group": ["g"]})),
    ];
    for engine in Engine::ALL {
        let others = all_but(engine);
        for set in [
            engines(&others, &Engine::ALL),
            engines(&Engine::ALL, &others),
        ] {
            let t = run_np_with(
                &sib_np(selector(), rules.clone()),
                &Environment::default(),
                &set,
            );
            assert!(
                t.objects.iter().all(|g| g.engine != engine),
                "{engine} generated objects while inactive"
            );
        }
    }
}

/// Every (intent, origin) an engine declares yields objects of that engine, so a declaration
/// without a translation cannot pass for enforced.
#[test]
fn every_declared_intent_has_a_translation() {
    let env = vp_env();
    let declared = Engine::ALL
        .into_iter()
        .flat_map(|e| e.spec().enforces.iter().map(move |enforced| (e, enforced)));
    for (engine, enforced) in declared {
        let params = match enforced.intent {
            "virtualPatch" => json!({"cveList": ["CVE-2024-4439"]}),
            "namespaceSandbox" => json!({"group": ["g"], "clusterRole": ["view"]}),
            _ => json!({}),
        };
        let rules = vec![rule(enforced.intent, "Block", Some("d"), params)];
        let only = BTreeSet::from([engine]);
        let engines = EngineSet {
            enabled: only.clone(),
            installed: only,
            external: BTreeSet::new(),
            ..EngineSet::default()
        };
        for origin in enforced.origins {
            let t = match origin {
                Origin::Binding => run_np_with(&sib_np(selector(), rules.clone()), &env, &engines),
                Origin::ClusterBindingNamespace => {
                    run_np_with(&csib_np(selector(), rules.clone()), &env, &engines)
                }
                Origin::Cluster => run_cwnp_with_engines(
                    &cwnp(json!({"matchNames": ["*"]}), selector(), rules.clone()),
                    &env,
                    &engines,
                ),
            };
            assert!(
                !of(&t, engine).is_empty(),
                "{} through {engine} from {origin:?} generated nothing: {:?}",
                enforced.intent,
                t.problems
            );
        }
    }
}
