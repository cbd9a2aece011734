//! Wiring: one shared cache per kind, every controller fed from those caches.

use crate::availability;
use crate::cache::{Cache, Driver};
use crate::context::{Context, EngineContext};
use crate::controllers::{binding, cluster_binding, error_policy, intent, policy};
use crate::error::Error;
use crate::health;
use crate::leader::{self, LeaderElection};
use crate::metrics::{ControllerLabels, KindLabels, Metrics};
use crate::natives::{self, Natives};
use futures::{FutureExt, Stream, StreamExt, future};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntent,
    SecurityIntentBinding,
};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{
    self, DEFAULT_K8TLS_IMAGE, DEFAULT_K8TLS_NAMESPACE, DEFAULT_SANDBOX_CLUSTER_ROLES, NativeKind,
};
use nimbus_core::namespaces::{self, ProtectedNamespaces};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct Config {
    /// Where `/healthz` and `/readyz` are served; `None` serves nothing.
    pub health_addr: Option<SocketAddr>,
    /// Where `/metrics` is served; `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
    /// Run as one of several replicas, only the lease holder writing; `None`: always write.
    pub leader_election: Option<LeaderElection>,
    /// How often an unchanged object is re-checked.
    pub resync: Duration,
    /// Name reported on events (the Deployment's name in a cluster).
    pub reporter: String,
    /// Identity of this replica on events (the pod name in a cluster).
    pub instance: Option<String>,
    /// Engines the operator drives; the others are left to external adapters.
    pub engines: BTreeSet<Engine>,
    /// Namespace of the k8tls CronJobs (with its `k8tls` ServiceAccount and ConfigMaps).
    pub k8tls_namespace: String,
    /// The ConfigMap (`namespace/name`) holding the virtual-patch database.
    pub virtual_patch_db: Option<(String, String)>,
    /// Image of the k8tls scanner.
    pub k8tls_image: String,
    /// The only ClusterRoles namespaceSandbox may grant.
    pub sandbox_cluster_roles: BTreeSet<String>,
    /// Namespaces cluster bindings never fan out to; `None`: kube-system, the leader-election
    /// namespace (the operator's own) and the k8tls namespace.
    pub protected_namespaces: Option<ProtectedNamespaces>,
}

