//! Writes the posture as policy reports ([`nimbus_core::reports`]): the leader, after each
//! computation, applies only the reports whose results changed, and deletes ours that no
//! workload calls for any more (or that are of a kind no longer written). Every replica watches
//! our own reports, so the leader compares with what is stored without reading it.

use super::all_succeed;
use super::compute::{Watches, signal};
use crate::availability::{Served, when_served};
use crate::cache::Cache;
use futures::future::BoxFuture;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use nimbus_core::engines::{MANAGED_BY, NativeKind};
use nimbus_core::reports::{self, DesiredReport, ReportFormat};
use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;

/// Owns the reports it writes, and nothing else.
pub const FIELD_MANAGER: &str = "nimbus-reports";

/// Our reports of one kind, watched once the kind is served.
struct Kind {
    kind: &'static NativeKind,
    store: Store<DynamicObject>,
    listed: watch::Receiver<bool>,
}

/// The reports this operator has written, and which kind it writes.
pub struct OwnReports {
    format: ReportFormat,
    served: watch::Receiver<Served>,
    kinds: Vec<Kind>,
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
        let kinds = format
            .candidates()
            .iter()
            .map(|&kind| {
                let resource = kind.api_resource();
                let config = watcher::Config::default()
                    .labels(&format!("{MANAGED_BY}={}", reports::MANAGER));
                let mut cache: Cache<DynamicObject> =
                    Cache::with(Api::all_with(client.clone(), &resource), resource, config)
                        .strip(|r| r.metadata.managed_fields = None);
                // Listing none is a change too: the kind's reports can then be written.
                let listed = cache.synced_flag();
                watches.changes.push(signal(cache.subscribe()));
                watches
                    .changes
                    .push(signal(WatchStream::from_changes(listed.clone())));
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
        }
    }

    /// Makes the stored reports `desired`; returns whether every write succeeded (a failed
    /// one is retried at the next computation). Kinds whose reports are not listed yet are
    /// left for the computation their listing triggers.
    pub async fn write<'d>(
        &self,
        client: &Client,
        desired: impl Iterator<Item = &'d DesiredReport> + Clone,
    ) -> bool {
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
                for report in desired.clone() {
                    wanted.insert((report.namespace.as_str(), report.name.as_str()));
                    let key = ObjectRef::new_with(&report.name, resource.clone())
                        .within(&report.namespace);
                    let existing = kind
                        .store
                        .get(&key)
                        .and_then(|o| serde_json::to_value(&*o).ok());
                    if existing
                        .as_ref()
                        .is_some_and(|e| reports::up_to_date(report, e))
                    {
                        continue;
                    }
                    let body = reports::report_object(report, kind.kind, existing.as_ref(), now());
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
            for stale in kind.store.state() {
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
        }
        all_succeed(requests).await
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
