//! The floor: how long the API server takes to accept exactly what the operator writes for
//! scenario A (its NimbusPolicies, ClusterNimbusPolicy and native objects, as `nimbus translate`
//! computes them) when a client server-side-applies them directly, with the bench's request
//! concurrency. The operator's convergence is compared with it.

use crate::workload::{self, Ops, Plan};
use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use nimbus_api::{ClusterNimbusPolicy, NimbusPolicy};
use nimbus_core::engines::{self, EngineSet, Environment, PolicyInput};
use nimbus_core::namespaces::ProtectedNamespaces;
use nimbus_core::plan;
use std::time::{Duration, Instant};

/// What the direct writer did.
pub struct Floor {
    pub objects: usize,
    pub wall: Duration,
}

/// Everything the operator would write for `plan`'s bindings at churn `revision` and, when
/// given, its cluster binding (named `.1`) reaching the namespaces `.0` — without owner
/// references: no owner exists to point at, and the garbage collector would delete objects
/// whose owner is missing.
pub fn objects(
    plan: &Plan,
    revision: u32,
    cluster: Option<(&[String], &str)>,
) -> anyhow::Result<Vec<(ApiResource, DynamicObject)>> {
    let intents = workload::intents()?;
    let lookup = |name: &str| intents.iter().find(|i| i.name_any() == name).cloned();
    let env = Environment::default();
    let engines = EngineSet::all();
    let mut out = Vec::new();
    let mut add = |policy: DynamicObject, resource: ApiResource, input: &PolicyInput| {
        out.push((resource, policy));
        for generated in engines::translate(input, &env, &engines).objects {
            out.push((generated.kind.api_resource(), generated.object));
        }
    };
    for b in &plan.bindings {
        if let Some(np) = plan::binding(&workload::binding(b, revision)?, lookup, None)?.policy {
            add(
                dynamic(&np)?,
                ApiResource::erase::<NimbusPolicy>(&()),
                &PolicyInput::namespaced(&np, "floor"),
            );
        }
    }
    if let Some((namespaces, cluster_binding)) = cluster {
        let namespaces: Vec<_> = namespaces
            .iter()
            .map(|name| k8s_openapi::api::core::v1::Namespace {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect();
        let csib = workload::cluster_binding(plan, cluster_binding)?;
        let planned =
            plan::cluster_binding(&csib, lookup, &namespaces, &ProtectedNamespaces::default())?;
        if let Some(cwnp) = &planned.cluster_policy {
            add(
                dynamic(cwnp)?,
                ApiResource::erase::<ClusterNimbusPolicy>(&()),
                &PolicyInput::cluster(cwnp, "floor"),
            );
        }
        for np in planned.namespace_policies() {
            add(
                dynamic(np)?,
                ApiResource::erase::<NimbusPolicy>(&()),
                &PolicyInput::namespaced(np, "floor"),
            );
        }
    }
    for (_, object) in &mut out {
        object.metadata.owner_references = None;
    }
    Ok(out)
}

fn dynamic<K: Resource + serde::Serialize>(object: &K) -> anyhow::Result<DynamicObject> {
    serde_json::from_value(serde_json::to_value(object)?).context("converting a policy")
}

/// Server-side-applies `objects` (namespaces already exist) and times it.
pub async fn write(
    ops: &Ops,
    objects: Vec<(ApiResource, DynamicObject)>,
    concurrency: usize,
) -> anyhow::Result<Floor> {
    let count = objects.len();
    let params = PatchParams::apply("nimbus-bench-floor").force();
    let began = Instant::now();
    stream::iter(objects)
        .map(|(resource, object)| {
            let params = params.clone();
            async move {
                let api: Api<DynamicObject> = match object.namespace() {
                    Some(ns) => Api::namespaced_with(ops.client.clone(), &ns, &resource),
                    None => Api::all_with(ops.client.clone(), &resource),
                };
                let name = object.name_any();
                api.patch(&name, &params, &Patch::Apply(&object))
                    .await
                    .with_context(|| format!("applying {} {name}", resource.kind))
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(Floor {
        objects: count,
        wall: began.elapsed(),
    })
}
