//! The five controllers, fed from the shared caches: what triggers each, and the gate every
//! reconcile passes (started, leading) with its metrics.

use super::caches::Caches;
use crate::availability::Served;
use crate::cache::Driver;
use crate::context::Context;
use crate::controllers::{binding, cluster_binding, error_policy, exception, intent, policy};
use crate::error::Error;
use crate::exceptions;
use crate::facts;
use crate::metrics::ControllerLabels;
use crate::write::natives::NativeObject;
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt, future};
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::Controller;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntent,
    SecurityIntentBinding,
};
use nimbus_core::exceptions::BindingRef;
use nimbus_core::namespaces::ProtectedNamespaces;
use nimbus_core::plan;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Events that make a controller reconcile everything, or stop.
pub(super) struct Triggers {
    pub(super) served: watch::Receiver<Served>,
    pub(super) leading: watch::Receiver<bool>,
    pub(super) shutdown: CancellationToken,
    /// Reconciles each controller runs at once.
    pub(super) concurrency: u16,
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

pub(super) fn intent_controller(ctx: &Arc<Context>, caches: &mut Caches, t: &Triggers) -> Driver {
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

pub(super) fn binding_controller(ctx: &Arc<Context>, caches: &mut Caches, t: &Triggers) -> Driver {
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

pub(super) fn cluster_binding_controller(
    ctx: &Arc<Context>,
    caches: &mut Caches,
    t: &Triggers,
) -> Driver {
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

pub(super) fn policy_controller(ctx: &Arc<Context>, caches: &mut Caches, t: &Triggers) -> Driver {
    let (policies, for_cluster) = (ctx.policies.clone(), ctx.policies.clone());
    let controller = Controller::for_stream(caches.policies.subscribe(), ctx.policies.clone())
        // An exception to its binding comes, changes or goes.
        .watches_stream(caches.exceptions.subscribe(), move |e| {
            exceptions::policies_of(&policies, &e)
        })
        .watches_stream(caches.cluster_exceptions.subscribe(), move |e| {
            exceptions::policies_of(&for_cluster, &e)
        });
    let controller = translating(controller, ctx, caches, t, |obj| {
        owner::<NimbusPolicy, _>(&obj, obj.namespace().as_deref())
    });
    drain(controller.run(
        gated(
            "policy",
            ctx.policies.clone(),
            policy::reconcile::<NimbusPolicy>,
        ),
        error_policy,
        ctx.clone(),
    ))
}

pub(super) fn cluster_policy_controller(
    ctx: &Arc<Context>,
    caches: &mut Caches,
    t: &Triggers,
) -> Driver {
    let (policies, for_cluster) = (ctx.cluster_policies.clone(), ctx.cluster_policies.clone());
    let controller = Controller::for_stream(
        caches.cluster_policies.subscribe(),
        ctx.cluster_policies.clone(),
    )
    .watches_stream(caches.exceptions.subscribe(), move |e| {
        exceptions::cluster_policies_of(&policies, &e)
    })
    .watches_stream(caches.cluster_exceptions.subscribe(), move |e| {
        exceptions::cluster_policies_of(&for_cluster, &e)
    });
    let mut controller = translating(controller, ctx, caches, t, |obj| {
        owner::<ClusterNimbusPolicy, _>(&obj, None)
    });
    if let Some(moved) =
        facts::admin_priorities_moved(&ctx.engines.facts, &mut caches.cluster_policies)
    {
        controller = controller.reconcile_all_on(moved);
    }
    drain(controller.run(
        gated(
            "cluster_policy",
            ctx.cluster_policies.clone(),
            policy::reconcile::<ClusterNimbusPolicy>,
        ),
        error_policy,
        ctx.clone(),
    ))
}

pub(super) fn exception_controller(
    ctx: &Arc<Context>,
    caches: &mut Caches,
    t: &Triggers,
) -> Driver {
    let store = ctx.exceptions.store.clone();
    let controller = Controller::for_stream(caches.exceptions.subscribe(), store.clone());
    let controller = standing_on_bindings(controller, &store, caches, t).run(
        gated("exception", store, exception::reconcile),
        error_policy,
        ctx.clone(),
    );
    drain(controller)
}

pub(super) fn cluster_exception_controller(
    ctx: &Arc<Context>,
    caches: &mut Caches,
    t: &Triggers,
) -> Driver {
    let store = ctx.exceptions.cluster_store.clone();
    let controller = Controller::for_stream(caches.cluster_exceptions.subscribe(), store.clone());
    let controller = standing_on_bindings(controller, &store, caches, t).run(
        gated("cluster_exception", store, exception::reconcile_cluster),
        error_policy,
        ctx.clone(),
    );
    drain(controller)
}

/// An exception controller's triggers: where an exception stands depends on its binding and
/// the intents that binds.
fn standing_on_bindings<K>(
    controller: Controller<K>,
    store: &Store<K>,
    caches: &mut Caches,
    t: &Triggers,
) -> Controller<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    for<'a> &'a Arc<K>: Into<nimbus_core::exceptions::Exception<'a>>,
{
    let (by_binding, by_cluster_binding, by_intent) = (store.clone(), store.clone(), store.clone());
    controller
        .watches_stream(
            caches.bindings.subscribe(),
            move |b: SecurityIntentBinding| {
                exceptions::naming(
                    &by_binding,
                    &BindingRef::namespaced(&b.name_any(), &b.namespace().unwrap_or_default()),
                )
            },
        )
        .watches_stream(
            caches.cluster_bindings.subscribe(),
            move |b: ClusterSecurityIntentBinding| {
                exceptions::naming(&by_cluster_binding, &BindingRef::cluster(&b.name_any()))
            },
        )
        .watches_stream(caches.intents.subscribe(), move |_: SecurityIntent| {
            by_intent
                .state()
                .iter()
                .map(|e| ObjectRef::from_obj(&**e))
                .collect::<Vec<_>>()
        })
        .reconcile_all_on(t.leadership_gained())
        .graceful_shutdown_on(t.stopped())
        .with_config(t.controller_config())
}

/// A policy controller's triggers: a change to a native object reconciles the policy owning it
/// (`owner_of`), and a change to what translations read reconciles every policy.
fn translating<P>(
    mut controller: Controller<P>,
    ctx: &Arc<Context>,
    caches: &mut Caches,
    t: &Triggers,
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
        .reconcile_all_on(translation_inputs_changed(ctx, caches, t))
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
) -> BoxStream<'static, ()> {
    let mut streams = vec![t.availability_changed(), t.leadership_gained()];
    // A probe found an engine's enforcement live or not: statuses say so.
    streams.extend(ctx.probes.as_ref().map(|p| p.changes()));
    streams.extend(
        caches
            .facts
            .changes(&ctx.engines.facts, &mut caches.namespaces),
    );
    streams.extend(caches.natives.iter_mut().map(|(_, c, _)| c.relisted()));
    futures::stream::select_all(streams).boxed()
}

/// How soon an object in a namespace being deleted is looked at again.
const TERMINATING_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether `obj` is in a namespace being deleted: everything there is going, and nothing may
/// be created there, so reconciling it could only fail (and say so in statuses and Events).
fn in_terminating_namespace<K: Resource>(ctx: &Context, obj: &K) -> bool {
    obj.meta().namespace.as_ref().is_some_and(|ns| {
        ctx.namespaces
            .get(&ObjectRef::new(ns))
            .is_some_and(|n| n.metadata.deletion_timestamp.is_some())
    })
}

/// Runs `reconcile` once the operator has started (see [`Caches::started`]: until then a
/// reconcile would take "not listed yet" for "absent", and delete what is in force), and only
/// while this replica leads (a standby keeps its caches warm and is reconciled in full when it
/// takes over); records metrics about it.
/// Each reconcile runs under one span, `reconcile`, that carries the controller, the object
/// (`Kind/namespace/name`) and, once done, the outcome: whatever it logs says what it is about.
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
            // Being deleted (waiting for finalizers, or for its dependents in a foreground
            // deletion): nothing written to it or for it would last, a policy re-created for a
            // binding going would be deleted again, and a write racing the deletion finds the
            // object gone (a 404).
            if obj.meta().deletion_timestamp.is_some() {
                return Ok(Action::await_change());
            }
            // Looked at again later: the namespace cache may be behind (the namespace deleted
            // and created again), and no namespace event requeues a policy.
            if in_terminating_namespace(&ctx, &*obj) {
                return Ok(Action::requeue(TERMINATING_RECHECK));
            }
            let labels = ControllerLabels { controller };
            let in_flight = ctx.metrics.in_flight.get_or_create(&labels).clone();
            in_flight.inc();
            let started = Instant::now();
            let key = crate::controllers::object_key(&*obj);
            let span = tracing::info_span!(
                "reconcile",
                controller,
                object = %key,
                outcome = tracing::field::Empty
            );
            let result = reconcile(obj, ctx.clone()).instrument(span.clone()).await;
            span.record("outcome", tracing::field::debug(&result));
            tracing::debug!(parent: &span, "reconciled");
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
