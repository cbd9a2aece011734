//! Computes every posture object from the caches: the operator's own (policies, bindings,
//! native objects, engine availability), watches of pods (only what the posture reads of them),
//! metadata-only watches of ReplicaSets and Jobs, the Services and NetworkPolicies the preview
//! evaluates, and Kyverno's PolicyReports, which it reads. Debounced: a burst of changes costs
//! one computation.

use super::reports::OwnReports;
use super::watches::{Watches, namespaces_of, signal};
use super::{Postures, fleet, lock, previews};
use crate::availability::{self, Served};
use crate::cache::Cache;
use crate::context::Context;
use crate::metrics::ComputeLabels;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use nimbus_api::posture::{NamespacePosture, Reference, WorkloadPosture};
use nimbus_api::{BindingPreview, NimbusPolicyStatus};
use nimbus_core::engines::{
    CLUSTER_NETWORK_POLICY, MANAGED_BY, NativeKind, POLICY_REPORT, PolicyInput,
};
use nimbus_core::netpol::{ClusterNetworkPolicy, InvalidPolicy};
use nimbus_core::policy::{self, Claim};
use nimbus_core::posture::{self as core, PolicyCoverage};
use nimbus_core::preview;
use nimbus_core::reports::{self, DesiredReport, ReportFormat};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio_stream::wrappers::WatchStream;

mod caches;
mod coverage;
mod driver;
mod gauges;
mod pod_store;
mod pods;
use caches::{metadata_cache, strip_network_policy, strip_report, strip_service};
use coverage::{controlling_binding, policy_coverage};
pub use driver::run;
use gauges::export_counts;
use pod_store::PodStore;
use pods::PodFacts;

/// Changes arriving within this window are computed together.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Pods (metadata, IP and container ports), ReplicaSets and Jobs (metadata only), Services,
/// NetworkPolicies and Kyverno's PolicyReports.
pub struct Workloads {
    pods: PodStore,
    replica_sets: Store<PartialObjectMeta<ReplicaSet>>,
    jobs: Store<PartialObjectMeta<Job>>,
    services: Store<Service>,
    network_policies: Store<NetworkPolicy>,
    /// Kyverno's; `None` while the Kyverno engine is disabled.
    kyverno_reports: Option<KyvernoReports>,
    /// Ours, which the leader keeps in line with the posture.
    own_reports: OwnReports,
}

/// Kyverno's PolicyReports, watched while their CRD is served.
struct KyvernoReports {
    store: Store<DynamicObject>,
    served: watch::Receiver<Served>,
    listed: watch::Receiver<bool>,
}

impl KyvernoReports {
    /// Watches them while their CRD is `served`, with `watches`.
    fn watch(client: &Client, served: &watch::Receiver<Served>, watches: &mut Watches) -> Self {
        let resource = POLICY_REPORT.api_resource();
        // Kyverno labels its reports; ours (of the same kind) are left out.
        let config = watcher::Config::default().labels(&format!("{MANAGED_BY}=kyverno"));
        let mut cache: Cache<DynamicObject> =
            Cache::with(Api::all_with(client.clone(), &resource), resource, config)
                .strip(strip_report);
        let listed = cache.synced_flag();
        watches.on_list(&listed);
        watches.changes.push(signal(cache.subscribe()));
        watches
            .drivers
            .push(cache.driver_after(availability::when_served(served, &POLICY_REPORT)));
        Self {
            listed,
            store: cache.store,
            served: served.clone(),
        }
    }
}

impl Workloads {
    /// The watches, Kyverno's reports among them when `kyverno` (the engine is enabled), and
    /// ours of the kinds `reports` may write.
    pub fn watch(client: &Client, kyverno: bool, reports: ReportFormat) -> (Self, Watches) {
        let (pods, pod_watch) = PodStore::watch(Api::<PodFacts>::all(client.clone()));
        let mut replica_sets = metadata_cache::<ReplicaSet>(client);
        let mut jobs = metadata_cache::<Job>(client);
        let mut services = Cache::new(Api::<Service>::all(client.clone())).strip(strip_service);
        let mut network_policies =
            Cache::new(Api::<NetworkPolicy>::all(client.clone())).strip(strip_network_policy);
        let mut watches = Watches {
            changes: vec![
                signal(services.subscribe()),
                signal(network_policies.subscribe()),
            ],
            namespaced: vec![
                pod_watch.changed.boxed(),
                namespaces_of(replica_sets.subscribe()),
                namespaces_of(jobs.subscribe()),
            ],
            synced: futures::future::join5(
                pod_watch.synced,
                replica_sets.synced(),
                jobs.synced(),
                services.synced(),
                network_policies.synced(),
            )
            .map(drop)
            .boxed(),
            drivers: vec![
                pod_watch.driver,
                replica_sets.driver(),
                jobs.driver(),
                services.driver(),
                network_policies.driver(),
            ],
        };
        // The report kinds read or written, tracked as their CRDs come and go.
        let mut report_kinds: BTreeSet<&'static NativeKind> =
            reports.candidates().iter().copied().collect();
        if kyverno {
            report_kinds.insert(&POLICY_REPORT);
        }
        let (availability, tracker) = availability::track_kinds(client.clone(), report_kinds);
        let served = availability.served;
        watches.drivers.push(tracker);
        watches
            .changes
            .push(signal(WatchStream::from_changes(served.clone())));
        let kyverno_reports = kyverno.then(|| KyvernoReports::watch(client, &served, &mut watches));
        let own_reports = OwnReports::watch(client, reports, &served, &mut watches);
        let workloads = Self {
            pods,
            replica_sets: replica_sets.store,
            jobs: jobs.store,
            services: services.store,
            network_policies: network_policies.store,
            kyverno_reports,
            own_reports,
        };
        (workloads, watches)
    }

