//! The Admin tier of ClusterNetworkPolicy (`nimbus_core::netpol::Network`) against
//! kube-network-policies' own policy engine (tools/knp-decider): random Admin-tier
//! ClusterNetworkPolicies, with or without NetworkPolicies beside them, and random traffic;
//! every case must get the same overall verdict from both.
//!
//! `NIMBUS_CNP_ORACLE_CASES` cases (default 10,000), from `NIMBUS_NETPOL_ORACLE_SEED` (default
//! 1). The policies use what the clusternetworkpolicy engine writes and the rest of the API
//! kube-network-policies evaluates without a cluster: subjects by namespace or pod, peers by
//! namespace, pod or network, actions, priorities (equal ones too: both break ties by name),
//! and protocols with ports, ranges and named ports. Not `nodes` or `domainNames` peers, which
//! need Nodes and a resolver. The Baseline tier is left out: kube-network-policies sends a pod
//! that NetworkPolicies select for the other direction only straight to Accept, skipping it
//! (see the cluster module of `nimbus_core::netpol`).

use crate::generate::{
    NAMESPACE_LABELS, POD_LABELS, PORT_NAMES, PORTS, Rng, TRAFFIC_PER_SET, World,
    as_a_cluster_holds, cidr, edges, selector,
};
use crate::{env, pretty, traffic_json};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use nimbus_core::netpol::{ClusterNetworkPolicy, Network, Policies, Traffic};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Cases per decider process.
const SETS_PER_BATCH: usize = 2_000;

struct Case {
    cluster: Vec<ClusterNetworkPolicy>,
    policies: Vec<NetworkPolicy>,
    traffic: Vec<Traffic>,
}

#[test]
fn the_admin_tier_agrees_with_kube_network_policies() {
    let cases: usize = env("NIMBUS_CNP_ORACLE_CASES", 10_000);
    let seed: u64 = env("NIMBUS_NETPOL_ORACLE_SEED", 1);
    let sets: Vec<Case> = (0..cases.div_ceil(TRAFFIC_PER_SET))
        .map(|i| Case::random(&mut Rng::new(seed ^ 0x0C1A_57E4, i as u64)))
        .collect();
    let (mut compared, mut allowed) = (0, 0);
    let mut disagreements = Vec::new();
    for batch in sets.chunks(SETS_PER_BATCH) {
        let scenarios: Vec<Value> = batch.iter().map(Case::input).collect();
        let verdicts: Vec<BTreeMap<String, Value>> =
            crate::common::knp_decide(&json!({ "scenarios": scenarios }));
        assert_eq!(verdicts.len(), batch.len(), "a verdict map per scenario");
        for ((case, input), verdicts) in batch.iter().zip(&scenarios).zip(&verdicts) {
            let network = Network::new(
                &case.cluster,
                Policies::new(&case.policies).expect("generated policies are valid"),
            )
            .expect("generated cluster policies are valid");
            for (t, traffic) in case.traffic.iter().enumerate().take(cases - compared) {
                let ours = network.decide(traffic).allowed();
                let theirs = verdicts[&t.to_string()]["allowed"].as_bool();
                compared += 1;
                allowed += usize::from(ours);
                if Some(ours) != theirs {
                    let mut input = input.clone();
                    input["traffic"] = json!([traffic_json(t, traffic)]);
                    disagreements.push(format!(
                        "traffic {t}: nimbus allowed={ours}, kube-network-policies {theirs:?}\n{}",
                        pretty(&input)
                    ));
                }
            }
        }
    }
    println!(
        "admin-tier oracle: {compared} cases (seed {seed}) compared with kube-network-policies, \
         {} disagreements; {allowed} allowed, {} denied",
        disagreements.len(),
        compared - allowed
    );
    assert!(
        disagreements.is_empty(),
        "{} of {compared} cases judged differently from kube-network-policies; the first:\n{}",
        disagreements.len(),
        disagreements[0]
    );
}

