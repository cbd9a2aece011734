//! NimbusPolicy / ClusterNimbusPolicy → native policies: observe (the policy's claim, from
//! the caches) → plan ([`nimbus_core::policy`]) → apply what differs and prune what is no
//! longer wanted → write the status the core decides, once.

use super::report::{object_key, update_status};
use super::translated::Translated;
use crate::context::Context;
use crate::error::Error;
use crate::exceptions;
use crate::metrics::EngineLabels;
use crate::write::natives::{Key, NativeObject};
use crate::write::{Executed, predates_write};
use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use nimbus_api::{ClusterSecurityIntentBinding, NimbusPolicyStatus, NimbusRule};
use nimbus_core::engines::{self, Engine, Generated, PolicyInput};
use nimbus_core::intents::Origin;
use nimbus_core::policy::{Claim, Handover, PolicyPlan, reported};
use nimbus_core::status::{self, NativeOutcome, NativeResult};
use std::sync::Arc;
use std::time::Duration;

pub async fn reconcile<P: Translated>(policy: Arc<P>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _turn = ctx.translating.turn(object_key(&*policy)).await;
    // A copy older than the binding controller's last write of the policy, which translated
    // what it wrote (a native object's change can bring this reconcile before the policy's
    // own watch event): translating it would undo that. The newer copy is on its way.
    if predates_write(&ctx.written, &*policy) {
        return Ok(Action::requeue(ctx.resync));
    }
    match policy.claim(&ctx) {
        // The binding controller's write of the policy triggers this again.
        Claim::Restoring => Ok(Action::requeue(ctx.resync)),
        // Its binding is gone: the garbage collector deletes it, and its native objects after
        // it. Saying so in its status (and an Event) would tell no one, and the write races the
        // deletion: a 404 when it loses.
        Claim::NotBound if ctx.orphaned(&*policy) => Ok(Action::await_change()),
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
    let _turn = ctx.translating.turn(object_key(&stored)).await;
    match sync(ctx, &stored, current, Claim::Bound).await {
        Ok(synced) => {
            stored.set_status(synced.status);
            Some(stored)
        }
        Err(error) => {
            tracing::debug!(policy = %object_key(&stored), %error, "translation left to the policy controller");
            None
        }
    }
}

/// What a translation did: the policy's status, and the reconcile's result.
struct Synced {
    status: NimbusPolicyStatus,
    action: Result<Action, Error>,
}

/// Plans `policy` and converges its native objects to the plan, then writes the status the
/// plan and the writes decide. The caller holds the policy's turn (see [`crate::serial`]).
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
    let now = Timestamp::now();
    let mut input = policy.input(&uid);
    let (exceptions, exceptions_change) =
        ctx.exceptions_in_force(input.binding.as_ref(), input.namespace.as_deref(), now);
    input.exceptions = exceptions;
    let env = ctx.environment(input.rules);
    let engines = ctx.engine_set();
    let plan = nimbus_core::policy::plan(&input, &env, engines, claim, reported(current));

    let mut executed = Executed::default();
    let natives = apply_natives(ctx, &input, &plan.translation.objects, &mut executed).await?;
    let in_force =
        |n: &NativeResult| matches!(n.outcome, NativeOutcome::Written | NativeOutcome::Unchanged);
    if plan.executes() && natives.iter().all(in_force) {
        ctx.metrics
            .time_to_protect
            .protected(&object_key(policy), began);
    }
    let handover = handing_over(ctx, policy, &input, &plan);
    let pruned = prune_natives(ctx, &uid, &plan, handover.as_ref()).await?;
    announce(ctx, policy, current, &natives, &pruned);

    let mut plan = plan;
    if let Some(probes) = &ctx.probes {
        let not_live = |intent: &str, engine| probes.not_live(&uid, intent, engine);
        let problems = nimbus_core::probes::problems(input.rules, &plan.translation, not_live);
        plan.translation.problems.extend(problems);
    }
    let status = status::policy_status(&plan, policy.meta().generation, &natives);
    let api = policy.api(ctx);
    update_status(ctx, &api, policy, current, status.clone()).await?;
    // Back when the engine taking over has loaded its objects, to prune the old ones; when an
    // exception in force expires, to enforce on its workloads again at once.
    let back = [
        Some(ctx.resync),
        handover.map(|h| h.wait),
        exceptions_change.map(|at| exceptions::until(at, now)),
    ];
    let action = Action::requeue(back.into_iter().flatten().min().unwrap_or(ctx.resync));
    Ok(Synced {
        status,
        action: executed.result(action),
    })
}

