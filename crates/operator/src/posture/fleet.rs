//! Reports the compliance of the SecurityIntents and bindings Open Cluster Management
//! delivered, as Events on the replicated Policy that delivered each (see
//! [`nimbus_core::fleet`]). The verdicts are computed with the posture, which knows what every
//! selected workload has in force; the leader reports a verdict once it has held for
//! [`fleet::SETTLE`], and nothing while the Policy's status agrees: the delivering Policies are
//! watched, so what the hub was last told (by us, or by the framework addon's errors about a
//! template) is known without a request.

use super::signal;
use crate::cache::Cache;
use crate::context::Context;
use crate::error::Error;
use futures::StreamExt;
use futures::stream::{BoxStream, SelectAll};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use nimbus_api::BindingPreview;
use nimbus_api::posture::{Reference, WorkloadPosture};
use nimbus_core::fleet::{self, Compliance, Delivery, HubWord, Observed, Reporting, Step, Verdict};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::WatchStream;

/// The wait before retrying a failed read of a Policy or write of an Event.
const RETRY: Duration = Duration::from_secs(5);

/// An object OCM delivered, and its verdict now (`None`: not known yet).
#[derive(Clone, Debug)]
pub struct Delivered {
    pub template: Reference,
    pub uid: String,
    pub delivery: Delivery,
    pub verdict: Option<Verdict>,
}

/// What identifies one template's reports: the object (by UID: a new object starts afresh)
/// and the Policy that delivered it.
type Key = (String, String, String);

impl Delivered {
    fn key(&self) -> Key {
        (
            self.uid.clone(),
            self.delivery.namespace.clone(),
            self.delivery.name.clone(),
        )
    }
}

/// The SecurityIntents and bindings OCM delivered, with their verdicts from the caches and
/// `postures` and `previews` (the computation's). Costs nothing beyond a look at their labels
/// when OCM delivered none.
pub fn verdicts<'p>(
    ctx: &Context,
    postures: impl IntoIterator<Item = &'p WorkloadPosture>,
    previews: &BTreeMap<Reference, BindingPreview>,
) -> Vec<Delivered> {
    let mut delivered = Vec::new();
    for si in ctx.intents.state() {
        let Some(delivery) = fleet::delivery(&si.metadata) else {
            continue;
        };
        let template = reference(&*si);
        let conditions = si.status.as_ref().map(|s| s.conditions.as_slice());
        let observed = observed(&si.metadata, conditions, None);
        let verdict = fleet::intent_verdict(&template, &si.spec.intent.id, observed);
        delivered.push(Delivered {
            template,
            uid: si.uid().unwrap_or_default(),
            delivery,
            verdict,
        });
    }
    let (namespaced, cluster) = (ctx.bindings.state(), ctx.cluster_bindings.state());
    let mut bindings: Vec<Bound> = Vec::new();
    for sib in &namespaced {
        let status = sib.status.as_ref();
        bindings.extend(Bound::of(
            &**sib,
            status.map(|s| s.conditions.as_slice()),
            status.and_then(|s| s.mode.as_deref()),
        ));
    }
    for csib in &cluster {
        let status = csib.status.as_ref();
        bindings.extend(Bound::of(
            &**csib,
            status.map(|s| s.conditions.as_slice()),
            status.and_then(|s| s.mode.as_deref()),
        ));
    }
    if bindings.is_empty() {
        return delivered;
    }
    let references: BTreeSet<&Reference> = bindings.iter().map(|b| &b.template).collect();
    let selected = fleet::by_binding(postures, &references);
    for bound in &mut bindings {
        bound.observed.preview = previews.get(&bound.template);
        let selected = (selected.get(&bound.template))
            .map(Vec::as_slice)
            .unwrap_or_default();
        delivered.push(Delivered {
            template: bound.template.clone(),
            uid: bound.meta.uid.clone().unwrap_or_default(),
            delivery: bound.delivery.clone(),
            verdict: fleet::binding_verdict(&bound.template, bound.observed, selected),
        });
    }
    delivered
}

/// A binding OCM delivered, as its verdict reads it.
struct Bound<'a> {
    template: Reference,
    meta: &'a ObjectMeta,
    observed: Observed<'a>,
    delivery: Delivery,
}