impl Config {
    /// The protected namespaces in effect.
    pub fn protected(&self) -> ProtectedNamespaces {
        self.protected_namespaces.clone().unwrap_or_else(|| {
            ProtectedNamespaces::defaults(
                self.leader_election.as_ref().map(|e| e.namespace.as_str()),
                &self.k8tls_namespace,
            )
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            health_addr: None,
            metrics_addr: None,
            leader_election: None,
            resync: Duration::from_secs(300),
            reporter: "nimbus-operator".to_owned(),
            instance: None,
            engines: Engine::ALL.into(),
            k8tls_namespace: DEFAULT_K8TLS_NAMESPACE.to_owned(),
            virtual_patch_db: None,
            k8tls_image: DEFAULT_K8TLS_IMAGE.to_owned(),
            sandbox_cluster_roles: DEFAULT_SANDBOX_CLUSTER_ROLES
                .iter()
                .map(|r| (*r).to_owned())
                .collect(),
            protected_namespaces: None,
        }
    }
}

/// Runs every controller until `shutdown` is cancelled.
pub async fn run(client: Client, config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let metrics = Metrics::default();
    let mut intents = counted(
        Cache::<SecurityIntent>::new(Api::all(client.clone())),
        &metrics,
    );
    let mut bindings = counted(
        Cache::<SecurityIntentBinding>::new(Api::all(client.clone())),
        &metrics,
    );
    let mut cluster_bindings = counted(
        Cache::<ClusterSecurityIntentBinding>::new(Api::all(client.clone())),
        &metrics,
    );
    let mut policies = counted(
        Cache::<NimbusPolicy>::new(Api::all(client.clone())),
        &metrics,
    );
    let mut cluster_policies = counted(
        Cache::<ClusterNimbusPolicy>::new(Api::all(client.clone())),
        &metrics,
    );
    let mut namespace_cache = counted(Cache::<Namespace>::new(Api::all(client.clone())), &metrics);

    // Engines: which kinds are served, one cache per native kind, and the cluster facts the
    // translations read.
    let (served, availability_driver) = availability::track(client.clone(), &config.engines);
    // k8tls writes only into its own namespace, so its kinds are watched only there: the
    // operator needs no cluster-wide read of CronJobs and ConfigMaps.
    let native_kinds: BTreeMap<&'static NativeKind, Option<&str>> = config
        .engines
        .iter()
        .flat_map(|e| {
            let namespace = (*e == Engine::K8tls).then_some(config.k8tls_namespace.as_str());
            engines::kinds(*e)
                .iter()
                .map(move |kind| (*kind, namespace))
        })
        .collect();
    let mut native_caches: Vec<(&'static NativeKind, Cache<DynamicObject>)> = native_kinds
        .into_iter()
        .map(|(kind, namespace)| {
            let cache = natives::cache(&client, kind, namespace);
            (kind, counted(cache, &metrics))
        })
        .collect();
    let mut node_cache = config.engines.contains(&Engine::NetworkPolicy).then(|| {
        let cache = Cache::<Node>::new(Api::all(client.clone())).strip(|n| {
            n.status = None;
            n.metadata.managed_fields = None;
        });
        counted(cache, &metrics)
    });
    let mut patch_db_cache = config.virtual_patch_db.as_ref().map(|(ns, name)| {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let cache = Cache::<ConfigMap>::with(Api::namespaced(client.clone(), ns), (), config);
        (ObjectRef::new(name).within(ns), counted(cache, &metrics))
    });

    // Leadership: without election this replica always leads.
    let (leading_tx, leading) = watch::channel(config.leader_election.is_none());
    let election_stop = CancellationToken::new();
    let election = config.leader_election.clone().map(|election| {
        tokio::spawn(leader::run(
            client.clone(),
            election,
            leading_tx,
            election_stop.clone(),
        ))
    });
    tokio::spawn({
        let mut leading = leading.clone();
        let gauge = metrics.leader.clone();
        async move {
            loop {
                gauge.set(i64::from(*leading.borrow_and_update()));
                if leading.changed().await.is_err() {
                    break;
                }
            }
        }
    });

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
        natives: Natives::new(
            client.clone(),
            native_caches
                .iter()
                .map(|(kind, cache)| (*kind, cache.store.clone()))
                .collect(),
        ),
        engines: EngineContext {
            enabled: config.engines.clone(),
            served: served.clone(),
            nodes: node_cache.as_ref().map(|c| c.store.clone()),
            k8tls_namespace: config.k8tls_namespace.clone(),
            k8tls_image: config.k8tls_image.clone(),
            sandbox_cluster_roles: config.sandbox_cluster_roles.clone(),
            virtual_patch_db: patch_db_cache
                .as_ref()
                .map(|(key, cache)| (key.clone(), cache.store.clone())),
        },
        metrics: metrics.clone(),
        leading: leading.clone(),
        failures: Default::default(),
        protected_namespaces: config.protected(),
    });
    let stopped = || {
        let token = shutdown.clone();
        async move { token.cancelled().await }
    };
    let availability_changes = || {
        WatchStream::from_changes(served.clone())
            .map(|_| ())
            .boxed()
    };
    // A replica that becomes leader reconciles everything: as a standby it skipped all work.
    let leadership_gained = || {
        WatchStream::from_changes(leading.clone())
            .filter(|leads| future::ready(*leads))
            .map(|_| ())
            .boxed()
    };

    let intent_controller = Controller::for_stream(intents.subscribe(), ctx.intents.clone())
        .reconcile_all_on(leadership_gained())
        .graceful_shutdown_on(stopped())
        .run(
            gated("intent", intent::reconcile),
            error_policy,
            ctx.clone(),
        );

    let sib_index = ctx.bindings.clone();
    let binding_controller = Controller::for_stream(bindings.subscribe(), ctx.bindings.clone())
        .owns_stream(policies.subscribe())
        .watches_stream(intents.subscribe(), move |si: SecurityIntent| {
            referencing(&sib_index, &si.name_any(), |b| &b.spec.intents)
        })
        .reconcile_all_on(futures::stream::select_all([
            availability_changes(),
            leadership_gained(),
            policies.relisted(),
        ]))
        .graceful_shutdown_on(stopped())
        .run(
            gated("binding", binding::reconcile),
            error_policy,
            ctx.clone(),
        );

