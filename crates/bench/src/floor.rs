//! The floor: how long the API server takes to accept exactly what the operator writes for
//! scenario A (its NimbusPolicies, ClusterNimbusPolicy and native objects, as `nimbus translate`
//! computes them) when a client writes them directly, as fast as it can: creates, then
//! replaces, many in flight. The operator's convergence is compared with it.

use crate::workload::{self, Ops, Plan};
use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt, stream};
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::{Api, Resource, ResourceExt};
use nimbus_api::{ClusterNimbusPolicy, NimbusPolicy, SecurityIntentBinding};
use nimbus_core::engines::{self, EngineSet, Environment, PolicyInput};
use nimbus_core::namespaces::ProtectedNamespaces;
use nimbus_core::plan;
use std::collections::HashMap;
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

/// The native objects of `binding`, as a writer of them alone would create them: without owner
/// references.
pub fn natives(
    binding: &SecurityIntentBinding,
) -> anyhow::Result<Vec<(ApiResource, DynamicObject)>> {
    let intents = workload::intents()?;
    let lookup = |name: &str| intents.iter().find(|i| i.name_any() == name).cloned();
    let Some(np) = plan::binding(binding, lookup, None)?.policy else {
        anyhow::bail!("binding {} generates no policy", binding.name_any());
    };
    let input = PolicyInput::namespaced(&np, "floor");
    let translation = engines::translate(&input, &Environment::default(), &EngineSet::all());
    Ok(translation
        .objects
        .into_iter()
        .map(|mut generated| {
            generated.object.metadata.owner_references = None;
            (generated.kind.api_resource(), generated.object)
        })
        .collect())
}

fn dynamic<K: Resource + serde::Serialize>(object: &K) -> anyhow::Result<DynamicObject> {
    serde_json::from_value(serde_json::to_value(object)?).context("converting a policy")
}

/// Where an object is: its kind, namespace and name.
type Place = (String, Option<String>, String);

fn place_of(resource: &ApiResource, object: &DynamicObject) -> Place {
    (resource.kind.clone(), object.namespace(), object.name_any())
}

/// The resourceVersions the floor's writes produced, for the next writes of the same objects.
#[derive(Default)]
pub struct Versions(HashMap<Place, String>);

/// One direct write.
pub enum Op {
    /// Create the object, or replace it when [`Versions`] holds it.
    Write(ApiResource, DynamicObject),
    Delete(ApiResource, DynamicObject),
}

/// The writes that turn `before` into `after`: what is new or different, and what is gone.
pub fn changes(
    before: &[(ApiResource, DynamicObject)],
    after: Vec<(ApiResource, DynamicObject)>,
) -> Vec<Op> {
    let by_place: HashMap<Place, &DynamicObject> = before
        .iter()
        .map(|(resource, object)| (place_of(resource, object), object))
        .collect();
    let kept: std::collections::HashSet<Place> = after
        .iter()
        .map(|(resource, object)| place_of(resource, object))
        .collect();
    let gone = before
        .iter()
        .filter(|(resource, object)| !kept.contains(&place_of(resource, object)))
        .map(|(resource, object)| Op::Delete(resource.clone(), object.clone()));
    let mut ops: Vec<Op> = after
        .into_iter()
        .filter(|(resource, object)| {
            by_place
                .get(&place_of(resource, object))
                .is_none_or(|old| old.data != object.data || old.metadata != object.metadata)
        })
        .map(|(resource, object)| Op::Write(resource, object))
        .collect();
    ops.extend(gone);
    ops
}

/// Sends `ops` (namespaces already exist) the fastest way a client can, `concurrency` at a
/// time: creates, replaces conditional on the version the last write produced (what a writer
/// keeping its objects would send), deletes. Times it and records the versions produced.
pub async fn write(
    ops: &Ops,
    writes: Vec<Op>,
    concurrency: usize,
    versions: &mut Versions,
) -> anyhow::Result<Floor> {
    let count = writes.len();
    let params = PostParams::default();
    let began = Instant::now();
    let known = &versions.0;
    let stored: Vec<(Place, Option<String>)> = stream::iter(writes)
        .map(|op| {
            let params = params.clone();
            async move {
                let (delete, (resource, mut object)) = match op {
                    Op::Write(resource, object) => (false, (resource, object)),
                    Op::Delete(resource, object) => (true, (resource, object)),
                };
                let api: Api<DynamicObject> = match object.namespace() {
                    Some(ns) => Api::namespaced_with(ops.client.clone(), &ns, &resource),
                    None => Api::all_with(ops.client.clone(), &resource),
                };
                let place = place_of(&resource, &object);
                let name = object.name_any();
                let context = || format!("writing {} {name}", resource.kind);
                let stored = match (delete, known.get(&place)) {
                    (true, _) => {
                        api.delete(&name, &DeleteParams::background())
                            .await
                            .with_context(context)?;
                        None
                    }
                    (false, Some(version)) => {
                        object.metadata.resource_version = Some(version.clone());
                        let stored = api.replace(&name, &params, &object).await;
                        stored.with_context(context)?.resource_version()
                    }
                    (false, None) => {
                        let stored = api.create(&params, &object).await;
                        stored.with_context(context)?.resource_version()
                    }
                };
                anyhow::Ok((place, stored))
            }
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    let wall = began.elapsed();
    versions
        .0
        .extend(stored.into_iter().filter_map(|(p, v)| Some((p, v?))));
    Ok(Floor {
        objects: count,
        wall,
    })
}
