//! The NimbusPolicy objects a binding generates, as the operator writes them and the offline
//! CLI prints them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterNimbusPolicySpec, ClusterSecurityIntentBinding, NimbusPolicy,
    NimbusPolicySpec, SecurityIntentBinding,
};

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

/// The NimbusPolicy of a namespaced binding: same name and namespace.
pub fn binding_policy(sib: &SecurityIntentBinding, spec: NimbusPolicySpec) -> NimbusPolicy {
    NimbusPolicy {
        metadata: owned_meta(sib, &sib.name_any(), sib.namespace().as_deref()),
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
        metadata: owned_meta(csib, &csib.name_any(), None),
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
        metadata: owned_meta(csib, &name, Some(namespace)),
        spec,
        status: None,
    }
}