impl<'a> Bound<'a> {
    fn of<K: Resource<DynamicType = ()>>(
        binding: &'a K,
        conditions: Option<&'a [nimbus_api::Condition]>,
        mode: Option<&'a str>,
    ) -> Option<Self> {
        let meta = binding.meta();
        Some(Self {
            template: reference(binding),
            meta,
            observed: observed(meta, conditions, mode),
            delivery: fleet::delivery(meta)?,
        })
    }
}

fn reference<K: Resource<DynamicType = ()>>(obj: &K) -> Reference {
    Reference {
        kind: K::kind(&()).into_owned(),
        namespace: obj.namespace(),
        name: obj.name_any(),
    }
}

fn observed<'a>(
    meta: &ObjectMeta,
    conditions: Option<&'a [nimbus_api::Condition]>,
    mode: Option<&'a str>,
) -> Observed<'a> {
    Observed {
        generation: meta.generation,
        conditions: conditions.unwrap_or_default(),
        mode,
        preview: None,
    }
}

/// While leading, reports each computation's verdicts (`delivered` of what `computed` yields,
/// the latest one when several arrived meanwhile), and looks again when a delivering Policy's
/// status changes, a new verdict has held long enough or a failed request is due again.
pub async fn report<W>(
    ctx: &Context,
    mut computed: watch::Receiver<Option<Arc<W>>>,
    delivered: impl Fn(&W) -> &[Delivered],
) {
    let mut reporting: BTreeMap<Key, Reporting> = BTreeMap::new();
    let mut policies = Policies::new(ctx);
    let mut wake: Option<Instant> = None;
    loop {
        let due = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = computed.changed() => if changed.is_err() { return },
            Some(()) = policies.changes.next() => {}
            () = due => {}
        }
        wake = None;
        let Some(writes) = computed.borrow_and_update().clone() else {
            continue;
        };
        if !*ctx.leading.borrow() {
            // A new leader starts from what the Policies' statuses say, whoever reported it.
            reporting.clear();
            continue;
        }
        wake = report_once(ctx, delivered(&writes), &mut policies, &mut reporting).await;
    }
}

/// Reports what is due of `delivered`; when to look again.
async fn report_once(
    ctx: &Context,
    delivered: &[Delivered],
    policies: &mut Policies,
    reporting: &mut BTreeMap<Key, Reporting>,
) -> Option<Instant> {
    let keys: BTreeSet<Key> = delivered.iter().map(Delivered::key).collect();
    reporting.retain(|key, _| keys.contains(key));
    let mut wake: Option<Instant> = None;
    let mut at = |t: Instant| wake = Some(wake.map_or(t, |w| w.min(t)));
    for d in delivered {
        // Not listed yet (its listing looks again), or no such Policy: nothing to report on.
        let Some(Some(policy)) = policies.get(&d.delivery) else {
            continue;
        };
        let Some(policy_uid) = policy.uid() else {
            continue;
        };
        let hub = HubWord::of(&policy.data["status"], &d.template.name);
        let desired = d.verdict.as_ref().map(Verdict::event_message);
        let reporting = reporting.entry(d.key()).or_default();
        match reporting.step(&hub, desired.as_deref(), Instant::now(), fleet::SETTLE) {
            Step::Report(message) => {
                let compliance = d.verdict.as_ref().map(|v| v.compliance);
                match emit(ctx, d, &policy_uid, compliance, &message).await {
                    Ok(event) => reporting.reported(message, event, Instant::now()),
                    Err(error) => {
                        tracing::warn!(template = ?d.template, policy = ?d.delivery, %error, "reporting compliance");
                        at(Instant::now() + RETRY);
                    }
                }
            }
            Step::At(due) => at(due),
            Step::Nothing => {}
        }
    }
    wake
}

/// The delivering Policies, watched in each cluster namespace from the first template
/// delivered there (so OCM serves the kind): their statuses say what was reported. The
/// watches end with the reporting.
struct Policies {
    client: kube::Client,
    resource: ApiResource,
    watched: BTreeMap<String, (Store<DynamicObject>, watch::Receiver<bool>)>,
    /// One item per change of a watched Policy, and per listing.
    changes: SelectAll<BoxStream<'static, ()>>,
    drivers: Vec<JoinHandle<()>>,
}

