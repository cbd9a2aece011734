//! Writes the posture as policy reports ([`nimbus_core::reports`]): the leader, after each
//! computation, applies only the reports whose results changed, and deletes ours that no
//! workload calls for any more (or that are of a kind no longer written). Every replica watches
//! our own reports, keeping of each only digests of its results, so the leader compares with
//! what is stored without reading it, and compares again only the namespaces whose desired or
//! stored reports changed.

use super::watches::{Watches, namespaces_of};
use super::writes::{all_succeed, lock};
use crate::availability::{Served, when_served};
use crate::cache::Cache;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use nimbus_core::engines::{MANAGED_BY, NativeKind};
use nimbus_core::reports::{self, DesiredReport, ReportFormat};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::{Notify, watch};

/// Owns the reports it writes, and nothing else.
pub const FIELD_MANAGER: &str = "nimbus-reports";

/// Our reports of one kind, watched once the kind is served.
struct Kind {
    kind: &'static NativeKind,
    store: Store<DynamicObject>,
    listed: watch::Receiver<bool>,
}

impl Kind {
    /// Applies the `desired` reports that differ from the stored ones (in the namespaces
    /// whose reports changed since `confirmed`); notes every desired one in `wanted`.
    fn applies<'a>(
        &self,
        api: impl Fn(&str) -> Api<DynamicObject>,
        desired: &'a BTreeMap<String, Arc<Vec<DesiredReport>>>,
        confirmed: &BTreeMap<String, Arc<Vec<DesiredReport>>>,
        wanted: &mut BTreeSet<(&'a str, &'a str)>,
    ) -> Vec<BoxFuture<'a, bool>> {
        let resource = self.kind.api_resource();
        let mut requests: Vec<BoxFuture<'a, bool>> = Vec::new();
        for (ns, reports) in desired {
            let unchanged = confirmed.get(ns).is_some_and(|c| Arc::ptr_eq(c, reports));
            for report in reports.iter() {
                wanted.insert((report.namespace.as_str(), report.name.as_str()));
                if unchanged {
                    continue;
                }
                let key =
                    ObjectRef::new_with(&report.name, resource.clone()).within(&report.namespace);
                let existing = self
                    .store
                    .get(&key)
                    .and_then(|o| serde_json::to_value(&*o).ok());
                if existing
                    .as_ref()
                    .is_some_and(|e| reports::up_to_date(report, e))
                {
                    continue;
                }
                let body = reports::report_object(report, self.kind, existing.as_ref(), now());
                let api = api(&report.namespace);
                requests.push(Box::pin(async move {
                    let params = PatchParams::apply(FIELD_MANAGER).force();
                    let written = api.patch(&report.name, &params, &Patch::Apply(body)).await;
                    written
                        .inspect_err(|error| tracing::warn!(report = %report.name, namespace = %report.namespace, %error, "writing a policy report"))
                        .is_ok()
                }));
            }
        }
        requests
    }

    /// Deletes the stored reports not `wanted`.
    fn deletes<'a>(
        &self,
        api: impl Fn(&str) -> Api<DynamicObject>,
        wanted: &BTreeSet<(&str, &str)>,
    ) -> Vec<BoxFuture<'a, bool>> {
        let mut requests: Vec<BoxFuture<'a, bool>> = Vec::new();
        for stale in self.store.state() {
            let ns = stale.namespace().unwrap_or_default();
            let name = stale.name_any();
            if wanted.contains(&(ns.as_str(), name.as_str())) {
                continue;
            }
            let api = api(&ns);
            requests.push(Box::pin(async move {
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => true,
                    Err(kube::Error::Api(e)) if e.code == 404 => true,
                    Err(error) => {
                        tracing::warn!(report = %name, namespace = %ns, %error, "deleting a policy report");
                        false
                    }
                }
            }));
        }
        requests
    }
}