    /// Kyverno's reports in the core's terms, or why they cannot be read.
    fn kyverno_reports(&self) -> Result<Vec<preview::Report>, preview::Unreadable> {
        let reports = self
            .kyverno_reports
            .as_ref()
            .ok_or(preview::Unreadable::NotServed)?;
        if !reports.served.borrow().contains(&POLICY_REPORT) {
            return Err(preview::Unreadable::NotServed);
        }
        if !*reports.listed.borrow() {
            return Err(preview::Unreadable::NotListed);
        }
        Ok(reports
            .store
            .state()
            .iter()
            .filter_map(|r| preview::Report::from_json(&r.data))
            .collect())
    }

    /// The pods of `namespaces`, or every pod.
    fn pods(&self, namespaces: Option<&BTreeSet<String>>) -> Vec<core::Pod> {
        self.pods.pods(namespaces)
    }

    fn services(&self) -> Vec<preview::Service> {
        self.services
            .state()
            .iter()
            .map(|svc| {
                let spec = svc.spec.as_ref();
                preview::Service {
                    namespace: svc.namespace().unwrap_or_default(),
                    name: svc.name_any(),
                    selector: spec.and_then(|s| s.selector.clone()),
                    ports: spec
                        .iter()
                        .flat_map(|s| s.ports.iter().flatten())
                        .filter_map(|p| {
                            let port = u16::try_from(p.port).ok()?;
                            let target = match &p.target_port {
                                None => preview::Target::Number(port),
                                Some(IntOrString::Int(n)) => {
                                    preview::Target::Number(u16::try_from(*n).ok()?)
                                }
                                Some(IntOrString::String(name)) => {
                                    preview::Target::Name(name.clone())
                                }
                            };
                            Some(preview::ServicePort {
                                port,
                                target,
                                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                            })
                        })
                        .collect(),
                }
            })
            .collect()
    }

    fn owner_of(&self, namespace: &str, kind: &str, name: &str) -> Option<OwnerReference> {
        let controller =
            |owners: &[OwnerReference]| owners.iter().find(|o| o.controller == Some(true)).cloned();
        match kind {
            "ReplicaSet" => self
                .replica_sets
                .get(&ObjectRef::new(name).within(namespace))
                .and_then(|rs| controller(rs.owner_references())),
            "Job" => self
                .jobs
                .get(&ObjectRef::new(name).within(namespace))
                .and_then(|job| controller(job.owner_references())),
            _ => None,
        }
    }
}

/// Whether `namespace` is among those `scope` recomputes (`None`: all).
fn within(scope: Option<&BTreeSet<String>>, namespace: &str) -> bool {
    scope.is_none_or(|s| s.contains(namespace))
}

/// What changed since the last computation began.
#[derive(Default)]
struct Dirty {
    /// Something any posture may read.
    everything: bool,
    /// The namespaces whose pods, ReplicaSets or Jobs changed (unless `everything`).
    namespaces: BTreeSet<String>,
}

impl Dirty {
    /// Adds a change within `namespace`, or anywhere when `None`.
    fn add(&mut self, namespace: Option<String>) {
        match namespace {
            None => {
                self.everything = true;
                self.namespaces.clear();
            }
            Some(ns) if !self.everything => {
                self.namespaces.insert(ns);
            }
            Some(_) => {}
        }
    }
}

