use crate::availability::{self, Served};
use crate::cache::Creations;
use crate::facts::Facts;
use crate::metrics::Metrics;
use crate::write::FIELD_MANAGER;
use crate::write::natives::Natives;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, NimbusRule, SecurityIntent,
    SecurityIntentBinding,
};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{
    EngineSet, Environment, KYVERNO_POLICY, KyvernoKinds, Preference, VirtualPatches,
};
use nimbus_core::namespaces::ProtectedNamespaces;
use nimbus_core::policy::Claim;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::sync::watch;

/// What every reconcile reads: the client for writes and the shared caches for reads (a
/// reconcile never lists from the API server).
pub struct Context {
    pub client: Client,
    pub events: crate::events::Events,
    /// Who the operator's Events say reported them (the compliance Events on Open Cluster
    /// Management's Policies too).
    pub reporter: kube::runtime::events::Reporter,
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
    pub exceptions: Exceptions,
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
    /// One translation at a time per policy (see [`crate::serial`]).
    pub translating: crate::serial::Serial,
    /// Per object (`kind/namespace/name`) failing now: its consecutive failed reconciles and
    /// when the first of them failed, for backoff.
    pub failures: std::sync::Mutex<std::collections::HashMap<String, Failing>>,
    /// What the leader's dry-run probes found of enforcement; `None` while probes are off.
    pub probes: Option<crate::liveness::Probes>,
}

/// The exceptions and how long one may last.
pub struct Exceptions {
    pub store: Store<nimbus_api::SecurityIntentException>,
    pub cluster_store: Store<nimbus_api::ClusterSecurityIntentException>,
    /// `--exception-max-duration` and `--exception-approval`.
    pub rules: nimbus_core::exceptions::Rules,
}

impl Exceptions {
    /// Every exception cached now, of both kinds.
    pub fn known(&self) -> Known {
        Known {
            namespaced: self.store.state(),
            cluster: self.cluster_store.state(),
        }
    }
}

/// The exceptions cached at one time ([`Exceptions::known`]).
pub struct Known {
    namespaced: Vec<std::sync::Arc<nimbus_api::SecurityIntentException>>,
    cluster: Vec<std::sync::Arc<nimbus_api::ClusterSecurityIntentException>>,
}

impl Known {
    pub fn iter(&self) -> impl Iterator<Item = nimbus_core::exceptions::Exception<'_>> {
        let namespaced = self.namespaced.iter().map(Into::into);
        namespaced.chain(self.cluster.iter().map(Into::into))
    }
}

/// An object's current streak of failed reconciles.
#[derive(Clone, Copy, Debug)]
pub struct Failing {
    pub count: u32,
    pub since: std::time::Instant,
}

/// What the engines need beyond the policies.
pub struct EngineContext {
    pub enabled: BTreeSet<Engine>,
    pub kyverno_kinds: KyvernoKinds,
    /// Which engine of a mechanism writes.
    pub preference: Preference,
    pub served: watch::Receiver<Served>,
    pub k8tls_namespace: String,
    pub k8tls_image: String,
    /// The only ClusterRoles namespaceSandbox may grant.
    pub sandbox_cluster_roles: BTreeSet<String>,
    /// Address ranges inside the cluster besides the nodes' pod ranges (`--cluster-networks`).
    pub cluster_networks: BTreeSet<String>,
    /// The cluster facts engines read.
    pub facts: Facts,
}

impl Context {
    /// Counts a failed reconcile of `key`; returns how many in a row.
    pub fn count_failure(&self, key: &str) -> Failing {
        let mut failures = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Deleted objects are never reconciled again to forget theirs: bound the map (losing
        // counts only shortens a backoff).
        if failures.len() >= 4096 && !failures.contains_key(key) {
            failures.clear();
        }
        let failing = failures.entry(key.to_owned()).or_insert(Failing {
            count: 0,
            since: std::time::Instant::now(),
        });
        failing.count = failing.count.saturating_add(1);
        *failing
    }

    pub fn forget_failures(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }

    pub fn engine_set(&self) -> EngineSet {
        availability::engine_set(
            &self.engines.enabled,
            self.engines.kyverno_kinds,
            &self.engines.served.borrow(),
            &self.engines.preference,
        )
    }

    /// What the translation of `rules` depends on: settings, and the cluster facts it reads.
    pub fn environment(&self, rules: &[NimbusRule]) -> Environment {
        let e = &self.engines;
        // The facts' fields are filled in by `read`.
        let mut env = Environment {
            node_pod_cidrs: BTreeSet::new(),
            k8tls_namespace_exists: false,
            virtual_patches: VirtualPatches::NotConfigured,
            k8tls_namespace: e.k8tls_namespace.clone(),
            k8tls_image: e.k8tls_image.clone(),
            sandbox_cluster_roles: e.sandbox_cluster_roles.clone(),
            protected_namespaces: self.protected_namespaces.clone(),
            kyverno: e
                .kyverno_kinds
                .in_force(|k| e.served.borrow().contains(k))
                .unwrap_or_default(),
            kyverno_legacy_served: e.served.borrow().contains(&KYVERNO_POLICY),
            cluster_networks: e.cluster_networks.clone(),
            admin_priorities: None,
        };
        e.facts.read(rules, &mut env);
        env
    }

    /// Whether `np` may be translated, from the caches (see [`Claim`]).
    pub fn claim(&self, np: &NimbusPolicy) -> Claim {
        Claim::namespaced(
            np,
            |ns, name| self.bindings.get(&ObjectRef::new(name).within(ns)),
            |name| self.cluster_bindings.get(&ObjectRef::new(name)),
            &self.protected_namespaces,
            FIELD_MANAGER,
        )
    }

    /// Whether `policy`'s controlling binding is gone from the caches, by uid (see
    /// [`nimbus_core::policy::orphaned`]).
    pub fn orphaned<P: Resource<DynamicType = ()>>(&self, policy: &P) -> bool {
        let namespace = policy.meta().namespace.clone().unwrap_or_default();
        nimbus_core::policy::orphaned(policy, FIELD_MANAGER, |owner| {
            let uid = if owner.kind == SecurityIntentBinding::kind(&()) {
                let key = ObjectRef::new(&owner.name).within(&namespace);
                self.bindings.get(&key).and_then(|b| b.metadata.uid.clone())
            } else {
                let key = ObjectRef::new(&owner.name);
                self.cluster_bindings
                    .get(&key)
                    .and_then(|b| b.metadata.uid.clone())
            };
            uid.as_deref() == Some(owner.uid.as_str())
        })
    }

    /// Whether `cnp` may be translated, from the caches (see [`Claim`]).
    pub fn cluster_claim(&self, cnp: &ClusterNimbusPolicy) -> Claim {
        Claim::cluster(
            cnp,
            |name| self.cluster_bindings.get(&ObjectRef::new(name)),
            FIELD_MANAGER,
        )
    }
}
