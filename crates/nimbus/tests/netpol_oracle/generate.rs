//! The random cases the oracles judge: NetworkPolicies, and the traffic judged against them.
//!
//! The generator covers the NetworkPolicy features (see the netpol module documentation) over
//! small vocabularies, so that selectors, CIDRs and ports sometimes match and sometimes do not,
//! and a few policies the API server would reject but cyclonus judges (a peer `{}`, an ipBlock
//! with a selector, CIDRs with host bits set). It avoids the two places where the evaluator
//! follows Kubernetes rather than cyclonus: `NotIn` only on keys every pod or namespace
//! carries, and no empty label value. Addresses are data only: nothing is sent anywhere.

use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nimbus_core::netpol::{Peer, PodPeer, Traffic};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Traffics judged against each random policy set.
pub const TRAFFIC_PER_SET: usize = 5;

/// A policy set and the traffic judged against it.
pub struct Scenario {
    pub policies: Vec<NetworkPolicy>,
    pub traffic: Vec<Traffic>,
}

/// splitmix64: small, seeded, and the same everywhere.
pub struct Rng(u64);

impl Rng {
    /// The generator of policy set `index`: each set has its own stream, so a set does not
    /// change when the ones before it do.
    pub fn new(seed: u64, index: u64) -> Self {
        let mut rng = Rng(seed ^ index.wrapping_mul(0xA076_1D64_78BD_642F));
        rng.next();
        rng
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// In `low..=high`.
    pub fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    pub fn percent(&mut self, p: usize) -> bool {
        self.below(100) < p
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Label keys and values of pods or namespaces, the first key carried by every one.
pub struct Vocabulary {
    pub keys: &'static [(&'static str, &'static [&'static str])],
}

pub const POD_LABELS: Vocabulary = Vocabulary {
    keys: &[
        ("app", &["web", "db", "api"]),
        ("tier", &["front", "back"]),
        ("track", &["stable", "canary"]),
    ],
};

/// Namespace labels: the API server sets `kubernetes.io/metadata.name` on every namespace.
pub const NAMESPACE_LABELS: Vocabulary = Vocabulary {
    keys: &[
        ("kubernetes.io/metadata.name", NAMESPACES),
        ("env", &["prod", "dev"]),
        ("team", &["red", "blue"]),
    ],
};

pub const NAMESPACES: &[&str] = &["alpha", "beta", "gamma"];
/// A namespace no policy is in.
pub const OTHER_NAMESPACE: &str = "delta";
pub const PORTS: &[u16] = &[53, 80, 443, 5432, 8080, 8443, 9090];
pub const OTHER_PORTS: &[u16] = &[54, 81, 444, 1000, 5433, 8100, 9000, 30000];
pub const PORT_NAMES: &[&str] = &["http", "dns", "metrics"];

/// Address pools: pod networks, private ranges and documentation ranges (RFC 5737, RFC 3849),
/// given by their fixed high bits; addresses vary in the low byte(s).
pub const V4_POD_POOLS: &[[u8; 3]] = &[[10, 244, 1], [10, 244, 2]];
pub const V4_POOLS: &[[u8; 3]] = &[
    [10, 244, 1],
    [10, 244, 2],
    [10, 1, 2],
    [172, 16, 5],
    [192, 168, 1],
    [192, 0, 2],
    [198, 51, 100],
    [203, 0, 113],
];
pub const V6_POD_POOLS: &[[u16; 4]] = &[[0xfd00, 0x10, 0x244, 1], [0xfd00, 0x10, 0x244, 2]];
pub const V6_POOLS: &[[u16; 4]] = &[
    [0xfd00, 0x10, 0x244, 1],
    [0xfd00, 0x10, 0x244, 2],
    [0x2001, 0xdb8, 0, 0],
    [0x2001, 0xdb8, 1, 0],
    [0x2001, 0xdb8, 1, 2],
];
pub const V4_PREFIXES: &[u32] = &[0, 8, 12, 16, 20, 22, 24, 25, 26, 27, 28, 30, 31, 32];
pub const V6_PREFIXES: &[u32] = &[0, 16, 32, 40, 48, 56, 64, 96, 112, 120, 124, 127, 128];