/// What a computation keeps for the next, which then recomputes only the namespaces whose
/// pods, ReplicaSets or Jobs changed, when nothing else did.
struct Memo {
    /// What each policy covers, in policy order.
    coverage: Vec<PolicyCoverage>,
    /// Whether an audited or shadowed rule is previewed: what it would block crosses
    /// namespaces, so then every change recomputes everything.
    previewing: bool,
    /// What the previewed rules would block.
    blocked: Result<preview::Found, InvalidPolicy>,
    /// Kyverno's reports, as last read.
    kyverno_reports: Result<Vec<preview::Report>, preview::Unreadable>,
    /// The policy reports of each namespace's workloads.
    reports: BTreeMap<String, Arc<Vec<DesiredReport>>>,
}

impl Memo {
    /// Replaces the policy reports of the namespaces `in_scope` with those of `workloads`
    /// (whose postures are `postures`, in the same order).
    fn keep_reports(
        &mut self,
        workloads: &[core::Workload],
        postures: &[WorkloadPosture],
        in_scope: impl Fn(&str) -> bool,
    ) {
        let mut by_namespace: BTreeMap<String, Vec<DesiredReport>> = BTreeMap::new();
        for (w, posture) in workloads.iter().zip(postures) {
            if let Some(report) = reports::workload_report(w, posture) {
                by_namespace
                    .entry(w.namespace.clone())
                    .or_default()
                    .push(report);
            }
        }
        self.reports.retain(|ns, _| !in_scope(ns));
        self.reports
            .extend(by_namespace.into_iter().map(|(ns, r)| (ns, Arc::new(r))));
    }

    /// What every posture reads: the policies, and the preview over `workloads` (all of them).
    fn new(ctx: &Context, sources: &Workloads, workloads: &[core::Workload]) -> Self {
        let engine_set = ctx.engine_set();
        let mut coverage: Vec<PolicyCoverage> = Vec::new();
        // The NetworkPolicies enforcing the audited and shadowed rules would write.
        let mut planned: Vec<Result<Vec<preview::Planned>, InvalidPolicy>> = Vec::new();
        // The exceptions in force now; one expiring writes its status, which computes again.
        let now = Timestamp::now();
        let excepted = |input: &mut PolicyInput| {
            let binding = input.binding.as_ref();
            input.exceptions = ctx
                .exceptions_in_force(binding, input.namespace.as_deref(), now)
                .0;
        };
        let mut cover =
            |input: &PolicyInput, status: Option<&NimbusPolicyStatus>, binding, claim| {
                // Judged by the plan the policy controller executes.
                let env = ctx.environment(input.rules);
                let reported = policy::reported(status);
                let plan = policy::plan(input, &env, engine_set.clone(), claim, reported);
                if claim != Claim::NotBound {
                    planned.push(preview::planned(input, &env, &plan.engines));
                }
                let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
                coverage.push(policy_coverage(ctx, input, &plan, binding, conditions));
            };
        for np in ctx.policies.state() {
            let uid = np.uid().unwrap_or_default();
            let binding = controlling_binding(np.owner_references(), np.namespace().as_deref());
            let mut input = PolicyInput::namespaced(&np, &uid);
            excepted(&mut input);
            cover(&input, np.status.as_ref(), binding, ctx.claim(&np));
        }
        for cnp in ctx.cluster_policies.state() {
            let uid = cnp.uid().unwrap_or_default();
            let binding = controlling_binding(cnp.owner_references(), None);
            let mut input = PolicyInput::cluster(&cnp, &uid);
            excepted(&mut input);
            cover(
                &input,
                cnp.status.as_ref(),
                binding,
                ctx.cluster_claim(&cnp),
            );
        }
        // The caches iterate in no fixed order; a posture must not change (and be reported as
        // changed) just because its intents came out in another order.
        coverage.sort_by(|a, b| a.policy.cmp(&b.policy));

        let planned = planned
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .map(|planned| planned.concat());
        let previewing = planned.as_ref().is_ok_and(|p| !p.is_empty());
        Self {
            coverage,
            previewing,
            blocked: planned.and_then(|planned| blocked(ctx, sources, workloads, &planned)),
            kyverno_reports: sources.kyverno_reports(),
            reports: BTreeMap::new(),
        }
    }
}

/// What promoting the audited and shadowed rules would block: `planned`, the network policies
/// it would write, added to those in force (the cluster's NetworkPolicies, the operator's
/// ClusterNetworkPolicies) over `workloads` (all of them).
fn blocked(
    ctx: &Context,
    sources: &Workloads,
    workloads: &[core::Workload],
    planned: &[preview::Planned],
) -> Result<preview::Found, InvalidPolicy> {
    let namespace_labels: BTreeMap<String, BTreeMap<String, String>> = ctx
        .namespaces
        .state()
        .iter()
        .map(|ns| (ns.name_any(), ns.labels().clone()))
        .collect();
    let network_policies = sources.network_policies.state();
    let in_force: Vec<&NetworkPolicy> = network_policies.iter().map(AsRef::as_ref).collect();
    // The operator's own ClusterNetworkPolicies (it watches no others).
    let cluster_policies: Vec<ClusterNetworkPolicy> = (ctx.natives)
        .all_of(&CLUSTER_NETWORK_POLICY)
        .iter()
        .filter_map(|o| o.parse().ok())
        .collect();
    let cluster_in_force: Vec<&ClusterNetworkPolicy> = cluster_policies.iter().collect();
    let network = preview::Network {
        workloads,
        namespaces: &namespace_labels,
        services: &sources.services(),
        in_force: &in_force,
        cluster_in_force: &cluster_in_force,
    };
    preview::blocked(&network, planned)
}

