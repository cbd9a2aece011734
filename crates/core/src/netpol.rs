//! NetworkPolicy evaluation: given the NetworkPolicies of a cluster, is this traffic allowed?
//! Pure (no cluster access), so the operator can preview what enforcing a NetworkPolicy intent
//! would block before anything is applied.
//!
//! The semantics are Kubernetes' as cyclonus implements them (its matcher,
//! `github.com/mattfenwick/cyclonus/pkg/matcher` v0.5.6, which `tools/netpol-decider` wraps),
//! and the `netpol_oracle` test of the `nimbus` crate (`crates/nimbus/tests/netpol_oracle.rs`;
//! `make netpol-oracle` at length) checks this module against it, decision for decision, on
//! random policies and traffic:
//!
//! - A policy applies to the pods its `podSelector` selects in its own namespace (`default`
//!   when it names none; no selector: all of them), in the directions of its `policyTypes`.
//!   Without `policyTypes` (missing or empty), as the API server defaults them: `Ingress`, plus
//!   `Egress` when the policy has egress rules (`egress: []` has none).
//! - A pod is isolated in a direction when any policy applies to it in that direction. Traffic
//!   into an isolated pod (ingress, judged at the destination) or out of one (egress, judged
//!   at the source) is allowed only when a rule of one of those policies allows it; a pod that
//!   is not isolated allows everything. A host outside the cluster (a [`Peer`] without a pod) is
//!   never isolated: no NetworkPolicy stops it sending or receiving.
//! - A rule allows traffic when its port matches one of the rule's `ports` and its peer matches
//!   one of its `from` (ingress) or `to` (egress); a missing or empty list matches everything.
//! - A peer with `podSelector` only: those pods in the policy's namespace; `namespaceSelector`
//!   only: every pod of the namespaces it selects (by their labels, not their names); both: the
//!   pods selected in the namespaces selected; an empty selector selects all. Such peers never
//!   match a host outside the cluster. `ipBlock`: any peer, pods included, whose address is in
//!   `cidr` and in none of `except`, IPv4 or IPv6.
//! - A port matches its protocol (`TCP` when missing) and, with `port`: that number, or that
//!   name ([`Traffic::port_name`]), or with `endPort` the range `port..=endPort`; without `port`,
//!   every port of the protocol.
//!
//! Where cyclonus departs from Kubernetes, this module follows Kubernetes (kube's [`Selector`],
//! which matches as the API server's `labels.Requirement.Matches` does), and the oracle test
//! generates no case that tells them apart:
//! - `NotIn` matches a pod without the key (cyclonus: no match).
//! - `matchLabels` with an empty value needs the key, with that empty value (cyclonus: a pod
//!   without the key matches too).
//!
//! Inputs the API server rejects, or that only Go's reading defines, are judged as cyclonus does:
//! - a peer with an `ipBlock` and a selector is its `ipBlock` alone;
//! - a peer with no field at all (`{}`) is every pod of the policy's namespace;
//! - `policyTypes` with only unknown values applies in no direction;
//! - a CIDR with host bits set is its network (`10.1.2.3/8` is `10.0.0.0/8`); an IPv4-mapped
//!   IPv6 address (`::ffff:a.b.c.d`) is its IPv4 address, and a CIDR of one with a prefix of 96
//!   or more the IPv4 network (as Go's `net` package, which cyclonus uses, treats them);
//! - `In`/`NotIn` without `values` compare against none.
//!
//! What cyclonus panics on, [`Policies::new`] refuses with an [`InvalidPolicy`] error: a CIDR in
//! `cidr` or `except` that does not parse, a selector operator other than `In`, `NotIn`,
//! `Exists` and `DoesNotExist`, an `endPort` without a numeric `port` or below it. (Cyclonus
//! panics only when a decision reaches the bad part; refusing up front keeps a preview from
//! depending on which traffic was asked about.) Rules of a direction the policy does not apply
//! in are not read, as cyclonus does not build them. A peer without an address matches no
//! `ipBlock` (cyclonus needs every peer's address).

pub mod cluster;

pub use cluster::{ClusterNetworkPolicy, Network, Node};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::{Selector, SelectorExt};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

