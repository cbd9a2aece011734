//! Thin controllers: observe (the caches), plan (the pure core), execute ([`crate::write`]),
//! report (the status the core decides).

pub mod binding;
pub mod cluster_binding;
pub mod intent;
pub mod policy;

use crate::context::Context;
use crate::error::Error;
use crate::write::{
    self, Change, Executed, PolicyWrite, Status, predates_status_write, write_policy,
};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use nimbus_core::status::Outcome;
use policy::Translated;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requeue delay after a first failed reconcile; it doubles with each further failure of the
/// same object, up to the resync period.
const RETRY: Duration = Duration::from_secs(5);

/// The key `obj`'s failures are counted (and its time to protect kept) under.
pub(crate) fn object_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// Retries with exponential backoff. A failure that cannot succeed until the input changes (the
/// apiserver rejected what we sent as invalid or too large) waits for the resync period: a
/// change of the input triggers a reconcile anyway.
pub fn error_policy<K: Resource<DynamicType = ()>>(
    obj: Arc<K>,
    err: &Error,
    ctx: Arc<Context>,
) -> Action {
    let failing = ctx.count_failure(&object_key(&*obj));
    let delay = retry_delay(failing.since.elapsed(), err.is_permanent(), ctx.resync);
    tracing::warn!(kind = %K::kind(&()), name = %obj.name_any(), namespace = ?obj.namespace(), error = %err, failures = failing.count, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// How long to wait after a failure, the object failing for `failing_for`: as long again
/// (at least [`RETRY`], at most the resync period). Retries that keep failing double the wait
/// from the second on, as a count of failures would; but a burst of failures that events triggered within moments
/// (a namespace re-created, a kube-apiserver restarted) does not push the next try minutes away.
fn retry_delay(failing_for: Duration, permanent: bool, resync: Duration) -> Duration {
    if permanent {
        return resync;
    }
    failing_for.max(RETRY).min(resync)
}

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
    fn recorded(self, executed: &mut Executed) -> Result<Kept<P>, Error> {
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
async fn keep_policy<P: Translated>(
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
async fn keep_own_policy<B, P>(
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

/// When the change of `binding` being reconciled was first seen, unless its status already
/// reports its generation (then no change is pending: whatever it rewrites now is not timed).
fn binding_change_seen<B: Resource<DynamicType = ()>>(
    ctx: &Context,
    binding: &B,
    observed_generation: Option<i64>,
) -> Option<Instant> {
    let generation = binding.meta().generation;
    ctx.metrics.time_to_protect.binding_seen(
        binding.meta().uid.as_deref().unwrap_or_default(),
        generation,
        observed_generation == generation,
    )
}

/// One Normal event on `binding` when it deleted its `P` policies named `name` (namespaces,
/// for a cluster binding's per-namespace policies, listed in the note), which no status can
/// show once they are gone. A policy created or rewritten is the change the binding's author
/// just made, and the binding's status reports it (`nimbusPolicy`, `observedGeneration`,
/// `Ready`): an Event per binding would add as many writes as there are bindings.
fn announce_deletions<B, P>(
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
fn announce_intent_changes<B: Resource<DynamicType = ()>>(
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

/// Writes an object's status (if it changed and says something new, see
/// [`nimbus_core::status::only_pending`]) and raises a Warning event when it turns not ready,
/// then schedules the next drift re-check; says whether it wrote.
async fn update_status<K, S>(
    ctx: &Context,
    api: &kube::Api<K>,
    obj: &K,
    current: Option<&S>,
    status: S,
) -> Result<(Action, bool), Error>
where
    K: Resource<DynamicType = ()>
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug,
    S: Status,
{
    let before = current.map(Status::conditions).unwrap_or_default();
    if nimbus_core::status::only_pending(before, status.conditions()) {
        return Ok((Action::requeue(ctx.resync), false));
    }
    let not_ready = status
        .conditions()
        .iter()
        .find(|c| c.status == "False")
        .cloned();
    let written = write::status::status(api, obj, current, status, &ctx.written).await?;
    if written && let Some(c) = not_ready {
        ctx.events
            .about(obj, EventType::Warning, &c.reason, c.message);
    }
    Ok((Action::requeue(ctx.resync), written))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_up_to_the_resync_and_permanent_failures_wait_for_it() {
        let resync = Duration::from_secs(300);
        // Each retry failing when its wait is over: the waits double.
        let mut failing_for = Duration::ZERO;
        let mut delays = Vec::new();
        for _ in 0..8 {
            let delay = retry_delay(failing_for, false, resync);
            delays.push(delay.as_secs());
            failing_for += delay;
        }
        assert_eq!(delays, [5, 5, 10, 20, 40, 80, 160, 300]);
        assert_eq!(retry_delay(Duration::MAX, false, resync), resync);
        assert_eq!(retry_delay(Duration::ZERO, true, resync), resync);
    }

    #[test]
    fn a_burst_of_failures_waits_no_longer_than_one() {
        let resync = Duration::from_secs(300);
        // Five failures in 3 s, each triggered by an event, not by a retry.
        for failing_for in [0, 1, 2, 3] {
            let delay = retry_delay(Duration::from_secs(failing_for), false, resync);
            assert_eq!(delay, RETRY, "failing for {failing_for} s");
        }
    }
}
