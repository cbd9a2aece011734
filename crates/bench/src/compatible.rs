//! The compatible floor: everything a Nimbus-compatible operator must write, written directly by
//! the bench with the cheapest correct verbs, as many requests in flight as it is given. Per
//! binding, a chain that starts the moment the binding's create returns: its NimbusPolicy
//! (POST, owned by the binding), then, once the policy's uid is known, its native objects (POST,
//! controlled by the policy), then the policy's status and the binding's (JSON merge patch on
//! `/status`); a cluster binding's ClusterNimbusPolicy and per-namespace NimbusPolicies alike;
//! the intents' statuses. Statuses are computed by the core functions the operator computes them
//! with (`nimbus_core::status`), so the objects equal the operator's apart from timestamps and
//! the generated-hash annotation (which only the operator's drift check reads). Churn: the
//! policies' specs, the native objects that change and the statuses, by merge patch.

use crate::workload::{self, Binding, Ops, Plan};
use anyhow::Context as _;
use futures::future::{try_join, try_join_all};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, NimbusPolicyStatus,
    SecurityIntent, SecurityIntentBinding,
};
use nimbus_core::engines::{EngineSet, Environment, Generated, PolicyInput};
use nimbus_core::namespaces::ProtectedNamespaces;
use nimbus_core::plan;
use nimbus_core::policy::Claim;
use nimbus_core::status::{self, NativeOutcome, NativeResult, Outcome};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// The field manager of the policies, as the operator's (the native objects': their engine's).
const FIELD_MANAGER: &str = "nimbus-operator";

/// What one run of the compatible floor wrote, and how long it took.
pub struct Run {
    pub wall: Duration,
    /// Writes by verb (POST, PATCH, DELETE).
    pub writes: BTreeMap<&'static str, u64>,
}

/// A binding's policy's native objects as the floor wrote them, for the next run to change.
struct Written {
    natives: Vec<Generated>,
}

/// The direct writer: a client, the requests it may have in flight, what a plan reads.
pub struct Writer {
    client: Client,
    slots: Semaphore,
    /// As stored: their managedFields name who wrote them (a binding status's `intentWriters`).
    intents: Vec<SecurityIntent>,
    protected: ProtectedNamespaces,
    writes: Mutex<BTreeMap<&'static str, u64>>,
    /// The bindings' chains of the last run, by namespace and name.
    written: Mutex<HashMap<(String, String), Written>>,
}

impl Writer {
    /// A writer keeping at most `concurrency` requests in flight; reads the intents once
    /// (what an operator's cache would hold).
    pub async fn new(ops: &Ops, concurrency: usize) -> anyhow::Result<Self> {
        let api: Api<SecurityIntent> = Api::all(ops.client.clone());
        let wanted: Vec<&str> = workload::INTENTS.iter().map(|(name, _)| *name).collect();
        let intents = ops
            .list(&api, &ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|i| wanted.contains(&i.name_any().as_str()))
            .collect();
        Ok(Self {
            client: ops.client.clone(),
            slots: Semaphore::new(concurrency.max(1)),
            intents,
            // As the bench runs the operator (see `workload::NEVER_SELECTED`).
            protected: ProtectedNamespaces::default(),
            writes: Mutex::default(),
            written: Mutex::default(),
        })
    }

    fn intent(&self, name: &str) -> Option<SecurityIntent> {
        self.intents.iter().find(|i| i.name_any() == name).cloned()
    }

    fn count(&self, verb: &'static str) {
        *self
            .writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(verb)
            .or_default() += 1;
    }