impl Case {
    fn random(rng: &mut Rng) -> Self {
        let world = World::random(rng);
        let cluster: Vec<ClusterNetworkPolicy> = (0..rng.between(1, 3))
            .map(|i| {
                let value = cluster_policy(rng, i);
                serde_json::from_value(value.clone())
                    .unwrap_or_else(|e| panic!("generated an unreadable policy ({e}): {value}"))
            })
            .collect();
        // Half the cases with NetworkPolicies after the Admin tier: what Pass hands on to.
        let policies: Vec<NetworkPolicy> = match rng.percent(50) {
            true => (0..rng.between(1, 3))
                .map(|i| stored(world.network_policy(rng, i)))
                .collect(),
            false => Vec::new(),
        };
        let (mut networks, mut ports) = edges(&policies);
        for policy in &cluster {
            for rule in &policy.spec.egress {
                for cidr in rule.to.iter().flat_map(|p| &p.networks) {
                    let (address, prefix) = cidr.split_once('/').expect("generated CIDR");
                    let address: IpAddr = address.parse().expect("generated address");
                    networks.push((address, prefix.parse().expect("generated prefix")));
                }
            }
            let rules = (policy.spec.ingress.iter().map(|r| &r.protocols))
                .chain(policy.spec.egress.iter().map(|r| &r.protocols));
            for protocol in rules.flatten() {
                let ranges = [&protocol.tcp, &protocol.udp, &protocol.sctp];
                for range in ranges
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.destination_port.as_ref().and_then(|d| d.range.as_ref()))
                {
                    for edge in [range.start - 1, range.start, range.end, range.end + 1] {
                        ports.extend(u16::try_from(edge).ok().filter(|p| *p > 0));
                    }
                }
            }
        }
        let mut traffic = world.traffic(rng, &networks, &ports);
        // Only a pod has named ports (as [`Traffic::port_name`] says).
        for t in &mut traffic {
            as_a_cluster_holds(t);
            if t.destination.pod.is_none() {
                t.port_name = None;
            }
        }
        Case {
            cluster,
            policies,
            traffic,
        }
    }

    /// As knp-decider reads it.
    fn input(&self) -> Value {
        let traffic: Vec<Value> = (self.traffic.iter().enumerate())
            .map(|(t, traffic)| traffic_json(t, traffic))
            .collect();
        json!({"clusterNetworkPolicies": self.cluster, "policies": self.policies,
               "traffic": traffic})
    }
}

/// `policy` as the API server would store it: without the peers it rejects (`{}`, an ipBlock
/// with a selector), which the generator makes for cyclonus, whose reading of them is Go's.
fn stored(mut policy: NetworkPolicy) -> NetworkPolicy {
    let spec = policy.spec.as_mut().expect("a spec");
    let ingress = spec.ingress.iter_mut().flatten().map(|r| &mut r.from);
    let egress = spec.egress.iter_mut().flatten().map(|r| &mut r.to);
    for peers in ingress.chain(egress).flatten() {
        peers.retain(|p| {
            p.ip_block.is_some() || p.pod_selector.is_some() || p.namespace_selector.is_some()
        });
        for peer in peers.iter_mut().filter(|p| p.ip_block.is_some()) {
            peer.pod_selector = None;
            peer.namespace_selector = None;
        }
    }
    policy
}

fn cluster_policy(rng: &mut Rng, i: usize) -> Value {
    let subject = match rng.percent(50) {
        true => json!({"namespaces": selector(rng, &NAMESPACE_LABELS)}),
        false => json!({"pods": pods(rng)}),
    };
    let ingress: Vec<Value> = (0..rng.between(0, 3))
        .map(|_| {
            let from: Vec<Value> = (0..rng.between(1, 2)).map(|_| pod_peer(rng)).collect();
            rule(rng, "from", from)
        })
        .collect();
    let egress: Vec<Value> = (0..rng.between(0, 3))
        .map(|_| {
            let to: Vec<Value> = (0..rng.between(1, 3))
                .map(|_| match rng.percent(40) {
                    true => {
                        let networks: Vec<String> =
                            (0..rng.between(1, 2)).map(|_| cidr(rng).0).collect();
                        json!({ "networks": networks })
                    }
                    false => pod_peer(rng),
                })
                .collect();
            rule(rng, "to", to)
        })
        .collect();
    json!({
        "apiVersion": "policy.networking.k8s.io/v1alpha2", "kind": "ClusterNetworkPolicy",
        "metadata": {"name": format!("cnp-{i}")},
        "spec": {"tier": "Admin", "priority": rng.pick(&[0, 1, 1, 10, 500, 1000]),
                 "subject": subject, "ingress": ingress, "egress": egress},
    })
}

fn pods(rng: &mut Rng) -> Value {
    json!({"namespaceSelector": selector(rng, &NAMESPACE_LABELS),
           "podSelector": selector(rng, &POD_LABELS)})
}

fn pod_peer(rng: &mut Rng) -> Value {
    match rng.percent(50) {
        true => json!({"namespaces": selector(rng, &NAMESPACE_LABELS)}),
        false => json!({ "pods": pods(rng) }),
    }
}

fn rule(rng: &mut Rng, peers: &str, to: Vec<Value>) -> Value {
    let action = rng.pick(&["Accept", "Deny", "Pass"]);
    let mut rule = json!({"action": action, peers: to});
    if rng.percent(60) {
        let protocols: Vec<Value> = (0..rng.between(1, 2)).map(|_| protocol(rng)).collect();
        rule["protocols"] = json!(protocols);
    }
    rule
}

fn protocol(rng: &mut Rng) -> Value {
    if rng.percent(15) {
        return json!({"destinationNamedPort": rng.pick(PORT_NAMES)});
    }
    let port = match rng.below(3) {
        0 => json!({}),
        1 => json!({"destinationPort": {"number": rng.pick(PORTS)}}),
        _ => {
            let start = rng.pick(PORTS);
            let end = u32::from(start) + rng.pick(&[0, 1, 10, 100, 1000]);
            json!({"destinationPort": {"range": {"start": start, "end": end.min(65535)}}})
        }
    };
    let mut protocol = json!({});
    protocol[rng.pick(&["tcp", "tcp", "udp", "sctp"])] = port;
    protocol
}
