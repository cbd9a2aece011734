//! Wiring, top to bottom: one shared cache per kind ([`caches`]), leadership, the context
//! reconciles read, the five controllers fed from those caches ([`controllers`]), and the
//! watches driven until shutdown.

mod caches;
mod config;
mod controllers;

pub use config::{Config, DEFAULT_RECONCILE_CONCURRENCY};

use caches::Caches;
use controllers::{
    Triggers, binding_controller, cluster_binding_controller, cluster_exception_controller,
    cluster_policy_controller, exception_controller, intent_controller, policy_controller,
};

use crate::availability::{self, Served};
use crate::context::{Context, EngineContext};
use crate::error::Error;
use crate::events::Events;
use crate::health;
use crate::leader::{self};
use crate::metrics::Metrics;
use crate::posture;
use crate::write::natives::Natives;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use nimbus_core::catalog::Engine;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Runs every controller until `shutdown` is cancelled.
pub async fn run(client: Client, config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let metrics = Metrics::default();
    let mut caches = Caches::new(&client, &config, &metrics);
    let (availability, availability_driver) = availability::track(client.clone(), &config.engines);
    let served = availability.served.clone();
    let started = Started::when(caches.started(&availability));
    let leadership = Leadership::start(&client, &config, &metrics);
    let events = start_events(&client, &config, &metrics);
    let signals = Signals {
        served: served.clone(),
        leading: leadership.leading.clone(),
        started: started.0.clone(),
    };
    let ctx = context(&client, &config, &caches, &metrics, events, signals);
    let triggers = Triggers {
        served: served.clone(),
        leading: leadership.leading.clone(),
        shutdown: shutdown.clone(),
        concurrency: config.reconcile_concurrency,
    };

    start_probes(&ctx, &config, &shutdown);
    let controllers = futures::future::join_all([
        intent_controller(&ctx, &mut caches, &triggers),
        binding_controller(&ctx, &mut caches, &triggers),
        cluster_binding_controller(&ctx, &mut caches, &triggers),
        policy_controller(&ctx, &mut caches, &triggers),
        cluster_policy_controller(&ctx, &mut caches, &triggers),
        exception_controller(&ctx, &mut caches, &triggers),
        cluster_exception_controller(&ctx, &mut caches, &triggers),
    ]);
    // Every replica serves the posture API, leader or not: it only reads the caches.
    let posture = match &config.posture {
        Some(posture_config) => {
            let kyverno = config.engines.contains(&Engine::Kyverno);
            let inputs = |watches: &mut posture::Watches| {
                watches.changes.extend(caches.posture_inputs(&served));
            };
            let started = start_posture(posture_config, &client, &ctx, kyverno, inputs, &shutdown);
            Some(started.await?)
        }
        None => None,
    };
    let watches = caches.drive(availability_driver, served, &shutdown);
    if let Some(server) = posture {
        tokio::spawn(server);
    }
    serve_probes(&config, &started, &watches.broken, &metrics, &shutdown).await?;

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

/// Starts the leader's enforcement probes, where configured.
fn start_probes(ctx: &Arc<Context>, config: &Config, shutdown: &CancellationToken) {
    if let (Some(probes), Some(probe_config)) = (&ctx.probes, &config.probes) {
        let prober = crate::probes::run(
            ctx.clone(),
            probes.clone(),
            probe_config.clone(),
            shutdown.clone(),
        );
        tokio::spawn(prober);
    }
}

/// Starts the health endpoints and the metrics endpoint, where configured. Each is its own
/// task: its graceful stop must not cut the controllers' in-flight reconciles.
async fn serve_probes(
    config: &Config,
    started: &Started,
    broken: &CancellationToken,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> Result<(), Error> {
    if let Some(addr) = config.health_addr {
        let ready = started.reached();
        let server = health::serve(addr, ready, broken.clone(), shutdown.clone()).await?;
        tokio::spawn(server);
    }
    if let Some(addr) = config.metrics_addr {
        tokio::spawn(metrics.clone().serve(addr, shutdown.clone()).await?);
    }
    Ok(())
}

/// The Kubernetes Events queue, its writer running.
fn start_events(client: &Client, config: &Config, metrics: &Metrics) -> Events {
    let (events, events_writer) = Events::start(
        Recorder::new(client.clone(), reporter(config)),
        metrics.events_dropped.clone(),
        metrics.events_queued.clone(),
    );
    tokio::spawn(events_writer);
    events
}

/// Who the operator's Events say reported them.
fn reporter(config: &Config) -> Reporter {
    Reporter {
        controller: config.reporter.clone(),
        instance: config.instance.clone(),
    }
}

/// The posture API: its computation started, its server ready to run. `inputs` adds the
/// caches' changes to what the computation watches.
async fn start_posture(
    posture_config: &posture::Config,
    client: &Client,
    ctx: &Arc<Context>,
    kyverno: bool,
    inputs: impl FnOnce(&mut posture::Watches),
    shutdown: &CancellationToken,
) -> Result<impl Future<Output = ()> + Send + 'static, Error> {
    let (workloads, mut watches) =
        posture::Workloads::watch(client, kyverno, posture_config.reports);
    inputs(&mut watches);
    // What the probes found, and when, is part of the posture.
    watches
        .changes
        .extend(ctx.probes.as_ref().map(|p| p.answers()));
    posture::start(
        posture_config,
        client,
        ctx.clone(),
        workloads,
        watches,
        shutdown.clone(),
    )
    .await
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
) -> Arc<Context> {
    Arc::new(Context {
        client: client.clone(),
        events,
        reporter: reporter(config),
        resync: config.resync,
        intents: caches.intents.store.clone(),
        bindings: caches.bindings.store.clone(),
        cluster_bindings: caches.cluster_bindings.store.clone(),
        policies: caches.policies.store.clone(),
        cluster_policies: caches.cluster_policies.store.clone(),
        policies_created: caches.policies.creations(),
        cluster_policies_created: caches.cluster_policies.creations(),
        namespaces: caches.namespaces.store.clone(),
        exceptions: crate::context::Exceptions {
            store: caches.exceptions.store.clone(),
            cluster_store: caches.cluster_exceptions.store.clone(),
            rules: nimbus_core::exceptions::Rules {
                max_duration: config.exception_max_duration,
                approval: config.exception_approval,
            },
        },
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
            kyverno_kinds: config.kyverno_kinds,
            preference: config.engine_preference.clone(),
            served: signals.served,
            facts: caches.facts.stores(
                &caches.namespaces.store,
                &caches.cluster_policies.store,
                &config.k8tls_namespace,
            ),
            k8tls_namespace: config.k8tls_namespace.clone(),
            k8tls_image: config.k8tls_image.clone(),
            sandbox_cluster_roles: config.sandbox_cluster_roles.clone(),
            cluster_networks: config.cluster_networks.clone(),
        },
        metrics: metrics.clone(),
        leading: signals.leading,
        started: signals.started,
        written: Default::default(),
        translating: Default::default(),
        failures: Default::default(),
        protected_namespaces: config.protected(),
        probes: config.probes.as_ref().map(|_| Default::default()),
    })
}