    fn take_writes(&self) -> BTreeMap<&'static str, u64> {
        std::mem::take(&mut *self.writes.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Scenario A's writes: the intents' statuses, and every binding's chain (namespaced and
    /// the cluster binding `cluster` over `namespaces`) from the moment the bench's create of
    /// the binding returns.
    pub async fn cold(
        &self,
        ops: &Ops,
        plan: &Plan,
        cluster: &str,
        namespaces: &[String],
    ) -> anyhow::Result<Run> {
        self.take_writes();
        let began = Instant::now();
        let intents = try_join_all(self.intents.iter().map(|si| {
            let api = Api::<SecurityIntent>::all(self.client.clone());
            self.patch_status(api, si.name_any(), status::intent_status(si))
        }));
        let bindings = try_join_all(plan.bindings.iter().map(|b| self.binding_chain(ops, b)));
        let cluster = self.cluster_chain(ops, plan, cluster, namespaces);
        try_join(try_join(intents, bindings), cluster).await?;
        Ok(Run {
            wall: began.elapsed(),
            writes: self.take_writes(),
        })
    }

    /// Scenario C's writes: every binding's spec changes to `revision` (the bench's write), and
    /// from the moment each change returns, its policy's spec, the native objects that change,
    /// and both statuses.
    pub async fn churn(&self, ops: &Ops, plan: &Plan, revision: u32) -> anyhow::Result<Run> {
        self.take_writes();
        let began = Instant::now();
        try_join_all(
            plan.bindings
                .iter()
                .map(|b| self.change_chain(ops, b, revision)),
        )
        .await?;
        Ok(Run {
            wall: began.elapsed(),
            writes: self.take_writes(),
        })
    }

    /// One new binding protected (scenario L): its policy, then its native objects; its
    /// statuses after.
    pub async fn protect(&self, binding: &SecurityIntentBinding) -> anyhow::Result<()> {
        let ns = binding
            .namespace()
            .context("a binding without a namespace")?;
        self.policy_chain(binding.clone(), &ns).await.map(drop)
    }

    /// Creates binding `b` (the bench's own write, limited as `workload::create_workload`'s),
    /// then writes its chain.
    async fn binding_chain(&self, ops: &Ops, b: &Binding) -> anyhow::Result<()> {
        let created = {
            let _turn = workload::BINDING_WRITES.acquire().await?;
            let api = Api::namespaced(ops.client.clone(), &b.namespace);
            ops.create(&api, &workload::binding(b, workload::CREATED)?)
                .await?
        };
        let written = self.policy_chain(created, &b.namespace).await?;
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((b.namespace.clone(), b.name.clone()), written);
        Ok(())
    }

    /// The chain of a stored binding: its policy, natives, the policy's status, its status.
    async fn policy_chain(
        &self,
        binding: SecurityIntentBinding,
        namespace: &str,
    ) -> anyhow::Result<Written> {
        let planned = plan::binding(&binding, |n| self.intent(n), None)?;
        let desired = planned
            .policy
            .clone()
            .context("a binding without a policy")?;
        let api: Api<NimbusPolicy> = Api::namespaced(self.client.clone(), namespace);
        let mut policy = self.create(api.clone(), &desired).await?;
        let uid = policy.uid().context("a policy without a uid")?;
        let (natives, status) = self
            .translate(api, &policy, &PolicyInput::namespaced(&policy, &uid))
            .await?;
        policy.status = Some(status);
        let outcome = Outcome::untouched(Some(&policy));
        let status = status::binding_status(&binding, &Ok(planned), outcome);
        let api = Api::<SecurityIntentBinding>::namespaced(self.client.clone(), namespace);
        self.patch_status(api, binding.name_any(), status).await?;
        Ok(Written { natives })
    }

    /// The cluster binding named `name` over `namespaces`: created (the bench's write), then
    /// its ClusterNimbusPolicy's and each namespace's NimbusPolicy's chain, then its status.
    async fn cluster_chain(
        &self,
        ops: &Ops,
        plan: &Plan,
        name: &str,
        namespaces: &[String],
    ) -> anyhow::Result<()> {
        let csib = workload::cluster_binding(plan, name)?;
        let csib = ops.create(&Api::all(ops.client.clone()), &csib).await?;
        let namespaces: Vec<Namespace> = namespaces
            .iter()
            .map(String::as_str)
            .map(namespace)
            .collect();
        let planned =
            plan::cluster_binding(&csib, |n| self.intent(n), &namespaces, &self.protected)?;
        let cluster = async {
            let desired = planned
                .cluster_policy
                .as_ref()
                .context("no cluster policy")?;
            let api: Api<ClusterNimbusPolicy> = Api::all(self.client.clone());
            let mut policy = self.create(api.clone(), desired).await?;
            let uid = policy.uid().context("a policy without a uid")?;
            let input = PolicyInput::cluster(&policy, &uid);
            let (_, status) = self.translate(api, &policy, &input).await?;
            policy.status = Some(status);
            anyhow::Ok(policy)
        };
        let per_namespace = try_join_all(planned.namespaces.iter().map(|(ns, desired)| async {
            let Some(desired) = desired else {
                return anyhow::Ok(None);
            };
            let api: Api<NimbusPolicy> = Api::namespaced(self.client.clone(), ns);
            let mut policy = self.create(api.clone(), desired).await?;
            let uid = policy.uid().context("a policy without a uid")?;
            let input = PolicyInput::namespaced(&policy, &uid);
            let (_, status) = self.translate(api, &policy, &input).await?;
            policy.status = Some(status);
            Ok(Some(policy))
        }));
        let (cluster, per_namespace) = try_join(cluster, per_namespace).await?;
        let outcomes: Vec<Outcome<'_, NimbusPolicy>> = per_namespace
            .iter()
            .map(|p| Outcome::untouched(p.as_ref()))
            .collect();
        let status = status::cluster_binding_status(
            &csib,
            &Ok(planned),
            Outcome::untouched(Some(&cluster)),
            &outcomes,
            &self.protected,
        );
        let api = Api::<ClusterSecurityIntentBinding>::all(self.client.clone());
        self.patch_status(api, csib.name_any(), status).await
    }

    /// Writes the native objects of `policy` (stored, with its uid in `input`) and then its
    /// status; returns both.
    async fn translate<P>(
        &self,
        api: Api<P>,
        policy: &P,
        input: &PolicyInput<'_>,
    ) -> anyhow::Result<(Vec<Generated>, NimbusPolicyStatus)>
    where
        P: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        let planned = translation(input);
        try_join_all(
            planned
                .translation
                .objects
                .iter()
                .map(|g| self.create_native(g)),
        )
        .await?;
        let status = policy_status(&planned, policy.meta().generation);
        self.patch_status(api, policy.name_any(), status.clone())
            .await?;
        Ok((planned.translation.objects, status))
    }

