//! Delivery by Open Cluster Management (OCM): a SecurityIntent, SecurityIntentBinding or
//! ClusterSecurityIntentBinding that a replicated OCM Policy delivered as a policy template has
//! its compliance reported on that Policy, in the form OCM's own policy controllers use: an
//! Event on the Policy whose reason names the template and whose message starts with
//! `Compliant;` or `NonCompliant;`. The framework addon's status sync reads those Events into
//! the Policy's status, on the managed cluster and on the hub.
//!
//! Pure: what the posture computed and the objects' statuses in, verdicts and when to report
//! them out. See docs/src/fleet.md for what `Compliant` means.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nimbus_api::posture::{IntentCoverage, Reference, Verdict as Posture, WorkloadPosture};
use nimbus_api::{BindingPreview, Condition, condition, mode};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

mod messages;
pub mod report;
pub mod rollup;
mod tally;
#[cfg(test)]
mod tests;

pub use messages::{binding_verdict, intent_verdict};
pub use rollup::{Row, Standing, rollup};
pub use tally::{Tally, Workloads};

/// The CRD label OCM's framework addon requires of a kind before it syncs templates of it.
pub const POLICY_TYPE_LABEL: &str = "policy.open-cluster-management.io/policy-type";
/// The value of [`POLICY_TYPE_LABEL`] that makes a kind a policy template.
pub const POLICY_TYPE_TEMPLATE: &str = "template";
/// The label the framework addon puts on every object it creates from a template: the name of
/// the replicated Policy (`<root namespace>.<root name>`).
pub const PARENT_POLICY_LABEL: &str = "policy.open-cluster-management.io/policy";
/// The label the framework addon puts beside it: the namespace of that Policy on the managed
/// cluster (the cluster namespace).
pub const CLUSTER_NAMESPACE_LABEL: &str = "policy.open-cluster-management.io/cluster-namespace";
/// OCM's Policy kind.
pub const POLICY_GROUP: &str = "policy.open-cluster-management.io";
pub const POLICY_VERSION: &str = "v1";
pub const POLICY_API_VERSION: &str = "policy.open-cluster-management.io/v1";
pub const POLICY_KIND: &str = "Policy";
/// The `action` OCM's controllers give their compliance Events.
pub const EVENT_ACTION: &str = "ComplianceStateUpdate";

/// How long a new verdict must hold before it is reported. A break or a repair reaches the
/// posture and the bindings' statuses a few hundred milliseconds apart (the controllers write
/// one status after another); reporting each step would put verdicts that held for a moment
/// into the Policy's compliance history.
pub const SETTLE: Duration = Duration::from_secs(2);

/// The replicated Policy that delivered an object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Delivery {
    /// The cluster namespace the Policy is in.
    pub namespace: String,
    pub name: String,
}

/// The Policy that delivered the object `meta` describes, if OCM's framework addon created it:
/// a namespaced template is controlled by the Policy (same namespace), a cluster-scoped one
/// only carries the Policy's name and namespace as labels.
pub fn delivery(meta: &ObjectMeta) -> Option<Delivery> {
    if let Some(owner) = meta.owner_references.iter().flatten().find(|o| {
        o.controller == Some(true) && o.kind == POLICY_KIND && o.api_version == POLICY_API_VERSION
    }) {
        return Some(Delivery {
            namespace: meta.namespace.clone()?,
            name: owner.name.clone(),
        });
    }
    let labels = meta.labels.as_ref()?;
    Some(Delivery {
        namespace: labels.get(CLUSTER_NAMESPACE_LABEL)?.clone(),
        name: labels.get(PARENT_POLICY_LABEL)?.clone(),
    })
}

/// The label that puts a binding in shadow mode, as a hub template: on each cluster, the value
/// of the same label on that cluster's ManagedCluster (the canary rollout of
/// docs/src/fleet.md).
pub const MODE_FROM_CLUSTER: &str =
    "{{hub index .ManagedClusterLabels \"intent.security.nimbus.com/mode\" hub}}";

/// An OCM Policy `namespace/name` delivering `objects` (SecurityIntents and a binding) as its
/// policy templates. Without `remediationAction`: the framework addon would copy it into each
/// template's spec, and the Nimbus kinds have no such field. With `canary`, each binding takes
/// its mode from the cluster's label ([`MODE_FROM_CLUSTER`]).
pub fn policy(
    namespace: &str,
    name: &str,
    objects: &[serde_json::Value],
    canary: bool,
) -> serde_json::Value {
    let templates: Vec<serde_json::Value> = objects
        .iter()
        .map(|object| {
            let mut object = object.clone();
            if canary
                && object["kind"]
                    .as_str()
                    .is_some_and(|k| k.ends_with("Binding"))
            {
                object["metadata"]["labels"][nimbus_api::MODE_LABEL] = MODE_FROM_CLUSTER.into();
            }
            serde_json::json!({"objectDefinition": object})
        })
        .collect();
    serde_json::json!({
        "apiVersion": POLICY_API_VERSION,
        "kind": POLICY_KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"disabled": false, "policy-templates": templates}
    })
}

