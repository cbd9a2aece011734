//! The fleet roll-up (`nimbus fleet status`): from the hub's OCM Policies, the compliance of
//! every Nimbus template on every cluster a Policy was placed on.
//!
//! OCM v0.19.0's shapes (governance-policy-propagator `api/v1/policy_types.go`):
//! - a root Policy lists its templates in `spec.policy-templates[].objectDefinition`, and in
//!   `status.status[]` every cluster its placements chose, as `{clustername, clusternamespace,
//!   compliant}` (`compliant` empty while the cluster has no replicated Policy);
//! - the propagator copies it, as the replicated Policy `<root namespace>.<root name>`, into each
//!   chosen cluster's namespace on the hub, labelled [`ROOT_POLICY_LABEL`] (that same name) and
//!   [`CLUSTER_NAME_LABEL`];
//! - the framework addon's status sync writes each template's compliance into the replicated
//!   Policy's `status.details[]`: `templateMeta.name`, `compliant` (`Compliant`, `NonCompliant`,
//!   `Pending`) and `history[]`, newest first, each `{lastTimestamp, message, eventName}`.
//!
//! Pure: Policies (as the API server serves them, JSON) in, rows out.

use super::tally::{Tally, Workloads};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The label the propagator puts on a replicated Policy: the root Policy's
/// `<namespace>.<name>`. A root Policy does not carry it.
pub const ROOT_POLICY_LABEL: &str = "policy.open-cluster-management.io/root-policy";
/// The label the propagator puts beside it: the managed cluster's name.
pub const CLUSTER_NAME_LABEL: &str = "policy.open-cluster-management.io/cluster-name";

/// The kinds of template the roll-up shows: Nimbus's, the ones whose compliance the operator
/// reports. Other templates (OCM's ConfigurationPolicies, Gatekeeper's constraints, ...) are
/// left out: their engines report them, `kubectl get policy -A` shows them.
pub const NIMBUS_KINDS: [&str; 3] = [
    "SecurityIntent",
    "SecurityIntentBinding",
    "ClusterSecurityIntentBinding",
];

/// A template's compliance on one cluster, as the hub knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Standing {
    Compliant,
    NonCompliant,
    /// Nothing reported yet: no replicated Policy for the cluster, no history for the
    /// template, or a report that says `Pending` (OCM's, e.g. a dependency not met).
    Pending,
}

impl Standing {
    pub fn as_str(self) -> &'static str {
        match self {
            Standing::Compliant => "Compliant",
            Standing::NonCompliant => "NonCompliant",
            Standing::Pending => "Pending",
        }
    }
}

/// One Nimbus template of one root Policy on one cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// The root Policy's namespace on the hub.
    pub policy_namespace: String,
    /// The root Policy's name.
    pub policy: String,
    pub cluster: String,
    /// The template's kind: one of [`NIMBUS_KINDS`].
    pub kind: String,
    /// The template's name (`templateMeta.name` in the status).
    pub name: String,
    pub compliance: Standing,
    /// The newest report's message without its compliance (`Compliant; ` and the like) and
    /// its tally; when nothing was reported, why.
    pub message: String,
    /// Of a binding, its workloads by verdict as the newest report counted them; `None` when
    /// the report has no count (an intent, OCM's own errors, nothing reported).
    pub workloads: Option<Workloads>,
    /// Of a binding, the engines in force on its workloads, as the newest report listed them
    /// (`netpol`, `kubearmor (auditing)`...); `None` with `workloads`.
    pub engines: Option<Vec<String>>,
    /// When the newest report was made (its `lastTimestamp`, RFC 3339 as OCM wrote it); `None`
    /// when nothing was reported.
    pub since: Option<String>,
}

/// What the message of a Pending row says when the cluster has no replicated Policy yet.
pub const NOT_REPLICATED: &str = "no replicated Policy for the cluster yet";
/// What it says when the replicated Policy has no report for the template yet.
pub const NOT_REPORTED: &str = "no compliance reported yet";

/// Whether `policy` is a replicated Policy (the propagator's copy in a cluster namespace), not
/// a root one.
pub fn is_replicated(policy: &Value) -> bool {
    policy["metadata"]["labels"][ROOT_POLICY_LABEL].is_string()
}

/// The roll-up: for each root Policy of `roots` (replicated ones among them are skipped), each
/// cluster it was placed on (its `status.status[]`, and any cluster with a replicated Policy of
/// it in `replicated`), each Nimbus template of its `spec.policy-templates`, one row. Sorted by
/// root Policy, then cluster; the templates in the Policy's order. Missing or malformed fields
/// leave a row Pending or out, never fail.
///
/// OCM keys a template's status by name alone: two templates of one Policy with the same name
/// (of different kinds) share one history, so their rows show the same report.
pub fn rollup(roots: &[Value], replicated: &[Value]) -> Vec<Row> {
    rows_with_details(roots, replicated)
        .into_iter()
        .map(|(row, _)| row)
        .collect()
}

