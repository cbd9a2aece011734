use crate::{Condition, NamespaceSelector, NodeSelector, Params};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One compiled intent: what an engine translates.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct NimbusRule {
    /// The intent ID from the catalog.
    pub id: String,
    /// Rule scope ("Namespaced", "System", "Cluster"). Never set by the operator; kept for
    /// compatibility.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The intent's description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// How to enforce it.
    pub rule: Rule,
}

/// The enforcement of one rule.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct Rule {
    /// `Block` prevents, `Audit` only reports.
    pub action: String,
    /// The intent's parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Params>,
}

/// The engine-neutral policy for one namespace: generated from a binding, consumed by engines
/// (built in, or external adapters through this public contract).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "intent.security.nimbus.com",
    version = "v1alpha1",
    kind = "NimbusPolicy",
    plural = "nimbuspolicies",
    shortname = "np",
    namespaced,
    status = "NimbusPolicyStatus",
    doc = "NimbusPolicy is the Schema for the nimbuspolicies API",
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
        name = "Policies",
        type_ = "integer",
        json_path = ".status.numberOfAdapterPolicies"
    )
)]
pub struct NimbusPolicySpec {
    /// Pods the rules apply to; empty selects every pod in the namespace.
    #[serde(deserialize_with = "crate::null_as_default")]
    #[schemars(extend("nullable" = true))]
    pub selector: LabelSelector,
    /// One rule per bound intent.
    pub rules: Vec<NimbusRule>,
}

/// The engine-neutral policy of a cluster binding.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "intent.security.nimbus.com",
    version = "v1alpha1",
    kind = "ClusterNimbusPolicy",
    plural = "clusternimbuspolicies",
    shortname = "cwnp",
    status = "NimbusPolicyStatus",
    doc = "ClusterNimbusPolicy is the Schema for the clusternimbuspolicies API",
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
        name = "Policies",
        type_ = "integer",
        json_path = ".status.numberOfAdapterPolicies"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNimbusPolicySpec {
    /// Node labels from the binding (no engine acts on them). Always serialized (as `{}` when empty), like
    /// Nimbus.
    #[serde(default, deserialize_with = "crate::null_as_default")]
    #[schemars(extend("nullable" = true))]
    pub node_selector: NodeSelector,
    /// The namespaces of the binding, as in its `selector.nsSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ns_selector: Option<NamespaceSelector>,
    /// The pods of the binding, as in its `selector.workloadSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_selector: Option<LabelSelector>,
    /// One rule per bound intent enforced cluster-wide.
    pub rules: Vec<NimbusRule>,
}

/// Status of a NimbusPolicy or ClusterNimbusPolicy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NimbusPolicyStatus {
    /// `Created` once translated (as Nimbus reports it); see `conditions` for whether every
    /// rule is enforced.
    pub status: String,
    /// When Nimbus last wrote this status; kept for compatibility, not written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    /// How many native policies were generated.
    pub number_of_adapter_policies: i32,
    /// Generated native policies as `Kind/name` (CronJobs as `namespace/CronJob/name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_policies: Option<Vec<String>>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The latest observations: `Ready` says whether every rule is enforced, and if not, why
    /// (`reason`, `message`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
