//! Exceptions naming workloads (`spec.workloads`), decided by the real engines: kube-apiserver's
//! admission policies and Kyverno v1.19.1 in its CEL kinds. escapeToHost (baseline) is bound to
//! `app: web`; an exception selecting `app: web` names Deployment `agent`. The named privileged
//! Deployment is admitted and kube-controller-manager's ReplicaSet creates its pods (each
//! admitted by its owner's name); its sibling with the same labels, unnamed, is refused, and so
//! is a pod claiming a ReplicaSet of the sibling or no owner at all. Kyverno's legacy kinds
//! cannot name a pod by its workload: there the named Deployment stays refused.

use super::{active, admitted, privileged_pod};
use crate::common::{CONVERGE, apply, unique};
use crate::unbind_cluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp, Unit};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use nimbus_api::SecurityIntentException;
use nimbus_core::engines::KyvernoApi;
use nimbus_testenv::{ControlPlane, eventually};
use serde_json::json;

/// A Deployment `name` of one privileged pod labelled `app: web`.
fn deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web", "workload": name}},
            "template": {
                "metadata": {"labels": {"app": "web", "workload": name}},
                "spec": {"containers": [crate::kyverno::container(json!({"privileged": true}))]},
            },
        },
    }))
    .expect("deployment")
}

/// `Ok` when the API server admits Deployment `name` (dry run), `Err` with its refusal.
async fn deployment_admitted(client: &Client, ns: &str, name: &str) -> Result<(), String> {
    admitted(
        &Api::<Deployment>::namespaced(client.clone(), ns),
        &deployment(name),
    )
    .await
}

/// `Ok` when the API server admits a privileged pod labelled `app: web` whose controller is the
/// ReplicaSet `replica_set` (dry run; the owner need not exist), `Err` with its refusal.
async fn pod_of(client: &Client, ns: &str, replica_set: &str) -> Result<(), String> {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": format!("{replica_set}-"),
            "labels": {"app": "web"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replica_set,
                "uid": "00000000-0000-0000-0000-000000000001", "controller": true,
            }],
        },
        "spec": {"containers": [crate::kyverno::container(json!({"privileged": true}))]},
    }))
    .expect("pod");
    admitted(&Api::<Pod>::namespaced(client.clone(), ns), &pod).await
}

/// Binds escapeToHost to `app: web` in a namespace of `cp`, waits until Deployment `agent` is
/// refused, and creates the exception naming it (lasting an hour: expiry is the other tests'
/// subject). Returns the client, the namespace, the binding and the exception's name.
async fn named_exception(
    cp: &ControlPlane,
    engine: &str,
) -> (Client, nimbus_testenv::TestNamespace, String, String) {
    let (client, ns, si, csib) = super::escape_bound(cp, "exn").await;
    eventually(
        &format!("{engine}: the privileged Deployment refused"),
        CONVERGE,
        async |seen| {
            let admitted = deployment_admitted(&client, ns.name(), "agent").await;
            *seen = format!("{admitted:?}");
            admitted.is_err().then_some(())
        },
    )
    .await;
    let exceptions = Api::<SecurityIntentException>::namespaced(client.clone(), ns.name());
    let name = unique("vendor");
    let expires_at = Timestamp::now()
        .round(Unit::Second)
        .expect("rounded")
        .checked_add(SignedDuration::from_hours(1))
        .expect("expiry");
    let exception = json!({
        "apiVersion": "exceptions.security.nimbus.com/v1alpha1", "kind": "SecurityIntentException",
        "metadata": {"name": name},
        "spec": {
            "binding": {"kind": "ClusterSecurityIntentBinding", "name": csib},
            "intents": [si],
            "selector": {"matchLabels": {"app": "web"}},
            "workloads": [{"kind": "Deployment", "name": "agent"}],
            "reason": "the vendor's agent until its 2.4 release",
            "expiresAt": expires_at.to_string(),
        }
    });
    apply(&exceptions, &name, &exception).await;
    eventually(
        &format!("{engine}: the exception Active"),
        CONVERGE,
        async |seen| {
            let state = active(&exceptions, &name).await;
            *seen = format!("{state:?}");
            (state == Some(("True".into(), "Active".into()))).then_some(())
        },
    )
    .await;
    (client, ns, csib, name)
}

