//! Preview: what enforcing the intents bound in audit or shadow mode would block, before anyone
//! enforces them. For network intents it is computed, not guessed: the NetworkPolicies and
//! Admin-tier ClusterNetworkPolicies that promotion would write are added to those in force,
//! and every connection through a Service of the cluster that the evaluator ([`crate::netpol`],
//! checked against cyclonus and kube-network-policies) allows now and denies then is listed, at
//! the workload that would lose it. For Kyverno's
//! validate rules it is read, not computed: Kyverno's background scan of the audit policy
//! reports each resource that breaks a rule, which enforcing would refuse. Other engines say
//! why they cannot be previewed here.

use crate::catalog::Engine;
use crate::engines::{self, AUDIT, EngineSet, Environment, PolicyInput};
use crate::netpol::{self, ClusterNetworkPolicy, InvalidPolicy, Peer, PodPeer, Policies, Traffic};
use crate::posture::{Pod, PolicyCoverage, Workload};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use nimbus_api::posture::{
    BlockedConnection, EngineCoverage, EngineState, Preview, Reason, Reference, Refusal,
    WorkloadPosture,
};
use nimbus_api::{BindingPreview, NimbusRule};
use std::collections::{BTreeMap, BTreeSet};

/// The action promotion enforces with.
mod kyverno_reports;
mod listing;
mod running;
pub use kyverno_reports::{Report, ReportResult, Reported, Unreadable, reported};
use kyverno_reports::{kyverno_key, refusals};
use listing::key;
pub use listing::{MAX_EXAMPLES, WorkloadKey};
pub use running::running_violations;

const BLOCK: &str = "Block";

/// At most this many blocked connections are listed per workload; the rest are counted.
pub const MAX_LISTED: usize = 100;

/// A Service, as far as the preview needs it.
#[derive(Clone, Debug, Default)]
pub struct Service {
    pub namespace: String,
    pub name: String,
    /// `None`: no selector; its endpoints are managed by hand and not previewed.
    pub selector: Option<BTreeMap<String, String>>,
    pub ports: Vec<ServicePort>,
}

#[derive(Clone, Debug)]
pub struct ServicePort {
    pub port: u16,
    pub target: Target,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
}

/// A Service port's `targetPort`.
#[derive(Clone, Debug)]
pub enum Target {
    Number(u16),
    /// A container port's name, resolved per pod.
    Name(String),
}

/// A NetworkPolicy or ClusterNetworkPolicy that enforcing an intent would write.
#[derive(Clone, Debug)]
pub struct Planned {
    /// The intent's ID.
    pub intent: String,
    pub policy: PlannedPolicy,
}

#[derive(Clone, Debug)]
pub enum PlannedPolicy {
    Namespaced(Box<NetworkPolicy>),
    Cluster(Box<ClusterNetworkPolicy>),
}

/// What the cluster holds now.
pub struct Network<'a> {
    pub workloads: &'a [Workload],
    /// Labels of each namespace, by name.
    pub namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
    pub services: &'a [Service],
    /// Every NetworkPolicy of the cluster.
    pub in_force: &'a [&'a NetworkPolicy],
    /// The ClusterNetworkPolicies in force (the operator's: it reads no others).
    pub cluster_in_force: &'a [&'a ClusterNetworkPolicy],
}

/// The network policies that enforcing the audited rules of `input` would write: its rules with
/// action `Block`, translated as the operator translates them. Rules enforced already are left
/// out (their objects are in force, or their problems reported).
pub fn planned(
    input: &PolicyInput,
    env: &Environment,
    engines: &EngineSet,
) -> Result<Vec<Planned>, InvalidPolicy> {
    if input.rules.iter().all(|r| r.rule.action != AUDIT) {
        return Ok(Vec::new());
    }
    let mut enforced: Vec<NimbusRule> = input.rules.to_vec();
    crate::plan::set_action(&mut enforced, BLOCK);
    let enforcing = PolicyInput {
        rules: &enforced,
        ..input.clone()
    };
    engines::translate(&enforcing, env, engines)
        .objects
        .into_iter()
        .filter(|g| NETWORK_ENGINES.contains(&g.engine) && input.rules[g.rule].rule.action == AUDIT)
        .map(|g| {
            let invalid = |e: serde_json::Error| InvalidPolicy {
                policy: g.entry(),
                field: "spec".to_owned(),
                reason: format!("not a {}: {e}", g.kind.kind),
            };
            let value = serde_json::to_value(&g.object).map_err(invalid)?;
            let policy = match g.engine {
                Engine::ClusterNetworkPolicy => PlannedPolicy::Cluster(Box::new(
                    serde_json::from_value(value).map_err(invalid)?,
                )),
                _ => PlannedPolicy::Namespaced(Box::new(
                    serde_json::from_value(value).map_err(invalid)?,
                )),
            };
            Ok(Planned {
                intent: input.rules[g.rule].id.clone(),
                policy,
            })
        })
        .collect()
}

/// The engines whose objects the preview computes (see [`blocked`]).
const NETWORK_ENGINES: [Engine; 2] = [Engine::NetworkPolicy, Engine::ClusterNetworkPolicy];

