//! The objects the bench creates and changes, and the client it does it with.

use crate::requests::{Key, Own};
use anyhow::Context as _;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use kube::api::{ListParams, ObjectList, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntent,
    SecurityIntentBinding,
};
use nimbus_core::engines;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use std::collections::BTreeSet;
use std::fmt::Debug;

/// Requests in flight while creating or updating many objects.
const CONCURRENCY: usize = 8;
/// The compatible floor's creates and changes of bindings, as many in flight as
/// [`create_workload`] and [`change_bindings`] send (its chains start as each one returns).
pub static BINDING_WRITES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(CONCURRENCY);

/// The intents every namespaced binding references, in this order: (object name, intent ID).
pub const INTENTS: [(&str, &str); 4] = [
    ("bench-dns-manipulation", "dnsManipulation"),
    ("bench-escape-to-host", "escapeToHost"),
    ("bench-sw-deployment-tools", "swDeploymentTools"),
    ("bench-deny-external-network", "denyExternalNetworkAccess"),
];
/// The namespaced bindings' revisions: as created (scenario A), after scenario C changed their
/// workload label, and after scenario D dropped their last intent.
pub const CREATED: u32 = 0;
pub const RELABELLED: u32 = 1;
pub const NARROWED: u32 = 2;

/// The intents a namespaced binding references at `revision`.
pub fn binding_intents(revision: u32) -> &'static [(&'static str, &'static str)] {
    if revision >= NARROWED {
        &INTENTS[..INTENTS.len() - 1]
    } else {
        &INTENTS
    }
}

/// The intents a cluster binding with `n` intents references, in this order.
pub fn cluster_intents(n: usize) -> &'static [(&'static str, &'static str)] {
    const ORDER: [(&str, &str); 4] = [INTENTS[1], INTENTS[0], INTENTS[2], INTENTS[3]];
    &ORDER[..n.min(ORDER.len())]
}
pub const CLUSTER_BINDING: &str = "bench-all-namespaces";
/// Namespaces a `matchNames: ["*"]` cluster binding never selects.
/// The operator's protected namespaces as the bench runs it (kube-system and the k8tls
/// namespace; it has no namespace of its own outside a cluster).
const NEVER_SELECTED: [&str; 2] = ["kube-system", nimbus_core::engines::DEFAULT_K8TLS_NAMESPACE];

