//! SecurityIntentBinding → NimbusPolicy reactions, as Nimbus's controllers have them, on a
//! real control plane with garbage collection, against the operator running in-process.

mod common;

use common::{CONVERGE, Env, apply, binding, create_intent, delete, env, get, intent, unique};
use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use nimbus_api::NimbusPolicy;
use nimbus_testenv::eventually;
use serde_json::json;

/// Waits until the policy's rule ids are `ids` (and the binding's status agrees).
async fn policy_with(e: &Env, name: &str, ids: &[&str]) -> NimbusPolicy {
    let np = eventually(
        &format!("NimbusPolicy {name} with rules {ids:?}"),
        CONVERGE,
        async |_| {
            get(&e.policies, name).await.filter(|np| {
                np.spec
                    .rules
                    .iter()
                    .map(|r| r.id.as_str())
                    .collect::<Vec<_>>()
                    == ids
            })
        },
    )
    .await;
    eventually("binding status to count the rules", CONVERGE, async |_| {
        let s = get(&e.bindings, name).await?.status?;
        (s.number_of_bound_intents == ids.len() as i32 && s.nimbus_policy == name).then_some(())
    })
    .await;
    np
}

async fn no_policy(e: &Env, name: &str) {
    eventually(
        &format!("NimbusPolicy {name} gone and binding status zeroed"),
        CONVERGE,
        async |_| {
            let gone = get(&e.policies, name).await.is_none();
            let s = get(&e.bindings, name).await?.status?;
            (gone && s.nimbus_policy.is_empty() && s.number_of_bound_intents == 0).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn intent_first_then_binding_creates_the_policy_with_owner_labels_and_status() {
    let e = env("intent-first").await;
    let si = create_intent(&e.client, "dnsManipulation", "Block").await;
    apply(
        &e.bindings,
        "b",
        &binding("b", &[&si], json!({"app": "web"})),
    )
    .await;

    let np = policy_with(&e, "b", &["dnsManipulation"]).await;
    // Ready (not Unknown) once its policy has been translated.
    let sib = eventually("binding Ready", CONVERGE, async |_| {
        let sib = get(&e.bindings, "b").await?;
        let ready = sib.status.as_ref()?.conditions.first()?.status == "True";
        ready.then_some(sib)
    })
    .await;
    let owner = &np.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("SecurityIntentBinding", "b")
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    assert_eq!(Some(owner.uid.clone()), sib.uid());
    assert_eq!(np.labels().get("team").map(String::as_str), Some("blue"));
    assert_eq!(np.spec.rules[0].rule.action, "Block");
    assert_eq!(
        np.spec.rules[0].description.as_deref(),
        Some("dnsManipulation test")
    );
    assert_eq!(app_label(&np), Some("web"));

    let status = sib.status.expect("status");
    assert_eq!(status.status, "Created");
    assert_eq!(status.bound_intents, Some(vec![si.clone()]));
    assert!(status.last_updated.is_some());
    assert_eq!(status.observed_generation, sib.metadata.generation);
    assert_eq!(status.conditions[0].type_, "Ready");
    assert_eq!(status.conditions[0].status, "True");

    let np_status = eventually("NimbusPolicy status", CONVERGE, async |_| {
        get(&e.policies, "b").await?.status
    })
    .await;
    // This control plane has no KubeArmor: only the NetworkPolicy engine acts.
    assert_eq!(
        (
            np_status.status.as_str(),
            np_status.number_of_adapter_policies,
            np_status.adapter_policies
        ),
        (
            "Created",
            1,
            Some(vec!["NetworkPolicy/b-dnsmanipulation".to_owned()])
        )
    );
    let si_status = eventually("intent status", CONVERGE, async |_| {
        get(&e.intents, &si).await?.status
    })
    .await;
    assert_eq!(
        (
            si_status.id.as_str(),
            si_status.action.as_str(),
            si_status.status.as_str()
        ),
        ("dnsManipulation", "Block", "Created")
    );
}

#[tokio::test]
async fn binding_first_waits_for_its_intent_and_reports_it_missing() {
    let e = env("binding-first").await;
    let si = unique("late");
    apply(
        &e.bindings,
        "b",
        &binding("b", &[&si], json!({"app": "web"})),
    )
    .await;
    let condition = eventually("IntentNotFound on the binding", CONVERGE, async |_| {
        let s = get(&e.bindings, "b").await?.status?;
        s.conditions
            .into_iter()
            .find(|c| c.reason == "IntentNotFound")
    })
    .await;
    assert!(condition.message.contains(&si), "{}", condition.message);
    assert!(get(&e.policies, "b").await.is_none());
    let status = get(&e.bindings, "b")
        .await
        .and_then(|b| b.status)
        .expect("status");
    assert_eq!(
        (
            status.nimbus_policy.as_str(),
            status.number_of_bound_intents
        ),
        ("", 0)
    );
    let raw = serde_json::to_value(&status).expect("json");
    assert_eq!(
        raw["nimbusPolicy"],
        json!(""),
        "written even when empty, as Nimbus does"
    );
    assert_eq!(raw["numberOfBoundIntents"], json!(0));

    apply(&e.intents, &si, &intent(&si, "swDeploymentTools", "Audit")).await;
    policy_with(&e, "b", &["swDeploymentTools"]).await;
}

#[tokio::test]
async fn intent_update_and_delete_propagate_to_the_policy() {
    let e = env("intent-changes").await;
    let a = create_intent(&e.client, "dnsManipulation", "Block").await;
    let b = create_intent(&e.client, "escapeToHost", "Block").await;
    apply(&e.bindings, "x", &binding("x", &[&a, &b], json!({}))).await;
    policy_with(&e, "x", &["dnsManipulation", "escapeToHost"]).await;

    // Updated intent → rule follows.
    apply(&e.intents, &a, &intent(&a, "dnsManipulation", "Audit")).await;
    eventually("rule action updated to Audit", CONVERGE, async |_| {
        let np = get(&e.policies, "x").await?;
        (np.spec.rules[0].rule.action == "Audit").then_some(())
    })
    .await;

    // Deleting one (not the last) drops its rule.
    delete(&e.intents, &a).await;
    policy_with(&e, "x", &["escapeToHost"]).await;

    // Deleting the last removes the policy and zeroes the status, and an Event says why.
    delete(&e.intents, &b).await;
    no_policy(&e, "x").await;
    let events: Api<Event> = Api::namespaced(e.client.clone(), e.ns.name());
    eventually(
        "a PolicyDeleted event on the binding",
        CONVERGE,
        async |_| {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|ev| {
                    ev.reason.as_deref() == Some("PolicyDeleted")
                        && ev.involved_object.name.as_deref() == Some("x")
                        && ev
                            .message
                            .as_deref()
                            .is_some_and(|m| m.contains("no longer wants it"))
                })
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn binding_updates_change_the_policy_and_deletion_cascades() {
    let e = env("binding-changes").await;
    let a = create_intent(&e.client, "dnsManipulation", "Block").await;
    let b = create_intent(&e.client, "unAuthorizedSaTokenAccess", "Block").await;
    apply(
        &e.bindings,
        "x",
        &binding("x", &[&a], json!({"app": "one"})),
    )
    .await;
    policy_with(&e, "x", &["dnsManipulation"]).await;

    apply(
        &e.bindings,
        "x",
        &binding("x", &[&b, &a], json!({"app": "two"})),
    )
    .await;
    policy_with(&e, "x", &["unAuthorizedSaTokenAccess", "dnsManipulation"]).await;
    let np = eventually("selector updated", CONVERGE, async |_| {
        get(&e.policies, "x")
            .await
            .filter(|np| app_label(np) == Some("two"))
    })
    .await;
    assert_eq!(np.spec.rules.len(), 2);

    delete(&e.bindings, "x").await;
    eventually(
        "policy garbage-collected with its binding",
        CONVERGE,
        async |_| get(&e.policies, "x").await.is_none().then_some(()),
    )
    .await;
}

#[tokio::test]
async fn hand_edits_are_reverted_and_hand_deletes_recreated() {
    let e = env("drift").await;
    let a = create_intent(&e.client, "dnsManipulation", "Block").await;
    apply(
        &e.bindings,
        "x",
        &binding("x", &[&a], json!({"app": "web"})),
    )
    .await;
    let original = policy_with(&e, "x", &["dnsManipulation"]).await;

    let edit = json!({"spec": {"rules": [{"id": "swDeploymentTools", "rule": {"action": "Audit"}}], "selector": {"matchLabels": {"app": "other"}}}});
    e.policies
        .patch("x", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .expect("hand edit");
    eventually("hand edit reverted", CONVERGE, async |_| {
        let np = get(&e.policies, "x").await?;
        (np.spec == original.spec).then_some(())
    })
    .await;

    delete(&e.policies, "x").await;
    let recreated = eventually("deleted policy re-created", CONVERGE, async |_| {
        get(&e.policies, "x")
            .await
            .filter(|np| np.uid() != original.uid())
    })
    .await;
    assert_eq!(recreated.spec, original.spec);
}

#[tokio::test]
async fn cel_subset_compiles_into_the_selector_and_unsupported_is_reported() {
    let e = env("cel").await;
    let a = create_intent(&e.client, "dnsManipulation", "Block").await;
    let with_cel = |cel: &str| {
        json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
            "metadata": {"name": "c"},
            "spec": {"intents": [{"name": a}], "selector": {"workloadSelector": null}, "cel": [cel]}
        })
    };
    apply(
        &e.bindings,
        "c",
        &with_cel(r#"labels["app"] == "nginx" && !(labels["tier"] in ["db"])"#),
    )
    .await;
    let np = policy_with(&e, "c", &["dnsManipulation"]).await;
    let selector = serde_json::to_value(&np.spec.selector).expect("json");
    assert_eq!(
        selector,
        json!({
            "matchLabels": {"app": "nginx"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]
        })
    );

    apply(
        &e.bindings,
        "c",
        &with_cel(r#"labels["app"].startsWith("ng")"#),
    )
    .await;
    let condition = eventually("InvalidSelector on the binding", CONVERGE, async |_| {
        let s = get(&e.bindings, "c").await?.status?;
        s.conditions
            .into_iter()
            .find(|c| c.reason == "InvalidSelector")
    })
    .await;
    assert!(
        condition.message.contains("startsWith"),
        "{}",
        condition.message
    );
    // What was in force stays in force.
    let kept = get(&e.policies, "c").await.expect("policy kept");
    assert_eq!(kept.spec, np.spec);
}

/// The `app` label a policy selects.
fn app_label(np: &NimbusPolicy) -> Option<&str> {
    np.spec
        .selector
        .match_labels
        .as_ref()
        .and_then(|l| l.get("app"))
        .map(String::as_str)
}
