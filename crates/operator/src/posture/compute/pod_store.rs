//! The pods the posture reads, kept compactly: they are the operator's largest cache (Kubernetes
//! supports 150,000 pods per cluster). kube's reflector would keep each pod behind an `Arc` of a
//! struct with a whole `ObjectMeta` (400 bytes of mostly empty fields), keyed by an `ObjectRef`
//! that copies its name, namespace, resourceVersion and uid again, and an index by namespace
//! would copy name and namespace twice more. Here pods are filed by namespace and found by name,
//! and what the pods of one controller share (its owner reference, and usually their labels) is
//! held once.

use super::pods::PodFacts;
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use nimbus_core::posture as core;
use std::borrow::Borrow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;

/// Every pod, by namespace; shared by the watch that writes it and the computations that read it.
#[derive(Clone, Default)]
pub struct PodStore(Arc<RwLock<ByNamespace>>);

/// What [`PodStore::watch`] hands the posture besides the store.
pub struct PodWatch {
    /// The namespaces whose pods changed, once the store shows the change.
    pub changed: UnboundedReceiverStream<String>,
    /// Resolves once the first list is stored.
    pub synced: futures::future::BoxFuture<'static, ()>,
    /// Runs the watch.
    pub driver: futures::future::BoxFuture<'static, ()>,
}

impl PodStore {
    /// Watches every pod through `api` into a new store.
    pub fn watch(api: Api<PodFacts>) -> (Self, PodWatch) {
        let store = Self::default();
        let (changes, changed) = mpsc::unbounded_channel();
        let (synced, mut synced_flag) = watch::channel(false);
        let events = watcher(api, watcher::Config::default()).default_backoff();
        let driver = store.clone().follow(events, changes, synced);
        let watch = PodWatch {
            changed: UnboundedReceiverStream::new(changed),
            synced: Box::pin(async move {
                let _ = synced_flag.wait_for(|synced| *synced).await;
            }),
            driver: Box::pin(driver),
        };
        (store, watch)
    }

    /// Applies `events` to the store, telling `changes` each namespace whose pods changed once
    /// the store shows it. A (re)list replaces the store only when complete, so until then
    /// readers see the previous pods; then every namespace of either is told (pods deleted
    /// while the watch was down leave no other trace).
    async fn follow(
        self,
        events: impl Stream<Item = Result<watcher::Event<PodFacts>, watcher::Error>>,
        changes: mpsc::UnboundedSender<String>,
        synced: watch::Sender<bool>,
    ) {
        let mut listing: Option<ByNamespace> = None;
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            let changed: Vec<String> = match event {
                Ok(watcher::Event::Init) => {
                    listing = Some(ByNamespace::default());
                    continue;
                }
                Ok(watcher::Event::InitApply(pod)) => {
                    if let Some(listing) = &mut listing {
                        listing.insert(&pod);
                    }
                    continue;
                }
                Ok(watcher::Event::InitDone) => {
                    let listed = listing.take().unwrap_or_default();
                    let mut namespaces: BTreeSet<String> = listed.namespace_names().collect();
                    let previous = std::mem::replace(&mut *self.write(), listed);
                    namespaces.extend(previous.namespace_names());
                    synced.send_replace(true);
                    namespaces.into_iter().collect()
                }
                Ok(watcher::Event::Apply(pod)) => {
                    self.write().insert(&pod);
                    pod.metadata.namespace.into_iter().collect()
                }
                Ok(watcher::Event::Delete(pod)) => {
                    self.write().remove(&pod);
                    pod.metadata.namespace.into_iter().collect()
                }
                // 410 Gone: the watcher relists, and the relist tells what changed meanwhile.
                Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                    tracing::debug!(%status, "pod watch expired; relisting");
                    continue;
                }
                Err(error) => {
                    tracing::warn!(%error, "pod watch failed; retrying");
                    continue;
                }
            };
            for namespace in changed {
                let _ = changes.send(namespace);
            }
        }
    }

    /// The pods of `namespaces`, or every pod, in the core's terms.
    pub fn pods(&self, namespaces: Option<&BTreeSet<String>>) -> Vec<core::Pod> {
        let store = self
            .0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        fn in_namespace<'a>(
            (namespace, pods): (&'a Arc<str>, &'a HashSet<Filed>),
        ) -> impl Iterator<Item = core::Pod> + 'a {
            pods.iter().map(move |pod| pod.0.to_core(namespace))
        }
        match namespaces {
            None => store.namespaces.iter().flat_map(in_namespace).collect(),
            Some(namespaces) => namespaces
                .iter()
                .filter_map(|ns| store.namespaces.get_key_value(ns.as_str()))
                .flat_map(in_namespace)
                .collect(),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, ByNamespace> {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[derive(Default)]
struct ByNamespace {
    namespaces: HashMap<Arc<str>, HashSet<Filed>>,
    owners: Interned<Owner>,
    labels: Interned<[(Box<str>, Box<str>)]>,
}

impl ByNamespace {
    fn insert(&mut self, pod: &PodFacts) {
        let meta = &pod.metadata;
        let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) else {
            return;
        };
        let owner = meta.owner_references.iter().flatten().next();
        let stored = StoredPod {
            name: name.as_str().into(),
            uid: meta.uid.as_deref().unwrap_or_default().into(),
            created: meta.creation_timestamp.clone(),
            controller: owner.map(|owner| self.owners.intern(Box::new(Owner::from(owner)))),
            labels: self.labels.intern(
                pod.labels
                    .iter()
                    .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
                    .collect(),
            ),
            ports: pod.ports.iter().cloned().collect(),
            ip: pod.ip,
        };
        // Looked up before `entry`, which would allocate the key for every pod.
        let pods = match self.namespaces.get_mut(namespace.as_str()) {
            Some(pods) => pods,
            None => self
                .namespaces
                .entry(namespace.as_str().into())
                .or_default(),
        };
        if let Some(Filed(old)) = pods.replace(Filed(Box::new(stored))) {
            self.release(*old);
        }
    }

    fn remove(&mut self, pod: &PodFacts) {
        let meta = &pod.metadata;
        let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) else {
            return;
        };
        let Some(pods) = self.namespaces.get_mut(namespace.as_str()) else {
            return;
        };
        let removed = pods.take(name.as_str());
        if pods.is_empty() {
            self.namespaces.remove(namespace.as_str());
        }
        if let Some(Filed(old)) = removed {
            self.release(*old);
        }
    }

    /// Lets go of what only `pod` held.
    fn release(&mut self, pod: StoredPod) {
        if let Some(owner) = &pod.controller {
            self.owners.release(owner);
        }
        self.labels.release(&pod.labels);
    }

    fn namespace_names(&self) -> impl Iterator<Item = String> + '_ {
        self.namespaces.keys().map(|ns| ns.to_string())
    }
}

