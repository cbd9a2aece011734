//! Scenario L: on a quiet, converged cluster, one binding at a time — the time from creating a
//! SecurityIntentBinding (dnsManipulation) until both its native objects (a NetworkPolicy and a
//! KubeArmorPolicy) exist, as a watch in the bench sees them. Its floors, once the operator
//! stopped: the time from sending the same two objects' creates, at once, until the watch sees
//! both (natives-only); and from creating the binding, then its NimbusPolicy, then the two
//! objects owned by it, until the watch sees both (compatible; the statuses are written after).

use crate::workload::INTENTS;
use crate::{compatible, floor};
use anyhow::{Context as _, bail};
use futures::{StreamExt, future};
use kube::api::{DynamicObject, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use nimbus_api::SecurityIntentBinding;
use nimbus_core::engines::{KUBEARMOR_POLICY, NETWORK_POLICY, NativeKind};
use serde::Serialize;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How each sample's native objects come to be.
#[derive(Clone, Copy)]
pub enum Writer<'a> {
    /// The operator, from a binding the bench creates.
    Operator,
    /// The bench itself, writing the binding's native objects directly.
    Direct,
    /// The bench itself, creating the binding and writing what a compatible operator must.
    Compatible(&'a compatible::Writer),
}

impl Writer<'_> {
    fn namespace(self) -> &'static str {
        match self {
            Self::Operator => "bench-latency",
            Self::Direct => "bench-latency-floor",
            Self::Compatible(_) => "bench-latency-compat",
        }
    }
}
const KINDS: [&NativeKind; 2] = [&NETWORK_POLICY, &KUBEARMOR_POLICY];

#[derive(Debug, Serialize)]
pub struct Latency {
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// When the watches first saw each `(kind, name)`.
type Seen = Arc<Mutex<HashMap<(&'static str, String), Instant>>>;

/// [`measure`] for a floor, saying what is measured (`what`, e.g. `the floor of L`) and the
/// percentiles as the bench's progress.
pub async fn measure_floor(
    client: &Client,
    writer: Writer<'_>,
    samples: usize,
    timeout: Duration,
    what: &str,
) -> anyhow::Result<Latency> {
    crate::progress::step(format!("F: {what}: {samples} bindings, one at a time"));
    let latency = measure(client, writer, samples, timeout).await?;
    crate::progress::step(format!(
        "F: L p50 {:.1} ms, p99 {:.1} ms",
        latency.p50_ms, latency.p99_ms
    ));
    Ok(latency)
}

pub async fn measure(
    client: &Client,
    writer: Writer<'_>,
    samples: usize,
    timeout: Duration,
) -> anyhow::Result<Latency> {
    let ns = writer.namespace();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    let seen: Seen = Arc::default();
    let watches: Vec<_> = KINDS
        .iter()
        .map(|kind| {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), ns, &kind.api_resource());
            let (seen, kind_name) = (seen.clone(), kind.kind);
            tokio::spawn(async move {
                let mut objects = watcher(api, watcher::Config::default())
                    .applied_objects()
                    .boxed();
                while let Some(Ok(object)) = objects.next().await {
                    seen.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry((kind_name, object.name_any()))
                        .or_insert_with(Instant::now);
                }
            })
        })
        .collect();
    // The cluster binding fans out to the new namespace, and the watches start: let that settle
    // first.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let bindings: Api<SecurityIntentBinding> = Api::namespaced(client.clone(), ns);
    let mut millis = Vec::with_capacity(samples);
    for i in 0..samples {
        let name = format!("latency-{i}");
        let binding: SecurityIntentBinding = serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "intents": [{"name": INTENTS[0].0}],
                "selector": {"workloadSelector": {"matchLabels": {"app": name}}}
            }
        }))?;
        let natives = match writer {
            Writer::Operator | Writer::Compatible(_) => Vec::new(),
            Writer::Direct => floor::natives(&binding)?,
        };
        let started = Instant::now();
        send(client, writer, &bindings, &binding, &natives).await?;
        let native = format!("{name}-dnsmanipulation");
        let done = loop {
            let last = {
                let seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
                KINDS
                    .iter()
                    .map(|k| seen.get(&(k.kind, native.clone())).copied())
                    .collect::<Option<Vec<Instant>>>()
                    .and_then(|at| at.into_iter().max())
            };
            if let Some(last) = last {
                break last;
            }
            if started.elapsed() > timeout {
                bail!("binding {name}: its native objects did not appear within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        millis.push(done.saturating_duration_since(started).as_secs_f64() * 1000.0);
        // Quiet between samples: each binding meets an idle operator.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for watch in watches {
        watch.abort();
    }
    millis.sort_by(f64::total_cmp);
    let at = |q: f64| millis[((millis.len() - 1) as f64 * q).round() as usize];
    Ok(Latency {
        samples,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
    })
}

/// Sends what `writer` writes for one sample: `binding`, or `natives` directly.
async fn send(
    client: &Client,
    writer: Writer<'_>,
    bindings: &Api<SecurityIntentBinding>,
    binding: &SecurityIntentBinding,
    natives: &[(kube::api::ApiResource, DynamicObject)],
) -> anyhow::Result<()> {
    let name = binding.name_any();
    let ns = writer.namespace();
    match writer {
        Writer::Operator => {
            bindings
                .create(&PostParams::default(), binding)
                .await
                .with_context(|| format!("creating binding {name}"))?;
        }
        Writer::Compatible(compatible) => {
            let created = bindings
                .create(&PostParams::default(), binding)
                .await
                .with_context(|| format!("creating binding {name}"))?;
            compatible.protect(&created).await?;
        }
        Writer::Direct => {
            future::try_join_all(natives.iter().map(|(resource, object)| async move {
                Api::<DynamicObject>::namespaced_with(client.clone(), ns, resource)
                    .create(&PostParams::default(), object)
                    .await
            }))
            .await
            .with_context(|| format!("creating the native objects of binding {name}"))?;
        }
    }
    Ok(())
}
