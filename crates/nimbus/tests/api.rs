//! Our CRDs in a real kube-apiserver: everything Nimbus's examples use is accepted; nonsense
//! is rejected at admission with a clear message.

mod common;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use nimbus_api::SecurityIntent;
use nimbus_testenv::apply_yaml;
use serde_json::json;
use std::path::PathBuf;

fn nimbus_examples() -> Vec<PathBuf> {
    let root = common::original_nimbus("examples");
    let mut files = Vec::new();
    for dir in ["namespaced", "clusterscoped"] {
        let dir = root.join(dir);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
            panic!(
                "Nimbus's examples are needed for this test ({}): {e}",
                dir.display()
            )
        });
        files.extend(entries.map(|e| e.expect("dir entry").path()));
    }
    files.sort();
    assert!(
        files.len() >= 15,
        "expected Nimbus's example set, found {files:?}"
    );
    files
}

#[tokio::test]
async fn every_nimbus_example_is_accepted_server_side() {
    let cp = common::cluster();
    let ns = cp.test_namespace("examples").await.expect("namespace");
    let mut config = cp.config().clone();
    config.default_namespace = ns.name().to_owned();
    let client = kube::Client::try_from(config).expect("client");
    for file in nimbus_examples() {
        let yaml = std::fs::read_to_string(&file).expect("readable example");
        let applied = apply_yaml(&client, &yaml)
            .await
            .unwrap_or_else(|e| panic!("{} was rejected: {e}", file.display()));
        assert!(!applied.is_empty(), "{} applied nothing", file.display());
    }
}

async fn rejection(client: &kube::Client, object: serde_json::Value) -> String {
    let gvk = kube::api::GroupVersionKind::gvk(
        "intent.security.nimbus.com",
        "v1alpha1",
        object["kind"].as_str().expect("kind"),
    );
    let plural = format!("{}s", gvk.kind.to_lowercase());
    let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let name = object["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    match api
        .patch(
            &name,
            &PatchParams::apply("test").dry_run(),
            &Patch::Apply(&object),
        )
        .await
    {
        Ok(_) => panic!("{name} was accepted but should be rejected"),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            status.message
        }
        Err(e) => panic!("unexpected error for {name}: {e}"),
    }
}

#[tokio::test]
async fn nonsense_is_rejected_at_admission_with_the_reason() {
    let client = common::cluster().client().expect("client");
    let csib = |ns_selector: serde_json::Value| {
        json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
            "metadata": {"name": "bad"},
            "spec": {"intents": [{"name": "x"}], "selector": {"nsSelector": ns_selector}}
        })
    };
    let cases = [
        (
            csib(json!({"matchNames": ["a", "*"]})),
            "'*' must be the only entry of matchNames",
        ),
        (
            csib(json!({"matchNames": ["a"], "excludeNames": ["b"]})),
            "excludeNames can only be combined with matchNames: ['*']",
        ),
        (
            csib(json!({})),
            "nsSelector needs matchNames or excludeNames",
        ),
        (
            json!({"apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
                "metadata": {"name": "bad"}, "spec": {"intents": [{"name": "x"}]}}),
            "selector.nsSelector is required",
        ),
        (
            common::intent("bad", "dns-manipulation", "Block"),
            "spec.intent.id",
        ),
        (
            common::intent("bad", "dnsManipulation", "Blok"),
            "supported values: \"Block\", \"Audit\"",
        ),
        (
            json!({"apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
                "metadata": {"name": "bad", "namespace": "default"}, "spec": {"intents": [], "selector": {}}}),
            "spec.intents",
        ),
        (
            json!({"apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
                "metadata": {"name": "nimbus-ctlr-gen-all", "namespace": "default"},
                "spec": {"intents": [{"name": "x"}], "selector": {}}}),
            "reserved for the policies of ClusterSecurityIntentBindings",
        ),
    ];
    for (object, needle) in cases {
        let message = rejection(&client, object.clone()).await;
        assert!(
            message.contains(needle),
            "rejection of {object} should mention {needle:?}, got: {message}"
        );
    }
}

#[tokio::test]
async fn severity_defaults_to_low_as_in_nimbus() {
    let client = common::cluster().client().expect("client");
    let api: Api<SecurityIntent> = Api::all(client);
    let name = common::unique("severity");
    let si = common::apply(
        &api,
        &name,
        &common::intent(&name, "dnsManipulation", "Audit"),
    )
    .await;
    assert_eq!(si.spec.intent.severity, "Low");
}

