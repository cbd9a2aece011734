//! Selectors shared by bindings and policies.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The schema of an optional label selector whose fields also accept `null`: server-side apply
/// stores a field that a later apply empties (`matchLabels: {}` over an earlier
/// `{app: web}`) as `null`, which a plain schema rejects, so `kubectl apply --server-side`
/// of the emptied selector would fail.
pub(crate) fn nullable_label_selector(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = <Option<LabelSelector>>::json_schema(generator);
    if let Some(properties) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        for field in ["matchLabels", "matchExpressions"] {
            if let Some(property) = properties
                .get_mut(field)
                .and_then(serde_json::Value::as_object_mut)
            {
                property.insert("nullable".into(), true.into());
            }
        }
    }
    schema
}

/// `matchNames` value that selects every namespace (except the protected ones).
pub const WORKLOAD_ALL_NAMESPACES: &str = "*";

/// Which namespaces a cluster binding fans out to.
///
/// Valid shapes: `matchNames: ["*"]` (all), `matchNames: [a, b]` (those), `excludeNames: [a]`
/// (all but those), or `matchNames: ["*"]` together with `excludeNames` (all but those; Nimbus's
/// own example uses it). Protected namespaces (the operator's, k8tls's, `kube-system`, ...) are
/// never selected.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSelector {
    /// Namespaces to select, or `["*"]` for all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_names: Option<Vec<String>>,
    /// Namespaces to leave out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_names: Option<Vec<String>>,
}

/// Node labels. Accepted and carried into the ClusterNimbusPolicy for compatibility; no engine
/// acts on it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelector {
    /// Labels a node must have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
}
