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
    ClusterSecurityIntentBindingStatus, NimbusPolicyStatus, NimbusRule,
    SecurityIntentBindingStatus, SecurityIntentStatus,
};
use nimbus_core::catalog::BindingKind;
use nimbus_core::engines::{self, Problem};
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

/// A binding's `Ready`: missing intents first, then what keeps its bound intents from being
/// enforced (unknown IDs, bad parameters, engines off or not installed).
fn binding_ready(
    ctx: &Context,
    kind: BindingKind,
    rules: &[NimbusRule],
    missing_intents: &[String],
    generation: Option<i64>,
) -> nimbus_api::Condition {
    let engines = ctx.engine_set();
    let problems: Vec<Problem> = rules
        .iter()
        .flat_map(|r| engines::check_rule(r, kind, &engines))
        .collect();
    if missing_intents.is_empty() {
        return policy::readiness(&problems, generation);
    }
    let mut message = format!("SecurityIntents not found: {}", missing_intents.join(", "));
    for p in &problems {
        message.push_str("; ");
        message.push_str(&p.message);
    }
    crate::apply::ready(
        false,
        nimbus_api::condition::REASON_INTENT_NOT_FOUND,
        message,
        generation,
    )
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
