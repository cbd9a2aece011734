//! Selectors shared by bindings and policies.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
