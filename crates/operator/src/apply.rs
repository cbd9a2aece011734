//! The one write path of the operator: server-side apply of what we own, only when the cached
//! object differs from what we want, so a steady state makes no write calls.

use crate::error::Error;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::fmt::Debug;

/// Field manager of the Nimbus objects the operator writes (engines use their own).
pub const FIELD_MANAGER: &str = "nimbus-operator";

/// `Kind namespace/name`, for error messages.
pub fn describe<K: Resource + Serialize>(obj: &K) -> String {
    let kind = serde_json::to_value(obj)
        .ok()
        .and_then(|v| v.get("kind").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default();
    match obj.meta().namespace.as_deref() {
        Some(ns) => format!("{kind} {ns}/{}", obj.name_any()),
        None => format!("{kind} {}", obj.name_any()),
    }
}

/// Whether `obj` is controlled by the object with `owner_uid`.
pub fn is_controlled_by<K: Resource>(obj: &K, owner_uid: &str) -> bool {
    obj.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == owner_uid)
}

/// Whether applying `desired` over `observed` would change anything we own: every field we set
/// besides metadata must be present with the same value (fields the API server defaulted or
/// another manager added do not count), our labels and annotations present, and our
/// ownerReferences there.
pub fn needs_apply<K: Resource + Serialize>(desired: &K, observed: Option<&K>) -> bool {
    let Some(observed) = observed else {
        return true;
    };
    let (Ok(Value::Object(want)), Ok(have)) = (
        serde_json::to_value(desired),
        serde_json::to_value(observed),
    ) else {
        return true;
    };
    let body_same = want
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "metadata" | "apiVersion" | "kind" | "status"))
        .all(|(k, v)| covers(have.get(k).unwrap_or(&Value::Null), v));
    let contains = |want: &std::collections::BTreeMap<String, String>,
                    have: &std::collections::BTreeMap<String, String>| {
        want.iter().all(|(k, v)| have.get(k) == Some(v))
    };
    let owners_present = desired.owner_references().iter().all(|o| {
        observed
            .owner_references()
            .iter()
            .any(|p| p.uid == o.uid && p.controller == o.controller)
    });
    !(body_same
        && contains(desired.labels(), observed.labels())
        && contains(desired.annotations(), observed.annotations())
        && owners_present)
}

/// Whether `have` holds everything `want` says: objects may carry extra keys (server defaults),
/// lists must have the same length with each element covered, scalars must be equal. A `null`
/// we want is the same as a field left out.
pub fn covers(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (_, Value::Null) => true,
        (Value::Object(have), Value::Object(want)) => want
            .iter()
            .all(|(k, v)| covers(have.get(k).unwrap_or(&Value::Null), v)),
        (Value::Array(have), Value::Array(want)) => {
            have.len() == want.len() && have.iter().zip(want).all(|(h, w)| covers(h, w))
        }
        _ => have == want,
    }
}

/// Server-side applies `desired` as `manager` when it differs from `observed`. Returns whether
/// it wrote.
pub async fn apply<K>(
    api: &Api<K>,
    manager: &str,
    desired: &K,
    observed: Option<&K>,
) -> Result<bool, Error>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    if !needs_apply(desired, observed) {
        return Ok(false);
    }
    api.patch(
        &desired.name_any(),
        &PatchParams::apply(manager).force(),
        &Patch::Apply(desired),
    )
    .await
    .map_err(Error::kube("applying", describe(desired)))?;
    Ok(true)
}

/// Deletes `obj` if it is still the same object (by UID). Returns whether it deleted.
pub async fn delete<K>(api: &Api<K>, obj: &K) -> Result<bool, Error>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: obj.uid(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(&obj.name_any(), &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => Ok(false),
        Err(e) => Err(Error::kube("deleting", describe(obj))(e)),
    }
}

