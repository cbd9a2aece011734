//! Wiring, top to bottom: one shared cache per kind, leadership, the context reconciles read,
//! the five controllers fed from those caches, and the watches driven until shutdown.

use crate::availability::{self, Availability, Served};
use crate::cache::{Cache, Driver};
use crate::context::{Context, EngineContext};
use crate::controllers::{binding, cluster_binding, error_policy, intent, policy};
use crate::error::Error;
use crate::events::Events;
use crate::health;
use crate::leader::{self, LeaderElection};
use crate::metrics::{ControllerLabels, KindLabels, Metrics};
use crate::posture;
use crate::write::natives::{self, NativeObject, Natives};
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt, future};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kube::runtime::controller::{self, Action};
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
    DEFAULT_K8TLS_IMAGE, DEFAULT_K8TLS_NAMESPACE, DEFAULT_SANDBOX_CLUSTER_ROLES, Fact, NativeKind,
};
use nimbus_core::namespaces::ProtectedNamespaces;
use nimbus_core::plan;
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
    /// Where and how the posture API is served; `None` serves nothing.
    pub posture: Option<posture::Config>,
    /// Reconciles each controller runs at once (0: no limit). Each reconcile sends its
    /// requests one after another, so this also bounds the operator's requests in flight.
    pub reconcile_concurrency: u16,
}

/// Reconciles wait on the API server, not on the CPU, so many may run at once; but not
/// unboundedly many, so that a burst (every binding at start) cannot crowd out other clients.
/// Measured with `make bench` (2 cores): cold convergence 4.5 s at 16, 3.1 s at 64, 3.2 s
/// unbounded; 5 controllers × 64 stay below kube-apiserver's default 400 requests in flight.
pub const DEFAULT_RECONCILE_CONCURRENCY: u16 = 64;

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
            posture: None,
            reconcile_concurrency: DEFAULT_RECONCILE_CONCURRENCY,
        }
    }
}

/// Runs every controller until `shutdown` is cancelled.
pub async fn run(client: Client, config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let metrics = Metrics::default();
    let mut caches = Caches::new(&client, &config, &metrics);
    let (availability, availability_driver) = availability::track(client.clone(), &config.engines);
    let served = availability.served.clone();
    let started = Started::when(caches.started(&availability));
    let leadership = Leadership::start(&client, &config, &metrics);
    let reporter = Reporter {
        controller: config.reporter.clone(),
        instance: config.instance.clone(),
    };
    let (events, events_writer) = Events::start(
        Recorder::new(client.clone(), reporter),
        metrics.events_dropped.clone(),
    );
    tokio::spawn(events_writer);
    let signals = Signals {
        served: served.clone(),
        leading: leadership.leading.clone(),
        started: started.0.clone(),
    };
    let ctx = Arc::new(context(
        &client, &config, &caches, &metrics, events, signals,
    ));
    let triggers = Triggers {
        served: served.clone(),
        leading: leadership.leading.clone(),
        shutdown: shutdown.clone(),
        concurrency: config.reconcile_concurrency,
    };

    let controllers = futures::future::join_all([
        intent_controller(&ctx, &mut caches, &triggers),
        binding_controller(&ctx, &mut caches, &triggers),
        cluster_binding_controller(&ctx, &mut caches, &triggers),
        policy_controller(&ctx, &mut caches, &triggers, &config),
        cluster_policy_controller(&ctx, &mut caches, &triggers, &config),
    ]);
    // Every replica serves the posture API, leader or not: it only reads the caches.
    let posture = match &config.posture {
        Some(posture_config) => {
            let (workloads, mut watches) = posture::Workloads::watch(&client);
            watches.changes.extend(caches.posture_inputs(&served));
            let server = posture::start(
                posture_config,
                &client,
                ctx.clone(),
                workloads,
                watches,
                shutdown.clone(),
            );
            Some(server.await?)
        }
        None => None,
    };
    let watches = caches.drive(availability_driver, served, &shutdown);
    if let Some(server) = posture {
        tokio::spawn(server);
    }
    if let Some(addr) = config.health_addr {
        // Its own task: its graceful stop must not cut the controllers' in-flight reconciles.
        let ready = started.reached();
        let server = health::serve(addr, ready, watches.broken.clone(), shutdown.clone()).await?;
        tokio::spawn(server);
    }
    if let Some(addr) = config.metrics_addr {
        tokio::spawn(metrics.clone().serve(addr, shutdown.clone()).await?);
    }

    tracing::info!(
        engines = ?config.engines,
        protected_namespaces = ?ctx.protected_namespaces.iter().collect::<Vec<_>>(),
        "operator started"
    );
    // Caches run until shutdown; controllers finish their in-flight reconciles first.
    tokio::select! {
        _ = controllers => {}
        _ = watches.driver => {}
    }
    // Only now, with no reconcile in flight, hand the lease over.
    leadership.hand_over().await;
    ctx.events.flush(Duration::from_secs(2)).await;
    tracing::info!("operator stopped");
    Ok(())
}

