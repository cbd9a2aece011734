//! The native objects engines write: one label-filtered cache per kind, and the one
//! apply/prune mechanism every engine goes through.

use super::drift;
use super::object::{self, is_controlled_by};
use super::written::Written;
use crate::cache::{Cache, Creations, Deletions, Index, Place, place};
use crate::error::Error;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DynamicObject};
use kube::core::DynamicResourceScope;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{self, Generated, MANAGED_BY, NativeKind};
use nimbus_core::status::NativeOutcome;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::watch;

/// Selects every object an engine generated (and nothing else, so the caches stay small).
pub fn managed_selector() -> String {
    let managers: Vec<&str> = Engine::ALL.iter().map(|e| e.manager()).collect();
    format!("{MANAGED_BY} in ({})", managers.join(","))
}

/// The cache of our objects of one native kind (watched in `namespace` only when given), and
/// the reconciles' view of it.
pub fn cache(
    client: &Client,
    kind: &'static NativeKind,
    namespace: Option<&str>,
) -> (Cache<NativeObject>, Owned) {
    let resource = kind.api_resource();
    let api = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let config = watcher::Config::default().labels(&managed_selector());
    // managedFields stay (in each object's text): they tell our fields from server defaults
    // and others' additions.
    let mut cache: Cache<NativeObject> = Cache::with(api, resource, config);
    let owners = cache.index_by(|obj| {
        obj.owner_references()
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone())
    });
    let owned = Owned {
        store: cache.store.clone(),
        owners,
        created: cache.creations(),
        deleted: cache.deletions(),
        synced: cache.synced_flag(),
    };
    (cache, owned)
}

/// Our objects of a native kind, their places by controller uid, those we created that the
/// store does not show yet, and whether it has listed them.
#[derive(Clone)]
pub struct Owned {
    pub store: Store<NativeObject>,
    pub owners: Index,
    pub created: Creations,
    pub deleted: Deletions,
    pub synced: watch::Receiver<bool>,
}

