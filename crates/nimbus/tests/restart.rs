//! A restart never lowers protection. With 3,000 SecurityIntents and a realistic set of
//! bindings in force (every engine installed, so CRD-backed kinds are discovered at start),
//! the operator process is terminated and started again ten times while a monitor watches
//! every generated kind: no object may be deleted, even for a moment, none may change uid, and
//! no Warning Event or `Ready=False` status may be written about what was in force all along.

mod common;

use common::monitor::{Monitor, Watched};
use common::replica::Replica;
use common::{CONVERGE, apply, intent};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, ListParams, PostParams};
use kube::{Api, Client, Resource};
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

const NAMESPACES: [&str; 3] = ["restart-a", "restart-b", "restart-c"];
/// SecurityIntents in the cluster, most of them bound by nothing: a large cache to list.
const INTENTS: usize = 3_000;
const RESTARTS: usize = 10;

/// The intents in force: (name, id).
const IN_FORCE: [(&str, &str); 4] = [
    ("dns", "dnsManipulation"),
    ("egress", "denyExternalNetworkAccess"),
    ("escape", "escapeToHost"),
    ("tmp-exec", "preventExecutionFromTempOrLogsFolders"),
];

/// The kinds the operator generates here (what the monitor holds to "never deleted").
fn generated_kinds() -> Vec<ApiResource> {
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

/// The kinds whose `Ready` condition the operator writes.
fn reporting_kinds() -> Vec<ApiResource> {
    vec![
        ApiResource::erase::<SecurityIntentBinding>(&()),
        ApiResource::erase::<ClusterSecurityIntentBinding>(&()),
        ApiResource::erase::<NimbusPolicy>(&()),
        ApiResource::erase::<ClusterNimbusPolicy>(&()),
    ]
}

async fn create_realistic_set(client: &Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in NAMESPACES {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        apply(&namespaces, ns, &body).await;
    }
    let intents: Api<SecurityIntent> = Api::all(client.clone());
    for (name, id) in IN_FORCE {
        apply(&intents, name, &intent(name, id, "Block")).await;
    }
    // The rest, 32 at a time.
    futures::stream::iter(IN_FORCE.len()..INTENTS)
        .map(|i| {
            let intents = intents.clone();
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
        apply(&api, app, &common::binding(app, names, json!({"app": app}))).await;
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
            let ready = value["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .is_some_and(|c| c["status"] == "True" && &c["observedGeneration"] == generation);
            (!ready).then(|| value["metadata"]["name"].to_string())
        })
        .collect()
}

/// Waits until every binding and policy reports Ready for its current generation.
async fn all_ready(client: &Client) {
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
async fn workload(client: &Client) -> Vec<(&'static str, usize)> {
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
async fn settled(replica: &Replica, workload: &[(&'static str, usize)]) {
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

fn start(kubeconfig: &Path, dir: &Path) -> Replica {
    // Leader election as the chart runs it; the same identity comes back after each restart.
    Replica::start(
        "operator",
        kubeconfig,
        dir,
        &["--leader-elect", "--leader-elect-namespace", "kube-system"],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_never_delete_nor_misreport_what_is_in_force() {
    let cp = common::cluster_with_engines();
    let client = cp.client().expect("client");
    create_realistic_set(&client).await;
    let dir = tempfile::tempdir().expect("log dir");

    let mut operator = start(cp.kubeconfig_path(), dir.path());
    all_ready(&client).await;
    let workload = workload(&client).await;
    settled(&operator, &workload).await;

    let monitor = Monitor::start(
        &client,
        Watched {
            objects: generated_kinds(),
            statuses: reporting_kinds(),
        },
    )
    .await;
    let in_force = monitor.present();
    let natives = in_force
        .keys()
        .filter(|k| !k.contains("NimbusPolicy "))
        .count();
    assert!(
        natives >= 20,
        "the realistic set should keep 20+ native policies in force, found {natives}: {in_force:?}"
    );

    for restart in 1..=RESTARTS {
        operator.process.terminate();
        eventually("the operator to exit", CONVERGE, async |_| {
            operator.process.has_exited().then_some(())
        })
        .await;
        operator = start(cp.kubeconfig_path(), dir.path());
        settled(&operator, &workload).await;
        let findings = monitor.findings();
        assert!(
            findings.is_clean(),
            "restart {restart} of {RESTARTS} lowered protection or misreported it:\n{findings}\
             operator log:\n{}",
            operator.process.output()
        );
    }
    // Nothing happens late either: the statuses the last start wrote are still Ready.
    all_ready(&client).await;
    let findings = monitor.findings();
    assert!(findings.is_clean(), "{findings}");
    assert_eq!(
        monitor.present(),
        in_force,
        "the objects in force (and their uids) after {RESTARTS} restarts"
    );
    eprintln!(
        "{RESTARTS} restarts with {INTENTS} intents: {} objects kept in force ({natives} native), \
         no gap, no uid change, no Warning Event, no Ready=False",
        in_force.len()
    );
}