/// The network `planned` adds to the `policies` and `cluster` policies in force (both tiers of
/// ClusterNetworkPolicy around the NetworkPolicies).
fn with<'p>(
    policies: &Policies,
    cluster: &[&ClusterNetworkPolicy],
    planned: impl Iterator<Item = &'p Planned>,
) -> Result<netpol::Network, InvalidPolicy> {
    let mut policies = policies.clone();
    let mut cluster = cluster.to_vec();
    for p in planned {
        match &p.policy {
            PlannedPolicy::Namespaced(np) => policies.add([&**np])?,
            PlannedPolicy::Cluster(cnp) => cluster.push(cnp),
        }
    }
    netpol::Network::new(cluster, policies)
}

/// What [`blocked`] found: the connections each workload would lose.
pub type Found = BTreeMap<WorkloadKey, BTreeSet<BlockedConnection>>;

/// A Service port as one of its backend pods serves it.
struct Backend<'a> {
    service: &'a Service,
    port: &'a ServicePort,
    pod: &'a Pod,
    workload: &'a Workload,
    /// The container port the traffic arrives at, and its name.
    target: u16,
    target_name: Option<String>,
}

/// How the posture of a workload in `namespace` refers to `object`: by name in its own
/// namespace, as "a <kind> in another namespace" (no namespace, an empty name) anywhere else.
/// Whoever may read a namespace's postures (and its bindings' `status.preview`) need not be
/// allowed to list anything of another namespace, so a posture never names what is there.
pub fn seen_from(namespace: &str, object: Reference) -> Reference {
    if object.namespace.as_deref() == Some(namespace) {
        return object;
    }
    Reference {
        kind: object.kind,
        namespace: None,
        name: String::new(),
    }
}

/// Whether `r` is an object of another namespace, not named (see [`seen_from`]).
pub fn unnamed(r: &Reference) -> bool {
    r.name.is_empty()
}

/// Every connection through a Service that is allowed now and denied once `planned` is in
/// force, listed at the workload that would lose it: `Egress` at the client (when its own
/// egress is cut), `Ingress` at the server (when its ingress is cut). Only pods with an IP
/// take part: a pod without one is not running and has no connections to lose. A Service or
/// client of another namespace than the workload's is not named ([`seen_from`]): connections
/// that differ only in which one it is are listed once.
pub fn blocked(network: &Network, planned: &[Planned]) -> Result<Found, InvalidPolicy> {
    let mut found = Found::new();
    if planned.is_empty() {
        return Ok(found);
    }
    // The NetworkPolicies in force are parsed once; each "then" is a copy with planned ones
    // added.
    let policies = Policies::new(network.in_force.iter().copied())?;
    let cluster = network.cluster_in_force;
    let now = with(&policies, cluster, std::iter::empty())?;
    let then = with(&policies, cluster, planned.iter())?;
    let intents: BTreeSet<&str> = planned.iter().map(|p| p.intent.as_str()).collect();
    // A connection the union of policies denies, each policy isolating that end denies alone
    // too (allows only add up, and an Admin-tier rule denies whatever follows it); so each
    // intent is judged with its own policies.
    let each = intents
        .into_iter()
        .map(|id| {
            let own = planned.iter().filter(|p| p.intent == id);
            Ok((id, with(&policies, cluster, own)?))
        })
        .collect::<Result<Vec<(&str, netpol::Network)>, InvalidPolicy>>()?;

    // Adding policies changes only what reaches or leaves the pods they apply to. Each pod's
    // peer is built once: `(backend, its peer, affected)`.
    let planned_alone = with(&Policies::default(), &[], planned.iter())?;
    let affected = |peer: &Peer| peer.pod.as_ref().is_some_and(|p| planned_alone.judges(p));
    let backends: Vec<(Backend, Peer, bool)> = backends(network)
        .into_iter()
        .map(|b| {
            let peer = peer(network, b.pod);
            let affected = affected(&peer);
            (b, peer, affected)
        })
        .collect();
    for client in network.workloads {
        for source in client.pods.iter().filter(|p| p.ip.is_some()) {
            let source = peer(network, source);
            let source_affected = affected(&source);
            for (b, destination, _) in backends.iter().filter(|(.., a)| *a || source_affected) {
                let traffic = Traffic {
                    source: source.clone(),
                    destination: destination.clone(),
                    port: b.target,
                    port_name: b.target_name.clone(),
                    protocol: b.port.protocol.clone(),
                };
                let (before, after) = (now.decide(&traffic), then.decide(&traffic));
                if !before.allowed() || after.allowed() {
                    continue;
                }
                let by = |cut: fn(bool, bool) -> bool| -> Vec<String> {
                    each.iter()
                        .filter(|(_, alone)| {
                            let d = alone.decide(&traffic);
                            cut(d.egress, d.ingress)
                        })
                        .map(|(id, _)| (*id).to_owned())
                        .collect()
                };
                let service = Reference {
                    kind: "Service".to_owned(),
                    namespace: Some(b.service.namespace.clone()),
                    name: b.service.name.clone(),
                };
                if before.egress && !after.egress {
                    found
                        .entry(key(client))
                        .or_default()
                        .insert(BlockedConnection {
                            direction: "Egress".to_owned(),
                            service: seen_from(&client.namespace, service.clone()),
                            port: b.port.port,
                            protocol: b.port.protocol.clone(),
                            client: None,
                            intents: by(|egress, _| !egress),
                        });
                }
                if before.ingress && !after.ingress {
                    found
                        .entry(key(b.workload))
                        .or_default()
                        .insert(BlockedConnection {
                            direction: "Ingress".to_owned(),
                            service,
                            port: b.port.port,
                            protocol: b.port.protocol.clone(),
                            client: Some(seen_from(
                                &b.workload.namespace,
                                Reference {
                                    kind: client.kind.clone(),
                                    namespace: Some(client.namespace.clone()),
                                    name: client.name.clone(),
                                },
                            )),
                            intents: by(|_, ingress| !ingress),
                        });
                }
            }
        }
    }
    Ok(found)
}

