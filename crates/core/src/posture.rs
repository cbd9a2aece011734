//! Posture: which workloads the bound intents protect, enforced by which engines, and where the
//! gaps are. Pure: the operator feeds it what its caches hold (pods grouped into workloads,
//! policies with their translations, which native objects exist) and serves the result as the
//! posture API.

use crate::catalog::{self, Origin};
use crate::engines::{EngineSet, Generated, PolicyInput, Translation};
use crate::exceptions::Excepted;

mod excepted;
mod workloads;

use crate::names;
use crate::namespaces::{self, ProtectedNamespaces};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::core::{Selector, SelectorExt};
use nimbus_api::posture::{
    EngineCoverage, EngineState, Gap, IntentCoverage, NamespacePosture, Reason, Reference,
    VERDICT_LABEL, Verdict, WorkloadCounts, WorkloadPosture, WorkloadRef, api_version,
};
use nimbus_api::{NamespaceSelector, condition};
use std::collections::{BTreeMap, BTreeSet};
pub use workloads::{ContainerPort, Pod, Workload, workloads};

/// Reasons only the posture reports.
pub mod reason {
    /// No bound intent selects the workload.
    pub const NOT_SELECTED: &str = "NotSelected";
    /// An intent selects only some of the workload's pods.
    pub const SOME_PODS_NOT_SELECTED: &str = "SomePodsNotSelected";
    /// An engine's native object is not (yet) in the cluster.
    pub const NATIVE_POLICY_MISSING: &str = "NativePolicyMissing";
    /// The intent's action is `Audit`: what its engines write reports and blocks nothing.
    pub const AUDITED: &str = "Audited";
    /// A running pod breaks the enforced intent, as the engine's background scan reports: it
    /// was admitted before the intent was enforced, or while an exception let it out.
    pub const RUNNING_IN_VIOLATION: &str = "RunningInViolation";
    /// A SecurityIntentException in force lets the workload's pods out of the intent.
    pub use super::excepted::EXCEPTED;
}

/// Where a policy's rules apply.
#[derive(Clone, Debug)]
enum Scope {
    Namespace(String),
    Cluster {
        namespaces: Option<NamespaceSelector>,
        protected: ProtectedNamespaces,
    },
}

/// The policies of `policies` that apply in each of `namespaces`, in their order. A namespace's
/// policies are found by its name and only cluster policies are matched against every
/// namespace, so this costs policies + namespaces × cluster policies rather than a
/// namespace × policy product.
pub fn applying_by_namespace<'p, 'n>(
    policies: &'p [PolicyCoverage],
    namespaces: impl IntoIterator<Item = &'n str>,
) -> BTreeMap<&'n str, Vec<&'p PolicyCoverage>> {
    let mut applying: BTreeMap<&str, Vec<&PolicyCoverage>> =
        namespaces.into_iter().map(|ns| (ns, Vec::new())).collect();
    for policy in policies {
        match &policy.scope {
            Scope::Namespace(ns) => {
                if let Some(list) = applying.get_mut(ns.as_str()) {
                    list.push(policy);
                }
            }
            Scope::Cluster { .. } => {
                for (ns, list) in &mut applying {
                    if policy.applies_in(ns) {
                        list.push(policy);
                    }
                }
            }
        }
    }
    applying
}

/// What one NimbusPolicy or ClusterNimbusPolicy enforces, per rule: computed once per policy
/// and shared by every workload it selects.
#[derive(Clone, Debug)]
pub struct PolicyCoverage {
    pub policy: Reference,
    pub binding: Option<Reference>,
    scope: Scope,
    /// `None`: a selector no pod can match (it does not parse).
    selector: Option<Selector>,
    pub rules: Vec<IntentCoverage>,
    /// The SecurityIntentExceptions in force for it, with their selectors (`None`: one no pod
    /// can match).
    exceptions: Vec<(Excepted, Option<Selector>)>,
}

