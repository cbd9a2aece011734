//! Cluster intents no tenant can undo: a ClusterSecurityIntentBinding's dnsManipulation and
//! denyExternalNetworkAccess kept by the NetworkPolicy engine and by the ClusterNetworkPolicy
//! engine, with and without a tenant's allow-all NetworkPolicy in the bound namespace, decided
//! by kube-network-policies' own policy engine (tools/knp-decider) on the objects the real
//! kube-apiserver holds. And the switch between the two engines, both ways, while a probe
//! reads what is in force every 100 ms: no try may be allowed that the intent denies.
//!
//! A binary of its own: it runs the operator three times on its control plane, with the
//! engine preference changed between runs as an upgrade of the chart would. Its other test
//! (`exceptions`) runs one of its own, never beside another ([`ONE_OPERATOR`]).

mod common;
#[path = "clusternetworkpolicy/exceptions.rs"]
mod exceptions;
#[path = "efficacy/matrix.rs"]
mod matrix;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use matrix::{Matrix, verdict};
use nimbus_api::{ClusterNimbusPolicy, ClusterSecurityIntentBinding};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{CLUSTER_NETWORK_POLICY, MANAGED_BY, Preference};
use nimbus_testenv::{TestNamespace, eventually};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Addresses are data for the decider only: no packet is sent anywhere.
const POD_IP: &str = "10.244.1.10";
const PEER_IP: &str = "10.244.1.11";
const OTHER_POD_IP: &str = "10.244.2.20";
const KUBE_DNS_IP: &str = "10.244.0.2";
/// A private address that is no pod's and in none of the cluster's networks.
const PRIVATE_IP: &str = "10.1.2.3";
/// TEST-NET-3 (RFC 5737): an address outside the cluster.
const EXTERNAL_IP: &str = "203.0.113.10";
/// The Service range the operator is told is inside the cluster (`--cluster-networks`).
const SERVICE_RANGE: &str = "10.96.0.0/12";
const SERVICE_IP: &str = "10.96.0.10";
/// How long the engine taking over keeps the other's objects, as the book promises.
const HANDOVER: Duration = Duration::from_secs(30);
const INTENTS: [&str; 2] = ["dnsManipulation", "denyExternalNetworkAccess"];

/// A traffic case, seen from the pod under test: `(name, towards the pod, peer, port, protocol)`.
type Case = (&'static str, bool, fn(&str) -> Value, u16, &'static str);

const CASES: &[Case] = &[
    ("to kube-dns 53/UDP", false, kube_dns, 53, "UDP"),
    ("to kube-dns 53/TCP", false, kube_dns, 53, "TCP"),
    ("to kube-dns 853/TCP", false, kube_dns, 853, "TCP"),
    ("to kube-dns 8080/TCP", false, kube_dns, 8080, "TCP"),
    (
        "to a pod of its namespace 53/UDP",
        false,
        same_namespace_pod,
        53,
        "UDP",
    ),
    (
        "to a pod of its namespace 8080/TCP",
        false,
        same_namespace_pod,
        8080,
        "TCP",
    ),
    (
        "to a pod of another namespace 8080/TCP",
        false,
        in_cluster_pod,
        8080,
        "TCP",
    ),
    (
        "to a Service address 443/TCP",
        false,
        service_address,
        443,
        "TCP",
    ),
    (
        "to a private address 53/UDP",
        false,
        private_address,
        53,
        "UDP",
    ),
    (
        "to a private address 443/TCP",
        false,
        private_address,
        443,
        "TCP",
    ),
    (
        "to an external address 53/UDP",
        false,
        external_address,
        53,
        "UDP",
    ),
    (
        "to an external address 853/TCP",
        false,
        external_address,
        853,
        "TCP",
    ),
    (
        "to an external address 443/TCP",
        false,
        external_address,
        443,
        "TCP",
    ),
    (
        "from a pod of another namespace 8080/TCP",
        true,
        in_cluster_pod,
        8080,
        "TCP",
    ),
    (
        "from an external address 8080/TCP",
        true,
        external_address,
        8080,
        "TCP",
    ),
];

fn pod(ns: &str, ip: &str, labels: Value) -> Value {
    json!({"ip": ip, "namespace": ns, "namespaceLabels": {"kubernetes.io/metadata.name": ns},
           "podLabels": labels})
}

