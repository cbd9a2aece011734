//! The native kinds engines write, and the label that marks what they generated.

use super::Engine;
use kube::core::ApiResource;
use std::collections::BTreeSet;

/// Annotation (and label, so the operator can watch only its own objects) naming the engine
/// that generated an object.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// A kind of native object an engine writes.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NativeKind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    /// The CustomResourceDefinition that must be installed; `None` for built-in kinds.
    pub crd: Option<&'static str>,
    /// How the kind is named in a policy's `status.adapterPolicies` (Nimbus's vocabulary).
    pub entry: &'static str,
    /// Whether objects of the kind are policies listed in status (supporting objects, such as
    /// k8tls address lists, are not).
    pub listed: bool,
}

impl NativeKind {
    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.into(),
            version: self.version.into(),
            api_version: self.api_version(),
            kind: self.kind.into(),
            plural: self.plural.into(),
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.into()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

pub const NETWORK_POLICY: NativeKind = NativeKind {
    group: "networking.k8s.io",
    version: "v1",
    kind: "NetworkPolicy",
    plural: "networkpolicies",
    namespaced: true,
    crd: None,
    entry: "NetworkPolicy",
    listed: true,
};
pub const KUBEARMOR_POLICY: NativeKind = NativeKind {
    group: "security.kubearmor.com",
    version: "v1",
    kind: "KubeArmorPolicy",
    plural: "kubearmorpolicies",
    namespaced: true,
    crd: Some("kubearmorpolicies.security.kubearmor.com"),
    entry: "KubeArmorPolicy",
    listed: true,
};
pub const KYVERNO_POLICY: NativeKind = NativeKind {
    group: "kyverno.io",
    version: "v1",
    kind: "Policy",
    plural: "policies",
    namespaced: true,
    crd: Some("policies.kyverno.io"),
    entry: "KyvernoPolicy",
    listed: true,
};
pub const KYVERNO_CLUSTER_POLICY: NativeKind = NativeKind {
    group: "kyverno.io",
    version: "v1",
    kind: "ClusterPolicy",
    plural: "clusterpolicies",
    namespaced: false,
    crd: Some("clusterpolicies.kyverno.io"),
    entry: "KyvernoClusterPolicy",
    listed: true,
};
pub const CRON_JOB: NativeKind = NativeKind {
    group: "batch",
    version: "v1",
    kind: "CronJob",
    plural: "cronjobs",
    namespaced: true,
    crd: None,
    entry: "CronJob",
    listed: true,
};
pub const CONFIG_MAP: NativeKind = NativeKind {
    group: "",
    version: "v1",
    kind: "ConfigMap",
    plural: "configmaps",
    namespaced: true,
    crd: None,
    entry: "ConfigMap",
    listed: false,
};
pub const ROLE_BINDING: NativeKind = NativeKind {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    kind: "RoleBinding",
    plural: "rolebindings",
    namespaced: true,
    crd: None,
    entry: "RoleBinding",
    listed: true,
};

/// Kyverno's reports of its background scans, one per resource, which the preview of audited
/// Kyverno intents reads (never writes): `--openreportsEnabled` would move them to
/// `openreports.io`, which Kyverno 1.19 does not do by default.
pub const POLICY_REPORT: NativeKind = NativeKind {
    group: "wgpolicyk8s.io",
    version: "v1alpha2",
    kind: "PolicyReport",
    plural: "policyreports",
    namespaced: true,
    crd: Some("policyreports.wgpolicyk8s.io"),
    entry: "PolicyReport",
    listed: false,
};

/// The native kinds `engine` writes.
pub fn kinds(engine: Engine) -> &'static [&'static NativeKind] {
    engine.spec().kinds
}

/// Every native kind of every engine, each once.
pub fn all_kinds() -> Vec<&'static NativeKind> {
    let set: BTreeSet<&'static NativeKind> = Engine::ALL
        .into_iter()
        .flat_map(|e| kinds(e).iter().copied())
        .collect();
    set.into_iter().collect()
}

/// Kubernetes' own CEL admission policies (the `admission` engine): built in, nothing to
/// install. Their bindings are supporting objects, as the policies they bind are listed.
pub const VALIDATING_ADMISSION_POLICY: NativeKind = NativeKind {
    group: "admissionregistration.k8s.io",
    version: "v1",
    kind: "ValidatingAdmissionPolicy",
    plural: "validatingadmissionpolicies",
    namespaced: false,
    crd: None,
    entry: "ValidatingAdmissionPolicy",
    listed: true,
};
pub const VALIDATING_ADMISSION_POLICY_BINDING: NativeKind = NativeKind {
    group: "admissionregistration.k8s.io",
    version: "v1",
    kind: "ValidatingAdmissionPolicyBinding",
    plural: "validatingadmissionpolicybindings",
    namespaced: false,
    crd: None,
    entry: "ValidatingAdmissionPolicyBinding",
    listed: false,
};
/// GA and served by default from Kubernetes 1.36; older API servers do not serve it (the
/// `admission` engine declares it optional, see [`super::EngineSpec::optional_kinds`]).
pub const MUTATING_ADMISSION_POLICY: NativeKind = NativeKind {
    group: "admissionregistration.k8s.io",
    version: "v1",
    kind: "MutatingAdmissionPolicy",
    plural: "mutatingadmissionpolicies",
    namespaced: false,
    crd: None,
    entry: "MutatingAdmissionPolicy",
    listed: true,
};
pub const MUTATING_ADMISSION_POLICY_BINDING: NativeKind = NativeKind {
    group: "admissionregistration.k8s.io",
    version: "v1",
    kind: "MutatingAdmissionPolicyBinding",
    plural: "mutatingadmissionpolicybindings",
    namespaced: false,
    crd: None,
    entry: "MutatingAdmissionPolicyBinding",
    listed: false,
};
