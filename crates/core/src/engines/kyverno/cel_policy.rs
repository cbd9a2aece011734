//! The CEL kinds' policies the Kyverno engine writes, of its namespaced or cluster-wide kind.

use super::legacy::DESCRIPTION;
use crate::engines::{Engine, NativeKind, PolicyInput, Rule, metadata, native_name, object};
use crate::names::MAX_NAME_LEN;
use serde_json::{Value, json};

/// A CEL policy named `<policy>-<suffix>`: of the namespaced kind for a NimbusPolicy, of the
/// cluster-wide one for a ClusterNimbusPolicy.
pub(super) fn cel_policy(
    policy: &PolicyInput,
    rule: &Rule,
    suffix: &str,
    [namespaced, cluster]: [&'static NativeKind; 2],
    spec: Value,
) -> (&'static NativeKind, kube::core::DynamicObject) {
    let kind = if policy.namespace.is_some() {
        namespaced
    } else {
        cluster
    };
    let description = rule.spec.description.clone().unwrap_or_default();
    let meta = metadata(
        policy,
        Engine::Kyverno,
        native_name(policy, suffix, MAX_NAME_LEN),
        policy.namespace.clone(),
        &[(DESCRIPTION, &description)],
    );
    object(kind, meta, json!({ "spec": spec }))
}