    /// Binding `b`'s spec changed to `revision` (the bench's merge patch), then its chain: the
    /// policy's spec, the native objects that differ, both statuses.
    async fn change_chain(&self, ops: &Ops, b: &Binding, revision: u32) -> anyhow::Result<()> {
        let key = (b.namespace.clone(), b.name.clone());
        let before = self
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key)
            .with_context(|| format!("binding {}/{} was not written", b.namespace, b.name))?;
        let binding = {
            let _turn = workload::BINDING_WRITES.acquire().await?;
            let api = Api::namespaced(ops.client.clone(), &b.namespace);
            let spec = serde_json::to_value(workload::binding(b, revision)?.spec)?;
            ops.merge_patch(&api, &b.name, &json!({ "spec": spec }))
                .await?
        };
        let planned = plan::binding(&binding, |n| self.intent(n), None)?;
        let desired = planned
            .policy
            .clone()
            .context("a binding without a policy")?;
        let api: Api<NimbusPolicy> = Api::namespaced(self.client.clone(), &b.namespace);
        let spec = json!({ "spec": serde_json::to_value(&desired.spec)? });
        let mut policy = self.patch(api.clone(), &b.name, &spec).await?;
        let uid = policy.uid().context("a policy without a uid")?;
        let planned_natives = translation(&PolicyInput::namespaced(&policy, &uid));
        let now = &planned_natives.translation.objects;
        try_join_all(changes(&before.natives, now).map(|op| self.change_native(op))).await?;
        let status = policy_status(&planned_natives, policy.meta().generation);
        self.patch_status(api, b.name.clone(), status.clone())
            .await?;
        policy.status = Some(status);
        let status =
            status::binding_status(&binding, &Ok(planned), Outcome::untouched(Some(&policy)));
        let api = Api::<SecurityIntentBinding>::namespaced(self.client.clone(), &b.namespace);
        self.patch_status(api, b.name.clone(), status).await?;
        let written = Written {
            natives: planned_natives.translation.objects,
        };
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, written);
        Ok(())
    }

    async fn create<K>(&self, api: Api<K>, object: &K) -> anyhow::Result<K>
    where
        K: Resource + Clone + DeserializeOwned + Serialize + Debug,
    {
        let _slot = self.slots.acquire().await?;
        self.count("POST");
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        api.create(&params, object)
            .await
            .with_context(|| format!("creating {}", object.name_any()))
    }

    async fn create_native(&self, generated: &Generated) -> anyhow::Result<()> {
        let api = native_api(&self.client, generated);
        let _slot = self.slots.acquire().await?;
        self.count("POST");
        let params = PostParams {
            field_manager: Some(generated.engine.manager().to_owned()),
            ..PostParams::default()
        };
        let name = generated.object.name_any();
        api.create(&params, &generated.object)
            .await
            .with_context(|| format!("creating {} {name}", generated.kind.kind))
            .map(drop)
    }

    async fn change_native(&self, op: Change<'_>) -> anyhow::Result<()> {
        let generated = match &op {
            Change::Create(g) | Change::Patch(g) | Change::Delete(g) => *g,
        };
        if let Change::Create(g) = op {
            return self.create_native(g).await;
        }
        let api = native_api(&self.client, generated);
        let name = generated.object.name_any();
        let _slot = self.slots.acquire().await?;
        let context = || format!("writing {} {name}", generated.kind.kind);
        match op {
            Change::Delete(_) => {
                self.count("DELETE");
                api.delete(&name, &DeleteParams::background())
                    .await
                    .with_context(context)
                    .map(drop)
            }
            _ => {
                self.count("PATCH");
                let params = PatchParams {
                    field_manager: Some(generated.engine.manager().to_owned()),
                    ..PatchParams::default()
                };
                api.patch(
                    &name,
                    &params,
                    &Patch::Merge(merge_body(&generated.object)?),
                )
                .await
                .with_context(context)
                .map(drop)
            }
        }
    }

    async fn patch<K>(&self, api: Api<K>, name: &str, body: &Value) -> anyhow::Result<K>
    where
        K: Resource + Clone + DeserializeOwned + Debug,
    {
        let _slot = self.slots.acquire().await?;
        self.count("PATCH");
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        api.patch(name, &params, &Patch::Merge(body))
            .await
            .with_context(|| format!("patching {name}"))
    }

    /// Writes `status` (its timestamps set now, as the operator sets them) by merge patch.
    async fn patch_status<K, S>(&self, api: Api<K>, name: String, status: S) -> anyhow::Result<()>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
        S: Serialize,
    {
        let mut status = serde_json::to_value(status)?;
        // A SecurityIntent's status has no timestamp (see the operator's `write::status`).
        stamp(&mut status, K::kind(&()) != SecurityIntent::kind(&()));
        let _slot = self.slots.acquire().await?;
        self.count("PATCH");
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let body = json!({ "status": status });
        api.patch_status(&name, &params, &Patch::Merge(&body))
            .await
            .with_context(|| format!("writing the status of {name}"))
            .map(drop)
    }
}