/// A pod at one end of the traffic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodPeer {
    pub namespace: String,
    /// The labels of its namespace; the API server always sets `kubernetes.io/metadata.name`.
    pub namespace_labels: BTreeMap<String, String>,
    pub pod_labels: BTreeMap<String, String>,
}

/// One end of the traffic: a pod, or (no pod) a host outside the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    /// Its address, which `ipBlock` peers match; without one, no `ipBlock` matches it.
    pub ip: Option<IpAddr>,
    pub pod: Option<PodPeer>,
}

/// A connection from `source` to `destination`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Traffic {
    pub source: Peer,
    pub destination: Peer,
    pub port: u16,
    /// The name of the destination pod's port it reaches, which named ports in the policies
    /// match; `None` when the port has no name (or the destination is no pod).
    pub port_name: Option<String>,
    /// `TCP`, `UDP` or `SCTP`, compared as written.
    pub protocol: String,
}

/// Whether each direction lets the traffic through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The destination accepts it.
    pub ingress: bool,
    /// The source may send it.
    pub egress: bool,
}

impl Decision {
    /// The traffic flows: both ends allow it.
    pub fn allowed(self) -> bool {
        self.ingress && self.egress
    }
}

/// A policy [`Policies::new`] cannot evaluate (one the API server rejects, and cyclonus's
/// matcher panics on).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("NetworkPolicy {policy}: {field}: {reason}")]
pub struct InvalidPolicy {
    /// `namespace/name`.
    pub policy: String,
    /// Where in the policy, e.g. `spec.ingress[0].from[1].ipBlock.cidr`.
    pub field: String,
    pub reason: String,
}

/// A set of NetworkPolicies, parsed once, to decide any number of [`Traffic`]s against.
/// The default is no policy at all: everything is allowed.
#[derive(Clone, Debug, Default)]
pub struct Policies {
    ingress: Vec<Target>,
    egress: Vec<Target>,
}

impl Policies {
    /// Parses the selectors, CIDRs and ports of `policies`; see the module documentation for
    /// what is refused.
    pub fn new<'a>(
        policies: impl IntoIterator<Item = &'a NetworkPolicy>,
    ) -> Result<Self, InvalidPolicy> {
        let mut out = Self::default();
        out.add(policies)?;
        Ok(out)
    }

    /// Adds `policies` to the set (parsed as [`Policies::new`] does).
    pub fn add<'a>(
        &mut self,
        policies: impl IntoIterator<Item = &'a NetworkPolicy>,
    ) -> Result<(), InvalidPolicy> {
        let no_spec = NetworkPolicySpec::default();
        for policy in policies {
            let namespace = match policy.metadata.namespace.as_deref() {
                // As cyclonus (and kubectl) take a policy without a namespace.
                None | Some("") => "default",
                Some(ns) => ns,
            };
            let cx = Context {
                policy: format!(
                    "{namespace}/{}",
                    policy.metadata.name.as_deref().unwrap_or_default()
                ),
                namespace,
            };
            let spec = policy.spec.as_ref().unwrap_or(&no_spec);
            let pod_selector = match &spec.pod_selector {
                Some(selector) => cx.selector(selector, "spec.podSelector")?,
                None => Selector::default(),
            };
            let (ingress, egress) = match spec.policy_types.as_deref() {
                Some(types) if !types.is_empty() => (
                    types.iter().any(|t| t == "Ingress"),
                    types.iter().any(|t| t == "Egress"),
                ),
                // The API server's defaulting (SetDefaults_NetworkPolicy): a policy without
                // types isolates ingress, and egress too when it has egress rules.
                _ => (true, spec.egress.as_ref().is_some_and(|e| !e.is_empty())),
            };
            if ingress {
                let mut rules = Vec::new();
                for (i, rule) in spec.ingress.iter().flatten().enumerate() {
                    let at = format!("spec.ingress[{i}]");
                    rules.push(cx.rule(&rule.ports, &rule.from, &at, "from")?);
                }
                self.ingress.push(cx.target(pod_selector.clone(), rules));
            }
            if egress {
                let mut rules = Vec::new();
                for (i, rule) in spec.egress.iter().flatten().enumerate() {
                    let at = format!("spec.egress[{i}]");
                    rules.push(cx.rule(&rule.ports, &rule.to, &at, "to")?);
                }
                self.egress.push(cx.target(pod_selector, rules));
            }
        }
        Ok(())
    }

    /// Whether any of the policies applies to `pod`, in either direction: only traffic to or
    /// from such a pod can they change.
    pub fn isolate(&self, pod: &PodPeer) -> bool {
        self.ingress
            .iter()
            .chain(&self.egress)
            .any(|t| t.applies_to(pod))
    }

    /// Whether the policies let `traffic` through, each direction judged at its pod end.
    pub fn decide(&self, traffic: &Traffic) -> Decision {
        let (ingress, egress) = self.verdicts(traffic);
        Decision {
            ingress: ingress.unwrap_or(true),
            egress: egress.unwrap_or(true),
        }
    }

    /// (ingress, egress): whether each direction lets `traffic` through, `None` where no
    /// policy isolates the pod at that end (the next stage decides: see [`Network`]).
    fn verdicts(&self, traffic: &Traffic) -> (Option<bool>, Option<bool>) {
        (
            verdict(
                &self.ingress,
                &traffic.destination,
                &traffic.source,
                traffic,
            ),
            verdict(&self.egress, &traffic.source, &traffic.destination, traffic),
        )
    }
}

