//! Reports the compliance of the SecurityIntents and bindings Open Cluster Management
//! delivered, as Events on the replicated Policy that delivered each (see
//! [`nimbus_core::fleet`]). The verdicts are computed with the posture, which knows what every
//! selected workload has in force; the leader reports a verdict once it has held for
//! [`fleet::SETTLE`], and nothing while it holds: what was reported last is remembered, and on
//! first sight (a start, a new leader) read back from the Policy's status.

use crate::context::Context;
use crate::error::Error;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Resource, ResourceExt};
use nimbus_api::BindingPreview;
use nimbus_api::posture::{Reference, WorkloadPosture};
use nimbus_core::fleet::{self, Compliance, Delivery, Observed, Reporting, Step, Verdict};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

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

/// What the leader knows of one template's Policy.
struct Known {
    /// The Policy's UID; `None` when it was not found (nothing is reported on it).
    policy_uid: Option<String>,
    reporting: Reporting,
}

/// While leading, reports each computation's verdicts (`delivered` of what `computed` yields,
/// the latest one when several arrived meanwhile), and looks again when a new verdict has held
/// long enough or a failed request is due again.
pub async fn report<W>(
    ctx: &Context,
    mut computed: watch::Receiver<Option<Arc<W>>>,
    delivered: impl Fn(&W) -> &[Delivered],
) {
    let mut known: BTreeMap<Key, Known> = BTreeMap::new();
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
            () = due => {}
        }
        wake = None;
        let Some(writes) = computed.borrow_and_update().clone() else {
            continue;
        };
        if !*ctx.leading.borrow() {
            // A new leader reads back what was reported, whoever reported it.
            known.clear();
            continue;
        }
        wake = report_once(ctx, delivered(&writes), &mut known).await;
    }
}

/// Reports what is due of `delivered`; when to look again.
async fn report_once(
    ctx: &Context,
    delivered: &[Delivered],
    known: &mut BTreeMap<Key, Known>,
) -> Option<Instant> {
    let keys: BTreeSet<Key> = delivered.iter().map(Delivered::key).collect();
    known.retain(|key, _| keys.contains(key));
    let mut wake: Option<Instant> = None;
    let mut at = |t: Instant| wake = Some(wake.map_or(t, |w| w.min(t)));
    for d in delivered {
        let desired = d.verdict.as_ref().map(Verdict::event_message);
        let key = d.key();
        if !known.contains_key(&key) {
            if desired.is_none() {
                continue;
            }
            match read_policy(ctx, d).await {
                Ok(read) => known.insert(key.clone(), read),
                Err(error) => {
                    tracing::warn!(template = ?d.template, policy = ?d.delivery, %error, "reading the delivering Policy");
                    at(Instant::now() + RETRY);
                    continue;
                }
            };
        }
        let Some(Known {
            policy_uid: Some(policy_uid),
            reporting,
        }) = known.get_mut(&key)
        else {
            continue;
        };
        match reporting.step(desired.as_deref(), Instant::now(), fleet::SETTLE) {
            Step::Report(message) => {
                let compliance = d.verdict.as_ref().map(|v| v.compliance);
                match emit(ctx, d, policy_uid, compliance, &message).await {
                    Ok(()) => reporting.reported(message),
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

/// The delivering Policy's UID and what its status says was last reported of the template.
async fn read_policy(ctx: &Context, d: &Delivered) -> Result<Known, Error> {
    let gvk = GroupVersionKind::gvk(
        fleet::POLICY_GROUP,
        fleet::POLICY_VERSION,
        fleet::POLICY_KIND,
    );
    let resource = ApiResource::from_gvk(&gvk);
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &d.delivery.namespace, &resource);
    let policy = api
        .get_opt(&d.delivery.name)
        .await
        .map_err(|source| Error::Kube {
            action: "getting",
            object: format!("Policy {}/{}", d.delivery.namespace, d.delivery.name),
            source,
        })?;
    Ok(match policy {
        Some(policy) => Known {
            policy_uid: policy.uid(),
            reporting: Reporting::new(fleet::last_reported(
                &policy.data["status"],
                &d.template.name,
            )),
        },
        None => Known {
            policy_uid: None,
            reporting: Reporting::default(),
        },
    })
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
) -> Result<(), Error> {
    let now = Timestamp::now();
    let namespace = &d.delivery.namespace;
    let controller = ctx.reporter.controller.clone();
    let instance = ctx.reporter.instance.clone();
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", d.delivery.name, now.as_nanosecond())),
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
    Ok(())
}
