//! NimbusPolicy / ClusterNimbusPolicy → native policies. One mechanism for every engine:
//! translate (pure) → apply what differs → prune what is no longer wanted → write status once.

use super::{Context, update_status};
use crate::cache::Creations;
use crate::error::Error;
use crate::metrics::EngineLabels;
use crate::write::natives::{Key, NativeObject};
use crate::write::{Executed, Policy, predates_write};
use futures::{StreamExt, stream};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use nimbus_api::{ClusterNimbusPolicy, NimbusPolicy, NimbusPolicyStatus};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{self, EngineSet, Generated, PolicyInput};
use nimbus_core::plan;
use nimbus_core::status::{self, NativeOutcome, NativeResult};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// A policy the operator translates: a NimbusPolicy or a ClusterNimbusPolicy.
pub(crate) trait Translated: Policy {
    /// What the translators read, with `uid` for the owner reference.
    fn input(&self, uid: &str) -> PolicyInput<'_>;
    fn status(&self) -> Option<&NimbusPolicyStatus>;
    fn set_status(&mut self, status: NimbusPolicyStatus);
    /// Whether it may be translated, from the caches.
    fn claim(&self, ctx: &Context) -> Claim;
    fn api(&self, ctx: &Context) -> Api<Self>;
    /// Those of its kind this process created and the cache does not show yet.
    fn created(ctx: &Context) -> &Creations;
}

impl Translated for NimbusPolicy {
    fn input(&self, uid: &str) -> PolicyInput<'_> {
        PolicyInput::namespaced(self, uid)
    }
    fn status(&self) -> Option<&NimbusPolicyStatus> {
        self.status.as_ref()
    }
    fn set_status(&mut self, status: NimbusPolicyStatus) {
        self.status = Some(status);
    }
    fn claim(&self, ctx: &Context) -> Claim {
        Claim::namespaced(ctx, self)
    }
    fn api(&self, ctx: &Context) -> Api<Self> {
        Api::namespaced(ctx.client.clone(), &self.namespace().unwrap_or_default())
    }
    fn created(ctx: &Context) -> &Creations {
        &ctx.policies_created
    }
}

impl Translated for ClusterNimbusPolicy {
    fn input(&self, uid: &str) -> PolicyInput<'_> {
        PolicyInput::cluster(self, uid)
    }
    fn status(&self) -> Option<&NimbusPolicyStatus> {
        self.status.as_ref()
    }
    fn set_status(&mut self, status: NimbusPolicyStatus) {
        self.status = Some(status);
    }
    fn claim(&self, ctx: &Context) -> Claim {
        Claim::cluster(ctx, self)
    }
    fn api(&self, ctx: &Context) -> Api<Self> {
        Api::all(ctx.client.clone())
    }
    fn created(ctx: &Context) -> &Creations {
        &ctx.cluster_policies_created
    }
}

pub async fn reconcile<P: Translated>(policy: Arc<P>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _turn = ctx.translating.turn(super::object_key(&*policy)).await;
    // A copy older than the binding controller's last write of the policy, which translated
    // what it wrote (a native object's change can bring this reconcile before the policy's
    // own watch event): translating it would undo that. The newer copy is on its way.
    if predates_write(&ctx.written, &*policy) {
        return Ok(Action::requeue(ctx.resync));
    }
    match policy.claim(&ctx) {
        // The binding controller's write of the policy triggers this again.
        Claim::Restoring => Ok(Action::requeue(ctx.resync)),
        claim => sync(&ctx, &*policy, policy.status(), claim).await?.action,
    }
}

/// Translates `stored`, a policy its binding's reconcile has just written (with the uid and
/// resourceVersion of that write; `current`: its status before), at once rather than when the
/// watch brings it back, and returns it with the status it now has. A failure is the policy
/// controller's to retry: the write triggers its reconcile, which finds what this one did.
pub(crate) async fn translate_written<P: Translated>(
    ctx: &Context,
    mut stored: P,
    current: Option<&NimbusPolicyStatus>,
) -> Option<P> {
    let _turn = ctx.translating.turn(super::object_key(&stored)).await;
    match sync(ctx, &stored, current, Claim::Bound).await {
        Ok(synced) => {
            stored.set_status(synced.status);
            Some(stored)
        }
        Err(error) => {
            tracing::debug!(policy = %super::object_key(&stored), %error, "translation left to the policy controller");
            None
        }
    }
}

/// Whether a policy may be translated. Only a binding's policy is: whoever may write
/// NimbusPolicies must not get what a binding's author would have to be trusted with (a
/// sandbox RoleBinding, say).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The policy a binding generates, as the operator wrote it.
    Bound,
    /// The policy a binding generates, holding fields someone else wrote: tampered with, or
    /// left by a predecessor (the original Nimbus) being taken over. The binding controller
    /// takes it back; until then what is in force stays, and nothing is reported: its status
    /// would be about content the operator did not write.
    Restoring,
    /// Not the policy any existing binding generates.
    NotBound,
}