/// Each port of each Service with a selector, at each pod it selects that serves it.
fn backends<'a>(network: &'a Network) -> Vec<Backend<'a>> {
    let mut out = Vec::new();
    for service in network.services {
        let Some(selector) = service.selector.as_ref().filter(|s| !s.is_empty()) else {
            continue;
        };
        for workload in network
            .workloads
            .iter()
            .filter(|w| w.namespace == service.namespace)
        {
            for pod in workload.pods.iter().filter(|p| {
                p.ip.is_some() && selector.iter().all(|(k, v)| p.labels.get(k) == Some(v))
            }) {
                for port in &service.ports {
                    let served = match &port.target {
                        Target::Number(n) => Some((
                            *n,
                            pod.ports
                                .iter()
                                .find(|c| c.port == *n && c.protocol == port.protocol)
                                .and_then(|c| c.name.clone()),
                        )),
                        // A pod without a port of that name is not an endpoint of this port.
                        Target::Name(name) => pod
                            .ports
                            .iter()
                            .find(|c| {
                                c.name.as_deref() == Some(name) && c.protocol == port.protocol
                            })
                            .map(|c| (c.port, Some(name.clone()))),
                    };
                    if let Some((target, target_name)) = served {
                        out.push(Backend {
                            service,
                            port,
                            pod,
                            workload,
                            target,
                            target_name,
                        });
                    }
                }
            }
        }
    }
    out
}

fn peer(network: &Network, pod: &Pod) -> Peer {
    Peer {
        ip: pod.ip,
        pod: Some(pod_peer(network, pod)),
    }
}

fn pod_peer(network: &Network, pod: &Pod) -> PodPeer {
    PodPeer {
        namespace: pod.namespace.clone(),
        namespace_labels: network
            .namespaces
            .get(&pod.namespace)
            .cloned()
            .unwrap_or_default(),
        pod_labels: pod.labels.clone(),
    }
}

/// What one engine's share of an audited intent on a workload would refuse, or why that
/// cannot be previewed. NetworkPolicy is computed apart ([`blocked`]); what blocks nothing
/// (RBAC grants, k8tls scans) needs no word.
fn engine_preview(
    intent: &str,
    engine: &EngineCoverage,
    reported: &Reported,
    workload: &WorkloadKey,
) -> Result<Vec<Refusal>, Reason> {
    let not = |reason: &str, message: &str| {
        Err(Reason {
            reason: reason.to_owned(),
            message: message.to_owned(),
        })
    };
    let Ok(built_in) = engine.engine.parse::<Engine>() else {
        // An external adapter's engine: the operator knows nothing of what it would refuse.
        return Ok(Vec::new());
    };
    // No wildcard: a newly registered engine does not compile until it says what its audit
    // form would refuse.
    match built_in {
        // Computed apart, from the policies themselves ([`blocked`]).
        Engine::NetworkPolicy | Engine::ClusterNetworkPolicy => Ok(Vec::new()),
        // RBAC grants and TLS scans refuse nothing.
        Engine::Rbac | Engine::K8tls => Ok(Vec::new()),
        Engine::KubeArmor => not(
            "DecidedAtRunTime",
            "kubearmor: decides at run time from what processes do, so it cannot be previewed; \
             its audit alerts show what it would block",
        ),
        Engine::Admission => not(
            "WarnedAtAdmission",
            "admission: kube-apiserver warns each write its audited policy would refuse (and \
             records it in the audit log), but keeps no report of existing workloads, so which \
             it would refuse cannot be read",
        ),
        Engine::Kyverno => match engine.state {
            EngineState::NotInstalled => not(
                "EngineNotInstalled",
                "kyverno: not installed, so which workloads its audit policy would refuse cannot \
                 be computed",
            ),
            EngineState::Auditing | EngineState::Pending => match reported {
                Err(Unreadable::NotServed) => not(
                    "ReportsNotServed",
                    "kyverno: its PolicyReports (wgpolicyk8s.io/v1alpha2) are not served, so \
                     which workloads its audit policy would refuse cannot be read; install \
                     Kyverno's reports controller",
                ),
                Err(Unreadable::NotListed) => not(
                    "ReportsNotRead",
                    "kyverno: its PolicyReports have not been read yet",
                ),
                Ok(by_workload) => refusals(
                    intent,
                    engine,
                    by_workload
                        .get(workload)
                        .map(Vec::as_slice)
                        .unwrap_or_default(),
                ),
            },
            EngineState::Enforcing
            | EngineState::External
            | EngineState::Failed
            | EngineState::NotLive => Ok(Vec::new()),
        },
    }
}

