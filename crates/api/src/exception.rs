//! `exceptions.security.nimbus.com/v1alpha1`: ours, not Nimbus's. A SecurityIntentException
//! lets workloads of its namespace out of some intents of one binding, for a reason and until a
//! time; a ClusterSecurityIntentException lets workloads of several namespaces, named, out of a
//! cluster binding's. Writing one is a permission of its own, apart from writing bindings:
//! whoever may bind intents in a namespace must not be able to undo a cluster binding there.

use crate::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of SecurityIntentExceptions.
pub const EXCEPTION_GROUP: &str = "exceptions.security.nimbus.com";
/// Who asked for an exception: the user who created it, as the API server authenticated them,
/// stamped by the `nimbus-exception-requester` MutatingAdmissionPolicy and kept on every
/// update.
pub const REQUESTED_BY_ANNOTATION: &str = "exceptions.security.nimbus.com/requested-by";
/// Who approved an exception: set by the approver, in their own name, and refused by the
/// `nimbus-exception-approval` ValidatingAdmissionPolicy unless they may `approve` it and did
/// not ask for it.
pub const APPROVED_BY_ANNOTATION: &str = "exceptions.security.nimbus.com/approved-by";

/// The binding an exception is taken from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
pub struct ExceptedBinding {
    /// `SecurityIntentBinding` (in the exception's namespace) or `ClusterSecurityIntentBinding`.
    #[x_kube(validation = Rule::new("self == 'SecurityIntentBinding' || self == 'ClusterSecurityIntentBinding'").message("kind must be SecurityIntentBinding or ClusterSecurityIntentBinding"))]
    pub kind: String,
    /// Its name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// The kinds of workload an exception names: the controllers the posture groups pods under,
/// and a bare pod.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
    /// A pod no controller owns.
    Pod,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 6] = [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
        WorkloadKind::Job,
        WorkloadKind::CronJob,
        WorkloadKind::Pod,
    ];

    /// Its `kind`, as objects and owner references spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::Job => "Job",
            WorkloadKind::CronJob => "CronJob",
            WorkloadKind::Pod => "Pod",
        }
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A workload an exception names: a workload controller of the exception's namespaces (and
/// the pods it makes), or a bare pod.
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
pub struct ExceptedWorkload {
    /// `Deployment`, `StatefulSet`, `DaemonSet`, `Job`, `CronJob` or `Pod` (a pod no
    /// controller owns).
    pub kind: WorkloadKind,
    /// Its name.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// Lets workloads of its namespace out of intents of one binding until `expiresAt`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "exceptions.security.nimbus.com",
    version = "v1alpha1",
    kind = "SecurityIntentException",
    plural = "securityintentexceptions",
    shortname = "siex",
    namespaced,
    status = "SecurityIntentExceptionStatus",
    doc = "SecurityIntentException lets the workloads it selects out of some intents of one binding, for a reason, until it expires",
    printcolumn(name = "Binding", type_ = "string", json_path = ".spec.binding.name"),
    printcolumn(name = "Expires", type_ = "date", json_path = ".spec.expiresAt"),
    printcolumn(
        name = "Active",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Active\")].status"
    ),
    printcolumn(
        name = "Requested-By",
        type_ = "string",
        json_path = ".status.requestedBy"
    ),
    printcolumn(
        name = "Approved-By",
        type_ = "string",
        json_path = ".status.approvedBy"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".spec.reason",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SecurityIntentExceptionSpec {
    /// The binding whose intents it lets the workloads out of.
    pub binding: ExceptedBinding,
    /// Names of SecurityIntents the binding binds; at least one. The workloads stay held to
    /// the binding's other intents.
    #[schemars(length(min = 1))]
    pub intents: Vec<String>,
    /// Which workloads of the exception's namespace, by their own labels (a pod's, or a
    /// workload controller's); empty selects every workload of the namespace.
    #[serde(default)]
    pub selector: LabelSelector,
    /// Which workloads, by kind and name, of those `selector` selects; empty (the default)
    /// names every one it selects. A workload is let out when the selector selects it and,
    /// where this names workloads, it is one of them. Engines that cannot tell the named
    /// workloads from others with the same labels (NetworkPolicy, ClusterNetworkPolicy,
    /// KubeArmor, Kyverno's legacy kinds) keep enforcing on them, and say so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub workloads: Vec<ExceptedWorkload>,
    /// Why, for whoever reviews it.
    #[schemars(length(min = 1))]
    pub reason: String,
    /// When it ends: from then on every engine enforces the intents on the workloads again.
    /// At most the operator's `--exception-max-duration` after the exception's creation.
    pub expires_at: Time,
    /// Pod Security Standards controls, by the standard's names: when set, the workloads are let
    /// out of only these controls of escapeToHost and stay held to every other control of its
    /// level. Unset: out of the whole intents. Only for escapeToHost: an exception that sets it
    /// and names another bound intent is not honoured (`ControlsNotApplicable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), extend("x-kubernetes-list-type" = "set"))]
    pub pod_security_controls: Option<Vec<PodSecurityControl>>,
}

/// A control of the Pod Security Standards
/// (<https://kubernetes.io/docs/concepts/security/pod-security-standards/>), named as the
/// standard and Kyverno's `PolicyException` (`podSecurity[].controlName`) name it: Kyverno
/// 1.19's list, which maps each onto Kubernetes' pod-security-admission checks. The baseline
/// control it leaves out, Host Probes / Lifecycle Hooks, cannot be excepted.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum PodSecurityControl {
    // Plain comments, not doc comments: with those, schemars writes a `oneOf` of constants,
    // which is no structural schema; without, a string `enum`. In parentheses, the
    // pod-security-admission checks Kyverno maps each onto.
    // Baseline: `windowsOptions.hostProcess` (windowsHostProcess).
    #[serde(rename = "HostProcess")]
    HostProcess,
    // Baseline: hostNetwork, hostPID, hostIPC (hostNamespaces).
    #[serde(rename = "Host Namespaces")]
    HostNamespaces,
    // Baseline: `securityContext.privileged` (privileged).
    #[serde(rename = "Privileged Containers")]
    PrivilegedContainers,
    // Baseline and restricted: capabilities (capabilities_baseline, capabilities_restricted).
    #[serde(rename = "Capabilities")]
    Capabilities,
    // Baseline: hostPath volumes (hostPathVolumes).
    #[serde(rename = "HostPath Volumes")]
    HostPathVolumes,
    // Baseline: `ports[*].hostPort` (hostPorts).
    #[serde(rename = "Host Ports")]
    HostPorts,
    // Baseline: AppArmor profiles (appArmorProfile).
    #[serde(rename = "AppArmor")]
    AppArmor,
    // Baseline: seLinuxOptions (seLinuxOptions).
    #[serde(rename = "SELinux")]
    SeLinux,
    // Baseline and restricted: procMount (procMount).
    #[serde(rename = "/proc Mount Type")]
    ProcMountType,
    // Baseline and restricted: seccompProfile (seccompProfile_baseline,
    // seccompProfile_restricted).
    #[serde(rename = "Seccomp")]
    Seccomp,
    // Baseline: sysctls (sysctls).
    #[serde(rename = "Sysctls")]
    Sysctls,
    // Restricted: volume types (restrictedVolumes).
    #[serde(rename = "Volume Types")]
    VolumeTypes,
    // Restricted: allowPrivilegeEscalation (allowPrivilegeEscalation).
    #[serde(rename = "Privilege Escalation")]
    PrivilegeEscalation,
    // Restricted: runAsNonRoot (runAsNonRoot).
    #[serde(rename = "Running as Non-root")]
    RunningAsNonRoot,
    // Restricted: runAsUser (runAsUser).
    #[serde(rename = "Running as Non-root user")]
    RunningAsNonRootUser,
}

impl PodSecurityControl {
    /// Every control, in the order Kyverno's CRD lists them.
    pub const ALL: [Self; 15] = [
        Self::HostProcess,
        Self::HostNamespaces,
        Self::PrivilegedContainers,
        Self::Capabilities,
        Self::HostPathVolumes,
        Self::HostPorts,
        Self::AppArmor,
        Self::SeLinux,
        Self::ProcMountType,
        Self::Seccomp,
        Self::Sysctls,
        Self::VolumeTypes,
        Self::PrivilegeEscalation,
        Self::RunningAsNonRoot,
        Self::RunningAsNonRootUser,
    ];

