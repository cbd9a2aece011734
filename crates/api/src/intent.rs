use crate::{Condition, Params};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Annotation on a SecurityIntent naming the user who last created or updated it, as the API
/// server authenticated them. The `nimbus-intent-author` MutatingAdmissionPolicy sets it on
/// every write, overwriting whatever the request said; absent, the author is unknown (the
/// policy is not installed, or not served: it needs Kubernetes 1.36).
pub const LAST_WRITTEN_BY_ANNOTATION: &str = "intent.security.nimbus.com/last-written-by";

/// What a user wants secured, cluster-wide and independent of any workload.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "intent.security.nimbus.com",
    version = "v1alpha1",
    kind = "SecurityIntent",
    plural = "securityintents",
    shortname = "si",
    status = "SecurityIntentStatus",
    // Delivered as an Open Cluster Management policy template beside the bindings that bind it.
    label("policy.open-cluster-management.io/policy-type", "template"),
    doc = "SecurityIntent is the Schema for the securityintents API",
    printcolumn(name = "ID", type_ = "string", json_path = ".spec.intent.id"),
    printcolumn(name = "Action", type_ = "string", json_path = ".spec.intent.action"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.status"),
    // Whether the catalog knows it and its parameters (`Ready`), beside Nimbus's `Status`.
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct SecurityIntentSpec {
    /// What to secure: an intent of the catalog, how to enforce it, and its parameters.
    pub intent: Intent,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Intent {
    /// Intent ID from the catalog (e.g. `dnsManipulation`); translated by every engine that
    /// implements it.
    #[schemars(regex(pattern = r"^[a-zA-Z0-9]+$"))]
    pub id: String,
    /// Human-readable purpose; copied into the generated policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// How the intent is enforced: `Block` prevents, `Audit` only reports.
    #[schemars(extend("enum" = ["Block", "Audit"]))]
    pub action: String,
    /// Potential impact of a violation. Informational.
    #[serde(default = "default_severity")]
    pub severity: String,
    /// Free-form labels for grouping intents. Informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// Intent-specific knobs, e.g. `psaLevel: ["restricted"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Params>,
}

fn default_severity() -> String {
    "Low".to_owned()
}

/// What the operator observed of a SecurityIntent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityIntentStatus {
    /// The intent ID, as in `spec.intent.id`.
    pub id: String,
    /// The action, as in `spec.intent.action`.
    pub action: String,
    /// `Created` once the operator has seen the intent (as Nimbus reports it).
    pub status: String,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The latest observations: `Ready` says whether the current generation is in force, and
    /// if not, why (`reason`, `message`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