/// Adds the preview to a posture whose workload has intents bound in audit or shadow mode:
/// the connections [`blocked`] found for it (at most [`MAX_LISTED`]), the validate rules
/// Kyverno's reports say it breaks, and the engines that cannot be previewed (the
/// NetworkPolicy engine too, when a policy could not be evaluated).
pub fn attach(
    posture: &mut WorkloadPosture,
    found: &Result<Found, InvalidPolicy>,
    reported: &Reported,
) {
    let workload = (
        posture.metadata.namespace.clone().unwrap_or_default(),
        posture.workload.kind.clone(),
        posture.workload.name.clone(),
    );
    let mut not: Vec<Reason> = Vec::new();
    let mut refused: Vec<Refusal> = Vec::new();
    let mut audited = false;
    for intent in posture.intents.iter().filter(|i| i.action == AUDIT) {
        audited = true;
        for engine in &intent.engines {
            match engine_preview(&intent.id, engine, reported, &workload) {
                Ok(found) => refused.extend(found),
                Err(reason) => not.push(reason),
            }
        }
    }
    if !audited {
        return;
    }
    let blocked = match found {
        Ok(found) => found.get(&workload),
        Err(invalid) => {
            not.push(Reason {
                reason: "NotEvaluated".to_owned(),
                message: format!("netpol: {invalid}"),
            });
            None
        }
    };
    not.sort();
    not.dedup();
    refused.sort();
    refused.dedup();
    let all = blocked.map(BTreeSet::len).unwrap_or_default();
    posture.preview = Some(Preview {
        blocked: blocked
            .into_iter()
            .flatten()
            .take(MAX_LISTED)
            .cloned()
            .collect(),
        omitted: u32::try_from(all.saturating_sub(MAX_LISTED)).unwrap_or(u32::MAX),
        refused,
        not_previewed: not,
    });
}

/// Each binding with intents in audit or shadow mode, and what enforcing them would block,
/// summed from the workload postures' previews (a connection counts for a binding when one of
/// the intents it audits on that workload would block it).
pub fn binding_previews<'w>(
    policies: &[PolicyCoverage],
    postures: impl IntoIterator<Item = &'w WorkloadPosture>,
) -> BTreeMap<Reference, BindingPreview> {
    /// Workloads, connections and reasons not previewed, each described once.
    #[derive(Default)]
    struct Sums {
        workloads: BTreeSet<String>,
        connections: BTreeSet<String>,
        refused: BTreeSet<String>,
        refusals: BTreeSet<String>,
        not_previewed: BTreeSet<String>,
    }
    let mut found: BTreeMap<Reference, Sums> = policies
        .iter()
        .filter(|p| p.rules.iter().any(|r| r.action == AUDIT))
        .filter_map(|p| p.binding.clone())
        .map(|b| (b, Default::default()))
        .collect();
    for posture in postures {
        let Some(preview) = &posture.preview else {
            continue;
        };
        let workload = format!(
            "{} {}/{}",
            posture.workload.kind,
            posture.metadata.namespace.as_deref().unwrap_or_default(),
            posture.workload.name
        );
        for intent in posture.intents.iter().filter(|i| i.action == AUDIT) {
            let Some(sums) = intent.binding.as_ref().and_then(|b| found.get_mut(b)) else {
                continue;
            };
            let reasons = preview.not_previewed.iter().map(|r| r.reason.clone());
            sums.not_previewed.extend(reasons);
            for blocked in preview
                .blocked
                .iter()
                .filter(|b| b.intents.contains(&intent.id))
            {
                sums.workloads.insert(workload.clone());
                let connection = format!("{workload}: {}", describe(blocked));
                sums.connections.insert(connection);
            }
            for refusal in preview.refused.iter().filter(|r| r.intent == intent.id) {
                sums.refused.insert(workload.clone());
                let policy = &refusal.policy;
                sums.refusals.insert(format!(
                    "{workload}: refused by {} {} rule {}",
                    policy.kind,
                    kyverno_key(policy),
                    refusal.rule
                ));
            }
        }
    }
    found
        .into_iter()
        .map(|(binding, sums)| {
            let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
            let preview = BindingPreview {
                workloads: count(sums.workloads.len()),
                connections: count(sums.connections.len()),
                refused: count(sums.refused.len()),
                examples: sums
                    .connections
                    .into_iter()
                    .chain(sums.refusals)
                    .take(MAX_EXAMPLES)
                    .collect(),
                not_previewed: sums.not_previewed.into_iter().collect(),
            };
            (binding, preview)
        })
        .collect()
}