async fn only_the_named_workload_is_let_out(cp: &ControlPlane, engine: &str) {
    let (client, ns, csib, _) = named_exception(cp, engine).await;
    let ns = ns.name();
    // The named Deployment is created for real by the first request admitted, not after an
    // admitted dry run: Kyverno 1.19.1 compiles a CEL policy with its exceptions in two
    // controllers at once (its ValidatingPolicy and NamespacedValidatingPolicy controllers
    // share one reconciler, and both enqueue the policy on a PolicyException event), and the
    // last to finish wins: one begun just before the PolicyException existed can replace, for
    // one compilation, the policy that honours it (`pkg/cel/policies/vpol/engine/provider.go`).
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    eventually(
        &format!("{engine}: the named Deployment admitted"),
        CONVERGE,
        async |seen| {
            let created = deployments
                .create(&PostParams::default(), &deployment("agent"))
                .await;
            *seen = format!("{:?}", created.as_ref().err());
            match created {
                Ok(_) => Some(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Some(()),
                Err(_) => None,
            }
        },
    )
    .await;
    let sibling = deployments
        .create(&PostParams::default(), &deployment("agent-canary"))
        .await;
    assert!(
        sibling.is_err(),
        "{engine}: the unnamed sibling with the same labels was admitted"
    );
    eprintln!("{engine}: the sibling refused: {:?}", sibling.err());

    // Its ReplicaSet's pods, created by kube-controller-manager, are admitted by their owner's
    // name.
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let made = eventually(
        &format!("{engine}: the named Deployment's pods created"),
        CONVERGE,
        async |seen| {
            let listed = pods
                .list(&ListParams::default().labels("workload=agent"))
                .await
                .ok()?;
            let owners: Vec<String> = listed
                .items
                .iter()
                .flat_map(|p| p.metadata.owner_references.iter().flatten())
                .map(|o| format!("{}/{}", o.kind, o.name))
                .collect();
            *seen = format!("owners {owners:?}");
            (!owners.is_empty() && owners.iter().all(|o| o.starts_with("ReplicaSet/agent-")))
                .then_some(owners)
        },
    )
    .await;
    eprintln!("{engine}: the named Deployment's pods, owned by {made:?}");

    // By owner: a pod of one of the named Deployment's ReplicaSets is admitted; of the
    // sibling's, or of no controller, refused.
    let hash = "5d8f7c9b4";
    pod_of(&client, ns, &format!("agent-{hash}"))
        .await
        .unwrap_or_else(|e| panic!("{engine}: a pod of the named Deployment's ReplicaSet: {e}"));
    let of_sibling = pod_of(&client, ns, &format!("agent-canary-{hash}")).await;
    assert!(
        of_sibling.is_err(),
        "{engine}: a pod of the sibling's ReplicaSet was admitted"
    );
    privileged_pod(&client, ns, json!({"app": "web"}))
        .await
        .expect_err("a bare pod the exception does not name is still refused");
    unbind_cluster(&client, &csib).await;
}

#[tokio::test]
async fn the_admission_engine_lets_out_only_the_named_workload() {
    only_the_named_workload_is_let_out(crate::admission::cluster(), "admission").await;
}

/// The CRD lists the kinds a workload may be named by, and refuses an empty name.
#[tokio::test]
async fn the_api_server_refuses_a_workload_kind_or_name_the_crd_does_not_list() {
    let cp = crate::admission::cluster();
    let client = cp.client().expect("client");
    let ns = crate::admission::namespace(cp, "exn-crd").await;
    let path = format!(
        "/apis/exceptions.security.nimbus.com/v1alpha1/namespaces/{}/securityintentexceptions",
        ns.name()
    );
    let exception = |workload: serde_json::Value| {
        json!({
            "apiVersion": "exceptions.security.nimbus.com/v1alpha1",
            "kind": "SecurityIntentException",
            "metadata": {"name": unique("crd")},
            "spec": {
                "binding": {"kind": "SecurityIntentBinding", "name": "any"},
                "intents": ["any"],
                "workloads": [workload],
                "reason": "a test",
                "expiresAt": "2030-01-01T00:00:00Z",
            }
        })
    };
    // (workload, admitted)
    let cases = [
        (json!({"kind": "Deployment", "name": "agent"}), true),
        (json!({"kind": "CronJob", "name": "nightly"}), true),
        (json!({"kind": "ReplicaSet", "name": "agent-5d8f7"}), false),
        (json!({"kind": "Deployment", "name": ""}), false),
        (json!({"kind": "Deployment"}), false),
    ];
    for (workload, admitted) in cases {
        let answer =
            crate::admission::dry_run(&client, "POST", &path, &exception(workload.clone())).await;
        assert_eq!(answer.allowed, admitted, "{workload}: {}", answer.body);
    }
}

#[tokio::test]
async fn kyverno_in_cel_kinds_lets_out_only_the_named_workload() {
    only_the_named_workload_is_let_out(crate::kyverno::cluster(KyvernoApi::Cel), "kyverno (CEL)")
        .await;
}

/// Kyverno's legacy PolicyException cannot name a pod by the workload that made it: the
/// exception is not written, the named Deployment stays refused, and the policy says so.
#[tokio::test]
async fn kyverno_legacy_keeps_refusing_a_named_workload() {
    let cp = crate::kyverno::cluster(KyvernoApi::Legacy);
    let (client, ns, csib, _) = named_exception(cp, "kyverno").await;
    let policies = Api::<nimbus_api::ClusterNimbusPolicy>::all(client.clone());
    // A problem that leaves the intent enforced is told in the policy's `Ready` message.
    eventually(
        "kyverno: the policy says the exception is not honoured",
        CONVERGE,
        async |seen| {
            let policy = policies.get_opt(&csib).await.ok()??;
            let ready = policy
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            *seen = format!("{}: {}", ready.reason, ready.message);
            ready
                .message
                .contains("kyverno selects workloads by labels only")
                .then_some(())
        },
    )
    .await;
    deployment_admitted(&client, ns.name(), "agent")
        .await
        .expect_err("kyverno (legacy): the named Deployment is still refused");
    unbind_cluster(&client, &csib).await;
}
