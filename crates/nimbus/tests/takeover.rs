//! Taking over from the original Nimbus keeps every object in place. The cluster is left as
//! the original's operator and adapters leave it: the same policies and native objects (names,
//! owners, bodies), but without our labels and annotations, every field written by another
//! field manager, and statuses without conditions. Our operator then starts: no object may be
//! deleted or change uid, even for a moment, no Warning Event or `Ready=False` status may be
//! written, and every object ends up ours again (labelled, Ready).

mod common;

use common::CONVERGE;
use common::fleet::{
    all_ready, create_realistic_set, generated_kinds, listed, monitor, reporting_kinds, settled,
    start, start_settled,
};
use kube::api::{ApiResource, DynamicObject, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use nimbus_core::engines::MANAGED_BY;
use nimbus_testenv::eventually;
use serde_json::{Map, Value, json};

/// The field manager the original's operator and adapters write as, here.
const ORIGINAL: &str = "nimbus-original";

/// Every field of `fields_v1` trees in one (managedFields sets are trees of `f:` keys).
fn union(into: &mut Value, other: &Value) {
    match (into, other) {
        (Value::Object(into), Value::Object(other)) => {
            for (key, value) in other {
                union(into.entry(key.clone()).or_insert(json!({})), value);
            }
        }
        (into, other) => *into = other.clone(),
    }
}

/// `obj` as the original would have left it: our label and annotations gone, and every field
/// (main resource and status) owned by [`ORIGINAL`] through updates.
fn as_the_original_left_it(mut obj: DynamicObject, api_version: &str) -> DynamicObject {
    obj.labels_mut().remove(MANAGED_BY);
    obj.annotations_mut()
        .retain(|key, _| !key.starts_with("intent.security.nimbus.com/"));
    let mut by_subresource: Map<String, Value> = Map::new();
    for entry in obj.managed_fields() {
        let subresource = entry.subresource.clone().unwrap_or_default();
        let fields = entry
            .fields_v1
            .as_ref()
            .map(|f| f.0.clone())
            .unwrap_or(json!({}));
        union(
            by_subresource.entry(subresource).or_insert(json!({})),
            &fields,
        );
    }
    let entries: Vec<Value> = by_subresource
        .into_iter()
        .map(|(subresource, mut fields)| {
            // What the original never wrote: our label and annotations.
            if let Some(meta) = fields.get_mut("f:metadata").and_then(Value::as_object_mut) {
                meta.remove("f:annotations");
                if let Some(labels) = meta.get_mut("f:labels").and_then(Value::as_object_mut) {
                    labels.remove(&format!("f:{MANAGED_BY}"));
                }
            }
            let mut entry = json!({
                "manager": ORIGINAL, "operation": "Update", "apiVersion": api_version,
                "fieldsType": "FieldsV1", "fieldsV1": fields,
            });
            if !subresource.is_empty() {
                entry["subresource"] = json!(subresource);
            }
            entry
        })
        .collect();
    obj.metadata.managed_fields =
        Some(serde_json::from_value(json!(entries)).expect("managedFields"));
    obj
}

/// Rewrites every object of `kind` as the original would have left it (`generated`: a policy
/// or native object it wrote; else only the status of a user's object); statuses lose what
/// the original never wrote (conditions, observedGeneration). Returns how many it rewrote.
async fn leave_as_the_original(client: &Client, kind: &ApiResource, generated: bool) -> usize {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), kind);
    let list = api.list(&ListParams::default()).await.expect("listing");
    let params = PostParams {
        field_manager: Some(ORIGINAL.to_owned()),
        ..PostParams::default()
    };
    for obj in &list.items {
        let namespaced: Api<DynamicObject> = match obj.namespace() {
            Some(ns) => Api::namespaced_with(client.clone(), &ns, kind),
            None => Api::all_with(client.clone(), kind),
        };
        let name = obj.name_any();
        let mut rewritten = obj.clone();
        if let Some(status) = rewritten
            .data
            .get_mut("status")
            .and_then(Value::as_object_mut)
        {
            status.remove("conditions");
            status.remove("observedGeneration");
            rewritten = namespaced
                .replace_status(&name, &params, &rewritten)
                .await
                .unwrap_or_else(|e| panic!("rewriting the status of {name}: {e}"));
        }
        if generated {
            namespaced
                .replace(
                    &name,
                    &params,
                    &as_the_original_left_it(rewritten, &kind.api_version),
                )
                .await
                .unwrap_or_else(|e| panic!("rewriting {name}: {e}"));
        }
    }
    list.items.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_over_from_the_original_keeps_every_object_in_place() {
    let cp = common::cluster_with_engines();
    let client = cp.client().expect("client");
    create_realistic_set(&client, 100).await;
    let dir = tempfile::tempdir().expect("log dir");

    // What the original generated, the same objects ours generates (tests/upstream compare
    // them); then the original stops, leaving them as its operator and adapters wrote them.
    let (mut predecessor, workload) =
        start_settled(&client, cp.kubeconfig_path(), dir.path()).await;
    predecessor.process.terminate();
    eventually("the predecessor to exit", CONVERGE, async |_| {
        predecessor.process.has_exited().then_some(())
    })
    .await;
    let mut rewritten = 0;
    for kind in generated_kinds() {
        rewritten += leave_as_the_original(&client, &kind, true).await;
    }
    for binding_kind in &reporting_kinds()[..2] {
        leave_as_the_original(&client, binding_kind, false).await;
    }
    let natives: Vec<ApiResource> = generated_kinds()[2..].to_vec();
    let labelled = listed(&client, &natives, &ListParams::default(), |o| {
        o.labels().contains_key(MANAGED_BY)
            || !o
                .managed_fields()
                .iter()
                .all(|e| e.manager.as_deref() == Some(ORIGINAL))
    })
    .await;
    assert!(
        labelled.is_empty(),
        "still marked as ours before the takeover: {labelled:?}"
    );

    let monitor = monitor(&client).await;
    let in_force = monitor.present();
    let operator = start(cp.kubeconfig_path(), dir.path());
    settled(&operator, &workload).await;
    all_ready(&client).await;

    // Every native object is ours again, in place.
    eventually(
        "every native object labelled ours",
        CONVERGE,
        async |seen| {
            let unlabelled = listed(&client, &natives, &ListParams::default(), |o| {
                !o.labels().contains_key(MANAGED_BY)
            })
            .await;
            *seen = format!("unlabelled: {unlabelled:?}");
            unlabelled.is_empty().then_some(())
        },
    )
    .await;
    let findings = monitor.findings();
    assert!(
        findings.is_clean(),
        "the takeover lowered protection or misreported it:\n{findings}operator log:\n{}",
        operator.process.output()
    );
    assert_eq!(
        monitor.present(),
        in_force,
        "the objects in force, and their uids"
    );
    eprintln!(
        "takeover: {rewritten} objects left as the original's, {} kept in place",
        in_force.len()
    );
}
