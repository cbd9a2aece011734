//! The core's NetworkPolicy evaluator (`nimbus_core::netpol`) against an independent one,
//! cyclonus's matcher (tools/netpol-decider), on random policies and traffic: every
//! (policies, traffic) case must get the same ingress, egress and overall verdict from both.
//!
//! `NIMBUS_NETPOL_ORACLE_CASES` cases (default 2,000; `make netpol-oracle` runs 100,000),
//! generated from `NIMBUS_NETPOL_ORACLE_SEED` (default 1): the same seed and count give the
//! same cases. Each random policy set is judged on [`TRAFFIC_PER_SET`] random traffics, and
//! one decider process judges [`SETS_PER_BATCH`] sets (a process per set would be most of the
//! run). A disagreement fails the test with the policies and the traffic as JSON, which
//! `netpol-decider` also reads.
//!
//! The cases come from [`generate`]. [`cluster_tier`] judges the Admin tier of
//! ClusterNetworkPolicy the same way, against kube-network-policies.

mod cluster_tier;
#[path = "../common/mod.rs"]
mod common;
mod generate;

use generate::{Rng, Scenario, TRAFFIC_PER_SET};

use nimbus_core::netpol::{Decision, Peer, Policies, Traffic};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Policy sets per decider process.
const SETS_PER_BATCH: usize = 2_000;
/// Disagreements printed in full; the rest are counted.
const SHOWN: usize = 5;

#[test]
fn the_evaluator_agrees_with_cyclonus() {
    let cases: usize = env("NIMBUS_NETPOL_ORACLE_CASES", 2_000);
    let seed: u64 = env("NIMBUS_NETPOL_ORACLE_SEED", 1);
    let sets: Vec<Scenario> = (0..cases.div_ceil(TRAFFIC_PER_SET))
        .map(|i| Scenario::random(&mut Rng::new(seed, i as u64)))
        .collect();

    let mut compared = 0;
    let mut tally = Tally::default();
    let mut disagreements: Vec<(String, Value)> = Vec::new();
    for (b, batch) in sets.chunks(SETS_PER_BATCH).enumerate() {
        let verdicts = decide(batch);
        for (s, (scenario, verdicts)) in batch.iter().zip(&verdicts).enumerate() {
            let policies = Policies::new(&scenario.policies).unwrap_or_else(|e| {
                panic!(
                    "the evaluator refused policies cyclonus judged: {e}\n{}",
                    pretty(&json!(scenario.policies))
                )
            });
            for (t, traffic) in scenario.traffic.iter().enumerate().take(cases - compared) {
                let ours = policies.decide(traffic);
                let theirs = &verdicts[&t.to_string()];
                tally.count(ours);
                compared += 1;
                if (ours.ingress, ours.egress, ours.allowed())
                    != (theirs.ingress, theirs.egress, theirs.allowed)
                {
                    let header = format!(
                        "policy set {} (seed {seed}), traffic {t}: nimbus {ours:?}, cyclonus \
                         {theirs:?}",
                        b * SETS_PER_BATCH + s,
                    );
                    let input = json!({"policies": scenario.policies,
                                       "traffic": [traffic_json(t, traffic)]});
                    disagreements.push((header, input));
                }
            }
        }
    }
    println!(
        "netpol oracle: {compared} cases ({} policy sets, seed {seed}) compared with cyclonus, \
         {} disagreements; {tally}",
        sets.len(),
        disagreements.len()
    );
    // The first case readable, the others on one line each; all as netpol-decider input.
    let shown: Vec<String> = (disagreements.iter().take(SHOWN).enumerate())
        .map(|(i, (header, input))| match i {
            0 => format!("{header}\n{}", pretty(input)),
            _ => format!("{header}\n{input}"),
        })
        .collect();
    assert!(
        disagreements.is_empty(),
        "{} of {compared} cases judged differently from cyclonus (the traffic and the \
         policies, as netpol-decider reads them); the first {}:\n\n{}",
        disagreements.len(),
        shown.len(),
        shown.join("\n\n")
    );
}

/// kube-network-policies as a second NetworkPolicy oracle, on the same cases: every
/// disagreement with the evaluator (which agrees with cyclonus on all of them) must be one of
/// the [`Departure`]s, each a case the API server or kubelet would not produce.
#[test]
fn kube_network_policies_agrees_on_every_case_a_cluster_can_hold() {
    let cases: usize = env("NIMBUS_NETPOL_ORACLE_CASES", 2_000);
    let seed: u64 = env("NIMBUS_NETPOL_ORACLE_SEED", 1);
    let sets: Vec<Scenario> = (0..cases.div_ceil(TRAFFIC_PER_SET))
        .map(|i| Scenario::random(&mut Rng::new(seed, i as u64)))
        .collect();
    let (mut compared, mut unexplained) = (0, Vec::new());
    let mut departures: BTreeMap<Departure, usize> = BTreeMap::new();
    let mut sets = sets;
    for traffic in sets.iter_mut().flat_map(|s| &mut s.traffic) {
        generate::as_a_cluster_holds(traffic);
    }
    for batch in sets.chunks(SETS_PER_BATCH) {
        let scenarios: Vec<Value> = batch.iter().map(input).collect();
        let verdicts: Vec<BTreeMap<String, Value>> =
            common::knp_decide(&json!({ "scenarios": scenarios }));
        for ((scenario, input), verdicts) in batch.iter().zip(&scenarios).zip(&verdicts) {
            let policies = Policies::new(&scenario.policies).expect("cyclonus judges them");
            for (t, traffic) in scenario.traffic.iter().enumerate().take(cases - compared) {
                compared += 1;
                let ours = policies.decide(traffic).allowed();
                if verdicts[&t.to_string()]["allowed"] == ours {
                    continue;
                }
                match Departure::of(scenario, traffic) {
                    Some(d) => *departures.entry(d).or_default() += 1,
                    None => {
                        let mut input = input.clone();
                        input["traffic"] = json!([traffic_json(t, traffic)]);
                        unexplained.push(format!("traffic {t}: nimbus {ours}\n{}", pretty(&input)));
                    }
                }
            }
        }
    }
    println!(
        "netpol oracle: {compared} cases (seed {seed}) compared with kube-network-policies, {} \
         disagreements explained ({departures:?}), {} not",
        departures.values().sum::<usize>(),
        unexplained.len()
    );
    assert!(
        unexplained.is_empty(),
        "{} of {compared} cases judged differently from kube-network-policies, for no known \
         reason; the first:\n{}",
        unexplained.len(),
        unexplained[0]
    );
}

