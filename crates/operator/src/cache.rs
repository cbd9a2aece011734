//! One watch per kind: it feeds the store reconciles read from, then fans each touched object
//! (deletions included, also those a relist discovers) out to the controllers that trigger on
//! it. An event reaches a controller only once the store holds it: a reconcile never reads a
//! state older than its trigger, nor an object its trigger reported gone. (kube's
//! shared-stream subscribers would drop deletions; and a list is stored only when complete.)

use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt, future};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use prometheus_client::metrics::gauge::Gauge;
use serde::de::DeserializeOwned;
use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;

pub type Driver = BoxFuture<'static, ()>;

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
        let subscribers = std::mem::take(&mut self.subscribers);
        let relist_subscribers = std::mem::take(&mut self.relist_subscribers);
        let strip = self.strip;
        let kind = self.kind.clone();
        let pending = self.pending.clone();
        let synced = self.synced.clone();
        let dyntype = self.dyntype.clone();
        // A (re)list replaces the store only when it is complete (`InitDone`): until then
        // reconciles would read the previous contents. So what a list returns is handed to the
        // controllers at `InitDone`, together with what vanished since the previous list
        // (deleted while the watch was down: no event will ever say so).
        let store = self.store.clone();
        let mut relist: Option<(Vec<Arc<K>>, Vec<K>)> = None;
        let watch = watcher(self.api.clone(), self.config.clone())
            .default_backoff()
            .modify(move |obj| {
                if let Some(strip) = strip {
                    strip(obj)
                }
            })
            .reflect(writer)
            .for_each(move |event| {
                let touched = match event {
                    Ok(watcher::Event::Init) => {
                        relist = Some((store.state(), Vec::new()));
                        Vec::new()
                    }
                    Ok(watcher::Event::InitApply(obj)) => {
                        if let Some((_, listed)) = &mut relist {
                            listed.push(obj);
                        }
                        Vec::new()
                    }
                    Ok(watcher::Event::InitDone) => {
                        if synced.send_replace(true) {
                            for subscriber in &relist_subscribers {
                                let _ = subscriber.send(());
                            }
                        }
                        let (before, mut listed) = relist.take().unwrap_or_default();
                        let seen: HashSet<ObjectRef<K>> = listed
                            .iter()
                            .map(|o| ObjectRef::from_obj_with(o, dyntype.clone()))
                            .collect();
                        let vanished: Vec<K> = before
                            .into_iter()
                            .filter(|o| {
                                !seen.contains(&ObjectRef::from_obj_with(&**o, dyntype.clone()))
                            })
                            .map(|o| (*o).clone())
                            .collect();
                        if !vanished.is_empty() {
                            tracing::debug!(%kind, count = vanished.len(), "deleted while not watched");
                        }
                        listed.extend(vanished);
                        listed
                    }
                    Ok(watcher::Event::Apply(obj) | watcher::Event::Delete(obj)) => vec![obj],
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
                };
                for obj in touched {
                    for subscriber in &subscribers {
                        if subscriber.send(obj.clone()).is_ok() {
                            pending.inc();
                        }
                    }
                }
                future::ready(())
            });
        gate.then(|()| watch).boxed()
    }

    pub fn driver(&mut self) -> Driver {
        self.driver_after(future::ready(()))
    }
}
