//! The tiers around NetworkPolicies: `policy.networking.k8s.io/v1alpha2` ClusterNetworkPolicy
//! (network-policy-api v0.3.0), whose `Admin` tier is judged before any NetworkPolicy and whose
//! `Baseline` tier after them. [`Network::decide`] runs the whole pipeline, as
//! kube-network-policies' PolicyEngine does per packet, and the `cnp_oracle` test of the `nimbus`
//! crate checks it against that engine (`tools/knp-decider`), decision for decision:
//!
//! - Each direction is judged on its own, egress at the source pod, ingress at the destination
//!   pod; a host outside the cluster (a [`Peer`] without a pod) is no policy's subject.
//! - In a tier, the policies whose `subject` selects the pod (`namespaces`: by its namespace's
//!   labels; `pods`: by both) are taken in order of `priority` (lowest first), then name, and
//!   their rules in order: the first rule that matches decides. `Accept` and `Deny` are final;
//!   `Pass`, or no rule matching, hands the traffic to the next stage.
//! - After the Admin tier come the NetworkPolicies ([`Policies`]): a pod they isolate in the
//!   direction is accepted or denied by them; otherwise the Baseline tier judges it, and traffic
//!   nothing decides is accepted.
//! - A rule matches when one of its `protocols` matches (none: every protocol and port) and
//!   one of its peers does. Peers: `namespaces` and `pods` match pods only (an ingress rule
//!   never matches a host outside the cluster); `networks` (egress only) match the destination
//!   address, pod or not; `nodes` (egress only) match the addresses of the nodes it selects
//!   ([`Network::with_nodes`]). `domainNames` peers match nothing here: the evaluator resolves
//!   no names.
//! - A protocol matches its own (`tcp`, `udp`, `sctp`) with `destinationPort` a `number`, a
//!   `range` (inclusive) or absent (every port); `destinationNamedPort` matches the destination
//!   port's name ([`Traffic::port_name`]).
//!
//! Where kube-network-policies departs from the API's documentation, this module follows the
//! documentation, and the oracle generates no case that tells them apart: kube-network-policies
//! hands a pod that a NetworkPolicy selects for the other direction only straight to `Accept`,
//! skipping the Baseline tier; here that pod is not isolated in the direction, so the Baseline
//! tier judges it.

use super::{Cidr, Decision, InvalidPolicy, Peer, PodPeer, Policies, Traffic};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::core::{Selector, SelectorExt};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// The kind as written to and read from the API server.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterNetworkPolicy {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: ClusterNetworkPolicySpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNetworkPolicySpec {
    /// `Admin` or `Baseline`.
    pub tier: String,
    /// 0 to 1000; lower is judged first.
    pub priority: i32,
    pub subject: Subject,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<IngressRule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<EgressRule>,
}