/// Whether `subject` (the end the direction is judged at) lets traffic with `peer` through;
/// `None` when no policy isolates it there.
fn verdict(targets: &[Target], subject: &Peer, peer: &Peer, traffic: &Traffic) -> Option<bool> {
    // Outside the cluster: no NetworkPolicy can isolate it.
    let pod = subject.pod.as_ref()?;
    let mut isolated = false;
    for target in targets.iter().filter(|t| t.applies_to(pod)) {
        if target.rules.iter().any(|rule| rule.allows(peer, traffic)) {
            return Some(true);
        }
        isolated = true;
    }
    isolated.then_some(false)
}

/// One policy in one direction: the pods it isolates and what it lets through.
#[derive(Clone, Debug)]
struct Target {
    namespace: String,
    pod_selector: Selector,
    rules: Vec<Rule>,
}

impl Target {
    fn applies_to(&self, pod: &PodPeer) -> bool {
        self.namespace == pod.namespace && self.pod_selector.matches(&pod.pod_labels)
    }
}

/// An ingress or egress rule; an empty list matches everything.
#[derive(Clone, Debug)]
struct Rule {
    ports: Vec<Port>,
    peers: Vec<PeerRule>,
}

impl Rule {
    fn allows(&self, peer: &Peer, traffic: &Traffic) -> bool {
        (self.ports.is_empty() || self.ports.iter().any(|p| p.matches(traffic)))
            && (self.peers.is_empty() || self.peers.iter().any(|p| p.matches(peer)))
    }
}

#[derive(Clone, Debug)]
enum PeerRule {
    Block {
        cidr: Cidr,
        except: Vec<Cidr>,
    },
    Pods {
        namespaces: Namespaces,
        pods: Selector,
    },
}

impl PeerRule {
    fn matches(&self, peer: &Peer) -> bool {
        match self {
            PeerRule::Block { cidr, except } => peer
                .ip
                .is_some_and(|ip| cidr.contains(ip) && !except.iter().any(|e| e.contains(ip))),
            PeerRule::Pods { namespaces, pods } => peer.pod.as_ref().is_some_and(|pod| {
                let namespace = match namespaces {
                    Namespaces::Exactly(ns) => pod.namespace == *ns,
                    Namespaces::Selected(selector) => selector.matches(&pod.namespace_labels),
                };
                namespace && pods.matches(&pod.pod_labels)
            }),
        }
    }
}

#[derive(Clone, Debug)]
enum Namespaces {
    /// No `namespaceSelector`: the policy's own namespace.
    Exactly(String),
    Selected(Selector),
}

#[derive(Clone, Debug)]
struct Port {
    protocol: String,
    number: PortNumber,
}

#[derive(Clone, Debug)]
enum PortNumber {
    Any,
    Number(i32),
    Name(String),
    Range(i32, i32),
}

impl Port {
    fn matches(&self, traffic: &Traffic) -> bool {
        let port = i32::from(traffic.port);
        self.protocol == traffic.protocol
            && match &self.number {
                PortNumber::Any => true,
                PortNumber::Number(n) => port == *n,
                // As cyclonus: traffic without a name has the empty one, which no valid policy
                // names.
                PortNumber::Name(name) => traffic.port_name.as_deref().unwrap_or_default() == name,
                PortNumber::Range(from, to) => (*from..=*to).contains(&port),
            }
    }
}

