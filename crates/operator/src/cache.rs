//! One watch per kind: it feeds the store reconciles read from, then fans each touched object
//! (deletions included, also those a relist discovers) out to the controllers that trigger on
//! it. An event reaches a controller only once the store holds it: a reconcile never reads a
//! state older than its trigger, nor an object its trigger reported gone. (kube's
//! shared-stream subscribers would drop deletions; and a list is stored only when complete.)

use crate::metrics::{KindLabels, Metrics};
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt, future};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use prometheus_client::metrics::gauge::Gauge;
use serde::de::DeserializeOwned;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, RwLock};
use std::time::Instant;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;

mod notes;

pub use notes::{Creations, Deletions, Place, place};

pub type Driver = BoxFuture<'static, ()>;

/// The key an [`Index`] files an object under.
type KeyOf<K> = fn(&K) -> Option<String>;

pub struct Cache<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    pub store: Store<K>,
    writer: Option<reflector::store::Writer<K>>,
    api: Api<K>,
    kind: String,
    dyntype: K::DynamicType,
    config: watcher::Config,
    /// Drops fields the operator never reads before an object is stored (memory).
    strip: Option<fn(&mut K)>,
    index: Option<(KeyOf<K>, Index)>,
    creations: Creations,
    deletions: Deletions,
    subscribers: Vec<mpsc::UnboundedSender<K>>,
    /// Told of every relist after the first list.
    relist_subscribers: Vec<mpsc::UnboundedSender<()>>,
    /// Events sent to subscribers and not yet taken.
    pending: Gauge,
    /// Whether the first list has been stored. (Not `Store::wait_until_ready`: its one-shot
    /// channel wakes only the last of several waiters, and the controllers already wait on it.)
    synced: watch::Sender<bool>,
}

impl<K> Cache<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    pub fn new(api: Api<K>) -> Self {
        Self::with(api, Default::default(), watcher::Config::default())
    }
}

impl<K> Cache<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    pub fn with(api: Api<K>, dyntype: K::DynamicType, config: watcher::Config) -> Self {
        let kind = K::kind(&dyntype).into_owned();
        let writer = reflector::store::Writer::new(dyntype.clone());
        Self {
            kind,
            dyntype,
            store: writer.as_reader(),
            writer: Some(writer),
            api,
            config,
            strip: None,
            index: None,
            creations: Creations::default(),
            deletions: Deletions::default(),
            subscribers: Vec::new(),
            relist_subscribers: Vec::new(),
            pending: Gauge::default(),
            synced: watch::channel(false).0,
        }
    }

    pub fn strip(mut self, strip: fn(&mut K)) -> Self {
        self.strip = Some(strip);
        self
    }

    /// Keeps the stored objects findable by `key` (e.g. their controller's uid) without a scan.
    pub fn index_by(&mut self, key: KeyOf<K>) -> Index {
        let index = Index::default();
        self.index = Some((key, index.clone()));
        index
    }

    /// Where this process notes the objects it created, until the store shows them.
    pub fn creations(&self) -> Creations {
        self.creations.clone()
    }

    /// Where this process notes the objects it deleted, until the store drops them.
    pub fn deletions(&self) -> Deletions {
        self.deletions.clone()
    }

    /// Reports the events waiting in subscribers' channels on `gauge`.
    pub fn count_pending(mut self, gauge: Gauge) -> Self {
        self.pending = gauge;
        self
    }

    /// Resolves once the first list has been stored.
    pub fn synced(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut synced = self.synced.subscribe();
        async move {
            let _ = synced.wait_for(|s| *s).await;
        }
    }

    /// Whether the first list has been stored, now and as it changes.
    pub fn synced_flag(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// A trigger stream for one controller. The channel is unbounded because controllers only
    /// schedule work from it, which never blocks; it is drained as fast as events arrive.
    pub fn subscribe(&mut self) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers.push(tx);
        let pending = self.pending.clone();
        UnboundedReceiverStream::new(rx).map(move |obj| {
            pending.dec();
            Ok(obj)
        })
    }

    /// Emits after every relist but the first list. An object created and deleted while the
    /// watch was down (between a 410 and the relist) leaves no trace in the store, so nothing
    /// tells whoever created it that it is gone: its creators must look again.
    pub fn relisted(&mut self) -> futures::stream::BoxStream<'static, ()> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.relist_subscribers.push(tx);
        UnboundedReceiverStream::new(rx).boxed()
    }

    /// The watch, started once `gate` resolves (e.g. once the kind's CRD is installed).
    pub fn driver_after(&mut self, gate: impl Future<Output = ()> + Send + 'static) -> Driver {
        let writer = self.writer.take().expect("each cache is started once");
        let strip = self.strip;
        let mut watched = Watched {
            subscribers: std::mem::take(&mut self.subscribers),
            relist_subscribers: std::mem::take(&mut self.relist_subscribers),
            index: self.index.clone(),
            creations: self.creations.clone(),
            deletions: self.deletions.clone(),
            kind: self.kind.clone(),
            pending: self.pending.clone(),
            synced: self.synced.clone(),
            dyntype: self.dyntype.clone(),
            store: self.store.clone(),
            relist: None,
        };
        let watch = watcher(self.api.clone(), self.config.clone())
            .default_backoff()
            .modify(move |obj| {
                if let Some(strip) = strip {
                    strip(obj)
                }
            })
            .reflect(writer)
            .for_each(move |event| {
                let touched = watched.touched(event);
                watched.hand_out(touched);
                future::ready(())
            });
        gate.then(|()| watch).boxed()
    }

    pub fn driver(&mut self) -> Driver {
        self.driver_after(future::ready(()))
    }
}

