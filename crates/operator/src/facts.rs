//! The cluster facts engines' translations read ([`Fact`]), one place for each: its cache
//! (kept only while an enabled engine reads it), the change that re-translates every policy,
//! and what it puts in a translation's [`Environment`].

use crate::cache::{Cache, Driver, counted};
use crate::metrics::Metrics;
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt, future};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use nimbus_api::{ClusterNimbusPolicy, NimbusRule};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{
    self, AdminPriorities, Environment, Fact, Ranked, VirtualPatches, virtual_patch,
};
use std::collections::BTreeSet;

/// The caches of the facts the enabled engines read.
pub(crate) struct FactCaches {
    nodes: Option<Cache<Node>>,
    patch_db: Option<(ObjectRef<ConfigMap>, Cache<ConfigMap>)>,
    /// Whether an enabled engine reads whether the k8tls namespace exists (from the shared
    /// cache of namespaces).
    k8tls_namespace: Option<String>,
    /// Whether an enabled engine reads the Admin-tier priorities (from the cache of cluster
    /// policies).
    admin_priorities: bool,
}

impl FactCaches {
    /// `engines`: those enabled; `virtual_patch_db`: the database's ConfigMap (`namespace`,
    /// `name`), if one is configured.
    pub(crate) fn new(
        client: &Client,
        engines: &BTreeSet<Engine>,
        k8tls_namespace: &str,
        virtual_patch_db: Option<&(String, String)>,
        metrics: &Metrics,
    ) -> Self {
        let reads = |fact| engines.iter().any(|e| e.spec().reads(fact));
        Self {
            nodes: reads(Fact::NodePodCidrs).then(|| {
                let cache = Cache::<Node>::new(Api::all(client.clone())).strip(|n| {
                    n.status = None;
                    n.metadata.managed_fields = None;
                });
                counted(cache, metrics)
            }),
            patch_db: virtual_patch_db
                .filter(|_| reads(Fact::VirtualPatchDb))
                .map(|(ns, name)| {
                    let watch = watcher::Config::default().fields(&format!("metadata.name={name}"));
                    let cache = Cache::with(Api::namespaced(client.clone(), ns), (), watch);
                    (ObjectRef::new(name).within(ns), counted(cache, metrics))
                }),
            k8tls_namespace: reads(Fact::K8tlsNamespace).then(|| k8tls_namespace.to_owned()),
            admin_priorities: reads(Fact::AdminPriorities),
        }
    }

    /// What reconciles read of them; `namespaces` and `cluster_policies`: the shared caches.
    pub(crate) fn stores(
        &self,
        namespaces: &Store<Namespace>,
        cluster_policies: &Store<ClusterNimbusPolicy>,
        k8tls_namespace: &str,
    ) -> Facts {
        Facts {
            cluster_policies: self.admin_priorities.then(|| cluster_policies.clone()),
            nodes: self.nodes.as_ref().map(|c| c.store.clone()),
            virtual_patch_db: self
                .patch_db
                .as_ref()
                .map(|(key, cache)| (key.clone(), cache.store.clone())),
            namespaces: namespaces.clone(),
            k8tls_namespace: k8tls_namespace.to_owned(),
        }
    }

    /// Resolves once each has listed.
    pub(crate) fn listed(&self) -> Vec<Driver> {
        let mut listed = Vec::new();
        listed.extend(self.nodes.as_ref().map(|c| c.synced().boxed()));
        listed.extend(self.patch_db.as_ref().map(|(_, c)| c.synced().boxed()));
        listed
    }

    /// Their watches.
    pub(crate) fn drivers(&mut self) -> Vec<Driver> {
        let mut drivers = Vec::new();
        drivers.extend(self.nodes.as_mut().map(Cache::driver));
        drivers.extend(self.patch_db.as_mut().map(|(_, c)| c.driver()));
        drivers
    }

    /// A signal per change of a fact that changes translations; `namespaces`: the shared cache
    /// of namespaces, `facts` what reconciles read.
    pub(crate) fn changes(
        &mut self,
        facts: &Facts,
        namespaces: &mut Cache<Namespace>,
    ) -> Vec<BoxStream<'static, ()>> {
        let mut streams = Vec::new();
        if let Some(nodes) = &mut self.nodes {
            let facts = facts.clone();
            streams.push(changes(nodes.subscribe(), move || facts.node_pod_cidrs()));
        }
        if let Some((_, db)) = &mut self.patch_db {
            streams.push(db.subscribe().map(|_| ()).boxed());
        }
        if let Some(k8tls_namespace) = self.k8tls_namespace.clone() {
            let namespace_changed = namespaces
                .subscribe()
                .filter(move |ns| {
                    future::ready(ns.as_ref().is_ok_and(|ns| ns.name_any() == k8tls_namespace))
                })
                .map(|_| ());
            streams.push(namespace_changed.boxed());
        }
        streams
    }
}

