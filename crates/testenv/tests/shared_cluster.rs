//! Behaviour that needs kube-controller-manager, checked against the shared control plane.

mod common;

use std::time::Duration;

use common::TestResult;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, ResourceExt};
use nimbus_testenv::eventually;

fn config_map(name: &str, owner: Option<OwnerReference>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

#[tokio::test]
async fn garbage_collector_deletes_dependents() -> TestResult {
    let cluster = nimbus_testenv::shared();
    let ns = cluster.test_namespace("gc").await?;
    let config_maps = Api::<ConfigMap>::namespaced(cluster.client()?, ns.name());

    let owner = config_maps
        .create(&PostParams::default(), &config_map("owner", None))
        .await?;
    let reference = OwnerReference {
        api_version: "v1".to_owned(),
        kind: "ConfigMap".to_owned(),
        name: owner.name_any(),
        uid: owner.uid().ok_or("owner has no uid")?,
        ..OwnerReference::default()
    };
    config_maps
        .create(
            &PostParams::default(),
            &config_map("dependent", Some(reference)),
        )
        .await?;

    config_maps
        .delete("owner", &DeleteParams::background())
        .await?;
    eventually(
        "the dependent to be collected",
        Duration::from_secs(60),
        async |_| {
            config_maps
                .get_opt("dependent")
                .await
                .expect("getting ConfigMap dependent")
                .is_none()
                .then_some(())
        },
    )
    .await;
    Ok(())
}

#[tokio::test]
async fn deleted_namespace_goes_away() -> TestResult {
    let cluster = nimbus_testenv::shared();
    let client = cluster.client()?;
    let ns = cluster.test_namespace("ns-deletion").await?;
    Api::<ConfigMap>::namespaced(client.clone(), ns.name())
        .create(&PostParams::default(), &config_map("content", None))
        .await?;

    let namespaces = Api::<Namespace>::all(client);
    namespaces
        .delete(ns.name(), &DeleteParams::default())
        .await?;
    eventually(
        "the namespace to be deleted",
        Duration::from_secs(60),
        async |seen| match namespaces
            .get_opt(ns.name())
            .await
            .expect("getting the namespace")
        {
            None => Some(()),
            Some(left) => {
                *seen = format!("{:?}", left.status);
                None
            }
        },
    )
    .await;
    Ok(())
}

#[tokio::test]
async fn apply_yaml_handles_a_crd_and_its_resources_in_one_manifest() -> TestResult {
    let cluster = nimbus_testenv::shared();
    let client = cluster.client()?;
    let ns = cluster.test_namespace("apply").await?;
    let manifest = format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.testenv.nimbus.example
spec:
  group: testenv.nimbus.example
  names: {{kind: Widget, plural: widgets, singular: widget}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer}}
---
apiVersion: testenv.nimbus.example/v1
kind: Widget
metadata:
  name: small
  namespace: {ns}
spec:
  size: 3
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: {ns}
data:
  key: value
---
"#,
        ns = ns.name()
    );

    let applied = nimbus_testenv::apply_yaml(&client, &manifest).await?;
    assert_eq!(applied.len(), 3);
    // Applying again is a no-op, not a conflict.
    nimbus_testenv::apply_yaml(&client, &manifest).await?;

    let widget_type = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "testenv.nimbus.example",
        "v1",
        "Widget",
    ));
    let widget = Api::<DynamicObject>::namespaced_with(client.clone(), ns.name(), &widget_type)
        .get("small")
        .await?;
    assert_eq!(widget.data["spec"]["size"], 3);
    let settings = Api::<ConfigMap>::namespaced(client, ns.name())
        .get("settings")
        .await?;
    assert_eq!(
        settings
            .data
            .unwrap_or_default()
            .get("key")
            .map(String::as_str),
        Some("value")
    );
    Ok(())
}