/// The reports this operator has written, and which kind it writes.
pub struct OwnReports {
    format: ReportFormat,
    served: watch::Receiver<Served>,
    kinds: Vec<Kind>,
    /// The namespaces where one of our reports changed since the last write.
    changed: Arc<Mutex<BTreeSet<String>>>,
    /// Told of each such change.
    notify: Arc<Notify>,
    /// Each namespace's desired reports as the last write left them in place: while they are
    /// the same (`Arc`) and none of the namespace's reports changed, they need no comparison.
    confirmed: Mutex<BTreeMap<String, Arc<Vec<DesiredReport>>>>,
}

impl OwnReports {
    /// Watches our reports of each kind `format` may write, once served (`served` tracks the
    /// candidates' CRDs).
    pub fn watch(
        client: &Client,
        format: ReportFormat,
        served: &watch::Receiver<Served>,
        watches: &mut Watches,
    ) -> Self {
        let changed = Arc::new(Mutex::new(BTreeSet::new()));
        let notify = Arc::new(Notify::new());
        let kinds = format
            .candidates()
            .iter()
            .map(|&kind| {
                let resource = kind.api_resource();
                let config = watcher::Config::default()
                    .labels(&format!("{MANAGED_BY}={}", reports::MANAGER));
                let mut cache: Cache<DynamicObject> =
                    Cache::with(Api::all_with(client.clone(), &resource), resource, config)
                        .strip(condense);
                // Once listed, the kind's reports can be written.
                let listed = cache.synced_flag();
                watches.on_list(&listed);
                // A change of ours is the writer's alone to look at: the posture reads none.
                let (changed, notify) = (changed.clone(), notify.clone());
                watches.drivers.push(
                    namespaces_of(cache.subscribe())
                        .for_each(move |ns| {
                            lock(&changed).insert(ns);
                            notify.notify_one();
                            futures::future::ready(())
                        })
                        .boxed(),
                );
                watches
                    .drivers
                    .push(cache.driver_after(when_served(served, kind)));
                Kind {
                    kind,
                    listed,
                    store: cache.store,
                }
            })
            .collect();
        Self {
            format,
            served: served.clone(),
            kinds,
            changed,
            notify,
            confirmed: Mutex::default(),
        }
    }

    /// Resolves when one of our reports has changed since the last write.
    pub async fn changed(&self) {
        self.notify.notified().await;
    }

    /// Makes the stored reports `desired` (each namespace's); returns whether every write
    /// succeeded (a failed one is retried at the next computation). Kinds whose reports are
    /// not listed yet are left for the computation their listing triggers.
    pub async fn write(
        &self,
        client: &Client,
        desired: &BTreeMap<String, Arc<Vec<DesiredReport>>>,
    ) -> bool {
        let mut confirmed = std::mem::take(&mut *lock(&self.confirmed));
        for ns in std::mem::take(&mut *lock(&self.changed)) {
            confirmed.remove(&ns);
        }
        let served = self.served.borrow().clone();
        let writing = self.format.kind(|k| served.contains(k));
        let mut requests: Vec<BoxFuture<'_, bool>> = Vec::new();
        for kind in &self.kinds {
            if !served.contains(kind.kind) || !*kind.listed.borrow() {
                continue;
            }
            let resource = kind.kind.api_resource();
            let api =
                |ns: &str| Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource);
            let mut wanted = BTreeSet::new();
            if writing == Some(kind.kind) {
                requests.extend(kind.applies(api, desired, &confirmed, &mut wanted));
            }
            requests.extend(kind.deletes(api, &wanted));
        }
        let written = all_succeed(requests).await;
        if written {
            *lock(&self.confirmed) = desired.clone();
        }
        written
    }
}

/// Keeps of one of our reports what the writer compares (`reports::condense`): its name and
/// namespace, owners, scope and each result's digest and timestamp.
fn condense(report: &mut DynamicObject) {
    let whole = serde_json::to_value(&*report).unwrap_or_default();
    report.data = reports::condense(&whole);
    report.metadata = ObjectMeta {
        name: report.metadata.name.take(),
        namespace: report.metadata.namespace.take(),
        ..ObjectMeta::default()
    };
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