/// Where in which policy the parse is, for errors.
struct Context<'p> {
    policy: String,
    namespace: &'p str,
}

impl Context<'_> {
    fn invalid(&self, field: &str, reason: impl Into<String>) -> InvalidPolicy {
        InvalidPolicy {
            policy: self.policy.clone(),
            field: field.to_owned(),
            reason: reason.into(),
        }
    }

    fn target(&self, pod_selector: Selector, rules: Vec<Rule>) -> Target {
        Target {
            namespace: self.namespace.to_owned(),
            pod_selector,
            rules,
        }
    }

    fn rule(
        &self,
        ports: &Option<Vec<NetworkPolicyPort>>,
        peers: &Option<Vec<NetworkPolicyPeer>>,
        at: &str,
        peers_field: &str,
    ) -> Result<Rule, InvalidPolicy> {
        let ports = (ports.iter().flatten().enumerate())
            .map(|(i, p)| self.port(p, &format!("{at}.ports[{i}]")))
            .collect::<Result<_, _>>()?;
        let peers = (peers.iter().flatten().enumerate())
            .map(|(i, p)| self.peer(p, &format!("{at}.{peers_field}[{i}]")))
            .collect::<Result<_, _>>()?;
        Ok(Rule { ports, peers })
    }

    fn peer(&self, peer: &NetworkPolicyPeer, at: &str) -> Result<PeerRule, InvalidPolicy> {
        // As cyclonus: an ipBlock makes the peer an address block, whatever selectors the
        // (then invalid) peer also has.
        if let Some(block) = &peer.ip_block {
            return self.block(block, &format!("{at}.ipBlock"));
        }
        let pods = match &peer.pod_selector {
            Some(selector) => self.selector(selector, &format!("{at}.podSelector"))?,
            None => Selector::default(),
        };
        let namespaces = match &peer.namespace_selector {
            Some(selector) => {
                Namespaces::Selected(self.selector(selector, &format!("{at}.namespaceSelector"))?)
            }
            None => Namespaces::Exactly(self.namespace.to_owned()),
        };
        Ok(PeerRule::Pods { namespaces, pods })
    }

    fn block(&self, block: &IPBlock, at: &str) -> Result<PeerRule, InvalidPolicy> {
        let cidr = Cidr::parse(&block.cidr)
            .map_err(|reason| self.invalid(&format!("{at}.cidr"), reason))?;
        let except = (block.except.iter().flatten().enumerate())
            .map(|(i, e)| {
                Cidr::parse(e).map_err(|reason| self.invalid(&format!("{at}.except[{i}]"), reason))
            })
            .collect::<Result<_, _>>()?;
        Ok(PeerRule::Block { cidr, except })
    }

    fn port(&self, port: &NetworkPolicyPort, at: &str) -> Result<Port, InvalidPolicy> {
        let number = match (&port.port, port.end_port) {
            (None, None) => PortNumber::Any,
            (Some(IntOrString::Int(n)), None) => PortNumber::Number(*n),
            (Some(IntOrString::String(name)), None) => PortNumber::Name(name.clone()),
            (Some(IntOrString::Int(from)), Some(to)) if to >= *from => PortNumber::Range(*from, to),
            (Some(IntOrString::Int(from)), Some(to)) => {
                return Err(self.invalid(
                    &format!("{at}.endPort"),
                    format!("{to} is below port {from}"),
                ));
            }
            (Some(IntOrString::String(_)), Some(_)) | (None, Some(_)) => {
                return Err(self.invalid(&format!("{at}.endPort"), "needs a numeric port"));
            }
        };
        Ok(Port {
            protocol: port.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
            number,
        })
    }

    fn selector(&self, selector: &LabelSelector, at: &str) -> Result<Selector, InvalidPolicy> {
        let mut selector = selector.clone();
        // kube refuses In/NotIn without values; cyclonus compares against none (the API
        // server rejects both).
        for requirement in selector.match_expressions.iter_mut().flatten() {
            if requirement.values.is_none()
                && matches!(requirement.operator.as_str(), "In" | "NotIn")
            {
                requirement.values = Some(Vec::new());
            }
        }
        Selector::try_from(selector).map_err(|e| self.invalid(at, e.0))
    }
}

