//! Wiring: one shared cache per kind, every controller fed from those caches.

use crate::context::Context;
use crate::controllers::{binding, cluster_binding, error_policy, intent, policy};
use crate::error::Error;
use crate::health;
use futures::{FutureExt, Stream, StreamExt, future};
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntent,
    SecurityIntentBinding,
};
use nimbus_core::namespaces;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct Config {
    /// Where `/healthz` and `/readyz` are served; `None` serves nothing.
    pub health_addr: Option<SocketAddr>,
    /// How often an unchanged object is re-checked.
    pub resync: Duration,
    /// Name reported on events (the Deployment's name in a cluster).
    pub reporter: String,
    /// Identity of this replica on events (the pod name in a cluster).
    pub instance: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            health_addr: None,
            resync: Duration::from_secs(300),
            reporter: "nimbus-operator".to_owned(),
            instance: None,
        }
    }
}

type Driver = Pin<Box<dyn futures::Future<Output = ()> + Send>>;

/// One watch per kind: it feeds the cache reconciles read from, then fans each touched object
/// (deletions included) out to the controllers that trigger on it. Because an event reaches a
/// controller only after the cache has applied it, a reconcile never sees an object its trigger
/// already reported gone. (kube's shared-stream subscribers would drop deletions.)
struct Cache<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    writer: Option<reflector::store::Writer<K>>,
    api: Api<K>,
    subscribers: Vec<mpsc::UnboundedSender<K>>,
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    fn new(api: Api<K>) -> Self {
        let (store, writer) = reflector::store();
        Self {
            store,
            writer: Some(writer),
            api,
            subscribers: Vec::new(),
        }
    }

    /// A trigger stream for one controller. The channel is unbounded because controllers only
    /// schedule work from it, which never blocks; it is drained as fast as events arrive.
    fn subscribe(&mut self) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers.push(tx);
        UnboundedReceiverStream::new(rx).map(Ok)
    }

    fn driver(&mut self) -> Driver {
        let writer = self.writer.take().expect("each cache is started once");
        let subscribers = std::mem::take(&mut self.subscribers);
        watcher(self.api.clone(), watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .touched_objects()
            .for_each(move |touched| {
                match touched {
                    Ok(obj) => {
                        for subscriber in &subscribers {
                            let _ = subscriber.send(obj.clone());
                        }
                    }
                    Err(error) => {
                        tracing::warn!(kind = %K::kind(&()), %error, "watch failed; retrying")
                    }
                }
                future::ready(())
            })
            .boxed()
    }
}

