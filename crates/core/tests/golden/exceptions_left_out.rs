//! SecurityIntentExceptions left out of the selector by the engines that select pods: each
//! policy written once per selector of `exceptions::excluding`, with the same body, the first
//! under its usual name. KubeArmor (its `label NotIn key=value` requirements) and the
//! ClusterNetworkPolicy engine (the excepted namespaces apart, at the binding's priority).

use crate::builders::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
use nimbus_api::PodSecurityControl;
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{
    EngineSet, Environment, PolicyInput, Preference, Translation, translate,
};
use nimbus_core::exceptions::{Excepted, ExceptionKind};
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Exception `name` in `namespace` to `intent`, for the pods `selector` selects.
fn exception(name: &str, namespace: &str, intent: &str, selector: Value) -> Excepted {
    Excepted {
        kind: Default::default(),
        name: name.into(),
        namespace: namespace.into(),
        selector: serde_json::from_value::<LabelSelector>(selector).unwrap(),
        workloads: Vec::new(),
        intents: BTreeSet::from([intent.to_owned()]),
        reason: "until the vendor's 2.4 release".into(),
        expires_at: Timestamp::from_second(1_800_000_000).unwrap(),
        signatures: Default::default(),
        controls: None,
    }
}

fn two_labels() -> Value {
    json!({"matchLabels": {"team": "vendor", "tier": "legacy"}})
}

/// The KubeArmor selector of the binding's pods without those labelled `label`.
fn web_not(label: &str) -> Value {
    json!({"matchLabels": labels(),
           "matchExpressions": [{"key": "label", "operator": "NotIn", "values": [label]}]})
}

/// escapeToHost of cluster binding `web-csib` in `shop` (KubeArmor writes per namespace),
/// translated with `exceptions` in force.
fn kubearmor(exceptions: Vec<Excepted>) -> Translation {
    let np = csib_np(selector(), vec![block("escapeToHost", "no host")]);
    let mut input = PolicyInput::namespaced(&np, UID);
    input.exceptions = exceptions;
    translate(&input, &Environment::default(), &EngineSet::all())
}

#[test]
fn kubearmor_leaves_the_excepted_pods_out_one_label_at_a_time() {
    let plain = of(&kubearmor(vec![]), Engine::KubeArmor);
    let t = kubearmor(vec![exception(
        "vendor-agent",
        NS,
        "escapeToHost",
        two_labels(),
    )]);
    // Every engine enforcing escapeToHost here honours it (Kyverno with a PolicyException).
    no_problems(&t);
    let split = of(&t, Engine::KubeArmor);
    let mut want = Vec::new();
    for body in &plain {
        for (i, label) in ["team=vendor", "tier=legacy"].into_iter().enumerate() {
            let mut object = body.clone();
            let name = body["metadata"]["name"].as_str().unwrap();
            if i > 0 {
                object["metadata"]["name"] = json!(format!("{name}-x{i}"));
            }
            object["spec"]["selector"] = web_not(label);
            want.push(object);
        }
    }
    assert_objects(&split, &want);
    assert_eq!(
        split[1],
        json!({
            "apiVersion": "security.kubearmor.com/v1",
            "kind": "KubeArmorPolicy",
            "metadata": {
                "name": "nimbus-ctlr-gen-web-csib-escapetohost-disallowchroot-x1",
                "namespace": NS,
                "annotations": {MANAGED_BY: "nimbus-kubearmor"},
                "labels": {MANAGED_BY: "nimbus-kubearmor"},
                "ownerReferences": [owner("NimbusPolicy", CSIB_NP)],
            },
            "spec": {
                "selector": {
                    "matchLabels": {"app": "web", "tier": "front"},
                    "matchExpressions": [
                        {"key": "label", "operator": "NotIn", "values": ["tier=legacy"]},
                    ],
                },
                "process": {"matchPaths": [{"path": "/usr/sbin/chroot"}, {"path": "/sbin/chroot"}]},
                "file": {},
                "network": {},
                "capabilities": {},
                "syscalls": {},
                "message": "no host",
                "action": "Block",
            },
        })
    );

    // Every pod of the namespace: no KubeArmorPolicy.
    let t = kubearmor(vec![exception("all", NS, "escapeToHost", json!({}))]);
    no_problems(&t);
    assert_eq!(of(&t, Engine::KubeArmor), Vec::<Value>::new());
}