/// Where kube-network-policies reads a case otherwise than Kubernetes' documentation, cyclonus
/// and the evaluator, on cases no cluster holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Departure {
    /// A peer `{}` or an ipBlock with a selector, which the API server rejects:
    /// kube-network-policies matches nothing with `{}` (cyclonus: every pod of the namespace)
    /// and reads the selector beside the ipBlock.
    RejectedPeer,
    /// A port name for an address that is no pod's (no container port has a name there):
    /// kube-network-policies resolves names from the destination pod only, cyclonus and the
    /// evaluator from the traffic.
    NameWithoutPod,
}

impl Departure {
    fn of(scenario: &Scenario, traffic: &Traffic) -> Option<Self> {
        let rejected = scenario
            .policies
            .iter()
            .filter_map(|p| p.spec.as_ref())
            .any(|spec| {
                let ingress = spec
                    .ingress
                    .iter()
                    .flatten()
                    .flat_map(|r| r.from.iter().flatten());
                let egress = spec
                    .egress
                    .iter()
                    .flatten()
                    .flat_map(|r| r.to.iter().flatten());
                ingress.chain(egress).any(|p| {
                    let selects = p.pod_selector.is_some() || p.namespace_selector.is_some();
                    p.ip_block.is_some() == selects
                })
            });
        if rejected {
            Some(Departure::RejectedPeer)
        } else if traffic.port_name.is_some() && traffic.destination.pod.is_none() {
            Some(Departure::NameWithoutPod)
        } else {
            None
        }
    }
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) => value
            .trim()
            .replace([',', '_'], "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
        Err(_) => default,
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).expect("JSON")
}

/// How the cases fell, to show they are not all one verdict.
#[derive(Default)]
struct Tally {
    allowed: usize,
    ingress_denied: usize,
    egress_denied: usize,
}

impl Tally {
    fn count(&mut self, d: Decision) {
        self.allowed += usize::from(d.allowed());
        self.ingress_denied += usize::from(!d.ingress);
        self.egress_denied += usize::from(!d.egress);
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} allowed, {} denied at ingress, {} at egress",
            self.allowed, self.ingress_denied, self.egress_denied
        )
    }
}

#[derive(Debug, Deserialize)]
struct Verdict {
    ingress: bool,
    egress: bool,
    allowed: bool,
}

/// A scenario as the deciders read it, its traffic named by index.
fn input(scenario: &Scenario) -> Value {
    let traffic: Vec<Value> = (scenario.traffic.iter().enumerate())
        .map(|(t, traffic)| traffic_json(t, traffic))
        .collect();
    json!({"policies": scenario.policies, "traffic": traffic})
}

/// Runs tools/netpol-decider on a batch; a verdict map per scenario, traffic named by index.
fn decide(batch: &[Scenario]) -> Vec<BTreeMap<String, Verdict>> {
    let scenarios: Vec<Value> = batch.iter().map(input).collect();
    let verdicts: Vec<BTreeMap<String, Verdict>> =
        common::netpol_decide(&json!({ "scenarios": scenarios }));
    assert_eq!(verdicts.len(), batch.len(), "a verdict map per scenario");
    verdicts
}

/// A traffic as netpol-decider reads it.
fn traffic_json(name: usize, t: &Traffic) -> Value {
    let peer = |p: &Peer| {
        let mut out = json!({"ip": p.ip.map(|ip| ip.to_string())});
        if let Some(pod) = &p.pod {
            out["namespace"] = json!(pod.namespace);
            out["namespaceLabels"] = json!(pod.namespace_labels);
            out["podLabels"] = json!(pod.pod_labels);
        }
        out
    };
    let mut out = json!({"name": name.to_string(), "source": peer(&t.source),
                         "destination": peer(&t.destination), "port": t.port,
                         "protocol": t.protocol});
    if let Some(name) = &t.port_name {
        out["portName"] = json!(name);
        // knp-decider resolves names from the destination pod's container ports.
        if t.destination.pod.is_some() {
            out["destination"]["ports"] =
                json!([{"name": name, "port": t.port, "protocol": t.protocol}]);
        }
    }
    out
}
