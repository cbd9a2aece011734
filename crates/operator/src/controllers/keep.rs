//! A binding's execute step: keep each policy it generates as planned (see
//! [`crate::write::write_policy`]), translate what it wrote at once, and announce what no status
//! can show.

use super::policy;
use super::report::object_key;
use super::translated::Translated;
use crate::context::Context;
use crate::error::Error;
use crate::write::{Change, Executed, PolicyWrite, predates_status_write, write_policy};
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use nimbus_api::Condition;
use nimbus_core::status::Outcome;
use std::sync::Arc;
use std::time::Instant;

/// One policy a binding generates, after the binding's reconcile kept it (see [`keep_policy`]);
/// `E`: why its write failed.
pub(super) struct Kept<P, E = String> {
    /// As it now stands: as just written and translated, with its status, or as observed before
    /// (`None`: there is none, or it was written and not translated).
    pub policy: Option<Arc<P>>,
    /// What the write changed, if anything.
    pub change: Result<Option<Change>, E>,
    /// Whether it was written and awaits translation by the policy controller.
    pub awaiting: bool,
    /// Whether the cached copy it stands as is older than the status this process wrote to it
    /// (translated at once after an earlier write): a binding status computed from it would be
    /// out of date, and the newer copy, on its way, reconciles the binding again.
    pub stale: bool,
}

impl<P> Kept<P, Error> {
    /// The write's failure recorded in `executed` (a lost race ends the reconcile).
    pub(super) fn recorded(self, executed: &mut Executed) -> Result<Kept<P>, Error> {
        Ok(Kept {
            change: executed.record(self.change)?,
            policy: self.policy,
            awaiting: self.awaiting,
            stale: self.stale,
        })
    }
}

impl<P> Kept<P> {
    /// What it means for the binding's status.
    pub(super) fn outcome(&self) -> Outcome<'_, P> {
        Outcome::Owned {
            observed: self.policy.as_deref(),
            write: self.change.clone().map(|_| self.awaiting),
        }
    }
}

/// Keeps one policy a binding generates (see [`write_policy`]), and translates what it wrote
/// at once (see [`policy::translate_written`]) so that its native objects need not wait for
/// the policy to come back through the watch. `ours`: the one the binding owns; `change_seen`:
/// when the binding change being reconciled was first seen, if it is one (see
/// [`crate::metrics::TimeToProtect`]).
pub(super) async fn keep_policy<P: Translated>(
    ctx: &Context,
    api: &Api<P>,
    desired: Option<&P>,
    ours: Option<Arc<P>>,
    change_seen: Option<Instant>,
) -> Kept<P, Error> {
    let created = P::created(ctx);
    let write = write_policy(&ctx.written, api, desired, ours.as_deref(), created).await;
    let (change, stored) = match write {
        Ok(Some(PolicyWrite { change, stored })) => (change, stored),
        unchanged_or_failed => {
            let stale = ours
                .as_deref()
                .is_some_and(|p| predates_status_write(&ctx.written, p));
            return Kept {
                policy: ours,
                change: unchanged_or_failed.map(|_| None),
                awaiting: false,
                stale,
            };
        }
    };
    let policy = match stored {
        Some(stored) => {
            policy_rewritten(ctx, &stored, change, change_seen);
            let current = ours.as_deref().and_then(Translated::status);
            policy::translate_written(ctx, stored, current)
                .await
                .map(Arc::new)
        }
        None => None,
    };
    Kept {
        awaiting: policy.is_none() && change != Change::Deleted,
        policy,
        change: Ok(Some(change)),
        stale: false,
    }
}

/// Keeps the policy `binding` generates under its own name (see [`keep_policy`]) and announces
/// its deletion.
pub(super) async fn keep_own_policy<B, P>(
    ctx: &Context,
    binding: &B,
    api: &Api<P>,
    desired: Option<&P>,
    ours: Option<Arc<P>>,
    change_seen: Option<Instant>,
    executed: &mut Executed,
) -> Result<Kept<P>, Error>
where
    B: Resource<DynamicType = ()>,
    P: Translated,
{
    let kept = keep_policy(ctx, api, desired, ours, change_seen)
        .await
        .recorded(executed)?;
    if let Ok(Some(change)) = kept.change {
        announce_deletions::<_, P>(ctx, binding, &binding.name_any(), &[(None, change)]);
    }
    Ok(kept)
}

/// Starts timing the protection of `policy`, just `change`d for a binding change first seen at
/// `change_seen`.
fn policy_rewritten<P: Resource<DynamicType = ()>>(
    ctx: &Context,
    policy: &P,
    change: Change,
    change_seen: Option<Instant>,
) {
    if let (Some(since), Change::Created | Change::Updated) = (change_seen, change) {
        ctx.metrics
            .time_to_protect
            .policy_written(object_key(policy), since);
    }
}

/// When the change of `binding` being reconciled was first seen, unless its status (its
/// `conditions`) already ends it (see [`nimbus_core::status::change_ended`]): then no change is
/// pending, and whatever it rewrites now is not timed. A binding applied before its intent
/// waits for it, and is timed from its own first sighting to its policy protected.
pub(super) fn binding_change_seen<B: Resource<DynamicType = ()>>(
    ctx: &Context,
    binding: &B,
    conditions: &[Condition],
) -> Option<Instant> {
    let generation = binding.meta().generation;
    ctx.metrics.time_to_protect.binding_seen(
        binding.meta().uid.as_deref().unwrap_or_default(),
        generation,
        nimbus_core::status::change_ended(conditions, generation),
    )
}

/// One Normal event on `binding` when it deleted its `P` policies named `name` (namespaces,
/// for a cluster binding's per-namespace policies, listed in the note), which no status can
/// show once they are gone. A policy created or rewritten is the change the binding's author
/// just made, and the binding's status reports it (`nimbusPolicy`, `observedGeneration`,
/// `Ready`): an Event per binding would add as many writes as there are bindings.
pub(super) fn announce_deletions<B, P>(
    ctx: &Context,
    binding: &B,
    name: &str,
    changes: &[(Option<String>, Change)],
) where
    B: Resource<DynamicType = ()>,
    P: Resource<DynamicType = ()>,
{
    let deleted: Vec<Option<&str>> = changes
        .iter()
        .filter(|(_, change)| *change == Change::Deleted)
        .map(|(namespace, _)| namespace.as_deref())
        .collect();
    if deleted.is_empty() {
        return;
    }
    let mut note = format!("{} {name} deleted", P::kind(&()));
    let namespaces: Vec<&str> = deleted.into_iter().flatten().collect();
    if !namespaces.is_empty() {
        note += &format!(" in {}", namespaces.join(", "));
    }
    note += ": the binding no longer wants it";
    ctx.events
        .about(binding, EventType::Normal, "PolicyDeleted", note);
}

/// One Warning Event `IntentChanged` on `binding` per SecurityIntent it binds that is new or
/// was written since its status last said (see [`nimbus_core::authors::changes`]): which
/// intent, when, and by whom. Called once the status saying so is written, so each change is
/// announced once.
pub(super) fn announce_intent_changes<B: Resource<DynamicType = ()>>(
    ctx: &Context,
    binding: &B,
    before: &[nimbus_api::IntentWriter],
    after: &[nimbus_api::IntentWriter],
) {
    for note in nimbus_core::authors::changes(before, after) {
        ctx.events
            .about(binding, EventType::Warning, "IntentChanged", note);
    }
}