/// A pod as stored; its namespace is where it is filed.
struct StoredPod {
    name: Box<str>,
    uid: Box<str>,
    created: Option<Time>,
    controller: Option<Arc<Owner>>,
    labels: Arc<[(Box<str>, Box<str>)]>,
    ports: Box<[core::ContainerPort]>,
    ip: Option<IpAddr>,
}

impl StoredPod {
    fn to_core(&self, namespace: &str) -> core::Pod {
        core::Pod {
            namespace: namespace.to_owned(),
            name: self.name.to_string(),
            uid: self.uid.to_string(),
            labels: self
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            created: self.created.clone(),
            controller: self.controller.as_deref().map(Owner::to_reference),
            ip: self.ip,
            ports: self.ports.to_vec(),
        }
    }
}

/// A pod in its namespace's set, found by its name.
struct Filed(Box<StoredPod>);

impl Borrow<str> for Filed {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

impl Hash for Filed {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As the `str` it is borrowed as.
        self.0.name.hash(state);
    }
}

impl PartialEq for Filed {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Filed {}

/// A pod's controlling owner (k8s-openapi's `OwnerReference` is not `Hash`).
#[derive(Hash, PartialEq, Eq)]
struct Owner {
    api_version: Box<str>,
    kind: Box<str>,
    name: Box<str>,
    uid: Box<str>,
}

impl From<&OwnerReference> for Owner {
    fn from(owner: &OwnerReference) -> Self {
        Self {
            api_version: owner.api_version.as_str().into(),
            kind: owner.kind.as_str().into(),
            name: owner.name.as_str().into(),
            uid: owner.uid.as_str().into(),
        }
    }
}

impl Owner {
    fn to_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.to_string(),
            kind: self.kind.to_string(),
            name: self.name.to_string(),
            uid: self.uid.to_string(),
            controller: Some(true),
            ..OwnerReference::default()
        }
    }
}

/// Values held once however many pods hold them, and let go with the last of those.
struct Interned<T: ?Sized>(HashSet<Arc<T>>);

impl<T: ?Sized> Default for Interned<T> {
    fn default() -> Self {
        Self(HashSet::new())
    }
}

impl<T: ?Sized + Hash + Eq> Interned<T> {
    fn intern(&mut self, value: Box<T>) -> Arc<T> {
        if let Some(held) = self.0.get(&*value) {
            return held.clone();
        }
        let held: Arc<T> = Arc::from(value);
        self.0.insert(held.clone());
        held
    }