/// The rows of [`rollup`], each with the `status.details[]` entry of its template in the
/// cluster's replicated Policy, when there is one: what the report reads the history from, so
/// that it and `fleet status` read the hub one way.
pub(super) fn rows_with_details<'v>(
    roots: &'v [Value],
    replicated: &'v [Value],
) -> Vec<(Row, Option<&'v Value>)> {
    let mut copies: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for copy in replicated {
        if let Some(root) = copy["metadata"]["labels"][ROOT_POLICY_LABEL].as_str() {
            copies.entry(root).or_default().push(copy);
        }
    }
    let mut roots: Vec<(&str, &str, &Value)> = roots
        .iter()
        .filter(|root| !is_replicated(root))
        .filter_map(|root| {
            let meta = &root["metadata"];
            Some((meta["namespace"].as_str()?, meta["name"].as_str()?, root))
        })
        .collect();
    roots.sort_by_key(|(namespace, name, _)| (*namespace, *name));
    let mut rows = Vec::new();
    for (namespace, name, root) in roots {
        let templates = nimbus_templates(root);
        if templates.is_empty() {
            continue;
        }
        let copies = copies
            .get(format!("{namespace}.{name}").as_str())
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (cluster, copy) in clusters(root, copies) {
            for (kind, template) in &templates {
                let detail = copy.and_then(|copy| detail(copy, template));
                let (compliance, message, since, tally) = match (copy, detail) {
                    (None, _) => (Standing::Pending, NOT_REPLICATED.to_owned(), None, None),
                    (Some(_), None) => (Standing::Pending, NOT_REPORTED.to_owned(), None, None),
                    (Some(_), Some(detail)) => reported(detail),
                };
                let row = Row {
                    policy_namespace: namespace.to_owned(),
                    policy: name.to_owned(),
                    cluster: cluster.clone(),
                    kind: (*kind).to_owned(),
                    name: (*template).to_owned(),
                    compliance,
                    message,
                    workloads: tally.as_ref().map(|t| t.workloads),
                    engines: tally.map(|t| t.engines.into_iter().collect()),
                    since,
                };
                rows.push((row, detail));
            }
        }
    }
    rows
}

/// The Nimbus templates of a Policy, `(kind, name)`, in its order.
fn nimbus_templates(policy: &Value) -> Vec<(&str, &str)> {
    policy["spec"]["policy-templates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|template| &template["objectDefinition"])
        .filter(|object| {
            object["apiVersion"].as_str().and_then(group_of) == Some(nimbus_api::GROUP)
        })
        .filter_map(|object| {
            let kind = object["kind"]
                .as_str()
                .filter(|k| NIMBUS_KINDS.contains(k))?;
            Some((kind, object["metadata"]["name"].as_str()?))
        })
        .collect()
}

/// The clusters a root Policy was placed on, by name, each with its replicated Policy if there
/// is one: the root's `status.status[]` (matched to the copies by cluster namespace), and the
/// clusters of copies the root's status does not list yet.
fn clusters<'v>(root: &Value, copies: &[&'v Value]) -> BTreeMap<String, Option<&'v Value>> {
    let in_namespace = |namespace: &str| {
        copies
            .iter()
            .find(|c| c["metadata"]["namespace"] == namespace)
            .copied()
    };
    let mut clusters = BTreeMap::new();
    for placed in root["status"]["status"].as_array().into_iter().flatten() {
        let Some(cluster) = placed["clustername"].as_str() else {
            continue;
        };
        let namespace = placed["clusternamespace"].as_str().unwrap_or(cluster);
        clusters.insert(cluster.to_owned(), in_namespace(namespace));
    }
    for copy in copies {
        let meta = &copy["metadata"];
        let cluster = meta["labels"][CLUSTER_NAME_LABEL]
            .as_str()
            .or(meta["namespace"].as_str());
        if let Some(cluster) = cluster {
            clusters.entry(cluster.to_owned()).or_insert(Some(*copy));
        }
    }
    clusters
}

/// The `status.details[]` entry of the template named `template` in a replicated Policy.
fn detail<'v>(copy: &'v Value, template: &str) -> Option<&'v Value> {
    let mut details = copy["status"]["details"].as_array().into_iter().flatten();
    details.find(|d| d["templateMeta"]["name"] == template)
}

/// What a template's `status.details[]` entry says: its compliance, the newest report's
/// message (its causes) and when it was made, and its tally if it has one.
fn reported(detail: &Value) -> (Standing, String, Option<String>, Option<Tally>) {
    let newest = &detail["history"][0];
    let Some(message) = newest["message"].as_str() else {
        return (Standing::Pending, NOT_REPORTED.to_owned(), None, None);
    };
    let (stated, rest) = split_compliance(message);
    let compliance = standing(detail["compliant"].as_str())
        .or(stated)
        .unwrap_or(Standing::NonCompliant);
    let since = newest["lastTimestamp"].as_str().map(str::to_owned);
    let (causes, tally) = Tally::split(rest);
    (compliance, causes.to_owned(), since, tally)
}

/// `group` of `group/version`; the core group (`v1`) has none.
fn group_of(api_version: &str) -> Option<&str> {
    api_version.split_once('/').map(|(group, _)| group)
}

fn standing(word: Option<&str>) -> Option<Standing> {
    match word?.trim().to_ascii_lowercase().as_str() {
        "compliant" => Some(Standing::Compliant),
        "noncompliant" => Some(Standing::NonCompliant),
        "pending" => Some(Standing::Pending),
        _ => None,
    }
}

/// A compliance message's compliance and the rest: `Compliant; SecurityIntent a is Ready` is
/// `Compliant` and `SecurityIntent a is Ready`. Read as the status sync reads it
/// (`parseComplianceFromMessage`): a `(combined from similar events):` prefix is dropped, the
/// word is any case. A message that starts with no such word is kept whole, compliance
/// `None`.
pub(super) fn split_compliance(message: &str) -> (Option<Standing>, &str) {
    let message = message.trim();
    let message = message
        .strip_prefix("(combined from similar events):")
        .map_or(message, str::trim_start);
    match message.split_once(';') {
        Some((word, rest)) => match standing(Some(word)) {
            Some(stated) => (Some(stated), rest.trim()),
            None => (None, message),
        },
        None => match standing(Some(message)) {
            Some(stated) => (Some(stated), ""),
            None => (None, message),
        },
    }
}

#[cfg(test)]
mod tests;
