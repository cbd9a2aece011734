//! Open Cluster Management (OCM) delivers intents and a binding to a managed cluster, and the
//! hub sees their compliance as the operator there judges it. The real OCM controllers (v0.19.0,
//! built from the modules pinned in tools/ocm by hack/build-ocm.sh) run as processes: the
//! policy propagator on a hub control plane, the policy framework addon on a managed one, with
//! our operator in-process on the managed one, installed from the chart and calling with
//! nothing but its ServiceAccount's token. No registration agent: the test writes the
//! ManagedCluster, its namespace and the PlacementDecision itself.
//!
//! The story: a Policy on the hub carries two SecurityIntents and a ClusterSecurityIntentBinding
//! as policy templates; they reach the managed cluster and are enforced there; the hub's Policy
//! shows the cluster Compliant. KubeArmor's CRD is then deleted on the managed cluster (an
//! engine missing): NonCompliant on the hub within a bound measured and printed; the CRD is
//! installed again: Compliant. The binding's compliance history on the hub holds exactly the
//! three transitions.

mod common;
#[path = "fleet/ocm.rs"]
mod ocm;

use common::{apply, install_engine_crd};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, ListParams};
use kube::{Api, Client};
use nimbus_api::ClusterSecurityIntentBinding;
use nimbus_core::engines::KUBEARMOR_POLICY;
use nimbus_core::fleet::{CLUSTER_NAMESPACE_LABEL, PARENT_POLICY_LABEL};
use nimbus_testenv::upstream::KUBEARMOR_POLICY as KUBEARMOR_CRD;
use nimbus_testenv::{apply_yaml, eventually};
use ocm::{CLUSTER, Fleet, REPLICATED, ROOT_NAMESPACE, ROOT_POLICY};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The binding the Policy delivers, and the namespace of the workloads it selects.
const BINDING: &str = "shop-hardening";
const SHOP: &str = "shop";
/// The SecurityIntents the Policy delivers beside it: (name, ID).
const INTENTS: [(&str, &str); 2] = [
    ("fleet-dns", "dnsManipulation"),
    ("fleet-tmp-exec", "preventExecutionFromTempOrLogsFolders"),
];

/// From a change on the managed cluster to the hub's Policy status: the operator's verdict
/// settles for 2 s (nimbus_core::fleet::SETTLE), then the framework addon's status sync copies
/// it to the hub and the propagator rolls it up. Measured on 2 shared cores: 2.2-2.5 s to
/// NonCompliant, 4.8-10 s back to Compliant (the operator's watch of the re-created kind backs
/// off); the bound leaves room for a loaded machine.
const HUB_LAG: Duration = Duration::from_secs(60);
/// From the Policy on the hub to what it delivers enforced on the managed cluster (the
/// controllers starting, their caches listing, one resync of each).
const DELIVERY: Duration = Duration::from_secs(120);

fn root_policy() -> Value {
    let intent = |(name, id): (&str, &str)| {
        json!({"objectDefinition": {
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
            "metadata": {"name": name},
            "spec": {"intent": {"id": id, "action": "Block"}}
        }})
    };
    let binding = json!({"objectDefinition": {
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": BINDING},
        "spec": {
            "intents": INTENTS.map(|(name, _)| json!({"name": name})),
            "selector": {
                "nsSelector": {"matchNames": [SHOP]},
                "workloadSelector": {"matchLabels": {"app": "web"}}
            }
        }
    }});
    let mut templates: Vec<Value> = INTENTS.map(intent).into();
    templates.push(binding);
    // No `remediationAction`: the framework addon would copy it into every template's spec,
    // and ours have no such field.
    json!({
        "apiVersion": "policy.open-cluster-management.io/v1", "kind": "Policy",
        "metadata": {"name": ROOT_POLICY, "namespace": ROOT_NAMESPACE},
        "spec": {"disabled": false, "policy-templates": templates}
    })
}

/// The compliance the hub's replicated Policy holds for each template, newest first:
/// `template -> ["Compliant; …", …]`.
fn histories(policy: &DynamicObject) -> Vec<(String, Vec<String>)> {
    let details = policy.data["status"]["details"].as_array().cloned();
    details
        .unwrap_or_default()
        .iter()
        .map(|d| {
            let name = d["templateMeta"]["name"].as_str().unwrap_or_default();
            let history = d["history"].as_array().cloned().unwrap_or_default();
            let messages = history
                .iter()
                .map(|h| h["message"].as_str().unwrap_or_default().to_owned())
                .collect();
            (name.to_owned(), messages)
        })
        .collect()
}

fn state(message: &str) -> &str {
    message.split(';').next().unwrap_or_default()
}

