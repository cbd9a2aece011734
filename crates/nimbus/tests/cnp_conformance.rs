//! network-policy-api v0.3.0's ClusterNetworkPolicy conformance tests (Admin tier, Baseline
//! tier, and their integration with NetworkPolicies) as data, `tests/data/cnp_conformance.json`
//! (ported by `hack/port-cnp-conformance.py`, whose header says how the cluster is modelled and
//! that no case was skipped), against kube-network-policies' own policy engine
//! (tools/knp-decider) and the core's evaluator (`nimbus_core::netpol::Network`, which previews
//! and judges what the clusternetworkpolicy engine writes): every probe of every subtest must
//! get the verdict the conformance test expects from both. This checks the oracle, and the
//! port, before the operator's ClusterNetworkPolicy engine is judged by either.
//!
//! A vector is one subtest: the ClusterNetworkPolicies and NetworkPolicies as the test had
//! patched them by then, the cluster's nodes, and its probes (client pod → server, protocol,
//! port, whether it should connect). Addresses are data only: nothing is sent anywhere.

mod common;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use nimbus_core::netpol::{ClusterNetworkPolicy, Network, Node, Peer, PodPeer, Policies, Traffic};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

#[derive(Deserialize)]
struct Vector {
    name: String,
    #[serde(rename = "clusterNetworkPolicies")]
    cluster_network_policies: Vec<Value>,
    policies: Vec<Value>,
    nodes: Vec<Value>,
    traffic: Vec<Probe>,
}

#[derive(Deserialize, serde::Serialize)]
struct Probe {
    name: String,
    expected: bool,
    #[serde(flatten)]
    traffic: Value,
}

#[derive(Deserialize, Debug)]
struct Verdict {
    ingress: bool,
    egress: bool,
    allowed: bool,
}

#[test]
fn the_evaluator_meets_the_conformance_expectations() {
    let vectors: Vec<Vector> = serde_json::from_str(include_str!("data/cnp_conformance.json"))
        .expect("tests/data/cnp_conformance.json");
    let (mut cells, mut disagreements) = (0, Vec::new());
    for vector in &vectors {
        let cluster: Vec<ClusterNetworkPolicy> =
            serde_json::from_value(json!(vector.cluster_network_policies)).expect("policies");
        let policies: Vec<NetworkPolicy> =
            serde_json::from_value(json!(vector.policies)).expect("policies");
        let network = Network::new(&cluster, Policies::new(&policies).expect("valid"))
            .expect("valid")
            .with_nodes(vector.nodes.iter().map(node).collect());
        for probe in &vector.traffic {
            cells += 1;
            let got = network.decide(&traffic(&probe.traffic)).allowed();
            if got != probe.expected {
                disagreements.push(format!(
                    "{} / {}: expected {}, got {}",
                    vector.name,
                    probe.name,
                    allowed(probe.expected),
                    allowed(got)
                ));
            }
        }
    }
    assert!(
        disagreements.is_empty(),
        "the evaluator disagrees with {} of {cells} conformance probes:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
    eprintln!("{cells} conformance probes: the evaluator agrees with all");
}

/// A decider peer as the evaluator takes it.
fn peer(peer: &Value) -> Peer {
    let labels = |v: &Value| serde_json::from_value(v.clone()).unwrap_or_default();
    Peer {
        ip: peer["ip"]
            .as_str()
            .map(|ip| ip.parse().expect("an address")),
        pod: peer["namespace"].as_str().map(|ns| PodPeer {
            namespace: ns.to_owned(),
            namespace_labels: labels(&peer["namespaceLabels"]),
            pod_labels: labels(&peer["podLabels"]),
        }),
    }
}

/// A decider traffic as the evaluator takes it: the destination port's name is that of the
/// destination's container port with the traffic's number and protocol.
fn traffic(t: &Value) -> Traffic {
    let port = t["port"].as_u64().expect("port");
    let protocol = t["protocol"].as_str().expect("protocol");
    let port_name = (t["destination"]["ports"].as_array().into_iter().flatten())
        .find(|p| p["port"].as_u64() == Some(port) && p["protocol"] == protocol)
        .and_then(|p| p["name"].as_str().map(str::to_owned));
    Traffic {
        source: peer(&t["source"]),
        destination: peer(&t["destination"]),
        port: u16::try_from(port).expect("a port"),
        port_name,
        protocol: protocol.to_owned(),
    }
}

fn node(node: &Value) -> Node {
    let addresses = (node["status"]["addresses"].as_array().into_iter().flatten())
        .filter(|a| a["type"] == "InternalIP" || a["type"] == "ExternalIP")
        .filter_map(|a| a["address"].as_str()?.parse().ok())
        .collect();
    Node {
        labels: serde_json::from_value(node["metadata"]["labels"].clone()).unwrap_or_default(),
        addresses,
    }
}

#[test]
fn kube_network_policies_meets_the_conformance_expectations() {
    let vectors: Vec<Vector> = serde_json::from_str(include_str!("data/cnp_conformance.json"))
        .expect("tests/data/cnp_conformance.json");
    assert!(!vectors.is_empty(), "no conformance vectors");
    let scenarios: Vec<Value> = vectors
        .iter()
        .map(|v| {
            json!({
                "clusterNetworkPolicies": v.cluster_network_policies,
                "policies": v.policies,
                "nodes": v.nodes,
                "traffic": v.traffic,
            })
        })
        .collect();
    let verdicts: Vec<BTreeMap<String, Verdict>> =
        common::knp_decide(&json!({ "scenarios": scenarios }));
    assert_eq!(verdicts.len(), vectors.len(), "one verdict map per vector");

    let mut cells = 0;
    let mut disagreements = Vec::new();
    for (vector, verdicts) in vectors.iter().zip(&verdicts) {
        for probe in &vector.traffic {
            cells += 1;
            let got = verdicts
                .get(&probe.name)
                .unwrap_or_else(|| panic!("no verdict for {} / {}", vector.name, probe.name));
            if got.allowed != probe.expected {
                disagreements.push(format!(
                    "{} / {}: expected {}, got {} (egress {}, ingress {})",
                    vector.name,
                    probe.name,
                    allowed(probe.expected),
                    allowed(got.allowed),
                    allowed(got.egress),
                    allowed(got.ingress),
                ));
            }
        }
    }
    for d in &disagreements {
        eprintln!("{d}");
    }
    assert!(
        disagreements.is_empty(),
        "kube-network-policies disagrees with {} of {cells} conformance probes ({} vectors); \
         each is printed above",
        disagreements.len(),
        vectors.len(),
    );
    eprintln!(
        "{cells} conformance probes in {} vectors: kube-network-policies agrees with all",
        vectors.len()
    );
}

fn allowed(verdict: bool) -> &'static str {
    if verdict { "allowed" } else { "denied" }
}