/// One shared cache per kind: every controller and every reconcile reads from these.
struct Caches {
    intents: Cache<SecurityIntent>,
    bindings: Cache<SecurityIntentBinding>,
    cluster_bindings: Cache<ClusterSecurityIntentBinding>,
    policies: Cache<NimbusPolicy>,
    cluster_policies: Cache<ClusterNimbusPolicy>,
    namespaces: Cache<Namespace>,
    /// The kinds the enabled engines write: our objects, with an index by controller.
    natives: Vec<(&'static NativeKind, Cache<NativeObject>, natives::Owned)>,
    /// Cluster facts the enabled engines read.
    nodes: Option<Cache<Node>>,
    patch_db: Option<(ObjectRef<ConfigMap>, Cache<ConfigMap>)>,
}

impl Caches {
    fn new(client: &Client, config: &Config, metrics: &Metrics) -> Self {
        let reads = |fact| config.engines.iter().any(|e| e.spec().reads(fact));
        // An engine confined to the k8tls namespace has its kinds watched only there: the
        // operator needs no cluster-wide read of CronJobs and ConfigMaps.
        let native_kinds: BTreeMap<&'static NativeKind, Option<&str>> = config
            .engines
            .iter()
            .flat_map(|e| {
                let spec = e.spec();
                let namespace = spec
                    .confined_to_k8tls_namespace
                    .then_some(config.k8tls_namespace.as_str());
                spec.kinds.iter().map(move |kind| (*kind, namespace))
            })
            .collect();
        Self {
            intents: cluster_wide(client, metrics, without_managed_fields),
            bindings: cluster_wide(client, metrics, without_managed_fields),
            cluster_bindings: cluster_wide(client, metrics, without_managed_fields),
            // Their main resource's managedFields tell who wrote them and what drifted.
            policies: cluster_wide(client, metrics, main_resource_fields_only),
            cluster_policies: cluster_wide(client, metrics, main_resource_fields_only),
            namespaces: cluster_wide(client, metrics, without_managed_fields),
            natives: native_kinds
                .iter()
                .map(|(kind, namespace)| {
                    let (cache, owned) = natives::cache(client, kind, *namespace);
                    (*kind, counted(cache, metrics), owned)
                })
                .collect(),
            nodes: reads(Fact::NodePodCidrs).then(|| {
                let cache = Cache::<Node>::new(Api::all(client.clone())).strip(|n| {
                    n.status = None;
                    n.metadata.managed_fields = None;
                });
                counted(cache, metrics)
            }),
            patch_db: config
                .virtual_patch_db
                .as_ref()
                .filter(|_| reads(Fact::VirtualPatchDb))
                .map(|(ns, name)| {
                    let watch = watcher::Config::default().fields(&format!("metadata.name={name}"));
                    let cache = Cache::with(Api::namespaced(client.clone(), ns), (), watch);
                    (ObjectRef::new(name).within(ns), counted(cache, metrics))
                }),
        }
    }

    /// A signal per change of anything the posture reads from these caches.
    fn posture_inputs(&mut self, served: &watch::Receiver<Served>) -> Vec<BoxStream<'static, ()>> {
        let mut inputs = vec![
            posture::signal(self.intents.subscribe()),
            posture::signal(self.bindings.subscribe()),
            posture::signal(self.cluster_bindings.subscribe()),
            posture::signal(self.policies.subscribe()),
            posture::signal(self.cluster_policies.subscribe()),
            posture::signal(self.namespaces.subscribe()),
            posture::signal(WatchStream::from_changes(served.clone())),
        ];
        inputs.extend(
            self.natives
                .iter_mut()
                .map(|(_, cache, _)| posture::signal(cache.subscribe())),
        );
        inputs
    }

