//! Prometheus metrics (OpenMetrics text via prometheus-client), served on `/metrics`.

use crate::error::Error;
use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

/// A failed reconcile: its controller and what kind of failure ([`Error::kind`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub controller: &'static str,
    pub error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EngineLabels {
    pub engine: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// Every metric the operator exports. Cheap to clone (shared handles).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    pub reconciles: Family<ControllerLabels, Counter>,
    pub reconcile_errors: Family<FailureLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    pub in_flight: Family<ControllerLabels, Gauge>,
    /// Watch events received but not yet taken by the controllers (kube-runtime does not
    /// expose its own scheduler queue).
    pub pending_events: Family<KindLabels, Gauge>,
    pub applied: Family<EngineLabels, Counter>,
    pub pruned: Family<EngineLabels, Counter>,
    pub events_dropped: Counter,
    /// Kubernetes Events queued and not yet written.
    pub events_queued: Gauge,
    pub leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("nimbus");
        let reconciles = Family::<ControllerLabels, Counter>::default();
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        let reconcile_errors = Family::<FailureLabels, Counter>::default();
        registry.register(
            "reconcile_errors",
            "Reconciles that failed (and were retried)",
            reconcile_errors.clone(),
        );
        let reconcile_duration =
            Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 14))
            });
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile",
            reconcile_duration.clone(),
        );
        let in_flight = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "reconciles_in_flight",
            "Reconciles running now",
            in_flight.clone(),
        );
        let pending_events = Family::<KindLabels, Gauge>::default();
        registry.register(
            "watch_events_pending",
            "Watch events waiting to be scheduled for reconciliation",
            pending_events.clone(),
        );
        let applied = Family::<EngineLabels, Counter>::default();
        registry.register(
            "native_objects_applied",
            "Native objects created or updated by an engine",
            applied.clone(),
        );
        let pruned = Family::<EngineLabels, Counter>::default();
        registry.register(
            "native_objects_pruned",
            "Native objects an engine deleted because no policy wants them any more",
            pruned.clone(),
        );
        let events_dropped = Counter::default();
        registry.register(
            "events_dropped",
            "Kubernetes Events not written because too many were waiting",
            events_dropped.clone(),
        );
        let events_queued = Gauge::default();
        registry.register(
            "events_queued",
            "Kubernetes Events waiting to be written",
            events_queued.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the lease (or runs without election)",
            leader.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register("build_info", "Build information", build);
        Self {
            registry: Arc::new(registry),
            reconciles,
            reconcile_errors,
            reconcile_duration,
            in_flight,
            pending_events,
            applied,
            pruned,
            events_dropped,
            events_queued,
            leader,
        }
    }
}

impl Metrics {
    /// Counts a reconcile of `controller` that took `took` and failed with `failure`, if any.
    pub fn reconciled(&self, controller: &'static str, took: Duration, failure: Option<&Error>) {
        let labels = ControllerLabels { controller };
        self.reconciles.get_or_create(&labels).inc();
        if let Some(error) = failure {
            let error = error.kind();
            self.reconcile_errors
                .get_or_create(&FailureLabels { controller, error })
                .inc();
        }
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Binds now (so a taken port fails start-up) and returns the serving future.
    pub async fn serve(
        self,
        addr: SocketAddr,
        shutdown: CancellationToken,
    ) -> Result<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>, Error> {
        let app = Router::new().route(
            "/metrics",
            get(move || {
                let body = self.encode();
                async move {
                    (
                        [(
                            CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        body,
                    )
                }
            }),
        );
        crate::health::serve_router(addr, app, shutdown).await
    }
}