    /// Its name, as the standard, Kyverno and the exception's field spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::HostProcess => "HostProcess",
            Self::HostNamespaces => "Host Namespaces",
            Self::PrivilegedContainers => "Privileged Containers",
            Self::Capabilities => "Capabilities",
            Self::HostPathVolumes => "HostPath Volumes",
            Self::HostPorts => "Host Ports",
            Self::AppArmor => "AppArmor",
            Self::SeLinux => "SELinux",
            Self::ProcMountType => "/proc Mount Type",
            Self::Seccomp => "Seccomp",
            Self::Sysctls => "Sysctls",
            Self::VolumeTypes => "Volume Types",
            Self::PrivilegeEscalation => "Privilege Escalation",
            Self::RunningAsNonRoot => "Running as Non-root",
            Self::RunningAsNonRootUser => "Running as Non-root user",
        }
    }
}

impl std::fmt::Display for PodSecurityControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the operator made of a SecurityIntentException.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityIntentExceptionStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Active` says whether the engines honour it now, and if not, why (`Expired`,
    /// `TooLong`, `BindingNotFound`, `IntentNotBound`, `ControlsNotApplicable`,
    /// `NotApproved`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Who asked for it: its `exceptions.security.nimbus.com/requested-by` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// Who approved it: its `exceptions.security.nimbus.com/approved-by` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

/// Lets workloads of the namespaces it names out of intents of one cluster binding until
/// `expiresAt`: one exception where a SecurityIntentException per namespace would be needed.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "exceptions.security.nimbus.com",
    version = "v1alpha1",
    kind = "ClusterSecurityIntentException",
    plural = "clustersecurityintentexceptions",
    shortname = "csiex",
    status = "SecurityIntentExceptionStatus",
    doc = "ClusterSecurityIntentException lets the workloads it selects in the namespaces it names out of some intents of one cluster binding, for a reason, until it expires",
    printcolumn(name = "Binding", type_ = "string", json_path = ".spec.binding.name"),
    printcolumn(name = "Namespaces", type_ = "string", json_path = ".spec.namespaces"),
    printcolumn(name = "Expires", type_ = "date", json_path = ".spec.expiresAt"),
    printcolumn(
        name = "Active",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Active\")].status"
    ),
    printcolumn(
        name = "Requested-By",
        type_ = "string",
        json_path = ".status.requestedBy"
    ),
    printcolumn(
        name = "Approved-By",
        type_ = "string",
        json_path = ".status.approvedBy"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".spec.reason",
        priority = 1
    )
)]
#[x_kube(validation = Rule::new("self.binding.kind == 'ClusterSecurityIntentBinding'").message("a ClusterSecurityIntentException lets workloads out of a ClusterSecurityIntentBinding; a SecurityIntentBinding's exceptions are SecurityIntentExceptions in its namespace"))]
#[serde(rename_all = "camelCase")]
pub struct ClusterSecurityIntentExceptionSpec {
    /// The cluster binding whose intents it lets the workloads out of (kind
    /// `ClusterSecurityIntentBinding`).
    pub binding: ExceptedBinding,
    /// Names of SecurityIntents the binding binds; at least one. The workloads stay held to
    /// the binding's other intents.
    #[schemars(length(min = 1))]
    pub intents: Vec<String>,
    /// The namespaces, by name, whose workloads it lets out; at least one. By name and not by
    /// label: whoever may label a namespace must not be able to bring it under an exception.
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub namespaces: Vec<String>,
    /// Which workloads of those namespaces, by their own labels (a pod's, or a workload
    /// controller's); empty selects every workload of the namespaces.
    #[serde(default)]
    pub selector: LabelSelector,
    /// Which workloads, by kind and name, of those `selector` selects; empty (the default)
    /// names every one it selects. A workload is let out when the selector selects it and,
    /// where this names workloads, it is one of them. Engines that cannot tell the named
    /// workloads from others with the same labels (NetworkPolicy, ClusterNetworkPolicy,
    /// KubeArmor, Kyverno's legacy kinds) keep enforcing on them, and say so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub workloads: Vec<ExceptedWorkload>,
    /// Why, for whoever reviews it.
    #[schemars(length(min = 1))]
    pub reason: String,
    /// When it ends: from then on every engine enforces the intents on the workloads again.
    /// At most the operator's `--exception-max-duration` after the exception's creation.
    pub expires_at: Time,
    /// Pod Security Standards controls, by the standard's names: when set, the workloads are let
    /// out of only these controls of escapeToHost and stay held to every other control of its
    /// level. Unset: out of the whole intents. Only for escapeToHost: an exception that sets it
    /// and names another bound intent is not honoured (`ControlsNotApplicable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1), extend("x-kubernetes-list-type" = "set"))]
    pub pod_security_controls: Option<Vec<PodSecurityControl>>,
}
