//! Cluster intents no tenant can undo: a ClusterSecurityIntentBinding's dnsManipulation and
//! denyExternalNetworkAccess kept by the NetworkPolicy engine and by the ClusterNetworkPolicy
//! engine, with and without a tenant's allow-all NetworkPolicy in the bound namespace, decided
//! by kube-network-policies' own policy engine (tools/knp-decider) on the objects the real
//! kube-apiserver holds. And the switch between the two engines, both ways, while a probe
//! reads what is in force every 100 ms: no try may be allowed that the intent denies.
//!
//! A binary of its own: it runs the operator three times on its control plane, with the
//! engine preference changed between runs as an upgrade of the chart would.

#[path = "efficacy/matrix.rs"]
mod matrix;
mod common;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::Client;
use matrix::{Matrix, verdict};
use nimbus_api::ClusterSecurityIntentBinding;
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
    ("to a pod of its namespace 53/UDP", false, same_namespace_pod, 53, "UDP"),
    ("to a pod of its namespace 8080/TCP", false, same_namespace_pod, 8080, "TCP"),
    ("to a pod of another namespace 8080/TCP", false, in_cluster_pod, 8080, "TCP"),
    ("to a Service address 443/TCP", false, service_address, 443, "TCP"),
    ("to a private address 53/UDP", false, private_address, 53, "UDP"),
    ("to a private address 443/TCP", false, private_address, 443, "TCP"),
    ("to an external address 53/UDP", false, external_address, 53, "UDP"),
    ("to an external address 853/TCP", false, external_address, 853, "TCP"),
    ("to an external address 443/TCP", false, external_address, 443, "TCP"),
    ("from a pod of another namespace 8080/TCP", true, in_cluster_pod, 8080, "TCP"),
    ("from an external address 8080/TCP", true, external_address, 8080, "TCP"),
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

/// The operator running on this binary's control plane until `stop`.
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

    fn stop(mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            thread.join().expect("operator thread");
        }
    }
}

/// One cluster binding of `intent`, on its own namespace.
struct Bound {
    intent: &'static str,
    namespace: TestNamespace,
    binding: String,
}

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
        out.policies
            .extend(api.list(&ListParams::default()).await.expect("listing").items);
    }
    let api = Api::<DynamicObject>::all_with(
        client.clone(),
        &CLUSTER_NETWORK_POLICY.api_resource(),
    );
    out.cluster = (api.list(&ListParams::default()).await.expect("listing").items)
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("JSON"))
        .collect();
    out
}

impl InForce {
    /// Ours of `engine` only.
    fn written_by(&self, engine: Engine) -> usize {
        let ours = |labels: Option<&BTreeMap<String, String>>| {
            labels.and_then(|l| l.get(MANAGED_BY)).map(String::as_str) == Some(engine.manager())
        };
        let policies = self.policies.iter().filter(|p| ours(p.metadata.labels.as_ref()));
        let cluster = self.cluster.iter().filter(|c| {
            let labels = serde_json::from_value(c["metadata"]["labels"].clone()).ok();
            ours(labels.as_ref())
        });
        policies.count() + cluster.count()
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

/// Waits until every binding's intent is kept by `engine` alone.
async fn kept_by(client: &Client, bound: &[Bound], engine: Engine, other: Engine) {
    eventually(
        &format!("{engine} alone in force"),
        HANDOVER + common::CONVERGE,
        async |seen| {
            let now = in_force(client, bound).await;
            let (mine, theirs) = (now.written_by(engine), now.written_by(other));
            *seen = format!("{mine} of {engine}, {theirs} of {other}");
            (mine == bound.len() && theirs == 0).then_some(())
        },
    )
    .await;
}

/// A tenant's allow-all NetworkPolicy (both directions) in each bound namespace.
async fn tenant_allows_all(client: &Client, bound: &[Bound]) -> Vec<(String, String)> {
    let mut made = Vec::new();
    for b in bound {
        let api = Api::<NetworkPolicy>::namespaced(client.clone(), b.namespace.name());
        let body = json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "tenant-allow-all"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{}], "egress": [{}]},
        });
        common::apply(&api, "tenant-allow-all", &body).await;
        made.push((b.namespace.name().to_owned(), "tenant-allow-all".to_owned()));
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
fn probe(client: Client, bound: Arc<Vec<(String, &'static str)>>) -> (CancellationToken, tokio::task::JoinHandle<Vec<InForce>>) {
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
    let cp = common::cluster();
    let client = cp.client().expect("client");
    common::install_engine_crd(&client, nimbus_testenv::upstream::CLUSTER_NETWORK_POLICY).await;

    // The NetworkPolicy engine first, as by default.
    let operator = Operator::start(Engine::NetworkPolicy);
    let mut bound = Vec::new();
    for intent in INTENTS {
        let namespace = cp.test_namespace(&format!("cnp-{}", intent.to_lowercase())).await.expect("namespace");
        let si = common::create_intent(&client, intent, "Block").await;
        let binding = common::unique("cnp");
        let api = Api::<ClusterSecurityIntentBinding>::all(client.clone());
        let body = json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "kind": "ClusterSecurityIntentBinding",
            "metadata": {"name": binding},
            "spec": {"intents": [{"name": si}],
                     "selector": {"nsSelector": {"matchNames": [namespace.name()]},
                                  "workloadSelector": {"matchLabels": {"app": "web"}}}},
        });
        common::apply(&api, &binding, &body).await;
        bound.push(Bound { intent, namespace, binding });
    }
    kept_by(&client, &bound, Engine::NetworkPolicy, Engine::ClusterNetworkPolicy).await;
    let by_network_policy = in_force(&client, &bound).await;
    let tenant = tenant_allows_all(&client, &bound).await;
    let by_network_policy_reopened = in_force(&client, &bound).await;
    remove(&client, &tenant).await;

    // Switch to the ClusterNetworkPolicy engine and back, with a probe reading all along.
    let namespaces: Arc<Vec<(String, &'static str)>> = Arc::new(
        bound.iter().map(|b| (b.namespace.name().to_owned(), b.intent)).collect(),
    );
    let (stop_probe, probing) = probe(client.clone(), namespaces.clone());
    operator.stop();
    let operator = Operator::start(Engine::ClusterNetworkPolicy);
    kept_by(&client, &bound, Engine::ClusterNetworkPolicy, Engine::NetworkPolicy).await;
    let at_admin_tier = in_force(&client, &bound).await;
    let tenant = tenant_allows_all(&client, &bound).await;
    let at_admin_tier_reopened = in_force(&client, &bound).await;
    remove(&client, &tenant).await;
    operator.stop();
    let operator = Operator::start(Engine::NetworkPolicy);
    kept_by(&client, &bound, Engine::NetworkPolicy, Engine::ClusterNetworkPolicy).await;
    stop_probe.cancel();
    let snapshots = probing.await.expect("probe");
    operator.stop();

    gapless(&snapshots, &namespaces);
    for b in &bound {
        let matrix = tenant_matrix(
            b,
            [
                &by_network_policy,
                &by_network_policy_reopened,
                &at_admin_tier,
                &at_admin_tier_reopened,
            ],
        );
        matrix.assert();
    }
    let api = Api::<ClusterSecurityIntentBinding>::all(client.clone());
    for b in &bound {
        api.delete(&b.binding, &DeleteParams::default()).await.expect("deleting a binding");
    }
}