/// What the posture needs to know about one policy besides its translation.
pub struct PolicyFacts<'a> {
    pub input: &'a PolicyInput<'a>,
    pub translation: &'a Translation,
    pub engines: &'a EngineSet,
    /// Whether a generated object is in the cluster.
    pub present: &'a dyn Fn(&Generated) -> bool,
    /// The SecurityIntent's name for an intent ID, through the policy's binding.
    pub intent_name: &'a dyn Fn(&str) -> Option<String>,
    /// The bundle label of that SecurityIntent, if any.
    pub intent_bundle: &'a dyn Fn(&str) -> Option<String>,
    /// Who last wrote that SecurityIntent, and when ([`crate::authors`]).
    pub intent_writer: &'a dyn Fn(&str) -> Option<nimbus_api::IntentWriter>,
    /// The binding that controls the policy.
    pub binding: Option<Reference>,
    pub protected: &'a ProtectedNamespaces,
    /// What the probes found of an (intent ID, engine) of this policy; `None` while probes
    /// are off (no liveness is reported then).
    pub probes: Option<crate::probes::Lookup<'a>>,
}

/// Why an intent (`id`) of a policy is not simply protected: the translation's problems, its
/// engines' states, and its audit.
fn intent_reasons(
    facts: &PolicyFacts,
    id: &str,
    engines: &[EngineCoverage],
    audited: bool,
) -> Vec<Reason> {
    let mut reasons: Vec<Reason> = facts
        .translation
        .problems
        .iter()
        .filter(|p| p.intent == id)
        .map(|p| Reason {
            reason: p.reason.to_owned(),
            message: p.message.clone(),
        })
        .collect();
    for engine in engines {
        let (code, what) = match engine.state {
            EngineState::NotInstalled => (
                condition::REASON_ENGINE_NOT_INSTALLED,
                "its CRDs are not installed",
            ),
            EngineState::Pending => (
                reason::NATIVE_POLICY_MISSING,
                "some of its native objects are not in the cluster",
            ),
            EngineState::NotLive => (crate::probes::reason::NOT_LIVE, crate::probes::NOT_LIVE),
            _ => continue,
        };
        // The translation reports a missing engine already when it knows.
        if reasons.iter().any(|r| r.reason == code) && code != reason::NATIVE_POLICY_MISSING {
            continue;
        }
        reasons.push(Reason {
            reason: code.to_owned(),
            message: format!("engine {}: {what}", engine.engine),
        });
    }
    if audited {
        reasons.push(Reason {
            reason: reason::AUDITED.to_owned(),
            message: "the intent's action is Audit: what its engines write \
                      reports and blocks nothing"
                .to_owned(),
        });
    }
    reasons.sort();
    reasons.dedup();
    reasons
}

impl PolicyCoverage {
    pub fn new(facts: &PolicyFacts) -> Self {
        let input = facts.input;
        let policy = Reference {
            kind: match input.origin {
                Origin::Cluster => "ClusterNimbusPolicy",
                _ => "NimbusPolicy",
            }
            .to_owned(),
            namespace: input.namespace.clone(),
            name: input.name.clone(),
        };
        let scope = match &input.namespace {
            Some(ns) => Scope::Namespace(ns.clone()),
            None => Scope::Cluster {
                namespaces: input.namespaces.clone(),
                protected: facts.protected.clone(),
            },
        };
        let rules = input
            .rules
            .iter()
            .enumerate()
            .filter_map(|(index, rule)| {
                let audited = rule.rule.action == crate::engines::AUDIT;
                let mut engines = engine_coverage(facts, index, &rule.id, audited)?;
                let liveness = facts
                    .probes
                    .map(|p| crate::probes::judge(&mut engines, &rule.id, p));
                let reasons = intent_reasons(facts, &rule.id, &engines, audited);
                let in_force = engines
                    .iter()
                    .filter(|e| matches!(e.state, EngineState::Enforcing | EngineState::External))
                    .count();
                // Audited whatever its engines do: none of them may enforce it.
                let verdict = if audited {
                    Verdict::Audited
                } else if in_force == 0 {
                    Verdict::Unprotected
                } else if in_force == engines.len() {
                    Verdict::Protected
                } else {
                    Verdict::Partial
                };
                let writer = (facts.intent_writer)(&rule.id);
                let tenant_proof = tenant_proof(&engines);
                Some(IntentCoverage {
                    intent: (facts.intent_name)(&rule.id),
                    id: rule.id.clone(),
                    bundle: (facts.intent_bundle)(&rule.id),
                    action: rule.rule.action.clone(),
                    written_by: writer.as_ref().and_then(|w| w.written_by.clone()),
                    written_at: writer.and_then(|w| w.written_at),
                    binding: facts.binding.clone(),
                    policy: policy.clone(),
                    verdict,
                    engines,
                    reasons,
                    tenant_proof,
                    liveness,
                    // Per workload: see `excepting`.
                    exceptions: Vec::new(),
                })
            })
            .collect();
        Self {
            policy,
            binding: facts.binding.clone(),
            scope,
            selector: Selector::try_from(input.selector.clone()).ok(),
            rules,
            exceptions: input
                .exceptions
                .iter()
                .map(|e| (e.clone(), Selector::try_from(e.selector.clone()).ok()))
                .collect(),
        }
    }