    /// Resolves once every cache a reconcile reads has listed and engine availability is known,
    /// with the caches of the native kinds served then. Before that, "not in the cache" and
    /// "not served" may be untrue, and acting on them would delete what is in force.
    fn started(&self, availability: &Availability) -> impl Future<Output = ()> + Send + 'static {
        let mut listed = vec![
            self.intents.synced().boxed(),
            self.bindings.synced().boxed(),
            self.cluster_bindings.synced().boxed(),
            self.policies.synced().boxed(),
            self.cluster_policies.synced().boxed(),
            self.namespaces.synced().boxed(),
        ];
        listed.extend(self.nodes.as_ref().map(|c| c.synced().boxed()));
        listed.extend(self.patch_db.as_ref().map(|(_, c)| c.synced().boxed()));
        let mut discovered = availability.discovered.clone();
        let served = availability.served.clone();
        let natives: Vec<_> = self
            .natives
            .iter()
            .map(|(kind, _, owned)| (*kind, owned.synced.clone()))
            .collect();
        async move {
            future::join_all(listed).await;
            let _ = discovered.wait_for(|known| *known).await;
            let native_lists = natives.into_iter().map(|(kind, mut synced)| {
                let mut served = served.clone();
                async move {
                    // A kind whose CRD goes away meanwhile will never list.
                    tokio::select! {
                        _ = synced.wait_for(|listed| *listed) => {}
                        _ = served.wait_for(|s| !s.contains(kind)) => {}
                    }
                }
            });
            future::join_all(native_lists).await;
        }
    }

    /// Drives every watch (a CRD-backed kind once its CRD is served) until the process stops.
    fn drive(
        mut self,
        availability: Driver,
        served: watch::Receiver<Served>,
        shutdown: &CancellationToken,
    ) -> Watches {
        let mut drivers: Vec<Driver> = vec![
            self.intents.driver(),
            self.bindings.driver(),
            self.cluster_bindings.driver(),
            self.policies.driver(),
            self.cluster_policies.driver(),
            self.namespaces.driver(),
            availability,
        ];
        drivers.extend(self.nodes.as_mut().map(Cache::driver));
        drivers.extend(self.patch_db.as_mut().map(|(_, c)| c.driver()));
        // A native kind is watched once its CRD is served.
        let served_kind = |kind: &'static NativeKind| {
            let mut served = served.clone();
            async move {
                let _ = served.wait_for(|s| s.contains(kind)).await;
            }
        };
        for (kind, cache, _) in &mut self.natives {
            drivers.push(cache.driver_after(served_kind(kind)));
        }
        // Watches run until the process stops. One that ends anyway is a bug: say so, and stop
        // reporting ready, but keep serving (only a signal ends `nimbus run`).
        let broken = CancellationToken::new();
        let driver = future::join_all(drivers.into_iter().map(|driver| {
            let (broken, shutdown) = (broken.clone(), shutdown.clone());
            driver.then(move |()| async move {
                if !shutdown.is_cancelled() {
                    tracing::error!("a cache driver ended unexpectedly; reporting not ready");
                    broken.cancel();
                }
                future::pending::<()>().await
            })
        }))
        .map(drop)
        .boxed();
        Watches { driver, broken }
    }
}

struct Watches {
    driver: Driver,
    /// Cancelled when a watch ended before shutdown.
    broken: CancellationToken,
}

/// Whether the operator has started: every cache listed, engine availability known (see
/// [`Caches::started`]). Reconciles wait for it, and `/readyz` reports it.
struct Started(watch::Receiver<bool>);

impl Started {
    fn when(started: impl Future<Output = ()> + Send + 'static) -> Self {
        let (tx, rx) = watch::channel(false);
        let since = Instant::now();
        tokio::spawn(async move {
            started.await;
            tracing::info!(after = ?since.elapsed(), "caches listed and engines discovered; reconciling");
            // Waiters see the value, not the closed channel: they wait for `true`, and it stays.
            tx.send_replace(true);
        });
        Self(rx)
    }

    fn reached(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut started = self.0.clone();
        async move {
            let _ = started.wait_for(|s| *s).await;
        }
    }
}

/// Whether this replica leads: always without election, else while it holds the lease.
struct Leadership {
    leading: watch::Receiver<bool>,
    election: Option<(tokio::task::JoinHandle<()>, CancellationToken)>,
}