/// An address block, as Go's `net.ParseCIDR` and `IPNet.Contains` read and match it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cidr {
    V4 { network: u32, mask: u32 },
    V6 { network: u128, mask: u128 },
}

impl Cidr {
    fn parse(cidr: &str) -> Result<Self, String> {
        let invalid = || format!("invalid CIDR {cidr:?}");
        let (address, prefix) = cidr.split_once('/').ok_or_else(invalid)?;
        let address: IpAddr = address.parse().map_err(|_| invalid())?;
        // Decimal digits only, as Go reads it (`u32::from_str` would also take a sign).
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        let prefix: u32 = prefix.parse().map_err(|_| invalid())?;
        match address {
            IpAddr::V4(a) if prefix <= 32 => Ok(Self::v4(a, prefix)),
            IpAddr::V6(a) if prefix <= 128 => match a.to_ipv4_mapped() {
                // Go keeps a network of IPv4-mapped addresses as an IPv4 one.
                Some(v4) if prefix >= 96 => Ok(Self::v4(v4, prefix - 96)),
                _ => {
                    let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
                    Ok(Self::V6 {
                        network: u128::from(a) & mask,
                        mask,
                    })
                }
            },
            _ => Err(invalid()),
        }
    }

    fn v4(address: Ipv4Addr, prefix: u32) -> Self {
        let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
        Self::V4 {
            network: u32::from(address) & mask,
            mask,
        }
    }

    fn contains(self, ip: IpAddr) -> bool {
        // Go matches an IPv4-mapped address as its IPv4 address.
        let ip = match ip {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            IpAddr::V4(_) => ip,
        };
        match (self, ip) {
            (Self::V4 { network, mask }, IpAddr::V4(a)) => u32::from(a) & mask == network,
            (Self::V6 { network, mask }, IpAddr::V6(a)) => u128::from(a) & mask == network,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn policies(policies: Value) -> Policies {
        let policies: Vec<NetworkPolicy> = serde_json::from_value(policies).unwrap();
        Policies::new(&policies).unwrap()
    }

    fn refused(policy: Value) -> InvalidPolicy {
        let policy: NetworkPolicy = serde_json::from_value(policy).unwrap();
        Policies::new(&[policy]).unwrap_err()
    }

    fn labels(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
        (labels.iter())
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn pod(namespace: &str, pod_labels: &[(&str, &str)], ip: &str) -> Peer {
        let mut namespace_labels = labels(&[("kubernetes.io/metadata.name", namespace)]);
        if namespace == "prod" {
            namespace_labels.insert("env".into(), "prod".into());
        }
        Peer {
            ip: Some(ip.parse().unwrap()),
            pod: Some(PodPeer {
                namespace: namespace.into(),
                namespace_labels,
                pod_labels: labels(pod_labels),
            }),
        }
    }

    fn external(ip: &str) -> Peer {
        Peer {
            ip: Some(ip.parse().unwrap()),
            pod: None,
        }
    }

    fn tcp(source: &Peer, destination: &Peer, port: u16) -> Traffic {
        Traffic {
            source: source.clone(),
            destination: destination.clone(),
            port,
            port_name: None,
            protocol: "TCP".into(),
        }
    }

    fn web() -> Peer {
        pod("prod", &[("app", "web")], "10.244.1.10")
    }

    fn db() -> Peer {
        pod("prod", &[("app", "db")], "10.244.1.11")
    }

    fn policy(spec: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "prod"}, "spec": spec})
    }

