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
    /// When an object of the kind acts: what replacing one kind by another waits for.
    pub acts: Acts,
}

/// When a native object starts to act once written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Acts {
    /// As soon as it is stored (what the API server and its built-in controllers read).
    OnWrite,
    /// Once Kyverno says it is ready (its webhooks configured for it): a legacy policy's
    /// `Ready` condition, a CEL policy's `conditionStatus.ready`.
    WhenKyvernoReady,
    /// Once kube-apiserver has loaded it (its admission policies): no status says when, so an
    /// engine taking over keeps the other's objects a while (see [`super::HANDOVER`]).
    AfterLoad,
}

impl Acts {
    /// Whether an object whose `status` is this acts.
    pub fn judge(self, status: Option<&serde_json::Value>) -> bool {
        match self {
            Acts::OnWrite | Acts::AfterLoad => true,
            Acts::WhenKyvernoReady => status.is_some_and(|status| {
                status.pointer("/conditionStatus/ready") == Some(&true.into())
                    || status
                        .get("conditions")
                        .and_then(serde_json::Value::as_array)
                        .is_some_and(|conditions| {
                            conditions
                                .iter()
                                .any(|c| c["type"] == "Ready" && c["status"] == "True")
                        })
            }),
        }
    }
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
    acts: Acts::OnWrite,
};
/// network-policy-api's ClusterNetworkPolicy, as its standard channel's CRD serves it.
pub const CLUSTER_NETWORK_POLICY: NativeKind = NativeKind {
    group: "policy.networking.k8s.io",
    version: "v1alpha2",
    kind: "ClusterNetworkPolicy",
    plural: "clusternetworkpolicies",
    namespaced: false,
    crd: Some("clusternetworkpolicies.policy.networking.k8s.io"),
    entry: "ClusterNetworkPolicy",
    listed: true,
    acts: Acts::OnWrite,
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
    acts: Acts::OnWrite,
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
    acts: Acts::WhenKyvernoReady,
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
    acts: Acts::WhenKyvernoReady,
};
/// Kyverno's exceptions to its legacy policies: a SecurityIntentException in force, as Kyverno
/// honours it (it must run with `--enablePolicyException` and accept exceptions in the
/// excepted workloads' namespace, `--exceptionNamespace`). No status says when Kyverno has
/// loaded one.
pub const KYVERNO_POLICY_EXCEPTION: NativeKind = NativeKind {
    group: "kyverno.io",
    version: "v2",
    kind: "PolicyException",
    plural: "policyexceptions",
    namespaced: true,
    crd: Some("policyexceptions.kyverno.io"),
    entry: "KyvernoPolicyException",
    listed: false,
    acts: Acts::AfterLoad,
};
/// Kyverno's exceptions to its CEL policies, as [`KYVERNO_POLICY_EXCEPTION`] to the legacy ones.
pub const KYVERNO_CEL_POLICY_EXCEPTION: NativeKind = NativeKind {
    group: "policies.kyverno.io",
    version: "v1",
    kind: "PolicyException",
    plural: "policyexceptions",
    namespaced: true,
    crd: Some("policyexceptions.policies.kyverno.io"),
    entry: "KyvernoCelPolicyException",
    listed: false,
    acts: Acts::AfterLoad,
};
/// The kinds engines honour SecurityIntentExceptions with, beside the policies they write.
pub const EXCEPTION_KINDS: &[&NativeKind] =
    &[&KYVERNO_POLICY_EXCEPTION, &KYVERNO_CEL_POLICY_EXCEPTION];
/// Kyverno's CEL policy kinds (`policies.kyverno.io/v1`, served since Kyverno 1.17), which
/// replace `Policy` and `ClusterPolicy`: Kyverno 1.20 refuses to create those, 1.21 removes them.
const fn kyverno_cel(
    kind: &'static str,
    plural: &'static str,
    crd: &'static str,
    namespaced: bool,
    entry: &'static str,
) -> NativeKind {
    NativeKind {
        group: "policies.kyverno.io",
        version: "v1",
        kind,
        plural,
        namespaced,
        crd: Some(crd),
        entry,
        listed: true,
        acts: Acts::WhenKyvernoReady,
    }
}
pub const KYVERNO_NAMESPACED_VALIDATING_POLICY: NativeKind = kyverno_cel(
    "NamespacedValidatingPolicy",
    "namespacedvalidatingpolicies",
    "namespacedvalidatingpolicies.policies.kyverno.io",
    true,
    "KyvernoNamespacedValidatingPolicy",
);
pub const KYVERNO_VALIDATING_POLICY: NativeKind = kyverno_cel(
    "ValidatingPolicy",
    "validatingpolicies",
    "validatingpolicies.policies.kyverno.io",
    false,
    "KyvernoValidatingPolicy",
);
pub const KYVERNO_NAMESPACED_MUTATING_POLICY: NativeKind = kyverno_cel(
    "NamespacedMutatingPolicy",
    "namespacedmutatingpolicies",
    "namespacedmutatingpolicies.policies.kyverno.io",
    true,
    "KyvernoNamespacedMutatingPolicy",
);
pub const KYVERNO_MUTATING_POLICY: NativeKind = kyverno_cel(
    "MutatingPolicy",
    "mutatingpolicies",
    "mutatingpolicies.policies.kyverno.io",
    false,
    "KyvernoMutatingPolicy",
);
/// virtualPatch's generators in the CEL kinds. Optional to the Kyverno engine (see
/// [`super::EngineSpec::optional_kinds`]): a Kyverno serving the other CEL kinds without it
/// still enforces escapeToHost and cocoWorkload in them.
pub const KYVERNO_NAMESPACED_GENERATING_POLICY: NativeKind = kyverno_cel(
    "NamespacedGeneratingPolicy",
    "namespacedgeneratingpolicies",
    "namespacedgeneratingpolicies.policies.kyverno.io",
    true,
    "KyvernoNamespacedGeneratingPolicy",
);
pub const CRON_JOB: NativeKind = NativeKind {
    group: "batch",
    version: "v1",
    kind: "CronJob",
    plural: "cronjobs",
    namespaced: true,
    crd: None,
    entry: "CronJob",
    listed: true,
    acts: Acts::OnWrite,
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
    acts: Acts::OnWrite,
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
    acts: Acts::OnWrite,
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
    acts: Acts::OnWrite,
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
    acts: Acts::AfterLoad,
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
    acts: Acts::AfterLoad,
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
    acts: Acts::AfterLoad,
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
    acts: Acts::AfterLoad,
};
