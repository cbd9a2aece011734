//! What the operator runs with.

use crate::leader::LeaderElection;
use crate::posture;
use k8s_openapi::jiff::SignedDuration;
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{
    DEFAULT_K8TLS_IMAGE, DEFAULT_K8TLS_NAMESPACE, DEFAULT_SANDBOX_CLUSTER_ROLES, KyvernoKinds,
    Preference,
};
use nimbus_core::exceptions;
use nimbus_core::namespaces::ProtectedNamespaces;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Config {
    /// Where `/healthz` and `/readyz` are served; `None` serves nothing.
    pub health_addr: Option<SocketAddr>,
    /// Where `/metrics` is served; `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
    /// Run as one of several replicas, only the lease holder writing; `None`: always write.
    pub leader_election: Option<LeaderElection>,
    /// How often an unchanged object is re-checked.
    pub resync: Duration,
    /// Name reported on events (the Deployment's name in a cluster).
    pub reporter: String,
    /// Identity of this replica on events (the pod name in a cluster).
    pub instance: Option<String>,
    /// Engines the operator drives; the others are left to external adapters.
    pub engines: BTreeSet<Engine>,
    /// Which of Kyverno's policy APIs the Kyverno engine writes in.
    pub kyverno_kinds: KyvernoKinds,
    /// Which of the engines of one mechanism (Kyverno, admission) writes, when several are in
    /// force.
    pub engine_preference: Preference,
    /// Namespace of the k8tls CronJobs (with its `k8tls` ServiceAccount and ConfigMaps).
    pub k8tls_namespace: String,
    /// The ConfigMap (`namespace/name`) holding the virtual-patch database.
    pub virtual_patch_db: Option<(String, String)>,
    /// Image of the k8tls scanner.
    pub k8tls_image: String,
    /// The only ClusterRoles namespaceSandbox may grant.
    pub sandbox_cluster_roles: BTreeSet<String>,
    /// Address ranges inside the cluster besides the nodes' pod ranges (Services, nodes).
    pub cluster_networks: BTreeSet<String>,
    /// Namespaces cluster bindings never fan out to; `None`: kube-system, the leader-election
    /// namespace (the operator's own) and the k8tls namespace.
    pub protected_namespaces: Option<ProtectedNamespaces>,
    /// Where and how the posture API is served; `None` serves nothing.
    pub posture: Option<posture::Config>,
    /// Reconciles each controller runs at once (0: no limit). Each reconcile sends its
    /// requests one after another, so this also bounds the operator's requests in flight.
    pub reconcile_concurrency: u16,
    /// How often the leader probes enforcement by dry run (see [`crate::probes`]); `None`:
    /// never.
    pub probes: Option<crate::probes::Config>,
    /// The longest a SecurityIntentException may last from its creation.
    pub exception_max_duration: SignedDuration,
    /// Whether a SecurityIntentException must be approved to be honoured.
    pub exception_approval: exceptions::Approval,
}

/// Reconciles wait on the API server, not on the CPU, so many may run at once; but not
/// unboundedly many, so that a burst (every binding at start) cannot crowd out other clients.
/// Measured with `make bench` (2 cores): cold convergence 4.5 s at 16, 3.1 s at 64, 3.2 s
/// unbounded; 5 controllers × 64 stay below kube-apiserver's default 400 requests in flight.
pub const DEFAULT_RECONCILE_CONCURRENCY: u16 = 64;

impl Config {
    /// The protected namespaces in effect.
    pub fn protected(&self) -> ProtectedNamespaces {
        self.protected_namespaces.clone().unwrap_or_else(|| {
            ProtectedNamespaces::defaults(
                self.leader_election.as_ref().map(|e| e.namespace.as_str()),
                &self.k8tls_namespace,
            )
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            health_addr: None,
            metrics_addr: None,
            leader_election: None,
            resync: Duration::from_secs(300),
            reporter: "nimbus-operator".to_owned(),
            instance: None,
            engines: Engine::ALL.into(),
            kyverno_kinds: KyvernoKinds::default(),
            engine_preference: Preference::default(),
            k8tls_namespace: DEFAULT_K8TLS_NAMESPACE.to_owned(),
            virtual_patch_db: None,
            k8tls_image: DEFAULT_K8TLS_IMAGE.to_owned(),
            sandbox_cluster_roles: DEFAULT_SANDBOX_CLUSTER_ROLES
                .iter()
                .map(|r| (*r).to_owned())
                .collect(),
            cluster_networks: BTreeSet::new(),
            protected_namespaces: None,
            posture: None,
            reconcile_concurrency: DEFAULT_RECONCILE_CONCURRENCY,
            probes: None,
            exception_max_duration: exceptions::DEFAULT_MAX_DURATION,
            exception_approval: exceptions::Approval::Optional,
        }
    }
}
