//! What a translation takes (the policy, and what the cluster looks like and the operator's
//! settings, with their defaults) and what it gives (native objects, and the problems that keep
//! an intent from being enforced).

use super::admin_priorities::AdminPriorities;
use super::{Engine, KyvernoApi, NativeKind, VirtualPatches};
use crate::exceptions::{BindingRef, Excepted};
use crate::intents::{self, Origin};
use crate::namespaces::ProtectedNamespaces;
use crate::objects::controller_reference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::core::DynamicObject;
use kube::{Resource, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NamespaceSelector, NimbusPolicy, NimbusRule,
};
use std::collections::{BTreeMap, BTreeSet};

/// Where k8tls's CronJobs run unless configured otherwise (Nimbus's fixed namespace).
pub use crate::namespaces::DEFAULT_K8TLS_NAMESPACE;
/// The k8tls scanner unless configured otherwise: Nimbus's image, at a fixed release instead of
/// `latest`, so what runs in the cluster changes only when the operator's configuration does.
pub const DEFAULT_K8TLS_IMAGE: &str = "kubearmor/k8tls:v0.1.0";
/// ClusterRoles namespaceSandbox may grant unless configured otherwise (the Helm chart's
/// `engines.rbac.bindableClusterRoles`).
pub const DEFAULT_SANDBOX_CLUSTER_ROLES: &[&str] = &["edit", "view"];

/// The engine-neutral policy being translated (a NimbusPolicy or a ClusterNimbusPolicy).
#[derive(Debug, Clone)]
pub struct PolicyInput<'a> {
    pub origin: Origin,
    pub name: String,
    /// `None` for a ClusterNimbusPolicy.
    pub namespace: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Controller reference every generated object carries.
    pub owner: OwnerReference,
    /// Pods (or Deployments) the rules apply to.
    pub selector: LabelSelector,
    /// Namespaces of a ClusterNimbusPolicy.
    pub namespaces: Option<NamespaceSelector>,
    pub rules: &'a [NimbusRule],
    /// Sensitive intent IDs the binding's author accepted (its allow-sensitive annotation,
    /// carried over to the policy); others are not enforced.
    pub allowed_sensitive: BTreeSet<String>,
    /// The binding it enforces (its controlling owner); `None` for a policy no binding
    /// controls.
    pub binding: Option<BindingRef>,
    /// The SecurityIntentExceptions in force for it ([`crate::exceptions::for_policy`]); the
    /// caller fills them in, given the time.
    pub exceptions: Vec<Excepted>,
}

impl<'a> PolicyInput<'a> {
    /// A NimbusPolicy; its origin follows from its controlling owner. `uid` is the policy's
    /// (offline callers have none and pass a placeholder).
    pub fn namespaced(np: &'a NimbusPolicy, uid: &str) -> Self {
        let controller = np
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true));
        let from_cluster_binding =
            controller.is_some_and(|o| o.kind == ClusterSecurityIntentBinding::kind(&()));
        let binding = controller.map(|o| {
            if from_cluster_binding {
                BindingRef::cluster(&o.name)
            } else {
                BindingRef::namespaced(&o.name, &np.namespace().unwrap_or_default())
            }
        });
        Self {
            origin: if from_cluster_binding {
                Origin::ClusterBindingNamespace
            } else {
                Origin::Binding
            },
            name: np.name_any(),
            namespace: np.namespace(),
            labels: np.labels().clone(),
            owner: controller_reference::<NimbusPolicy>(&np.name_any(), uid),
            selector: np.spec.selector.clone(),
            namespaces: None,
            rules: &np.spec.rules,
            allowed_sensitive: intents::allowed_sensitive(np.annotations()),
            binding,
            exceptions: Vec::new(),
        }
    }

    pub fn cluster(cwnp: &'a ClusterNimbusPolicy, uid: &str) -> Self {
        Self {
            origin: Origin::Cluster,
            name: cwnp.name_any(),
            namespace: None,
            labels: cwnp.labels().clone(),
            owner: controller_reference::<ClusterNimbusPolicy>(&cwnp.name_any(), uid),
            selector: cwnp.spec.workload_selector.clone().unwrap_or_default(),
            namespaces: cwnp.spec.ns_selector.clone(),
            rules: &cwnp.spec.rules,
            allowed_sensitive: intents::allowed_sensitive(cwnp.annotations()),
            binding: cwnp
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true))
                .map(|o| BindingRef::cluster(&o.name)),
            exceptions: Vec::new(),
        }
    }
}