/// Runs every controller until `shutdown` is cancelled.
pub async fn run(client: Client, config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let mut intents = Cache::<SecurityIntent>::new(Api::all(client.clone()));
    let mut bindings = Cache::<SecurityIntentBinding>::new(Api::all(client.clone()));
    let mut cluster_bindings = Cache::<ClusterSecurityIntentBinding>::new(Api::all(client.clone()));
    let mut policies = Cache::<NimbusPolicy>::new(Api::all(client.clone()));
    let mut cluster_policies = Cache::<ClusterNimbusPolicy>::new(Api::all(client.clone()));
    let mut namespace_cache = Cache::<Namespace>::new(Api::all(client.clone()));

    let reporter = Reporter {
        controller: config.reporter.clone(),
        instance: config.instance.clone(),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        resync: config.resync,
        intents: intents.store.clone(),
        bindings: bindings.store.clone(),
        cluster_bindings: cluster_bindings.store.clone(),
        policies: policies.store.clone(),
        cluster_policies: cluster_policies.store.clone(),
        namespaces: namespace_cache.store.clone(),
    });
    let stopped = || {
        let token = shutdown.clone();
        async move { token.cancelled().await }
    };

    let intent_controller = Controller::for_stream(intents.subscribe(), ctx.intents.clone())
        .graceful_shutdown_on(stopped())
        .run(intent::reconcile, error_policy, ctx.clone());

    let sib_index = ctx.bindings.clone();
    let binding_controller = Controller::for_stream(bindings.subscribe(), ctx.bindings.clone())
        .owns_stream(policies.subscribe())
        .watches_stream(intents.subscribe(), move |si: SecurityIntent| {
            referencing(&sib_index, &si.name_any(), |b| &b.spec.intents)
        })
        .graceful_shutdown_on(stopped())
        .run(binding::reconcile, error_policy, ctx.clone());

    let csib_by_intent = ctx.cluster_bindings.clone();
    let csib_by_namespace = ctx.cluster_bindings.clone();
    let cluster_binding_controller =
        Controller::for_stream(cluster_bindings.subscribe(), ctx.cluster_bindings.clone())
            .owns_stream(cluster_policies.subscribe())
            // `owns` would look the cluster-scoped owner up inside the child's namespace.
            .watches_stream(policies.subscribe(), |np: NimbusPolicy| {
                cluster_owner::<ClusterSecurityIntentBinding, _>(&np)
            })
            .watches_stream(intents.subscribe(), move |si: SecurityIntent| {
                referencing(&csib_by_intent, &si.name_any(), |b| &b.spec.intents)
            })
            .watches_stream(namespace_cache.subscribe(), move |ns: Namespace| {
                selecting(&csib_by_namespace, &ns.name_any())
            })
            .graceful_shutdown_on(stopped())
            .run(cluster_binding::reconcile, error_policy, ctx.clone());

    let policy_controller = Controller::for_stream(policies.subscribe(), ctx.policies.clone())
        .graceful_shutdown_on(stopped())
        .run(policy::reconcile_namespaced, error_policy, ctx.clone());
    let cluster_policy_controller =
        Controller::for_stream(cluster_policies.subscribe(), ctx.cluster_policies.clone())
            .graceful_shutdown_on(stopped())
            .run(policy::reconcile_cluster, error_policy, ctx.clone());

    let caches: Vec<Driver> = vec![
        intents.driver(),
        bindings.driver(),
        cluster_bindings.driver(),
        policies.driver(),
        cluster_policies.driver(),
        namespace_cache.driver(),
    ];
    let ready = {
        let ctx = ctx.clone();
        async move {
            let _ = futures::join!(
                ctx.intents.wait_until_ready(),
                ctx.bindings.wait_until_ready(),
                ctx.cluster_bindings.wait_until_ready(),
                ctx.policies.wait_until_ready(),
                ctx.cluster_policies.wait_until_ready(),
                ctx.namespaces.wait_until_ready(),
            );
        }
    };
    if let Some(addr) = config.health_addr {
        // Its own task: its graceful stop must not cut the controllers' in-flight reconciles.
        tokio::spawn(health::serve(addr, ready, shutdown.clone()).await?);
    }

    tracing::info!("operator started");
    let controllers = futures::future::join_all(vec![
        drain(intent_controller),
        drain(binding_controller),
        drain(cluster_binding_controller),
        drain(policy_controller),
        drain(cluster_policy_controller),
    ]);
    // Caches run until shutdown; controllers finish their in-flight reconciles first.
    tokio::select! {
        _ = controllers => {}
        _ = future::select_all(caches) => {}
    }
    tracing::info!("operator stopped");
    Ok(())
}

fn drain<T: Debug, E: std::fmt::Display>(
    stream: impl Stream<Item = Result<T, E>> + Send + 'static,
) -> Driver {
    stream
        .for_each(|result| {
            if let Err(error) = result {
                tracing::debug!(%error, "controller event");
            }
            future::ready(())
        })
        .boxed()
}

/// Bindings in `store` that reference the intent `intent`.
fn referencing<B>(
    store: &Store<B>,
    intent: &str,
    intents: impl Fn(&B) -> &Vec<nimbus_api::MatchIntent>,
) -> Vec<ObjectRef<B>>
where
    B: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .filter(|b| intents(b).iter().any(|m| m.name == intent))
        .map(|b| ObjectRef::from_obj(&**b))
        .collect()
}

/// Cluster bindings whose namespace selector selects `namespace`.
fn selecting(
    store: &Store<ClusterSecurityIntentBinding>,
    namespace: &str,
) -> Vec<ObjectRef<ClusterSecurityIntentBinding>> {
    store
        .state()
        .iter()
        .filter(|b| {
            let selector = b
                .spec
                .selector
                .as_ref()
                .and_then(|s| s.ns_selector.as_ref());
            namespaces::validate(selector).is_ok()
                && selector.is_some_and(|s| namespaces::selects(s, namespace))
        })
        .map(|b| ObjectRef::from_obj(&**b))
        .collect()
}

/// The cluster-scoped controller owner of `child`, if it is a `K`.
fn cluster_owner<K, C>(child: &C) -> Option<ObjectRef<K>>
where
    K: Resource<DynamicType = ()>,
    C: Resource,
{
    child
        .owner_references()
        .iter()
        .find(|o| {
            o.controller == Some(true)
                && o.kind == K::kind(&())
                && o.api_version == K::api_version(&())
        })
        .map(|o| ObjectRef::new(&o.name))
}
