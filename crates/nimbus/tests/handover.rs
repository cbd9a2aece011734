//! The engine handover the book describes (docs/src/intents-and-engines.md), driven by Kyverno's CRDs rather than by the
//! preference: when they go, the admission engine takes over a cluster binding's escapeToHost;
//! when they come back, Kyverno's policy is written first and the admission engine's objects
//! are kept until it is 30 s old and Kyverno reports it ready, then pruned.
//!
//! A binary of its own: it deletes Kyverno's CRDs on its control plane. No Kyverno runs here:
//! the test writes the `Ready` condition Kyverno would.

mod common;

use common::CONVERGE;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use nimbus_api::{ClusterNimbusPolicy, ClusterSecurityIntentBinding};
use nimbus_core::engines::{KYVERNO_CLUSTER_POLICY, VALIDATING_ADMISSION_POLICY};
use nimbus_testenv::eventually;
use nimbus_testenv::upstream::{KYVERNO_CLUSTER_POLICY as CLUSTER_POLICY_CRD, KYVERNO_POLICY};
use serde_json::json;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What the book promises (docs/src/intents-and-engines.md): the old engine's objects are kept until the new ones are 30 s old
/// (not the constant the code uses, so that changing it fails here).
const HANDOVER: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kyverno_crds_going_and_coming_back_hand_over_and_back_after_30_seconds() {
    // Kyverno's CRDs before the operator starts, so that it finds Kyverno installed from the
    // first (the admission engine writes nothing then).
    let client = common::cluster().client().expect("client");
    for crd in [KYVERNO_POLICY, CLUSTER_POLICY_CRD] {
        common::install_engine_crd(&client, crd).await;
    }
    let cp = common::operator(Duration::from_secs(3600));
    let ns = cp.test_namespace("handover").await.expect("namespace");
    let intent = common::create_intent(&client, "escapeToHost", "Block").await;
    let csib = common::unique("handover");
    let bindings: Api<ClusterSecurityIntentBinding> = Api::all(client.clone());
    let body = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1",
        "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": csib},
        "spec": {
            "intents": [{"name": intent}],
            "selector": {"nsSelector": {"matchNames": [ns.name()]},
                         "workloadSelector": {"matchLabels": {"app": "web"}}}
        }
    });
    common::apply(&bindings, &csib, &body).await;
    let name = format!("{csib}-escapetohost");
    let policies: Api<ClusterNimbusPolicy> = Api::all(client.clone());
    let lists = async |want: &[String], within: Duration| {
        eventually(&format!("{csib} to list {want:?}"), within, async |seen| {
            let status = policies.get(&csib).await.ok()?.status?;
            let entries = status.adapter_policies.unwrap_or_default();
            *seen = format!("{entries:?}");
            (entries == want).then_some(())
        })
        .await;
    };
    let kyverno_entry = format!("KyvernoClusterPolicy/{name}");
    let admission_entry = format!("ValidatingAdmissionPolicy/{name}");
    lists(std::slice::from_ref(&kyverno_entry), CONVERGE).await;
    let vap = async || common::native(&client, &VALIDATING_ADMISSION_POLICY, None, &name).await;
    assert!(vap().await.is_none(), "admission writes beside Kyverno");

    // Kyverno's CRDs go: the admission engine takes over.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in ["clusterpolicies.kyverno.io", "policies.kyverno.io"] {
        crds.delete(crd, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {crd}: {e}"));
        eventually(&format!("{crd} gone"), CONVERGE, async |_| {
            crds.get_opt(crd).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    lists(std::slice::from_ref(&admission_entry), CONVERGE).await;
    assert!(vap().await.is_some(), "no ValidatingAdmissionPolicy {name}");

    // They come back: Kyverno's policy first, the admission engine's kept meanwhile.
    for crd in [KYVERNO_POLICY, CLUSTER_POLICY_CRD] {
        common::install_engine_crd(&client, crd).await;
    }
    let cluster_policies: Api<DynamicObject> =
        Api::all_with(client.clone(), &KYVERNO_CLUSTER_POLICY.api_resource());
    let created = eventually(
        "Kyverno's ClusterPolicy written again",
        CONVERGE,
        async |_| cluster_policies.get_opt(&name).await.ok()?,
    )
    .await;
    assert!(vap().await.is_some(), "pruned before Kyverno's policy acts");
    // Kyverno reports it ready at once: only its age holds the admission engine's back now.
    let ready = json!({"status": {"conditions": [{
        "type": "Ready", "status": "True", "reason": "Succeeded", "message": "Ready",
        "lastTransitionTime": "2026-01-01T00:00:00Z"
    }]}});
    cluster_policies
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .expect("the ClusterPolicy's Ready condition");
    // Its age, by the API server's clock (whole seconds, as the operator reads it; the same
    // machine's clock as this test's).
    let created = created
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("a creation timestamp")
        .0
        .as_second();
    let age = || {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        Duration::from_secs_f64((now - created as f64).max(0.0))
    };
    let pruned = loop {
        let present = vap().await.is_some();
        let age = age();
        if !present {
            break age;
        }
        assert!(
            age < HANDOVER + CONVERGE,
            "the ValidatingAdmissionPolicy still there when Kyverno's policy is {age:?} old"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!("the admission engine's objects pruned when Kyverno's policy was {pruned:?} old");
    // Half a second for the clocks' rounding.
    assert!(
        pruned + Duration::from_millis(500) >= HANDOVER,
        "the admission engine's objects pruned when Kyverno's policy was {pruned:?} old"
    );
    lists(&[kyverno_entry], CONVERGE).await;
}