/// Read access to every native cache.
pub struct Natives {
    client: Client,
    owned: Vec<(&'static NativeKind, Owned)>,
}

impl Natives {
    pub fn new(client: Client, owned: Vec<(&'static NativeKind, Owned)>) -> Self {
        Self { client, owned }
    }

    fn owned(&self, kind: &NativeKind) -> Option<&Owned> {
        self.owned.iter().find(|(k, _)| *k == kind).map(|(_, o)| o)
    }

    fn api<K: kube::Resource<DynamicType = ApiResource, Scope = DynamicResourceScope>>(
        &self,
        kind: &NativeKind,
        namespace: Option<&str>,
    ) -> Api<K> {
        let resource = kind.api_resource();
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// Every cached native object controlled by the policy with `uid`.
    pub fn owned_by(&self, uid: &str) -> Vec<(&'static NativeKind, Arc<NativeObject>)> {
        let mut found = Vec::new();
        for (kind, owned) in &self.owned {
            for place in owned.owners.get(uid) {
                // The index may be a step behind the store.
                found.extend(
                    owned
                        .store
                        .get(&reference(kind, &place))
                        .filter(|o| is_controlled_by(&**o, uid))
                        .map(|o| (*kind, o)),
                );
            }
        }
        found
    }

    /// Every cached object of `kind` (none while it is not watched).
    pub fn all_of(&self, kind: &NativeKind) -> Vec<Arc<NativeObject>> {
        self.owned(kind)
            .map(|o| o.store.state())
            .unwrap_or_default()
    }

    /// The cached object of `generated`'s kind, namespace and name, if any.
    pub fn cached(&self, generated: &Generated) -> Option<Arc<NativeObject>> {
        self.owned(generated.kind)?
            .store
            .get(&generated_reference(generated))
    }

    /// Makes `generated` (as its engine's field manager) what is stored, unless the cached
    /// object already matches. Our cache holds only objects with our label: when it has none of
    /// that name, the object is created, and if one exists after all (someone else's, or ours
    /// with the label removed) the create fails and that object is read once, then taken back
    /// only if the policy controls it. A create never overwrites, so no read is needed first.
    pub async fn apply(
        &self,
        generated: &Generated,
        owner: &OwnerReference,
        written: &Written,
    ) -> Result<NativeOutcome, Error> {
        let Some(owned) = self.owned(generated.kind) else {
            return Err(Error::NotWatched(generated.kind.kind));
        };
        let observed = match owned.store.get(&generated_reference(generated)) {
            Some(obj) => Some(obj),
            // Before the first list, absence from the cache tells nothing.
            None if !*owned.synced.borrow() => self.read(generated).await?,
            None => None,
        };
        match self.sync(generated, owner, observed, owned, written).await {
            Err(e) if e.is_already_exists() => {
                let found = self.read(generated).await?;
                self.sync(generated, owner, found, owned, written).await
            }
            outcome => outcome,
        }
    }

    /// The stored object of `generated`'s kind, namespace and name, if any.
    async fn read(&self, generated: &Generated) -> Result<Option<Arc<NativeObject>>, Error> {
        let desired = &generated.object;
        let found = self
            .api::<NativeObject>(generated.kind, desired.namespace().as_deref())
            .get_opt(&desired.name_any())
            .await
            .map_err(Error::kube("reading", || object::describe(desired)))?;
        Ok(found.map(Arc::new))
    }

    /// [`Natives::apply`] with `observed` as what is stored.
    async fn sync(
        &self,
        generated: &Generated,
        owner: &OwnerReference,
        observed: Option<Arc<NativeObject>>,
        owned: &Owned,
        written: &Written,
    ) -> Result<NativeOutcome, Error> {
        let observed = match observed {
            Some(obj) if object::left_by_predecessor(&*obj, owner) => {
                self.delete(generated.kind, &obj).await?;
                None
            }
            Some(obj) if !is_controlled_by(&*obj, &owner.uid) => {
                return Ok(NativeOutcome::Conflict);
            }
            observed => observed,
        };
        let desired = &generated.object;
        let api: Api<DynamicObject> = self.api(generated.kind, desired.namespace().as_deref());
        let wrote = object::apply(
            &api,
            generated.engine.manager(),
            desired,
            observed.as_deref().map(NativeObject::seen),
            written,
            &owned.created,
        )
        .await?;
        Ok(if wrote.is_some() {
            NativeOutcome::Written
        } else {
            NativeOutcome::Unchanged
        })
    }

    /// Deletes the objects controlled by `owner_uid` that are not among those `generated`, of
    /// the engines the translation acted for (`translated`): another engine's objects are not
    /// known unwanted, only not looked at. Returns the engines of those it deleted.
    ///
    /// Make before break: an engine's objects of a kind it no longer writes for this owner (its
    /// policies moved to another API, Kyverno's legacy kinds to its CEL ones) stay until every
    /// object it writes instead acts, so that enforcement has no gap. The watch on those
    /// objects brings the owner back here when their status changes.
    pub async fn prune(
        &self,
        owner_uid: &str,
        generated: &[Generated],
        translated: impl Fn(Engine) -> bool,
    ) -> Result<Vec<Engine>, Error> {
        let keep: BTreeSet<Key> = generated
            .iter()
            .map(|g| Key::of(g.kind, &g.object))
            .collect();
        let replacing: BTreeSet<Engine> = generated
            .iter()
            .filter(|g| !self.cached(g).is_some_and(|o| o.acts))
            .map(|g| g.engine)
            .collect();
        let writes = |engine: Engine, kind: &NativeKind| {
            generated
                .iter()
                .any(|g| g.engine == engine && g.kind == kind)
        };
        let mut deleted = Vec::new();
        for (kind, obj) in self.owned_by(owner_uid) {
            let manager = obj.labels().get(MANAGED_BY).map(String::as_str);
            let Some(engine) = Engine::ALL
                .into_iter()
                .find(|e| Some(e.manager()) == manager)
            else {
                continue;
            };
            if !translated(engine) || keep.contains(&Key::of(kind, &*obj)) {
                continue;
            }
            if replacing.contains(&engine) && !writes(engine, kind) {
                continue;
            }
            // Already on its way out: deleted by this process (the store lags), or by anyone
            // (it waits on finalizers).
            let uid = obj.uid().unwrap_or_default();
            let deletions = self.owned(kind).map(|o| &o.deleted);
            if obj.metadata.deletion_timestamp.is_some()
                || deletions.is_some_and(|d| d.pending(&uid))
            {
                continue;
            }
            if self.delete(kind, &obj).await? {
                if let Some(deletions) = deletions {
                    deletions.deleted(&uid);
                }
                deleted.push(engine);
            }
        }
        Ok(deleted)
    }

    async fn delete(&self, kind: &NativeKind, obj: &NativeObject) -> Result<bool, Error> {
        let api: Api<NativeObject> = self.api(kind, obj.namespace().as_deref());
        object::delete(&api, obj, || obj.describe()).await
    }
}

/// A native object as its cache keeps it: the metadata lookups read, and the rest of the object
/// as the JSON text the API server sent (without its status), parsed only when a reconcile
/// compares it. As a `serde_json::Value` tree, a KubeArmorPolicy with its managedFields takes
/// ~20 KiB (a B-tree node for every small map); as text, a few KiB.
#[derive(Clone, Debug)]
pub struct NativeObject {
    pub metadata: ObjectMeta,
    kind: String,
    json: Arc<str>,
    /// Whether it acts, as its status says (see [`nimbus_core::engines::Acts`]).
    pub acts: bool,
}

impl NativeObject {
    /// `Kind namespace/name`, for messages.
    pub fn describe(&self) -> String {
        match &self.metadata.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name_any()),
            None => format!("{} {}", self.kind, self.name_any()),
        }
    }

