//! One shared cache per kind: every controller and every reconcile reads from these, and the
//! watches that fill them.

use super::config::Config;
use crate::availability::{Availability, Served, when_served};
use crate::cache::{Cache, Driver, counted};
use crate::facts::FactCaches;
use crate::metrics::Metrics;
use crate::posture;
use crate::write::natives::{self, NativeObject};
use futures::stream::BoxStream;
use futures::{FutureExt, future};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client, Resource};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, ClusterSecurityIntentException,
    NimbusPolicy, SecurityIntent, SecurityIntentBinding, SecurityIntentException,
};
use nimbus_core::engines::NativeKind;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::CancellationToken;

/// One shared cache per kind: every controller and every reconcile reads from these.
pub(super) struct Caches {
    pub(super) intents: Cache<SecurityIntent>,
    pub(super) bindings: Cache<SecurityIntentBinding>,
    pub(super) cluster_bindings: Cache<ClusterSecurityIntentBinding>,
    pub(super) policies: Cache<NimbusPolicy>,
    pub(super) cluster_policies: Cache<ClusterNimbusPolicy>,
    pub(super) namespaces: Cache<Namespace>,
    pub(super) exceptions: Cache<SecurityIntentException>,
    pub(super) cluster_exceptions: Cache<ClusterSecurityIntentException>,
    /// The kinds the enabled engines write: our objects, with an index by controller.
    pub(super) natives: Vec<(&'static NativeKind, Cache<NativeObject>, natives::Owned)>,
    /// Cluster facts the enabled engines read.
    pub(super) facts: FactCaches,
}

impl Caches {
    pub(super) fn new(client: &Client, config: &Config, metrics: &Metrics) -> Self {
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
            exceptions: cluster_wide(client, metrics, without_managed_fields),
            cluster_exceptions: cluster_wide(client, metrics, without_managed_fields),
            natives: native_kinds
                .iter()
                .map(|(kind, namespace)| {
                    let (cache, owned) = natives::cache(client, kind, *namespace);
                    (*kind, counted(cache, metrics), owned)
                })
                .collect(),
            facts: FactCaches::new(
                client,
                &config.engines,
                &config.k8tls_namespace,
                config.virtual_patch_db.as_ref(),
                metrics,
            ),
        }
    }

    /// A signal per change of anything the posture reads from these caches.
    pub(super) fn posture_inputs(
        &mut self,
        served: &watch::Receiver<Served>,
    ) -> Vec<BoxStream<'static, ()>> {
        let mut inputs = vec![
            posture::signal(self.intents.subscribe()),
            posture::signal(self.bindings.subscribe()),
            posture::signal(self.cluster_bindings.subscribe()),
            posture::signal(self.policies.subscribe()),
            posture::signal(self.cluster_policies.subscribe()),
            posture::signal(self.namespaces.subscribe()),
            posture::signal(self.exceptions.subscribe()),
            posture::signal(self.cluster_exceptions.subscribe()),
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
    pub(super) fn started(
        &self,
        availability: &Availability,
    ) -> impl Future<Output = ()> + Send + 'static {
        let mut listed = vec![
            self.intents.synced().boxed(),
            self.bindings.synced().boxed(),
            self.cluster_bindings.synced().boxed(),
            self.policies.synced().boxed(),
            self.cluster_policies.synced().boxed(),
            self.namespaces.synced().boxed(),
            self.exceptions.synced().boxed(),
            self.cluster_exceptions.synced().boxed(),
        ];
        listed.extend(self.facts.listed());
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
    pub(super) fn drive(
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
            self.exceptions.driver(),
            self.cluster_exceptions.driver(),
            availability,
        ];
        drivers.extend(self.facts.drivers());
        // A native kind is watched once its CRD is served.
        for (kind, cache, _) in &mut self.natives {
            drivers.push(cache.driver_after(when_served(&served, kind)));
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

pub(super) struct Watches {
    pub(super) driver: Driver,
    /// Cancelled when a watch ended before shutdown.
    pub(super) broken: CancellationToken,
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