impl Scenario {
    pub fn random(rng: &mut Rng) -> Self {
        let world = World::random(rng);
        let policies: Vec<NetworkPolicy> = (0..rng.between(1, 4))
            .map(|i| world.network_policy(rng, i))
            .collect();
        let (networks, edges) = edges(&policies);
        let traffic = world.traffic(rng, &networks, &edges);
        Scenario { policies, traffic }
    }
}

/// The namespaces of a case, with their labels.
pub struct World {
    pub namespaces: Vec<&'static str>,
    pub labels: Vec<BTreeMap<String, String>>,
}

impl World {
    pub fn random(rng: &mut Rng) -> Self {
        let mut namespaces = NAMESPACES.to_vec();
        namespaces.truncate(rng.between(2, 3));
        let labels = (namespaces.iter())
            .map(|ns| {
                let mut labels = labels(rng, &NAMESPACE_LABELS);
                labels.insert("kubernetes.io/metadata.name".into(), (*ns).into());
                labels
            })
            .collect();
        World { namespaces, labels }
    }

    /// A random NetworkPolicy `np-<i>` in one of the namespaces.
    pub fn network_policy(&self, rng: &mut Rng, i: usize) -> NetworkPolicy {
        let namespace = rng.pick(&self.namespaces);
        let value = policy(rng, &format!("np-{i}"), namespace);
        serde_json::from_value(value.clone())
            .unwrap_or_else(|e| panic!("generated an unreadable policy ({e}): {value}"))
    }

    /// [`TRAFFIC_PER_SET`] random traffics. They often go to or from the edges the policies
    /// draw: an address inside one of their `networks` (CIDRs, excepts), a port at one of
    /// their `edges` (either end of a range). Uniform draws hit those rarely, and a wrong
    /// `except` or range end would go unseen.
    pub fn traffic(
        &self,
        rng: &mut Rng,
        networks: &[(IpAddr, u32)],
        edges: &[u16],
    ) -> Vec<Traffic> {
        let ip = |rng: &mut Rng, pod: bool| {
            if !networks.is_empty() && rng.percent(30) {
                let (network, prefix) = rng.pick(networks);
                inside(rng, network, prefix)
            } else {
                address(rng, pod)
            }
        };
        let peer = |rng: &mut Rng| {
            if rng.percent(25) {
                return Peer {
                    ip: Some(ip(rng, false)),
                    pod: None,
                };
            }
            let (namespace, namespace_labels) = if rng.percent(5) {
                let mut labels = labels(rng, &NAMESPACE_LABELS);
                labels.insert("kubernetes.io/metadata.name".into(), OTHER_NAMESPACE.into());
                (OTHER_NAMESPACE.to_owned(), labels)
            } else {
                let i = rng.below(self.namespaces.len());
                (self.namespaces[i].to_owned(), self.labels[i].clone())
            };
            Peer {
                ip: Some(ip(rng, true)),
                pod: Some(PodPeer {
                    namespace,
                    namespace_labels,
                    pod_labels: labels(rng, &POD_LABELS),
                }),
            }
        };
        (0..TRAFFIC_PER_SET)
            .map(|_| Traffic {
                source: peer(rng),
                destination: peer(rng),
                port: if !edges.is_empty() && rng.percent(20) {
                    rng.pick(edges)
                } else if rng.percent(75) {
                    rng.pick(PORTS)
                } else if rng.percent(80) {
                    rng.pick(OTHER_PORTS)
                } else {
                    rng.between(1, 65535) as u16
                },
                port_name: if rng.percent(50) {
                    None
                } else {
                    Some(rng.pick(&["http", "dns", "metrics", "grpc"]).to_owned())
                },
                protocol: rng.pick(&["TCP", "TCP", "UDP", "SCTP"]).to_owned(),
            })
            .collect()
    }
}