    /// The object as `T`, its typed metadata included (its status is not kept).
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, Error> {
        let object = self.seen().object()?;
        serde_json::from_value(object).map_err(|source| Error::Serialize {
            object: self.describe(),
            source,
        })
    }

    /// The whole object, managedFields included, for [`object::apply`] to compare.
    pub fn seen(&self) -> object::Seen<'_> {
        object::Seen::new(&self.metadata, || {
            let error = |source| Error::Serialize {
                object: self.describe(),
                source,
            };
            let mut object: Value = serde_json::from_str(&self.json).map_err(error)?;
            let typed = serde_json::to_value(&self.metadata).map_err(error)?;
            if let (Some(meta), Value::Object(typed)) = (
                object.get_mut("metadata").and_then(Value::as_object_mut),
                typed,
            ) {
                meta.extend(typed);
            }
            Ok(object)
        })
    }
}

/// The metadata a [`NativeObject`] keeps typed, out of its text (`creationTimestamp`: how long
/// an engine taking over has held its objects, see `engines::handover_wait`).
const TYPED_METADATA: [&str; 8] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "ownerReferences",
    "labels",
    "deletionTimestamp",
    "creationTimestamp",
];

impl<'de> Deserialize<'de> for NativeObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut value = Value::deserialize(deserializer)?;
        let object = value
            .as_object_mut()
            .ok_or_else(|| D::Error::custom("a Kubernetes object must be a JSON object"))?;
        // Kept out of the text: what drift never compares (the status, who wrote it, when).
        let status = object.remove("status");
        let acts = engines::all_kinds()
            .into_iter()
            .find(|k| {
                object.get("apiVersion") == Some(&k.api_version().into())
                    && object.get("kind") == Some(&k.kind.into())
            })
            .is_none_or(|k| k.acts.judge(status.as_ref()));
        let manager = value
            .pointer("/metadata/labels")
            .and_then(|labels| labels.get(MANAGED_BY))
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(entries) = value
            .pointer_mut("/metadata/managedFields")
            .and_then(Value::as_array_mut)
        {
            drift::keep_what_plan_reads(entries, manager.as_deref());
        }
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let meta = value
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| D::Error::missing_field("metadata"))?;
        // Typed, and not in the text: what lookups, ownership and pruning read. Neither:
        // what drift never compares.
        let typed: serde_json::Map<String, Value> = TYPED_METADATA
            .iter()
            .filter_map(|key| meta.remove_entry(*key))
            .collect();
        meta.remove("generation");
        let metadata: ObjectMeta =
            serde_json::from_value(Value::Object(typed)).map_err(D::Error::custom)?;
        let json = value.to_string();
        Ok(Self {
            metadata,
            kind,
            json: json.into(),
            acts,
        })
    }
}

impl kube::Resource for NativeObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Where `generated` is (or would be) in a cache of its kind.
fn generated_reference<K: kube::Resource<DynamicType = ApiResource>>(
    generated: &Generated,
) -> ObjectRef<K> {
    reference(generated.kind, &place(&generated.object))
}

/// Where the object of `kind` at `place` is in a cache of that kind.
fn reference<K: kube::Resource<DynamicType = ApiResource>>(
    kind: &NativeKind,
    (namespace, name): &Place,
) -> ObjectRef<K> {
    let key = ObjectRef::new_with(name, kind.api_resource());
    match namespace {
        Some(ns) => key.within(ns),
        None => key,
    }
}

