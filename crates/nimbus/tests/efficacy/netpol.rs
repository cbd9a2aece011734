//! dnsManipulation and denyExternalNetworkAccess, through both binding kinds: the
//! NetworkPolicies the operator wrote, evaluated by cyclonus's matcher for a pod the binding
//! selects, one it does not, a pod a binding in shadow mode selects, and a pod in a namespace
//! nothing binds.

use crate::matrix::{Matrix, verdict};
use crate::{Selecting, bind_cluster, bind_namespaced, cluster, intent, namespace, unbind_cluster};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Addresses are data for the decider only: no packet is sent anywhere.
const POD_IP: &str = "10.244.1.10";
const PEER_IP: &str = "10.244.1.11";
const KUBE_DNS_IP: &str = "10.244.0.2";
const PRIVATE_IP: &str = "10.1.2.3";
/// TEST-NET-3 (RFC 5737): an address outside the cluster.
pub(crate) const EXTERNAL_IP: &str = "203.0.113.10";

/// A traffic case, seen from the pod under test.
struct Case {
    name: &'static str,
    /// Traffic towards the pod (otherwise from it).
    ingress: bool,
    peer: fn(&str) -> Value,
    port: u16,
    protocol: &'static str,
}

fn kube_dns(_: &str) -> Value {
    pod("kube-system", KUBE_DNS_IP, json!({"k8s-app": "kube-dns"}))
}

fn same_namespace_pod(ns: &str) -> Value {
    pod(ns, PEER_IP, json!({"app": "db"}))
}

fn private_address(_: &str) -> Value {
    json!({"ip": PRIVATE_IP})
}

fn external_address(_: &str) -> Value {
    json!({"ip": EXTERNAL_IP})
}

fn in_cluster_pod(_: &str) -> Value {
    pod("elsewhere", "10.244.2.20", json!({"app": "client"}))
}

pub(crate) fn pod(ns: &str, ip: &str, labels: Value) -> Value {
    json!({"ip": ip, "namespace": ns, "namespaceLabels": {"kubernetes.io/metadata.name": ns},
           "podLabels": labels})
}

const CASES: &[Case] = &[
    Case {
        name: "to kube-dns 53/UDP",
        ingress: false,
        peer: kube_dns,
        port: 53,
        protocol: "UDP",
    },
    Case {
        name: "to kube-dns 53/TCP",
        ingress: false,
        peer: kube_dns,
        port: 53,
        protocol: "TCP",
    },
    Case {
        name: "to kube-dns 8080/TCP",
        ingress: false,
        peer: kube_dns,
        port: 8080,
        protocol: "TCP",
    },
    Case {
        name: "to a pod of its namespace 8080/TCP",
        ingress: false,
        peer: same_namespace_pod,
        port: 8080,
        protocol: "TCP",
    },
    Case {
        name: "to a private address 53/UDP",
        ingress: false,
        peer: private_address,
        port: 53,
        protocol: "UDP",
    },
    Case {
        name: "to a private address 443/TCP",
        ingress: false,
        peer: private_address,
        port: 443,
        protocol: "TCP",
    },
    Case {
        name: "to an external address 53/UDP",
        ingress: false,
        peer: external_address,
        port: 53,
        protocol: "UDP",
    },
    Case {
        name: "to an external address 443/TCP",
        ingress: false,
        peer: external_address,
        port: 443,
        protocol: "TCP",
    },
    Case {
        name: "from a pod of another namespace 8080/TCP",
        ingress: true,
        peer: in_cluster_pod,
        port: 8080,
        protocol: "TCP",
    },
    Case {
        name: "from an external address 8080/TCP",
        ingress: true,
        peer: external_address,
        port: 8080,
        protocol: "TCP",
    },
];

/// What a selected pod may do under each intent, as `nimbus explain` describes it; everything
/// else is denied to it, and pods the binding does not select are not restricted at all.
fn promised(intent: &str, case: &str) -> bool {
    let allowed: &[&str] = match intent {
        // Name resolution through the cluster DNS only.
        "dnsManipulation" => &[
            "to kube-dns 53/UDP",
            "to kube-dns 53/TCP",
            "from a pod of another namespace 8080/TCP",
            "from an external address 8080/TCP",
        ],
        // Private and pod networks only, and only DNS ports outward.
        "denyExternalNetworkAccess" => &[
            "to kube-dns 53/UDP",
            "to kube-dns 53/TCP",
            "to a private address 53/UDP",
            "from a pod of another namespace 8080/TCP",
        ],
        other => panic!("no promise written down for {other}"),
    };
    allowed.contains(&case)
}