/// Every snapshot the probe took: each selected pod's traffic the intent denies whichever
/// engine keeps it was denied.
fn gapless(snapshots: &[InForce], bound: &[(String, &'static str)]) {
    let denied_by_both = |intent: &str, case: &str| {
        !promised_at_admin_tier(intent, case) && !promised_by_network_policy(intent, case)
    };
    let scenarios: Vec<Value> = (snapshots.iter())
        .map(|snapshot| {
            let mut tries = Vec::new();
            for (ns, intent) in bound {
                for (c, case) in CASES.iter().enumerate() {
                    if denied_by_both(intent, case.0) {
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
    assert!(snapshots.len() > 100, "the probe read {} times", snapshots.len());
    assert!(allowed.is_empty(), "allowed during the switch: {allowed:?}");
}

/// The intent's matrix: each engine, with and without the tenant's allow-all NetworkPolicy.
fn tenant_matrix(b: &Bound, snapshots: [&InForce; 4]) -> Matrix {
    let subjects = [
        "selected pod, NetworkPolicy engine",
        "selected pod, NetworkPolicy engine, tenant allow-all NetworkPolicy",
        "selected pod, ClusterNetworkPolicy engine",
        "selected pod, ClusterNetworkPolicy engine, tenant allow-all NetworkPolicy",
        "unselected pod, ClusterNetworkPolicy engine",
    ];
    // (snapshot, selected)
    let columns = [(0, true), (1, true), (2, true), (3, true), (2, false)];
    let ns = b.namespace.name();
    let scenarios: Vec<Value> = (columns.iter())
        .map(|(s, selected)| {
            let app = if *selected { "web" } else { "db" };
            let tries = (CASES.iter().enumerate())
                .map(|(c, case)| traffic(c.to_string(), ns, app, case))
                .collect();
            snapshots[*s].scenario(tries)
        })
        .collect();
    let verdicts: Vec<BTreeMap<String, Value>> =
        common::knp_decide(&json!({ "scenarios": scenarios }));
    let expected = |column: usize, case: &str| match column {
        0 => promised_by_network_policy(b.intent, case),
        // The measured difference: a tenant's NetworkPolicy reopens every cell.
        1 => true,
        2 | 3 => promised_at_admin_tier(b.intent, case),
        _ => true,
    };
    Matrix {
        id: format!("cnp-{}", b.intent),
        title: format!(
            "{} through a ClusterSecurityIntentBinding, with a tenant's allow-all NetworkPolicy \
             (decided by kube-network-policies)",
            b.intent
        ),
        case_header: "traffic of the pod",
        subjects: subjects.iter().map(|s| (*s).to_owned()).collect(),
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
                let cells = (0..columns.len()).map(|s| verdict(expected(s, case.0))).collect();
                (case.0.to_owned(), cells)
            })
            .collect(),
    }
}