    fn applies_in(&self, namespace: &str) -> bool {
        match &self.scope {
            Scope::Namespace(ns) => ns == namespace,
            Scope::Cluster {
                namespaces,
                protected,
            } => namespaces
                .as_ref()
                .is_none_or(|s| namespaces::selects(s, namespace, protected)),
        }
    }

    fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }
}

/// Whether the engines enforcing an intent hold against the namespace's tenants: not if any
/// enforcing it can be undone by them, yes if one cannot, unknown otherwise.
fn tenant_proof(engines: &[EngineCoverage]) -> Option<bool> {
    let proof = engines
        .iter()
        .filter(|e| e.state == EngineState::Enforcing)
        .filter_map(|e| e.engine.parse::<crate::engines::Engine>().ok())
        .filter_map(|e| e.spec().tenant_proof);
    proof.reduce(|a, b| a && b)
}

/// How each engine that enforces rule `index` (intent `id`, `audited` or not) here does so.
/// `None` when no engine acts on it at this policy's origin but one does at another origin of
/// the same binding (a cluster binding's namespace policies leave some intents to its cluster
/// policy).
fn engine_coverage(
    facts: &PolicyFacts,
    index: usize,
    id: &str,
    audited: bool,
) -> Option<Vec<EngineCoverage>> {
    let origin = facts.input.origin;
    // An engine standing by for another of its mechanism (engine preference) is not named:
    // the posture names the engine in force.
    let considered = |engine, origin| {
        catalog::intent(id).is_some_and(|spec| spec.handled_by(engine, origin))
            && (facts.engines.enabled.contains(&engine) || facts.engines.external.contains(&engine))
            && !facts
                .engines
                .preference
                .stands_by(engine, origin, facts.engines)
    };
    let here: Vec<_> = crate::engines::Engine::ALL
        .into_iter()
        .filter(|e| considered(*e, origin))
        .collect();
    let elsewhere = [Origin::ClusterBindingNamespace, Origin::Cluster]
        .into_iter()
        .filter(|o| *o != origin && origin != Origin::Binding)
        .any(|o| {
            crate::engines::Engine::ALL
                .into_iter()
                .any(|e| considered(e, o))
        });
    if here.is_empty() && elsewhere {
        return None;
    }
    Some(
        here.into_iter()
            .map(|engine| {
                let generated: Vec<&Generated> = facts
                    .translation
                    .objects
                    .iter()
                    .filter(|g| g.rule == index && g.engine == engine)
                    .collect();
                let state = if !facts.engines.enabled.contains(&engine) {
                    EngineState::External
                } else if !facts.engines.installed.contains(&engine) {
                    EngineState::NotInstalled
                } else if generated.is_empty() {
                    EngineState::Failed
                } else if generated.iter().all(|g| (facts.present)(g)) {
                    // An audited rule is written only in forms that report (engines' AuditForm).
                    if audited {
                        EngineState::Auditing
                    } else {
                        EngineState::Enforcing
                    }
                } else {
                    EngineState::Pending
                };
                EngineCoverage {
                    engine: engine.name().to_owned(),
                    state,
                    objects: generated
                        .iter()
                        .map(|g| Reference {
                            kind: g.kind.kind.to_owned(),
                            namespace: g.object.metadata.namespace.clone(),
                            name: g.object.metadata.name.clone().unwrap_or_default(),
                        })
                        .collect(),
                }
            })
            .collect(),
    )
}

