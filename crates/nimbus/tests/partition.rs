//! Leader election under a real network partition: the leader's link to kube-apiserver goes
//! through a loopback proxy that stops forwarding without closing anything. A binary of its
//! own, so that no other test's objects give the cut-off leader work in flight.

mod common;

use common::replica::{Replica, holder, new_holder};
use common::{CONVERGE, apply, binding, create_intent, get};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use nimbus_api::{NimbusPolicy, SecurityIntentBinding};
use nimbus_testenv::eventually;
use serde_json::json;
use std::time::{Duration, Instant};

/// A real partition between the leader and kube-apiserver (a loopback proxy that stops
/// forwarding without closing anything): the leader stops leading before the standby can take
/// the lease, starts no write while cut off or after the link heals (the standby holds the lease
/// by then), and the standby does the work.
#[tokio::test]
async fn a_partitioned_leader_stops_before_the_standby_takes_over() {
    let cp = common::cluster();
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("partition").await.expect("namespace");
    let dir = tempfile::tempdir().expect("log dir");
    let apiserver = cp
        .config()
        .cluster_url
        .port_u16()
        .expect("the API server's port");
    let link = common::partition::Partition::start(apiserver);
    let behind = link.kubeconfig(
        cp.kubeconfig_path(),
        &dir.path().join("partitioned.kubeconfig"),
    );
    let timings = [
        "--leader-elect",
        "--leader-elect-namespace",
        ns.name(),
        "--leader-elect-lease-duration",
        "6s",
        "--leader-elect-renew-deadline",
        "4s",
        "--leader-elect-retry-period",
        "500ms",
    ];
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let leader = Replica::start("partitioned", &behind, dir.path(), &timings);
    assert_eq!(
        new_holder(&leases, None, Duration::from_secs(30)).await,
        "partitioned"
    );
    let standby = Replica::start("standby", cp.kubeconfig_path(), dir.path(), &timings);
    eventually("the standby to be ready", CONVERGE, async |seen| {
        let ready = standby.ready().await;
        *seen = format!("{ready:?}");
        ready.ok()
    })
    .await;
    let writes = async |r: &Replica| {
        r.metric("nimbus_native_objects_applied_total", "").await
            + r.metric("nimbus_reconciles_total", "").await
    };

    link.cut();
    let cut = Instant::now();
    // Work that needs doing: only the standby can see it.
    let dns = create_intent(&client, "dnsManipulation", "Block").await;
    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    apply(
        &bindings,
        "b",
        &binding("b", &[&dns], json!({"app": "web"})),
    )
    .await;
    // The leader's own view, read from its metrics (not through the cut link), against the
    // lease as kube-apiserver holds it.
    let mut stopped = None;
    let mut written_when_stopped = 0.0;
    let taken = loop {
        if stopped.is_none() && leader.metric("nimbus_leader", "").await == 0.0 {
            stopped = Some(cut.elapsed());
            written_when_stopped = writes(&leader).await;
        }
        if holder(&leases).await.as_deref() == Some("standby") {
            break cut.elapsed();
        }
        assert!(
            cut.elapsed() < Duration::from_secs(30),
            "the standby never took over"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let stopped = stopped.unwrap_or_else(|| {
        panic!(
            "the partitioned leader still leads {taken:?} after the cut, when the standby took over"
        )
    });
    eprintln!("cut off: stopped leading after {stopped:?}, standby took over after {taken:?}");
    assert!(stopped < taken, "stopped {stopped:?}, taken over {taken:?}");
    // The leader last renewed at most one retry period (500 ms) before the cut: it stops within
    // the renew deadline (4 s) of that renewal, and the standby may take the lease only once the
    // lease (6 s) has run out since then. One second of slack for a busy machine, on the
    // side where lateness is harmless.
    assert!(
        stopped < Duration::from_secs(5),
        "the partitioned leader led {stopped:?} after the cut (renew deadline 4 s)"
    );
    assert!(
        taken >= Duration::from_millis(5_500),
        "the standby took the lease {taken:?} after the cut, before the 6 s lease could run out"
    );

    let policies: Api<NimbusPolicy> = Api::namespaced(client.clone(), ns.name());
    eventually("the standby creates the policy", CONVERGE, async |_| {
        get(&policies, "b").await.map(drop)
    })
    .await;
    link.heal();
    // Healed, the old leader sees the standby holding the lease and stays a standby.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(leader.metric("nimbus_leader", "").await, 0.0);
    assert_eq!(holder(&leases).await.as_deref(), Some("standby"));
    assert_eq!(
        writes(&leader).await,
        written_when_stopped,
        "the partitioned leader reconciled or wrote after it stopped leading"
    );
}
