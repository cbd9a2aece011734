//! Thin controllers: observe (the caches), plan (the pure core), execute ([`crate::write`]),
//! report (the status the core decides).

pub mod binding;
pub mod cluster_binding;
pub mod intent;
pub mod policy;

use crate::cache::Creations;
use crate::context::Context;
use crate::error::Error;
use crate::write::{self, Change, Executed, Policy, Status, write_policy};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use nimbus_core::status::Outcome;
use std::collections::BTreeMap;
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
    let failures = ctx.count_failure(&object_key(&*obj));
    let delay = retry_delay(failures, err.is_permanent(), ctx.resync);
    tracing::warn!(kind = %K::kind(&()), name = %obj.name_any(), namespace = ?obj.namespace(), error = %err, failures, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// How long to wait after the `failures`-th failure in a row.
fn retry_delay(failures: u32, permanent: bool, resync: Duration) -> Duration {
    if permanent {
        return resync;
    }
    RETRY
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(resync)
}

/// Writes the policy `binding` generates under its own name (`desired`, or deletes `ours`, the
/// one it owns, when nothing is desired), announces what changed, and returns what it did for
/// the binding's status. `created`: the policies of that kind this process created and the
/// cache does not show yet. `change_seen`: when the binding change being reconciled was first
/// seen, if it is one (see [`crate::metrics::TimeToProtect`]).
#[allow(clippy::too_many_arguments)]
async fn write_own_policy<'a, B, P>(
    ctx: &Context,
    binding: &B,
    api: &Api<P>,
    desired: Option<&P>,
    ours: Option<&'a P>,
    created: &Creations,
    change_seen: Option<Instant>,
    executed: &mut Executed,
) -> Result<Outcome<'a, P>, Error>
where
    B: Resource<DynamicType = ()>,
    P: Policy,
{
    let write = executed.record(write_policy(&ctx.written, api, desired, ours, created).await)?;
    if let Ok(Some(change)) = write {
        publish_changes::<_, P>(ctx, binding, &binding.name_any(), &[(None, change)]);
        if let Some(desired) = desired {
            policy_rewritten(ctx, desired, change, change_seen);
        }
    }
    Ok(Outcome::Owned {
        observed: ours,
        write: write.map(|change| change.is_some()),
    })
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

/// One Normal event on `binding` per kind of change to its `P` policies named `name`: where
/// (namespaces, for a cluster binding's per-namespace policies) is listed in the note, so a
/// fan-out over many namespaces makes at most three events.
fn publish_changes<B, P>(
    ctx: &Context,
    binding: &B,
    name: &str,
    changes: &[(Option<String>, Change)],
) where
    B: Resource<DynamicType = ()>,
    P: Resource<DynamicType = ()>,
{
    let kind = P::kind(&());
    let mut by_change: BTreeMap<Change, Vec<&str>> = BTreeMap::new();
    for (namespace, change) in changes {
        by_change
            .entry(*change)
            .or_default()
            .extend(namespace.as_deref());
    }
    for (change, namespaces) in by_change {
        let (reason, verb) = match change {
            Change::Created => ("PolicyCreated", "created"),
            Change::Updated => ("PolicyUpdated", "updated"),
            Change::Deleted => ("PolicyDeleted", "deleted"),
        };
        let mut note = format!("{kind} {name} {verb}");
        if !namespaces.is_empty() {
            note += &format!(" in {}", namespaces.join(", "));
        }
        if change == Change::Deleted {
            note += ": the binding no longer wants it";
        }
        ctx.events.about(binding, EventType::Normal, reason, note);
    }
}

/// Writes an object's status (if it changed and says something new, see
/// [`nimbus_core::status::only_pending`]) and raises a Warning event when it turns not ready,
/// then schedules the next drift re-check.
async fn update_status<K, S>(
    ctx: &Context,
    api: &kube::Api<K>,
    obj: &K,
    current: Option<&S>,
    status: S,
) -> Result<Action, Error>
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
        return Ok(Action::requeue(ctx.resync));
    }
    let not_ready = status
        .conditions()
        .iter()
        .find(|c| c.status == "False")
        .cloned();
    if write::status::status(api, obj, current, status, &ctx.written).await?
        && let Some(c) = not_ready
    {
        ctx.events
            .about(obj, EventType::Warning, &c.reason, c.message);
    }
    Ok(Action::requeue(ctx.resync))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_up_to_the_resync_and_permanent_failures_wait_for_it() {
        let resync = Duration::from_secs(300);
        let delays: Vec<u64> = (1..=8)
            .map(|n| retry_delay(n, false, resync).as_secs())
            .collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(retry_delay(u32::MAX, false, resync), resync);
        assert_eq!(retry_delay(1, true, resync), resync);
    }
}
