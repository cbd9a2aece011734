//! NetworkPolicy: dnsManipulation's and denyExternalNetworkAccess's NetworkPolicies.

use crate::builders::*;
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{EngineSet, Environment};
use serde_json::{Value, json};

fn kube_dns_peer() -> Value {
    json!({
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    })
}

fn dns_ports() -> Value {
    json!([{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}])
}

fn ip_block(cidr: &str) -> Value {
    json!({"ipBlock": {"cidr": cidr}})
}

fn netpol(np: &str, suffix: &str, pod_selector: Value, spec: Value) -> Value {
    let mut full = json!({ "podSelector": pod_selector });
    for (k, v) in spec.as_object().unwrap() {
        full[k] = v.clone();
    }
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta(&format!("{np}-{suffix}"), Some(NS), "netpol", None, np_owner(np)),
        "spec": full,
    })
}

/// dnsManipulation's NetworkPolicy: node pod CIDRs first, then the kube-dns peer.
fn dns_netpol(np: &str, pod_selector: Value, cidrs: &[&str]) -> Value {
    let mut to: Vec<Value> = cidrs.iter().map(|c| ip_block(c)).collect();
    to.push(kube_dns_peer());
    netpol(
        np,
        "dnsmanipulation",
        pod_selector,
        json!({
            "egress": [{"ports": dns_ports(), "to": to}],
            "policyTypes": ["Egress"],
        }),
    )
}

/// denyExternalNetworkAccess's NetworkPolicy: ingress from node CIDRs + RFC 1918; egress to kube-dns, node CIDRs, RFC 1918.
fn deny_external_netpol(np: &str, pod_selector: Value, cidrs: &[&str]) -> Value {
    let private = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"];
    let from: Vec<Value> = cidrs.iter().chain(&private).map(|c| ip_block(c)).collect();
    let mut to = vec![kube_dns_peer()];
    to.extend(from.iter().cloned());
    netpol(
        np,
        "denyexternalnetworkaccess",
        pod_selector,
        json!({
            "ingress": [{"from": from}],
            "egress": [{"ports": dns_ports(), "to": to}],
            "policyTypes": ["Egress", "Ingress"],
        }),
    )
}

fn netpol_rules() -> Vec<Value> {
    vec![
        block("dnsManipulation", "Keep DNS honest"),
        block("denyExternalNetworkAccess", "Private only"),
    ]
}

/// Both NetworkPolicies, for both kinds of binding's namespace policy: the node pod CIDRs
/// (difference 8) come first, sorted; no labels is `podSelector: {}` (Go omits the empty
/// `matchLabels` map), which selects every pod.
#[test]
fn netpol_namespace_policies() {
    struct Case {
        case: &'static str,
        selector: Value,
        cluster_binding: bool,
        node_pod_cidrs: &'static [&'static str],
        pod_selector: Value,
        cidrs: &'static [&'static str],
    }
    let cases = [
        Case {
            case: "namespaced binding without node CIDRs",
            selector: selector(),
            cluster_binding: false,
            node_pod_cidrs: &[],
            pod_selector: selector(),
            cidrs: &[],
        },
        Case {
            case: "node pod CIDRs come first, sorted",
            selector: selector(),
            cluster_binding: false,
            node_pod_cidrs: &["10.244.1.0/24", "10.244.0.0/24"],
            pod_selector: selector(),
            cidrs: &["10.244.0.0/24", "10.244.1.0/24"],
        },
        Case {
            case: "cluster binding's namespace policy",
            selector: selector(),
            cluster_binding: true,
            node_pod_cidrs: &["10.244.0.0/24"],
            pod_selector: selector(),
            cidrs: &["10.244.0.0/24"],
        },
        Case {
            case: "empty selector selects every pod",
            selector: json!({}),
            cluster_binding: false,
            node_pod_cidrs: &[],
            pod_selector: json!({}),
            cidrs: &[],
        },
        Case {
            case: "empty matchLabels selects every pod",
            selector: json!({"matchLabels": {}}),
            cluster_binding: false,
            node_pod_cidrs: &[],
            pod_selector: json!({}),
            cidrs: &[],
        },
    ];
    for c in cases {
        let env = Environment {
            node_pod_cidrs: c.node_pod_cidrs.iter().map(|&c| c.to_owned()).collect(),
            ..Environment::default()
        };
        let (np, np_name) = if c.cluster_binding {
            (csib_np(c.selector, netpol_rules()), CSIB_NP)
        } else {
            (sib_np(c.selector, netpol_rules()), SIB_NP)
        };
        let t = run_np_with(&np, &env, &EngineSet::all());
        no_problems_in(c.case, &t);
        assert_objects_in(
            c.case,
            &of(&t, Engine::NetworkPolicy),
            &[
                dns_netpol(np_name, c.pod_selector.clone(), c.cidrs),
                deny_external_netpol(np_name, c.pod_selector, c.cidrs),
            ],
        );
    }
}

#[test]
fn netpol_cluster_nimbus_policy_generates_nothing() {
    let t = run_cwnp(&cwnp(
        json!({"matchNames": ["*"]}),
        selector(),
        netpol_rules(),
    ));
    assert_objects(&of(&t, Engine::NetworkPolicy), &[]);
    no_problems(&t);
}
