use crate::availability::{self, Served};
use crate::cache::Creations;
use crate::metrics::Metrics;
use crate::write::natives::Natives;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kube::Client;
use kube::runtime::reflector::{ObjectRef, Store};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, NimbusRule, SecurityIntent,
    SecurityIntentBinding,
};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{self, EngineSet, Environment, Fact, VirtualPatches, virtual_patch};
use nimbus_core::namespaces::ProtectedNamespaces;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::sync::watch;

/// What every reconcile reads: the client for writes and the shared caches for reads (a
/// reconcile never lists from the API server).
pub struct Context {
    pub client: Client,
    pub events: crate::events::Events,
    /// How often an unchanged object is re-checked for drift the watches could not see.
    pub resync: Duration,
    pub intents: Store<SecurityIntent>,
    pub bindings: Store<SecurityIntentBinding>,
    pub cluster_bindings: Store<ClusterSecurityIntentBinding>,
    pub policies: Store<NimbusPolicy>,
    pub cluster_policies: Store<ClusterNimbusPolicy>,
    /// Policies created and not yet in their caches (see [`crate::cache::Creations`]).
    pub policies_created: Creations,
    pub cluster_policies_created: Creations,
    pub namespaces: Store<Namespace>,
    pub natives: Natives,
    pub engines: EngineContext,
    pub metrics: Metrics,
    /// Whether this replica may write (it holds the lease, or runs without election).
    pub leading: watch::Receiver<bool>,
    /// Whether every cache has listed and engine availability is known (reconciles wait for it).
    pub started: watch::Receiver<bool>,
    /// Namespaces cluster bindings never fan out to.
    pub protected_namespaces: ProtectedNamespaces,
    /// What this process wrote last (see [`crate::write::Written`]).
    pub written: crate::write::Written,
    /// Consecutive failed reconciles per object (`kind/namespace/name`), for backoff.
    pub failures: std::sync::Mutex<std::collections::HashMap<String, u32>>,
}

/// What the engines need beyond the policies.
pub struct EngineContext {
    pub enabled: BTreeSet<Engine>,
    pub served: watch::Receiver<Served>,
    /// Nodes, for their pod CIDRs (only when the NetworkPolicy engine is enabled).
    pub nodes: Option<Store<Node>>,
    pub k8tls_namespace: String,
    pub k8tls_image: String,
    /// The only ClusterRoles namespaceSandbox may grant.
    pub sandbox_cluster_roles: BTreeSet<String>,
    /// The virtual-patch database ConfigMap, when one is configured.
    pub virtual_patch_db: Option<(ObjectRef<ConfigMap>, Store<ConfigMap>)>,
}

impl Context {
    /// Counts a failed reconcile of `key`; returns how many in a row.
    pub fn count_failure(&self, key: &str) -> u32 {
        let mut failures = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Deleted objects are never reconciled again to forget theirs: bound the map (losing
        // counts only shortens a backoff).
        if failures.len() >= 4096 && !failures.contains_key(key) {
            failures.clear();
        }
        let count = failures.entry(key.to_owned()).or_default();
        *count = count.saturating_add(1);
        *count
    }

    pub fn forget_failures(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }

    pub fn engine_set(&self) -> EngineSet {
        availability::engine_set(&self.engines.enabled, &self.engines.served.borrow())
    }

    /// `spec.podCIDRs` (or `podCIDR`) of every node, when the NetworkPolicy engine reads them.
    pub fn node_pod_cidrs(&self) -> BTreeSet<String> {
        let Some(nodes) = &self.engines.nodes else {
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

    /// The cluster facts the translation of `rules` depends on, from the caches (the costlier
    /// ones only when a rule needs them).
    pub fn environment(&self, rules: &[NimbusRule]) -> Environment {
        let e = &self.engines;
        let virtual_patches = if engines::rules_read(rules, Fact::VirtualPatchDb) {
            match &e.virtual_patch_db {
                None => VirtualPatches::NotConfigured,
                Some((key, store)) => virtual_patch::from_config_map(
                    &key.to_string(),
                    store.get(key).as_deref().and_then(|cm| cm.data.as_ref()),
                ),
            }
        } else {
            VirtualPatches::NotConfigured
        };
        Environment {
            node_pod_cidrs: if engines::rules_read(rules, Fact::NodePodCidrs) {
                self.node_pod_cidrs()
            } else {
                BTreeSet::new()
            },
            k8tls_namespace_exists: self
                .namespaces
                .get(&ObjectRef::new(&e.k8tls_namespace))
                .is_some(),
            k8tls_namespace: e.k8tls_namespace.clone(),
            k8tls_image: e.k8tls_image.clone(),
            virtual_patches,
            sandbox_cluster_roles: e.sandbox_cluster_roles.clone(),
            protected_namespaces: self.protected_namespaces.clone(),
        }
    }
}
