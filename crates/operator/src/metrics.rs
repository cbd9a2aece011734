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
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
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

/// A SecurityIntentException, by namespace and name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExceptionLabels {
    pub exception_namespace: String,
    pub exception: String,
}

/// A posture verdict (`Protected`, `Partial`, `Unprotected`, `Audited`, `Excepted`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    pub verdict: &'static str,
}

/// What a posture computation recomputed: `all`, or only the `namespaces` where pods,
/// ReplicaSets or Jobs changed.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ComputeLabels {
    pub scope: &'static str,
}

/// A policy's `Ready` condition: `True`, `False`, or `Unknown` before its first status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadyLabels {
    pub ready: &'static str,
}

/// A probe of an engine's enforcement and what it found (`DeniedByEngine`,
/// `EnforcementNotLive`, `DeniedElsewhere`, `WebhookCallFailed`, `ProbeFailed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    pub engine: &'static str,
    pub outcome: &'static str,
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
    /// Workloads by posture verdict. Set by the posture computation, so only where the posture
    /// API runs (every replica computes it, leader or not).
    pub workloads: Family<VerdictLabels, Gauge>,
    /// NimbusPolicies and ClusterNimbusPolicies by their `Ready` condition, as cached. Set with
    /// [`Self::workloads`], so only where the posture API runs.
    pub policies: Family<ReadyLabels, Gauge>,
    /// How long each posture computation took, storing the result included, by what it
    /// recomputed.
    pub posture_compute: Family<ComputeLabels, Histogram>,
    /// When each SecurityIntentException expires (Unix seconds), as cached. Set with
    /// [`Self::workloads`], so only where the posture API runs.
    pub exception_expiry: Family<ExceptionLabels, Gauge>,
    pub time_to_protect: TimeToProtect,
    /// Dry-run probes sent by the leader, by engine and outcome.
    pub probes: Family<ProbeLabels, Counter>,
    /// (policy, intent) pairs whose last probe was admitted, by engine: enforcement written but
    /// not live. Set by the leader, which probes.
    pub not_live: Family<EngineLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut metrics = Self {
            registry: Arc::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 14))
            }),
            in_flight: Family::default(),
            pending_events: Family::default(),
            applied: Family::default(),
            pruned: Family::default(),
            events_dropped: Counter::default(),
            events_queued: Gauge::default(),
            leader: Gauge::default(),
            workloads: Family::default(),
            policies: Family::default(),
            posture_compute: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 16))
            }),
            exception_expiry: Family::default(),
            time_to_protect: TimeToProtect::new(),
            probes: Family::default(),
            not_live: Family::default(),
        };
        let mut registry = Registry::with_prefix("nimbus");
        metrics.register_operator(&mut registry);
        metrics.register_posture(&mut registry);
        register_build_info(&mut registry);
        metrics.registry = Arc::new(registry);
        metrics
    }
}

impl Metrics {
    /// The reconciles', the watches', the writes' and the lease's metrics. (Registering a
    /// clone: a metric and its clones share one value.)
    fn register_operator(&self, registry: &mut Registry) {
        registry.register("reconciles", "Reconciles run", self.reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconciles that failed (and were retried)",
            self.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile",
            self.reconcile_duration.clone(),
        );
        registry.register(
            "reconciles_in_flight",
            "Reconciles running now",
            self.in_flight.clone(),
        );
        registry.register(
            "watch_events_pending",
            "Watch events waiting to be scheduled for reconciliation",
            self.pending_events.clone(),
        );
        registry.register(
            "native_objects_applied",
            "Native objects created or updated by an engine",
            self.applied.clone(),
        );
        registry.register(
            "native_objects_pruned",
            "Native objects an engine deleted because no policy wants them any more",
            self.pruned.clone(),
        );
        registry.register(
            "events_dropped",
            "Kubernetes Events not written because too many were waiting",
            self.events_dropped.clone(),
        );
        registry.register(
            "events_queued",
            "Kubernetes Events waiting to be written",
            self.events_queued.clone(),
        );
        registry.register(
            "enforcement_probes",
            "Dry-run probes of engines' enforcement sent, by engine and outcome",
            self.probes.clone(),
        );
        registry.register(
            "enforcement_not_live",
            "Bound intents whose engine admitted a dry-run probe it should refuse, by engine (set by the leader)",
            self.not_live.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the lease (or runs without election)",
            self.leader.clone(),
        );
    }

    /// The metrics set where the posture API runs.
    fn register_posture(&self, registry: &mut Registry) {
        registry.register(
            "workloads",
            "Workloads by posture verdict (computed only where the posture API runs)",
            self.workloads.clone(),
        );
        registry.register(
            "policies",
            "NimbusPolicies and ClusterNimbusPolicies by Ready condition (computed only where the posture API runs)",
            self.policies.clone(),
        );
        registry.register(
            "posture_compute_seconds",
            "Time one posture computation took, from the caches to the served objects (only where the posture API runs)",
            self.posture_compute.clone(),
        );
        registry.register(
            "exception_expiry_timestamp_seconds",
            "When each SecurityIntentException expires, in Unix seconds (computed only where the posture API runs)",
            self.exception_expiry.clone(),
        );
        registry.register(
            "time_to_protect_seconds",
            "From the operator first seeing a binding's new generation to every native object of a policy that change rewrote being written",
            self.time_to_protect.histogram.clone(),
        );
    }
}