    let csib_by_intent = ctx.cluster_bindings.clone();
    let csib_by_namespace = ctx.cluster_bindings.clone();
    let protected = ctx.protected_namespaces.clone();
    let cluster_binding_controller =
        Controller::for_stream(cluster_bindings.subscribe(), ctx.cluster_bindings.clone())
            .owns_stream(cluster_policies.subscribe())
            // `owns` would look the cluster-scoped owner up inside the child's namespace.
            .watches_stream(policies.subscribe(), |np: NimbusPolicy| {
                owner::<ClusterSecurityIntentBinding, _>(&np, None)
            })
            .watches_stream(intents.subscribe(), move |si: SecurityIntent| {
                referencing(&csib_by_intent, &si.name_any(), |b| &b.spec.intents)
            })
            .watches_stream(namespace_cache.subscribe(), move |ns: Namespace| {
                selecting(&csib_by_namespace, &ns.name_any(), &protected)
            })
            .reconcile_all_on(futures::stream::select_all([
                availability_changes(),
                leadership_gained(),
                policies.relisted(),
                cluster_policies.relisted(),
            ]))
            .graceful_shutdown_on(stopped())
            .run(
                gated("cluster_binding", cluster_binding::reconcile),
                error_policy,
                ctx.clone(),
            );

    // Policies re-translate when what their translation reads changes: engine availability,
    // node pod CIDRs, the virtual-patch database, the k8tls namespace; and after a relist of a
    // native kind.
    let mut environment_changes = vec![availability_changes(), leadership_gained()];
    let mut cluster_environment_changes = vec![availability_changes(), leadership_gained()];
    if let Some(nodes) = &mut node_cache {
        let cidrs = {
            let ctx = ctx.clone();
            move || ctx.node_pod_cidrs()
        };
        environment_changes.push(changes(nodes.subscribe(), cidrs));
    }
    if let Some((_, db)) = &mut patch_db_cache {
        environment_changes.push(db.subscribe().map(|_| ()).boxed());
    }
    let k8tls_namespace = config.k8tls_namespace.clone();
    let k8tls_namespace_changes = namespace_cache
        .subscribe()
        .filter(move |ns| {
            future::ready(ns.as_ref().is_ok_and(|ns| ns.name_any() == k8tls_namespace))
        })
        .map(|_| ())
        .boxed();

    cluster_environment_changes.push(k8tls_namespace_changes);
    let mut policy_controller = Controller::for_stream(policies.subscribe(), ctx.policies.clone());
    let mut cluster_policy_controller =
        Controller::for_stream(cluster_policies.subscribe(), ctx.cluster_policies.clone());
    for (kind, cache) in &mut native_caches {
        // What a policy created may have come and gone while this kind's watch was down.
        environment_changes.push(cache.relisted());
        cluster_environment_changes.push(cache.relisted());
        let resource = kind.api_resource();
        policy_controller = policy_controller.watches_stream_with(
            cache.subscribe(),
            |obj: DynamicObject| owner::<NimbusPolicy, _>(&obj, obj.namespace().as_deref()),
            resource.clone(),
        );
        cluster_policy_controller = cluster_policy_controller.watches_stream_with(
            cache.subscribe(),
            |obj: DynamicObject| owner::<ClusterNimbusPolicy, _>(&obj, None),
            resource,
        );
    }
    let policy_controller = policy_controller
        .reconcile_all_on(futures::stream::select_all(environment_changes))
        .graceful_shutdown_on(stopped())
        .run(
            gated("policy", policy::reconcile_namespaced),
            error_policy,
            ctx.clone(),
        );
    let cluster_policy_controller = cluster_policy_controller
        .reconcile_all_on(futures::stream::select_all(cluster_environment_changes))
        .graceful_shutdown_on(stopped())
        .run(
            gated("cluster_policy", policy::reconcile_cluster),
            error_policy,
            ctx.clone(),
        );

