//! network-policy-api v0.3.0's ClusterNetworkPolicy conformance tests (Admin tier, Baseline
//! tier, and their integration with NetworkPolicies) as data, `tests/data/cnp_conformance.json`
//! (ported by `hack/port-cnp-conformance.py`, whose header says how the cluster is modelled and
//! that no case was skipped), against kube-network-policies' own policy engine
//! (tools/knp-decider): every probe of every subtest must get the verdict the conformance test
//! expects. This checks the oracle, and the port, before the operator's ClusterNetworkPolicy
//! engine is judged by either.
//!
//! A vector is one subtest: the ClusterNetworkPolicies and NetworkPolicies as the test had
//! patched them by then, the cluster's nodes, and its probes (client pod → server, protocol,
//! port, whether it should connect). Addresses are data only: nothing is sent anywhere.

mod common;

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