/// Identity of a native object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    kind: &'static str,
    group: &'static str,
    namespace: Option<String>,
    name: String,
}

impl Key {
    pub fn of(kind: &'static NativeKind, obj: &impl kube::Resource) -> Self {
        Self {
            kind: kind.kind,
            group: kind.group,
            namespace: obj.namespace(),
            name: obj.name_any(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_native_object_keeps_what_drift_compares_and_lookups_read() {
        let sent = json!({
            "apiVersion": "security.kubearmor.com/v1", "kind": "KubeArmorPolicy",
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "labels": {"app.kubernetes.io/managed-by": "nimbus-kubearmor"},
                "annotations": {"nimbus/generated-hash": "h"},
                "ownerReferences": [{"apiVersion": "x/v1", "kind": "NimbusPolicy", "name": "o", "uid": "o1", "controller": true}],
                "managedFields": [
                    {"manager": "nimbus-kubearmor", "operation": "Apply", "fieldsV1": {"f:spec": {"f:action": {}}}},
                    {"manager": "kubearmor", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {}}}
                ]
            },
            "spec": {"action": "Block"},
            "status": {"PolicyStatus": "OK"}
        });
        let native: NativeObject = serde_json::from_value(sent).expect("a native object");
        assert_eq!(native.describe(), "KubeArmorPolicy ns/p");
        assert_eq!(native.metadata.uid.as_deref(), Some("u"));
        assert_eq!(native.owner_references()[0].uid, "o1");
        assert!(native.labels().contains_key(MANAGED_BY));
        assert!(native.metadata.annotations.is_none() && native.metadata.managed_fields.is_none());

        // Kept once: typed, not in the text too.
        assert!(!native.json.contains("ownerReferences") && !native.json.contains("\"7\""));

        let seen = native.seen();
        assert_eq!(seen.meta.resource_version.as_deref(), Some("7"));
        let object = seen.object().expect("its text parses");
        assert_eq!(object["spec"]["action"], "Block");
        let meta = &object["metadata"];
        assert_eq!(
            (
                &meta["name"],
                &meta["resourceVersion"],
                &meta["ownerReferences"][0]["uid"]
            ),
            (&json!("p"), &json!("7"), &json!("o1"))
        );
        assert_eq!(meta["labels"][MANAGED_BY], "nimbus-kubearmor");
        assert!(object.get("status").is_none(), "{object}");
        assert_eq!(
            object["metadata"]["annotations"]["nimbus/generated-hash"],
            "h"
        );
        let managers: Vec<&Value> = object["metadata"]["managedFields"]
            .as_array()
            .expect("managedFields")
            .iter()
            .map(|e| &e["manager"])
            .collect();
        assert_eq!(managers, [&json!("nimbus-kubearmor")]);
    }

    /// Whether an object acts is read from its status, by its kind's rule: a KubeArmorPolicy
    /// as soon as it is stored, a Kyverno policy once Kyverno says it is ready.
    #[test]
    fn a_native_object_acts_as_its_status_says() {
        let acts = |api_version: &str, kind: &str, status: Option<Value>| {
            let mut sent = json!({
                "apiVersion": api_version, "kind": kind,
                "metadata": {"name": "p", "namespace": "ns"},
            });
            if let Some(status) = status {
                sent["status"] = status;
            }
            serde_json::from_value::<NativeObject>(sent)
                .expect("a native object")
                .acts
        };
        let cel = "policies.kyverno.io/v1";
        let ready = |ready: bool| json!({"conditionStatus": {"ready": ready}});
        let condition = |status: &str| json!({"conditions": [{"type": "Ready", "status": status}]});
        let cases = [
            ("security.kubearmor.com/v1", "KubeArmorPolicy", None, true),
            (cel, "NamespacedValidatingPolicy", None, false),
            (cel, "NamespacedValidatingPolicy", Some(ready(false)), false),
            (cel, "NamespacedValidatingPolicy", Some(ready(true)), true),
            (cel, "MutatingPolicy", Some(ready(true)), true),
            ("kyverno.io/v1", "Policy", Some(condition("False")), false),
            (
                "kyverno.io/v1",
                "ClusterPolicy",
                Some(condition("True")),
                true,
            ),
        ];
        for (api_version, kind, status, want) in cases {
            assert_eq!(
                acts(api_version, kind, status.clone()),
                want,
                "{kind} {status:?}"
            );
        }
    }
}
