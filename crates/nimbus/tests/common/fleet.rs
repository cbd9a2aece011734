//! A realistic set of intents and bindings kept in force by an operator process, and the
//! ways to tell when that operator has settled: for tests of what happens around it
//! (restarts, takeovers).

use super::monitor::{Monitor, Watched};
use super::replica::Replica;
use super::{CONVERGE, apply, intent};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntent,
    SecurityIntentBinding,
};
use nimbus_core::engines::{
    KUBEARMOR_POLICY, KYVERNO_CLUSTER_POLICY, KYVERNO_POLICY, NETWORK_POLICY,
};
use nimbus_testenv::eventually;
use serde_json::json;
use std::path::Path;

pub const NAMESPACES: [&str; 3] = ["restart-a", "restart-b", "restart-c"];

/// The intents in force: (name, id).
const IN_FORCE: [(&str, &str); 4] = [
    ("dns", "dnsManipulation"),
    ("egress", "denyExternalNetworkAccess"),
    ("escape", "escapeToHost"),
    ("tmp-exec", "preventExecutionFromTempOrLogsFolders"),
];

/// The kinds the operator generates here (what the monitor holds to "never deleted").
pub fn generated_kinds() -> Vec<ApiResource> {
    let mut kinds = vec![
        ApiResource::erase::<NimbusPolicy>(&()),
        ApiResource::erase::<ClusterNimbusPolicy>(&()),
    ];
    kinds.extend(
        [
            &NETWORK_POLICY,
            &KUBEARMOR_POLICY,
            &KYVERNO_POLICY,
            &KYVERNO_CLUSTER_POLICY,
        ]
        .map(|k| k.api_resource()),
    );
    kinds
}

/// A monitor of every generated kind and of every status the operator writes (its baseline is
/// what is there now).
pub async fn monitor(client: &Client) -> Monitor {
    let watched = Watched {
        objects: generated_kinds(),
        statuses: reporting_kinds(),
    };
    Monitor::start(client, watched).await
}

/// The kinds whose `Ready` condition the operator writes.
pub fn reporting_kinds() -> Vec<ApiResource> {
    vec![
        ApiResource::erase::<SecurityIntentBinding>(&()),
        ApiResource::erase::<ClusterSecurityIntentBinding>(&()),
        ApiResource::erase::<NimbusPolicy>(&()),
        ApiResource::erase::<ClusterNimbusPolicy>(&()),
    ]
}

/// Namespaces, the intents in force, `intents` SecurityIntents in all (the rest bound by
/// nothing: a cache to list), a binding in each namespace and a cluster binding over `*`.
pub async fn create_realistic_set(client: &Client, intents: usize) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in NAMESPACES {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        apply(&namespaces, ns, &body).await;
    }
    let api: Api<SecurityIntent> = Api::all(client.clone());
    for (name, id) in IN_FORCE {
        apply(&api, name, &intent(name, id, "Block")).await;
    }
    // The rest, 32 at a time.
    futures::stream::iter(IN_FORCE.len()..intents)
        .map(|i| {
            let intents = api.clone();
            async move {
                let name = format!("filler-{i:04}");
                let body: SecurityIntent =
                    serde_json::from_value(intent(&name, "dnsManipulation", "Block"))
                        .expect("an intent");
                intents.create(&PostParams::default(), &body).await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .expect("creating the filler intents");

    let bindings = [
        ("restart-a", "web", ["dns", "tmp-exec"].as_slice()),
        ("restart-b", "api", ["egress", "escape"].as_slice()),
        (
            "restart-c",
            "db",
            ["dns", "egress", "escape", "tmp-exec"].as_slice(),
        ),
    ];
    for (ns, app, names) in bindings {
        let api: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns);
        apply(&api, app, &super::binding(app, names, json!({"app": app}))).await;
    }
    let cluster: Api<ClusterSecurityIntentBinding> = Api::all(client.clone());
    let everywhere = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1",
        "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": "everywhere"},
        "spec": {
            "intents": [{"name": "escape"}, {"name": "dns"}],
            "selector": {"nsSelector": {"matchNames": ["*"]},
                         "workloadSelector": {"matchLabels": {"tier": "frontend"}}}
        }
    });
    apply(&cluster, "everywhere", &everywhere).await;
}

