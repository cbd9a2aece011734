//! What the posture's caches keep of each object, and its metadata-only caches.

use crate::cache::Cache;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::{Api, Client, Resource};
use serde_json::{Value, json};

/// Keeps of a Service what the preview reads: its name, namespace and spec.
pub(super) fn strip_service(svc: &mut Service) {
    svc.metadata = ObjectMeta {
        name: svc.metadata.name.take(),
        namespace: svc.metadata.namespace.take(),
        ..ObjectMeta::default()
    };
    svc.status = None;
}

/// Keeps of a NetworkPolicy what the preview reads.
pub(super) fn strip_network_policy(np: &mut NetworkPolicy) {
    np.metadata.managed_fields = None;
    np.metadata.annotations = None;
}

/// Keeps of a PolicyReport the resource it is about and, of each result, what the preview
/// reads (the message only of failures): reports can be many and large.
pub(super) fn strip_report(report: &mut DynamicObject) {
    report.metadata = ObjectMeta {
        name: report.metadata.name.take(),
        namespace: report.metadata.namespace.take(),
        ..ObjectMeta::default()
    };
    let scope = &report.data["scope"];
    let results: Vec<Value> = report.data["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let failed = r["result"] == "fail";
            json!({
                "policy": r["policy"],
                "rule": r["rule"],
                "result": r["result"],
                "message": if failed { r["message"].clone() } else { Value::Null },
            })
        })
        .collect();
    report.data = json!({
        "scope": {"kind": scope["kind"], "namespace": scope["namespace"], "name": scope["name"]},
        "results": results,
    });
}

/// A cluster-wide, metadata-only cache of `K` (ReplicaSets, Jobs), keeping what finds a pod's
/// workload: each object's identity and its controlling owner. (Clusters keep ten old
/// ReplicaSets per Deployment by default: there may be more of them than pods.)
pub(super) fn metadata_cache<K>(client: &Client) -> Cache<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + std::fmt::Debug + 'static,
    PartialObjectMeta<K>: Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    Cache::new(Api::all(client.clone())).strip(strip_to_ownership)
}

fn strip_to_ownership<K>(object: &mut PartialObjectMeta<K>) {
    let meta = std::mem::take(&mut object.metadata);
    let controller = meta
        .owner_references
        .into_iter()
        .flatten()
        .find(|owner| owner.controller == Some(true));
    object.metadata = ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        owner_references: controller.map(|owner| vec![owner]),
        ..ObjectMeta::default()
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSet;

    #[test]
    fn a_replica_set_keeps_its_identity_and_controller_only() {
        let mut rs: PartialObjectMeta<ReplicaSet> = serde_json::from_value(json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {
                "name": "web-abc", "namespace": "shop", "uid": "rs-1", "resourceVersion": "7",
                "labels": {"app": "web", "pod-template-hash": "abc"},
                "annotations": {"deployment.kubernetes.io/revision": "3"},
                "managedFields": [{"manager": "kube-controller-manager"}],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "c-1"},
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                     "uid": "d-1", "controller": true}
                ]
            }
        }))
        .expect("a ReplicaSet's metadata");
        strip_to_ownership(&mut rs);
        let owners = rs.metadata.owner_references.take().expect("its controller");
        assert_eq!(
            owners.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(),
            ["web"]
        );
        assert_eq!(
            rs.metadata,
            ObjectMeta {
                name: Some("web-abc".into()),
                namespace: Some("shop".into()),
                uid: Some("rs-1".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            }
        );
    }
}
