//! The workload the posture benchmark creates, and waiting until the cluster is at rest.

use super::computations::Computations;
use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::PostParams;
use kube::{Api, Client};
use nimbus_api::{SecurityIntent, SecurityIntentBinding};
use serde_json::json;
use std::time::{Duration, Instant};

/// What the benchmark creates: `deployments` Deployments of `replicas` pods spread over
/// `namespaces` namespaces, and a binding in each selecting half of them.
pub struct Workload {
    pub namespaces: usize,
    pub deployments: usize,
    pub replicas: usize,
    /// Requests in flight while creating it.
    pub concurrency: usize,
}

/// Creates the intent, the namespaces and their bindings, then the Deployments.
pub async fn create_workload(client: &Client, args: &Workload) -> anyhow::Result<()> {
    let deployments = args.deployments;
    let namespaces: Vec<String> = (0..args.namespaces)
        .map(|n| format!("posture-bench-{n}"))
        .collect();
    let intents: Api<SecurityIntent> = Api::all(client.clone());
    let intent = json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
        "metadata": {"name": "dns-manipulation"},
        "spec": {"intent": {"id": "dnsManipulation", "action": "Block"}}
    });
    intents
        .create(&PostParams::default(), &serde_json::from_value(intent)?)
        .await
        .context("creating the intent")?;
    for ns in &namespaces {
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &serde_json::from_value(namespace)?)
            .await
            .with_context(|| format!("creating namespace {ns}"))?;
        let binding = json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
            "metadata": {"name": "dns"},
            "spec": {
                "intents": [{"name": "dns-manipulation"}],
                "selector": {"workloadSelector": {"matchLabels": {"protected": "yes"}}}
            }
        });
        Api::<SecurityIntentBinding>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &serde_json::from_value(binding)?)
            .await
            .with_context(|| format!("creating the binding in {ns}"))?;
    }
    futures::stream::iter(0..deployments)
        .map(|d| {
            let ns = namespaces[d % namespaces.len()].clone();
            let client = client.clone();
            let replicas = args.replicas;
            async move {
                let name = format!("app-{d}");
                let protected = if d % 2 == 0 { "yes" } else { "no" };
                let deployment = json!({
                    "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": name},
                    "spec": {
                        "replicas": replicas,
                        "selector": {"matchLabels": {"app": name}},
                        "template": {
                            "metadata": {"labels": {"app": name, "protected": protected}},
                            "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1"}]}
                        }
                    }
                });
                Api::<Deployment>::namespaced(client, &ns)
                    .create(&PostParams::default(), &serde_json::from_value(deployment)?)
                    .await
                    .with_context(|| format!("creating Deployment {ns}/{name}"))
                    .map(drop)
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// How long without a posture computation counts as settled.
pub const QUIET: Duration = Duration::from_secs(5);
pub const SETTLE_LIMIT: Duration = Duration::from_secs(600);

/// Waits until the operator has not computed the posture for [`QUIET`]; how long that took,
/// or `None` after [`SETTLE_LIMIT`].
pub async fn settle(metrics: u16) -> anyhow::Result<Option<Duration>> {
    let began = Instant::now();
    let mut last = (Computations::total(metrics).await?, Instant::now());
    while began.elapsed() < SETTLE_LIMIT {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let count = Computations::total(metrics).await?;
        if count != last.0 {
            last = (count, Instant::now());
        } else if last.1.elapsed() >= QUIET {
            return Ok(Some(last.1.duration_since(began)));
        }
    }
    Ok(None)
}

/// Waits until no pod is in a phase other than Running; false after [`SETTLE_LIMIT`].
pub async fn all_running(client: &Client) -> anyhow::Result<bool> {
    let pods = Api::<Pod>::all(client.clone());
    let not_running = kube::api::ListParams::default()
        .fields("status.phase!=Running")
        .limit(1);
    let began = Instant::now();
    while began.elapsed() < SETTLE_LIMIT {
        let list = pods
            .list_metadata(&not_running)
            .await
            .context("listing pods not running")?;
        if list.items.is_empty() {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(false)
}
