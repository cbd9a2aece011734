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

/// A cluster-wide, metadata-only cache of `K`.
pub(super) fn metadata_cache<K>(client: &Client) -> Cache<PartialObjectMeta<K>>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + std::fmt::Debug + 'static,
    PartialObjectMeta<K>: Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    Cache::new(Api::all(client.clone())).strip(|meta| {
        meta.metadata.managed_fields = None;
        meta.metadata.annotations = None;
    })
}