/// Whether the operator (as the bench runs it: without leader election) reads or writes this
/// resource: the Nimbus kinds, every engine's native kinds, and what it watches or emits
/// besides (namespaces, nodes, CRD metadata, events).
pub fn operator_resource(key: &Key) -> bool {
    const OTHERS: [(&str, &str); 5] = [
        ("", "namespaces"),
        ("", "nodes"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("events.k8s.io", "events"),
        ("", "events"),
    ];
    key.group == nimbus_api::GROUP
        || engines::all_kinds()
            .iter()
            .any(|k| k.group == key.group && k.plural == key.resource)
        || OTHERS.contains(&(key.group.as_str(), key.resource.as_str()))
}

/// The watches kube-controller-manager's garbage collector opens for the kinds the bench
/// creates or the operator generates (it watches every deletable resource).
pub fn watched_by_garbage_collector() -> Vec<Key> {
    fn watch<K: Resource<DynamicType = ()>>() -> Key {
        key::<K>("WATCH")
    }
    let mut keys = vec![
        watch::<SecurityIntent>(),
        watch::<SecurityIntentBinding>(),
        watch::<ClusterSecurityIntentBinding>(),
        watch::<NimbusPolicy>(),
        watch::<ClusterNimbusPolicy>(),
    ];
    // The bench installs Kyverno's legacy CRDs only (a Kyverno before 1.17), as before the CEL
    // kinds, so that its figures compare across releases.
    let cel = engines::KyvernoApi::Cel.writes();
    keys.extend(
        engines::all_kinds()
            .into_iter()
            .filter(|k| !cel.contains(k))
            .map(|k| Key::new("WATCH", k.group, k.plural, "")),
    );
    keys
}

/// A client that records every request it sends (see [`crate::requests`]).
#[derive(Clone)]
pub struct Ops {
    pub client: Client,
    pub own: Own,
}

fn key<K: Resource<DynamicType = ()>>(verb: &str) -> Key {
    Key::new(verb, &K::group(&()), &K::plural(&()), "")
}

impl Ops {
    pub async fn create<K>(&self, api: &Api<K>, object: &K) -> anyhow::Result<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
    {
        self.own.record(key::<K>("POST"));
        api.create(&PostParams::default(), object)
            .await
            .with_context(|| format!("creating {} {}", K::kind(&()), object.name_any()))
    }

    pub async fn list<K>(&self, api: &Api<K>, params: &ListParams) -> anyhow::Result<ObjectList<K>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        self.own.record(key::<K>("LIST"));
        api.list(params)
            .await
            .with_context(|| format!("listing {}", K::plural(&())))
    }

    /// A watch from `version` (default timeout and bookmarks).
    pub async fn watch<K>(
        &self,
        api: &Api<K>,
        version: &str,
    ) -> anyhow::Result<BoxStream<'static, kube::Result<WatchEvent<K>>>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        self.own.record(key::<K>("WATCH"));
        let events = api
            .watch(&WatchParams::default(), version)
            .await
            .with_context(|| format!("watching {}", K::plural(&())))?;
        Ok(events.boxed())
    }

    pub async fn delete<K>(&self, api: &Api<K>, name: &str) -> anyhow::Result<()>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        self.own.record(key::<K>("DELETE"));
        api.delete(name, &kube::api::DeleteParams::background())
            .await
            .with_context(|| format!("deleting {} {name}", K::kind(&())))
            .map(drop)
    }

    pub async fn merge_patch<K>(
        &self,
        api: &Api<K>,
        name: &str,
        patch: &serde_json::Value,
    ) -> anyhow::Result<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        self.own.record(key::<K>("PATCH"));
        api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .with_context(|| format!("patching {} {name}", K::kind(&())))
    }
}

/// One namespaced binding of the workload.
#[derive(Clone, Debug)]
pub struct Binding {
    pub namespace: String,
    pub name: String,
    /// `app` label of its workloads, before any churn.
    app: String,
}

impl Binding {
    /// The `app` label at `revision`.
    pub fn app(&self, revision: u32) -> String {
        match revision {
            0 => self.app.clone(),
            _ => format!("{}-v{RELABELLED}", self.app),
        }
    }
}

/// What the bench creates.
pub struct Plan {
    pub namespaces: Vec<String>,
    pub bindings: Vec<Binding>,
    /// Intents of the cluster binding (see [`cluster_intents`]).
    pub cluster_intents: usize,
    /// Namespaces the cluster binding selects (every namespace but kube-system), known once
    /// the bench namespaces exist.
    pub selected: BTreeSet<String>,
}

impl Plan {
    pub fn new(namespaces: usize, bindings: usize, cluster_intents: usize) -> Self {
        Self::named("bench", namespaces, bindings, cluster_intents)
    }

    /// The same workload in namespaces `<prefix>-<n>`: `bindings` spread over the namespaces
    /// in turn (the first namespaces get one more when they do not divide evenly).
    pub fn named(prefix: &str, namespaces: usize, bindings: usize, cluster_intents: usize) -> Self {
        let width = namespaces.saturating_sub(1).to_string().len().max(2);
        let namespaces: Vec<String> = (0..namespaces)
            .map(|i| format!("{prefix}-{i:0width$}"))
            .collect();
        let bindings = (0..bindings)
            .map(|i| {
                let ns = &namespaces[i % namespaces.len()];
                let j = i / namespaces.len();
                Binding {
                    namespace: ns.clone(),
                    name: format!("binding-{j}"),
                    app: format!("{ns}-app-{j}"),
                }
            })
            .collect();
        Self {
            namespaces,
            bindings,
            cluster_intents,
            selected: BTreeSet::new(),
        }
    }

    /// Number of NimbusPolicies and ClusterNimbusPolicies the operator must produce.
    pub fn expected_policies(&self) -> usize {
        self.bindings.len() + self.selected.len() + 1
    }
}