/// What the translators need to know about the cluster and the operator's settings.
#[derive(Debug, Clone)]
pub struct Environment {
    /// `spec.podCIDR(s)` of every node, for the NetworkPolicy engine.
    pub node_pod_cidrs: BTreeSet<String>,
    /// Namespace of the k8tls CronJobs.
    pub k8tls_namespace: String,
    /// Whether that namespace exists (k8tls needs its ServiceAccount and ConfigMaps there).
    pub k8tls_namespace_exists: bool,
    /// Image of the k8tls scanner.
    pub k8tls_image: String,
    pub virtual_patches: VirtualPatches,
    /// The only ClusterRoles namespaceSandbox may grant (the operator's RBAC `bind` grant
    /// must cover the same names).
    pub sandbox_cluster_roles: BTreeSet<String>,
    /// Namespaces cluster bindings never reach; cluster-wide admission rules exclude them.
    pub protected_namespaces: ProtectedNamespaces,
    /// Which of Kyverno's policy APIs the Kyverno engine writes in.
    pub kyverno: KyvernoApi,
    /// Whether the cluster serves Kyverno's legacy `Policy` kind: a virtual patch for Kyverno
    /// is such a policy (the database holds legacy rules), generated whichever API the engine
    /// writes in, and Kyverno 1.21 no longer serves it.
    pub kyverno_legacy_served: bool,
    /// Address ranges inside the cluster besides the nodes' pod ranges (Services, nodes), which
    /// the ClusterNetworkPolicy engine's denyExternalNetworkAccess passes on.
    pub cluster_networks: BTreeSet<String>,
    /// The Admin-tier priorities of every cluster policy's ClusterNetworkPolicies; `None`: a
    /// policy translated on its own (offline), which takes the first of its band.
    pub admin_priorities: Option<AdminPriorities>,
}

impl Default for Environment {
    fn default() -> Self {
        Self {
            node_pod_cidrs: BTreeSet::new(),
            k8tls_namespace: DEFAULT_K8TLS_NAMESPACE.to_owned(),
            k8tls_namespace_exists: true,
            k8tls_image: DEFAULT_K8TLS_IMAGE.to_owned(),
            virtual_patches: VirtualPatches::NotConfigured,
            sandbox_cluster_roles: DEFAULT_SANDBOX_CLUSTER_ROLES
                .iter()
                .map(|r| (*r).to_owned())
                .collect(),
            protected_namespaces: ProtectedNamespaces::default(),
            kyverno: KyvernoApi::default(),
            kyverno_legacy_served: true,
            cluster_networks: BTreeSet::new(),
            admin_priorities: None,
        }
    }
}

/// One generated native object.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// Index of the rule (in the policy's `rules`) the object enforces.
    pub rule: usize,
    pub engine: Engine,
    pub kind: &'static NativeKind,
    pub object: DynamicObject,
}

impl Generated {
    /// The policy-status entry: `Kind/name`, or `namespace/CronJob/name` for CronJobs (the
    /// only kind Nimbus lists with its namespace).
    pub fn entry(&self) -> String {
        let name = self.object.name_any();
        match (&self.kind.entry, self.object.namespace()) {
            (&"CronJob", Some(ns)) => format!("{ns}/CronJob/{name}"),
            (entry, _) => format!("{entry}/{name}"),
        }
    }
}

/// Why an intent is not (fully) enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub intent: String,
    /// A condition reason from [`condition`].
    pub reason: &'static str,
    pub message: String,
    /// Whether the intent is left without any enforcement (as opposed to enforced by fewer
    /// engines than it could be).
    pub blocking: bool,
}

impl Problem {
    pub(super) fn new(rule: &NimbusRule, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            intent: rule.id.clone(),
            reason,
            message: message.into(),
            blocking: true,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Translation {
    pub objects: Vec<Generated>,
    pub problems: Vec<Problem>,
}