impl Leadership {
    fn start(client: &Client, config: &Config, metrics: &Metrics) -> Self {
        let (leading_tx, leading) = watch::channel(config.leader_election.is_none());
        let election = config.leader_election.clone().map(|election| {
            let stop = CancellationToken::new();
            let task = tokio::spawn(leader::run(
                client.clone(),
                election,
                leading_tx,
                stop.clone(),
            ));
            (task, stop)
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
        Self { leading, election }
    }

    /// Releases the lease (call with no reconcile in flight).
    async fn hand_over(self) {
        if let Some((task, stop)) = self.election {
            stop.cancel();
            let _ = task.await;
        }
    }
}

/// What a reconcile reads of the runtime's state, as it changes.
struct Signals {
    served: watch::Receiver<Served>,
    leading: watch::Receiver<bool>,
    started: watch::Receiver<bool>,
}

fn context(
    client: &Client,
    config: &Config,
    caches: &Caches,
    metrics: &Metrics,
    events: Events,
    signals: Signals,
) -> Context {
    Context {
        client: client.clone(),
        events,
        resync: config.resync,
        intents: caches.intents.store.clone(),
        bindings: caches.bindings.store.clone(),
        cluster_bindings: caches.cluster_bindings.store.clone(),
        policies: caches.policies.store.clone(),
        cluster_policies: caches.cluster_policies.store.clone(),
        policies_created: caches.policies.creations(),
        cluster_policies_created: caches.cluster_policies.creations(),
        namespaces: caches.namespaces.store.clone(),
        natives: Natives::new(
            client.clone(),
            caches
                .natives
                .iter()
                .map(|(kind, _, owned)| (*kind, owned.clone()))
                .collect(),
        ),
        engines: EngineContext {
            enabled: config.engines.clone(),
            served: signals.served,
            nodes: caches.nodes.as_ref().map(|c| c.store.clone()),
            k8tls_namespace: config.k8tls_namespace.clone(),
            k8tls_image: config.k8tls_image.clone(),
            sandbox_cluster_roles: config.sandbox_cluster_roles.clone(),
            virtual_patch_db: caches
                .patch_db
                .as_ref()
                .map(|(key, cache)| (key.clone(), cache.store.clone())),
        },
        metrics: metrics.clone(),
        leading: signals.leading,
        started: signals.started,
        written: Default::default(),
        failures: Default::default(),
        protected_namespaces: config.protected(),
    }
}

/// Events that make a controller reconcile everything, or stop.
struct Triggers {
    served: watch::Receiver<Served>,
    leading: watch::Receiver<bool>,
    shutdown: CancellationToken,
    /// Reconciles each controller runs at once.
    concurrency: u16,
}

impl Triggers {
    fn controller_config(&self) -> controller::Config {
        controller::Config::default().concurrency(self.concurrency)
    }

    fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let token = self.shutdown.clone();
        async move { token.cancelled().await }
    }

    /// An engine's kinds became served, or stopped being.
    fn availability_changed(&self) -> BoxStream<'static, ()> {
        WatchStream::from_changes(self.served.clone())
            .map(|_| ())
            .boxed()
    }

    /// This replica became leader: as a standby it skipped all work.
    fn leadership_gained(&self) -> BoxStream<'static, ()> {
        WatchStream::from_changes(self.leading.clone())
            .filter(|leads| future::ready(*leads))
            .map(|_| ())
            .boxed()
    }
}

fn intent_controller(ctx: &Arc<Context>, caches: &mut Caches, t: &Triggers) -> Driver {
    let controller = Controller::for_stream(caches.intents.subscribe(), ctx.intents.clone())
        .reconcile_all_on(t.leadership_gained())
        .graceful_shutdown_on(t.stopped())
        .with_config(t.controller_config())
        .run(
            gated("intent", ctx.intents.clone(), intent::reconcile),
            error_policy,
            ctx.clone(),
        );
    drain(controller)
}