/// Creates the bench namespaces (before any measurement).
pub async fn create_namespaces(ops: &Ops, plan: &Plan) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    let api: Api<Namespace> = Api::all(ops.client.clone());
    stream::iter(&plan.namespaces)
        .map(|name| {
            let api = api.clone();
            async move {
                let ns: Namespace = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "labels": {"nimbus-bench": "true"}}
                }))
                .context("building a Namespace")?;
                ops.create(&api, &ns).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .map(drop)
}

/// How many bench namespaces have what kube-controller-manager creates in every new namespace
/// (the `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap), and every namespace the
/// cluster binding will select.
pub async fn namespaces_settled(
    ops: &Ops,
    plan: &Plan,
) -> anyhow::Result<(usize, BTreeSet<String>)> {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
    let ours: BTreeSet<&str> = plan.namespaces.iter().map(String::as_str).collect();
    let in_ours = |names: Vec<Option<String>>| -> BTreeSet<String> {
        names
            .into_iter()
            .flatten()
            .filter(|ns| ours.contains(ns.as_str()))
            .collect()
    };
    let accounts = ops
        .list(
            &Api::<ServiceAccount>::all(ops.client.clone()),
            &ListParams::default().fields("metadata.name=default"),
        )
        .await?;
    let config_maps = ops
        .list(
            &Api::<ConfigMap>::all(ops.client.clone()),
            &ListParams::default().fields("metadata.name=kube-root-ca.crt"),
        )
        .await?;
    let with_account = in_ours(accounts.items.iter().map(|a| a.namespace()).collect());
    let with_ca = in_ours(config_maps.items.iter().map(|c| c.namespace()).collect());
    let settled = with_account.intersection(&with_ca).count();
    let namespaces = ops
        .list(
            &Api::<Namespace>::all(ops.client.clone()),
            &ListParams::default(),
        )
        .await?;
    let selected = namespaces
        .items
        .iter()
        .map(ResourceExt::name_any)
        .filter(|n| !NEVER_SELECTED.contains(&n.as_str()))
        .collect();
    Ok((settled, selected))
}

/// The SecurityIntents every binding references.
pub fn intents() -> anyhow::Result<Vec<SecurityIntent>> {
    INTENTS
        .iter()
        .map(|(name, id)| {
            serde_json::from_value(json!({
                "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
                "metadata": {"name": name},
                "spec": {"intent": {"id": id, "action": "Block", "description": format!("bench: {id}")}}
            }))
            .context("building a SecurityIntent")
        })
        .collect()
}

/// The namespaced binding `b` at `revision`.
pub fn binding(b: &Binding, revision: u32) -> anyhow::Result<SecurityIntentBinding> {
    let refs: Vec<_> = binding_intents(revision)
        .iter()
        .map(|(name, _)| json!({"name": name}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1",
        "kind": "SecurityIntentBinding",
        "metadata": {"name": b.name, "namespace": b.namespace},
        "spec": {
            "intents": refs,
            "selector": {"workloadSelector": {"matchLabels": {"app": b.app(revision)}}}
        }
    }))
    .context("building a SecurityIntentBinding")
}

/// The cluster binding named `name`, with `plan`'s cluster intents, over every namespace.
pub fn cluster_binding(plan: &Plan, name: &str) -> anyhow::Result<ClusterSecurityIntentBinding> {
    let refs: Vec<_> = cluster_intents(plan.cluster_intents)
        .iter()
        .map(|(name, _)| json!({"name": name}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1",
        "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": name},
        "spec": {
            "intents": refs,
            "selector": {"nsSelector": {"matchNames": ["*"]}}
        }
    }))
    .context("building a ClusterSecurityIntentBinding")
}

