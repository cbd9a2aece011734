//! The one object write path of the operator: creates, server-side applies or replaces of what
//! we own, only when the cached object differs from what we want, so a steady state makes no
//! write calls.

use super::drift::{self, Write};
use super::written::{Written, key_of, written_key};
use crate::cache::{Creations, place};
use crate::error::Error;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, GetParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
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

/// Whether `obj` is controlled by an earlier incarnation of `owner`: an object of the same kind
/// and name, since deleted and created again (another UID). Such an object is garbage the
/// collector has not reached yet; the new owner replaces it instead of reporting a conflict
/// (GitOps tools delete and re-create freely, and the collector may lag behind by seconds).
pub fn left_by_predecessor<K: Resource>(obj: &K, owner: &OwnerReference) -> bool {
    obj.owner_references().iter().any(|o| {
        o.controller == Some(true)
            && o.kind == owner.kind
            && o.api_version == owner.api_version
            && o.name == owner.name
            && o.uid != owner.uid
    })
}

/// Whether `obj` is controlled by the object with `owner_uid`.
pub fn is_controlled_by<K: Resource>(obj: &K, owner_uid: &str) -> bool {
    obj.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == owner_uid)
}

/// An object as a cache holds it, for [`apply`] to compare: its metadata, and its whole
/// serialized form, made only when the comparison is needed (see [`Written`]).
pub struct Seen<'a> {
    pub meta: &'a ObjectMeta,
    object: Box<dyn FnOnce() -> Result<Value, Error> + Send + 'a>,
}

impl<'a> Seen<'a> {
    pub fn new(
        meta: &'a ObjectMeta,
        object: impl FnOnce() -> Result<Value, Error> + Send + 'a,
    ) -> Self {
        Self {
            meta,
            object: Box::new(object),
        }
    }

    /// The whole object, serialized now.
    pub fn object(self) -> Result<Value, Error> {
        (self.object)()
    }

    /// A typed cached object.
    pub fn of<K: Resource + Serialize + Sync>(obj: &'a K) -> Self {
        Self::new(obj.meta(), move || {
            serde_json::to_value(obj).map_err(|source| Error::Serialize {
                object: describe(obj),
                source,
            })
        })
    }
}

/// Makes `observed` exactly `desired` as `manager` (see [`drift`]): nothing when it already is,
/// else a create when there is none, a replace to change what we created or to take back what
/// another manager changed, or a server-side apply (objects we applied before).
/// `created` holds what this process created and its cache has not shown yet. Returns what it
/// stored, if it wrote.
pub async fn apply<K>(
    api: &Api<K>,
    manager: &str,
    desired: &K,
    observed: Option<Seen<'_>>,
    written: &Written,
    created: &Creations,
) -> Result<Option<Stored>, Error>
where
    K: Resource + Serialize + Clone + Debug,
{
    let context = || describe(desired);
    let unserializable = |source| Error::Serialize {
        object: context(),
        source,
    };
    let mut want = serde_json::to_value(desired).map_err(unserializable)?;
    drift::stamp(&mut want);
    let cached_version = observed
        .as_ref()
        .and_then(|seen| seen.meta.resource_version.as_deref());
    let name = desired.name_any();
    // The stamped hash fingerprints what we generate: a copy we already compared or wrote, a
    // stale cached copy, or none yet of what we just created, is no reason to compare or write
    // it again. (With no copy and no creation pending, it may have been deleted since.)
    let meta = desired.meta();
    let key = written_key(
        "object",
        want["apiVersion"].as_str().unwrap_or_default(),
        want["kind"].as_str().unwrap_or_default(),
        meta.namespace.as_deref(),
        &name,
    );
    let fingerprint = want["metadata"]["annotations"][drift::GENERATED_HASH]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let place = place(desired);
    let settled = match &observed {
        Some(_) => written.settled(&key, cached_version, &fingerprint),
        None => created.pending(&place) && written.last(&key, &fingerprint),
    };
    if settled {
        return Ok(None);
    }
    let cached_version = cached_version.map(str::to_owned);
    let mut have = observed.map(Seen::object).transpose()?;
    if have.is_none() && created.pending(&place) {
        // Ours, created moments ago and wanted otherwise since, before the cache shows it:
        // what is stored decides the write (a create would fail; an apply would leave what
        // the create owns and we no longer generate).
        have = fetch(api, &name)
            .await
            .map_err(Error::kube("reading", context))?;
    }
    let write = drift::plan(&want, have.as_ref(), manager);
    tracing::debug!(object = %context(), ?write, "sync");
    let Some(stored) = execute(api, manager, &name, &want, have, write, context).await? else {
        written.compared(&key, cached_version.as_deref(), &fingerprint);
        return Ok(None);
    };
    written.record(&key, stored.resource_version.as_deref(), &fingerprint);
    if write == Write::Create {
        created.created(place);
    }
    Ok(Some(stored))
}