/// `Egress to Service shop/db 5432/TCP`, or `Ingress from Deployment web/client through Service
/// shop/api 8080/TCP`.
/// One not named ([`seen_from`]) reads `a Service in another namespace`.
fn describe(b: &BlockedConnection) -> String {
    let object = |r: &Reference| {
        if unnamed(r) {
            format!("a {} in another namespace", r.kind)
        } else {
            format!(
                "{} {}/{}",
                r.kind,
                r.namespace.as_deref().unwrap_or_default(),
                r.name
            )
        }
    };
    let service = format!("{} {}/{}", object(&b.service), b.port, b.protocol);
    match &b.client {
        None => format!("{} to {service}", b.direction),
        Some(c) => format!("{} from {} through {service}", b.direction, object(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use nimbus_api::NimbusPolicy;
    use serde_json::Value;
    use serde_json::json;

    fn policy(id: &str, action: &str) -> NimbusPolicy {
        serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "NimbusPolicy",
            "metadata": {"name": "web", "namespace": "shop", "uid": "p",
                "ownerReferences": [{"apiVersion": "intent.security.nimbus.com/v1alpha1",
                    "kind": "SecurityIntentBinding", "name": "web", "uid": "b", "controller": true}]},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "rules": [{"id": id, "rule": {"action": action}}]}
        }))
        .expect("valid policy")
    }

    /// What `np` covers, every engine installed and every object present.
    fn coverage_of(np: &NimbusPolicy, binding: Option<Reference>) -> PolicyCoverage {
        let input = PolicyInput::namespaced(np, "p");
        let translation = engines::translate(&input, &Environment::default(), &EngineSet::all());
        PolicyCoverage::new(&crate::posture::PolicyFacts {
            input: &input,
            translation: &translation,
            engines: &EngineSet::all(),
            present: &|_| true,
            intent_name: &|_| None,
            intent_bundle: &|_| None,
            intent_writer: &|_| None,
            binding,
            protected: &Default::default(),
            probes: None,
        })
    }

    fn planned_for(id: &str, action: &str) -> Vec<Planned> {
        let np = policy(id, action);
        let input = PolicyInput::namespaced(&np, "p");
        planned(&input, &Environment::default(), &EngineSet::all()).expect("NetworkPolicies")
    }

    fn workload(ns: &str, app: &str, ip: Option<&str>, ports: &[(&str, u16)]) -> Workload {
        Workload {
            namespace: ns.into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: app.into(),
            uid: None,
            created: None,
            pods: vec![Pod {
                namespace: ns.into(),
                name: format!("{app}-1"),
                labels: BTreeMap::from([("app".to_owned(), app.to_owned())]),
                ip: ip.map(|ip| ip.parse().expect("an IP")),
                ports: ports
                    .iter()
                    .map(|(name, port)| crate::posture::ContainerPort {
                        name: Some((*name).to_owned()),
                        port: *port,
                        protocol: "TCP".into(),
                    })
                    .collect(),
                ..Pod::default()
            }],
        }
    }

    fn service(ns: &str, app: &str, port: u16, target: Target) -> Service {
        Service {
            namespace: ns.into(),
            name: app.into(),
            selector: Some(BTreeMap::from([("app".to_owned(), app.to_owned())])),
            ports: vec![ServicePort {
                port,
                target,
                protocol: "TCP".into(),
            }],
        }
    }

    fn connections(found: &Result<Found, InvalidPolicy>) -> Vec<String> {
        found
            .as_ref()
            .expect("policies that evaluate")
            .iter()
            .flat_map(|((ns, _, name), blocked)| {
                blocked.iter().map(move |b| {
                    format!(
                        "{ns}/{name} {} {}:{}{} by {}",
                        b.direction,
                        b.service.name,
                        b.port,
                        b.client
                            .as_ref()
                            .map(|c| format!(" from {}", c.name))
                            .unwrap_or_default(),
                        b.intents.join(",")
                    )
                })
            })
            .collect()
    }

    /// Only audited rules are planned, with enforcing bodies.
    #[test]
    fn promotion_plans_the_network_policies_of_audited_rules_only() {
        assert!(planned_for("dnsManipulation", "Block").is_empty());
        let planned = planned_for("dnsManipulation", "Audit");
        assert_eq!(planned.len(), 1, "{planned:?}");
        assert_eq!(planned[0].intent, "dnsManipulation");
        let PlannedPolicy::Namespaced(policy) = &planned[0].policy else {
            panic!("a NetworkPolicy: {planned:?}");
        };
        let spec = policy.spec.as_ref().expect("a spec");
        assert_eq!(
            spec.policy_types.as_deref(),
            Some(&["Egress".to_owned()][..])
        );
    }

    /// An egress-only intent on web cuts web's calls to db (named and numbered target ports),
    /// not the calls others make to web; a pod without an IP takes no part.
    #[test]
    fn blocked_connections_are_listed_at_the_workload_that_loses_them() {
        let workloads = [
            workload("shop", "web", Some("10.244.0.10"), &[("http", 8080)]),
            workload("shop", "db", Some("10.244.0.11"), &[("pg", 5432)]),
            workload("shop", "cache", Some("10.244.0.12"), &[]),
            workload("shop", "pending", None, &[]),
        ];
        let services = [
            service("shop", "web", 80, Target::Name("http".into())),
            service("shop", "db", 5432, Target::Name("pg".into())),
            service("shop", "cache", 6379, Target::Number(6379)),
            service("shop", "pending", 80, Target::Number(80)),
        ];
        let namespaces = BTreeMap::from([(
            "shop".to_owned(),
            BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), "shop".to_owned())]),
        )]);
        let network = Network {
            workloads: &workloads,
            namespaces: &namespaces,
            services: &services,
            in_force: &[],
            cluster_in_force: &[],
        };
        let found = blocked(&network, &planned_for("dnsManipulation", "Audit"));
        assert_eq!(
            connections(&found),
            [
                "shop/web Egress cache:6379 by dnsManipulation",
                "shop/web Egress db:5432 by dnsManipulation",
                "shop/web Egress web:80 by dnsManipulation",
            ]
        );

        // denyExternalNetworkAccess also admits ingress only from private networks.
        let mut outside = workload("shop", "partner", Some("100.64.0.1"), &[]);
        outside.kind = "Pod".into();
        let workloads = [workloads[0].clone(), outside];
        let network = Network {
            workloads: &workloads,
            ..network
        };
        let found = blocked(&network, &planned_for("denyExternalNetworkAccess", "Audit"));
        assert_eq!(
            connections(&found),
            [
                "shop/web Egress web:80 by denyExternalNetworkAccess",
                "shop/web Ingress web:80 from partner by denyExternalNetworkAccess",
            ]
        );

        // What a NetworkPolicy in force denies already, promotion does not take away.
        let deny_all: NetworkPolicy = serde_json::from_value(json!({
            "metadata": {"name": "deny", "namespace": "shop"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
        }))
        .expect("a NetworkPolicy");
        let in_force = [&deny_all];
        let network = Network {
            in_force: &in_force,
            ..network
        };
        let found = blocked(&network, &planned_for("denyExternalNetworkAccess", "Audit"));
        assert!(connections(&found).is_empty());
    }

    /// A cluster binding audited with the ClusterNetworkPolicy engine in force: the preview is
    /// what its Admin-tier policy would deny, DNS to anything but the cluster DNS, and nothing
    /// of the in-cluster traffic the NetworkPolicy engine would cut; a tenant's allow-all
    /// NetworkPolicy changes none of it.
    #[test]
    fn an_audited_cluster_intent_previews_what_its_admin_tier_policy_would_deny() {
        let cnp: nimbus_api::ClusterNimbusPolicy = serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterNimbusPolicy",
            "metadata": {"name": "no-rogue-dns", "uid": "c"},
            "spec": {"rules": [{"id": "dnsManipulation", "rule": {"action": "Audit"}}],
                     "workloadSelector": {"matchLabels": {"app": "web"}},
                     "nsSelector": {"matchNames": ["shop"]}}
        }))
        .expect("valid policy");
        let input = PolicyInput::cluster(&cnp, "c");
        let engines = EngineSet {
            preference: crate::engines::Preference::new(&[Engine::ClusterNetworkPolicy])
                .expect("a preference"),
            ..EngineSet::all()
        };
        let planned = planned(&input, &Environment::default(), &engines).expect("planned");
        assert!(
            matches!(
                &planned[..],
                [Planned {
                    policy: PlannedPolicy::Cluster(_),
                    ..
                }]
            ),
            "{planned:?}"
        );
        let workloads = [
            workload("shop", "web", Some("10.244.0.10"), &[("http", 8080)]),
            workload("shop", "resolver", Some("10.244.0.11"), &[("dns", 53)]),
            workload("shop", "api", Some("10.244.0.12"), &[("http", 8080)]),
        ];
        let services = [
            service("shop", "resolver", 53, Target::Name("dns".into())),
            service("shop", "api", 80, Target::Name("http".into())),
        ];
        let namespaces = BTreeMap::from([(
            "shop".to_owned(),
            BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), "shop".to_owned())]),
        )]);
        let allow_all: NetworkPolicy = serde_json::from_value(json!({
            "metadata": {"name": "tenant", "namespace": "shop"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{}], "egress": [{}]}
        }))
        .expect("a NetworkPolicy");
        for in_force in [&[][..], &[&allow_all][..]] {
            let network = Network {
                workloads: &workloads,
                namespaces: &namespaces,
                services: &services,
                in_force,
                cluster_in_force: &[],
            };
            assert_eq!(
                connections(&blocked(&network, &planned)),
                ["shop/web Egress resolver:53 by dnsManipulation"],
                "{} NetworkPolicies in force",
                in_force.len()
            );
        }
    }

    /// A posture names nothing of another namespace: its Services and clients there are "a
    /// Service in another namespace", so whoever reads one namespace's postures learns no
    /// other namespace's inventory.
    #[test]
    fn a_preview_names_nothing_of_another_namespace() {
        let r = |ns: Option<&str>, name: &str| Reference {
            kind: "Service".into(),
            namespace: ns.map(str::to_owned),
            name: name.into(),
        };
        for (from, object, expected) in [
            ("shop", r(Some("shop"), "db"), r(Some("shop"), "db")),
            ("shop", r(Some("bank"), "vault"), r(None, "")),
            ("shop", r(None, "node-thing"), r(None, "")),
        ] {
            assert_eq!(seen_from(from, object.clone()), expected, "{object:?}");
        }

        // web (shop) loses egress to bank/vault and to shop/db; partners/outside (outside
        // the private networks) loses its way into web.
        let mut outside = workload("partners", "outside", Some("100.64.0.1"), &[]);
        outside.kind = "Pod".into();
        let workloads = [
            workload("shop", "web", Some("10.244.0.10"), &[("http", 8080)]),
            workload("shop", "db", Some("10.244.0.11"), &[("pg", 5432)]),
            workload("bank", "vault", Some("10.244.1.11"), &[("pg", 5432)]),
            workload("bank", "ledger", Some("10.244.1.12"), &[("pg", 5432)]),
            outside,
        ];
        let services = [
            service("shop", "web", 80, Target::Name("http".into())),
            service("shop", "db", 5432, Target::Name("pg".into())),
            service("bank", "vault", 5432, Target::Name("pg".into())),
            service("bank", "ledger", 5432, Target::Name("pg".into())),
        ];
        let label = |ns: &str| {
            (
                ns.to_owned(),
                BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), ns.to_owned())]),
            )
        };
        let namespaces = BTreeMap::from([label("shop"), label("bank"), label("partners")]);
        let network = Network {
            workloads: &workloads,
            namespaces: &namespaces,
            services: &services,
            in_force: &[],
            cluster_in_force: &[],
        };
        let found = blocked(&network, &planned_for("dnsManipulation", "Audit"));
        let described: Vec<String> = found
            .as_ref()
            .expect("policies that evaluate")
            .values()
            .flatten()
            .map(describe)
            .collect();
        // bank/vault and bank/ledger are one unnamed connection.
        assert_eq!(
            described,
            [
                "Egress to a Service in another namespace 5432/TCP",
                "Egress to Service shop/db 5432/TCP",
                "Egress to Service shop/web 80/TCP",
            ]
        );
        let found = blocked(&network, &planned_for("denyExternalNetworkAccess", "Audit"));
        let described: Vec<String> = found
            .as_ref()
            .expect("policies that evaluate")
            .values()
            .flatten()
            .map(describe)
            .collect();
        assert!(
            described.contains(
                &"Ingress from a Pod in another namespace through Service shop/web 80/TCP"
                    .to_owned()
            ),
            "{described:?}"
        );
        for b in found.iter().flat_map(|f| f.values().flatten()) {
            for r in std::iter::once(&b.service).chain(&b.client) {
                assert!(
                    unnamed(r) || r.namespace.as_deref() == Some("shop"),
                    "{b:?} names {r:?}"
                );
            }
        }
    }

    /// The list is bounded; KubeArmor says why it is not previewed; an enforced workload has
    /// no preview.
    #[test]
    fn the_preview_is_bounded_and_says_what_it_cannot_compute() {
        let coverage = coverage_of(&policy("dnsManipulation", "Audit"), None);
        let web = workload("shop", "web", Some("10.244.0.10"), &[]);
        let mut posture = crate::posture::workload_posture(&web, &[coverage]);
        let many: BTreeSet<BlockedConnection> = (0..MAX_LISTED + 5)
            .map(|port| BlockedConnection {
                direction: "Egress".into(),
                service: Reference {
                    kind: "Service".into(),
                    namespace: Some("shop".into()),
                    name: "db".into(),
                },
                port: u16::try_from(port).expect("a port"),
                protocol: "TCP".into(),
                client: None,
                intents: vec!["dnsManipulation".into()],
            })
            .collect();
        let key = ("shop".to_owned(), "Deployment".to_owned(), "web".to_owned());
        let found = Ok(Found::from([(key, many)]));
        attach(&mut posture, &found, &Err(Unreadable::NotServed));
        let preview = posture.preview.clone().expect("a preview");
        assert_eq!((preview.blocked.len(), preview.omitted), (MAX_LISTED, 5));
        let reasons: Vec<&str> = preview
            .not_previewed
            .iter()
            .map(|r| r.reason.as_str())
            .collect();
        assert_eq!(reasons, ["DecidedAtRunTime"]);
        // Kyverno's audit policies are judged by Kyverno's own reports, when they can be read;
        // what blocks nothing (RBAC grants, k8tls scans) and what is computed (NetworkPolicy)
        // needs no word.
        let nothing = BTreeMap::new();
        let reason = |engine: &str, state, reported: &Reported| {
            let coverage = EngineCoverage {
                engine: engine.into(),
                state,
                objects: vec![],
            };
            engine_preview("escapeToHost", &coverage, reported, &Default::default())
                .err()
                .map(|r| r.reason)
        };
        let installed = EngineState::Auditing;
        for (reported, expected) in [
            (Err(Unreadable::NotServed), "ReportsNotServed"),
            (Err(Unreadable::NotListed), "ReportsNotRead"),
            (Ok(nothing.clone()), "NotScannedYet"),
        ] {
            let got = reason("kyverno", installed, &reported);
            assert_eq!(got.as_deref(), Some(expected));
        }
        let reported = Ok(nothing);
        assert_eq!(
            reason("kyverno", EngineState::NotInstalled, &reported).as_deref(),
            Some("EngineNotInstalled")
        );
        for engine in ["netpol", "rbac", "k8tls"] {
            assert_eq!(reason(engine, installed, &reported), None, "{engine}");
        }
        // The admission engine warns at admission and keeps no reports: not previewed.
        assert_eq!(
            reason("admission", installed, &reported).as_deref(),
            Some("WarnedAtAdmission")
        );

        let mut enforced = crate::posture::workload_posture(&web, &[]);
        attach(&mut enforced, &found, &reported);
        assert_eq!(enforced.preview, None);

        // A policy that cannot be evaluated is said, not taken for "nothing blocked".
        let invalid = Err(InvalidPolicy {
            policy: "shop/odd".into(),
            field: "spec.egress[0].to[0].ipBlock.cidr".into(),
            reason: "not a CIDR".into(),
        });
        attach(&mut posture, &invalid, &Err(Unreadable::NotServed));
        let preview = posture.preview.expect("a preview");
        assert!(preview.blocked.is_empty());
        assert!(
            preview
                .not_previewed
                .iter()
                .any(|r| r.reason == "NotEvaluated"),
            "{preview:?}"
        );
    }

    /// A binding's summary counts what its own audited intents would block, names the first
    /// connections, and is there (empty) when it would block nothing.
    #[test]
    fn a_binding_sums_what_its_audited_intents_would_block() {
        let binding = Reference {
            kind: "SecurityIntentBinding".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
        };
        let coverage =
            |action: &str| coverage_of(&policy("dnsManipulation", action), Some(binding.clone()));
        let audited = [coverage("Audit")];
        let web = workload("shop", "web", Some("10.244.0.10"), &[]);
        let connection = |port: u16, intent: &str| BlockedConnection {
            direction: "Egress".into(),
            service: Reference {
                kind: "Service".into(),
                namespace: Some("shop".into()),
                name: "db".into(),
            },
            port,
            protocol: "TCP".into(),
            client: None,
            intents: vec![intent.into()],
        };
        let key = ("shop".to_owned(), "Deployment".to_owned(), "web".to_owned());
        let found = Ok(Found::from([(
            key,
            BTreeSet::from([
                connection(5432, "dnsManipulation"),
                connection(6379, "denyExternalNetworkAccess"),
            ]),
        )]));
        let mut posture = crate::posture::workload_posture(&web, &audited);
        attach(&mut posture, &found, &Err(Unreadable::NotServed));
        let previews = binding_previews(&audited, &[posture.clone()]);
        assert_eq!(
            previews[&binding],
            BindingPreview {
                workloads: 1,
                connections: 1,
                refused: 0,
                examples: vec![
                    "Deployment shop/web: Egress to Service shop/db 5432/TCP".to_owned()
                ],
                not_previewed: vec!["DecidedAtRunTime".to_owned()],
            }
        );
        let nothing = binding_previews(&audited, &[]);
        assert_eq!(nothing[&binding], BindingPreview::default());
        let enforced = [coverage("Block")];
        assert!(binding_previews(&enforced, &[posture]).is_empty());
    }

    /// Kyverno's reports of the audit policy are read back at the workload their resources
    /// belong to (itself, its pods, its ReplicaSets); only failures of our own policies count,
    /// one refusal per rule, and the binding counts the workload once.
    #[test]
    fn kyverno_reports_of_the_audit_policy_say_what_enforcing_would_refuse() {
        let binding = Reference {
            kind: "SecurityIntentBinding".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
        };
        let mut np = policy("escapeToHost", "Audit");
        np.spec.rules[0].rule.params = Some(BTreeMap::from([(
            "psaLevel".to_owned(),
            vec!["baseline".to_owned()],
        )]));
        let coverage = coverage_of(&np, Some(binding.clone()));
        let mut web = workload("shop", "web", None, &[]);
        web.pods[0].controller = Some(OwnerReference {
            kind: "ReplicaSet".into(),
            name: "web-5d8f".into(),
            ..OwnerReference::default()
        });
        let mut second = web.pods[0].clone();
        second.name = "web-2".into();
        web.pods.push(second);
        let db = workload("shop", "db", None, &[]);
        let mut posture = crate::posture::workload_posture(&web, std::slice::from_ref(&coverage));
        let kyverno = posture.intents[0]
            .engines
            .iter()
            .find(|e| e.engine == "kyverno")
            .expect("kyverno enforces escapeToHost")
            .clone();
        assert_eq!(kyverno.state, EngineState::Auditing, "{kyverno:?}");
        let ours = kyverno_key(&kyverno.objects[0]);

        let report = |kind: &str, name: &str, results: Value| {
            Report::from_json(&json!({
                "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
                "metadata": {"name": "8c2a", "namespace": "shop"},
                "scope": {"apiVersion": "v1", "kind": kind, "name": name, "namespace": "shop",
                          "uid": "8c2a"},
                "results": results,
            }))
            .expect("a report")
        };
        let result = |policy: &str, rule: &str, result: &str| {
            json!({"policy": policy, "rule": rule, "result": result, "message": format!("{rule} {result}"),
                   "scored": true, "source": "kyverno", "timestamp": {"seconds": 1, "nanos": 0}})
        };
        let reports = Ok(vec![
            report(
                "Pod",
                "web-1",
                json!([
                    result(&ours, "pod-security", "fail"),
                    result("other", "team-label", "fail")
                ]),
            ),
            report(
                "Pod",
                "web-2",
                json!([result(&ours, "pod-security", "fail")]),
            ),
            report(
                "ReplicaSet",
                "web-5d8f",
                json!([result(&ours, "autogen-pod-security", "fail")]),
            ),
            report(
                "Deployment",
                "web",
                json!([result(&ours, "autogen-pod-security", "pass")]),
            ),
            report(
                "Pod",
                "db-1",
                json!([result(&ours, "pod-security", "fail")]),
            ),
        ]);
        let found = Ok(Found::new());
        let reported = reported(&[web.clone(), db], &reports);
        attach(&mut posture, &found, &reported);
        let preview = posture.preview.clone().expect("a preview");
        let pod = |name: &str| Reference {
            kind: "Pod".into(),
            namespace: Some("shop".into()),
            name: name.into(),
        };
        assert_eq!(
            preview.refused,
            [
                Refusal {
                    intent: "escapeToHost".into(),
                    policy: kyverno.objects[0].clone(),
                    rule: "autogen-pod-security".into(),
                    message: "autogen-pod-security fail".into(),
                    resources: vec![Reference {
                        kind: "ReplicaSet".into(),
                        namespace: Some("shop".into()),
                        name: "web-5d8f".into(),
                    }],
                    count: 1,
                },
                Refusal {
                    intent: "escapeToHost".into(),
                    policy: kyverno.objects[0].clone(),
                    rule: "pod-security".into(),
                    message: "pod-security fail".into(),
                    resources: vec![pod("web-1"), pod("web-2")],
                    count: 2,
                },
            ]
        );
        // KubeArmor enforces escapeToHost too, at run time.
        let reasons: Vec<&str> = preview
            .not_previewed
            .iter()
            .map(|r| r.reason.as_str())
            .collect();
        assert_eq!(reasons, ["DecidedAtRunTime"]);

        let summary = &binding_previews(&[coverage], &[posture])[&binding];
        assert_eq!((summary.refused, summary.workloads), (1, 0));
        assert_eq!(
            summary.examples,
            [
                format!("Deployment shop/web: refused by Policy {ours} rule autogen-pod-security"),
                format!("Deployment shop/web: refused by Policy {ours} rule pod-security"),
            ]
        );
    }
}