fn register_build_info(registry: &mut Registry) {
    let build = Family::<BuildLabels, Gauge>::default();
    build
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
        })
        .set(1);
    registry.register("build_info", "Build information", build);
}

/// Time to protect: how long after the operator first sees a binding's new generation every
/// native object of a policy that change rewrote has been written (created, updated or found
/// as generated; none failed or held by another owner). Only what this replica saw from start
/// to end is measured: a change that rewrote no policy (a label, a typo in a selector), a
/// policy rewritten for another reason once the change was in force or stalled (an intent or a
/// namespace changed, drift undone), or a leader change halfway are not. A change waiting for
/// its intent is still under way: the intent's arrival rewrites its policy within the
/// measurement. One observation per rewritten policy, so a cluster binding fanning out to many
/// namespaces counts once per namespace.
#[derive(Clone)]
pub struct TimeToProtect {
    histogram: Histogram,
    pending: Arc<Mutex<Pending>>,
}

#[derive(Default)]
struct Pending {
    /// Binding UID → its generation not yet reported in its status, and when it was first seen.
    changes: HashMap<String, (Option<i64>, Instant)>,
    /// Policy key → when the binding change it was rewritten for was first seen, and when it
    /// was rewritten.
    policies: HashMap<String, (Instant, Instant)>,
}

/// Entries whose end never comes (a binding deleted before it reported, a policy whose objects
/// never all get written) stay; past this many, all are forgotten at once (losing
/// measurements, never making one up).
const PENDING_BOUND: usize = 4096;

/// Makes room for `key` in `map` within [`PENDING_BOUND`].
fn make_room<V>(map: &mut HashMap<String, V>, key: &str) {
    if map.len() >= PENDING_BOUND && !map.contains_key(key) {
        map.clear();
    }
}

impl TimeToProtect {
    fn new() -> Self {
        // 10 ms to about 11 minutes.
        Self {
            histogram: Histogram::new(exponential_buckets(0.01, 2.0, 17)),
            pending: Arc::default(),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The binding with `uid` is being reconciled at `generation`; `ended`: its status already
    /// says that generation is in force or stalled. Returns when the change was first seen,
    /// while it has not ended.
    pub fn binding_seen(&self, uid: &str, generation: Option<i64>, ended: bool) -> Option<Instant> {
        let mut pending = self.pending();
        if ended {
            pending.changes.remove(uid);
            return None;
        }
        make_room(&mut pending.changes, uid);
        let entry = pending
            .changes
            .entry(uid.to_owned())
            .or_insert((generation, Instant::now()));
        if entry.0 != generation {
            *entry = (generation, Instant::now());
        }
        Some(entry.1)
    }

    /// The policy `key` was just rewritten for a binding change first seen at `since`.
    pub fn policy_written(&self, key: String, since: Instant) {
        let mut pending = self.pending();
        make_room(&mut pending.policies, &key);
        pending.policies.insert(key, (since, Instant::now()));
    }

    /// A reconcile of the policy `key` that `began` then wrote every native object of it.
    /// Only one begun after the rewrite ends the timing: one begun before read the policy as
    /// it was (and the rewrite's own event reconciles it again).
    pub fn protected(&self, key: &str, began: Instant) {
        let mut pending = self.pending();
        let Some(&(since, rewritten)) = pending.policies.get(key) else {
            return;
        };
        if began >= rewritten {
            pending.policies.remove(key);
            drop(pending);
            self.histogram.observe(since.elapsed().as_secs_f64());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(metrics: &Metrics) -> String {
        let text = metrics.encode();
        let count = text
            .lines()
            .find(|l| l.starts_with("nimbus_time_to_protect_seconds_count"))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_default();
        count.to_owned()
    }

    #[test]
    fn time_to_protect_spans_a_change_from_first_sight_to_its_policy_protected() {
        let metrics = Metrics::default();
        let ttp = &metrics.time_to_protect;
        // Seen at generation 2 (ended: 1), retried: still timed from the first sighting.
        let first = ttp.binding_seen("uid", Some(2), false).expect("pending");
        assert_eq!(ttp.binding_seen("uid", Some(2), false), Some(first));
        let before_rewrite = Instant::now();
        std::thread::sleep(Duration::from_millis(1));
        ttp.policy_written("NimbusPolicy/ns/b".into(), first);
        // A reconcile begun before the rewrite read the policy as it was: it does not end it.
        ttp.protected("NimbusPolicy/ns/b", before_rewrite);
        assert_eq!(observed(&metrics), "0");
        // Protected once: a second pass observes nothing more.
        ttp.protected("NimbusPolicy/ns/b", Instant::now());
        ttp.protected("NimbusPolicy/ns/b", Instant::now());
        assert_eq!(observed(&metrics), "1");
        // Once ended, a rewrite of the policy (an intent changed) is not the binding's.
        assert_eq!(ttp.binding_seen("uid", Some(2), true), None);
        // A newer generation starts anew.
        let third = ttp.binding_seen("uid", Some(3), false).expect("pending");
        assert!(third >= first);
        // A policy never rewritten for a change is never observed.
        ttp.protected("NimbusPolicy/ns/other", Instant::now());
        assert_eq!(observed(&metrics), "1");
    }
}