    let mut caches: Vec<Driver> = vec![
        intents.driver(),
        bindings.driver(),
        cluster_bindings.driver(),
        policies.driver(),
        cluster_policies.driver(),
        namespace_cache.driver(),
        availability_driver,
    ];
    caches.extend(node_cache.as_mut().map(Cache::driver));
    caches.extend(patch_db_cache.as_mut().map(|(_, c)| c.driver()));
    for (kind, cache) in &mut native_caches {
        // A CRD-backed kind is watched once its CRD is served.
        let mut served = served.clone();
        let kind: &'static NativeKind = kind;
        caches.push(cache.driver_after(async move {
            let _ = served.wait_for(|s| s.contains(kind)).await;
        }));
    }
    let ready = futures::future::join_all([
        intents.synced().boxed(),
        bindings.synced().boxed(),
        cluster_bindings.synced().boxed(),
        policies.synced().boxed(),
        cluster_policies.synced().boxed(),
        namespace_cache.synced().boxed(),
    ])
    .map(drop);
    // Watches run until the process stops. One that ends anyway is a bug: say so, and stop
    // reporting ready, but keep serving (only a signal ends `nimbus run`).
    let broken = CancellationToken::new();
    let caches = future::join_all(caches.into_iter().map(|driver| {
        let (broken, shutdown) = (broken.clone(), shutdown.clone());
        driver.then(move |()| async move {
            if !shutdown.is_cancelled() {
                tracing::error!("a cache driver ended unexpectedly; reporting not ready");
                broken.cancel();
            }
            future::pending::<()>().await
        })
    }));
    if let Some(addr) = config.health_addr {
        // Its own task: its graceful stop must not cut the controllers' in-flight reconciles.
        tokio::spawn(health::serve(addr, ready, broken.clone(), shutdown.clone()).await?);
    }
    if let Some(addr) = config.metrics_addr {
        tokio::spawn(metrics.clone().serve(addr, shutdown.clone()).await?);
    }

    tracing::info!(
        engines = ?config.engines,
        protected_namespaces = ?ctx.protected_namespaces.iter().collect::<Vec<_>>(),
        "operator started"
    );
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
        _ = caches => {}
    }
    // Only now, with no reconcile in flight, hand the lease over.
    election_stop.cancel();
    if let Some(election) = election {
        let _ = election.await;
    }
    tracing::info!("operator stopped");
    Ok(())
}

fn counted<K>(cache: Cache<K>, metrics: &Metrics) -> Cache<K>
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

/// Runs `reconcile` only while this replica leads (a standby keeps its caches warm and is
/// reconciled in full when it takes over), and records metrics about it.
fn gated<K, F, Fut>(
    controller: &'static str,
    reconcile: F,
) -> impl FnMut(Arc<K>, Arc<Context>) -> futures::future::BoxFuture<'static, Result<Action, Error>>
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    move |obj, ctx| {
        async move {
            if !*ctx.leading.borrow() {
                return Ok(Action::await_change());
            }
            let labels = ControllerLabels { controller };
            let in_flight = ctx.metrics.in_flight.get_or_create(&labels).clone();
            in_flight.inc();
            let started = Instant::now();
            let key = crate::controllers::failure_key(&*obj);
            let (name, namespace) = (obj.name_any(), obj.namespace());
            let result = reconcile(obj, ctx.clone()).await;
            tracing::debug!(controller, %name, ?namespace, ?result, "reconciled");
            in_flight.dec();
            if result.is_ok() {
                ctx.forget_failures(&key);
            }
            ctx.metrics
                .reconciled(controller, started.elapsed(), result.is_err());
            result
        }
        .boxed()
    }
}

/// Emits when `value()` differs from what it was at the previous event of `events`.
fn changes<T, V>(
    events: impl Stream<Item = T> + Send + 'static,
    value: impl Fn() -> V + Send + 'static,
) -> futures::stream::BoxStream<'static, ()>
where
    V: PartialEq + Send + 'static,
{
    let mut last = None;
    events
        .filter_map(move |_| {
            let now = value();
            let changed = last.as_ref() != Some(&now);
            last = Some(now);
            future::ready(changed.then_some(()))
        })
        .boxed()
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
    protected: &ProtectedNamespaces,
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
                && selector.is_some_and(|s| namespaces::selects(s, namespace, protected))
        })
        .map(|b| ObjectRef::from_obj(&**b))
        .collect()
}

/// The controlling owner of `child` if it is a `K`, in `namespace` (`None` for a cluster-scoped
/// owner; kube's `owns` would look one up inside the child's namespace).
fn owner<K, C>(child: &C, namespace: Option<&str>) -> Option<ObjectRef<K>>
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
        .map(|o| {
            let key = ObjectRef::new(&o.name);
            match namespace {
                Some(ns) => key.within(ns),
                None => key,
            }
        })
}
