//! The `intent.security.nimbus.com/v1alpha1` API: the five Nimbus kinds as Rust types.
//!
//! The types are wire-compatible with Nimbus: same group, version, kinds, plurals, short names,
//! scopes, spec fields, printer columns and status fields. They are a strict superset: every
//! status also carries `observedGeneration` and standard `conditions`, workload selectors accept
//! `matchExpressions` beside `matchLabels`, and nonsense the original let through is rejected at
//! admission by schema and CEL rules.
//!
//! No controller logic lives here.

// Shape rule (issue #43): no function longer than clippy.toml's `too-many-lines-threshold`.
// Non-test code only: a test reads best as one table or one story, and test builds
// (`cfg(test)`, tests/) do not see this line.
#![cfg_attr(not(test), warn(clippy::too_many_lines))]
// Repeated `printcolumn(type_ = .., priority = ..)` arguments are distinct columns, not
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

mod binding;
mod exception;
mod intent;
mod policy;
pub mod posture;
mod selector;
mod status;

pub use binding::{
    ALLOW_SENSITIVE_ANNOTATION, BindingPreview, ClusterSecurityIntentBinding,
    ClusterSecurityIntentBindingSpec, ClusterSecurityIntentBindingStatus, ClusterSelector,
    FOLLOW_NAMESPACE_MODE_ANNOTATION, FOLLOW_NAMESPACE_MODE_YES, IntentWriter, MAX_CEL_EXPRESSIONS,
    MAX_CEL_LENGTH, MODE_LABEL, MODE_SHADOW, MatchIntent, SecurityIntentBinding,
    SecurityIntentBindingSpec, SecurityIntentBindingStatus, WorkloadScope, mode,
};
pub use exception::{
    APPROVED_BY_ANNOTATION, ClusterSecurityIntentException, ClusterSecurityIntentExceptionSpec,
    EXCEPTION_GROUP, ExceptedBinding, ExceptedWorkload, PodSecurityControl,
    REQUESTED_BY_ANNOTATION, SecurityIntentException, SecurityIntentExceptionSpec,
    SecurityIntentExceptionStatus, WorkloadKind,
};
pub use intent::{
    Intent, LAST_WRITTEN_BY_ANNOTATION, SecurityIntent, SecurityIntentSpec, SecurityIntentStatus,
};
pub use policy::{
    ClusterNimbusPolicy, ClusterNimbusPolicySpec, NimbusPolicy, NimbusPolicySpec,
    NimbusPolicyStatus, NimbusRule, Rule,
};
pub use selector::{NamespaceSelector, NodeSelector, WORKLOAD_ALL_NAMESPACES};
pub use status::{Condition, STATUS_CREATED, STATUS_VALIDATION_FAIL, condition};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// API group of every Nimbus kind.
pub const GROUP: &str = "intent.security.nimbus.com";
/// The only served and stored version.
pub const VERSION: &str = "v1alpha1";

/// Intent parameters: each key maps to a list of values, as in Nimbus.
pub type Params = std::collections::BTreeMap<String, Vec<String>>;

/// Reads `null` as the type's default. Server-side apply stores an object whose last owned
/// field was removed as `null`; the schemas accept it for the fields that use this.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    use serde::Deserialize;
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Every CRD of the API, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        SecurityIntent::crd(),
        SecurityIntentBinding::crd(),
        ClusterSecurityIntentBinding::crd(),
        NimbusPolicy::crd(),
        ClusterNimbusPolicy::crd(),
        SecurityIntentException::crd(),
        ClusterSecurityIntentException::crd(),
    ]
}

/// All CRDs as multi-document YAML: what `nimbus crds` prints and `config/crd/` holds.
pub fn crds_yaml() -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(&crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    /// `kubectl explain` shows every field with a description.
    #[test]
    fn every_field_is_described() {
        fn undescribed(path: &str, schema: &Value, named: bool, out: &mut Vec<String>) {
            if named && schema.get("description").is_none() {
                out.push(path.to_owned());
            }
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    undescribed(&format!("{path}.{name}"), property, true, out);
                }
            }
            // Items and map values are described by the field holding them.
            for nested in ["items", "additionalProperties"] {
                if let Some(inner) = schema.get(nested) {
                    undescribed(&format!("{path}[]"), inner, false, out);
                }
            }
        }
        let mut missing = Vec::new();
        for crd in super::crds() {
            let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema");
            undescribed(
                &crd.spec.names.kind,
                &schema["openAPIV3Schema"],
                false,
                &mut missing,
            );
        }
        assert!(
            missing.is_empty(),
            "fields without a description: {missing:#?}"
        );
    }
}
