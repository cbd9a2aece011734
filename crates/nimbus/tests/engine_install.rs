//! An engine whose CRDs are missing is reported, and starts working as soon as they are
//! installed. Its own test binary: it installs CRDs into its own control plane mid-test.

mod common;

use common::{CONVERGE, apply, binding, create_intent, get, install_engine_crd, native};
use nimbus_core::engines::KUBEARMOR_POLICY;
use nimbus_testenv::eventually;
use serde_json::json;

#[tokio::test]
async fn a_missing_engine_is_reported_until_its_crd_is_installed() {
    let common::Env {
        client,
        ns,
        bindings,
        policies,
        ..
    } = common::env("install").await;
    let si = create_intent(&client, "swDeploymentTools", "Block").await;
    apply(&bindings, "b", &binding("b", &[&si], json!({"app": "x"}))).await;

    for (what, conditions) in [
        (
            "binding",
            eventually("EngineNotInstalled on the binding", CONVERGE, async |_| {
                let c = get(&bindings, "b").await?.status?.conditions;
                (c.first()?.reason == "EngineNotInstalled").then_some(c)
            })
            .await,
        ),
        (
            "policy",
            eventually("EngineNotInstalled on the policy", CONVERGE, async |_| {
                let c = get(&policies, "b").await?.status?.conditions;
                (c.first()?.reason == "EngineNotInstalled").then_some(c)
            })
            .await,
        ),
    ] {
        assert_eq!(conditions[0].status, "False", "{what}");
        assert!(
            conditions[0].message.contains("kubearmor (not installed)"),
            "{what}: {}",
            conditions[0].message
        );
    }
    assert!(
        native(
            &client,
            &KUBEARMOR_POLICY,
            Some(ns.name()),
            "b-swdeploymenttools"
        )
        .await
        .is_none()
    );

    install_engine_crd(&client, nimbus_testenv::upstream::KUBEARMOR_POLICY).await;
    eventually(
        "the KubeArmorPolicy once the CRD is installed",
        CONVERGE,
        async |_| {
            native(
                &client,
                &KUBEARMOR_POLICY,
                Some(ns.name()),
                "b-swdeploymenttools",
            )
            .await
        },
    )
    .await;
    let status = eventually("the policy ready with its entry", CONVERGE, async |_| {
        let s = get(&policies, "b").await?.status?;
        (s.conditions.first()?.status == "True").then_some(s)
    })
    .await;
    assert_eq!(
        status.adapter_policies,
        Some(vec!["KubeArmorPolicy/b-swdeploymenttools".to_owned()])
    );
    eventually("the binding ready", CONVERGE, async |_| {
        let c = get(&bindings, "b").await?.status?.conditions;
        (c.first()?.status == "True").then_some(())
    })
    .await;
}
