use crate::{Condition, NamespaceSelector, NodeSelector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Most `spec.cel` expressions a binding may carry (enforced by the CRD schema).
pub const MAX_CEL_EXPRESSIONS: usize = 16;
/// Longest `spec.cel` expression, in characters (enforced by the CRD schema; the operator's
/// parser applies the same bound, in bytes, to objects that predate the schema).
pub const MAX_CEL_LENGTH: usize = 1024;

/// Annotation on a binding listing the sensitive intent IDs (comma-separated, e.g.
/// `namespaceSandbox,assessTLS`) its author accepts. Without it a sensitive intent is not
/// enforced, so whoever creates a SecurityIntent a binding refers to cannot make the binding
/// grant roles or run scanners its author never meant to.
pub const ALLOW_SENSITIVE_ANNOTATION: &str = "intent.security.nimbus.com/allow-sensitive";

/// The label that puts a binding, or a namespace, in shadow mode: with the value
/// [`MODE_SHADOW`], every intent the binding binds (in that namespace) is treated as `Audit`,
/// so nothing is enforced; removing the label promotes it to enforcement. A label, so that
/// `kubectl get sib,csib,ns -l intent.security.nimbus.com/mode=shadow` lists what is shadowed,
/// and Nimbus manifests stay valid as they are.
pub const MODE_LABEL: &str = "intent.security.nimbus.com/mode";
/// The value of [`MODE_LABEL`] for shadow mode.
pub const MODE_SHADOW: &str = "shadow";

/// Annotation by which a ClusterSecurityIntentBinding lets a namespace's [`MODE_LABEL`] shadow
/// it there, with the value [`FOLLOW_NAMESPACE_MODE_YES`]. Without it a cluster binding ignores
/// namespace labels: whoever may create or label a namespace must not weaken what a cluster
/// administrator binds. A namespace label always shadows the namespace's own
/// SecurityIntentBindings (its team's). Ours, not Nimbus's: the binding's schema is unchanged.
pub const FOLLOW_NAMESPACE_MODE_ANNOTATION: &str =
    "intent.security.nimbus.com/follow-namespace-mode";
/// The value of [`FOLLOW_NAMESPACE_MODE_ANNOTATION`] that opts in.
pub const FOLLOW_NAMESPACE_MODE_YES: &str = "true";

/// `status.mode` of a binding: what it enforces.
pub mod mode {
    /// Its intents are enforced as their actions say.
    pub const ENFORCE: &str = "Enforce";
    /// In shadow mode (the binding, or its namespace, is labelled): nothing is enforced.
    pub const SHADOW: &str = "Shadow";
    /// A cluster binding that follows namespace labels (see
    /// [`FOLLOW_NAMESPACE_MODE_ANNOTATION`]) some of whose selected namespaces are in shadow
    /// mode.
    pub const MIXED: &str = "Mixed";
}

/// A reference to a cluster-scoped SecurityIntent by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
pub struct MatchIntent {
    /// Name of the SecurityIntent.
    #[x_kube(validation = Rule::new("self != ''").message("intent name must not be empty"))]
    pub name: String,
}

/// Which pods of a namespace a binding applies to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadScope {
    /// Pods whose labels match. An absent or empty selector selects every pod in scope, as in
    /// Kubernetes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::selector::nullable_label_selector")]
    pub workload_selector: Option<LabelSelector>,
}