/// What the watch of one kind keeps between events, and whom it tells.
struct Watched<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    subscribers: Vec<mpsc::UnboundedSender<K>>,
    relist_subscribers: Vec<mpsc::UnboundedSender<()>>,
    index: Option<(KeyOf<K>, Index)>,
    creations: Creations,
    deletions: Deletions,
    kind: String,
    pending: Gauge,
    synced: watch::Sender<bool>,
    dyntype: K::DynamicType,
    store: Store<K>,
    /// A (re)list in progress: when it started, the store's contents before it, and what it
    /// returned so far. A (re)list replaces the store only when it is complete (`InitDone`):
    /// until then reconciles would read the previous contents. So what a list returns is handed
    /// to the controllers at `InitDone`, together with what vanished since the previous list
    /// (deleted while the watch was down: no event will ever say so).
    relist: Option<(Instant, Vec<Arc<K>>, Vec<K>)>,
}

impl<K> Watched<K>
where
    K: Resource + Clone + Debug + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// The objects `event` touched, once the index and the creation and deletion notes
    /// reflect it.
    fn touched(&mut self, event: Result<watcher::Event<K>, watcher::Error>) -> Vec<K> {
        let kind = &self.kind;
        match event {
            Ok(watcher::Event::Init) => {
                // (Before the list is requested: whatever this process wrote before now, the
                // list shows.)
                self.relist = Some((Instant::now(), self.store.state(), Vec::new()));
                Vec::new()
            }
            Ok(watcher::Event::InitApply(obj)) => {
                if let Some((_, _, listed)) = &mut self.relist {
                    listed.push(obj);
                }
                Vec::new()
            }
            Ok(watcher::Event::InitDone) => self.list_complete(),
            Ok(watcher::Event::Apply(obj)) => {
                if let Some((key, index)) = &self.index {
                    index.set(place(&obj), key(&obj));
                }
                self.creations.shown(&obj);
                vec![obj]
            }
            Ok(watcher::Event::Delete(obj)) => {
                if let Some((_, index)) = &self.index {
                    index.set(place(&obj), None);
                }
                self.creations.shown(&obj);
                self.deletions.gone(&obj);
                vec![obj]
            }
            // 410 Gone: the watch resumed from a version the apiserver no longer
            // keeps (after a restart, or when the watch cache of a just-created CRD
            // started after our first list). The watcher relists, and the relist
            // reports what vanished meanwhile: routine, not a failure.
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                tracing::debug!(%kind, %status, "watch expired; relisting");
                Vec::new()
            }
            Err(error) => {
                tracing::warn!(%kind, %error, "watch failed; retrying");
                Vec::new()
            }
        }
    }

    /// A complete (re)list: what it holds, and what vanished since the previous one.
    fn list_complete(&mut self) -> Vec<K> {
        if self.synced.send_replace(true) {
            for subscriber in &self.relist_subscribers {
                let _ = subscriber.send(());
            }
        }
        let (started, before, mut listed) = self
            .relist
            .take()
            .unwrap_or_else(|| (Instant::now(), Vec::new(), Vec::new()));
        if let Some((key, index)) = &self.index {
            index.replace(listed.iter().map(|o| (place(o), key(o))));
        }
        // What this process wrote before the list started, the list shows: what it holds is
        // there, what it lacks is gone. A write since may be missing from it (created after
        // its snapshot) or still in it (deleted after): its watch event is still to come.
        // Forgetting those would create the object again (a 409, then a GET) or delete it
        // again (a 404).
        self.creations.relisted(started, listed.iter().map(place));
        self.deletions
            .relisted(started, listed.iter().filter_map(|o| o.meta().uid.clone()));
        let seen: HashSet<ObjectRef<K>> = listed
            .iter()
            .map(|o| ObjectRef::from_obj_with(o, self.dyntype.clone()))
            .collect();
        let vanished: Vec<K> = before
            .into_iter()
            .filter(|o| !seen.contains(&ObjectRef::from_obj_with(&**o, self.dyntype.clone())))
            .map(|o| (*o).clone())
            .collect();
        if !vanished.is_empty() {
            let kind = &self.kind;
            tracing::debug!(%kind, count = vanished.len(), "deleted while not watched");
        }
        listed.extend(vanished);
        listed
    }

    /// Hands each touched object to every controller that triggers on the kind.
    fn hand_out(&self, touched: Vec<K>) {
        for obj in touched {
            for subscriber in &self.subscribers {
                if subscriber.send(obj.clone()).is_ok() {
                    self.pending.inc();
                }
            }
        }
    }
}