    /// Called as a holder lets go of `value`: the last holder's release removes it.
    fn release(&mut self, value: &Arc<T>) {
        // This set's reference and the caller's.
        if Arc::strong_count(value) <= 2 {
            self.0.remove(&**value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(namespace: &str, name: &str, labels: serde_json::Value, owner: &str) -> PodFacts {
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                "labels": labels,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                     "name": owner, "uid": format!("uid-{owner}"),
                                     "controller": true}],
            },
            "status": {"podIP": "10.0.0.1"},
        }))
        .expect("a pod's JSON")
    }

    fn insert(store: &PodStore, pods: &[PodFacts]) {
        for pod in pods {
            store.write().insert(pod);
        }
    }

    fn names(store: &PodStore, namespaces: Option<&[&str]>) -> Vec<String> {
        let namespaces: Option<BTreeSet<String>> =
            namespaces.map(|ns| ns.iter().map(|n| n.to_string()).collect());
        let mut names: Vec<String> = store
            .pods(namespaces.as_ref())
            .into_iter()
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn pods_are_found_by_namespace_replaced_by_name_and_removed() {
        let store = PodStore::default();
        insert(
            &store,
            &[
                pod("a", "web-1", json!({"app": "web"}), "web"),
                pod("a", "web-2", json!({"app": "web"}), "web"),
                pod("b", "db-1", json!({"app": "db"}), "db"),
            ],
        );
        assert_eq!(names(&store, None), ["a/web-1", "a/web-2", "b/db-1"]);
        assert_eq!(names(&store, Some(&["b", "c"])), ["b/db-1"]);

        insert(&store, &[pod("a", "web-1", json!({"app": "api"}), "web")]);
        let pods = store.pods(Some(&BTreeSet::from(["a".to_owned()])));
        let web_1 = pods.iter().find(|p| p.name == "web-1").expect("web-1");
        assert_eq!(web_1.labels.get("app").map(String::as_str), Some("api"));
        assert_eq!(web_1.uid, "uid-web-1");
        assert_eq!(web_1.ip, Some("10.0.0.1".parse().expect("an IP")));
        let controller = web_1.controller.as_ref().expect("its controller");
        assert_eq!(
            (controller.kind.as_str(), controller.name.as_str()),
            ("ReplicaSet", "web")
        );
        assert_eq!(controller.controller, Some(true));

        store.write().remove(&pod("b", "db-1", json!({}), "db"));
        store.write().remove(&pod("b", "missing", json!({}), "db"));
        assert_eq!(names(&store, None), ["a/web-1", "a/web-2"]);
        assert!(!store.0.read().unwrap().namespaces.contains_key("b"));
    }

    #[test]
    fn what_pods_share_is_held_once_and_let_go_with_the_last_of_them() {
        let store = PodStore::default();
        insert(
            &store,
            &[
                pod("a", "web-1", json!({"app": "web"}), "web"),
                pod("a", "web-2", json!({"app": "web"}), "web"),
            ],
        );
        {
            let held = store.0.read().unwrap();
            let pods: Vec<&StoredPod> = held.namespaces["a"].iter().map(|f| &*f.0).collect();
            assert!(Arc::ptr_eq(&pods[0].labels, &pods[1].labels));
            let owners: Vec<&Arc<Owner>> =
                pods.iter().filter_map(|p| p.controller.as_ref()).collect();
            assert!(Arc::ptr_eq(owners[0], owners[1]));
            assert_eq!((held.owners.0.len(), held.labels.0.len()), (1, 1));
        }
        // Relabelled: its new labels are held beside the old ones, which web-2 still holds.
        insert(&store, &[pod("a", "web-1", json!({"app": "api"}), "web")]);
        assert_eq!(store.0.read().unwrap().labels.0.len(), 2);
        store.write().remove(&pod("a", "web-2", json!({}), "web"));
        assert_eq!(store.0.read().unwrap().labels.0.len(), 1);
        store.write().remove(&pod("a", "web-1", json!({}), "web"));
        let held = store.0.read().unwrap();
        assert_eq!((held.owners.0.len(), held.labels.0.len()), (0, 0));
    }

    #[tokio::test]
    async fn a_relist_replaces_the_store_when_complete_and_tells_every_namespace_of_either() {
        let store = PodStore::default();
        let (changes, mut changed) = mpsc::unbounded_channel();
        let (synced, flag) = watch::channel(false);
        let events = futures::stream::iter([
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(pod(
                "a",
                "web-1",
                json!({}),
                "web",
            ))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(pod("b", "db-1", json!({}), "db"))),
            // A relist: web-1 was deleted while the watch was down.
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(pod(
                "c",
                "api-1",
                json!({}),
                "api",
            ))),
            Ok(watcher::Event::InitApply(pod("b", "db-1", json!({}), "db"))),
            Ok(watcher::Event::InitDone),
        ]);
        store.clone().follow(events, changes, synced).await;
        assert!(*flag.borrow());
        assert_eq!(names(&store, None), ["b/db-1", "c/api-1"]);
        let mut told = Vec::new();
        while let Ok(namespace) = changed.try_recv() {
            told.push(namespace);
        }
        assert_eq!(told, ["a", "b", "a", "b", "c"]);
    }
}
