//! High availability with real operator processes (`nimbus run --leader-elect`): one leader
//! writes, standbys keep warm caches and do nothing, a killed leader is replaced after the lease
//! expires, a terminated one hands over at once. Also checks `/metrics` and `/readyz`.

mod common;

use common::replica::{Replica, new_holder};
use common::{CONVERGE, apply, create_intent, get};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use nimbus_api::{NimbusPolicy, SecurityIntentBinding};
use nimbus_testenv::eventually;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

fn start(name: &'static str, namespace: &str, kubeconfig: &Path, dir: &Path) -> Replica {
    let election = ["--leader-elect", "--leader-elect-namespace", namespace];
    Replica::start(name, kubeconfig, dir, &election)
}

/// Standbys must not have reconciled anything.
async fn assert_standbys_idle(replicas: &[Replica], leader: &str) {
    for r in replicas.iter().filter(|r| r.name != leader) {
        assert_eq!(
            r.metric("nimbus_reconciles_total", "").await,
            0.0,
            "standby {} reconciled",
            r.name
        );
        assert_eq!(r.metric("nimbus_leader", "").await, 0.0, "{}", r.name);
    }
}

fn binding(intents: &[&str], app: &str) -> serde_json::Value {
    let refs: Vec<_> = intents.iter().map(|n| json!({ "name": n })).collect();
    json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
        "metadata": {"name": "b"},
        "spec": {"intents": refs, "selector": {"workloadSelector": {"matchLabels": {"app": app}}}}
    })
}

#[tokio::test]
async fn one_leader_writes_and_standbys_take_over() {
    let cp = common::cluster();
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("failover").await.expect("namespace");
    let dir = tempfile::tempdir().expect("log dir");
    let mut replicas: Vec<Replica> = ["replica-0", "replica-1", "replica-2"]
        .into_iter()
        .map(|name| start(name, ns.name(), cp.kubeconfig_path(), dir.path()))
        .collect();
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());

    // Every replica becomes ready (caches synced), leader or not.
    for r in &replicas {
        eventually(&format!("{} to be ready", r.name), CONVERGE, async |seen| {
            let readyz = r.ready().await;
            if readyz.is_ok() {
                return Some(());
            }
            *seen = format!("{readyz:?}; its log:\n{}", r.process.output());
            None
        })
        .await;
    }
    let first = new_holder(&leases, None, Duration::from_secs(30)).await;

    let dns = create_intent(&client, "dnsManipulation", "Block").await;
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    let policies: Api<NimbusPolicy> = Api::namespaced(client.clone(), ns.name());
    apply(&bindings, "b", &binding(&[&dns], "web")).await;
    eventually("the leader creates the policy", CONVERGE, async |_| {
        get(&policies, "b").await.map(drop)
    })
    .await;
    assert_standbys_idle(&replicas, &first).await;

    // The leader's reconcile metrics move with a change.
    let leader = replicas.iter().find(|r| r.name == first).expect("leader");
    assert_eq!(leader.metric("nimbus_leader", "").await, 1.0);
    let filter = r#"controller="binding""#;
    let before = leader.metric("nimbus_reconciles_total", filter).await;
    apply(&bindings, "b", &binding(&[&dns], "api")).await;
    eventually("binding reconciles counted", CONVERGE, async |_| {
        (leader.metric("nimbus_reconciles_total", filter).await > before).then_some(())
    })
    .await;
    assert!(
        leader
            .metric("nimbus_reconcile_duration_seconds_count", filter)
            .await
            > 0.0
    );
    // The NetworkPolicy is applied by the policy controller, after the binding's reconcile.
    eventually("native objects applied counted", CONVERGE, async |_| {
        let applied = r#"engine="netpol""#;
        (leader
            .metric("nimbus_native_objects_applied_total", applied)
            .await
            > 0.0)
            .then_some(())
    })
    .await;

    // SIGKILL: the lease runs out before a standby takes over.
    let killed = Instant::now();
    replicas
        .iter_mut()
        .find(|r| r.name == first)
        .expect("leader")
        .process
        .kill();
    let second = new_holder(&leases, Some(&first), Duration::from_secs(40)).await;
    let after_kill = killed.elapsed();
    replicas.retain(|r| r.name != first);
    let sw = create_intent(&client, "swDeploymentTools", "Block").await;
    apply(&bindings, "b", &binding(&[&dns, &sw], "api")).await;
    eventually(
        "the new leader reconciles a change made after the kill",
        CONVERGE,
        async |_| (get(&policies, "b").await?.spec.rules.len() == 2).then_some(()),
    )
    .await;
    assert_standbys_idle(&replicas, &second).await;

    // SIGTERM: the leader finishes its work and releases the lease.
    let terminated = Instant::now();
    let leaving = replicas
        .iter_mut()
        .find(|r| r.name == second)
        .expect("leader");
    leaving.process.terminate();
    let third = new_holder(&leases, Some(&second), Duration::from_secs(15)).await;
    let after_term = terminated.elapsed();
    let leaving = replicas
        .iter_mut()
        .find(|r| r.name == second)
        .expect("leader");
    eventually("the terminated leader to exit", CONVERGE, async |_| {
        leaving.process.has_exited().then_some(())
    })
    .await;
    apply(&bindings, "b", &binding(&[&sw], "api")).await;
    eventually("the third leader reconciles", CONVERGE, async |_| {
        (get(&policies, "b").await?.spec.rules.len() == 1).then_some(())
    })
    .await;

    eprintln!("handover after SIGKILL: {after_kill:?}; after SIGTERM: {after_term:?}");
    assert!(
        after_kill >= Duration::from_secs(10),
        "a standby took over a killed leader's lease before it could expire: {after_kill:?}"
    );
    assert!(
        after_term < Duration::from_secs(5),
        "handover on SIGTERM took {after_term:?}"
    );
    assert_ne!(third, second);
}