/// Binds intents to workloads in the binding's namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "intent.security.nimbus.com",
    version = "v1alpha1",
    kind = "SecurityIntentBinding",
    plural = "securityintentbindings",
    shortname = "sib",
    namespaced,
    // Cluster bindings name their per-namespace policies `nimbus-ctlr-gen-<binding>`; a binding
    // of that name would take the name first and opt its namespace out of the cluster policy.
    validation = Rule::new("!self.metadata.name.startsWith('nimbus-ctlr-gen-')").message("names starting with nimbus-ctlr-gen- are reserved for the policies of ClusterSecurityIntentBindings"),
    status = "SecurityIntentBindingStatus",
    // Open Cluster Management's policy framework delivers it as a policy template (the label
    // on the CRD is what it checks; see docs/src/fleet.md).
    label("policy.open-cluster-management.io/policy-type", "template"),
    doc = "SecurityIntentBinding is the Schema for the securityintentbindings API",
    printcolumn(name = "Status", type_ = "string", json_path = ".status.status"),
    // Whether it is in force (`Ready`), beside Nimbus's `Status`, which only says `Created`.
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Intents",
        type_ = "integer",
        json_path = ".status.numberOfBoundIntents"
    ),
    printcolumn(
        name = "NimbusPolicy",
        type_ = "string",
        json_path = ".status.nimbusPolicy"
    ),
    printcolumn(name = "Mode", type_ = "string", json_path = ".status.mode")
)]
pub struct SecurityIntentBindingSpec {
    /// The SecurityIntents to enforce, by name; at least one.
    #[schemars(length(min = 1))]
    pub intents: Vec<MatchIntent>,
    /// Which pods of the binding's namespace it applies to; empty (or `null`) selects every pod.
    // Nullable: server-side apply stores an object whose last owned field was removed as `null`.
    #[serde(deserialize_with = "crate::null_as_default")]
    #[schemars(extend("nullable" = true))]
    pub selector: WorkloadScope,
    /// Label conditions written in a subset of CEL over `labels`; compiled into label-selector
    /// requirements and ANDed with `selector.workloadSelector`.
    // Bounded at admission: the operator parses every expression, and unbounded input is a
    // cheap way to exhaust its stack or memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_CEL_EXPRESSIONS), inner(length(max = MAX_CEL_LENGTH)))]
    pub cel: Option<Vec<String>>,
}

/// What the operator made of a SecurityIntentBinding.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityIntentBindingStatus {
    /// `Created` once processed, `ValidationFail` when the binding cannot be compiled (as Nimbus
    /// reports it); see `conditions` for whether it is in force.
    pub status: String,
    /// When Nimbus last wrote this status; kept for compatibility, not written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    /// How many of the referenced intents exist and were bound.
    pub number_of_bound_intents: i32,
    /// The names of the bound intents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_intents: Option<Vec<String>>,
    /// The name of the NimbusPolicy generated for this binding (empty when none).
    pub nimbus_policy: String,
    /// `Enforce`, or `Shadow` when the binding or its namespace carries the shadow label (see
    /// [`MODE_LABEL`]): then nothing is enforced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// What enforcing the intents it binds in audit or shadow mode would block, summed over
    /// the workloads it selects; absent when it audits nothing. Written by the posture
    /// computation (field manager `nimbus-preview`); every connection is in the posture API's
    /// WorkloadPostures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<BindingPreview>,
    /// Who last wrote each SecurityIntent it binds, and when: whoever may write
    /// SecurityIntents decides what the binding enforces, so a change is reported here and by
    /// an `IntentChanged` Event on the binding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intent_writers: Vec<IntentWriter>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The latest observations: `Ready` says whether the current generation is in force, and
    /// if not, why (`reason`, `message`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Where a cluster binding applies: namespaces, and workloads within them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSelector {
    /// Node labels; accepted for compatibility with Nimbus, no engine acts on them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<NodeSelector>,
    /// Namespaces: `matchNames` (`["*"]` for all), or `matchNames: ["*"]` with `excludeNames`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(
        validation = Rule::new("has(self.matchNames) || has(self.excludeNames)").message("nsSelector needs matchNames or excludeNames"),
        validation = Rule::new("!has(self.matchNames) || !self.matchNames.exists(n, n == '*') || self.matchNames.size() == 1").message("'*' must be the only entry of matchNames"),
        validation = Rule::new("!has(self.matchNames) || !has(self.excludeNames) || self.matchNames == ['*']").message("excludeNames can only be combined with matchNames: ['*']"),
    )]
    pub ns_selector: Option<NamespaceSelector>,
    /// Pods within the selected namespaces; absent or empty selects every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::selector::nullable_label_selector")]
    pub workload_selector: Option<LabelSelector>,
}