/// The name of a workload's posture: `<kind>-<name>` in lower case, within the name limit.
pub fn workload_posture_name(kind: &str, name: &str) -> String {
    names::fit(&format!("{}-{name}", kind.to_lowercase()), 253)
}

/// The posture of `workload` under `policies` (those that do not apply in its namespace are
/// skipped; [`applying_by_namespace`] spares a caller with many namespaces passing them all).
pub fn workload_posture<'p>(
    workload: &Workload,
    policies: impl IntoIterator<Item = &'p PolicyCoverage>,
) -> WorkloadPosture {
    let total = workload.pods.len();
    let mut intents = Vec::new();
    for policy in policies
        .into_iter()
        .filter(|p| p.applies_in(&workload.namespace))
    {
        let selected: Vec<&Pod> = workload
            .pods
            .iter()
            .filter(|p| policy.selects(&p.labels))
            .collect();
        if selected.is_empty() {
            continue;
        }
        let labels: Vec<&BTreeMap<String, String>> = selected.iter().map(|p| &p.labels).collect();
        for rule in &policy.rules {
            let mut rule = rule.clone();
            let (exceptions, excepted, wholly) =
                excepted::excepting(&policy.exceptions, &rule.id, workload, &labels);
            excepted::except(&mut rule, &exceptions, excepted, wholly, selected.len());
            let selected = selected.len();
            if selected < total {
                if rule.verdict == Verdict::Protected {
                    rule.verdict = Verdict::Partial;
                }
                rule.reasons.push(Reason {
                    reason: reason::SOME_PODS_NOT_SELECTED.to_owned(),
                    message: format!("{} selects {selected} of {total} pods", policy.policy.name),
                });
            }
            intents.push(rule);
        }
    }
    let mut posture = WorkloadPosture {
        api_version: api_version(),
        kind: "WorkloadPosture".to_owned(),
        metadata: ObjectMeta {
            name: Some(workload_posture_name(&workload.kind, &workload.name)),
            namespace: Some(workload.namespace.clone()),
            labels: Some(common_labels(&workload.pods)),
            creation_timestamp: workload.created.clone(),
            ..Default::default()
        },
        workload: WorkloadRef {
            api_version: workload.api_version.clone(),
            kind: workload.kind.clone(),
            name: workload.name.clone(),
            pods: u32::try_from(total).unwrap_or(u32::MAX),
        },
        verdict: Verdict::Unprotected,
        intents,
        reasons: Vec::new(),
        preview: None,
    };
    judge(&mut posture);
    posture
}

/// Sets the workload's verdict (and its label) and reasons from its intents'.
pub fn judge(posture: &mut WorkloadPosture) {
    let intents = &posture.intents;
    let verdict = combine(intents.iter().map(|i| i.verdict));
    let mut reasons: Vec<Reason> = intents
        .iter()
        .filter(|i| i.verdict != Verdict::Protected)
        .flat_map(|i| {
            i.reasons.iter().map(|r| Reason {
                reason: r.reason.clone(),
                message: format!("{}: {}", i.id, r.message),
            })
        })
        .collect();
    if intents.is_empty() {
        reasons.push(Reason {
            reason: reason::NOT_SELECTED.to_owned(),
            message: "no bound intent selects this workload".to_owned(),
        });
    }
    reasons.sort();
    reasons.dedup();
    posture.verdict = verdict;
    posture.reasons = reasons;
    posture
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(VERDICT_LABEL.to_owned(), verdict.as_str().to_owned());
}

/// `Protected` when all are, `Audited` when all are, `Partial` when some are in force, and
/// `Unprotected` when none is (or there is none): audited and unprotected together enforce
/// nothing, and the unprotected part needs attention first.
fn combine(verdicts: impl Iterator<Item = Verdict>) -> Verdict {
    let seen: BTreeSet<Verdict> = verdicts.collect();
    match (seen.len(), seen.first()) {
        (0, _) => Verdict::Unprotected,
        (1, Some(only)) => *only,
        _ if seen.contains(&Verdict::Protected) || seen.contains(&Verdict::Partial) => {
            Verdict::Partial
        }
        _ => Verdict::Unprotected,
    }
}