/// Carries out `write` of `want` (named `name`), over `have` (what is stored, for a replace),
/// as `manager`; what it stored, if it wrote.
async fn execute<K>(
    api: &Api<K>,
    manager: &str,
    name: &str,
    want: &Value,
    have: Option<Value>,
    write: Write,
    context: impl Fn() -> String + Copy,
) -> Result<Option<Stored>, Error>
where
    K: Resource + Clone,
{
    let unserializable = |source| Error::Serialize {
        object: context(),
        source,
    };
    let post_params = || PostParams {
        field_manager: Some(manager.to_owned()),
        ..PostParams::default()
    };
    let stored = match write {
        Write::Nothing => return Ok(None),
        Write::Create => {
            let body = serde_json::to_vec(want).map_err(unserializable)?;
            send(api, request(api).create(&post_params(), body))
                .await
                .map_err(Error::kube("creating", context))?
        }
        Write::Apply => {
            let params = PatchParams::apply(manager).force();
            let request = request(api).patch(name, &params, &Patch::Apply(want));
            send(api, request)
                .await
                .map_err(Error::kube("applying", context))?
        }
        Write::Replace | Write::TakeBack => {
            let have = have.unwrap_or_default();
            let claim = (write == Write::TakeBack).then(|| drift::claim(want, manager));
            let mut body = replacement(want.clone(), &have, manager);
            if let Some(claim) = claim {
                body["metadata"]["managedFields"] = json!([claim]);
            }
            let body = serde_json::to_vec(&body).map_err(unserializable)?;
            send(api, request(api).replace(name, &post_params(), body))
                .await
                .map_err(Error::kube("replacing", context))?
        }
    };
    Ok(Some(stored))
}

/// Whether `obj` is a copy older than what this process last wrote to it: what is decided from
/// it is out of date, and the newer copy is on its way through the watch.
pub fn predates_write<K: Resource<DynamicType = ()>>(written: &Written, obj: &K) -> bool {
    written.predates(
        &key_of("object", obj),
        obj.meta().resource_version.as_deref(),
    )
}