/// The pods a policy is about: by their namespace, or by their namespace and their own labels.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NamespacedPods>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespacedPods {
    /// Absent: every namespace (Go reads it as the empty selector).
    #[serde(default)]
    pub namespace_selector: LabelSelector,
    #[serde(default)]
    pub pod_selector: LabelSelector,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IngressRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub action: Action,
    #[serde(default)]
    pub from: Vec<IngressPeer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protocols: Vec<Protocol>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EgressRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub action: Action,
    #[serde(default)]
    pub to: Vec<EgressPeer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protocols: Vec<Protocol>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    Accept,
    Deny,
    /// Hands the traffic to the next stage (NetworkPolicies after the Admin tier).
    #[default]
    Pass,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IngressPeer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NamespacedPods>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EgressPeer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<NamespacedPods>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domain_names: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Protocol {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<ProtocolPort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<ProtocolPort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sctp: Option<ProtocolPort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_named_port: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProtocolPort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_port: Option<Port>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Port {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<PortRange>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PortRange {
    pub start: i32,
    pub end: i32,
}

pub const ADMIN: &str = "Admin";
pub const BASELINE: &str = "Baseline";

/// What a network enforces: both ClusterNetworkPolicy tiers around its NetworkPolicies.
#[derive(Clone, Debug, Default)]
pub struct Network {
    admin: Tier,
    policies: Policies,
    baseline: Tier,
    nodes: Vec<Node>,
}

/// A node, as `nodes` peers match it: by its labels, at its addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    pub labels: BTreeMap<String, String>,
    /// Its internal and external addresses.
    pub addresses: Vec<IpAddr>,
}

impl Network {
    /// Sorts `cluster_policies` into their tiers (any other tier applies nowhere).
    pub fn new<'a>(
        cluster_policies: impl IntoIterator<Item = &'a ClusterNetworkPolicy>,
        policies: Policies,
    ) -> Result<Self, InvalidPolicy> {
        let mut admin = Vec::new();
        let mut baseline = Vec::new();
        for policy in cluster_policies {
            match policy.spec.tier.as_str() {
                ADMIN => admin.push(Parsed::new(policy)?),
                BASELINE => baseline.push(Parsed::new(policy)?),
                _ => {}
            }
        }
        Ok(Self {
            admin: Tier::new(admin),
            policies,
            baseline: Tier::new(baseline),
            nodes: Vec::new(),
        })
    }

    /// The cluster's nodes, which `nodes` peers select.
    pub fn with_nodes(self, nodes: Vec<Node>) -> Self {
        Self { nodes, ..self }
    }

    /// Whether each direction lets `traffic` through.
    pub fn decide(&self, traffic: &Traffic) -> Decision {
        let (ingress, egress) = self.policies.verdicts(traffic);
        let dst = traffic.destination.pod.as_ref();
        let src = traffic.source.pod.as_ref();
        Decision {
            egress: src.is_none_or(|pod| {
                self.admin
                    .egress(pod, traffic, &self.nodes)
                    .or(egress)
                    .or_else(|| self.baseline.egress(pod, traffic, &self.nodes))
                    .unwrap_or(true)
            }),
            ingress: dst.is_none_or(|pod| {
                self.admin
                    .ingress(pod, traffic)
                    .or(ingress)
                    .or_else(|| self.baseline.ingress(pod, traffic))
                    .unwrap_or(true)
            }),
        }
    }

    /// Whether any of its policies judges traffic to or from `pod` (a NetworkPolicy isolates
    /// it, or a ClusterNetworkPolicy's subject selects it): only such traffic can they change.
    pub fn judges(&self, pod: &PodPeer) -> bool {
        self.policies.isolate(pod)
            || self.admin.about(pod).next().is_some()
            || self.baseline.about(pod).next().is_some()
    }
}

/// One tier's policies, in the order they are judged.
#[derive(Clone, Debug, Default)]
struct Tier(Vec<Parsed>);

impl Tier {
    fn new(mut policies: Vec<Parsed>) -> Self {
        policies.sort_by(|a, b| (a.priority, &a.name).cmp(&(b.priority, &b.name)));
        Self(policies)
    }

    /// `Some(allowed)` when a rule of a policy about `pod` accepts or denies; `None` on Pass.
    fn egress(&self, pod: &PodPeer, traffic: &Traffic, nodes: &[Node]) -> Option<bool> {
        let rules = self.about(pod).flat_map(|p| &p.egress);
        first_match(rules, &traffic.destination, traffic, nodes)
    }

    fn ingress(&self, pod: &PodPeer, traffic: &Traffic) -> Option<bool> {
        // No ingress peer names a host outside the cluster.
        traffic.source.pod.as_ref()?;
        let rules = self.about(pod).flat_map(|p| &p.ingress);
        first_match(rules, &traffic.source, traffic, &[])
    }

    fn about<'a>(&'a self, pod: &'a PodPeer) -> impl Iterator<Item = &'a Parsed> {
        self.0
            .iter()
            .filter(|p| p.subject.iter().any(|s| s.matches(pod)))
    }
}

fn first_match<'a>(
    rules: impl Iterator<Item = &'a Rule>,
    peer: &Peer,
    traffic: &Traffic,
    nodes: &[Node],
) -> Option<bool> {
    let rule = rules
        .into_iter()
        .find(|r| r.matches(peer, traffic, nodes))?;
    match rule.action {
        Action::Accept => Some(true),
        Action::Deny => Some(false),
        Action::Pass => None,
    }
}

/// A policy, its selectors and CIDRs parsed.
#[derive(Clone, Debug)]
struct Parsed {
    name: String,
    priority: i32,
    subject: Vec<Pods>,
    ingress: Vec<Rule>,
    egress: Vec<Rule>,
}

/// Pods by their namespace's labels and their own.
#[derive(Clone, Debug)]
struct Pods {
    namespaces: Selector,
    pods: Selector,
}

impl Pods {
    fn matches(&self, pod: &PodPeer) -> bool {
        self.namespaces.matches(&pod.namespace_labels) && self.pods.matches(&pod.pod_labels)
    }
}

#[derive(Clone, Debug)]
struct Rule {
    action: Action,
    pods: Vec<Pods>,
    networks: Vec<Cidr>,
    nodes: Vec<Selector>,
    /// `None`: every protocol and port.
    protocols: Option<Vec<Protocol>>,
}