/// The places of a cache's objects by one key of each, updated in the same step as the store
/// (before subscribers hear of the change), so a lookup costs what it finds, not the cache's
/// size.
#[derive(Clone, Default)]
pub struct Index(Arc<RwLock<IndexMaps>>);

#[derive(Default)]
struct IndexMaps {
    places: HashMap<String, BTreeSet<Place>>,
    keys: HashMap<Place, String>,
}

impl Index {
    /// The places of the objects whose key is `key`.
    pub fn get(&self, key: &str) -> Vec<Place> {
        let maps = self
            .0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        maps.places
            .get(key)
            .map(|places| places.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Records the object at `place` under `key` (`None`: gone, or without a key).
    fn set(&self, place: Place, key: Option<String>) {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .set(place, key);
    }

    /// Replaces everything with a complete list's objects.
    fn replace(&self, objects: impl Iterator<Item = (Place, Option<String>)>) {
        let mut fresh = IndexMaps::default();
        for (place, key) in objects {
            fresh.set(place, key);
        }
        *self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = fresh;
    }
}

impl IndexMaps {
    fn set(&mut self, place: Place, key: Option<String>) {
        if let Some(old) = self.keys.remove(&place)
            && let Some(places) = self.places.get_mut(&old)
        {
            places.remove(&place);
            if places.is_empty() {
                self.places.remove(&old);
            }
        }
        if let Some(key) = key {
            self.places
                .entry(key.clone())
                .or_default()
                .insert(place.clone());
            self.keys.insert(place, key);
        }
    }
}

/// `cache`, reporting the events waiting in its subscribers' channels on `metrics`.
pub fn counted<K>(cache: Cache<K>, metrics: &Metrics) -> Cache<K>
where
    K: Resource + Clone + Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let gauge = metrics
        .pending_events
        .get_or_create(&KindLabels {
            kind: cache.kind().to_owned(),
        })
        .clone();
    cache.count_pending(gauge)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(name: &str) -> Place {
        (Some("ns".to_owned()), name.to_owned())
    }

    #[test]
    fn the_index_follows_changes_of_key_and_deletions() {
        let index = Index::default();
        index.set(at("a"), Some("u1".into()));
        index.set(at("b"), Some("u1".into()));
        index.set(at("c"), Some("u2".into()));
        assert_eq!(index.get("u1"), [at("a"), at("b")]);
        index.set(at("b"), Some("u2".into()));
        index.set(at("a"), None);
        assert_eq!(index.get("u1"), Vec::<Place>::new());
        assert_eq!(index.get("u2"), [at("b"), at("c")]);
        assert!(
            !index.0.read().unwrap().places.contains_key("u1"),
            "no empty entries kept"
        );
        index.replace([(at("d"), Some("u1".into())), (at("e"), None)].into_iter());
        assert_eq!(index.get("u1"), [at("d")]);
        assert_eq!(index.get("u2"), Vec::<Place>::new());
    }
}
