//! Thin controllers: fetch from the caches, call the pure core, apply, report.

pub mod binding;
pub mod cluster_binding;
pub mod intent;
pub mod policy;

use crate::apply::{Seen, Status, describe};
use crate::cache::Creations;
use crate::context::Context;
use crate::error::Error;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use nimbus_api::{
    ClusterSecurityIntentBindingStatus, NimbusPolicyStatus, SecurityIntentBindingStatus,
    SecurityIntentStatus,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Requeue delay after a first failed reconcile; it doubles with each further failure of the
/// same object, up to the resync period.
const RETRY: Duration = Duration::from_secs(5);

/// The key failures of `obj` are counted under.
pub(crate) fn failure_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
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
    let failures = ctx.count_failure(&failure_key(&*obj));
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

/// Longest object name an event can be recorded for (253 minus `.<16 hex digits>`).
const MAX_EVENT_SUBJECT_NAME: usize = 253 - 17;
/// Longest event note the API server accepts, in bytes.
const MAX_EVENT_NOTE: usize = 1024;

/// Queues an event on `obj` (see [`crate::events`]); it never fails nor delays the reconcile.
fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: String,
) {
    // The recorder names an event `<object>.<16 hex digits>`, which must stay a valid name.
    if obj.name_any().len() > MAX_EVENT_SUBJECT_NAME {
        tracing::debug!(name = %obj.name_any(), reason, "name too long for an event; not recorded");
        return;
    }
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(nimbus_core::status::bounded(note, MAX_EVENT_NOTE)),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    ctx.events.publish(event, obj.object_ref(&()));
}

/// The first failure of a reconcile's writes, returned once its status is written (so that it
/// is retried). A write that lost a race with another writer (409 Conflict: the object changed
/// since it was read) is not a failure to report: the change that beat it triggers the next
/// reconcile, which starts from what is stored.
#[derive(Default)]
struct Executed {
    failure: Option<Error>,
}

impl Executed {
    /// `result` for the status (the failure's message), keeping the first failure; a lost race
    /// ends the reconcile at once.
    fn record<T>(&mut self, result: Result<T, Error>) -> Result<Result<T, String>, Error> {
        match result {
            Ok(value) => Ok(Ok(value)),
            Err(error) if error.is_lost_race() => Err(error),
            Err(error) => {
                let message = error.to_string();
                self.failure.get_or_insert(error);
                Ok(Err(message))
            }
        }
    }

    /// `action`, or the first failure.
    fn result(self, action: Action) -> Result<Action, Error> {
        self.failure.map_or(Ok(action), Err)
    }
}

/// What writing one generated policy changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum PolicyChange {
    Created,
    Updated,
    Deleted,
}

/// Keeps one policy a binding generates: applies `desired`, or deletes the one the binding owns
/// (`ours`) when nothing is desired. `created`: the policies of that kind this process created
/// and the cache does not show yet. Returns what changed, if anything.
async fn write_policy<P>(
    ctx: &Context,
    api: &kube::Api<P>,
    desired: Option<&P>,
    ours: Option<&P>,
    created: &Creations,
) -> Result<Option<PolicyChange>, Error>
where
    P: Resource<DynamicType = ()>
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug
        + Sync,
{
    Ok(match (desired, ours) {
        (Some(desired), _) => {
            crate::apply::apply(
                api,
                crate::apply::FIELD_MANAGER,
                desired,
                ours.map(Seen::of),
                &ctx.written,
                created,
            )
            .await?
        }
        .then_some(if ours.is_some() {
            PolicyChange::Updated
        } else {
            PolicyChange::Created
        }),
        (None, Some(stale)) => crate::apply::delete(api, stale, || describe(stale))
            .await?
            .then_some(PolicyChange::Deleted),
        (None, None) => None,
    })
}

/// One Normal event on `binding` per kind of change to its `P` policies named `name`: where
/// (namespaces, for a cluster binding's per-namespace policies) is listed in the note, so a
/// fan-out over many namespaces makes at most three events.
fn publish_changes<B, P>(
    ctx: &Context,
    binding: &B,
    name: &str,
    changes: &[(Option<String>, PolicyChange)],
) where
    B: Resource<DynamicType = ()>,
    P: Resource<DynamicType = ()>,
{
    let kind = P::kind(&());
    let mut by_change: BTreeMap<PolicyChange, Vec<&str>> = BTreeMap::new();
    for (namespace, change) in changes {
        by_change
            .entry(*change)
            .or_default()
            .extend(namespace.as_deref());
    }
    for (change, namespaces) in by_change {
        let (reason, verb) = match change {
            PolicyChange::Created => ("PolicyCreated", "created"),
            PolicyChange::Updated => ("PolicyUpdated", "updated"),
            PolicyChange::Deleted => ("PolicyDeleted", "deleted"),
        };
        let mut note = format!("{kind} {name} {verb}");
        if !namespaces.is_empty() {
            note += &format!(" in {}", namespaces.join(", "));
        }
        if change == PolicyChange::Deleted {
            note += ": the binding no longer wants it";
        }
        publish(ctx, binding, EventType::Normal, reason, note);
    }
}

/// The cached policy `observed` unless an earlier incarnation of `binding` left it behind, in
/// which case it is deleted (see [`crate::apply::left_by_predecessor`]) and counts as absent.
async fn unless_left_behind<B, P>(
    api: &kube::Api<P>,
    binding: &B,
    observed: Option<Arc<P>>,
) -> Result<Option<Arc<P>>, Error>
where
    B: Resource<DynamicType = ()>,
    P: Resource + serde::Serialize + serde::de::DeserializeOwned + Clone + std::fmt::Debug,
{
    let Some(owner) = binding.controller_owner_ref(&()) else {
        return Ok(observed);
    };
    match observed {
        Some(p) if crate::apply::left_by_predecessor(&*p, &owner) => {
            crate::apply::delete(api, &*p, || describe(&*p)).await?;
            Ok(None)
        }
        observed => Ok(observed),
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
    if crate::apply::status(api, obj, current, status, &ctx.written).await?
        && let Some(c) = not_ready
    {
        publish(ctx, obj, EventType::Warning, &c.reason, c.message);
    }
    Ok(Action::requeue(ctx.resync))
}

macro_rules! impl_status {
    ($($t:ty $(, foreign $foreign:ident)?);*) => {$(
        impl Status for $t {
            fn set_last_updated(&mut self, at: Option<Time>) { self.last_updated = at; }
            fn conditions(&self) -> &[Condition] { &self.conditions }
            fn conditions_mut(&mut self) -> &mut Vec<Condition> { &mut self.conditions }
            $(fn clear_foreign(&mut self) { self.$foreign = None; })?
        }
    )*};
}
impl_status!(
    SecurityIntentBindingStatus, foreign preview;
    ClusterSecurityIntentBindingStatus, foreign preview;
    NimbusPolicyStatus
);

impl Status for SecurityIntentStatus {
    /// A SecurityIntent's status has no timestamp in Nimbus.
    fn set_last_updated(&mut self, _: Option<Time>) {}
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
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
