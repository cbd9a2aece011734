//! Kyverno's legacy `Policy` (for a NimbusPolicy) and `ClusterPolicy` (for a
//! ClusterNimbusPolicy), built as Nimbus's Kyverno adapter wrote them: the kyverno engine's
//! translations and virtualPatch's generators both write them. Also how an intent's action
//! maps onto Kyverno, and the annotation describing a policy, which the CEL kinds share.

use crate::engines::{
    Engine, KYVERNO_CLUSTER_POLICY, KYVERNO_POLICY, NativeKind, PolicyInput, Rule, metadata,
    native_name, object,
};
use crate::names::MAX_NAME_LEN;
use serde_json::{Value, json};

/// The annotation carrying the rule's description.
pub(super) const DESCRIPTION: &str = "policies.kyverno.io/description";

/// Spec fields beyond rules and the failure action, as Nimbus set them per policy.
pub(super) enum Extra {
    Background,
    MutateExisting,
    /// The cluster coco policy: Nimbus left `background` unset there.
    Nothing,
    /// Virtual-patch generators.
    GenerateExisting,
}

/// A Kyverno `Policy` (for a NimbusPolicy) or `ClusterPolicy` (for a ClusterNimbusPolicy)
/// named `<policy>-<suffix>` with one rule, as Nimbus's Kyverno adapter wrote them.
pub(super) fn build(
    policy: &PolicyInput,
    rule: &Rule,
    suffix: &str,
    rules: Vec<Value>,
    extra: Extra,
) -> (&'static NativeKind, kube::core::DynamicObject) {
    let kind: &'static NativeKind = if policy.namespace.is_some() {
        &KYVERNO_POLICY
    } else {
        &KYVERNO_CLUSTER_POLICY
    };
    let name = native_name(policy, suffix, MAX_NAME_LEN);
    let description = rule.spec.description.clone().unwrap_or_default();
    let meta = metadata(
        policy,
        Engine::Kyverno,
        name,
        policy.namespace.clone(),
        &[(DESCRIPTION, &description)],
    );
    let mut spec = json!({
        "rules": rules,
        "validationFailureAction": failure_action(&rule.spec.rule.action),
    });
    match extra {
        Extra::Background => spec["background"] = true.into(),
        Extra::MutateExisting => {
            spec["background"] = true.into();
            spec["mutateExistingOnPolicyUpdate"] = true.into();
        }
        Extra::Nothing => {}
        Extra::GenerateExisting => {
            spec["background"] = true.into();
            spec["generateExisting"] = true.into();
        }
    }
    object(kind, meta, json!({ "spec": spec }))
}

/// Nimbus's mapping of an intent action onto Kyverno: `Block` enforces, anything else audits.
pub(super) fn failure_action(action: &str) -> &'static str {
    if action == "Block" {
        "Enforce"
    } else {
        "Audit"
    }
}
