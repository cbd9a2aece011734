//! The hub: OCM's CRDs, the managed clusters as registration would leave them, the placement
//! decisions no placement controller writes here, and the policy propagator.

use super::plan::ClusterPlan;
use crate::{Child, ControlPlane, Error, apply_yaml, free_port};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use std::ffi::OsStr;
use std::path::Path;

/// OCM's cluster API group, of ManagedClusters, Placements and PlacementDecisions.
const CLUSTER_GROUP: &str = "cluster.open-cluster-management.io";
/// The label that ties a PlacementDecision to its Placement.
const DECISION_PLACEMENT_LABEL: &str = "cluster.open-cluster-management.io/placement";
/// Field manager of what is written here in OCM's controllers' stead.
const FIELD_MANAGER: &str = "nimbus-testenv-ocm";

/// OCM's CRDs (from `<ocm>/crds`, where `hack/build-ocm.sh` puts them), then each planned
/// cluster's namespace and ManagedCluster.
pub(super) async fn install(
    hub: &Client,
    ocm: &Path,
    clusters: &[ClusterPlan],
) -> Result<(), Error> {
    let dir = ocm.join("crds");
    let entries = std::fs::read_dir(&dir).map_err(|e| Error::io("reading", &dir, e))?;
    let mut crds: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    crds.sort();
    for crd in crds {
        let yaml = std::fs::read_to_string(&crd).map_err(|e| Error::io("reading", &crd, e))?;
        apply_yaml(hub, &yaml).await?;
    }
    let mut objects = Vec::new();
    for cluster in clusters {
        objects.push(json!({"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": cluster.name}}));
        objects.push(json!({
            "apiVersion": format!("{CLUSTER_GROUP}/v1"), "kind": "ManagedCluster",
            "metadata": {"name": cluster.name, "labels": cluster.labels},
            "spec": {"hubAcceptsClient": true}
        }));
    }
    apply_yaml(hub, &documents(&objects)).await.map(drop)
}

/// `objects` as one multi-document manifest (JSON is YAML).
fn documents(objects: &[serde_json::Value]) -> String {
    let documents: Vec<String> = objects.iter().map(ToString::to_string).collect();
    documents.join("\n---\n")
}

/// Whether the hub stored `object` as an OCM Placement.
pub(super) fn is_placement(object: &DynamicObject) -> bool {
    object.types.as_ref().is_some_and(|t| {
        t.kind == "Placement" && t.api_version.starts_with(&format!("{CLUSTER_GROUP}/"))
    })
}

/// The Placement's decision: every one of `clusters`, as OCM's placement controller would
/// write it if the Placement's predicates chose them all.
pub(super) async fn decide(
    hub: &Client,
    placement: &DynamicObject,
    clusters: &[&str],
) -> Result<(), Error> {
    let placement_name = placement.name_any();
    // As the hub stored it: a Placement applied without a namespace went to the default one.
    let namespace = (placement.namespace()).unwrap_or_else(|| hub.default_namespace().to_owned());
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        CLUSTER_GROUP,
        "v1beta1",
        "PlacementDecision",
    ));
    let decisions: Api<DynamicObject> = Api::namespaced_with(hub.clone(), &namespace, &resource);
    let name = format!("{placement_name}-decision-1");
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let decision = json!({
        "apiVersion": resource.api_version, "kind": resource.kind,
        "metadata": {"name": name, "labels": {DECISION_PLACEMENT_LABEL: placement_name}}
    });
    let context =
        |what: &str| format!("writing the {what} of PlacementDecision {namespace}/{name}");
    decisions
        .patch(&name, &apply, &Patch::Apply(decision))
        .await
        .map_err(|e| Error::kube(context("object"), e))?;
    let chosen: Vec<_> = (clusters.iter())
        .map(|cluster| json!({"clusterName": cluster, "reason": "no placement controller runs here: every managed cluster"}))
        .collect();
    let status = json!({
        "apiVersion": resource.api_version, "kind": resource.kind,
        "metadata": {"name": name},
        "status": {"decisions": chosen}
    });
    decisions
        .patch_status(&name, &apply, &Patch::Apply(status))
        .await
        .map_err(|e| Error::kube(context("status"), e))?;
    Ok(())
}

/// The propagator on the hub, watching every namespace, without webhooks or leader election,
/// exporting its compliance metric on `metrics`.
pub(super) fn propagator(ocm: &Path, hub: &ControlPlane, metrics: u16) -> Result<Child, Error> {
    let probes = free_port()?;
    let args = [
        "--leader-elect=false".to_owned(),
        "--enable-webhooks=false".to_owned(),
        "--disable-placementrule".to_owned(),
        format!("--metrics-bind-address=127.0.0.1:{metrics}"),
        format!("--health-probe-bind-address=127.0.0.1:{probes}"),
    ];
    let env = [
        ("KUBECONFIG", hub.kubeconfig_path().as_os_str()),
        ("WATCH_NAMESPACE", OsStr::new("")),
    ];
    Child::spawn(
        "ocm-propagator",
        &ocm.join("governance-policy-propagator"),
        &args,
        &env,
        hub.work_dir(),
    )
}
