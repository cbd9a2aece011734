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

/// A cache of one kind for lookups from reconciles, and the future that keeps it fed.
///
/// Controllers trigger from their own watches: kube's shared-stream subscribers do not see
/// deletions, which the controllers must react to.
fn cache<K>(api: Api<K>) -> (Store<K>, Driver)
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let driver = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .for_each(|event| {
            if let Err(error) = event {
                tracing::warn!(kind = %K::kind(&()), %error, "watch failed; retrying");
            }
            future::ready(())
        })
        .boxed();
    (store, driver)
}

/// Runs every controller until `shutdown` is cancelled.
pub async fn run(client: Client, config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let (intents, intents_cache) = cache::<SecurityIntent>(Api::all(client.clone()));
    let (bindings, bindings_cache) = cache::<SecurityIntentBinding>(Api::all(client.clone()));
    let (cluster_bindings, cluster_bindings_cache) =
        cache::<ClusterSecurityIntentBinding>(Api::all(client.clone()));
    let (policies, policies_cache) = cache::<NimbusPolicy>(Api::all(client.clone()));
    let (cluster_policies, cluster_policies_cache) =
        cache::<ClusterNimbusPolicy>(Api::all(client.clone()));
    let (namespaces, namespaces_cache) = cache::<Namespace>(Api::all(client.clone()));

    let reporter = Reporter {
        controller: config.reporter.clone(),
        instance: config.instance.clone(),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        resync: config.resync,
        intents,
        bindings,
        cluster_bindings,
        policies,
        cluster_policies,
        namespaces,
    });
    let stopped = || {
        let token = shutdown.clone();
        async move { token.cancelled().await }
    };

    let intent_controller = Controller::new(Api::<SecurityIntent>::all(client.clone()), wc())
        .graceful_shutdown_on(stopped())
        .run(intent::reconcile, error_policy, ctx.clone());

    let sib_index = ctx.bindings.clone();
    let binding_controller =
        Controller::new(Api::<SecurityIntentBinding>::all(client.clone()), wc())
            .owns(Api::<NimbusPolicy>::all(client.clone()), wc())
            .watches(
                Api::<SecurityIntent>::all(client.clone()),
                wc(),
                move |si: SecurityIntent| {
                    referencing(&sib_index, &si.name_any(), |b| &b.spec.intents)
                },
            )
            .graceful_shutdown_on(stopped())
            .run(binding::reconcile, error_policy, ctx.clone());

    let csib_by_intent = ctx.cluster_bindings.clone();
    let csib_by_namespace = ctx.cluster_bindings.clone();
    let cluster_binding_controller = Controller::new(
        Api::<ClusterSecurityIntentBinding>::all(client.clone()),
        wc(),
    )
    .owns(Api::<ClusterNimbusPolicy>::all(client.clone()), wc())
    // `owns` would look the cluster-scoped owner up inside the child's namespace.
    .watches(
        Api::<NimbusPolicy>::all(client.clone()),
        wc(),
        |np: NimbusPolicy| cluster_owner::<ClusterSecurityIntentBinding, _>(&np),
    )
    .watches(
        Api::<SecurityIntent>::all(client.clone()),
        wc(),
        move |si: SecurityIntent| referencing(&csib_by_intent, &si.name_any(), |b| &b.spec.intents),
    )
    .watches(
        Api::<Namespace>::all(client.clone()),
        wc(),
        move |ns: Namespace| selecting(&csib_by_namespace, &ns.name_any()),
    )
    .graceful_shutdown_on(stopped())
    .run(cluster_binding::reconcile, error_policy, ctx.clone());

    let policy_controller = Controller::new(Api::<NimbusPolicy>::all(client.clone()), wc())
        .graceful_shutdown_on(stopped())
        .run(policy::reconcile_namespaced, error_policy, ctx.clone());
    let cluster_policy_controller =
        Controller::new(Api::<ClusterNimbusPolicy>::all(client.clone()), wc())
            .graceful_shutdown_on(stopped())
            .run(policy::reconcile_cluster, error_policy, ctx.clone());

    let caches: Vec<Driver> = vec![
        intents_cache,
        bindings_cache,
        cluster_bindings_cache,
        policies_cache,
        cluster_policies_cache,
        namespaces_cache,
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
    let health = match config.health_addr {
        Some(addr) => health::serve(addr, ready, shutdown.clone()).await?,
        None => future::pending::<()>().boxed(),
    };

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
        _ = health => {}
    }
    tracing::info!("operator stopped");
    Ok(())
}

fn wc() -> watcher::Config {
    watcher::Config::default()
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