fn kube_dns(_: &str) -> Value {
    pod("kube-system", KUBE_DNS_IP, json!({"k8s-app": "kube-dns"}))
}

fn same_namespace_pod(ns: &str) -> Value {
    pod(ns, PEER_IP, json!({"app": "db"}))
}

fn in_cluster_pod(_: &str) -> Value {
    pod("elsewhere", OTHER_POD_IP, json!({"app": "client"}))
}

fn service_address(_: &str) -> Value {
    json!({ "ip": SERVICE_IP })
}

fn private_address(_: &str) -> Value {
    json!({ "ip": PRIVATE_IP })
}

fn external_address(_: &str) -> Value {
    json!({ "ip": EXTERNAL_IP })
}

/// What a selected pod may do under each intent kept by the ClusterNetworkPolicy engine, as
/// `nimbus explain` says: everything else is denied to it.
fn promised_at_admin_tier(intent: &str, case: &str) -> bool {
    let denied: &[&str] = match intent {
        // DNS anywhere but the cluster DNS, and nothing more.
        "dnsManipulation" => &[
            "to a pod of its namespace 53/UDP",
            "to a private address 53/UDP",
            "to an external address 53/UDP",
            "to an external address 853/TCP",
        ],
        // Every address outside the cluster's networks; in-cluster traffic is left alone, and
        // so is ingress (ClusterNetworkPolicy ingress rules name pods only).
        "denyExternalNetworkAccess" => &[
            "to a private address 53/UDP",
            "to a private address 443/TCP",
            "to an external address 53/UDP",
            "to an external address 853/TCP",
            "to an external address 443/TCP",
        ],
        other => panic!("no promise written down for {other}"),
    };
    !denied.contains(&case)
}

/// What a selected pod may do under each intent kept by the NetworkPolicy engine (the
/// efficacy matrices' promise, `nimbus explain`'s words).
fn promised_by_network_policy(intent: &str, case: &str) -> bool {
    let allowed: &[&str] = match intent {
        "dnsManipulation" => &[
            "to kube-dns 53/UDP",
            "to kube-dns 53/TCP",
            "from a pod of another namespace 8080/TCP",
            "from an external address 8080/TCP",
        ],
        // DNS ports to private addresses: pods' among them.
        "denyExternalNetworkAccess" => &[
            "to kube-dns 53/UDP",
            "to kube-dns 53/TCP",
            "to a pod of its namespace 53/UDP",
            "to a private address 53/UDP",
            "from a pod of another namespace 8080/TCP",
        ],
        other => panic!("no promise written down for {other}"),
    };
    allowed.contains(&case)
}