/// One native object's write when a policy changes.
#[derive(Clone, Copy)]
enum Change<'a> {
    Create(&'a Generated),
    Patch(&'a Generated),
    Delete(&'a Generated),
}

/// What turns the native objects `before` into `now`: new ones created, changed ones patched,
/// those no longer generated deleted.
fn changes<'a>(before: &'a [Generated], now: &'a [Generated]) -> impl Iterator<Item = Change<'a>> {
    let place = |g: &Generated| (g.kind.kind, g.object.namespace(), g.object.name_any());
    let old: HashMap<_, &Generated> = before.iter().map(|g| (place(g), g)).collect();
    let new: HashMap<_, &Generated> = now.iter().map(|g| (place(g), g)).collect();
    let written = now.iter().filter_map(move |g| match old.get(&place(g)) {
        None => Some(Change::Create(g)),
        Some(o) if o.object.data != g.object.data || o.object.metadata != g.object.metadata => {
            Some(Change::Patch(g))
        }
        Some(_) => None,
    });
    let gone = before
        .iter()
        .filter(move |g| !new.contains_key(&place(g)))
        .map(Change::Delete);
    written.chain(gone)
}

/// A native object as a merge patch: its body and its labels and annotations.
fn merge_body(object: &DynamicObject) -> anyhow::Result<Value> {
    let mut body = serde_json::to_value(&object.data)?;
    let meta =
        json!({"labels": object.metadata.labels, "annotations": object.metadata.annotations});
    if let Some(map) = body.as_object_mut() {
        map.insert("metadata".into(), meta);
    }
    Ok(body)
}

/// A policy's plan, as the operator plans one it owns (every engine served, as the bench
/// installs them; nothing reported before).
fn translation(input: &PolicyInput<'_>) -> nimbus_core::policy::PolicyPlan {
    nimbus_core::policy::plan(
        input,
        &Environment::default(),
        EngineSet::all(),
        Claim::Bound,
        &[],
    )
}

/// A policy's status once every native object of `planned` was written.
fn policy_status(
    planned: &nimbus_core::policy::PolicyPlan,
    generation: Option<i64>,
) -> NimbusPolicyStatus {
    let natives: Vec<NativeResult> = (planned.translation.objects.iter())
        .map(|g| NativeResult {
            entry: g.entry(),
            listed: g.kind.listed,
            outcome: NativeOutcome::Written,
        })
        .collect();
    status::policy_status(planned, generation, &natives)
}

/// Sets a status's conditions' `lastTransitionTime` to now, and its `lastUpdated` when its kind
/// has one (`timed`), as the operator's first write of it does.
fn stamp(status: &mut Value, timed: bool) {
    let now = serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now())).unwrap_or_default();
    let Some(map) = status.as_object_mut() else {
        return;
    };
    if timed {
        map.insert("lastUpdated".into(), now.clone());
    }
    let conditions = map.get_mut("conditions").and_then(Value::as_array_mut);
    for condition in conditions.into_iter().flatten() {
        if let Some(c) = condition.as_object_mut() {
            c.insert("lastTransitionTime".into(), now.clone());
        }
    }
}

fn native_api(client: &Client, generated: &Generated) -> Api<DynamicObject> {
    let resource: ApiResource = generated.kind.api_resource();
    match generated.object.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

fn namespace(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        ..Default::default()
    }
}