/// A template's compliance, as OCM spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compliance {
    Compliant,
    NonCompliant,
}

impl Compliance {
    pub fn as_str(self) -> &'static str {
        match self {
            Compliance::Compliant => "Compliant",
            Compliance::NonCompliant => "NonCompliant",
        }
    }
}

/// What is reported of a template: its compliance and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub compliance: Compliance,
    pub message: String,
}

impl Verdict {
    /// The Event's message: the compliance first, as OCM's status sync reads it.
    pub fn event_message(&self) -> String {
        format!("{}; {}", self.compliance.as_str(), self.message)
    }
}

/// The compliance Event's reason, which names the template: `policy: <namespace>/<name>` for a
/// namespaced template (in the Policy's namespace), `policy: <name>` for a cluster-scoped one.
pub fn event_reason(template: &Reference) -> String {
    match &template.namespace {
        Some(ns) => format!("policy: {ns}/{}", template.name),
        None => format!("policy: {}", template.name),
    }
}

/// What the Policy's `status` says was reported of one template, whoever reported it (the
/// framework addon reports its own errors about the template the same way): the newest message
/// of its compliance history, and the names of the Events in that history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HubWord {
    pub newest: Option<String>,
    pub events: BTreeSet<String>,
}

impl HubWord {
    /// Of the template named `template`, from the Policy's `status`.
    pub fn of(status: &serde_json::Value, template: &str) -> Self {
        let history = status["details"]
            .as_array()
            .and_then(|details| {
                details
                    .iter()
                    .find(|d| d["templateMeta"]["name"] == template)
            })
            .and_then(|detail| detail["history"].as_array());
        let Some(history) = history else {
            return Self::default();
        };
        Self {
            newest: history
                .first()
                .and_then(|entry| entry["message"].as_str())
                .map(|m| m.trim().to_owned()),
            events: history
                .iter()
                .filter_map(|entry| entry["eventName"].as_str())
                .map(str::to_owned)
                .collect(),
        }
    }
}

/// An object's status as the verdict reads it.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// The object's `metadata.generation`.
    pub generation: Option<i64>,
    pub conditions: &'a [Condition],
    /// A binding's `status.mode` (`Enforce`, `Shadow`, `Mixed`).
    pub mode: Option<&'a str>,
    /// What enforcing a binding's audited intents would block, as the posture computation
    /// previews it (what it writes to the binding's `status.preview`).
    pub preview: Option<&'a BindingPreview>,
}

impl Observed<'_> {
    /// The `Ready` condition, when it describes the current generation and is known: before
    /// that there is no verdict to report.
    fn ready(&self) -> Option<&Condition> {
        self.conditions.iter().find(|c| {
            c.type_ == condition::READY
                && c.observed_generation == self.generation
                && c.status != "Unknown"
        })
    }

    fn stalled(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == condition::STALLED && c.status == "True")
    }

    fn shadowed(&self) -> bool {
        matches!(self.mode, Some(mode::SHADOW | mode::MIXED))
    }
}

/// The intents of `binding` on each workload they select, grouped by binding: one pass over
/// every posture for all the bindings OCM delivered.
pub fn by_binding<'p>(
    postures: impl IntoIterator<Item = &'p WorkloadPosture>,
    bindings: &BTreeSet<&Reference>,
) -> BTreeMap<Reference, Vec<Selected<'p>>> {
    let mut out: BTreeMap<Reference, Vec<Selected>> = BTreeMap::new();
    for posture in postures {
        let mut of: BTreeMap<&Reference, Vec<&IntentCoverage>> = BTreeMap::new();
        for intent in &posture.intents {
            if let Some(binding) = intent.binding.as_ref().filter(|b| bindings.contains(b)) {
                of.entry(binding).or_default().push(intent);
            }
        }
        for (binding, intents) in of {
            out.entry(binding.clone()).or_default().push(Selected {
                workload: posture,
                intents,
            });
        }
    }
    out
}

/// A workload a binding selects, with the binding's intents on it.
#[derive(Clone, Debug)]
pub struct Selected<'p> {
    pub workload: &'p WorkloadPosture,
    pub intents: Vec<&'p IntentCoverage>,
}