fn binding_controller(ctx: &Arc<Context>, caches: &mut Caches, t: &Triggers) -> Driver {
    let by_intent = ctx.bindings.clone();
    let in_namespace = ctx.bindings.clone();
    let controller = Controller::for_stream(caches.bindings.subscribe(), ctx.bindings.clone())
        .owns_stream(caches.policies.subscribe())
        .watches_stream(caches.intents.subscribe(), move |si: SecurityIntent| {
            referencing(&by_intent, &si.name_any(), |b| &b.spec.intents)
        })
        // A namespace's shadow label decides its bindings' mode.
        .watches_stream(caches.namespaces.subscribe(), move |ns: Namespace| {
            let name = ns.name_any();
            in_namespace
                .state()
                .iter()
                .filter(|b| b.namespace().as_deref() == Some(name.as_str()))
                .map(|b| ObjectRef::from_obj(&**b))
                .collect::<Vec<_>>()
        })
        .reconcile_all_on(futures::stream::select_all([
            t.availability_changed(),
            t.leadership_gained(),
            // What it created may have come and gone while the watch was down.
            caches.policies.relisted(),
        ]))
        .graceful_shutdown_on(t.stopped())
        .with_config(t.controller_config())
        .run(
            gated("binding", ctx.bindings.clone(), binding::reconcile),
            error_policy,
            ctx.clone(),
        );
    drain(controller)
}

fn cluster_binding_controller(ctx: &Arc<Context>, caches: &mut Caches, t: &Triggers) -> Driver {
    let by_intent = ctx.cluster_bindings.clone();
    let by_namespace = ctx.cluster_bindings.clone();
    let protected = ctx.protected_namespaces.clone();
    let controller = Controller::for_stream(
        caches.cluster_bindings.subscribe(),
        ctx.cluster_bindings.clone(),
    )
    .owns_stream(caches.cluster_policies.subscribe())
    // `owns` would look the cluster-scoped owner up inside the child's namespace.
    .watches_stream(caches.policies.subscribe(), |np: NimbusPolicy| {
        owner::<ClusterSecurityIntentBinding, _>(&np, None)
    })
    .watches_stream(caches.intents.subscribe(), move |si: SecurityIntent| {
        referencing(&by_intent, &si.name_any(), |b| &b.spec.intents)
    })
    .watches_stream(caches.namespaces.subscribe(), move |ns: Namespace| {
        selecting(&by_namespace, &ns.name_any(), &protected)
    })
    .reconcile_all_on(futures::stream::select_all([
        t.availability_changed(),
        t.leadership_gained(),
        caches.policies.relisted(),
        caches.cluster_policies.relisted(),
    ]))
    .graceful_shutdown_on(t.stopped())
    .with_config(t.controller_config())
    .run(
        gated(
            "cluster_binding",
            ctx.cluster_bindings.clone(),
            cluster_binding::reconcile,
        ),
        error_policy,
        ctx.clone(),
    );
    drain(controller)
}

fn policy_controller(
    ctx: &Arc<Context>,
    caches: &mut Caches,
    t: &Triggers,
    config: &Config,
) -> Driver {
    let controller = Controller::for_stream(caches.policies.subscribe(), ctx.policies.clone());
    let controller = translating(controller, ctx, caches, t, config, |obj| {
        owner::<NimbusPolicy, _>(&obj, obj.namespace().as_deref())
    });
    drain(controller.run(
        gated("policy", ctx.policies.clone(), policy::reconcile_namespaced),
        error_policy,
        ctx.clone(),
    ))
}

fn cluster_policy_controller(
    ctx: &Arc<Context>,
    caches: &mut Caches,
    t: &Triggers,
    config: &Config,
) -> Driver {
    let controller = Controller::for_stream(
        caches.cluster_policies.subscribe(),
        ctx.cluster_policies.clone(),
    );
    let controller = translating(controller, ctx, caches, t, config, |obj| {
        owner::<ClusterNimbusPolicy, _>(&obj, None)
    });
    drain(controller.run(
        gated(
            "cluster_policy",
            ctx.cluster_policies.clone(),
            policy::reconcile_cluster,
        ),
        error_policy,
        ctx.clone(),
    ))
}

/// A policy controller's triggers: a change to a native object reconciles the policy owning it
/// (`owner_of`), and a change to what translations read reconciles every policy.
fn translating<P>(
    mut controller: Controller<P>,
    ctx: &Arc<Context>,
    caches: &mut Caches,
    t: &Triggers,
    config: &Config,
    owner_of: fn(NativeObject) -> Option<ObjectRef<P>>,
) -> Controller<P>
where
    P: Resource<DynamicType = ()>
        + Clone
        + Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    for (kind, cache, _) in &mut caches.natives {
        controller =
            controller.watches_stream_with(cache.subscribe(), owner_of, kind.api_resource());
    }
    controller
        .reconcile_all_on(translation_inputs_changed(ctx, caches, t, config))
        .graceful_shutdown_on(t.stopped())
        .with_config(t.controller_config())
}

