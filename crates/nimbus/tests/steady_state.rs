//! The operator's request budget, counted where it cannot be mistaken: cold, it reads from its
//! caches only (no GET: the operator's own requests, counted on its client); with nothing
//! changing, resyncs make no write requests (counted by the apiserver itself), with leader
//! election on as the chart runs it (its lease timings), over four resync periods (`resync`,
//! the operator's `--resync`, shortened from its 5-minute default so that the test sees
//! several), the posture computing previews and policy reports; the lease renewals are counted
//! apart; and when the bindings are removed, it writes nothing and no request of it fails (the
//! garbage collector deletes what they generated: a status write there would find its object
//! gone, a 404).
//! Its own test binary, so no other test writes to the control plane meanwhile.

mod common;

use common::counted::{Sent, writes};
use common::{CONVERGE, apply, create_intent, unique};
use kube::Client;
use kube::api::Api;
use nimbus_api::{ALLOW_SENSITIVE_ANNOTATION, ClusterSecurityIntentBinding, SecurityIntentBinding};
use nimbus_testenv::eventually;
use serde_json::json;
use std::time::Duration;

const RESYNC: Duration = Duration::from_secs(2);

/// Write requests (create, update, patch, apply, delete) the apiserver served for Nimbus kinds
/// (status included), for the native objects engines generate and for policy reports; and for
/// Leases.
async fn operator_writes(client: &Client) -> (u64, u64) {
    let served = common::apiserver_requests(client).await;
    let writes = |resource: &dyn Fn(&str) -> bool| {
        (served.iter())
            .filter(|(series, _)| resource(series) && common::is_write(series))
            .map(|(_, count)| count)
            .sum::<u64>()
    };
    let ours = writes(&|l| {
        l.contains(r#"group="intent.security.nimbus.com""#)
            // The posture's policy reports.
            || l.contains(r#"group="openreports.io""#)
            || l.contains(r#"group="wgpolicyk8s.io""#)
            // Every engine's kinds, from their registration: a new one is counted too.
            || nimbus_core::engines::all_kinds().iter().any(|k| {
                l.contains(&format!(r#"resource="{}""#, k.plural))
                    && l.contains(r#"subresource="""#)
            })
    });
    let leases = writes(&|l| l.contains(r#"resource="leases""#));
    (ours, leases)
}

#[tokio::test]
async fn resyncs_with_nothing_changed_make_no_writes() {
    let cp = common::cluster_with_engines();
    let dir = tempfile::tempdir().expect("a directory");
    let cert = nimbus_testenv::serving_cert(&[]).expect("a certificate");
    std::fs::write(dir.path().join("tls.crt"), &cert.cert_pem).expect("tls.crt");
    std::fs::write(dir.path().join("tls.key"), &cert.key_pem).expect("tls.key");
    // Leader election as the chart configures it (charts/nimbus/values.yaml).
    let counted = common::run_counted_operator(
        cp,
        nimbus_operator::Config {
            resync: RESYNC,
            leader_election: Some(nimbus_operator::LeaderElection {
                namespace: "default".into(),
                lease_name: "nimbus-steady".into(),
                identity: "steady".into(),
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
            }),
            // The posture too, as the chart runs it: its previews and policy reports are writes.
            posture: Some(nimbus_operator::posture::Config {
                addr: ([127, 0, 0, 1], nimbus_testenv::free_port().expect("a port")).into(),
                certificate: nimbus_operator::posture::ServingCertificate {
                    cert_file: dir.path().join("tls.crt"),
                    key_file: dir.path().join("tls.key"),
                },
                reports: Default::default(),
            }),
            ..Default::default()
        },
    );
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("steady").await.expect("ns");
    // A workload, so that the posture has a report to keep.
    common::bare_pod(&client, ns.name(), "web").await;
    // One intent per engine: NetworkPolicy + KubeArmor, Kyverno, k8tls, RBAC.
    let si = create_intent(&client, "dnsManipulation", "Block").await;
    let escape = create_intent(&client, "escapeToHost", "Block").await;
    let coco = create_intent(&client, "cocoWorkload", "Block").await;
    let tls = unique("tls");
    let mut tls_intent = common::intent(&tls, "assessTLS", "Audit");
    tls_intent["spec"]["intent"]["params"] = json!({"external_addresses": ["example.org:443"]});
    let intents: Api<nimbus_api::SecurityIntent> = Api::all(client.clone());
    apply(&intents, &tls, &tls_intent).await;
    let sandbox = unique("sandbox");
    let mut sandbox_intent = common::intent(&sandbox, "namespaceSandbox", "Block");
    sandbox_intent["spec"]["intent"]["params"] = json!({"group": ["team-{namespace}"]});
    apply(&intents, &sandbox, &sandbox_intent).await;
    let all = [&si, &escape, &coco, &tls, &sandbox].map(|n| json!({ "name": n }));
    let sibs: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns.name());
    apply(
        &sibs,
        "b",
        &json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
            "metadata": {"name": "b"}, "spec": {"intents": all, "selector": {}}
        }),
    )
    .await;
    let csibs: Api<ClusterSecurityIntentBinding> = Api::all(client.clone());
    let name = unique("all");
    apply(&csibs, &name, &json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
        "metadata": {"name": name, "annotations": {ALLOW_SENSITIVE_ANNOTATION: "assessTLS,namespaceSandbox"}},
        "spec": {"intents": all, "selector": {"nsSelector": {"matchNames": ["*"]}}}
    }))
    .await;
    eventually("both bindings converged", CONVERGE, async |_| {
        let sib = sibs.get_opt("b").await.ok()??.status?;
        let csib = csibs.get_opt(&name).await.ok()??.status?;
        (sib.number_of_bound_intents == 5 && csib.number_of_nimbus_policies >= 3).then_some(())
    })
    .await;
    let policies: Api<nimbus_api::NimbusPolicy> = Api::namespaced(client.clone(), ns.name());
    let cluster_policies: Api<nimbus_api::ClusterNimbusPolicy> = Api::all(client.clone());
    eventually(
        "every engine's native policies generated",
        CONVERGE,
        async |_| {
            let np = policies.get_opt("b").await.ok()??.status?;
            let cwnp = cluster_policies.get_opt(&name).await.ok()??.status?;
            // dns: NetworkPolicy + KSP; escapeToHost: 3 KSPs + Kyverno; coco: 2 Kyverno (a
            // sandbox is refused through a namespaced binding). The cluster policy: 2
            // ClusterPolicies + the k8tls CronJob; its namespace policies hold the RoleBindings.
            (np.number_of_adapter_policies == 8 && cwnp.number_of_adapter_policies == 3)
                .then_some(())
        },
    )
    .await;
    let reports = Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        ns.name(),
        &nimbus_core::reports::OPEN_REPORT.api_resource(),
    );
    eventually("the web pod's policy report", CONVERGE, async |_| {
        reports.get_opt("nimbus-pod-web").await.ok()?.map(drop)
    })
    .await;
    // Cold: everything the operator computed came from its caches. (Lease reads are the leader
    // election's; discovery, of which engines are served, is not of a resource.)
    let cold = counted.snapshot();
    let reads = cold.matching(|r| r.verb == "GET" && r.is_resource() && r.resource != "leases");
    assert!(
        reads.is_empty(),
        "GETs while converging cold:\n{}",
        reads.join("\n")
    );
    // (The first election reads a lease that does not exist yet: a 404.)
    let refused = cold.matching(|r| failed(r) && !ours_anyway(r));
    assert!(
        refused.is_empty(),
        "failed requests while converging cold:\n{}",
        refused.join("\n")
    );
    println!("cold: the operator's requests\n{cold}");

    // Let the reactions to our own writes settle, then count across several resyncs.
    tokio::time::sleep(RESYNC * 3).await;
    let (before, leases_before) = operator_writes(&client).await;
    assert!(
        before > 0,
        "the metric must see the operator's earlier writes"
    );
    // Meanwhile the posture recomputes (it watches Services) without a result changing: it
    // must not send its reports or previews again.
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "default");
    for round in 0..4 {
        let name = format!("steady-{round}");
        apply(
            &services,
            &name,
            &json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}),
        )
        .await;
        tokio::time::sleep(RESYNC).await;
    }
    let (after, leases_after) = operator_writes(&client).await;
    assert_eq!(
        after,
        before,
        "{} write requests at steady state",
        after - before
    );
    // The leader renews its lease meanwhile: election is on, and that is all it writes.
    let renewals = leases_after - leases_before;
    assert!(renewals > 0, "no lease renewal in {:?}", RESYNC * 4);
    println!(
        "steady state over {:?} (4 resyncs), leader election on: 0 writes, {renewals} lease writes",
        RESYNC * 4
    );

    // The bindings go; the garbage collector deletes their policies, then the policies' native
    // objects, each deletion an event for the operator.
    let all_policies: Api<nimbus_api::NimbusPolicy> = Api::all(client.clone());
    let list = Default::default();
    let owners: Vec<String> = (all_policies
        .list(&list)
        .await
        .expect("policies")
        .items
        .iter())
    .map(|p| p.metadata.uid.clone())
    .chain(
        cluster_policies
            .list(&list)
            .await
            .expect("cluster policies")
            .items
            .iter()
            .map(|p| p.metadata.uid.clone()),
    )
    .flatten()
    .collect();
    let before = counted.snapshot();
    common::delete(&sibs, "b").await;
    common::delete(&csibs, &name).await;
    common::gone(&policies, "b").await;
    common::gone(&cluster_policies, &name).await;
    eventually(
        "the policies' native objects gone",
        CONVERGE,
        async |seen| {
            let left = owned_by(&client, &owners).await;
            *seen = format!("{left:?}");
            left.is_empty().then_some(())
        },
    )
    .await;
    // Reactions to the last deletions, and a resync or two.
    tokio::time::sleep(RESYNC * 2).await;
    let removal = counted.snapshot().since(&before);
    println!("removal: the operator's requests\n{removal}");
    // (The posture's policy reports follow the workloads' coverage, which did change.)
    let reports = |r: &Sent| ["reports", "policyreports"].contains(&r.resource.as_str());
    let unwanted =
        removal.matching(|r| (failed(r) || writes(&r.verb)) && !ours_anyway(r) && !reports(r));
    assert!(
        unwanted.is_empty(),
        "writes or failed requests while the bindings' objects were deleted:\n{}",
        unwanted.join("\n")
    );
}

/// A request the API server refused (or none answered).
fn failed(r: &Sent) -> bool {
    !(200..300).contains(&r.code)
}

/// The leader election's requests, made whatever happens.
fn ours_anyway(r: &Sent) -> bool {
    r.resource == "leases"
}

/// The native objects (of every served engine kind) controlled by one of `owners`.
async fn owned_by(client: &Client, owners: &[String]) -> Vec<String> {
    let mut left = Vec::new();
    for kind in nimbus_core::engines::all_kinds() {
        let api: Api<kube::api::DynamicObject> =
            Api::all_with(client.clone(), &kind.api_resource());
        // A kind not served has nothing.
        let Ok(list) = api.list(&Default::default()).await else {
            continue;
        };
        let owned = list.items.into_iter().filter(|o| {
            (o.metadata.owner_references.iter().flatten()).any(|r| owners.contains(&r.uid))
        });
        left.extend(owned.map(|o| format!("{} {:?}", kind.kind, o.metadata.name)));
    }
    left
}