/// Taken by each test for its whole run: one operator at a time on this binary's control plane.
static ONE_OPERATOR: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The operator running on this binary's control plane until `stop` (or, a test failing,
/// until dropped: the next test's operator must not run beside it).
struct Operator {
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Operator {
    /// Starts the operator preferring `first` among the network engines.
    fn start(first: Engine) -> Self {
        let stop = CancellationToken::new();
        let config = nimbus_operator::Config {
            resync: Duration::from_secs(3600),
            engine_preference: Preference::new(&[first]).expect("preference"),
            cluster_networks: [SERVICE_RANGE.to_owned()].into(),
            ..Default::default()
        };
        let kube_config = common::cluster().config().clone();
        let token = stop.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().expect("operator runtime");
            runtime.block_on(async move {
                let client = Client::try_from(kube_config).expect("operator client");
                nimbus_operator::run(client, config, token)
                    .await
                    .expect("operator");
            });
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops it, and starts it again preferring `first`, as a chart upgrade changing
    /// `engines.preference` does.
    fn switch_to(self, first: Engine) -> Self {
        self.stop();
        Self::start(first)
    }

    fn stop(mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            thread.join().expect("operator thread");
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One cluster binding of `intents`, on its own namespace.
struct Bound {
    intents: &'static [&'static str],
    namespace: TestNamespace,
    binding: String,
}

/// Each intent alone, and both on one pod (where which is judged first matters).
const BINDINGS: [&[&str]; 3] = [&[INTENTS[0]], &[INTENTS[1]], &INTENTS];

/// What is in force for the bound namespaces: the NetworkPolicies there and every
/// ClusterNetworkPolicy, as the API server holds them.
#[derive(Clone, Default)]
struct InForce {
    policies: Vec<NetworkPolicy>,
    cluster: Vec<Value>,
}

async fn in_force(client: &Client, bound: &[Bound]) -> InForce {
    let mut out = InForce::default();
    for b in bound {
        let api = Api::<NetworkPolicy>::namespaced(client.clone(), b.namespace.name());
        out.policies.extend(
            api.list(&ListParams::default())
                .await
                .expect("listing")
                .items,
        );
    }
    let api =
        Api::<DynamicObject>::all_with(client.clone(), &CLUSTER_NETWORK_POLICY.api_resource());
    out.cluster = (api
        .list(&ListParams::default())
        .await
        .expect("listing")
        .items)
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("JSON"))
        .collect();
    out
}

impl InForce {
    /// How many `engine` wrote for `bound` (the NetworkPolicies of their namespaces, the
    /// ClusterNetworkPolicies named after them).
    fn written_by(&self, engine: Engine, bound: &[Bound]) -> usize {
        let ours = |labels: Option<&BTreeMap<String, String>>| {
            labels.and_then(|l| l.get(MANAGED_BY)).map(String::as_str) == Some(engine.manager())
        };
        let policies = self
            .policies
            .iter()
            .filter(|p| ours(p.metadata.labels.as_ref()));
        let cluster = self.cluster.iter().filter(|c| {
            let labels = serde_json::from_value(c["metadata"]["labels"].clone()).ok();
            let name = c["metadata"]["name"].as_str().unwrap_or_default();
            ours(labels.as_ref())
                && bound
                    .iter()
                    .any(|b| name.starts_with(&format!("{}-", b.binding)))
        });
        policies.count() + cluster.count()
    }

    /// The priority of the ClusterNetworkPolicy `name`.
    fn priority(&self, name: &str) -> Option<i64> {
        let policy = self
            .cluster
            .iter()
            .find(|c| c["metadata"]["name"] == name)?;
        policy["spec"]["priority"].as_i64()
    }

    /// The decider's scenario for `traffic`.
    fn scenario(&self, traffic: Vec<Value>) -> Value {
        json!({"policies": self.policies, "clusterNetworkPolicies": self.cluster,
               "traffic": traffic})
    }
}

/// The traffic of `case` for the pod labelled `app` in `ns`, named `name`.
fn traffic(name: String, ns: &str, app: &str, case: &Case) -> Value {
    let (_, towards, peer, port, protocol) = case;
    let me = pod(ns, POD_IP, json!({ "app": app }));
    let (source, destination) = match towards {
        true => (peer(ns), me),
        false => (me, peer(ns)),
    };
    json!({"name": name, "source": source, "destination": destination, "port": port,
           "protocol": protocol})
}

/// Waits until every binding's intent is kept by `engine` alone (of the two network engines).
async fn kept_by(client: &Client, bound: &[Bound], engine: Engine) {
    let other = match engine {
        Engine::NetworkPolicy => Engine::ClusterNetworkPolicy,
        _ => Engine::NetworkPolicy,
    };
    eventually(
        &format!("{engine} alone in force"),
        HANDOVER + common::CONVERGE,
        async |seen| {
            let now = in_force(client, bound).await;
            let (mine, theirs) = (now.written_by(engine, bound), now.written_by(other, bound));
            *seen = format!("{mine} of {engine}, {theirs} of {other}");
            let intents: usize = bound.iter().map(|b| b.intents.len()).sum();
            (mine == intents && theirs == 0).then_some(())
        },
    )
    .await;
}

/// A tenant's NetworkPolicy in each bound namespace, for every pod in both directions:
/// allowing all traffic (`allow`), or none.
async fn tenant_policy(client: &Client, bound: &[Bound], allow: bool) -> Vec<(String, String)> {
    let (name, rules) = match allow {
        true => ("tenant-allow-all", json!([{}])),
        false => ("tenant-deny-all", json!([])),
    };
    let mut made = Vec::new();
    for b in bound {
        let api = Api::<NetworkPolicy>::namespaced(client.clone(), b.namespace.name());
        let body = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                     "ingress": rules, "egress": rules},
        });
        common::apply(&api, name, &body).await;
        made.push((b.namespace.name().to_owned(), name.to_owned()));
    }
    made
}

