//! Uninstalling, as the README states it:
//! - stopping the operator leaves every generated policy in force (nothing is deleted on
//!   shutdown);
//! - deleting a binding, operator running or not, deletes its policies, and the garbage
//!   collector their native objects;
//! - deleting the Nimbus CRDs deletes the bindings and policies; their native objects may stay
//!   (the garbage collector keeps a dependent whose owner's kind it can no longer resolve, so
//!   whether it gets to them first is a matter of timing). They carry the engines' label, by
//!   which the README's command deletes them.
//!
//! A binary of its own: it deletes the CRDs of its control plane.

mod common;

use common::CONVERGE;
use common::fleet::{create_realistic_set, generated_kinds, listed, start_settled};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams};
use nimbus_core::engines::MANAGED_BY;
use nimbus_testenv::eventually;

/// `Kind namespace/name` of every generated object now.
async fn generated(client: &kube::Client) -> Vec<String> {
    listed(client, &generated_kinds(), &ListParams::default(), |_| true).await
}

/// The generated native objects left (the Nimbus kinds are gone with their CRDs).
async fn generated_native(client: &kube::Client) -> Vec<String> {
    let labelled = ListParams::default().labels(MANAGED_BY);
    listed(client, &generated_kinds()[2..], &labelled, |_| true).await
}

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
    eventually("the binding's objects collected", CONVERGE, async |seen| {
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
    // cannot resolve an owner whose kind is gone): so the README says to delete the leftovers
    // by the engines' label, which leaves none.
    let selector = format!("{MANAGED_BY} in ({})", managers().join(","));
    for kind in &generated_kinds()[2..] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), kind);
        for obj in api
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("listing")
            .items
        {
            let namespaced: Api<DynamicObject> = match &obj.metadata.namespace {
                Some(ns) => Api::namespaced_with(client.clone(), ns, kind),
                None => Api::all_with(client.clone(), kind),
            };
            let name = obj.metadata.name.clone().unwrap_or_default();
            namespaced
                .delete(&name, &DeleteParams::default())
                .await
                .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
        }
    }
    assert_eq!(generated_native(&client).await, Vec::<String>::new());
}

/// The engines' `app.kubernetes.io/managed-by` values.
fn managers() -> Vec<&'static str> {
    nimbus_core::catalog::Engine::ALL
        .iter()
        .map(|e| e.manager())
        .collect()
}