/// The postures of the namespaces a computation recomputed.
struct Computed {
    /// Those namespaces; `None` for all.
    scope: Option<BTreeSet<String>>,
    workloads: Vec<WorkloadPosture>,
    namespaces: Vec<NamespacePosture>,
}

/// What the leader writes of a computation.
struct Writes {
    /// Each binding's `status.preview`.
    previews: BTreeMap<Reference, BindingPreview>,
    /// The policy reports of each namespace's workloads an intent selects.
    reports: BTreeMap<String, Arc<Vec<DesiredReport>>>,
    /// What Open Cluster Management delivered, and its compliance.
    compliance: Vec<fleet::Delivered>,
}

/// Recomputes what `dirty` says changed, from `memo` (the previous computation's) when it can.
fn compute(
    ctx: &Context,
    sources: &Workloads,
    memo: Option<Memo>,
    dirty: Dirty,
) -> (Memo, Computed) {
    let (memo, scope) = match memo {
        Some(memo) if !dirty.everything && !memo.previewing => (Some(memo), Some(dirty.namespaces)),
        _ => (None, None),
    };
    let in_scope = |ns: &str| within(scope.as_ref(), ns);
    let workloads = core::workloads(sources.pods(scope.as_ref()), |ns, kind, name| {
        sources.owner_of(ns, kind, name)
    });
    let mut memo = memo.unwrap_or_else(|| Memo::new(ctx, sources, &workloads));
    let reported = preview::reported(&workloads, &memo.kyverno_reports);
    let namespaces: Vec<_> = ctx
        .namespaces
        .state()
        .into_iter()
        .filter(|ns| in_scope(ns.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    let applying = core::applying_by_namespace(
        &memo.coverage,
        namespaces
            .iter()
            .filter_map(|ns| ns.metadata.name.as_deref())
            .chain(workloads.iter().map(|w| w.namespace.as_str())),
    );
    let applying_in = |ns: &str| applying.get(ns).into_iter().flatten().copied();
    let workload_postures: Vec<_> = workloads
        .iter()
        .map(|w| {
            let mut posture = core::workload_posture(w, applying_in(&w.namespace));
            preview::attach(&mut posture, &memo.blocked, &reported);
            preview::running_violations(&mut posture, &reported);
            posture
        })
        .collect();
    let mut by_namespace: BTreeMap<&str, Vec<&WorkloadPosture>> = BTreeMap::new();
    for posture in &workload_postures {
        if let Some(ns) = posture.metadata.namespace.as_deref() {
            by_namespace.entry(ns).or_default().push(posture);
        }
    }
    let namespace_postures = namespaces
        .iter()
        .map(|ns| {
            let name = ns.name_any();
            let workloads = by_namespace.get(name.as_str()).cloned().unwrap_or_default();
            core::namespace_posture(
                &name,
                ns.metadata.creation_timestamp.clone(),
                &workloads,
                applying_in(&name),
            )
        })
        .collect();
    memo.keep_reports(&workloads, &workload_postures, in_scope);
    let computed = Computed {
        workloads: workload_postures,
        namespaces: namespace_postures,
        scope,
    };
    (memo, computed)
}

/// Stores what `computed` recomputed and exports the counts; what the leader is to write.
fn store(ctx: &Context, postures: &Postures, memo: &Memo, computed: Computed) -> Writes {
    let in_scope = |ns: &str| within(computed.scope.as_ref(), ns);
    postures
        .workloads
        .replace_within(|(ns, _)| in_scope(ns), computed.workloads);
    postures
        .namespaces
        .replace_within(|(_, name)| in_scope(name), computed.namespaces);
    let (_, workloads) = postures.workloads.list();
    let workloads = workloads.iter().map(|w| &*w.object);
    export_counts(ctx, workloads.clone());
    let previews = preview::binding_previews(&memo.coverage, workloads.clone());
    Writes {
        compliance: fleet::verdicts(ctx, workloads, &previews),
        previews,
        reports: memo.reports.clone(),
    }
}
