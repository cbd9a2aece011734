//! Thin controllers: fetch from the caches, call the pure core, apply, report.

pub mod binding;
pub mod cluster_binding;
pub mod intent;
pub mod policy;

use crate::apply::Status;
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
use std::sync::Arc;
use std::time::Duration;

/// Requeue delay after a failed reconcile.
const RETRY: Duration = Duration::from_secs(5);

pub fn error_policy<K: Resource<DynamicType = ()>>(
    obj: Arc<K>,
    err: &Error,
    _: Arc<Context>,
) -> Action {
    tracing::warn!(kind = %K::kind(&()), name = %obj.name_any(), namespace = ?obj.namespace(), error = %err, "reconcile failed");
    Action::requeue(RETRY)
}

/// Publishes an event on `obj`; a failure to record is logged, never fails the reconcile.
async fn publish<K: Resource<DynamicType = ()>>(
    ctx: &Context,
    obj: &K,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Reconcile".to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::warn!(%error, name = %obj.name_any(), "recording event failed");
    }
}

/// Writes a binding's status (if it changed) and raises a Warning event when it turns not
/// ready, then schedules the next drift re-check.
async fn write_binding_status<K, S>(
    ctx: &Context,
    api: &kube::Api<K>,
    binding: &K,
    current: Option<&S>,
    mut status: S,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug,
    S: Status,
{
    let not_ready = status
        .conditions()
        .iter()
        .find(|c| c.status == "False")
        .cloned();
    if crate::apply::status(api, binding, current, status).await?
        && let Some(c) = not_ready
    {
        publish(ctx, binding, EventType::Warning, &c.reason, c.message).await;
    }
    Ok(Action::requeue(ctx.resync))
}

macro_rules! impl_status {
    ($($t:ty),*) => {$(
        impl Status for $t {
            fn set_last_updated(&mut self, at: Option<Time>) { self.last_updated = at; }
            fn conditions(&mut self) -> &mut Vec<Condition> { &mut self.conditions }
        }
    )*};
}
impl_status!(
    SecurityIntentBindingStatus,
    ClusterSecurityIntentBindingStatus,
    NimbusPolicyStatus
);

impl Status for SecurityIntentStatus {
    /// A SecurityIntent's status has no timestamp in Nimbus.
    fn set_last_updated(&mut self, _: Option<Time>) {}
    fn conditions(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}
