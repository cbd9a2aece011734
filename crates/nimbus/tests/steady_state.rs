//! With nothing changing, resyncs make no write requests (counted by the apiserver itself).
//! Its own test binary, so no other test writes to the control plane meanwhile.

mod common;

use common::{apply, create_intent, eventually, unique};
use kube::Client;
use kube::api::Api;
use nimbus_api::{ClusterSecurityIntentBinding, SecurityIntentBinding};
use serde_json::json;
use std::time::Duration;

const RESYNC: Duration = Duration::from_secs(2);

/// Write requests (create, update, patch, apply, delete) the apiserver served for Nimbus kinds.
async fn nimbus_writes(client: &Client) -> u64 {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client
        .request_text(request)
        .await
        .expect("apiserver /metrics");
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains(r#"group="intent.security.nimbus.com""#)
        })
        .filter(|l| {
            ["POST", "PUT", "PATCH", "APPLY", "DELETE"]
                .iter()
                .any(|v| l.contains(&format!(r#"verb="{v}""#)))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test]
async fn resyncs_with_nothing_changed_make_no_writes() {
    let cp = common::operator(RESYNC);
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("steady").await.expect("ns");
    let si = create_intent(&client, "dnsManipulation", "Block").await;
    let sibs: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    apply(
        &sibs,
        "b",
        &json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
            "metadata": {"name": "b"}, "spec": {"intents": [{"name": si}], "selector": {}}
        }),
    )
    .await;
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(client.clone());
    let name = unique("all");
    apply(&csibs, &name, &json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": name}, "spec": {"intents": [{"name": si}], "selector": {"nsSelector": {"matchNames": ["*"]}}}
    }))
    .await;
    eventually("both bindings converged", || async {
        let sib = sibs.get_opt("b").await.ok()??.status?;
        let csib = csibs.get_opt(&name).await.ok()??.status?;
        (sib.number_of_bound_intents == 1 && csib.number_of_nimbus_policies >= 3).then_some(())
    })
    .await;
    // Let the reactions to our own writes settle, then count across several resyncs.
    tokio::time::sleep(RESYNC * 3).await;
    let before = nimbus_writes(&client).await;
    assert!(
        before > 0,
        "the metric must see the operator's earlier writes"
    );
    tokio::time::sleep(RESYNC * 4).await;
    let after = nimbus_writes(&client).await;
    assert_eq!(
        after,
        before,
        "{} write requests at steady state",
        after - before
    );
}