/// Scenario A's writes: the intents, every namespaced binding, then the cluster binding.
pub async fn create_workload(ops: &Ops, plan: &Plan) -> anyhow::Result<()> {
    let api: Api<SecurityIntent> = Api::all(ops.client.clone());
    for intent in intents()? {
        ops.create(&api, &intent).await?;
    }
    stream::iter(&plan.bindings)
        .map(|b| async move {
            let api: Api<SecurityIntentBinding> = Api::namespaced(ops.client.clone(), &b.namespace);
            ops.create(&api, &binding(b, 0)?).await
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let cluster = cluster_binding(plan, CLUSTER_BINDING)?;
    ops.create(&Api::all(ops.client.clone()), &cluster).await?;
    Ok(())
}

/// Scenarios C's and D's writes: every binding's spec becomes what it is at `revision`.
pub async fn change_bindings(ops: &Ops, plan: &Plan, revision: u32) -> anyhow::Result<()> {
    stream::iter(&plan.bindings)
        .map(|b| async move {
            let api: Api<SecurityIntentBinding> = Api::namespaced(ops.client.clone(), &b.namespace);
            let spec = serde_json::to_value(binding(b, revision)?.spec)?;
            ops.merge_patch(&api, &b.name, &json!({ "spec": spec }))
                .await
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .map(drop)
}

/// Scenario E's writes: every namespaced binding deleted (in the background, as kubectl does).
pub async fn delete_bindings(ops: &Ops, plan: &Plan) -> anyhow::Result<()> {
    stream::iter(&plan.bindings)
        .map(|b| async move {
            let api: Api<SecurityIntentBinding> = Api::namespaced(ops.client.clone(), &b.namespace);
            ops.delete(&api, &b.name).await
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .map(drop)
}

/// How many of the namespaced bindings' NimbusPolicies are left.
pub async fn binding_policies_left(ops: &Ops, plan: &Plan) -> anyhow::Result<usize> {
    let api: Api<NimbusPolicy> = Api::all(ops.client.clone());
    let left = ops.list(&api, &ListParams::default()).await?;
    Ok(left
        .items
        .iter()
        .filter(|p| {
            plan.bindings.iter().any(|b| {
                p.namespace().as_deref() == Some(b.namespace.as_str()) && p.name_any() == b.name
            })
        })
        .count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_resources_are_nimbus_native_and_watched_kinds() {
        let yes = [
            ("APPLY", nimbus_api::GROUP, "nimbuspolicies", "status"),
            ("GET", "security.kubearmor.com", "kubearmorpolicies", ""),
            ("APPLY", "networking.k8s.io", "networkpolicies", ""),
            ("POST", "events.k8s.io", "events", ""),
        ];
        let no = [
            ("PUT", "coordination.k8s.io", "leases", ""),
            ("POST", "", "serviceaccounts", ""),
            (
                "WATCH",
                "security.kubearmor.com",
                "kubearmorhostpolicies",
                "",
            ),
        ];
        for (v, g, r, s) in yes {
            assert!(operator_resource(&Key::new(v, g, r, s)), "{r}");
        }
        for (v, g, r, s) in no {
            assert!(!operator_resource(&Key::new(v, g, r, s)), "{r}");
        }
    }

    #[test]
    fn plan_names_and_counts() {
        let mut plan = Plan::new(3, 7, 2);
        plan.selected = ["default", "bench-00", "bench-01", "bench-02"]
            .map(String::from)
            .into();
        assert_eq!(plan.bindings.len(), 7);
        assert_eq!(plan.expected_policies(), 7 + 4 + 1);
        let placed: Vec<String> = plan
            .bindings
            .iter()
            .map(|b| format!("{}/{}", b.namespace, b.name))
            .collect();
        assert_eq!(
            placed,
            [
                "bench-00/binding-0",
                "bench-01/binding-0",
                "bench-02/binding-0",
                "bench-00/binding-1",
                "bench-01/binding-1",
                "bench-02/binding-1",
                "bench-00/binding-2"
            ]
        );
        assert_eq!(plan.bindings[3].app(0), "bench-00-app-1");
        assert_eq!(plan.bindings[3].app(1), "bench-00-app-1-v1");
        let ids: Vec<&str> = cluster_intents(plan.cluster_intents)
            .iter()
            .map(|(_, id)| *id)
            .collect();
        assert_eq!(ids, ["escapeToHost", "dnsManipulation"]);
    }
}
