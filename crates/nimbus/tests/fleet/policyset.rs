//! examples/fleet/policyset.yaml on the hub: the PolicySet grouping the example Policy, and the
//! compliance the propagator rolls up into the set's status.

use crate::ocm::{ROOT_NAMESPACE, ROOT_POLICY, policy_resource};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use nimbus_testenv::{apply_yaml, eventually};
use serde_json::{Value, json};
use std::time::Duration;

/// The example PolicySet and its PlacementBinding.
pub const POLICYSET_YAML: &str = include_str!("../../../../examples/fleet/policyset.yaml");

/// The example's Placement (placement.yaml's, shared) and the set's PlacementBinding.
const PLACEMENT: &str = "nimbus-rollout";
const BINDING: &str = "nimbus-set";

/// The example's set, parsed.
fn example() -> Value {
    let first = POLICYSET_YAML.split("\n---\n").next().unwrap_or_default();
    serde_yaml_ng::from_str(first).expect("examples/fleet/policyset.yaml")
}

/// Applies the example (the API server checks it against OCM's CRDs); the set groups the
/// example Policy.
pub async fn apply(hub: &Client) {
    let set = example();
    assert_eq!(set["kind"], "PolicySet");
    assert_eq!(set["metadata"]["namespace"], ROOT_NAMESPACE);
    assert_eq!(set["spec"]["policies"], json!([ROOT_POLICY]));
    apply_yaml(hub, POLICYSET_YAML)
        .await
        .expect("examples/fleet/policyset.yaml");
}

/// Waits until the propagator says the set is `compliance`, every member reporting, placed by
/// the example's PlacementBinding on the example's Placement; and the member Policy's status
/// names the set among its placements.
pub async fn shows(hub: &Client, compliance: &str, within: Duration) {
    let set = example();
    let name = set["metadata"]["name"].as_str().expect("the set's name");
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "policy.open-cluster-management.io",
        "v1beta1",
        "PolicySet",
    ));
    let sets: Api<DynamicObject> = Api::namespaced_with(hub.clone(), ROOT_NAMESPACE, &resource);
    let policies: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), ROOT_NAMESPACE, &policy_resource());
    let placed = json!({"placement": PLACEMENT, "placementBinding": BINDING});
    let mut placed_by_set = placed.clone();
    placed_by_set["policySet"] = json!(name);
    eventually(
        &format!("the PolicySet {name} to be {compliance}"),
        within,
        async |seen| {
            let status = sets.get_opt(name).await.ok()??.data["status"].clone();
            let member = policies.get_opt(ROOT_POLICY).await.ok()??;
            let member = member.data["status"]["placement"].clone();
            *seen = format!("set: {status:#}; member's placements: {member:#}");
            (status["compliant"] == compliance
                && status["statusMessage"] == "All policies are reporting status"
                && status["placement"] == json!([placed])
                && member.as_array()?.contains(&placed_by_set))
            .then_some(())
        },
    )
    .await;
}