/// The networks in the policies' ipBlocks (`cidr` and `except`, as written) and the ports at
/// the edges of their port ranges.
pub fn edges(policies: &[NetworkPolicy]) -> (Vec<(IpAddr, u32)>, Vec<u16>) {
    let (mut networks, mut ports) = (Vec::new(), Vec::new());
    for spec in policies.iter().filter_map(|p| p.spec.as_ref()) {
        let ingress = (spec.ingress.iter().flatten()).map(|r| (&r.from, &r.ports));
        let egress = (spec.egress.iter().flatten()).map(|r| (&r.to, &r.ports));
        for (peers, rule_ports) in ingress.chain(egress) {
            for block in peers.iter().flatten().filter_map(|p| p.ip_block.as_ref()) {
                for cidr in std::iter::once(&block.cidr).chain(block.except.iter().flatten()) {
                    let (address, prefix) = cidr.split_once('/').expect("generated CIDR");
                    networks.push((
                        address.parse().expect("generated address"),
                        prefix.parse().expect("generated prefix"),
                    ));
                }
            }
            for port in rule_ports.iter().flatten() {
                if let (Some(IntOrString::Int(from)), Some(to)) = (&port.port, port.end_port) {
                    for edge in [from - 1, *from, to, to + 1] {
                        ports.extend(u16::try_from(edge).ok().filter(|p| *p > 0));
                    }
                }
            }
        }
    }
    (networks, ports)
}

/// A random address inside `network/prefix` (of its family, IPv4-mapped ones included).
pub fn inside(rng: &mut Rng, network: IpAddr, prefix: u32) -> IpAddr {
    match network {
        IpAddr::V4(a) => {
            let host = rng.next() as u32 & !mask4(prefix);
            IpAddr::V4(Ipv4Addr::from((u32::from(a) & mask4(prefix)) | host))
        }
        IpAddr::V6(a) => {
            let host = (u128::from(rng.next()) << 64 | u128::from(rng.next())) & !mask6(prefix);
            IpAddr::V6(Ipv6Addr::from((u128::from(a) & mask6(prefix)) | host))
        }
    }
}

/// The labels of a pod or namespace: the first key always (so `NotIn` on it is judged alike),
/// the others sometimes.
pub fn labels(rng: &mut Rng, vocabulary: &Vocabulary) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (i, (key, values)) in vocabulary.keys.iter().enumerate() {
        if i == 0 || rng.percent(50) {
            out.insert((*key).to_owned(), rng.pick(values).to_owned());
        }
    }
    out
}

pub fn policy(rng: &mut Rng, name: &str, namespace: &str) -> Value {
    let mut spec = json!({});
    if rng.percent(90) {
        spec["podSelector"] = selector(rng, &POD_LABELS);
    }
    match rng.below(20) {
        0..=5 => {} // missing: defaulted
        6 => spec["policyTypes"] = json!([]),
        7..=11 => spec["policyTypes"] = json!(["Ingress"]),
        12..=15 => spec["policyTypes"] = json!(["Egress"]),
        16..=17 => spec["policyTypes"] = json!(["Ingress", "Egress"]),
        _ => spec["policyTypes"] = json!(["Egress", "Ingress"]),
    }
    for (direction, peers) in [("ingress", "from"), ("egress", "to")] {
        match rng.below(10) {
            0..=1 => {}
            2 => spec[direction] = json!([]),
            _ => {
                let rules: Vec<Value> = (0..rng.between(1, 3)).map(|_| rule(rng, peers)).collect();
                spec[direction] = json!(rules);
            }
        }
    }
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": name, "namespace": namespace}, "spec": spec})
}

pub fn rule(rng: &mut Rng, peers_field: &str) -> Value {
    let mut rule = json!({});
    match rng.below(10) {
        0..=1 => {}
        2 => rule[peers_field] = json!([]),
        _ => {
            let peers: Vec<Value> = (0..rng.between(1, 3)).map(|_| peer(rng)).collect();
            rule[peers_field] = json!(peers);
        }
    }
    match rng.below(10) {
        0..=2 => {}
        3 => rule["ports"] = json!([]),
        _ => {
            let ports: Vec<Value> = (0..rng.between(1, 3)).map(|_| port(rng)).collect();
            rule["ports"] = json!(ports);
        }
    }
    rule
}

