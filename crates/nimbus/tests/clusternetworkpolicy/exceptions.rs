//! A SecurityIntentException to a cluster binding's denyExternalNetworkAccess, kept at the
//! Admin tier: decided by kube-network-policies' engine over the ClusterNetworkPolicies the API
//! server holds, the pod it lets out reaches an external address while it is in force, and
//! only that pod: not its unexcepted siblings, nor a pod with the same labels in another bound
//! namespace (exceptions are per namespace). At expiry every bound pod is denied again, and
//! the extra policies are pruned.

use super::{EXTERNAL_IP, ONE_OPERATOR, Operator, POD_IP, common, pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp, Unit};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use nimbus_api::{ClusterSecurityIntentBinding, SecurityIntentException};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::CLUSTER_NETWORK_POLICY;
use nimbus_testenv::eventually;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// Every ClusterNetworkPolicy the API server holds.
async fn cluster_network_policies(client: &Client) -> Vec<Value> {
    let api =
        Api::<DynamicObject>::all_with(client.clone(), &CLUSTER_NETWORK_POLICY.api_resource());
    (api.list(&ListParams::default())
        .await
        .expect("listing")
        .items)
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("JSON"))
        .collect()
}

/// Whether each of `pods` (name, namespace, labels) may reach an external address on 443/TCP,
/// by kube-network-policies' engine over what the API server holds (no NetworkPolicy is in
/// those namespaces).
async fn external_egress(
    client: &Client,
    pods: &[(&'static str, String, Value)],
) -> BTreeMap<&'static str, bool> {
    let traffic: Vec<Value> = (pods.iter())
        .map(|(name, ns, labels)| {
            json!({"name": name, "source": pod(ns, POD_IP, labels.clone()),
                   "destination": {"ip": EXTERNAL_IP}, "port": 443, "protocol": "TCP"})
        })
        .collect();
    let scenario = json!({"clusterNetworkPolicies": cluster_network_policies(client).await,
                          "policies": [], "traffic": traffic});
    let verdicts: BTreeMap<String, Value> = common::knp_decide(&scenario);
    (pods.iter())
        .map(|(name, _, _)| (*name, verdicts[*name]["allowed"] == true))
        .collect()
}

/// The names and priorities of the ClusterNetworkPolicies written for `binding`.
async fn written_for(client: &Client, binding: &str) -> BTreeMap<String, Option<i64>> {
    (cluster_network_policies(client).await.iter())
        .filter_map(|p| {
            let name = p["metadata"]["name"].as_str()?;
            name.starts_with(&format!("{binding}-"))
                .then(|| (name.to_owned(), p["spec"]["priority"].as_i64()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_network_policies_leave_out_what_an_exception_lets_out_until_it_expires() {
    let _turn = ONE_OPERATOR.lock().await;
    let cp = common::cluster();
    let client = cp.client().expect("client");
    common::install_engine_crd(&client, nimbus_testenv::upstream::CLUSTER_NETWORK_POLICY).await;
    let operator = Operator::start(Engine::ClusterNetworkPolicy);

    let shop = cp.test_namespace("cnp-exc").await.expect("namespace");
    let other = cp.test_namespace("cnp-exc-other").await.expect("namespace");
    let intent = common::create_intent(&client, "denyExternalNetworkAccess", "Block").await;
    let binding = common::unique("cnp-exc");
    let bindings = Api::<ClusterSecurityIntentBinding>::all(client.clone());
    common::apply(
        &bindings,
        &binding,
        &json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "kind": "ClusterSecurityIntentBinding",
            "metadata": {"name": binding},
            "spec": {"intents": [{"name": intent}],
                     "selector": {"nsSelector": {"matchNames": [shop.name(), other.name()]},
                                  "workloadSelector": {"matchLabels": {"app": "web"}}}},
        }),
    )
    .await;
    let excepted_labels = json!({"app": "web", "tier": "legacy", "team": "vendor"});
    let pods = [
        ("excepted", shop.name().to_owned(), excepted_labels.clone()),
        (
            "legacy only",
            shop.name().to_owned(),
            json!({"app": "web", "tier": "legacy"}),
        ),
        (
            "vendor only",
            shop.name().to_owned(),
            json!({"app": "web", "team": "vendor"}),
        ),
        ("web", shop.name().to_owned(), json!({"app": "web"})),
        (
            "not bound",
            shop.name().to_owned(),
            json!({"app": "db", "tier": "legacy", "team": "vendor"}),
        ),
        (
            "same labels, other namespace",
            other.name().to_owned(),
            excepted_labels,
        ),
    ];
    let expect = |excepted: bool| -> BTreeMap<&'static str, bool> {
        (pods.iter())
            .map(|(name, _, _)| {
                let allowed = *name == "not bound" || (excepted && *name == "excepted");
                (*name, allowed)
            })
            .collect()
    };
    let decided = async |what: &str, excepted: bool, within: Duration| {
        eventually(what, within, async |seen| {
            let allowed = external_egress(&client, &pods).await;
            *seen = format!("{allowed:?}");
            (allowed == expect(excepted)).then(Timestamp::now)
        })
        .await
    };
    decided(
        "clusternetworkpolicy: every bound pod cut off",
        false,
        common::CONVERGE,
    )
    .await;
    let plain = written_for(&client, &binding).await;
    assert_eq!(plain.len(), 1, "{plain:?}");

    let expires_at = Timestamp::now()
        .round(Unit::Second)
        .expect("rounded")
        .checked_add(SignedDuration::from_secs(20))
        .expect("expiry");
    let exceptions = Api::<SecurityIntentException>::namespaced(client.clone(), shop.name());
    common::apply(
        &exceptions,
        "vendor-agent",
        &json!({
            "apiVersion": "exceptions.security.nimbus.com/v1alpha1",
            "kind": "SecurityIntentException",
            "metadata": {"name": "vendor-agent"},
            "spec": {
                "binding": {"kind": "ClusterSecurityIntentBinding", "name": binding},
                "intents": [intent],
                "selector": {"matchLabels": {"tier": "legacy", "team": "vendor"}},
                "reason": "the vendor's agent until its 2.4 release",
                "expiresAt": expires_at.to_string(),
            }
        }),
    )
    .await;
    // Until a second before expiry at most: what is seen last is what the exception made,
    // not what its expiry undid.
    let in_force = Duration::try_from(expires_at.duration_since(Timestamp::now()));
    decided(
        "clusternetworkpolicy: only the excepted pod reaches out, before expiry",
        true,
        in_force
            .unwrap_or_default()
            .saturating_sub(Duration::from_secs(1)),
    )
    .await;
    assert!(
        Timestamp::now() < expires_at,
        "clusternetworkpolicy: the exception took its whole 20 s to be honoured"
    );
    // The unexcepted namespaces' policy under its name, and one per label left out in
    // `shop`: all at the binding's priority.
    let split = written_for(&client, &binding).await;
    let (name, priority) = plain.iter().next().expect("one policy");
    let want: BTreeMap<String, Option<i64>> =
        [name.clone(), format!("{name}-x1"), format!("{name}-x2")]
            .into_iter()
            .map(|n| (n, *priority))
            .collect();
    assert_eq!(split, want);

    let wait = Duration::try_from(expires_at.duration_since(Timestamp::now())).unwrap_or_default();
    tokio::time::sleep(wait).await;
    let cut = decided(
        "clusternetworkpolicy: every bound pod cut off again",
        false,
        common::CONVERGE,
    )
    .await;
    let lag = Duration::try_from(cut.duration_since(expires_at)).unwrap_or_default();
    eprintln!("clusternetworkpolicy: the excepted pod cut off again {lag:?} after expiresAt");
    eventually(
        "the extra policies pruned",
        common::CONVERGE,
        async |seen| {
            let now = written_for(&client, &binding).await;
            *seen = format!("{now:?}");
            (now == plain).then_some(())
        },
    )
    .await;

    // Gone before the next test's operator allocates priorities.
    bindings
        .delete(&binding, &DeleteParams::default())
        .await
        .expect("deleting the binding");
    eventually(
        "the binding's policies gone",
        common::CONVERGE,
        async |seen| {
            let now = written_for(&client, &binding).await;
            *seen = format!("{now:?}");
            now.is_empty().then_some(())
        },
    )
    .await;
    operator.stop();
}