/// The labels every pod carries with the same value.
fn common_labels(pods: &[Pod]) -> BTreeMap<String, String> {
    let Some((first, rest)) = pods.split_first() else {
        return BTreeMap::new();
    };
    first
        .labels
        .iter()
        .filter(|(k, v)| rest.iter().all(|p| p.labels.get(*k) == Some(*v)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The posture of `namespace` from its workloads' postures and the policies applying in it.
pub fn namespace_posture<'p>(
    namespace: &str,
    created: Option<Time>,
    workloads: &[&WorkloadPosture],
    policies: impl IntoIterator<Item = &'p PolicyCoverage>,
) -> NamespacePosture {
    let mut counts = WorkloadCounts::default();
    let mut gaps = Vec::new();
    for w in workloads {
        counts.total += 1;
        match w.verdict {
            Verdict::Protected => counts.protected += 1,
            Verdict::Partial => counts.partial += 1,
            Verdict::Unprotected => counts.unprotected += 1,
            Verdict::Audited => counts.audited += 1,
            Verdict::Excepted => counts.excepted += 1,
            // A namespace's verdict only, never a workload's.
            Verdict::NoWorkloads => {}
        }
        if w.verdict != Verdict::Protected {
            let mut reasons: Vec<String> = w.reasons.iter().map(|r| r.reason.clone()).collect();
            reasons.dedup();
            gaps.push(Gap {
                workload: format!("{}/{}", w.workload.kind, w.workload.name),
                verdict: w.verdict,
                reasons,
            });
        }
    }
    let applying: Vec<&PolicyCoverage> = policies
        .into_iter()
        .filter(|p| p.applies_in(namespace))
        .collect();
    let bindings: BTreeSet<Reference> = applying.iter().filter_map(|p| p.binding.clone()).collect();
    let intents: BTreeSet<String> = applying
        .iter()
        .flat_map(|p| p.rules.iter().map(|r| r.id.clone()))
        .collect();
    // An empty namespace is not a gap: there is nothing to protect, whatever is bound in it.
    let verdict = if workloads.is_empty() {
        Verdict::NoWorkloads
    } else {
        combine(workloads.iter().map(|w| w.verdict))
    };
    NamespacePosture {
        api_version: api_version(),
        kind: "NamespacePosture".to_owned(),
        metadata: ObjectMeta {
            name: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                VERDICT_LABEL.to_owned(),
                verdict.as_str().to_owned(),
            )])),
            creation_timestamp: created,
            ..Default::default()
        },
        verdict,
        bindings: bindings.into_iter().collect(),
        intents: intents.into_iter().collect(),
        workloads: counts,
        gaps,
        compliance: crate::compliance::coverage::coverage(workloads),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::{Engine, Environment, translate};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use nimbus_api::NimbusPolicy;
    use serde_json::json;

    fn owner(kind: &str, name: &str) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("{name}-uid"),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    fn pod(name: &str, app: &str, controller: Option<OwnerReference>) -> Pod {
        Pod {
            namespace: "shop".into(),
            name: name.into(),
            labels: BTreeMap::from([("app".to_owned(), app.to_owned())]),
            created: None,
            controller,
            ..Pod::default()
        }
    }

    #[test]
    fn an_intent_is_tenant_proof_only_where_every_engine_in_force_holds_against_tenants() {
        use EngineState::{Auditing, Enforcing};
        let e = |engine: &str, state| EngineCoverage {
            engine: engine.into(),
            state,
            objects: Vec::new(),
        };
        let table = [
            (vec![e("netpol", Enforcing)], Some(false)),
            (vec![e("clusternetworkpolicy", Enforcing)], Some(true)),
            // KubeArmor has not been measured: the Admin tier decides.
            (
                vec![
                    e("kubearmor", Enforcing),
                    e("clusternetworkpolicy", Enforcing),
                ],
                Some(true),
            ),
            (
                vec![e("kubearmor", Enforcing), e("netpol", Enforcing)],
                Some(false),
            ),
            (vec![e("kubearmor", Enforcing)], None),
            // Not in force: holds nothing.
            (vec![e("clusternetworkpolicy", Auditing)], None),
            (
                vec![e("netpol", Enforcing), e("clusternetworkpolicy", Enforcing)],
                Some(false),
            ),
        ];
        for (engines, want) in table {
            assert_eq!(tenant_proof(&engines), want, "{engines:?}");
        }
    }

    #[test]
    fn pods_group_under_their_top_level_controller() {
        let pods = [
            pod("web-1", "web", Some(owner("ReplicaSet", "web-5d8"))),
            pod("web-2", "web", Some(owner("ReplicaSet", "web-5d8"))),
            pod("orphan-rs-1", "x", Some(owner("ReplicaSet", "orphan-rs"))),
            pod("db-0", "db", Some(owner("StatefulSet", "db"))),
            pod("report-1", "r", Some(owner("Job", "report-123"))),
            pod("debug", "debug", None),
        ];
        let parents = |_: &str, kind: &str, name: &str| match (kind, name) {
            ("ReplicaSet", "web-5d8") => Some(owner("Deployment", "web")),
            ("Job", "report-123") => Some(owner("CronJob", "report")),
            _ => None,
        };
        let found: Vec<(String, String, usize)> = workloads(pods, parents)
            .into_iter()
            .map(|w| (w.kind, w.name, w.pods.len()))
            .collect();
        let expected = [
            ("CronJob", "report", 1),
            ("Deployment", "web", 2),
            ("Pod", "debug", 1),
            ("ReplicaSet", "orphan-rs", 1),
            ("StatefulSet", "db", 1),
        ];
        assert_eq!(
            found,
            expected
                .map(|(k, n, c)| (k.to_owned(), n.to_owned(), c))
                .to_vec()
        );
    }

    fn dns_policy() -> NimbusPolicy {
        dns_policy_with("Block")
    }

    fn dns_policy_with(action: &str) -> NimbusPolicy {
        serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "NimbusPolicy",
            "metadata": {"name": "dns", "namespace": "shop", "uid": "p",
                "ownerReferences": [{"apiVersion": "intent.security.nimbus.com/v1alpha1",
                    "kind": "SecurityIntentBinding", "name": "dns", "uid": "b", "controller": true}]},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                     "rules": [{"id": "dnsManipulation", "rule": {"action": action}}]}
        }))
        .expect("valid policy")
    }

    /// The posture of a Deployment with pods labelled `apps`, under the dnsManipulation policy
    /// with `engines`, `present` telling which generated objects exist.
    fn posture_of(
        apps: &[&str],
        engines: &EngineSet,
        present: &dyn Fn(&Generated) -> bool,
    ) -> WorkloadPosture {
        posture_of_policy(&dns_policy(), apps, engines, present)
    }

    fn posture_of_policy(
        np: &NimbusPolicy,
        apps: &[&str],
        engines: &EngineSet,
        present: &dyn Fn(&Generated) -> bool,
    ) -> WorkloadPosture {
        let input = PolicyInput::namespaced(np, "p");
        let translation = translate(&input, &Environment::default(), engines);
        let coverage = PolicyCoverage::new(&PolicyFacts {
            input: &input,
            translation: &translation,
            engines,
            present,
            intent_name: &|_| Some("dns-manipulation".to_owned()),
            intent_bundle: &|_| None,
            intent_writer: &|_| None,
            binding: Some(Reference {
                kind: "SecurityIntentBinding".into(),
                namespace: Some("shop".into()),
                name: "dns".into(),
            }),
            protected: &ProtectedNamespaces::default(),
            probes: None,
        });
        let workload = Workload {
            namespace: "shop".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            uid: None,
            created: None,
            pods: apps
                .iter()
                .map(|a| Pod {
                    labels: BTreeMap::from([("app".to_owned(), (*a).to_owned())]),
                    ..Pod::default()
                })
                .collect(),
        };
        workload_posture(&workload, &[coverage])
    }

    fn coverage(input: &PolicyInput) -> PolicyCoverage {
        let engines = EngineSet::all();
        let translation = translate(input, &Environment::default(), &engines);
        PolicyCoverage::new(&PolicyFacts {
            input,
            translation: &translation,
            engines: &engines,
            present: &|_| true,
            intent_name: &|_| None,
            intent_bundle: &|_| None,
            intent_writer: &|_| None,
            binding: None,
            protected: &ProtectedNamespaces::default(),
            probes: None,
        })
    }

    /// Each namespace gets its own policies and the cluster policies selecting it, in policy
    /// order; a namespace nothing applies in gets none.
    #[test]
    fn policies_are_found_by_namespace() {
        let namespaced = |ns: &str| -> NimbusPolicy {
            serde_json::from_value(json!({
                "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "NimbusPolicy",
                "metadata": {"name": "dns", "namespace": ns},
                "spec": {"selector": {}, "rules": [{"id": "dnsManipulation", "rule": {"action": "Block"}}]}
            }))
            .expect("valid policy")
        };
        let cluster: nimbus_api::ClusterNimbusPolicy = serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterNimbusPolicy",
            "metadata": {"name": "team"},
            "spec": {"nsSelector": {"matchNames": ["cart", "shop"]},
                     "rules": [{"id": "dnsManipulation", "rule": {"action": "Block"}}]}
        }))
        .expect("valid cluster policy");
        let (cart, shop) = (namespaced("cart"), namespaced("shop"));
        let policies = [
            coverage(&PolicyInput::cluster(&cluster, "c")),
            coverage(&PolicyInput::namespaced(&cart, "a")),
            coverage(&PolicyInput::namespaced(&shop, "s")),
        ];
        let applying = applying_by_namespace(&policies, ["shop", "cart", "other"]);
        let names = |ns: &str| -> Vec<String> {
            applying[ns]
                .iter()
                .map(|p| {
                    format!(
                        "{}/{}",
                        p.policy.kind,
                        p.policy.namespace.as_deref().unwrap_or("-")
                    )
                })
                .collect()
        };
        assert_eq!(
            names("shop"),
            ["ClusterNimbusPolicy/-", "NimbusPolicy/shop"]
        );
        assert_eq!(
            names("cart"),
            ["ClusterNimbusPolicy/-", "NimbusPolicy/cart"]
        );
        assert!(names("other").is_empty());
    }

    /// The reason codes, each once.
    fn reasons(p: &WorkloadPosture) -> Vec<&str> {
        let mut codes: Vec<&str> = p.reasons.iter().map(|r| r.reason.as_str()).collect();
        codes.dedup();
        codes
    }

    /// An audited intent protects nothing, whatever its engines wrote: it is `Audited`, its
    /// reporting engines `Auditing`, and with an enforced intent beside it the workload is
    /// `Partial`, never `Protected`.
    #[test]
    fn an_audited_intent_is_not_protection() {
        let np = dns_policy_with("Audit");
        let p = posture_of_policy(&np, &["web"], &EngineSet::all(), &|_| true);
        assert_eq!(p.verdict, Verdict::Audited, "{p:#?}");
        let states: Vec<(&str, EngineState)> = p.intents[0]
            .engines
            .iter()
            .map(|e| (e.engine.as_str(), e.state))
            .collect();
        assert_eq!(
            states,
            [
                ("netpol", EngineState::Failed),
                ("kubearmor", EngineState::Auditing)
            ]
        );
        let ns = namespace_posture("shop", None, &[&p], &[]);
        assert_eq!((ns.verdict, ns.workloads.audited), (Verdict::Audited, 1));
        let enforced = posture_of(&["web"], &EngineSet::all(), &|_| true);
        let mut both = enforced.clone();
        both.intents.extend(p.intents.clone());
        assert_eq!(
            combine(both.intents.iter().map(|i| i.verdict)),
            Verdict::Partial
        );
        let unprotected = posture_of(&["other"], &EngineSet::all(), &|_| true);
        assert_eq!(
            combine([Verdict::Audited, unprotected.verdict].into_iter()),
            Verdict::Unprotected
        );
        let codes = reasons(&p);
        assert!(codes.contains(&reason::AUDITED), "{codes:?}");
        assert!(
            codes.contains(&condition::REASON_NO_AUDIT_FORM),
            "{codes:?}"
        );
    }

    #[test]
    fn every_engine_in_force_is_protected() {
        let p = posture_of(&["web", "web"], &EngineSet::all(), &|_| true);
        assert_eq!(p.verdict, Verdict::Protected, "{p:#?}");
        assert_eq!(p.metadata.name.as_deref(), Some("deployment-web"));
        assert_eq!(
            p.metadata
                .labels
                .as_ref()
                .map(|l| l[VERDICT_LABEL].as_str()),
            Some("Protected")
        );
        let intent = &p.intents[0];
        assert_eq!(intent.intent.as_deref(), Some("dns-manipulation"));
        let engines: Vec<(&str, EngineState)> = intent
            .engines
            .iter()
            .map(|e| (e.engine.as_str(), e.state))
            .collect();
        assert_eq!(
            engines,
            [
                ("netpol", EngineState::Enforcing),
                ("kubearmor", EngineState::Enforcing)
            ]
        );
        assert!(intent.engines.iter().all(|e| !e.objects.is_empty()));
        assert!(p.reasons.is_empty());
    }

    #[test]
    fn a_missing_engine_leaves_the_workload_partial() {
        let mut engines = EngineSet::all();
        engines.installed.remove(&Engine::KubeArmor);
        let p = posture_of(&["web"], &engines, &|_| true);
        assert_eq!(p.verdict, Verdict::Partial);
        assert_eq!(reasons(&p), ["EngineNotInstalled"]);
        assert_eq!(p.intents[0].engines[1].state, EngineState::NotInstalled);
    }

    #[test]
    fn objects_not_in_the_cluster_do_not_protect() {
        let p = posture_of(&["web"], &EngineSet::all(), &|_| false);
        assert_eq!(p.verdict, Verdict::Unprotected);
        assert_eq!(reasons(&p), [reason::NATIVE_POLICY_MISSING]);
        let p = posture_of(&["web"], &EngineSet::all(), &|g| {
            g.engine == Engine::NetworkPolicy
        });
        assert_eq!(p.verdict, Verdict::Partial);
    }

    #[test]
    fn selecting_some_pods_is_partial_and_none_is_unprotected() {
        let p = posture_of(&["web", "other"], &EngineSet::all(), &|_| true);
        assert_eq!(p.verdict, Verdict::Partial);
        assert_eq!(reasons(&p), [reason::SOME_PODS_NOT_SELECTED]);
        let p = posture_of(&["other"], &EngineSet::all(), &|_| true);
        assert_eq!(p.verdict, Verdict::Unprotected);
        assert!(p.intents.is_empty());
        assert_eq!(reasons(&p), [reason::NOT_SELECTED]);
    }

    #[test]
    fn namespaces_count_their_workloads_and_list_the_gaps() {
        let protected = posture_of(&["web"], &EngineSet::all(), &|_| true);
        let mut gap = posture_of(&["other"], &EngineSet::all(), &|_| true);
        gap.workload.name = "debug".into();
        let ns = namespace_posture("shop", None, &[&protected, &gap], &[]);
        assert_eq!(ns.verdict, Verdict::Partial);
        assert_eq!(
            ns.workloads,
            WorkloadCounts {
                total: 2,
                protected: 1,
                partial: 0,
                unprotected: 1,
                audited: 0,
                excepted: 0,
            }
        );
        assert_eq!(ns.gaps.len(), 1);
        assert_eq!(ns.gaps[0].workload, "Deployment/debug");
        assert_eq!(ns.gaps[0].reasons, [reason::NOT_SELECTED]);
        let empty = namespace_posture("quiet", None, &[], &[]);
        assert_eq!(empty.verdict, Verdict::NoWorkloads);
        assert_eq!(
            empty.metadata.labels.expect("labels")[VERDICT_LABEL],
            "NoWorkloads"
        );
    }
}