#[test]
fn kubearmor_keeps_enforcing_what_its_selector_cannot_leave_out_and_says_so() {
    let plain = of(&kubearmor(vec![]), Engine::KubeArmor);
    let exists = json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]});
    let t = kubearmor(vec![exception("vendor-agent", NS, "escapeToHost", exists)]);
    assert_eq!(of(&t, Engine::KubeArmor), plain);
    let said: Vec<(&str, bool)> = t.problems.iter().map(|p| (p.reason, p.blocking)).collect();
    assert_eq!(said, [("ExceptionNotHonoured", false)], "{:#?}", t.problems);
    let message = &t.problems[0].message;
    assert!(
        message.starts_with("kubearmor does not honour exceptions to intent `escapeToHost`")
            && message.contains("(SecurityIntentException vendor-agent)")
            && message.contains("Exists"),
        "{message}"
    );

    // An exception of some Pod Security controls only: KubeArmor checks none by name, and
    // the workloads stay held to the rest of the intent.
    let privileged = Excepted {
        controls: Some(BTreeSet::from([PodSecurityControl::PrivilegedContainers])),
        ..exception("privileged", NS, "escapeToHost", two_labels())
    };
    let t = kubearmor(vec![privileged]);
    assert_eq!(of(&t, Engine::KubeArmor), plain);
    let kubearmor_said: Vec<(&str, bool)> = (t.problems.iter())
        .filter(|p| p.message.starts_with("kubearmor"))
        .map(|p| (p.reason, p.blocking))
        .collect();
    assert_eq!(
        kubearmor_said,
        [("ExceptionNotHonoured", false)],
        "{:#?}",
        t.problems
    );
}

#[test]
fn kubearmor_leaves_the_excepted_pods_out_of_every_intent_it_enforces() {
    for intent in [
        "escapeToHost",
        "dnsManipulation",
        "swDeploymentTools",
        "unAuthorizedSaTokenAccess",
        "preventExecutionFromTempOrLogsFolders",
    ] {
        let np = sib_np(selector(), vec![block(intent, "no")]);
        let run = |exceptions| {
            let mut input = PolicyInput::namespaced(&np, UID);
            input.exceptions = exceptions;
            translate(&input, &Environment::default(), &EngineSet::all())
        };
        let plain = of(&run(vec![]), Engine::KubeArmor);
        let legacy = json!({"matchLabels": {"tier": "legacy"}});
        let t = run(vec![exception("vendor-agent", NS, intent, legacy)]);
        let kubearmor_said: Vec<&str> = (t.problems.iter())
            .filter(|p| p.message.starts_with("kubearmor"))
            .map(|p| p.message.as_str())
            .collect();
        assert_eq!(kubearmor_said, Vec::<&str>::new(), "{intent}");
        let excepted = of(&t, Engine::KubeArmor);
        assert!(!plain.is_empty(), "{intent}");
        assert_eq!(excepted.len(), plain.len(), "{intent}");
        for (got, plain) in excepted.iter().zip(&plain) {
            let mut want = plain.clone();
            want["spec"]["selector"] = web_not("tier=legacy");
            assert_eq!(got, &want, "{intent}");
        }
    }
}