/// The stored object named `name`, if any.
async fn fetch<K: Resource + Clone>(
    api: &Api<K>,
    name: &str,
) -> Result<Option<Value>, kube::Error> {
    match call(api, request(api).get(name, &GetParams::default())).await {
        Ok(object) => Ok(Some(object)),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Requests on `api`'s resources.
pub(super) fn request<K: Resource>(api: &Api<K>) -> kube::core::Request {
    kube::core::Request::new(api.resource_url())
}

/// Sends `request` with `api`'s client and reads the response as `T`.
async fn call<K: Resource + Clone, T: DeserializeOwned>(
    api: &Api<K>,
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> Result<T, kube::Error> {
    let request = request.map_err(kube::Error::BuildRequest)?;
    api.clone().into_client().request(request).await
}

/// What the API server stored for a write, all its response is read for (parsing the whole
/// object, managedFields and all, cost more than the rest of the write).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stored {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub generation: Option<i64>,
}

impl Stored {
    /// `desired` as stored: with the identity and version the write gave it.
    pub fn onto<K: Resource>(self, mut desired: K) -> K {
        let meta = desired.meta_mut();
        meta.uid = self.uid;
        meta.resource_version = self.resource_version;
        meta.generation = self.generation;
        desired
    }
}

/// Sends a write; returns what it stored.
pub(super) async fn send<K: Resource + Clone>(
    api: &Api<K>,
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> Result<Stored, kube::Error> {
    #[derive(Deserialize)]
    struct Response {
        metadata: Stored,
    }
    let response: Response = call(api, request).await?;
    Ok(response.metadata)
}

/// `want` as a full replacement of `have`: our body, the observed status, our labels,
/// annotations and owners over the observed ones (less those we wrote and no longer want),
/// and the observed resourceVersion so that a concurrent change makes it fail rather than be
/// overwritten.
fn replacement(mut want: Value, have: &Value, manager: &str) -> Value {
    // What we wrote before, to tell our stale labels and annotations from others'.
    let written: Vec<&Value> = drift::written_fields(have, manager).collect();
    let merged = |field: &str| {
        let mut map = have
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let ours = want
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object);
        let stale = written
            .iter()
            .filter_map(|fields| fields.pointer(&format!("/f:metadata/f:{field}")))
            .filter_map(Value::as_object)
            .flat_map(|owned| owned.keys())
            .filter_map(|key| key.strip_prefix("f:"))
            .filter(|key| ours.is_none_or(|ours| !ours.contains_key(*key)));
        for key in stale.collect::<Vec<_>>() {
            map.remove(key);
        }
        if let Some(ours) = ours {
            map.extend(ours.clone());
        }
        Value::Object(map)
    };
    let (labels, annotations) = (merged("labels"), merged("annotations"));
    if let Some(meta) = want.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("labels".into(), labels);
        meta.insert("annotations".into(), annotations);
        for field in ["resourceVersion", "finalizers"] {
            if let Some(v) = have.pointer(&format!("/metadata/{field}")) {
                meta.insert(field.into(), v.clone());
            }
        }
    }
    if let (Some(status), Some(obj)) = (have.get("status"), want.as_object_mut()) {
        obj.insert("status".into(), status.clone());
    }
    want
}

/// Deletes `obj` if it is still the same object (by UID). Returns whether it deleted.
pub async fn delete<K>(api: &Api<K>, obj: &K, what: impl FnOnce() -> String) -> Result<bool, Error>
where
    K: Resource + DeserializeOwned + Clone + Debug,
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
        Err(e) => Err(Error::kube("deleting", what)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_drops_our_stale_labels_and_keeps_others() {
        let have = json!({
            "metadata": {
                "name": "p", "resourceVersion": "7",
                "labels": {"ours": "x", "stale": "y", "theirs": "z"},
                "managedFields": [
                    {"manager": FIELD_MANAGER, "operation": "Apply",
                     "fieldsV1": {"f:metadata": {"f:labels": {"f:ours": {}, "f:stale": {}}}}},
                    {"manager": "kubectl", "operation": "Update",
                     "fieldsV1": {"f:metadata": {"f:labels": {"f:theirs": {}}}}},
                ],
            },
            "spec": {"old": true},
            "status": {"s": 1},
        });
        let want =
            json!({"metadata": {"name": "p", "labels": {"ours": "x2"}}, "spec": {"new": true}});
        let body = replacement(want, &have, FIELD_MANAGER);
        assert_eq!(
            body["metadata"]["labels"],
            json!({"ours": "x2", "theirs": "z"})
        );
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert_eq!(body["spec"], json!({"new": true}));
        assert_eq!(body["status"], json!({"s": 1}));
    }
}