    #[test]
    fn policy_types_default_to_ingress_and_to_egress_with_egress_rules() {
        // No types, no rules: ingress isolated (and denied), egress untouched.
        let p = policies(json!([policy(json!({"podSelector": {}}))]));
        let d = p.decide(&tcp(&web(), &db(), 80));
        assert_eq!(
            d,
            Decision {
                ingress: false,
                egress: true
            }
        );
        // Egress rules make it an egress policy too.
        let p = policies(json!([policy(json!({"podSelector": {},
            "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}))]));
        let to_external = tcp(&web(), &external("192.0.2.1"), 443);
        assert!(!p.decide(&to_external).egress);
        // ... but `egress: []` has none, and neither does an empty policyTypes list.
        let p = policies(json!([policy(
            json!({"podSelector": {}, "policyTypes": [],
            "egress": []})
        )]));
        assert!(p.decide(&to_external).egress);
        assert!(!p.decide(&tcp(&db(), &web(), 80)).ingress);
    }

    #[test]
    fn explicit_policy_types_ignore_the_other_directions_rules() {
        let p = policies(json!([policy(
            json!({"podSelector": {}, "policyTypes": ["Egress"],
            "ingress": [{}]})
        )]));
        let d = p.decide(&tcp(&web(), &db(), 80));
        assert_eq!(
            d,
            Decision {
                ingress: true,
                egress: false
            }
        );
        // Unknown types only: no direction at all.
        let p = policies(json!([policy(
            json!({"podSelector": {}, "policyTypes": ["Sideways"]})
        )]));
        assert!(p.decide(&tcp(&web(), &db(), 80)).allowed());
    }

    #[test]
    fn a_pod_is_isolated_by_any_policy_of_its_namespace_selecting_it() {
        let p = policies(json!([
            policy(
                json!({"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]})
            ),
            policy(
                json!({"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"],
                "ingress": [{"ports": [{"port": 5432}]}]})
            ),
        ]));
        // Either policy allowing is enough.
        assert!(p.decide(&tcp(&web(), &db(), 80)).ingress);
        let other = pod("prod", &[("app", "other")], "10.244.1.12");
        assert!(p.decide(&tcp(&other, &db(), 5432)).ingress);
        assert!(!p.decide(&tcp(&other, &db(), 80)).ingress);
        // web is selected by neither; a db pod of another namespace by no policy of its own.
        assert!(p.decide(&tcp(&other, &web(), 80)).ingress);
        let staging_db = pod("staging", &[("app", "db")], "10.244.2.11");
        assert!(p.decide(&tcp(&other, &staging_db, 80)).ingress);
        // A policy without a namespace is in `default`.
        let p = policies(json!([{"metadata": {"name": "p"}, "spec": {}}]));
        let default_pod = pod("default", &[], "10.244.3.1");
        assert!(!p.decide(&tcp(&web(), &default_pod, 80)).ingress);
        assert!(p.decide(&tcp(&default_pod, &web(), 80)).ingress);
    }

    #[test]
    fn hosts_outside_the_cluster_are_never_isolated_nor_selected() {
        let everything = json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"namespaceSelector": {}}]}],
            "egress": [{"to": [{"namespaceSelector": {}}]}]});
        let p = policies(json!([policy(everything)]));
        let host = external("203.0.113.10");
        // Pod peers match every pod of every namespace, and no host.
        assert!(p.decide(&tcp(&web(), &db(), 80)).allowed());
        assert_eq!(
            p.decide(&tcp(&web(), &host, 80)),
            Decision {
                ingress: true,
                egress: false
            }
        );
        assert_eq!(
            p.decide(&tcp(&host, &web(), 80)),
            Decision {
                ingress: false,
                egress: true
            }
        );
        assert!(p.decide(&tcp(&host, &host, 80)).allowed());
    }

    #[test]
    fn empty_or_missing_peers_and_ports_match_everything() {
        for rule in [json!({}), json!({"from": [], "ports": []})] {
            let p = policies(json!([policy(
                json!({"podSelector": {}, "ingress": [rule]})
            )]));
            assert!(p.decide(&tcp(&external("192.0.2.1"), &web(), 1)).ingress);
        }
        // No rule at all: nothing.
        let p = policies(json!([policy(json!({"podSelector": {}, "ingress": []}))]));
        assert!(!p.decide(&tcp(&db(), &web(), 1)).ingress);
    }

    #[test]
    fn peer_forms() {
        let rule = |peer: Value| {
            policies(json!([policy(
                json!({"podSelector": {}, "ingress": [{"from": [peer]}]})
            )]))
        };
        let staging_web = pod("staging", &[("app", "web")], "10.244.2.10");
        let allows = |p: &Policies, from: &Peer| p.decide(&tcp(from, &db(), 80)).ingress;

        let same_namespace = rule(json!({"podSelector": {"matchLabels": {"app": "web"}}}));
        assert!(allows(&same_namespace, &web()));
        assert!(!allows(&same_namespace, &staging_web));

        let by_namespace = rule(json!({"namespaceSelector": {"matchLabels":
            {"kubernetes.io/metadata.name": "staging"}}}));
        assert!(allows(&by_namespace, &staging_web));
        assert!(!allows(&by_namespace, &web()));

        let both = rule(
            json!({"namespaceSelector": {}, "podSelector": {"matchLabels":
            {"app": "web"}}}),
        );
        assert!(allows(&both, &web()) && allows(&both, &staging_web));
        assert!(!allows(&both, &db()));

        // `{}` (rejected by the API server): as cyclonus, every pod of the policy's namespace.
        let nothing = rule(json!({}));
        assert!(allows(&nothing, &db()) && !allows(&nothing, &staging_web));

        // An ipBlock with a selector (rejected too): as cyclonus, the ipBlock alone.
        let mixed = rule(json!({"ipBlock": {"cidr": "10.244.2.0/24"},
            "podSelector": {"matchLabels": {"app": "web"}}}));
        assert!(allows(&mixed, &staging_web) && !allows(&mixed, &web()));
    }

    #[test]
    fn ip_blocks_match_any_peer_by_address_minus_except() {
        let p = policies(json!([policy(
            json!({"podSelector": {}, "egress": [{"to": [
                {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.244.1.0/24"]}},
                {"ipBlock": {"cidr": "2001:db8::/32", "except": ["2001:db8:bad::/48"]}},
            ]}]})
        )]));
        let reaches = |to: &Peer| p.decide(&tcp(&web(), to, 443)).egress;
        assert!(reaches(&external("10.1.2.3")));
        assert!(
            reaches(&pod("staging", &[], "10.244.2.1")),
            "pods by address too"
        );
        assert!(!reaches(&db()), "in except");
        assert!(!reaches(&external("192.0.2.1")));
        assert!(reaches(&external("2001:db8:1::1")));
        assert!(!reaches(&external("2001:db8:bad::1")));
        assert!(!reaches(&external("2001:db9::1")));
        // IPv4-mapped IPv6 addresses are IPv4 addresses, as in Go.
        assert!(reaches(&external("::ffff:10.1.2.3")));
        assert!(!reaches(&external("::ffff:10.244.1.3")));
        let no_address = Peer {
            ip: None,
            pod: None,
        };
        assert!(!reaches(&no_address));
    }

    #[test]
    fn cidrs_read_as_go_reads_them() {
        let contains =
            |cidr: &str, ip: &str| Cidr::parse(cidr).unwrap().contains(ip.parse().unwrap());
        // Host bits are masked off.
        assert!(contains("10.1.2.3/8", "10.200.0.1"));
        assert!(contains("0.0.0.0/0", "203.0.113.1") && !contains("0.0.0.0/0", "2001:db8::1"));
        assert!(contains("::/0", "2001:db8::1") && !contains("::/0", "192.0.2.1"));
        assert!(!contains("::/0", "::ffff:192.0.2.1"), "Go: an IPv4 address");
        assert!(contains("192.0.2.7/32", "192.0.2.7") && !contains("192.0.2.7/32", "192.0.2.8"));
        // An IPv4-mapped network of /96 or more is the IPv4 network; shorter, an IPv6 one.
        assert!(contains("::ffff:192.0.2.0/120", "192.0.2.9"));
        assert!(contains("::ffff:192.0.2.0/120", "::ffff:192.0.2.9"));
        assert!(!contains("::ffff:192.0.2.0/64", "192.0.2.9"));
        assert!(contains("::ffff:192.0.2.0/64", "::1"));
        // Leading zeros in the prefix, as Go's dtoi; no sign, no overflow, no zone.
        assert!(contains("10.0.0.0/008", "10.1.1.1"));
        for bad in [
            "10.0.0.0",
            "10.0.0.0/+8",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "10.0.0/8",
            "fe80::1%eth0/64",
            "10.0.0.0/99999999999999999999",
            "",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ports_protocols_names_and_ranges() {
        let p = policies(json!([policy(
            json!({"podSelector": {}, "ingress": [{"ports": [
                {"port": 80},
                {"port": "metrics", "protocol": "TCP"},
                {"port": 30000, "endPort": 30010, "protocol": "UDP"},
                {"protocol": "SCTP"},
            ]}]})
        )]));
        let t = |port: u16, protocol: &str, name: Option<&str>| Traffic {
            port_name: name.map(str::to_owned),
            protocol: protocol.into(),
            ..tcp(&db(), &web(), port)
        };
        let ok = |t: Traffic| p.decide(&t).ingress;
        assert!(ok(t(80, "TCP", None)), "protocol defaults to TCP");
        assert!(!ok(t(80, "UDP", None)));
        assert!(ok(t(9090, "TCP", Some("metrics"))));
        assert!(!ok(t(9090, "TCP", Some("http"))) && !ok(t(9090, "TCP", None)));
        assert!(ok(t(30000, "UDP", None)) && ok(t(30010, "UDP", None)));
        assert!(!ok(t(30011, "UDP", None)) && !ok(t(30005, "TCP", None)));
        assert!(ok(t(1, "SCTP", None)) && ok(t(65535, "SCTP", None)));
    }

    #[test]
    fn selectors_follow_kubernetes_where_cyclonus_does_not() {
        // NotIn matches a pod without the key (cyclonus: no).
        let p = policies(json!([policy(json!({"podSelector": {"matchExpressions":
            [{"key": "tier", "operator": "NotIn", "values": ["front"]}]}}))]));
        assert!(!p.decide(&tcp(&db(), &web(), 80)).ingress);
        let front = pod("prod", &[("tier", "front")], "10.244.1.20");
        assert!(p.decide(&tcp(&db(), &front, 80)).ingress);
        // matchLabels with an empty value needs the key (cyclonus: a missing key matches).
        let p = policies(json!([policy(
            json!({"podSelector": {"matchLabels": {"tier": ""}}})
        )]));
        assert!(p.decide(&tcp(&db(), &web(), 80)).ingress);
        let blank = pod("prod", &[("tier", "")], "10.244.1.21");
        assert!(!p.decide(&tcp(&db(), &blank, 80)).ingress);
        // In and NotIn without values compare against none.
        let p = policies(json!([policy(json!({"podSelector": {"matchExpressions":
            [{"key": "app", "operator": "In"}]}}))]));
        assert!(p.decide(&tcp(&db(), &web(), 80)).ingress);
        let p = policies(json!([policy(json!({"podSelector": {"matchExpressions":
            [{"key": "app", "operator": "NotIn"}]}}))]));
        assert!(!p.decide(&tcp(&db(), &web(), 80)).ingress);
    }

    #[test]
    fn what_cyclonus_panics_on_is_refused_with_its_place() {
        let e = refused(policy(json!({"ingress": [{"from": [{"ipBlock":
            {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "10.2.0.0/99"]}}]}]})));
        assert_eq!(
            e.to_string(),
            "NetworkPolicy prod/p: spec.ingress[0].from[0].ipBlock.except[1]: invalid CIDR \"10.2.0.0/99\""
        );
        let e = refused(policy(
            json!({"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0"}}]}]}),
        ));
        assert_eq!(e.field, "spec.egress[0].to[0].ipBlock.cidr");
        let e = refused(policy(json!({"podSelector": {"matchExpressions":
            [{"key": "app", "operator": "in", "values": ["web"]}]}})));
        assert_eq!(e.field, "spec.podSelector");
        let e = refused(policy(
            json!({"egress": [{"to": [{"namespaceSelector": {"matchExpressions":
            [{"key": "a", "operator": "Gt", "values": ["1"]}]}}]}]}),
        ));
        assert_eq!(e.field, "spec.egress[0].to[0].namespaceSelector");
        for port in [
            json!({"port": 90, "endPort": 80}),
            json!({"port": "http", "endPort": 80}),
            json!({"endPort": 80}),
        ] {
            let e = refused(policy(json!({"ingress": [{"ports": [{"port": 1}, port]}]})));
            assert_eq!(e.field, "spec.ingress[0].ports[1].endPort", "{e}");
        }
        // Rules of a direction the policy does not apply in are not read (cyclonus builds
        // matchers for its policyTypes only), so they cannot be refused either.
        let p: NetworkPolicy = serde_json::from_value(policy(json!({"policyTypes": ["Ingress"],
            "egress": [{"ports": [{"endPort": 1}]}]})))
        .unwrap();
        assert!(Policies::new(&[p]).is_ok());
    }
}
