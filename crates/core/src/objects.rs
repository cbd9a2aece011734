//! The NimbusPolicy objects a binding generates, as the operator writes them and the offline
//! CLI prints them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use nimbus_api::{
    ALLOW_SENSITIVE_ANNOTATION, ClusterNimbusPolicy, ClusterNimbusPolicySpec,
    ClusterSecurityIntentBinding, NimbusPolicy, NimbusPolicySpec, NimbusRule,
    SecurityIntentBinding,
};
use std::collections::BTreeMap;

/// A controller ownerReference to the `K` named `name` that blocks the owner's foreground
/// deletion until the dependent is gone, as Nimbus sets it.
pub fn controller_reference<K: Resource<DynamicType = ()>>(
    name: &str,
    uid: &str,
) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// [`controller_reference`] to `owner`. Offline, an owner without a UID gets an empty one.
pub fn controller_owner<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    controller_reference::<K>(&owner.name_any(), &owner.uid().unwrap_or_default())
}

/// Metadata of an object generated from `owner`: its labels, and a controller ownerReference
/// to it so the object is garbage-collected with it.
pub fn owned_meta<K: Resource<DynamicType = ()>>(
    owner: &K,
    name: &str,
    namespace: Option<&str>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(owner.labels().clone()).filter(|l| !l.is_empty()),
        owner_references: Some(vec![controller_owner(owner)]),
        ..Default::default()
    }
}

/// Metadata of a policy generated from the binding `owner` with `rules`: [`owned_meta`], plus
/// the binding's allow-sensitive annotation when a rule is sensitive, so the engines see what
/// the binding's author accepted. It is then always set, empty if the binding has none: the
/// operator's apply path only adds annotations, so an opt-in withdrawn from the binding must
/// overwrite the copy rather than leave it behind.
fn policy_meta<K: Resource<DynamicType = ()>>(
    owner: &K,
    name: &str,
    namespace: Option<&str>,
    rules: &[NimbusRule],
) -> ObjectMeta {
    let mut meta = owned_meta(owner, name, namespace);
    let sensitive = rules
        .iter()
        .any(|r| crate::intents::intent(&r.id).is_some_and(|i| i.sensitive));
    if sensitive {
        let value = owner
            .annotations()
            .get(ALLOW_SENSITIVE_ANNOTATION)
            .cloned()
            .unwrap_or_default();
        meta.annotations = Some(BTreeMap::from([(
            ALLOW_SENSITIVE_ANNOTATION.to_owned(),
            value,
        )]));
    }
    meta
}

/// The NimbusPolicy of a namespaced binding: same name and namespace.
pub fn binding_policy(sib: &SecurityIntentBinding, spec: NimbusPolicySpec) -> NimbusPolicy {
    NimbusPolicy {
        metadata: policy_meta(
            sib,
            &sib.name_any(),
            sib.namespace().as_deref(),
            &spec.rules,
        ),
        spec,
        status: None,
    }
}

/// The ClusterNimbusPolicy of a cluster binding: same name.
pub fn cluster_policy(
    csib: &ClusterSecurityIntentBinding,
    spec: ClusterNimbusPolicySpec,
) -> ClusterNimbusPolicy {
    ClusterNimbusPolicy {
        metadata: policy_meta(csib, &csib.name_any(), None, &spec.rules),
        spec,
        status: None,
    }
}

/// The NimbusPolicy a cluster binding keeps in one selected namespace.
pub fn namespace_policy(
    csib: &ClusterSecurityIntentBinding,
    namespace: &str,
    spec: NimbusPolicySpec,
) -> NimbusPolicy {
    let name = crate::names::cluster_binding_policy_name(&csib.name_any());
    NimbusPolicy {
        metadata: policy_meta(csib, &name, Some(namespace), &spec.rules),
        spec,
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimbus_api::Rule;
    use serde_json::json;

    fn rule(id: &str) -> NimbusRule {
        NimbusRule {
            id: id.into(),
            type_: None,
            description: None,
            rule: Rule {
                action: "Block".into(),
                params: None,
            },
        }
    }

    fn csib(annotations: serde_json::Value) -> ClusterSecurityIntentBinding {
        serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "kind": "ClusterSecurityIntentBinding",
            "metadata": {"name": "b", "annotations": annotations},
            "spec": {"intents": [{"name": "x"}], "selector": {"nsSelector": {"matchNames": ["*"]}}}
        }))
        .expect("valid binding")
    }

    fn annotation(meta: &ObjectMeta) -> Option<&str> {
        meta.annotations
            .as_ref()
            .and_then(|a| a.get(ALLOW_SENSITIVE_ANNOTATION))
            .map(String::as_str)
    }

    #[test]
    fn the_opt_in_follows_sensitive_rules_onto_the_policies() {
        let spec = |ids: &[&str]| NimbusPolicySpec {
            selector: Default::default(),
            rules: ids.iter().map(|id| rule(id)).collect(),
        };
        let opted = csib(json!({ALLOW_SENSITIVE_ANNOTATION: "namespaceSandbox", "other": "x"}));
        let np = namespace_policy(&opted, "a", spec(&["namespaceSandbox"]));
        assert_eq!(annotation(&np.metadata), Some("namespaceSandbox"));
        assert_eq!(np.metadata.annotations.as_ref().map(BTreeMap::len), Some(1));
        // Withdrawn: an empty value overwrites what the policy carried.
        let np = namespace_policy(&csib(json!({})), "a", spec(&["namespaceSandbox"]));
        assert_eq!(annotation(&np.metadata), Some(""));
        // Nothing sensitive: the policy looks as in Nimbus.
        let np = namespace_policy(&opted, "a", spec(&["dnsManipulation"]));
        assert_eq!(np.metadata.annotations, None);
    }
}
