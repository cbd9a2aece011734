//! Status writes: a status is written only when it says something new, and a Warning event
//! is raised when an object turns not ready.

use super::object::{FIELD_MANAGER, describe, request, send};
use super::written::{Written, key_of};
use crate::error::Error;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Api;
use kube::Resource;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use nimbus_api::{
    ClusterSecurityIntentBindingStatus, NimbusPolicyStatus, SecurityIntentBindingStatus,
    SecurityIntentExceptionStatus, SecurityIntentStatus,
};
use serde::Serialize;
use serde_json::{Value, json};
use std::fmt::Debug;

/// A status as the operator computes it; timestamps are filled in only when it is written.
pub trait Status: Serialize + Clone + PartialEq {
    /// Sets `lastUpdated`, for kinds whose status has it.
    fn set_last_updated(&mut self, at: Option<Time>);
    fn conditions(&self) -> &[Condition];
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    /// Clears the fields another field manager writes (a binding's `preview`), so they never
    /// make a status look changed.
    fn clear_foreign(&mut self) {}
}

/// A status as compared: without `lastUpdated` and the conditions' `lastTransitionTime`.
fn comparable<S: Status>(status: &S) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.remove("lastUpdated");
    }
    if let Some(conditions) = value.get_mut("conditions").and_then(Value::as_array_mut) {
        for condition in conditions {
            if let Some(c) = condition.as_object_mut() {
                c.remove("lastTransitionTime");
            }
        }
    }
    value
}

/// Writes `desired` as the status of `obj` unless the current status already says the same
/// (or `written` shows we wrote it and the cached `obj` predates that write).
/// `lastUpdated` and conditions' `lastTransitionTime` do not count as differences, so a
/// reconcile of an unchanged object writes nothing. Returns whether it wrote.
pub async fn status<K, S>(
    api: &Api<K>,
    obj: &K,
    current: Option<&S>,
    mut desired: S,
    written: &Written,
) -> Result<bool, Error>
where
    K: Resource<DynamicType = ()> + Serialize + Clone + Debug,
    S: Status,
{
    let now = Time(Timestamp::now());
    let previous = current.map(Status::conditions).unwrap_or_default();
    for c in desired.conditions_mut().iter_mut() {
        c.last_transition_time = match previous.iter().find(|p| p.type_ == c.type_) {
            Some(p) if p.status == c.status => p.last_transition_time.clone(),
            _ => now.clone(),
        };
    }
    if let Some(mut current) = current.cloned() {
        current.clear_foreign();
        current.set_last_updated(None);
        desired.set_last_updated(None);
        if current == desired {
            return Ok(false);
        }
    }
    let key = key_of("status", obj);
    let fingerprint = comparable(&desired).to_string();
    if written.settled(&key, obj.meta().resource_version.as_deref(), &fingerprint) {
        return Ok(false);
    }
    desired.set_last_updated(Some(now));
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": desired,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let request =
        request(api).patch_subresource("status", &obj.name_any(), &params, &Patch::Apply(body));
    let stored = send(api, request)
        .await
        .map_err(Error::kube("writing status of", || describe(obj)))?;
    written.record(&key, stored.resource_version.as_deref(), &fingerprint);
    Ok(true)
}

/// Whether `obj` is a copy older than the status this process last wrote to it: a status
/// computed from it is out of date, and the newer copy is on its way through the watch.
pub fn predates_status_write<K>(written: &Written, obj: &K) -> bool
where
    K: Resource<DynamicType = ()>,
{
    written.predates(
        &key_of("status", obj),
        obj.meta().resource_version.as_deref(),
    )
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

impl Status for SecurityIntentExceptionStatus {
    fn set_last_updated(&mut self, _: Option<Time>) {}
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

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
