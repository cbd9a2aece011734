//! What every controller does after executing its plan: write the status the core decided,
//! and, on failure, wait before retrying.

use crate::context::Context;
use crate::error::Error;
use crate::write::{self, Status};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use std::sync::Arc;
use std::time::Duration;

/// Requeue delay after a first failed reconcile; it doubles with each further failure of the
/// same object, up to the resync period.
const RETRY: Duration = Duration::from_secs(5);

/// The key `obj`'s failures are counted (and its time to protect kept) under.
pub fn object_key<K: Resource<DynamicType = ()>>(obj: &K) -> String {
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

/// Writes an object's status (if it changed and says something new, see
/// [`nimbus_core::status::only_pending`]) and raises a Warning event when it turns not ready,
/// then schedules the next drift re-check; says whether it wrote.
pub(super) async fn update_status<K, S>(
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
