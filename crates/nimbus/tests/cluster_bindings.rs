//! ClusterSecurityIntentBinding → ClusterNimbusPolicy + per-namespace NimbusPolicies
//! (as Nimbus's controllers have them, minus their bugs) on a real control plane.

mod common;

use common::{CONVERGE, apply, create_intent, delete, get, unique};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use nimbus_api::{ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntent};
use nimbus_testenv::eventually;
use serde_json::json;
use std::time::Duration;

fn client() -> Client {
    common::operator(Duration::from_secs(300))
        .client()
        .expect("client")
}

fn csib(name: &str, intent: &str, ns_selector: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": name},
        "spec": {"intents": [{"name": intent}],
                 "selector": {"nsSelector": ns_selector, "workloadSelector": {"matchLabels": {"app": "web"}}}}
    })
}

async fn apply_csib(client: &Client, name: &str, si: &str, ns_selector: serde_json::Value) {
    let api = Api::<ClusterSecurityIntentBinding>::all(client.clone());
    apply(&api, name, &csib(name, si, ns_selector)).await;
}

fn policy_name(csib: &str) -> String {
    format!("nimbus-ctlr-gen-{csib}")
}

async fn has_policy(client: &Client, ns: &str, csib: &str) -> bool {
    get(
        &Api::<NimbusPolicy>::namespaced(client.clone(), ns),
        &policy_name(csib),
    )
    .await
    .is_some()
}