pub fn peer(rng: &mut Rng) -> Value {
    match rng.below(100) {
        0..=24 => json!({"podSelector": selector(rng, &POD_LABELS)}),
        25..=44 => json!({"namespaceSelector": selector(rng, &NAMESPACE_LABELS)}),
        45..=64 => json!({"namespaceSelector": selector(rng, &NAMESPACE_LABELS),
                          "podSelector": selector(rng, &POD_LABELS)}),
        65..=94 => json!({"ipBlock": ip_block(rng)}),
        // The API server rejects these two; cyclonus judges them.
        95..=97 => json!({}),
        _ => json!({"ipBlock": ip_block(rng), "podSelector": selector(rng, &POD_LABELS)}),
    }
}

pub fn selector(rng: &mut Rng, vocabulary: &Vocabulary) -> Value {
    let mut selector = json!({});
    if rng.percent(20) {
        return selector; // everything
    }
    let keys = vocabulary.keys;
    let value = |rng: &mut Rng, values: &[&'static str]| {
        // Now and then a value nothing carries.
        if rng.percent(10) {
            "unused"
        } else {
            rng.pick(values)
        }
    };
    match rng.below(10) {
        0..=3 => {}
        4 => selector["matchLabels"] = json!({}),
        _ => {
            let mut labels = BTreeMap::new();
            for _ in 0..rng.between(1, 2) {
                let (key, values) = rng.pick(keys);
                labels.insert(key, value(rng, values));
            }
            selector["matchLabels"] = json!(labels);
        }
    }
    match rng.below(10) {
        0..=4 => {}
        5 => selector["matchExpressions"] = json!([]),
        _ => {
            let expressions: Vec<Value> = (0..rng.between(1, 2))
                .map(|_| {
                    let operator = rng.pick(&["In", "NotIn", "Exists", "DoesNotExist"]);
                    // NotIn only on the key every object carries: cyclonus and Kubernetes
                    // disagree on a missing key.
                    let (key, values) = if operator == "NotIn" {
                        keys[0]
                    } else {
                        rng.pick(keys)
                    };
                    if matches!(operator, "In" | "NotIn") {
                        let values: Vec<&str> =
                            (0..rng.between(1, 2)).map(|_| value(rng, values)).collect();
                        json!({"key": key, "operator": operator, "values": values})
                    } else {
                        json!({"key": key, "operator": operator})
                    }
                })
                .collect();
            selector["matchExpressions"] = json!(expressions);
        }
    }
    selector
}

pub fn port(rng: &mut Rng) -> Value {
    let mut port = json!({});
    match rng.below(4) {
        0 => {}
        _ => port["protocol"] = json!(rng.pick(&["TCP", "TCP", "UDP", "SCTP"])),
    }
    match rng.below(20) {
        0..=2 => {}
        3..=7 => port["port"] = json!(rng.pick(PORT_NAMES)),
        _ => {
            let number = rng.pick(PORTS);
            port["port"] = json!(number);
            if rng.percent(25) {
                let end = u32::from(number) + rng.pick(&[0, 1, 10, 100, 1000]);
                port["endPort"] = json!(end.min(65535));
            }
        }
    }
    port
}

pub fn ip_block(rng: &mut Rng) -> Value {
    let (written, base, prefix) = cidr(rng);
    let mut block = json!({ "cidr": written });
    match rng.below(10) {
        0..=4 => {}
        5 => block["except"] = json!([]),
        _ => {
            // Mostly inside the block (as the API server requires), now and then elsewhere.
            let except: Vec<String> = (0..rng.between(1, 2))
                .map(|_| {
                    if rng.percent(85) {
                        within(rng, base, prefix)
                    } else {
                        cidr(rng).0
                    }
                })
                .collect();
            block["except"] = json!(except);
        }
    }
    block
}

