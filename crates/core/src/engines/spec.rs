//! What an engine declares about itself: the intents it enforces (from which kinds of policy,
//! reading which cluster facts, with which audit form), the kinds it writes, and the RBAC that
//! follows from them.

use super::{Engine, Environment, NativeKind, Output, PolicyInput, Rule};
use crate::intents::Origin;
use k8s_openapi::api::rbac::v1::PolicyRule;
use nimbus_api::NimbusRule;

/// An engine as one unit: the intents it enforces, the kinds it writes, what else it reads
/// from the cluster, and its translator. The catalog's "who enforces what", the operator's
/// watches, availability tracking and status, and the chart's RBAC all derive from these.
pub struct EngineSpec {
    pub engine: Engine,
    pub name: &'static str,
    pub manager: &'static str,
    /// The intents it enforces.
    pub enforces: &'static [Enforces],
    /// What it writes; it is installed when all of these are served.
    pub kinds: &'static [&'static NativeKind],
    /// Writes only into the k8tls namespace, so its kinds are watched (and writable) only there.
    pub confined_to_k8tls_namespace: bool,
    /// Objects (and problems) for one rule of an intent in `enforces`.
    pub(super) translate: fn(&PolicyInput, &Rule, &Environment) -> Output,
    /// Kinds of `kinds` that not every cluster serves (built-in kinds of recent Kubernetes
    /// releases): the engine is installed without them, and a rule whose translation writes
    /// one while it is not served is reported unenforced instead
    /// ([`super::EngineSet::unserved`]).
    pub optional_kinds: &'static [&'static NativeKind],
    /// Whether what it enforces holds against the bound namespaces' tenants (whoever may
    /// write namespaced objects there, as the `admin` and `edit` roles grant): `Some(false)`
    /// where they can undo it, `Some(true)` where they cannot, as measured; `None` where no
    /// test has said.
    pub tenant_proof: Option<bool>,
    /// The intents for which it leaves out the workloads a SecurityIntentException in force
    /// excepts; for the others it enforces on them still, and the policy says so.
    pub honours_exceptions: &'static [&'static str],
}

/// An intent an engine enforces.
pub struct Enforces {
    pub intent: &'static str,
    /// The kinds of policy it acts on.
    pub origins: &'static [Origin],
    /// What its translation reads besides the policy: the operator watches a fact only while an
    /// engine reading it is enabled, reads it only for rules that need it, and re-translates
    /// when it changes.
    pub reads: &'static [Fact],
    /// What it writes when the intent's action is `Audit`.
    pub audit: AuditForm,
    /// What it does when the action is `Block`, in plain words (`nimbus explain`).
    pub effect: &'static str,
}

/// The action under which an intent reports and enforces nothing.
pub const AUDIT: &str = "Audit";

/// What an engine writes for an intent whose action is [`AUDIT`]: never anything that enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditForm {
    /// Objects that report and never block: its translator renders every action as `Audit`.
    Reports,
    /// The same objects as for `Block`: they only assess, and never block (k8tls's scans).
    AssessesOnly,
    /// Nothing: it has no form that reports without enforcing (a NetworkPolicy cuts traffic, a
    /// RoleBinding grants, a Kyverno mutate or generate rule acts). The policy says so
    /// ([`nimbus_api::condition::REASON_NO_AUDIT_FORM`]).
    None,
}

impl EngineSpec {
    /// The origins it enforces `intent` from; `None` when it does not enforce it.
    pub fn origins(&self, intent: &str) -> Option<&'static [Origin]> {
        self.enforcing(intent).map(|e| e.origins)
    }

    pub(super) fn enforcing(&self, intent: &str) -> Option<&'static Enforces> {
        self.enforces.iter().find(|e| e.intent == intent)
    }

    /// Whether any of its translations reads `fact`.
    pub fn reads(&self, fact: Fact) -> bool {
        self.enforces.iter().any(|e| e.reads.contains(&fact))
    }

    /// The RBAC rules its registration implies: full access to the kinds it writes (watched,
    /// applied, pruned), cluster-wide or only in the k8tls namespace, and reading the cluster
    /// facts it reads. Grants that depend on configuration (which ClusterRoles namespaceSandbox
    /// may bind, the virtual-patch database's name) are the Helm chart's.
    pub fn permissions(&self) -> Permissions {
        let mut by_group: Vec<(&str, Vec<String>)> = Vec::new();
        for kind in self.kinds {
            match by_group.iter_mut().find(|(g, _)| *g == kind.group) {
                Some((_, resources)) => resources.push(kind.plural.to_owned()),
                None => by_group.push((kind.group, vec![kind.plural.to_owned()])),
            }
        }
        let writes = by_group
            .into_iter()
            .map(|(group, resources)| rule(group, resources, &WRITE_VERBS));
        let mut permissions = Permissions::default();
        if self.confined_to_k8tls_namespace {
            permissions.k8tls_namespace.extend(writes);
        } else {
            permissions.cluster.extend(writes);
        }
        if self.reads(Fact::NodePodCidrs) {
            let nodes = rule("", vec!["nodes".to_owned()], &["list", "watch"]);
            permissions.cluster.insert(0, nodes);
        }
        permissions
    }
}

/// What the operator does with a kind it writes.
const WRITE_VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "patch", "update", "delete",
];

/// RBAC rules an engine needs (see [`EngineSpec::permissions`]).
#[derive(Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Permissions {
    pub cluster: Vec<PolicyRule>,
    /// Granted by a Role in the k8tls namespace.
    pub k8tls_namespace: Vec<PolicyRule>,
}

fn rule(group: &str, resources: Vec<String>, verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    }
}

/// Whether translating `rules` with any engine reads `fact`.
pub fn rules_read(rules: &[NimbusRule], fact: Fact) -> bool {
    rules.iter().any(|rule| {
        Engine::ALL.into_iter().any(|e| {
            e.spec()
                .enforcing(&rule.id)
                .is_some_and(|e| e.reads.contains(&fact))
        })
    })
}

/// A cluster fact an engine's translation reads (see [`Environment`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fact {
    /// `spec.podCIDRs` of the nodes.
    NodePodCidrs,
    /// Whether the k8tls namespace exists.
    K8tlsNamespace,
    /// The virtual-patch database ConfigMap.
    VirtualPatchDb,
    /// The priorities of the Admin-tier ClusterNetworkPolicies, which depend on every cluster
    /// policy ([`super::cluster_netpol::priorities`]).
    AdminPriorities,
}

/// Origins, as engines declare them.
pub(super) const NAMESPACED: &[Origin] = &[Origin::Binding, Origin::ClusterBindingNamespace];
pub(super) const BINDING_OR_CLUSTER: &[Origin] = &[Origin::Binding, Origin::Cluster];
pub(super) const CLUSTER: &[Origin] = &[Origin::Cluster];
pub(super) const CLUSTER_BINDING_NAMESPACES: &[Origin] = &[Origin::ClusterBindingNamespace];