impl Rule {
    fn matches(&self, peer: &Peer, traffic: &Traffic, nodes: &[Node]) -> bool {
        let protocol = self
            .protocols
            .as_ref()
            .is_none_or(|ps| ps.iter().any(|p| protocol_matches(p, traffic)));
        let node = |ip: IpAddr| {
            nodes.iter().any(|n| {
                n.addresses.contains(&ip) && self.nodes.iter().any(|s| s.matches(&n.labels))
            })
        };
        let peer = peer
            .pod
            .as_ref()
            .is_some_and(|pod| self.pods.iter().any(|p| p.matches(pod)))
            || peer
                .ip
                .is_some_and(|ip| self.networks.iter().any(|c| c.contains(ip)) || node(ip));
        protocol && peer
    }
}

fn protocol_matches(protocol: &Protocol, traffic: &Traffic) -> bool {
    if let Some(name) = &protocol.destination_named_port {
        return traffic.port_name.as_ref() == Some(name);
    }
    let port = match traffic.protocol.as_str() {
        "TCP" => protocol.tcp.as_ref(),
        "UDP" => protocol.udp.as_ref(),
        "SCTP" => protocol.sctp.as_ref(),
        _ => None,
    };
    port.is_some_and(|p| {
        p.destination_port.as_ref().is_none_or(|port| {
            let n = i32::from(traffic.port);
            port.number.is_some_and(|number| number != 0 && number == n)
                || port
                    .range
                    .as_ref()
                    .is_some_and(|r| r.start <= n && n <= r.end)
        })
    })
}

impl Parsed {
    fn new(policy: &ClusterNetworkPolicy) -> Result<Self, InvalidPolicy> {
        let name = policy.metadata.name.clone().unwrap_or_default();
        let invalid = |field: String, reason: String| InvalidPolicy {
            policy: format!("ClusterNetworkPolicy {name}"),
            field,
            reason,
        };
        let selector = |s: &LabelSelector, at: String| {
            Selector::try_from(s.clone()).map_err(|e| invalid(at, e.0))
        };
        let pods = |namespaces: &Option<LabelSelector>,
                    pods: &Option<NamespacedPods>,
                    at: &str|
         -> Result<Vec<Pods>, InvalidPolicy> {
            let mut out = Vec::new();
            if let Some(ns) = namespaces {
                out.push(Pods {
                    namespaces: selector(ns, format!("{at}.namespaces"))?,
                    pods: Selector::default(),
                });
            }
            if let Some(p) = pods {
                out.push(Pods {
                    namespaces: selector(
                        &p.namespace_selector,
                        format!("{at}.pods.namespaceSelector"),
                    )?,
                    pods: selector(&p.pod_selector, format!("{at}.pods.podSelector"))?,
                });
            }
            Ok(out)
        };
        let spec = &policy.spec;
        let protocols = |ps: &Vec<Protocol>| (!ps.is_empty()).then(|| ps.clone());
        let mut ingress = Vec::new();
        for (i, rule) in spec.ingress.iter().enumerate() {
            let mut peers = Vec::new();
            for (j, peer) in rule.from.iter().enumerate() {
                peers.extend(pods(
                    &peer.namespaces,
                    &peer.pods,
                    &format!("spec.ingress[{i}].from[{j}]"),
                )?);
            }
            ingress.push(Rule {
                action: rule.action,
                pods: peers,
                networks: Vec::new(),
                nodes: Vec::new(),
                protocols: protocols(&rule.protocols),
            });
        }
        let mut egress = Vec::new();
        for (i, rule) in spec.egress.iter().enumerate() {
            let (mut peers, mut networks, mut nodes) = (Vec::new(), Vec::new(), Vec::new());
            for (j, peer) in rule.to.iter().enumerate() {
                let at = format!("spec.egress[{i}].to[{j}]");
                peers.extend(pods(&peer.namespaces, &peer.pods, &at)?);
                if let Some(s) = &peer.nodes {
                    nodes.push(selector(s, format!("{at}.nodes"))?);
                }
                for (k, cidr) in peer.networks.iter().enumerate() {
                    networks.push(
                        Cidr::parse(cidr).map_err(|e| invalid(format!("{at}.networks[{k}]"), e))?,
                    );
                }
            }
            egress.push(Rule {
                action: rule.action,
                pods: peers,
                networks,
                nodes,
                protocols: protocols(&rule.protocols),
            });
        }
        Ok(Self {
            subject: pods(&spec.subject.namespaces, &spec.subject.pods, "spec.subject")?,
            name,
            priority: spec.priority,
            ingress,
            egress,
        })
    }
}