/// A random CIDR, with the address and prefix length it was written from.
pub fn cidr(rng: &mut Rng) -> (String, IpAddr, u32) {
    let base = address(rng, false);
    let prefix = match base {
        IpAddr::V4(_) => rng.pick(V4_PREFIXES),
        IpAddr::V6(_) => rng.pick(V6_PREFIXES),
    };
    // Usually the network itself; sometimes with host bits set, which Go masks off.
    let written = if rng.percent(85) {
        network(base, prefix)
    } else {
        base
    };
    // Now and then an IPv4 network written as IPv4-mapped IPv6, as Go reads it.
    if let IpAddr::V4(v4) = written
        && rng.percent(5)
    {
        let mapped = if rng.percent(80) {
            96 + prefix
        } else {
            rng.pick(&[64, 80, 95])
        };
        return (format!("::ffff:{v4}/{mapped}"), base, prefix);
    }
    (format!("{written}/{prefix}"), base, prefix)
}

/// A CIDR inside `base/prefix` (or equal to it): `base` with random bits after `prefix`.
pub fn within(rng: &mut Rng, base: IpAddr, prefix: u32) -> String {
    match base {
        IpAddr::V4(a) => {
            let longer = rng.between(prefix as usize, 32) as u32;
            let host = rng.next() as u32 & !mask4(prefix);
            let a = Ipv4Addr::from((u32::from(a) & mask4(prefix)) | host);
            format!("{}/{longer}", network(IpAddr::V4(a), longer))
        }
        IpAddr::V6(a) => {
            let longer = rng.between(prefix as usize, 128) as u32;
            // Vary only the low 16 bits, where the pools' addresses differ.
            let host = u128::from(rng.next() as u16) & !mask6(prefix);
            let a = Ipv6Addr::from((u128::from(a) & mask6(prefix)) | host);
            format!("{}/{longer}", network(IpAddr::V6(a), longer))
        }
    }
}

pub fn mask4(prefix: u32) -> u32 {
    u32::MAX.checked_shl(32 - prefix).unwrap_or(0)
}

pub fn mask6(prefix: u32) -> u128 {
    u128::MAX.checked_shl(128 - prefix).unwrap_or(0)
}

pub fn network(address: IpAddr, prefix: u32) -> IpAddr {
    match address {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask4(prefix))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask6(prefix))),
    }
}

/// An address from the pools: a pod's (`pod`) or any; IPv4 mostly, IPv6 sometimes, and for
/// hosts now and then IPv4-mapped IPv6.
pub fn address(rng: &mut Rng, pod: bool) -> IpAddr {
    let v6 = rng.percent(15);
    if v6 {
        let [a, b, c, d] = rng.pick(if pod { V6_POD_POOLS } else { V6_POOLS });
        let low = rng.below(0x200) as u16;
        return IpAddr::V6(Ipv6Addr::new(a, b, c, d, 0, 0, 0, low));
    }
    let [a, b, c] = rng.pick(if pod { V4_POD_POOLS } else { V4_POOLS });
    let v4 = Ipv4Addr::new(a, b, c, rng.below(256) as u8);
    if !pod && rng.percent(5) {
        return IpAddr::V6(v4.to_ipv6_mapped());
    }
    IpAddr::V4(v4)
}

/// `traffic` as a cluster can hold it, which kube-network-policies needs (it finds pods by
/// address and namespaces by name): two ends at one address get two (a pod's traffic to itself
/// goes to a twin), and one namespace one set of labels.
pub fn as_a_cluster_holds(traffic: &mut Traffic) {
    let (source, destination) = (&traffic.source, &mut traffic.destination);
    if let (Some(s), Some(d)) = (&source.pod, &mut destination.pod)
        && s.namespace == d.namespace
    {
        d.namespace_labels = s.namespace_labels.clone();
    }
    if let (Some(s), Some(d)) = (source.ip, destination.ip)
        && s.to_canonical() == d.to_canonical()
    {
        destination.ip = Some(match d {
            IpAddr::V4(a) => IpAddr::V4(u32::from(a).wrapping_add(1).into()),
            IpAddr::V6(a) => IpAddr::V6(u128::from(a).wrapping_add(1).into()),
        });
    }
}