/// A signal when a cluster policy's Admin-tier priority moves, which only the deletion of an
/// older one does (a new one takes the next free priority and moves none): what the cluster
/// policies re-translate on. `None` while no enabled engine reads the priorities.
pub(crate) fn admin_priorities_moved(
    facts: &Facts,
    cluster_policies: &mut Cache<ClusterNimbusPolicy>,
) -> Option<BoxStream<'static, ()>> {
    facts.cluster_policies.as_ref()?;
    let facts = facts.clone();
    let mut last = facts.admin_priorities();
    let moved = cluster_policies.subscribe().filter_map(move |_| {
        let now = facts.admin_priorities();
        let moved = matches!((&last, &now), (Some(last), Some(now)) if now.moved_from(last));
        last = now;
        future::ready(moved.then_some(()))
    });
    Some(moved.boxed())
}

/// The facts as reconciles read them, from the caches.
#[derive(Clone)]
pub struct Facts {
    /// Cluster policies, for the Admin-tier priorities (only when the ClusterNetworkPolicy
    /// engine is enabled).
    cluster_policies: Option<Store<ClusterNimbusPolicy>>,
    /// Nodes, for their pod CIDRs (only when the NetworkPolicy engine is enabled).
    nodes: Option<Store<Node>>,
    /// The virtual-patch database ConfigMap, when one is configured.
    virtual_patch_db: Option<(ObjectRef<ConfigMap>, Store<ConfigMap>)>,
    namespaces: Store<Namespace>,
    k8tls_namespace: String,
}

impl Facts {
    /// `spec.podCIDRs` (or `podCIDR`) of every node, when the NetworkPolicy engine reads them.
    pub fn node_pod_cidrs(&self) -> BTreeSet<String> {
        let Some(nodes) = &self.nodes else {
            return BTreeSet::new();
        };
        nodes
            .state()
            .iter()
            .filter_map(|n| n.spec.as_ref())
            .flat_map(|s| match &s.pod_cidrs {
                Some(cidrs) if !cidrs.is_empty() => cidrs.clone(),
                _ => s.pod_cidr.clone().into_iter().collect(),
            })
            .filter(|c| !c.is_empty())
            .collect()
    }

    /// The priorities of every cluster policy's Admin-tier ClusterNetworkPolicies.
    pub fn admin_priorities(&self) -> Option<AdminPriorities> {
        let policies = self.cluster_policies.as_ref()?.state();
        Some(engines::priorities(policies.iter().map(|p| Ranked {
            name: p.metadata.name.as_deref().unwrap_or_default(),
            created: p.metadata.creation_timestamp.as_ref(),
            rules: &p.spec.rules,
        })))
    }

    /// Puts in `env` the facts the translation of `rules` depends on (the costlier ones only
    /// when a rule needs them).
    pub fn read(&self, rules: &[NimbusRule], env: &mut Environment) {
        env.virtual_patches = if engines::rules_read(rules, Fact::VirtualPatchDb) {
            match &self.virtual_patch_db {
                None => VirtualPatches::NotConfigured,
                Some((key, store)) => virtual_patch::from_config_map(
                    &key.to_string(),
                    store.get(key).as_deref().and_then(|cm| cm.data.as_ref()),
                ),
            }
        } else {
            VirtualPatches::NotConfigured
        };
        env.node_pod_cidrs = if engines::rules_read(rules, Fact::NodePodCidrs) {
            self.node_pod_cidrs()
        } else {
            BTreeSet::new()
        };
        env.admin_priorities = if engines::rules_read(rules, Fact::AdminPriorities) {
            self.admin_priorities()
        } else {
            None
        };
        env.k8tls_namespace_exists = self
            .namespaces
            .get(&ObjectRef::new(&self.k8tls_namespace))
            .is_some();
    }
}

/// Emits when `value()` differs from what it was at the previous event of `events`.
fn changes<T, V>(
    events: impl Stream<Item = T> + Send + 'static,
    value: impl Fn() -> V + Send + 'static,
) -> BoxStream<'static, ()>
where
    V: PartialEq + Send + 'static,
{
    let mut last = None;
    events
        .filter_map(move |_| {
            let now = value();
            let changed = last.as_ref() != Some(&now);
            last = Some(now);
            future::ready(changed.then_some(()))
        })
        .boxed()
}