impl Claim {
    /// The claim of a NimbusPolicy, from the caches.
    pub(crate) fn namespaced(ctx: &Context, np: &NimbusPolicy) -> Self {
        let generated = plan::generates(
            np,
            |ns, name| ctx.bindings.get(&ObjectRef::new(name).within(ns)),
            |name| ctx.cluster_bindings.get(&ObjectRef::new(name)),
            &ctx.protected_namespaces,
        );
        Self::of(generated, np)
    }

    /// The claim of a ClusterNimbusPolicy, from the caches.
    pub(crate) fn cluster(ctx: &Context, cwnp: &ClusterNimbusPolicy) -> Self {
        let generated = plan::generates_cluster_policy(cwnp, |name| {
            ctx.cluster_bindings.get(&ObjectRef::new(name))
        });
        Self::of(generated, cwnp)
    }

    fn of<K: Resource>(generated: bool, policy: &K) -> Self {
        match (generated, written_by_operator(policy)) {
            (true, true) => Self::Bound,
            (true, false) => Self::Restoring,
            (false, _) => Self::NotBound,
        }
    }
}

/// Whether every field of the policy's body was written by the operator (someone able to
/// create NimbusPolicies could otherwise pose as a binding's).
fn written_by_operator<K: Resource>(policy: &K) -> bool {
    policy
        .meta()
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.subresource.as_deref().is_none_or(str::is_empty))
        .filter(|e| {
            e.fields_v1.as_ref().is_some_and(|f| {
                f.0.as_object()
                    .is_some_and(|fields| fields.keys().any(|k| k != "f:metadata"))
            })
        })
        .all(|e| e.manager.as_deref() == Some(crate::write::FIELD_MANAGER))
}

/// Engines switched off here for which an external adapter listed objects in `entries` (the
/// policy's `status.adapterPolicies`, where Nimbus's adapters report what they created).
fn external_engines(engines: &EngineSet, entries: &[String]) -> BTreeSet<Engine> {
    Engine::ALL
        .into_iter()
        .filter(|e| !engines.enabled.contains(e))
        .filter(|e| entries.iter().any(|entry| is_entry_of(*e, entry)))
        .collect()
}

/// Whether a status entry (`Kind/name`, or `namespace/CronJob/name`) names a kind of `engine`.
fn is_entry_of(engine: Engine, entry: &str) -> bool {
    let mut parts = entry.rsplit('/');
    let kind = parts.nth(1);
    engines::kinds(engine)
        .iter()
        .any(|k| k.listed && Some(k.entry) == kind)
}

/// What a translation did: the policy's status, and the reconcile's result.
struct Synced {
    status: NimbusPolicyStatus,
    action: Result<Action, Error>,
}

/// Translates `policy` and converges its native objects, then writes its status. The caller
/// holds the policy's turn (see [`crate::serial`]).
async fn sync<P: Translated>(
    ctx: &Context,
    policy: &P,
    current: Option<&NimbusPolicyStatus>,
    claim: Claim,
) -> Result<Synced, Error> {
    let uid = policy
        .uid()
        .ok_or_else(|| Error::MissingField(policy.name_any(), "metadata.uid"))?;
    let began = std::time::Instant::now();
    let input = policy.input(&uid);
    let bound = claim == Claim::Bound;
    let reported = current
        .and_then(|s| s.adapter_policies.as_deref())
        .unwrap_or_default();
    let mut engines = ctx.engine_set();
    engines.external = external_engines(&engines, reported);
    let env = ctx.environment(input.rules);
    let mut translation = engines::translate(&input, &env, &engines);
    if !bound {
        translation.objects.clear();
        translation.problems = vec![status::not_bound()];
    }

    let mut executed = Executed::default();
    let natives = apply_natives(ctx, &input, &translation.objects, &mut executed).await?;
    if bound
        && natives
            .iter()
            .all(|n| matches!(n.outcome, NativeOutcome::Written | NativeOutcome::Unchanged))
    {
        ctx.metrics
            .time_to_protect
            .protected(&super::object_key(policy), began);
    }
    // An unbound policy prunes nothing either: one its binding's operator-written content was
    // tampered with is restored by the binding controller, and what is in force meanwhile stays.
    let mut handover = None;
    let pruned = if bound {
        handover = handing_over(ctx, &input, &translation, &engines);
        let spared = handover
            .as_ref()
            .map(|(_, engines)| engines.clone())
            .unwrap_or_default();
        prune_natives(ctx, &uid, &translation.objects, &engines, &spared).await?
    } else {
        Vec::new()
    };
    announce(ctx, policy, current, &natives, &pruned);

    // What external adapters reported stays listed (they own those entries).
    let external: Vec<String> = reported
        .iter()
        .filter(|e| {
            engines
                .external
                .iter()
                .any(|engine| is_entry_of(*engine, e))
        })
        .cloned()
        .collect();
    let status = status::policy_status(
        policy.meta().generation,
        &translation.problems,
        &natives,
        external,
    );
    let api = policy.api(ctx);
    let (mut action, _) = update_status(ctx, &api, policy, current, status.clone()).await?;
    if let Some((wait, _)) = handover {
        // Back when the engine taking over has loaded its objects, to prune the old ones.
        action = Action::requeue(wait);
    }
    Ok(Synced {
        status,
        action: executed.result(action),
    })
}