/// The engine handover under way for `policy` (see [`PolicyPlan::handover`]), from the native
/// objects it and the other policies of its binding control.
fn handing_over<P: Translated>(
    ctx: &Context,
    policy: &P,
    input: &PolicyInput<'_>,
    plan: &PolicyPlan,
) -> Option<Handover> {
    if !plan.executes() {
        return None;
    }
    let owned = ctx.natives.owned_by(&input.owner.uid);
    let now = jiff::Timestamp::now();
    // One that does not act yet (a Kyverno policy not Ready) counts as just written.
    let acting_for = |object: &NativeObject| {
        let created = object.metadata.creation_timestamp.as_ref();
        let created = created.filter(|_| object.acts)?;
        Duration::try_from(now.duration_since(created.0)).ok()
    };
    let loaded_for = |generated: &Generated| {
        let key = Key::of(generated.kind, &generated.object);
        let (_, object) = owned.iter().find(|(kind, o)| Key::of(kind, &**o) == key)?;
        acting_for(object)
    };
    // Of each other policy of the binding `engine` writes for: how long its objects have
    // acted, or `None` when it has written none yet.
    let elsewhere = |engine: Engine| {
        let mut ages = Vec::new();
        for (uid, origin, rules) in binding_siblings(ctx, policy, input.origin) {
            if !rules.iter().any(|id| engine.handles(id, origin)) {
                continue;
            }
            let before = ages.len();
            let theirs = ctx.natives.owned_by(&uid);
            let objects = theirs.iter().filter(|(_, o)| engine_of(o) == Some(engine));
            ages.extend(objects.map(|(_, o)| acting_for(o)));
            if ages.len() == before {
                ages.push(None);
            }
        }
        ages
    };
    plan.handover(
        input.origin,
        |engine| owned.iter().any(|(_, o)| engine_of(o) == Some(engine)),
        loaded_for,
        elsewhere,
    )
}

fn engine_of(object: &NativeObject) -> Option<Engine> {
    let manager = object.labels().get(engines::MANAGED_BY)?;
    Engine::ALL.into_iter().find(|e| e.manager() == manager)
}

/// The other policies of `policy`'s cluster binding, if it has one (its cluster policy, or its
/// namespaces' policies): the uid, origin and intent IDs of each.
fn binding_siblings<P: Translated>(
    ctx: &Context,
    policy: &P,
    origin: Origin,
) -> Vec<(String, Origin, Vec<String>)> {
    let binding = policy
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == ClusterSecurityIntentBinding::kind(&()));
    let Some(binding) = binding else {
        return Vec::new();
    };
    let ours = |meta: &ObjectMeta| {
        let owners = meta.owner_references.iter().flatten();
        owners
            .into_iter()
            .any(|o| o.controller == Some(true) && o.uid == binding.uid)
    };
    let sibling = |meta: &ObjectMeta, origin, rules: &[NimbusRule]| {
        let uid = meta.uid.clone()?;
        Some((uid, origin, rules.iter().map(|r| r.id.clone()).collect()))
    };
    match origin {
        Origin::Cluster => (ctx.policies.state().iter())
            .filter(|p| ours(&p.metadata))
            .filter_map(|p| sibling(&p.metadata, Origin::ClusterBindingNamespace, &p.spec.rules))
            .collect(),
        Origin::ClusterBindingNamespace => (ctx.cluster_policies.state().iter())
            .filter(|p| ours(&p.metadata))
            .filter_map(|p| sibling(&p.metadata, Origin::Cluster, &p.spec.rules))
            .collect(),
        Origin::Binding => Vec::new(),
    }
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
/// engines the plan prunes. Returns the engines of those deleted.
async fn prune_natives(
    ctx: &Context,
    uid: &str,
    plan: &PolicyPlan,
    handover: Option<&Handover>,
) -> Result<Vec<Engine>, Error> {
    if !plan.executes() {
        return Ok(Vec::new());
    }
    let pruned = ctx
        .natives
        .prune(uid, &plan.translation.objects, |engine| {
            plan.prunes(engine, handover)
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