/// Waits until the namespaces among `watched` holding the binding's policy are exactly `want`,
/// and the status lists them.
async fn fanned_out(client: &Client, name: &str, watched: &[&str], want: &[&str]) {
    let bindings: Api<ClusterSecurityIntentBinding> = Api::all(client.clone());
    eventually(
        &format!("{name} policies exactly in {want:?} of {watched:?}"),
        CONVERGE,
        async |_| {
            for ns in watched {
                if has_policy(client, ns, name).await != want.contains(ns) {
                    return None;
                }
            }
            let status = get(&bindings, name).await?.status?;
            let listed = status.nimbus_policy_namespaces.unwrap_or_default();
            let status_agrees = watched
                .iter()
                .all(|ns| listed.contains(&ns.to_string()) == want.contains(ns))
                && status.number_of_nimbus_policies as usize == listed.len();
            status_agrees.then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn all_namespaces_fan_out_follows_namespace_creation_and_deletion() {
    let client = client();
    let cp = common::cluster();
    let si = create_intent(&client, "escapeToHost", "Block").await;
    let name = unique("all");
    let a = cp.test_namespace("fan-a").await.expect("ns");
    apply_csib(&client, &name, &si, json!({"matchNames": ["*"]})).await;
    fanned_out(
        &client,
        &name,
        &[a.name(), "default", "kube-system"],
        &[a.name(), "default"],
    )
    .await;

    let cwnp = eventually("cluster policy", CONVERGE, async |_| {
        get(&Api::<ClusterNimbusPolicy>::all(client.clone()), &name).await
    })
    .await;
    assert_eq!(cwnp.spec.rules[0].id, "escapeToHost");
    assert_eq!(
        serde_json::to_value(&cwnp.spec).expect("json")["nodeSelector"],
        json!({})
    );
    let np = get(
        &Api::<NimbusPolicy>::namespaced(client.clone(), a.name()),
        &policy_name(&name),
    )
    .await
    .expect("np");
    assert_eq!(
        np.owner_references()[0].kind,
        "ClusterSecurityIntentBinding"
    );

    let b = cp.test_namespace("fan-b").await.expect("ns");
    fanned_out(&client, &name, &[a.name(), b.name()], &[a.name(), b.name()]).await;
    let b_name = b.name().to_owned();
    drop(b); // deletes the namespace
    let bindings: Api<ClusterSecurityIntentBinding> = Api::all(client.clone());
    eventually(
        "deleted namespace leaves the status",
        CONVERGE,
        async |_| {
            let listed = get(&bindings, &name)
                .await?
                .status?
                .nimbus_policy_namespaces
                .unwrap_or_default();
            (!listed.contains(&b_name) && listed.contains(&a.name().to_owned())).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn match_names_and_exclude_names_select_exactly() {
    let client = client();
    let cp = common::cluster();
    let si = create_intent(&client, "denyExternalNetworkAccess", "Block").await;
    let (a, b) = (
        cp.test_namespace("sel-a").await.expect("ns"),
        cp.test_namespace("sel-b").await.expect("ns"),
    );
    let (only, except) = (unique("only"), unique("except"));
    apply_csib(&client, &only, &si, json!({"matchNames": [a.name()]})).await;
    apply_csib(&client, &except, &si, json!({"excludeNames": [a.name()]})).await;
    fanned_out(&client, &only, &[a.name(), b.name()], &[a.name()]).await;
    fanned_out(
        &client,
        &except,
        &[a.name(), b.name(), "kube-system"],
        &[b.name()],
    )
    .await;

    // A namespace created later is picked up by excludeNames but not by matchNames.
    let c = cp.test_namespace("sel-c").await.expect("ns");
    fanned_out(
        &client,
        &except,
        &[a.name(), b.name(), c.name()],
        &[b.name(), c.name()],
    )
    .await;
    fanned_out(&client, &only, &[c.name()], &[]).await;

    // Changing the selector moves the policies.
    apply_csib(
        &client,
        &only,
        &si,
        json!({"matchNames": [b.name(), c.name()]}),
    )
    .await;
    fanned_out(
        &client,
        &only,
        &[a.name(), b.name(), c.name()],
        &[b.name(), c.name()],
    )
    .await;
}

#[tokio::test]
async fn removing_every_intent_removes_cluster_and_namespace_policies() {
    let client = client();
    let cp = common::cluster();
    let si = create_intent(&client, "dnsManipulation", "Block").await;
    let intents: Api<SecurityIntent> = Api::all(client.clone());
    let a = cp.test_namespace("stale").await.expect("ns");
    let name = unique("stale");
    apply_csib(&client, &name, &si, json!({"matchNames": [a.name()]})).await;
    fanned_out(&client, &name, &[a.name()], &[a.name()]).await;

    delete(&intents, &si).await;
    let cwnps: Api<ClusterNimbusPolicy> = Api::all(client.clone());
    let bindings: Api<ClusterSecurityIntentBinding> = Api::all(client.clone());
    eventually(
        "cluster and namespace policies removed, status zeroed",
        CONVERGE,
        async |_| {
            let status = get(&bindings, &name).await?.status?;
            let gone =
                get(&cwnps, &name).await.is_none() && !has_policy(&client, a.name(), &name).await;
            (gone
                && status.cluster_nimbus_policy.is_empty()
                && status.number_of_bound_intents == 0
                && status.number_of_nimbus_policies == 0)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn cluster_and_namespace_policies_are_restored_after_hand_edits_and_deletes() {
    let client = client();
    let cp = common::cluster();
    let si = create_intent(&client, "escapeToHost", "Block").await;
    let a = cp.test_namespace("cdrift").await.expect("ns");
    let name = unique("drift");
    apply_csib(&client, &name, &si, json!({"matchNames": [a.name()]})).await;
    fanned_out(&client, &name, &[a.name()], &[a.name()]).await;

    let nps: Api<NimbusPolicy> = Api::namespaced(client.clone(), a.name());
    let np = get(&nps, &policy_name(&name)).await.expect("np");
    delete(&nps, &policy_name(&name)).await;
    eventually("per-namespace policy re-created", CONVERGE, async |_| {
        get(&nps, &policy_name(&name))
            .await
            .filter(|p| p.uid() != np.uid())
    })
    .await;

    let cwnps: Api<ClusterNimbusPolicy> = Api::all(client.clone());
    let original = get(&cwnps, &name).await.expect("cwnp");
    let edit = json!({"spec": {"rules": [{"id": "dnsManipulation", "rule": {"action": "Audit"}}]}});
    cwnps
        .patch(&name, &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("edit");
    eventually("cluster policy edit reverted", CONVERGE, async |_| {
        get(&cwnps, &name).await.filter(|p| p.spec == original.spec)
    })
    .await;
    delete(&cwnps, &name).await;
    eventually("cluster policy re-created", CONVERGE, async |_| {
        get(&cwnps, &name)
            .await
            .filter(|p| p.uid() != original.uid())
    })
    .await;
}

#[tokio::test]
async fn an_invalid_binding_fixed_in_place_starts_working() {
    let client = client();
    let cp = common::cluster();
    let si = create_intent(&client, "dnsManipulation", "Block").await;
    let a = cp.test_namespace("fix").await.expect("ns");
    let name = unique("fix");
    let api: Api<ClusterSecurityIntentBinding> = Api::all(client.clone());
    // An empty matchNames passes the schema but selects nothing meaningful: reported, not guessed.
    apply_csib(&client, &name, &si, json!({"matchNames": []})).await;
    let status = eventually("ValidationFail with a reason", CONVERGE, async |_| {
        get(&api, &name)
            .await?
            .status
            .filter(|s| s.status == "ValidationFail")
    })
    .await;
    assert_eq!(status.conditions[0].reason, "InvalidNamespaceSelector");
    assert!(
        status.conditions[0].message.contains("empty"),
        "{}",
        status.conditions[0].message
    );

    apply_csib(&client, &name, &si, json!({"matchNames": [a.name()]})).await;
    fanned_out(&client, &name, &[a.name()], &[a.name()]).await;
    // Ready once the policies it generated are translated (Unknown until then).
    eventually("Created and Ready", CONVERGE, async |_| {
        let status = get(&api, &name).await?.status?;
        (status.status == "Created" && status.conditions.first()?.status == "True").then_some(())
    })
    .await;
}
