//! Uninstalling, as the book states it (docs/src/operations.md, "Uninstalling"):
//! - stopping the operator leaves every generated policy in force (nothing is deleted on
//!   shutdown);
//! - deleting a binding, operator running or not, deletes its policies, and the garbage
//!   collector their native objects;
//! - deleting the Nimbus CRDs deletes the bindings and policies; their native objects may stay
//!   (the garbage collector keeps a dependent whose owner's kind it can no longer resolve, so
//!   whether it gets to them first is a matter of timing). They carry the engines' label, by
//!   which the book's command deletes them: the command is read from docs/src/operations.md and run as
//!   it is, over the leftovers of every kind the engines and the reports write that this
//!   cluster serves, and it must name every such kind and label value of the engine registry.
//!
//! A binary of its own: it deletes the CRDs of its control plane.

mod common;

use common::CONVERGE;
use common::fleet::{create_realistic_set, generated_kinds, listed, start_settled};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use nimbus_core::engines::{
    CONFIG_MAP, CRON_JOB, Engine, MANAGED_BY, MUTATING_ADMISSION_POLICY,
    MUTATING_ADMISSION_POLICY_BINDING, POLICY_REPORT, ROLE_BINDING, VALIDATING_ADMISSION_POLICY,
    VALIDATING_ADMISSION_POLICY_BINDING, all_kinds,
};
use nimbus_core::reports::{self, OPEN_REPORT, ReportFormat};
use nimbus_testenv::eventually;
use serde_json::json;
use std::collections::BTreeSet;

/// `Kind namespace/name` of every generated object now.
async fn generated(client: &kube::Client) -> Vec<String> {
    listed(client, &generated_kinds(), &ListParams::default(), |_| true).await
}