/// Binds intents to workloads across namespaces.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "intent.security.nimbus.com",
    version = "v1alpha1",
    kind = "ClusterSecurityIntentBinding",
    plural = "clustersecurityintentbindings",
    shortname = "csib",
    status = "ClusterSecurityIntentBindingStatus",
    // Delivered as an Open Cluster Management policy template, as SecurityIntentBinding is.
    label("policy.open-cluster-management.io/policy-type", "template"),
    doc = "ClusterSecurityIntentBinding is the Schema for the clustersecurityintentbindings API",
    printcolumn(name = "Status", type_ = "string", json_path = ".status.status"),
    // Whether it is in force (`Ready`), beside Nimbus's `Status`, which only says `Created`.
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Intents",
        type_ = "integer",
        json_path = ".status.numberOfBoundIntents"
    ),
    printcolumn(
        name = "NimbusPolicies",
        type_ = "integer",
        json_path = ".status.numberOfNimbusPolicies"
    ),
    printcolumn(
        name = "ClusterNimbusPolicy",
        type_ = "string",
        json_path = ".status.clusterNimbusPolicy"
    ),
    printcolumn(name = "Mode", type_ = "string", json_path = ".status.mode")
)]
#[x_kube(validation = Rule::new("has(self.selector) && has(self.selector.nsSelector)").message("selector.nsSelector is required"))]
pub struct ClusterSecurityIntentBindingSpec {
    /// The SecurityIntents to enforce, by name; at least one.
    #[schemars(length(min = 1))]
    pub intents: Vec<MatchIntent>,
    /// Where the intents apply: `nsSelector` (required) picks namespaces, `workloadSelector`
    /// pods within them, `nodeSelector` nodes for node-level intents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ClusterSelector>,
    /// Accepted for compatibility with Nimbus, which ignores it on cluster bindings too; use
    /// `selector.workloadSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_CEL_EXPRESSIONS), inner(length(max = MAX_CEL_LENGTH)))]
    pub cel: Option<Vec<String>>,
}

/// What the operator made of a ClusterSecurityIntentBinding.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSecurityIntentBindingStatus {
    /// `Created` once processed, `ValidationFail` when the binding cannot be compiled (as Nimbus
    /// reports it); see `conditions` for whether it is in force.
    pub status: String,
    /// When Nimbus last wrote this status; kept for compatibility, not written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    /// How many of the referenced intents exist and were bound.
    pub number_of_bound_intents: i32,
    /// The names of the bound intents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_intents: Option<Vec<String>>,
    /// The name of the ClusterNimbusPolicy generated for this binding (empty when none).
    pub cluster_nimbus_policy: String,
    /// How many namespaces have this binding's NimbusPolicy in force.
    pub number_of_nimbus_policies: i32,
    /// The namespaces that have this binding's NimbusPolicy in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nimbus_policy_namespaces: Option<Vec<String>>,
    /// `Enforce`; `Shadow` when the binding carries the shadow label (see [`MODE_LABEL`]):
    /// nothing is enforced; `Mixed` when some of its namespaces do and the binding is annotated
    /// `intent.security.nimbus.com/follow-namespace-mode: "true"` (without it namespace labels
    /// do not shadow a cluster binding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// What enforcing the intents it binds in audit or shadow mode would block, summed over
    /// the workloads it selects; absent when it audits nothing. Written by the posture
    /// computation (field manager `nimbus-preview`); every connection is in the posture API's
    /// WorkloadPostures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<BindingPreview>,
    /// Who last wrote each SecurityIntent it binds, and when: whoever may write
    /// SecurityIntents decides what the binding enforces, so a change is reported here and by
    /// an `IntentChanged` Event on the binding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intent_writers: Vec<IntentWriter>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The latest observations: `Ready` says whether the current generation is in force, and
    /// if not, why (`reason`, `message`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Who last wrote a SecurityIntent a binding binds, and when.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct IntentWriter {
    /// The SecurityIntent's name.
    pub name: String,
    /// Its `metadata.generation`: a change of its spec changes it.
    pub generation: i64,
    /// The user who last created or updated it, from its
    /// `intent.security.nimbus.com/last-written-by` annotation; absent when unknown (the
    /// `nimbus-intent-author` admission policy is not installed or not served).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<String>,
    /// When it was last created or updated (its latest `managedFields` entry outside its
    /// status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_at: Option<Time>,
}

/// What enforcing a binding's audited and shadowed intents would block.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingPreview {
    /// Workloads it selects that would lose a connection.
    pub workloads: u32,
    /// Connections through Services of the cluster that are allowed now and would be denied.
    pub connections: u32,
    /// Workloads it selects whose resources break a validate rule, by the engine's own reports
    /// (Kyverno's background scan): enforcing would refuse their next pods or rollouts.
    #[serde(default)]
    pub refused: u32,
    /// The first connections and refusals, in order, e.g. `Deployment shop/web: Egress to
    /// Service shop/db 5432/TCP` or `Pod shop/web-1: refused by Policy shop/web-escapetohost
    /// rule pod-security`; at most 5.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
    /// What cannot be previewed, e.g. `DecidedAtRunTime` (KubeArmor).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_previewed: Vec<String>,
}
