//! The workloads the posture describes: pods grouped under their top-level controllers.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use std::collections::BTreeMap;

/// A pod, as far as the posture needs it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub created: Option<Time>,
    /// Its controlling owner.
    pub controller: Option<OwnerReference>,
    /// Its IP (`status.podIP`), once it has one: NetworkPolicy `ipBlock`s match it.
    pub ip: Option<std::net::IpAddr>,
    /// Its containers' ports: a Service's named `targetPort` resolves through them.
    pub ports: Vec<ContainerPort>,
}

/// A port a pod's container declares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerPort {
    pub name: Option<String>,
    pub port: u16,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
}

/// A workload: a pod's top-level controller, or a bare pod, with the labels of its pods.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub namespace: String,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// The workload object's uid, when known (reports about it are owned by it).
    pub uid: Option<String>,
    /// When its oldest pod was created.
    pub created: Option<Time>,
    /// Its pods.
    pub pods: Vec<Pod>,
}

/// Groups pods into workloads. `owner_of(namespace, kind, name)` is the controlling owner of a
/// ReplicaSet or Job, so a Deployment's or CronJob's pods group under it; any other controller
/// (StatefulSet, DaemonSet, a custom one) is the workload itself.
pub fn workloads(
    pods: impl IntoIterator<Item = Pod>,
    owner_of: impl Fn(&str, &str, &str) -> Option<OwnerReference>,
) -> Vec<Workload> {
    let mut grouped: BTreeMap<(String, String, String), Workload> = BTreeMap::new();
    for pod in pods {
        let (api_version, kind, name, uid) = match &pod.controller {
            None => (
                "v1".to_owned(),
                "Pod".to_owned(),
                pod.name.clone(),
                pod.uid.clone(),
            ),
            Some(owner) => {
                let parent = matches!(owner.kind.as_str(), "ReplicaSet" | "Job")
                    .then(|| owner_of(&pod.namespace, &owner.kind, &owner.name))
                    .flatten();
                let top = parent.as_ref().unwrap_or(owner);
                let (v, k, n, u) = (&top.api_version, &top.kind, &top.name, &top.uid);
                (v.clone(), k.clone(), n.clone(), u.clone())
            }
        };
        let workload = grouped
            .entry((pod.namespace.clone(), kind.clone(), name.clone()))
            .or_insert_with(|| Workload {
                namespace: pod.namespace.clone(),
                api_version,
                kind,
                name,
                uid: Some(uid).filter(|u| !u.is_empty()),
                created: pod.created.clone(),
                pods: Vec::new(),
            });
        if pod.created.as_ref().is_some_and(|c| {
            workload
                .created
                .as_ref()
                .is_none_or(|oldest| c.0 < oldest.0)
        }) {
            workload.created = pod.created.clone();
        }
        workload.pods.push(pod);
    }
    grouped.into_values().collect()
}