/// A status as the operator computes it; timestamps are filled in only when it is written.
pub trait Status: Serialize + Clone + PartialEq {
    /// Sets `lastUpdated`, for kinds whose status has it.
    fn set_last_updated(&mut self, at: Option<Time>);
    fn conditions(&mut self) -> &mut Vec<Condition>;
}

/// Writes `desired` as the status of `obj` unless the current status already says the same.
/// `lastUpdated` and conditions' `lastTransitionTime` do not count as differences, so a
/// reconcile of an unchanged object writes nothing. Returns whether it wrote.
pub async fn status<K, S>(
    api: &Api<K>,
    obj: &K,
    current: Option<&S>,
    mut desired: S,
) -> Result<bool, Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
    S: Status,
{
    let now = Time(Timestamp::now());
    let mut current = current.cloned();
    let previous = current
        .as_mut()
        .map(|c| c.conditions().clone())
        .unwrap_or_default();
    for c in desired.conditions().iter_mut() {
        c.last_transition_time = match previous.iter().find(|p| p.type_ == c.type_) {
            Some(p) if p.status == c.status => p.last_transition_time.clone(),
            _ => now.clone(),
        };
    }
    if let Some(mut current) = current {
        current.set_last_updated(None);
        desired.set_last_updated(None);
        if current == desired {
            return Ok(false);
        }
    }
    desired.set_last_updated(Some(now));
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": desired,
    });
    api.patch_status(
        &obj.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(Error::kube("writing status of", describe(obj)))?;
    Ok(true)
}

/// A `Ready` condition (the transition time is filled in by [`status`]).
pub fn ready(
    ok: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: nimbus_api::condition::READY.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    fn cm(data: &[(&str, &str)], labels: &[(&str, &str)]) -> ConfigMap {
        let map = |p: &[(&str, &str)]| -> BTreeMap<String, String> {
            p.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let mut c = ConfigMap {
            data: Some(map(data)),
            ..Default::default()
        };
        c.metadata.name = Some("x".into());
        c.metadata.labels = Some(map(labels));
        c
    }

    #[test]
    fn nothing_to_apply_when_observed_has_what_we_want_plus_server_fields() {
        let desired = cm(&[("a", "1")], &[("l", "v")]);
        let mut observed = cm(&[("a", "1")], &[("l", "v"), ("other", "x")]);
        observed.metadata.resource_version = Some("7".into());
        observed.metadata.uid = Some("u".into());
        assert!(!needs_apply(&desired, Some(&observed)));
    }

    #[test]
    fn body_drift_missing_labels_and_absence_need_apply() {
        let desired = cm(&[("a", "1")], &[("l", "v")]);
        assert!(needs_apply(&desired, None));
        assert!(needs_apply(
            &desired,
            Some(&cm(&[("a", "2")], &[("l", "v")]))
        ));
        assert!(needs_apply(&desired, Some(&cm(&[("a", "1")], &[]))));
    }

    #[test]
    fn server_defaults_are_not_drift_but_changed_or_missing_fields_are() {
        let want = json!({"spec": {"a": [{"x": 1}], "empty": {}}});
        let defaulted = json!({"spec": {"a": [{"x": 1, "d": true}], "empty": {}, "b": 2}});
        assert!(covers(&defaulted, &want));
        assert!(!covers(
            &json!({"spec": {"a": [{"x": 2}], "empty": {}}}),
            &want
        ));
        assert!(!covers(
            &json!({"spec": {"a": [{"x": 1}, {"x": 1}], "empty": {}}}),
            &want
        ));
        assert!(!covers(&json!({"spec": {"a": [{"x": 1}]}}), &want));
        assert!(covers(&json!({}), &json!({"k": null})));
    }

    #[test]
    fn a_missing_owner_reference_needs_apply() {
        let mut desired = cm(&[], &[]);
        desired.metadata.owner_references = Some(vec![OwnerReference {
            uid: "u1".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        assert!(needs_apply(&desired, Some(&cm(&[], &[]))));
    }
}