/// When every policy is re-translated: what a translation reads changed (engine availability,
/// the cluster facts engines read), leadership was gained, or a native kind was relisted (what a
/// policy created may have come and gone while that watch was down).
fn translation_inputs_changed(
    ctx: &Arc<Context>,
    caches: &mut Caches,
    t: &Triggers,
    config: &Config,
) -> BoxStream<'static, ()> {
    let mut streams = vec![t.availability_changed(), t.leadership_gained()];
    if let Some(nodes) = &mut caches.nodes {
        let ctx = ctx.clone();
        streams.push(changes(nodes.subscribe(), move || ctx.node_pod_cidrs()));
    }
    if let Some((_, db)) = &mut caches.patch_db {
        streams.push(db.subscribe().map(|_| ()).boxed());
    }
    if config
        .engines
        .iter()
        .any(|e| e.spec().reads(Fact::K8tlsNamespace))
    {
        let k8tls_namespace = config.k8tls_namespace.clone();
        let namespace_changed = caches
            .namespaces
            .subscribe()
            .filter(move |ns| {
                future::ready(ns.as_ref().is_ok_and(|ns| ns.name_any() == k8tls_namespace))
            })
            .map(|_| ());
        streams.push(namespace_changed.boxed());
    }
    streams.extend(caches.natives.iter_mut().map(|(_, c, _)| c.relisted()));
    futures::stream::select_all(streams).boxed()
}

/// A cache of every `K` in the cluster, keeping of each object what `strip` leaves.
fn cluster_wide<K>(client: &Client, metrics: &Metrics, strip: fn(&mut K)) -> Cache<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    counted(Cache::new(Api::all(client.clone())).strip(strip), metrics)
}

/// For kinds whose managedFields nothing reads (memory: they can outweigh the object).
fn without_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

/// Drops the managedFields entries of subresources (the status), which nothing reads.
fn main_resource_fields_only<K: Resource>(obj: &mut K) {
    if let Some(entries) = &mut obj.meta_mut().managed_fields {
        entries.retain(|e| e.subresource.as_deref().is_none_or(str::is_empty));
    }
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

/// Runs `reconcile` once the operator has started (see [`Caches::started`]: until then a
/// reconcile would take "not listed yet" for "absent", and delete what is in force), and only
/// while this replica leads (a standby keeps its caches warm and is reconciled in full when it
/// takes over); records metrics about it.
fn gated<K, F, Fut>(
    controller: &'static str,
    store: Store<K>,
    reconcile: F,
) -> impl FnMut(Arc<K>, Arc<Context>) -> futures::future::BoxFuture<'static, Result<Action, Error>>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    move |obj, ctx| {
        let store = store.clone();
        async move {
            let mut started = ctx.started.clone();
            let obj = if *started.borrow_and_update() {
                obj
            } else {
                let _ = started.wait_for(|s| *s).await;
                // The object may have changed, or gone, while the caches filled.
                match store.get(&ObjectRef::from_obj(&*obj)) {
                    Some(latest) => latest,
                    None => return Ok(Action::await_change()),
                }
            };
            if !*ctx.leading.borrow() {
                return Ok(Action::await_change());
            }
            let labels = ControllerLabels { controller };
            let in_flight = ctx.metrics.in_flight.get_or_create(&labels).clone();
            in_flight.inc();
            let started = Instant::now();
            let key = crate::controllers::failure_key(&*obj);
            // Named for the debug log only when it is on: this runs for every reconcile.
            let subject =
                tracing::enabled!(tracing::Level::DEBUG).then(|| (obj.name_any(), obj.namespace()));
            let result = reconcile(obj, ctx.clone()).await;
            if let Some((name, namespace)) = subject {
                tracing::debug!(controller, %name, ?namespace, ?result, "reconciled");
            }
            in_flight.dec();
            if result.is_ok() {
                ctx.forget_failures(&key);
            }
            ctx.metrics
                .reconciled(controller, started.elapsed(), result.as_ref().err());
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

/// Runs a controller, logging what it reports.
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
        .filter(|b| plan::selects_namespace(b, namespace, protected))
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
