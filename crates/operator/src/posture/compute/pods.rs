//! What the posture reads of a pod. The watch deserializes the API server's JSON straight into
//! the few fields a decision reads, so no list or watch event ever holds a whole `Pod`: its spec
//! and status alone are structs of dozens of fields, each container's too. The store keeps them
//! more compactly still (`pod_store.rs`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use nimbus_core::posture as core;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// A pod as the posture sees it: its identity, labels and controlling owner, the ports its
/// containers declare (a Service's named `targetPort` resolves through them) and its IP
/// (NetworkPolicy `ipBlock`s match it).
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "Wire")]
pub struct PodFacts {
    /// Name, namespace, uid, resourceVersion (which the watch resumes from), creation time and
    /// the controlling owner reference, nothing else.
    pub metadata: ObjectMeta,
    /// Its labels, in order: a few pairs, which a map would keep in a node of eleven.
    pub labels: Box<[(String, String)]>,
    pub ports: Vec<core::ContainerPort>,
    pub ip: Option<IpAddr>,
}

impl k8s_openapi::Resource for PodFacts {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for PodFacts {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The fields read of a pod's JSON; serde skips every other without allocating it.
#[derive(Deserialize)]
struct Wire {
    metadata: WireMeta,
    #[serde(default)]
    spec: Option<WireSpec>,
    #[serde(default)]
    status: Option<WireStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    #[serde(default)]
    owner_references: Vec<OwnerReference>,
}

#[derive(Deserialize)]
struct WireSpec {
    #[serde(default)]
    containers: Vec<WireContainer>,
}

#[derive(Deserialize)]
struct WireContainer {
    #[serde(default)]
    ports: Vec<WirePort>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePort {
    name: Option<String>,
    container_port: i32,
    protocol: Option<String>,
}

#[derive(Deserialize)]
struct WireStatus {
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
}

impl From<Wire> for PodFacts {
    fn from(pod: Wire) -> Self {
        let meta = pod.metadata;
        let controller = meta
            .owner_references
            .into_iter()
            .find(|owner| owner.controller == Some(true));
        let ports = pod
            .spec
            .into_iter()
            .flat_map(|spec| spec.containers)
            .flat_map(|container| container.ports)
            .filter_map(|port| {
                Some(core::ContainerPort {
                    name: port.name,
                    port: u16::try_from(port.container_port).ok()?,
                    protocol: port.protocol.unwrap_or_else(|| "TCP".to_owned()),
                })
            })
            .collect();
        PodFacts {
            metadata: ObjectMeta {
                name: meta.name,
                namespace: meta.namespace,
                uid: meta.uid,
                resource_version: meta.resource_version,
                creation_timestamp: meta.creation_timestamp,
                owner_references: controller.map(|owner| vec![owner]),
                ..ObjectMeta::default()
            },
            labels: meta.labels.into_iter().flatten().collect(),
            ports,
            ip: pod
                .status
                .and_then(|status| status.pod_ip)
                .and_then(|ip| ip.parse().ok()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_keeps_what_the_posture_reads_and_nothing_else() {
        let pod: PodFacts = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u-1", "resourceVersion": "42",
                "labels": {"app": "web"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
                "creationTimestamp": "2026-11-29T10:00:00Z",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "n-1"},
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc",
                     "uid": "rs-1", "controller": true}
                ]
            },
            "spec": {"containers": [
                {"name": "app", "image": "web:1", "env": [{"name": "A", "value": "b"}],
                 "ports": [{"name": "http", "containerPort": 8080},
                           {"containerPort": 53, "protocol": "UDP"},
                           {"containerPort": 70000}]},
                {"name": "sidecar", "image": "proxy:1"}
            ]},
            "status": {"phase": "Running", "podIP": "10.0.0.7",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("a pod's JSON");
        let meta = &pod.metadata;
        assert_eq!(meta.resource_version.as_deref(), Some("42"));
        assert_eq!(meta.annotations, None);
        assert_eq!(meta.managed_fields, None);
        assert_eq!(
            (
                meta.namespace.as_deref(),
                meta.name.as_deref(),
                meta.uid.as_deref()
            ),
            (Some("shop"), Some("web-1"), Some("u-1"))
        );
        assert_eq!(*pod.labels, [("app".to_owned(), "web".to_owned())]);
        let owners: Vec<&str> = meta
            .owner_references
            .iter()
            .flatten()
            .map(|owner| owner.name.as_str())
            .collect();
        assert_eq!(owners, ["web-abc"], "the controller alone");
        assert_eq!(pod.ip, Some("10.0.0.7".parse().expect("an IP")));
        assert_eq!(
            pod.ports,
            [
                core::ContainerPort {
                    name: Some("http".into()),
                    port: 8080,
                    protocol: "TCP".into()
                },
                core::ContainerPort {
                    name: None,
                    port: 53,
                    protocol: "UDP".into()
                },
            ]
        );
        assert!(meta.creation_timestamp.is_some());
    }

    #[test]
    fn a_pod_being_scheduled_has_no_ip_nor_ports() {
        let pod: PodFacts = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending"}
        }))
        .expect("a pod's JSON");
        assert_eq!(
            (pod.ip, pod.ports.len(), pod.metadata.owner_references),
            (None, 0, None)
        );
    }
}