impl Policies {
    fn new(ctx: &Context) -> Self {
        let gvk = GroupVersionKind::gvk(
            fleet::POLICY_GROUP,
            fleet::POLICY_VERSION,
            fleet::POLICY_KIND,
        );
        Self {
            client: ctx.client.clone(),
            resource: ApiResource::from_gvk(&gvk),
            watched: BTreeMap::new(),
            changes: SelectAll::new(),
            drivers: Vec::new(),
        }
    }

    /// The Policy that made `delivery`: `None` while its namespace's Policies are not listed
    /// yet (watched from now on), `Some(None)` when there is no such Policy.
    fn get(&mut self, delivery: &Delivery) -> Option<Option<Arc<DynamicObject>>> {
        let namespace = &delivery.namespace;
        if !self.watched.contains_key(namespace) {
            let api = Api::namespaced_with(self.client.clone(), namespace, &self.resource);
            let mut cache: Cache<DynamicObject> =
                Cache::with(api, self.resource.clone(), watcher::Config::default())
                    .strip(|policy| policy.metadata.managed_fields = None);
            let listed = cache.synced_flag();
            self.changes.push(signal(cache.subscribe()));
            (self.changes).push(signal(WatchStream::from_changes(listed.clone())));
            self.drivers.push(tokio::spawn(cache.driver()));
            self.watched
                .insert(namespace.clone(), (cache.store, listed));
        }
        let (store, listed) = &self.watched[namespace];
        if !*listed.borrow() {
            return None;
        }
        let reference =
            ObjectRef::new_with(&delivery.name, self.resource.clone()).within(namespace);
        Some(store.get(&reference))
    }
}

impl Drop for Policies {
    fn drop(&mut self) {
        for driver in &self.drivers {
            driver.abort();
        }
    }
}

/// Creates the compliance Event on the Policy, as OCM's controllers write theirs: named
/// `<policy>.<nanoseconds in hex>` (the status sync orders the history by it), about the
/// Policy and related to the template.
async fn emit(
    ctx: &Context,
    d: &Delivered,
    policy_uid: &str,
    compliance: Option<Compliance>,
    message: &str,
) -> Result<String, Error> {
    let now = Timestamp::now();
    let name = format!("{}.{:x}", d.delivery.name, now.as_nanosecond());
    let namespace = &d.delivery.namespace;
    let controller = ctx.reporter.controller.clone();
    let instance = ctx.reporter.instance.clone();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some(fleet::POLICY_API_VERSION.to_owned()),
            kind: Some(fleet::POLICY_KIND.to_owned()),
            name: Some(d.delivery.name.clone()),
            namespace: Some(namespace.clone()),
            uid: Some(policy_uid.to_owned()),
            ..Default::default()
        },
        related: Some(ObjectReference {
            api_version: Some(nimbus_api::SecurityIntent::api_version(&()).into_owned()),
            kind: Some(d.template.kind.clone()),
            name: Some(d.template.name.clone()),
            namespace: d.template.namespace.clone(),
            uid: Some(d.uid.clone()),
            ..Default::default()
        }),
        reason: Some(fleet::event_reason(&d.template)),
        message: Some(message.to_owned()),
        type_: Some(
            match compliance {
                Some(Compliance::Compliant) => "Normal",
                _ => "Warning",
            }
            .to_owned(),
        ),
        action: Some(fleet::EVENT_ACTION.to_owned()),
        source: Some(EventSource {
            component: Some(controller.clone()),
            host: instance.clone(),
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        reporting_component: Some(controller.clone()),
        reporting_instance: Some(instance.unwrap_or(controller)),
        ..Default::default()
    };
    let api: Api<Event> = Api::namespaced(ctx.client.clone(), namespace);
    api.create(&PostParams::default(), &event)
        .await
        .map_err(|source| Error::Kube {
            action: "creating a compliance Event on",
            object: format!("Policy {namespace}/{}", d.delivery.name),
            source,
        })?;
    tracing::info!(template = ?d.template, policy = ?d.delivery, message, "compliance reported");
    Ok(name)
}