/// While an engine takes over from another of its mechanism (the engine preference, or which
/// engines are installed, changed), the objects of the engines standing by are kept until the
/// new ones have been loaded ([`engines::handover_wait`]): how much longer, and those engines.
fn handing_over(
    ctx: &Context,
    input: &PolicyInput<'_>,
    translation: &engines::Translation,
    engines: &engines::EngineSet,
) -> Option<(Duration, BTreeSet<Engine>)> {
    let standing_by: BTreeSet<Engine> = engines::ADMISSION_CONTROL
        .into_iter()
        .filter(|e| engines.preference.stands_by(*e, input.origin, engines))
        .collect();
    let owned = ctx.natives.owned_by(&input.owner.uid);
    let engine_of = |object: &NativeObject| {
        let manager = object.labels().get(engines::MANAGED_BY)?;
        Engine::ALL.into_iter().find(|e| e.manager() == manager)
    };
    let old = owned
        .iter()
        .any(|(_, o)| engine_of(o).is_some_and(|e| standing_by.contains(&e)));
    if !old {
        return None;
    }
    let chosen = engines.preference.in_force(input.origin, engines)?;
    let now = jiff::Timestamp::now();
    let ages = translation
        .objects
        .iter()
        .filter(|g| g.engine == chosen)
        .map(|g| {
            let key = Key::of(g.kind, &g.object);
            owned
                .iter()
                .find(|(kind, o)| Key::of(kind, &**o) == key)
                // One that does not act yet (a Kyverno policy not Ready) counts as just written.
                .filter(|(_, o)| o.acts)
                .and_then(|(_, o)| o.metadata.creation_timestamp.as_ref())
                .and_then(|created| Duration::try_from(now.duration_since(created.0)).ok())
        });
    engines::handover_wait(ages).map(|wait| (wait, standing_by))
}

/// Native objects of one policy written at once: they do not depend on each other, and a new
/// binding is protected when the last is written. Bounded, as every reconcile's writes are (see
/// `--reconcile-concurrency`), so that the API server is not sent more than it admits at once.
const NATIVES_IN_FLIGHT: usize = 4;

/// Applies every generated native object, a few at a time, as the policy `input` owns.
async fn apply_natives(
    ctx: &Context,
    input: &PolicyInput<'_>,
    objects: &[Generated],
    executed: &mut Executed,
) -> Result<Vec<NativeResult>, Error> {
    // (By index: a closure taking a reference would have to be general over its lifetime.)
    let applied: Vec<_> = stream::iter(0..objects.len())
        .map(|i| ctx.natives.apply(&objects[i], &input.owner, &ctx.written))
        .buffered(NATIVES_IN_FLIGHT)
        .collect()
        .await;
    let mut natives = Vec::new();
    for (generated, applied) in objects.iter().zip(applied) {
        let outcome = match executed.record(applied)? {
            Ok(outcome) => outcome,
            Err(message) => NativeOutcome::Failed(message),
        };
        if outcome == NativeOutcome::Written {
            ctx.metrics
                .applied
                .get_or_create(&EngineLabels {
                    engine: generated.engine.name(),
                })
                .inc();
        }
        natives.push(NativeResult {
            entry: generated.entry(),
            listed: generated.kind.listed,
            outcome,
        });
    }
    Ok(natives)
}

/// Deletes the native objects the policy with `uid` controls and no longer generates, of the
/// engines that translated it. Returns the engines of those deleted.
async fn prune_natives(
    ctx: &Context,
    uid: &str,
    generated: &[Generated],
    engines: &EngineSet,
    spared: &BTreeSet<Engine>,
) -> Result<Vec<Engine>, Error> {
    let pruned = ctx
        .natives
        .prune(uid, generated, |engine| {
            engines.active(engine) && !spared.contains(&engine)
        })
        .await?;
    for engine in &pruned {
        ctx.metrics
            .pruned
            .get_or_create(&EngineLabels {
                engine: engine.name(),
            })
            .inc();
    }
    Ok(pruned)
}

/// One Normal event on `policy` when its native objects changed and no binding change explains
/// it: a new generation comes from its binding, whose own event announced the change, so an
/// event here reports drift undone, an engine installed.
fn announce<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    policy: &K,
    current: Option<&NimbusPolicyStatus>,
    natives: &[NativeResult],
    pruned: &[Engine],
) {
    let written = natives
        .iter()
        .filter(|n| n.outcome == NativeOutcome::Written)
        .count();
    let resync = current.and_then(|s| s.observed_generation) == policy.meta().generation;
    if written + pruned.len() > 0 && resync {
        let note = format!(
            "{} applied, {} removed",
            count(written, "native policy", "native policies"),
            count(pruned.len(), "native policy", "native policies")
        );
        ctx.events
            .about(policy, EventType::Normal, "NativePoliciesSynced", note);
    }
}

/// `1 native policy`, `2 native policies`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