async fn remove(client: &Client, made: &[(String, String)]) {
    for (ns, name) in made {
        let api = Api::<NetworkPolicy>::namespaced(client.clone(), ns);
        common::delete(&api, name).await;
        common::gone(&api, name).await;
    }
}

/// Reads what is in force every 100 ms until stopped.
fn probe(
    client: Client,
    bound: Arc<Vec<(String, &'static [&'static str])>>,
) -> (CancellationToken, tokio::task::JoinHandle<Vec<InForce>>) {
    let stop = CancellationToken::new();
    let token = stop.clone();
    let task = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        while !token.is_cancelled() {
            tick.tick().await;
            let mut now = InForce::default();
            for (ns, _) in bound.iter() {
                let api = Api::<NetworkPolicy>::namespaced(client.clone(), ns);
                if let Ok(list) = api.list(&ListParams::default()).await {
                    now.policies.extend(list.items);
                }
            }
            let api = Api::<DynamicObject>::all_with(
                client.clone(),
                &CLUSTER_NETWORK_POLICY.api_resource(),
            );
            if let Ok(list) = api.list(&ListParams::default()).await {
                now.cluster = list
                    .items
                    .into_iter()
                    .map(|o| serde_json::to_value(o).expect("JSON"))
                    .collect();
            }
            seen.push(now);
        }
        seen
    });
    (stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_admin_tier_keeps_a_cluster_intent_a_tenant_reopens_and_switching_leaves_no_gap() {
    let _turn = ONE_OPERATOR.lock().await;
    let cp = common::cluster();
    let client = cp.client().expect("client");
    common::install_engine_crd(&client, nimbus_testenv::upstream::CLUSTER_NETWORK_POLICY).await;

    // The NetworkPolicy engine first, as by default.
    let operator = Operator::start(Engine::NetworkPolicy);
    let mut intents = BTreeMap::new();
    for intent in INTENTS {
        intents.insert(
            intent,
            common::create_intent(&client, intent, "Block").await,
        );
    }
    // A binding whose policy is older than the others', deleted once the Admin tier is in
    // force: the younger ones' priorities move up (creation times have a resolution of a
    // second).
    let oldest = bind(&client, &intents, &[INTENTS[0]]).await;
    let cluster_policies = Api::<ClusterNimbusPolicy>::all(client.clone());
    eventually("the oldest cluster policy", common::CONVERGE, async |_| {
        common::get(&cluster_policies, &oldest.binding)
            .await
            .map(drop)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut bound = Vec::new();
    for bound_intents in BINDINGS {
        bound.push(bind(&client, &intents, bound_intents).await);
    }
    kept_by(&client, &bound, Engine::NetworkPolicy).await;
    let by_network_policy = in_force(&client, &bound).await;
    let tenant = tenant_policy(&client, &bound, true).await;
    let by_network_policy_reopened = in_force(&client, &bound).await;
    remove(&client, &tenant).await;

    // Switch to the ClusterNetworkPolicy engine and back, with a probe reading all along.
    let namespaces: Arc<Vec<(String, &'static [&'static str])>> = Arc::new(
        (bound.iter())
            .map(|b| (b.namespace.name().to_owned(), b.intents))
            .collect(),
    );
    let (stop_probe, probing) = probe(client.clone(), namespaces.clone());
    let operator = operator.switch_to(Engine::ClusterNetworkPolicy);
    kept_by(&client, &bound, Engine::ClusterNetworkPolicy).await;
    let at_admin_tier = in_force(&client, &bound).await;
    let tenant = tenant_policy(&client, &bound, true).await;
    let at_admin_tier_reopened = in_force(&client, &bound).await;
    remove(&client, &tenant).await;
    let tenant = tenant_policy(&client, &bound, false).await;
    let at_admin_tier_closed = in_force(&client, &bound).await;
    remove(&client, &tenant).await;
    priorities_move_up(&client, &oldest, &bound).await;
    let operator = operator.switch_to(Engine::NetworkPolicy);
    kept_by(&client, &bound, Engine::NetworkPolicy).await;
    stop_probe.cancel();
    let snapshots = probing.await.expect("probe");
    operator.stop();

    gapless(&snapshots, &namespaces);
    let snapshots = [
        &by_network_policy,
        &by_network_policy_reopened,
        &at_admin_tier,
        &at_admin_tier_reopened,
        &at_admin_tier_closed,
    ];
    for (i, intent) in INTENTS.into_iter().enumerate() {
        tenant_matrix(intent, &bound[i], &bound[2], snapshots).assert();
    }
    let api = Api::<ClusterSecurityIntentBinding>::all(client.clone());
    for b in &bound {
        api.delete(&b.binding, &DeleteParams::default())
            .await
            .expect("deleting a binding");
    }
}

/// A cluster binding of `bound_intents` (by their SecurityIntents' names, `intents`) on a
/// namespace of its own.
async fn bind(
    client: &Client,
    intents: &BTreeMap<&str, String>,
    bound_intents: &'static [&'static str],
) -> Bound {
    let namespace = common::cluster()
        .test_namespace("cnp")
        .await
        .expect("namespace");
    let binding = common::unique("cnp");
    let api = Api::<ClusterSecurityIntentBinding>::all(client.clone());
    let names: Vec<Value> = (bound_intents.iter())
        .map(|i| json!({"name": intents[i]}))
        .collect();
    let body = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1",
        "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": binding},
        "spec": {"intents": names,
                 "selector": {"nsSelector": {"matchNames": [namespace.name()]},
                              "workloadSelector": {"matchLabels": {"app": "web"}}}},
    });
    common::apply(&api, &binding, &body).await;
    Bound {
        intents: bound_intents,
        namespace,
        binding,
    }
}

