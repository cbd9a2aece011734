//! Engines left to external adapters (`nimbus run --disable-engines …`, the process the book
//! documents in docs/src/concepts.md): the operator keeps running with no CRD-backed engine at all, and counts and keeps
//! what an external adapter reports in a policy's status (Nimbus's adapter contract) instead of
//! claiming the intent is not enforced.

mod common;

use common::{CONVERGE, apply, create_intent, get};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, PostParams};
use nimbus_api::{NimbusPolicy, SecurityIntentBinding};
use nimbus_testenv::eventually;
use nimbus_testenv::{Child, free_port, http_get};
use serde_json::json;
use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

#[tokio::test]
async fn with_engines_left_to_adapters_the_operator_runs_and_credits_what_they_report() {
    let cp = common::cluster();
    let client = cp.client().expect("client");
    let dir = tempfile::tempdir().expect("log dir");
    let health = free_port().expect("port");
    let args: Vec<String> = [
        "run",
        "--disable-engines",
        "netpol,kubearmor,kyverno",
        "--health-addr",
        &format!("127.0.0.1:{health}"),
        "--metrics-addr",
        &format!("127.0.0.1:{}", free_port().expect("port")),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut operator = Child::spawn(
        "operator",
        Path::new(env!("CARGO_BIN_EXE_nimbus")),
        &args,
        &[
            ("KUBECONFIG", cp.kubeconfig_path().as_os_str()),
            ("NIMBUS_LOG", OsStr::new("info")),
        ],
        dir.path(),
    )
    .expect("starting the operator");
    eventually("/readyz", CONVERGE, async |_| {
        http_get(health, "/readyz")
            .await
            .filter(|(code, _)| *code == 200)
    })
    .await;

    let ns = cp.test_namespace("adapters").await.expect("ns");
    let dns = create_intent(&client, "dnsManipulation", "Block").await;
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    let policies: Api<NimbusPolicy> = Api::namespaced(client.clone(), ns.name());
    apply(
        &bindings,
        "b",
        &json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
            "metadata": {"name": "b"},
            "spec": {"intents": [{"name": dns}], "selector": {"workloadSelector": {"matchLabels": {"app": "web"}}}}
        }),
    )
    .await;
    let before = eventually("EngineDisabled on the policy", CONVERGE, async |_| {
        let s = get(&policies, "b").await?.status?;
        (s.conditions.first()?.reason == "EngineDisabled").then_some(s)
    })
    .await;
    assert_eq!(before.conditions[0].status, "False");
    assert!(
        before.conditions[0].message.contains("not enforced"),
        "{:?}",
        before.conditions
    );

    // What Nimbus's netpol adapter does: create its NetworkPolicy, then append it to the
    // policy's status with a plain update.
    let netpols: Api<NetworkPolicy> = Api::namespaced(client.clone(), ns.name());
    apply(
        &netpols,
        "b-dnsmanipulation",
        &json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "b-dnsmanipulation"},
                "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"]}}),
    )
    .await;
    let mut np = get(&policies, "b").await.expect("policy");
    let status = np.status.as_mut().expect("status");
    status.adapter_policies = Some(vec!["NetworkPolicy/b-dnsmanipulation".into()]);
    status.number_of_adapter_policies = 1;
    let params = PostParams {
        field_manager: Some("nimbus-netpol-adapter".into()),
        ..Default::default()
    };
    policies
        .replace_status("b", &params, &np)
        .await
        .expect("adapter status update");

    let after = eventually("the adapter's entry credited", CONVERGE, async |_| {
        let s = get(&policies, "b").await?.status?;
        (s.conditions.first()?.status == "True").then_some(s)
    })
    .await;
    assert_eq!(after.number_of_adapter_policies, 1);
    assert_eq!(
        after.adapter_policies.as_deref(),
        Some(&["NetworkPolicy/b-dnsmanipulation".to_owned()][..])
    );
    assert!(
        after.conditions[0].message.contains("external adapter"),
        "{:?}",
        after.conditions
    );
    eventually("the binding Ready", CONVERGE, async |_| {
        let c = get(&bindings, "b")
            .await?
            .status?
            .conditions
            .into_iter()
            .next()?;
        (c.status == "True").then_some(())
    })
    .await;

    // Only a signal ends `nimbus run`.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !operator.has_exited(),
        "operator exited:\n{}",
        operator.output()
    );
    operator.terminate();
    for _ in 0..100 {
        if operator.has_exited() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the operator did not stop on SIGTERM:\n{}",
        operator.output()
    );
}
