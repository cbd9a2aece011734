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

/// Keeps the policy a binding generates: applies `desired`, or deletes the one the binding owns
/// when nothing is desired, with an event on the binding when that changed something.
async fn sync_policy<B, P>(
    ctx: &Context,
    binding: &B,
    api: &kube::Api<P>,
    desired: Option<&P>,
    ours: Option<&P>,
) -> Result<(), Error>
where
    B: Resource<DynamicType = ()>,
    P: Resource<DynamicType = ()>
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let kind = P::kind(&());
    let (reason, note) = match (desired, ours) {
        (Some(desired), _) => {
            if !crate::apply::apply(api, crate::apply::FIELD_MANAGER, desired, ours).await? {
                return Ok(());
            }
            let name = desired.name_any();
            match ours {
                Some(_) => ("PolicyUpdated", format!("{kind} {name} updated")),
                None => ("PolicyCreated", format!("{kind} {name} created")),
            }
        }
        (None, Some(stale)) => {
            if !crate::apply::delete(api, stale).await? {
                return Ok(());
            }
            let name = stale.name_any();
            let note = format!("{kind} {name} deleted: no referenced intent exists");
            ("PolicyDeleted", note)
        }
        (None, None) => return Ok(()),
    };
    publish(ctx, binding, EventType::Normal, reason, note).await;
    Ok(())
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

/// Writes an object's status (if it changed) and raises a Warning event when it turns not
/// ready, then schedules the next drift re-check.
async fn update_status<K, S>(
    ctx: &Context,
    api: &kube::Api<K>,
    obj: &K,
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
    if crate::apply::status(api, obj, current, status).await?
        && let Some(c) = not_ready
    {
        publish(ctx, obj, EventType::Warning, &c.reason, c.message).await;
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