/// `kubectl apply --server-side` of a binding whose selector was emptied: server-side apply
/// stores the emptied field as `null`, which the schema must accept.
#[tokio::test]
async fn an_emptied_selector_can_be_applied_server_side() {
    use nimbus_api::{ClusterSecurityIntentBinding, SecurityIntentBinding};
    let cp = common::cluster();
    let ns = cp.test_namespace("emptied").await.expect("namespace");
    let client = cp.client().expect("client");
    let sibs: kube::Api<SecurityIntentBinding> = kube::Api::namespaced(client.clone(), ns.name());
    let csibs: kube::Api<ClusterSecurityIntentBinding> = kube::Api::all(client);
    let name = common::unique("emptied");
    let sib = |selector: serde_json::Value| {
        json!({"apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
               "metadata": {"name": name},
               "spec": {"intents": [{"name": "dns"}], "selector": {"workloadSelector": selector}}})
    };
    let csib = |selector: serde_json::Value| {
        json!({"apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
               "metadata": {"name": name},
               "spec": {"intents": [{"name": "dns"}],
                        "selector": {"nsSelector": {"matchNames": ["*"]}, "workloadSelector": selector}}})
    };
    for selector in [
        json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
        json!({"matchLabels": {}, "matchExpressions": []}),
    ] {
        common::apply(&sibs, &name, &sib(selector.clone())).await;
        common::apply(&csibs, &name, &csib(selector)).await;
    }
    let stored = common::get(&sibs, &name).await.expect("binding");
    let selector = stored.spec.selector.workload_selector.unwrap_or_default();
    assert!(selector.match_labels.unwrap_or_default().is_empty());
    assert!(selector.match_expressions.unwrap_or_default().is_empty());
    common::delete(&csibs, &name).await;
}

/// The catalog's admission policy: `kubectl apply` of an unknown intent ID or parameter warns
/// with what is known, and is still accepted (Nimbus accepted it).
#[tokio::test]
async fn unknown_intent_ids_and_parameters_are_admitted_with_a_warning() {
    let cp = common::cluster();
    let client = cp.client().expect("client");
    for object in nimbus_core::admission::intent_catalog_policy() {
        let yaml = serde_yaml_ng::to_string(&object).expect("yaml");
        apply_yaml(&client, &yaml).await.expect("admission policy");
    }
    // What `kubectl apply` prints comes from the response's Warning headers.
    let warnings = |intent: serde_json::Value| {
        let client = client.clone();
        async move {
            let request = http::Request::post(
                "/apis/intent.security.nimbus.com/v1alpha1/securityintents?dryRun=All",
            )
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&intent).expect("json").into())
            .expect("request");
            let response = client.send(request).await.expect("create (dry run)");
            assert!(response.status().is_success(), "{}", response.status());
            response
                .headers()
                .get_all("warning")
                .iter()
                .map(|w| w.to_str().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
                .join("\n")
        }
    };
    let intent = |id: &str, params: serde_json::Value| {
        json!({"apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
               "metadata": {"name": common::unique("warned")},
               "spec": {"intent": {"id": id, "action": "Block", "params": params}}})
    };
    // The policy takes effect once the API server has compiled it.
    let warning = nimbus_testenv::eventually(
        "a warning for an unknown intent ID",
        common::CONVERGE,
        async |_| {
            let w = warnings(intent("dnsManipulaton", json!({}))).await;
            (!w.is_empty()).then_some(w)
        },
    )
    .await;
    assert!(
        warning.contains(r#"unknown intent ID \"dnsManipulaton\""#),
        "{warning}"
    );
    assert!(
        warning.contains("dnsManipulation, denyExternalNetworkAccess"),
        "{warning}"
    );
    println!("{warning}");

    let warning = warnings(intent("escapeToHost", json!({"psaLevels": ["baseline"]}))).await;
    assert!(
        warning.contains("unknown parameters of escapeToHost: psaLevels"),
        "{warning}"
    );
    assert!(warning.contains("(it takes: psaLevel)"), "{warning}");

    let known = warnings(intent("escapeToHost", json!({"psaLevel": ["baseline"]}))).await;
    assert!(known.is_empty(), "{known}");
}