/// Objects of `K` whose `Ready` condition is not True for their current generation, by name.
async fn not_ready<K>(api: &Api<K>) -> Vec<String>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let list = api.list(&ListParams::default()).await.expect("listing");
    list.items
        .iter()
        .filter_map(|obj| {
            let value = serde_json::to_value(obj).expect("serializable");
            let generation = &value["metadata"]["generation"];
            let condition = value["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
            let ready = condition
                .is_some_and(|c| c["status"] == "True" && &c["observedGeneration"] == generation);
            (!ready).then(|| {
                format!(
                    "{}/{} (generation {generation}): {condition:?}",
                    value["metadata"]["namespace"].as_str().unwrap_or_default(),
                    value["metadata"]["name"].as_str().unwrap_or_default()
                )
            })
        })
        .collect()
}

/// Waits until every binding and policy reports Ready for its current generation.
pub async fn all_ready(client: &Client) {
    eventually("every binding and policy Ready", CONVERGE, async |seen| {
        let mut pending = not_ready(&Api::<SecurityIntentBinding>::all(client.clone())).await;
        pending.extend(not_ready(&Api::<ClusterSecurityIntentBinding>::all(client.clone())).await);
        pending.extend(not_ready(&Api::<NimbusPolicy>::all(client.clone())).await);
        pending.extend(not_ready(&Api::<ClusterNimbusPolicy>::all(client.clone())).await);
        *seen = format!("not ready: {pending:?}");
        pending.is_empty().then_some(())
    })
    .await;
}

/// How many objects each controller reconciles.
pub async fn workload(client: &Client) -> Vec<(&'static str, usize)> {
    let lp = ListParams::default();
    async fn count<K>(api: Api<K>, lp: &ListParams) -> usize
    where
        K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        api.list_metadata(lp).await.expect("listing").items.len()
    }
    vec![
        (
            "intent",
            count(Api::<SecurityIntent>::all(client.clone()), &lp).await,
        ),
        (
            "binding",
            count(Api::<SecurityIntentBinding>::all(client.clone()), &lp).await,
        ),
        (
            "cluster_binding",
            count(
                Api::<ClusterSecurityIntentBinding>::all(client.clone()),
                &lp,
            )
            .await,
        ),
        (
            "policy",
            count(Api::<NimbusPolicy>::all(client.clone()), &lp).await,
        ),
        (
            "cluster_policy",
            count(Api::<ClusterNimbusPolicy>::all(client.clone()), &lp).await,
        ),
    ]
}

/// Waits until `replica` is ready and has reconciled each object at least once since it
/// started, with nothing in flight: the moment a restart could have done harm has passed.
pub async fn settled(replica: &Replica, workload: &[(&'static str, usize)]) {
    eventually(
        &format!("{} to settle", replica.name),
        CONVERGE,
        async |seen| {
            if let Err(not_ready) = replica.ready().await {
                *seen = not_ready;
                return None;
            }
            for (controller, objects) in workload {
                let filter = format!("controller=\"{controller}\"");
                let reconciled = replica.metric("nimbus_reconciles_total", &filter).await;
                if reconciled < *objects as f64 {
                    *seen = format!("{controller}: {reconciled} of {objects} reconciled");
                    return None;
                }
            }
            let in_flight = replica.metric("nimbus_reconciles_in_flight", "").await;
            let pending = replica.metric("nimbus_watch_events_pending", "").await;
            *seen = format!("{in_flight} reconciles in flight, {pending} events pending");
            (in_flight == 0.0 && pending == 0.0).then_some(())
        },
    )
    .await;
}

/// `Kind namespace/name` of the objects of `kinds` that `params` lists and `keep` keeps, sorted.
pub async fn listed(
    client: &Client,
    kinds: &[ApiResource],
    params: &ListParams,
    keep: impl Fn(&DynamicObject) -> bool,
) -> Vec<String> {
    let mut found = Vec::new();
    for kind in kinds {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), kind);
        let list = api.list(params).await.expect("listing");
        found.extend(list.items.iter().filter(|o| keep(o)).map(|o| {
            let namespace = o.metadata.namespace.as_deref().unwrap_or_default();
            format!("{} {namespace}/{}", kind.kind, o.name_any())
        }));
    }
    found.sort();
    found
}

/// Starts the operator and waits until the realistic set is Ready and the operator has
/// settled; returns it and its workload (see [`settled`]).
pub async fn start_settled(
    client: &Client,
    kubeconfig: &Path,
    dir: &Path,
) -> (Replica, Vec<(&'static str, usize)>) {
    let operator = start(kubeconfig, dir);
    all_ready(client).await;
    let workload = workload(client).await;
    settled(&operator, &workload).await;
    (operator, workload)
}

pub fn start(kubeconfig: &Path, dir: &Path) -> Replica {
    // Leader election as the chart runs it; the same identity comes back after each restart.
    Replica::start(
        "operator",
        kubeconfig,
        dir,
        &["--leader-elect", "--leader-elect-namespace", "kube-system"],
    )
}