impl Selected<'_> {
    /// The workload's verdict under this binding alone: audited and excepted intents are kept
    /// as bound (nothing enforced, deliberately), beside protected ones; any other gap makes it
    /// `Partial` or `Unprotected`.
    fn verdict(&self) -> Posture {
        let seen: BTreeSet<Posture> = self.intents.iter().map(|i| i.verdict).collect();
        let kept =
            |v: &Posture| matches!(v, Posture::Protected | Posture::Audited | Posture::Excepted);
        let enforced = seen.contains(&Posture::Protected) || seen.contains(&Posture::Partial);
        match seen.first() {
            None => Posture::Unprotected,
            Some(first) if seen.iter().all(kept) => {
                if enforced {
                    Posture::Protected
                } else {
                    *first
                }
            }
            _ if enforced => Posture::Partial,
            _ => Posture::Unprotected,
        }
    }
}

/// What to do about a template's compliance now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Report this message (then call [`Reporting::reported`]).
    Report(String),
    /// A new verdict waits to have held for [`SETTLE`]: look again then.
    At(Instant),
    /// Nothing to report.
    Nothing,
}

/// How long an Event we reported may take to show in the Policy's history. Beyond it the
/// history is believed again: the Event was lost, and the verdict is reported anew.
pub const CONFIRM: Duration = Duration::from_secs(60);

/// How often a verdict already reported is said again while the Policy's history says
/// something else. The framework addon writes its own errors about a template into the same
/// history (`template-error; ...`, e.g. while a restarted API server does not serve the kind
/// yet) and, for kinds other than OCM's own, never asks for a fresh report once the error is
/// gone; without a new report the hub would show the error for good. While the error lasts,
/// this bounds the alternation.
pub const REPEAT: Duration = Duration::from_secs(30);

/// How often a change of a binding's counts alone (its [`Tally`]: workloads added, removed,
/// engines coming and going with the verdict unchanged) is reported at most. OCM keeps ten
/// entries of a template's history: at this pace, churn alone takes 50 minutes to push a
/// change of verdict out of it, while the counts on the hub are never older than this.
pub const RECOUNT: Duration = Duration::from_secs(5 * 60);

/// What was last reported of one template, and a verdict waiting to be reported.
#[derive(Clone, Debug, Default)]
pub struct Reporting {
    /// The last Event reported: its message, its name, when.
    emitted: Option<(String, String, Instant)>,
    candidate: Option<(String, Instant)>,
}

impl Reporting {
    /// Given what the Policy's history says (`hub`) and the message the template's verdict
    /// calls for now (`desired`; `None`: not known yet), whether to report it: once it differs
    /// from what the hub was last told and has held for `settle`, and again (every
    /// [`REPEAT`]) while the history's newest word is someone else's; a change of counts alone
    /// no sooner than [`RECOUNT`] after our last report. One Event per change of verdict, none
    /// while the history agrees.
    pub fn step(
        &mut self,
        hub: &HubWord,
        desired: Option<&str>,
        now: Instant,
        settle: Duration,
    ) -> Step {
        let Some(desired) = desired else {
            // A verdict must hold on its own: an unknown moment starts it over.
            self.candidate = None;
            return Step::Nothing;
        };
        // Our last Event, until the history shows it (the status sync takes a moment).
        let unconfirmed = self
            .emitted
            .as_ref()
            .filter(|(_, event, at)| !hub.events.contains(event) && now < *at + CONFIRM);
        let told = match unconfirmed {
            Some((message, _, _)) => Some(message.as_str()),
            None => hub.newest.as_deref(),
        };
        if told == Some(desired) {
            self.candidate = None;
            return match unconfirmed {
                Some((_, _, at)) => Step::At(*at + CONFIRM),
                None => Step::Nothing,
            };
        }
        let since = match &self.candidate {
            Some((message, since)) if message == desired => *since,
            _ => {
                self.candidate = Some((desired.to_owned(), now));
                now
            }
        };
        let mut due = since + settle;
        let recount = told.is_some_and(|told| Tally::split(told).0 == Tally::split(desired).0);
        if let Some((message, _, at)) = &self.emitted {
            if message == desired {
                // Said already, and overwritten by someone else since.
                due = due.max(*at + REPEAT);
            } else if recount {
                due = due.max(*at + RECOUNT);
            }
        }
        if now >= due {
            Step::Report(desired.to_owned())
        } else {
            Step::At(due)
        }
    }

    /// `message` was reported at `now`, as the Event named `event`.
    pub fn reported(&mut self, message: String, event: String, now: Instant) {
        self.emitted = Some((message, event, now));
        self.candidate = None;
    }
}
