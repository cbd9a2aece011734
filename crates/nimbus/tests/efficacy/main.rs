//! Efficacy: what the generated policies allow and deny, decided by the engines' own semantics
//! rather than by comparing YAML. The operator runs against the real control plane; the native
//! objects it wrote are read back from the API server and handed to a decider:
//!
//! - NetworkPolicy: cyclonus's NetworkPolicy matcher (`tools/netpol-decider`, built from its Go
//!   module), an implementation of the NetworkPolicy semantics independent of ours;
//! - Kyverno policies: Kyverno itself, its admission, background and reports controllers built
//!   from its Go module and run beside a control plane of their own, the admission controller
//!   as its webhooks (`kyverno.rs`);
//! - RBAC (namespaceSandbox): the API server's own RBAC authorizer, asked through
//!   SubjectAccessReviews;
//! - the admission engine's ValidatingAdmissionPolicies and MutatingAdmissionPolicies:
//!   kube-apiserver itself, answering dry-run writes (`admission.rs`);
//! - escapeToHost through every engine that enforces it: Kubernetes' own PodSecurity admission,
//!   case for case on seeded random pods (`pod_security.rs`).
//!
//! Each test asserts the intent's documented meaning cell by cell, and that the book's "What
//! enforcement is proven" section shows exactly the matrix it measured
//! (docs/src/proofs.md; `NIMBUS_UPDATE_DOCS=1` rewrites that section from the measurements).

mod admission;
#[path = "../common/mod.rs"]
mod common;
mod exceptions;
mod kyverno;
mod matrix;
mod netpol;
mod pod_security;
mod pod_specs;
mod probes;
mod rbac;

use common::{CONVERGE, apply, get, unique};
use kube::api::{Api, DeleteParams};
use kube::{Client, Resource};
use nimbus_api::{ClusterSecurityIntentBinding, SecurityIntent, SecurityIntentBinding};
use nimbus_testenv::{TestNamespace, eventually};
use serde_json::{Value, json};
use std::time::Duration;

/// The operator running on the shared control plane, and a client.
fn cluster() -> Client {
    common::operator(Duration::from_secs(300))
        .client()
        .expect("client")
}

async fn namespace(prefix: &str) -> TestNamespace {
    common::operator(Duration::from_secs(300))
        .test_namespace(prefix)
        .await
        .expect("namespace")
}

/// A SecurityIntent `id` with `params`; returns its name.
async fn intent(client: &Client, id: &str, action: &str, params: Value) -> String {
    let name = unique(&id.to_lowercase());
    let si = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
        "metadata": {"name": name},
        "spec": {"intent": {"id": id, "action": action, "params": params}}
    });
    apply(&Api::<SecurityIntent>::all(client.clone()), &name, &si).await;
    name
}

/// How a binding selects its workloads, and the opt-in annotation for sensitive intents.
struct Selecting {
    labels: Value,
    allow_sensitive: Option<&'static str>,
    /// The binding is in shadow mode (labelled): it enforces nothing.
    shadow: bool,
}

fn metadata(name: &str, selecting: &Selecting) -> Value {
    let mut meta = json!({"name": name});
    if let Some(ids) = selecting.allow_sensitive {
        meta["annotations"] = json!({nimbus_api::ALLOW_SENSITIVE_ANNOTATION: ids});
    }
    if selecting.shadow {
        meta["labels"] = json!({nimbus_api::MODE_LABEL: nimbus_api::MODE_SHADOW});
    }
    meta
}

/// Binds `intent` in `ns` with a SecurityIntentBinding and waits until it is Ready (in shadow
/// mode: until its status is settled, `Ready=False` with `NoAuditForm` when no engine can
/// audit the intent); returns its name.
async fn bind_namespaced(client: &Client, ns: &str, intent: &str, selecting: &Selecting) -> String {
    let name = unique("eff");
    let api = Api::<SecurityIntentBinding>::namespaced(client.clone(), ns);
    let binding = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
        "metadata": metadata(&name, selecting),
        "spec": {"intents": [{"name": intent}],
                 "selector": {"workloadSelector": {"matchLabels": selecting.labels}}}
    });
    apply(&api, &name, &binding).await;
    ready(&api, &name, selecting.shadow).await;
    name
}

/// Binds `intent` in the namespace `ns` with a ClusterSecurityIntentBinding and waits until it
/// is Ready; returns its name (a test deletes it when done: it selects only its namespace, so one
/// left by a failed test just selects nothing once that namespace is gone).
async fn bind_cluster(client: &Client, ns: &str, intent: &str, selecting: &Selecting) -> String {
    let name = unique("eff");
    let api = Api::<ClusterSecurityIntentBinding>::all(client.clone());
    let binding = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterSecurityIntentBinding",
        "metadata": metadata(&name, selecting),
        "spec": {"intents": [{"name": intent}],
                 "selector": {"nsSelector": {"matchNames": [ns]},
                              "workloadSelector": {"matchLabels": selecting.labels}}}
    });
    apply(&api, &name, &binding).await;
    ready(&api, &name, selecting.shadow).await;
    name
}

async fn unbind_cluster(client: &Client, name: &str) {
    let api = Api::<ClusterSecurityIntentBinding>::all(client.clone());
    api.delete(name, &DeleteParams::default())
        .await
        .expect("deleting the cluster binding");
}

/// Waits until the binding reports `Ready=True` for its current generation (or, `shadow`,
/// `Ready=False` because no engine has an audit form).
async fn ready<K>(api: &Api<K>, name: &str, shadow: bool)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    eventually(&format!("binding {name} Ready"), CONVERGE, async |seen| {
        let object = serde_json::to_value(get(api, name).await?).ok()?;
        let generation = object["metadata"]["generation"].clone();
        let conditions = object["status"]["conditions"].as_array()?.clone();
        *seen = format!("{conditions:?}");
        conditions
            .iter()
            .any(|c| {
                c["type"] == "Ready"
                    && (c["status"] == "True" || (shadow && c["reason"] == "NoAuditForm"))
                    && c["observedGeneration"] == generation
            })
            .then_some(())
    })
    .await;
}