/// dnsManipulation of cluster binding `web-csib` on every namespace, kept by the
/// ClusterNetworkPolicy engine, with `exceptions` in force.
fn cluster_network(exceptions: Vec<Excepted>) -> Translation {
    let cwnp = cwnp(
        all_namespaces(),
        selector(),
        vec![rule("dnsManipulation", "Block", None, json!({}))],
    );
    let mut input = PolicyInput::cluster(&cwnp, UID);
    input.exceptions = exceptions;
    let engines = EngineSet {
        preference: Preference::new(&[Engine::ClusterNetworkPolicy]).unwrap(),
        ..EngineSet::all()
    };
    translate(&input, &Environment::default(), &engines)
}

#[test]
fn cluster_network_policies_leave_the_excepted_pods_out_of_their_namespace_at_one_priority() {
    let plain = of(&cluster_network(vec![]), Engine::ClusterNetworkPolicy);
    assert_eq!(plain.len(), 1);
    let t = cluster_network(vec![
        exception("vendor-agent", NS, "dnsManipulation", two_labels()),
        exception("all-of-it", "legacy", "dnsManipulation", json!({})),
    ]);
    no_problems(&t);
    let split = of(&t, Engine::ClusterNetworkPolicy);
    assert_eq!(
        names(&split),
        [
            "web-csib-dnsmanipulation-x1",
            "web-csib-dnsmanipulation-x2",
            "web-csib-dnsmanipulation",
        ]
    );
    let namespaces = |also: Value| {
        json!({"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": ["kube-system", K8TLS_NS]},
            also,
        ]})
    };
    let pods = |left_out: Value| {
        let mut pods = selector();
        if !left_out.is_null() {
            pods["matchExpressions"] = json!([left_out]);
        }
        pods
    };
    let in_shop = json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": [NS]});
    let subjects: Vec<&Value> = split.iter().map(|p| &p["spec"]["subject"]).collect();
    assert_eq!(
        subjects,
        [
            &json!({"pods": {
                "namespaceSelector": namespaces(in_shop.clone()),
                "podSelector": pods(json!({"key": "team", "operator": "NotIn", "values": ["vendor"]})),
            }}),
            &json!({"pods": {
                "namespaceSelector": namespaces(in_shop),
                "podSelector": pods(json!({"key": "tier", "operator": "NotIn", "values": ["legacy"]})),
            }}),
            // The namespaces no exception is in; `legacy`, all of whose pods are let out, has
            // no policy of its own.
            &json!({"pods": {
                "namespaceSelector": namespaces(json!({"key": "kubernetes.io/metadata.name",
                    "operator": "NotIn", "values": ["legacy", NS]})),
                "podSelector": pods(Value::Null),
            }}),
        ]
    );
    // A ClusterSecurityIntentException naming two namespaces is in force in each: the
    // namespaces of neither, then each of them, one label at a time.
    let cluster = |namespace: &str| Excepted {
        kind: ExceptionKind::Cluster,
        ..exception("vendor-agents", namespace, "dnsManipulation", two_labels())
    };
    let t = cluster_network(vec![cluster(NS), cluster("billing")]);
    no_problems(&t);
    let both = of(&t, Engine::ClusterNetworkPolicy);
    assert_eq!(both.len(), 5, "{both:#?}");
    let rest = &both[4]["spec"]["subject"]["pods"]["namespaceSelector"]["matchExpressions"][1];
    assert_eq!(
        rest,
        &json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["billing", NS]})
    );
    let in_namespace: Vec<&Value> = both[..4]
        .iter()
        .map(
            |p| &p["spec"]["subject"]["pods"]["namespaceSelector"]["matchExpressions"][1]["values"],
        )
        .collect();
    assert_eq!(
        in_namespace,
        [
            &json!(["billing"]),
            &json!(["billing"]),
            &json!([NS]),
            &json!([NS])
        ]
    );

    // Otherwise the unexcepted policy, priority included.
    for p in &split {
        let mut p = p.clone();
        p["metadata"]["name"] = plain[0]["metadata"]["name"].clone();
        p["spec"]["subject"] = plain[0]["spec"]["subject"].clone();
        assert_eq!(p, plain[0]);
    }
}