/// Deletes the `oldest` binding and waits until the dnsManipulation policies of `bound` (all
/// younger) have each moved up one priority.
async fn priorities_move_up(client: &Client, oldest: &Bound, bound: &[Bound]) {
    let names: Vec<String> = (bound.iter())
        .filter(|b| b.intents.contains(&INTENTS[0]))
        .map(|b| format!("{}-dnsmanipulation", b.binding))
        .collect();
    let before = in_force(client, bound).await;
    let api = Api::<ClusterSecurityIntentBinding>::all(client.clone());
    api.delete(&oldest.binding, &DeleteParams::default())
        .await
        .expect("deleting the oldest binding");
    eventually(
        "the younger bindings' priorities to move up",
        common::CONVERGE,
        async |seen| {
            let now = in_force(client, bound).await;
            let moved: Vec<(Option<i64>, Option<i64>)> = (names.iter())
                .map(|n| (before.priority(n), now.priority(n)))
                .collect();
            *seen = format!("{moved:?}");
            moved
                .iter()
                .all(|(b, n)| b.zip(*n).is_some_and(|(b, n)| n == b - 1))
                .then_some(())
        },
    )
    .await;
}

/// Every snapshot the probe took: each selected pod's traffic the intent denies whichever
/// engine keeps it was denied.
fn gapless(snapshots: &[InForce], bound: &[(String, &'static [&'static str])]) {
    // NetworkPolicies add up: what one intent's allows, the pod may do under both (so
    // denyExternalNetworkAccess's DNS to private addresses reopens dnsManipulation's). The
    // Admin tier denies what either intent denies.
    let denied_by_both = |intents: &[&str], case: &str| {
        intents.iter().all(|i| !promised_by_network_policy(i, case))
            && intents.iter().any(|i| !promised_at_admin_tier(i, case))
    };
    let scenarios: Vec<Value> = (snapshots.iter())
        .map(|snapshot| {
            let mut tries = Vec::new();
            for (ns, intents) in bound {
                for (c, case) in CASES.iter().enumerate() {
                    if denied_by_both(intents, case.0) {
                        tries.push(traffic(format!("{ns}/{c}"), ns, "web", case));
                    }
                }
            }
            snapshot.scenario(tries)
        })
        .collect();
    let verdicts: Vec<BTreeMap<String, Value>> =
        common::knp_decide(&json!({ "scenarios": scenarios }));
    let tries: usize = verdicts.iter().map(BTreeMap::len).sum();
    let allowed: Vec<String> = (verdicts.iter().enumerate())
        .flat_map(|(i, v)| {
            v.iter()
                .filter(|(_, v)| v["allowed"] != false)
                .map(move |(name, _)| format!("snapshot {i}: {name}"))
        })
        .collect();
    println!(
        "switch probe: {} snapshots, {tries} tries the intents deny, {} allowed",
        snapshots.len(),
        allowed.len()
    );
    assert!(
        snapshots.len() > 100,
        "the probe read {} times",
        snapshots.len()
    );
    assert!(allowed.is_empty(), "allowed during the switch: {allowed:?}");
}