/// kube-controller-manager's garbage collector: two levels of owners (binding, policy,
/// natives), and kinds it may still be discovering (it syncs its monitors every 30 s); on a
/// loaded machine a clean `make test` once saw it take over 30 s.
const COLLECTED: std::time::Duration = std::time::Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstalling_keeps_policies_until_bindings_go_and_leaves_nothing_after_the_cleanup() {
    let cp = common::cluster_with_engines();
    let client = cp.client().expect("client");
    create_realistic_set(&client, 10).await;
    let dir = tempfile::tempdir().expect("log dir");
    let (mut operator, _) = start_settled(&client, cp.kubeconfig_path(), dir.path()).await;
    let in_force = generated(&client).await;
    assert!(in_force.len() > 20, "{in_force:?}");

    // The operator goes (helm uninstall keeps the CRDs): everything stays in force.
    operator.process.terminate();
    eventually("the operator to exit", CONVERGE, async |_| {
        operator.process.has_exited().then_some(())
    })
    .await;
    assert_eq!(
        generated(&client).await,
        in_force,
        "after the operator stopped"
    );

    // A binding goes, with the operator stopped: the garbage collector takes the rest.
    let bindings: Api<nimbus_api::SecurityIntentBinding> =
        Api::namespaced(client.clone(), "restart-a");
    bindings
        .delete("web", &DeleteParams::background())
        .await
        .expect("deleting a binding");
    eventually("the binding's objects collected", COLLECTED, async |seen| {
        let left: Vec<String> = generated(&client)
            .await
            .into_iter()
            .filter(|o| o.contains("restart-a/web"))
            .collect();
        *seen = format!("{left:?}");
        left.is_empty().then_some(())
    })
    .await;

    // The CRDs go: bindings and policies with them.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in nimbus_api::crds() {
        let name = crd.metadata.name.expect("a named CRD");
        crds.delete(&name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
        eventually(&format!("{name} gone"), CONVERGE, async |_| {
            crds.get_opt(&name).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    // Whether the garbage collector still deletes their native objects depends on timing (it
    // cannot resolve an owner whose kind is gone): so the book says to delete the leftovers
    // by the engines' label. Leftovers of the kinds nothing generated here (the admission
    // engine's, k8tls's, RBAC's, the reports), as the garbage collector leaves them: no owner.
    plant_leftovers(&client).await;
    let not_ours = not_ours(&client).await;
    let left = labelled_leftovers(&client).await;
    let kinds: BTreeSet<&str> = left.iter().filter_map(|o| o.split(' ').next()).collect();
    assert!(
        kinds.len() >= 9,
        "too few kinds left over to judge the command by: {left:?}"
    );

    run_documented_cleanup(cp.kubeconfig_path());
    assert_eq!(labelled_leftovers(&client).await, Vec::<String>::new());
    // What others manage stays.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), K8TLS_NAMESPACE);
    assert!(
        common::get(&configmaps, &not_ours).await.is_some(),
        "the cleanup deleted a ConfigMap another manager labelled"
    );
}

/// The uninstall cleanup command of docs/src/operations.md (the `sh` block that sets `selector=`).
fn documented_cleanup() -> String {
    let page = common::workspace_root().join("docs/src/operations.md");
    let text = std::fs::read_to_string(&page).expect("docs/src/operations.md");
    let start = text
        .find("```sh\nselector='")
        .expect("the operations page's cleanup command")
        + "```sh\n".len();
    let len = text[start..].find("```").expect("the command's block ends");
    text[start..start + len].to_owned()
}

/// Runs the documented cleanup command with `sh`, the test tools' kubectl and the cluster's
/// kubeconfig.
fn run_documented_cleanup(kubeconfig: &std::path::Path) {
    let path = format!(
        "{}:{}",
        common::tools_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = std::process::Command::new("sh")
        .args(["-ec", &documented_cleanup()])
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("running sh");
    assert!(
        output.status.success(),
        "the documented cleanup failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
}

/// Every kind the engines and the reports write, as `kubectl api-resources -o name` names
/// them (`plural.group`, the plural alone for the core group).
fn registry_kinds() -> BTreeSet<String> {
    let reports = ReportFormat::Auto.candidates().iter().copied();
    all_kinds()
        .into_iter()
        .chain(reports)
        .map(|k| {
            if k.group.is_empty() {
                k.plural.to_owned()
            } else {
                format!("{}.{}", k.plural, k.group)
            }
        })
        .collect()
}

/// The `app.kubernetes.io/managed-by` values of everything generated: the engines' and the
/// reports'.
fn managers() -> BTreeSet<&'static str> {
    Engine::ALL
        .iter()
        .map(|e| e.manager())
        .chain([reports::MANAGER])
        .collect()
}

/// The documented command names exactly the kinds and label values the registry says are
/// written: a kind added to an engine, or a new engine, fails this until docs/src/operations.md follows.
#[test]
fn the_documented_cleanup_names_every_generated_kind_and_manager() {
    let command = documented_cleanup();
    let (_, selector) = command
        .split_once("managed-by in (")
        .expect("a selector by the managers");
    let (selector, _) = selector.split_once(')').expect("the selector's set ends");
    let named: BTreeSet<&str> = selector.split(',').map(str::trim).collect();
    assert_eq!(
        named,
        managers(),
        "the managers the documented selector names"
    );
    let (_, kinds) = command
        .split_once("for kind in")
        .expect("a loop over the kinds");
    let (kinds, _) = kinds.split_once("; do").expect("the loop's list ends");
    let named: BTreeSet<String> = kinds
        .split_whitespace()
        .filter(|w| *w != "\\")
        .map(str::to_owned)
        .collect();
    assert_eq!(
        named,
        registry_kinds(),
        "the kinds the documented loop names"
    );
}

/// `Kind namespace/name` of every object labelled by a manager of [`managers`] in every kind
/// of the registry this cluster serves.
async fn labelled_leftovers(client: &kube::Client) -> Vec<String> {
    let selector = format!("{MANAGED_BY} in ({})", Vec::from_iter(managers()).join(","));
    let reports = ReportFormat::Auto.candidates().iter().copied();
    let mut left = Vec::new();
    for kind in all_kinds().into_iter().chain(reports) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.api_resource());
        match api.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => left.extend(list.items.iter().map(|o| {
                let namespace = o.metadata.namespace.as_deref().unwrap_or_default();
                format!("{} {namespace}/{}", kind.kind, o.name_any())
            })),
            // Not served here (Kyverno's CEL kinds).
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => panic!("listing {}: {e}", kind.plural),
        }
    }
    left.sort();
    left
}

const K8TLS_NAMESPACE: &str = "nimbus-k8tls-env";

/// One object of each kind below, labelled as its engine labels it and owned by nothing.
async fn plant_leftovers(client: &kube::Client) {
    let label = |manager: &str| json!({ MANAGED_BY: manager });
    let pods = json!({"resourceRules": [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]
    }]});
    let leftovers = [
        (
            &VALIDATING_ADMISSION_POLICY,
            json!({"spec": {"matchConstraints": pods, "validations": [{"expression": "true"}]}}),
            Engine::Admission.manager(),
        ),
        (
            &VALIDATING_ADMISSION_POLICY_BINDING,
            json!({"spec": {"policyName": "leftover", "validationActions": ["Deny"]}}),
            Engine::Admission.manager(),
        ),
        (
            &MUTATING_ADMISSION_POLICY,
            json!({"spec": {
                "matchConstraints": pods,
                "reinvocationPolicy": "Never",
                "mutations": [{
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {"expression": "Object{}"}
                }]
            }}),
            Engine::Admission.manager(),
        ),
        (
            &MUTATING_ADMISSION_POLICY_BINDING,
            json!({"spec": {"policyName": "leftover"}}),
            Engine::Admission.manager(),
        ),
        (
            &ROLE_BINDING,
            json!({
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": []
            }),
            Engine::Rbac.manager(),
        ),
        (&CONFIG_MAP, json!({"data": {}}), Engine::K8tls.manager()),
        (
            &CRON_JOB,
            json!({"spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "scan", "image": "example.invalid/k8tls"}]
            }}}}}}),
            Engine::K8tls.manager(),
        ),
        (&OPEN_REPORT, json!({}), reports::MANAGER),
        (&POLICY_REPORT, json!({}), reports::MANAGER),
    ];
    for (kind, body, manager) in leftovers {
        let mut object = body;
        object["apiVersion"] = kind.api_version().into();
        object["kind"] = kind.kind.into();
        object["metadata"] = json!({"name": "leftover", "labels": label(manager)});
        let api: Api<DynamicObject> = if kind.namespaced {
            object["metadata"]["namespace"] = K8TLS_NAMESPACE.into();
            Api::namespaced_with(client.clone(), K8TLS_NAMESPACE, &kind.api_resource())
        } else {
            Api::all_with(client.clone(), &kind.api_resource())
        };
        common::apply(&api, "leftover", &object).await;
    }
}

/// A ConfigMap labelled by another manager beside the leftovers; returns its name.
async fn not_ours(client: &kube::Client) -> String {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), K8TLS_NAMESPACE);
    let name = "not-ours";
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {MANAGED_BY: "kyverno"}}
    });
    common::apply(&configmaps, name, &body).await;
    name.to_owned()
}