/// Waits until the hub shows the cluster `compliance` for the binding: the latest message of
/// its history in the replicated Policy, and the root Policy's roll-up for the cluster (what
/// `kubectl get policy -A` lists); returns that message and how long it took from `since`.
async fn hub_shows(fleet: &Fleet, compliance: &str, since: Instant) -> (String, Duration) {
    let (replicated, roots) = (
        fleet.hub_policies(CLUSTER),
        fleet.hub_policies(ROOT_NAMESPACE),
    );
    let message = eventually(
        &format!("the hub to show {BINDING} {compliance} on {CLUSTER}"),
        HUB_LAG,
        async |seen| {
            let policy = replicated.get_opt(REPLICATED).await.ok()??;
            let root = roots.get_opt(ROOT_POLICY).await.ok()??;
            let rolled_up = root.data["status"]["status"].as_array().cloned();
            *seen = format!("{:?}; root: {rolled_up:?}", histories(&policy));
            let (_, history) = histories(&policy).into_iter().find(|(t, _)| t == BINDING)?;
            let latest = history.first()?;
            let cluster = rolled_up?
                .into_iter()
                .find(|c| c["clustername"] == CLUSTER)?;
            (state(latest) == compliance && cluster["compliant"] == compliance)
                .then(|| latest.clone())
        },
    )
    .await;
    (message, since.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_sees_each_managed_clusters_compliance_change_once() {
    let fleet = Fleet::start().await;
    let hub = fleet.hub.client().expect("hub client");
    let managed = fleet.managed.client().expect("managed client");
    workload(&managed).await;

    // Delivered: the templates reach the managed cluster, labelled by the framework addon, and
    // what they ask for is enforced there.
    let started = Instant::now();
    apply_yaml(&hub, &serde_json::to_string(&root_policy()).expect("JSON"))
        .await
        .expect("the root Policy");
    let bindings: Api<ClusterSecurityIntentBinding> = Api::all(managed.clone());
    let delivered = eventually("the binding on the managed cluster", DELIVERY, async |_| {
        bindings.get_opt(BINDING).await.ok()?
    })
    .await;
    let labels = delivered.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(PARENT_POLICY_LABEL).map(String::as_str),
        Some(REPLICATED)
    );
    assert_eq!(
        labels.get(CLUSTER_NAMESPACE_LABEL).map(String::as_str),
        Some(CLUSTER)
    );
    let kubearmor: Api<DynamicObject> =
        Api::namespaced_with(managed.clone(), SHOP, &KUBEARMOR_POLICY.api_resource());
    eventually(
        "KubeArmorPolicies enforcing the intents",
        DELIVERY,
        async |seen| {
            let names: Vec<String> = kubearmor
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect();
            *seen = format!("{names:?}");
            (names.len() == INTENTS.len()).then_some(())
        },
    )
    .await;

    // Compliant on the hub, for the cluster and overall.
    let (message, took) = hub_shows(&fleet, "Compliant", started).await;
    println!("delivered and Compliant on the hub after {took:?}: {message}");
    eventually("the root Policy Compliant overall", HUB_LAG, async |seen| {
        let root = fleet
            .hub_policies(ROOT_NAMESPACE)
            .get_opt(ROOT_POLICY)
            .await
            .ok()??;
        *seen = format!("{}", root.data["status"]);
        (root.data["status"]["compliant"] == "Compliant").then_some(())
    })
    .await;

    // An engine missing: NonCompliant on the hub, saying why.
    let crds: Api<CustomResourceDefinition> = Api::all(managed.clone());
    let broken = Instant::now();
    crds.delete(&KUBEARMOR_CRD.name(), &DeleteParams::default())
        .await
        .expect("deleting KubeArmor's CRD");
    let (message, lag) = hub_shows(&fleet, "NonCompliant", broken).await;
    println!("KubeArmor's CRD deleted: NonCompliant on the hub after {lag:?}: {message}");
    assert!(message.contains("EngineNotInstalled"), "{message}");
    assert!(message.contains("Deployment shop/web"), "{message}");

    // Repaired: Compliant again (once the deleted CRD is gone: until then it is terminating,
    // and nothing of its kind can be created).
    common::gone(&crds, &KUBEARMOR_CRD.name()).await;
    let repaired = Instant::now();
    install_engine_crd(&managed, KUBEARMOR_CRD).await;
    let (message, lag) = hub_shows(&fleet, "Compliant", repaired).await;
    println!("KubeArmor's CRD back: Compliant on the hub after {lag:?}: {message}");

    // Exactly the transitions: one Event per change of verdict, on the managed cluster and in
    // the hub's history; the intents, unaffected, once each. Histories and Events only grow:
    // one too many never matches.
    let expected = |template: &str| -> Vec<&str> {
        if template == BINDING {
            vec!["Compliant", "NonCompliant", "Compliant"]
        } else {
            vec!["Compliant"]
        }
    };
    let replicated = fleet.hub_policies(CLUSTER);
    eventually(
        "the hub's histories to hold the transitions",
        HUB_LAG,
        async |seen| {
            let histories = histories(&replicated.get_opt(REPLICATED).await.ok()??);
            *seen = format!("{histories:#?}");
            let states = |history: &[String]| -> Vec<String> {
                history.iter().map(|m| state(m).to_owned()).collect()
            };
            (histories.len() == INTENTS.len() + 1
                && (histories.iter()).all(|(t, history)| states(history) == expected(t)))
            .then_some(())
        },
    )
    .await;
    let events: Api<Event> = Api::namespaced(managed.clone(), CLUSTER);
    let reason = ListParams::default().fields(&format!("reason=policy: {BINDING}"));
    eventually(
        "3 compliance Events on the managed cluster",
        HUB_LAG,
        async |seen| {
            let messages: Vec<String> = (events.list(&reason).await.ok()?.items.into_iter())
                .filter_map(|e| e.message)
                .collect();
            *seen = format!("{messages:#?}");
            (messages.len() == 3).then_some(())
        },
    )
    .await;
}

/// The workload the binding selects: a Deployment in `shop` (its pods are never scheduled:
/// the posture judges them all the same).
async fn workload(client: &Client) {
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SHOP}});
    apply(&Api::<Namespace>::all(client.clone()), SHOP, &namespace).await;
    apply(
        &Api::<Deployment>::namespaced(client.clone(), SHOP),
        "web",
        &json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}
                }
            }
        }),
    )
    .await;
}