/// The intent's matrix: each engine, with and without the tenant's NetworkPolicies, and the
/// ClusterNetworkPolicy engine where `both` binds the other intent on the same pod.
fn tenant_matrix(intent: &str, alone: &Bound, both: &Bound, snapshots: [&InForce; 5]) -> Matrix {
    // (subject, snapshot, binding, selected)
    let columns = [
        ("selected pod, NetworkPolicy engine", 0, alone, true),
        (
            "selected pod, NetworkPolicy engine, both intents bound",
            0,
            both,
            true,
        ),
        (
            "selected pod, NetworkPolicy engine, tenant allow-all NetworkPolicy",
            1,
            alone,
            true,
        ),
        ("selected pod, ClusterNetworkPolicy engine", 2, alone, true),
        (
            "selected pod, ClusterNetworkPolicy engine, tenant allow-all NetworkPolicy",
            3,
            alone,
            true,
        ),
        (
            "selected pod, ClusterNetworkPolicy engine, tenant deny-all NetworkPolicy",
            4,
            alone,
            true,
        ),
        (
            "selected pod, ClusterNetworkPolicy engine, both intents bound",
            2,
            both,
            true,
        ),
        (
            "unselected pod, ClusterNetworkPolicy engine",
            2,
            alone,
            false,
        ),
    ];
    let other = INTENTS
        .into_iter()
        .find(|i| *i != intent)
        .expect("two intents");
    let scenarios: Vec<Value> = (columns.iter())
        .map(|(_, snapshot, b, selected)| {
            let app = if *selected { "web" } else { "db" };
            let tries = (CASES.iter().enumerate())
                .map(|(c, case)| traffic(c.to_string(), b.namespace.name(), app, case))
                .collect();
            snapshots[*snapshot].scenario(tries)
        })
        .collect();
    let verdicts: Vec<BTreeMap<String, Value>> =
        common::knp_decide(&json!({ "scenarios": scenarios }));
    let expected = |column: usize, case: &str| match column {
        0 => promised_by_network_policy(intent, case),
        // NetworkPolicies add up where both isolate the pod: egress, what either allows.
        // Ingress only denyExternalNetworkAccess's isolates.
        1 => match case.starts_with("from") {
            true => {
                promised_by_network_policy(intent, case) && promised_by_network_policy(other, case)
            }
            false => {
                promised_by_network_policy(intent, case) || promised_by_network_policy(other, case)
            }
        },
        // The measured difference: a tenant's NetworkPolicy reopens every cell.
        2 => true,
        3 | 4 => promised_at_admin_tier(intent, case),
        // The Admin tier accepts DNS to the cluster DNS, denies what the intent denies, and
        // passes the rest on to the tenant's policy.
        5 => {
            case.starts_with("to kube-dns")
                && ["53/UDP", "53/TCP", "853/TCP"]
                    .iter()
                    .any(|p| case.ends_with(p))
        }
        6 => promised_at_admin_tier(intent, case) && promised_at_admin_tier(other, case),
        _ => true,
    };
    Matrix {
        id: format!("clusternetworkpolicy-{intent}"),
        title: format!(
            "{intent} through a ClusterSecurityIntentBinding, with a tenant's NetworkPolicies \
             (decided by kube-network-policies)"
        ),
        case_header: "traffic of the pod",
        subjects: columns.iter().map(|c| c.0.to_owned()).collect(),
        rows: (CASES.iter().enumerate())
            .map(|(c, case)| {
                let cells = (0..columns.len())
                    .map(|s| verdict(verdicts[s][&c.to_string()]["allowed"] == true))
                    .collect();
                (case.0.to_owned(), cells)
            })
            .collect(),
        expected: CASES
            .iter()
            .map(|case| {
                let cells = (0..columns.len())
                    .map(|s| verdict(expected(s, case.0)))
                    .collect();
                (case.0.to_owned(), cells)
            })
            .collect(),
    }
}