#[tokio::test]
async fn dns_manipulation_allows_only_cluster_dns() {
    matrix("dnsManipulation").await;
}

#[tokio::test]
async fn deny_external_network_access_keeps_pods_off_external_networks() {
    matrix("denyExternalNetworkAccess").await;
}

async fn matrix(id: &'static str) {
    let client = cluster();
    let si = intent(&client, id, "Block", json!({})).await;
    let selecting = Selecting {
        labels: json!({"app": "web"}),
        allow_sensitive: None,
        shadow: false,
    };
    let (by_sib, by_csib, shadowed, unbound) = (
        namespace("eff-np-sib").await,
        namespace("eff-np-csib").await,
        namespace("eff-np-shadow").await,
        namespace("eff-np-unbound").await,
    );
    bind_namespaced(&client, by_sib.name(), &si, &selecting).await;
    let csib = bind_cluster(&client, by_csib.name(), &si, &selecting).await;
    let in_shadow = Selecting {
        shadow: true,
        ..selecting
    };
    bind_namespaced(&client, shadowed.name(), &si, &in_shadow).await;

    // What the operator wrote, as the API server holds it.
    let mut policies = Vec::new();
    for ns in [
        by_sib.name(),
        by_csib.name(),
        shadowed.name(),
        unbound.name(),
    ] {
        let api = Api::<NetworkPolicy>::namespaced(client.clone(), ns);
        let list = api.list(&ListParams::default()).await.expect("listing");
        policies.extend(list.items);
    }
    assert!(!policies.is_empty(), "the operator wrote no NetworkPolicy");

    let subjects = [
        ("selected pod, SecurityIntentBinding", by_sib.name(), "web"),
        ("unselected pod, SecurityIntentBinding", by_sib.name(), "db"),
        (
            "selected pod, ClusterSecurityIntentBinding",
            by_csib.name(),
            "web",
        ),
        (
            "unselected pod, ClusterSecurityIntentBinding",
            by_csib.name(),
            "db",
        ),
        (
            "selected pod, SecurityIntentBinding in shadow mode",
            shadowed.name(),
            "web",
        ),
        ("pod in an unbound namespace", unbound.name(), "web"),
    ];
    let mut traffic = Vec::new();
    for (s, (_, ns, app)) in subjects.iter().enumerate() {
        let me = pod(ns, POD_IP, json!({"app": app}));
        for (c, case) in CASES.iter().enumerate() {
            let peer = (case.peer)(ns);
            let (source, destination) = if case.ingress {
                (peer, me.clone())
            } else {
                (me.clone(), peer)
            };
            traffic.push(json!({"name": format!("{s}/{c}"), "source": source,
                                "destination": destination, "port": case.port,
                                "protocol": case.protocol}));
        }
    }
    let verdicts: BTreeMap<String, bool> = crate::common::netpol_decide::<BTreeMap<String, Value>>(
        &json!({"policies": policies, "traffic": traffic}),
    )
    .into_iter()
    .map(|(name, v)| (name, v["allowed"].as_bool().expect("allowed")))
    .collect();

    // Shadow mode enforces nothing: its pod is as free as an unbound one.
    let selected = |s: usize| {
        subjects[s].2 == "web" && ![unbound.name(), shadowed.name()].contains(&subjects[s].1)
    };
    let matrix = Matrix {
        id: match id {
            "dnsManipulation" => "netpol-dnsManipulation",
            _ => "netpol-denyExternalNetworkAccess",
        }
        .into(),
        title: format!("{id} (NetworkPolicy, decided by cyclonus)"),
        case_header: "traffic of the pod",
        subjects: subjects.iter().map(|(s, ..)| (*s).to_owned()).collect(),
        rows: CASES
            .iter()
            .enumerate()
            .map(|(c, case)| {
                let cells = (0..subjects.len())
                    .map(|s| verdict(verdicts[&format!("{s}/{c}")]))
                    .collect();
                (case.name.to_owned(), cells)
            })
            .collect(),
        expected: CASES
            .iter()
            .map(|case| {
                let cells = (0..subjects.len())
                    .map(|s| verdict(!selected(s) || promised(id, case.name)))
                    .collect();
                (case.name.to_owned(), cells)
            })
            .collect(),
    };
    unbind_cluster(&client, &csib).await;
    matrix.assert();
}
