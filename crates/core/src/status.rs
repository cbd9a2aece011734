//! Every status the operator writes, decided from the plan and from what executing it did:
//! a policy's `Ready` from the problems of its translation, a binding's from its policies' own
//! results plus what blocks the binding itself (missing intents, conflicts, failed writes).
//! Pure: the controllers observe, plan and execute, then ask this module what to report.

use crate::CompileError;
use crate::names;
use crate::namespaces::ProtectedNamespaces;
use crate::plan::{BindingPolicies, ClusterBindingPolicies};
use kube::{Resource, ResourceExt};
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, ClusterSecurityIntentBindingStatus,
    Condition, NimbusPolicy, NimbusPolicyStatus, STATUS_CREATED, STATUS_VALIDATION_FAIL,
    SecurityIntent, SecurityIntentBinding, SecurityIntentBindingStatus, SecurityIntentStatus,
    condition,
};
use std::collections::BTreeMap;

mod conditions;
mod policy;
pub(crate) use conditions::condition;
use conditions::{Stall, with_kstatus};
pub use conditions::{bounded, change_ended, ready, reconciling, stalls};
use policy::policy_conditions;
pub use policy::{NativeOutcome, NativeResult, policy_ready, policy_status};

/// What a generated policy reports for what it holds now: its `Ready`, and its `Stalled` when
/// something stalls it.
#[derive(Debug, Clone)]
pub struct PolicyReport {
    pub ready: Condition,
    pub stalled: Option<Condition>,
}

/// What a generated policy reports; `None` while it is being (re)written or its status is older
/// than its spec.
pub fn policy_result(
    policy: Option<&(impl Resource + ?Sized)>,
    status: Option<&NimbusPolicyStatus>,
    just_written: bool,
) -> Option<PolicyReport> {
    let generation = policy?.meta().generation;
    let status = status.filter(|s| !just_written && s.observed_generation == generation)?;
    let of = |type_: &str| status.conditions.iter().find(|c| c.type_ == type_);
    Some(PolicyReport {
        ready: of(condition::READY)?.clone(),
        stalled: of(condition::STALLED)
            .filter(|c| c.status == "True")
            .cloned(),
    })
}

/// What keeps a binding from being in force besides its policies' own results.
pub struct Blocker {
    pub reason: &'static str,
    pub message: String,
}

/// A binding's conditions, from what its generated policies report (so it never claims more
/// than is in force). `Ready`: false when something blocks it or a policy is not ready, unknown
/// while a policy has not been translated at its current generation, true otherwise with the
/// policies' notes (partial enforcement). `Stalled` when a blocker or a policy stalls, else
/// `Reconciling` while not ready (see [`with_kstatus`]). `policies` pairs each policy's name
/// with its report.
pub fn binding_conditions(
    generation: Option<i64>,
    blockers: Vec<Blocker>,
    policies: &[(String, Option<PolicyReport>)],
) -> Vec<Condition> {
    let mut stall = Stall::default();
    for b in blockers.iter().filter(|b| stalls(b.reason)) {
        stall.add(b.reason, b.message.clone());
    }
    for (name, stalled) in policies
        .iter()
        .filter_map(|(name, r)| Some((name, r.as_ref()?.stalled.as_ref()?)))
    {
        stall.add(&stalled.reason, format!("{name}: {}", stalled.message));
    }
    let mut failed = blockers.first().map(|b| b.reason.to_owned());
    let mut notes: Vec<String> = blockers.into_iter().map(|b| b.message).collect();
    // Cluster bindings repeat one message over many namespaces: group them.
    let mut by_message: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut pending = Vec::new();
    for (name, result) in policies {
        match result.as_ref().map(|r| &r.ready) {
            None => pending.push(name.as_str()),
            Some(c) => {
                if c.status != "True" {
                    failed.get_or_insert_with(|| c.reason.clone());
                }
                if !c.message.is_empty() {
                    by_message.entry(&c.message).or_default().push(name);
                }
            }
        }
    }
    notes.extend(
        by_message
            .into_iter()
            .map(|(message, names)| format!("{}: {message}", names.join(", "))),
    );
    let message = notes.join("; ");
    let ready = match failed {
        Some(reason) => ready(false, &reason, message, generation),
        None if !pending.is_empty() => reconciling(
            format!("waiting for {} to be translated", pending.join(", ")),
            generation,
        ),
        None => ready(true, condition::REASON_READY, message, generation),
    };
    with_kstatus(ready, stall)
}

/// The conditions of an object that is not ready for one reason alone.
fn not_ready(reason: &str, message: String, generation: Option<i64>) -> Vec<Condition> {
    let mut stall = Stall::default();
    if stalls(reason) {
        stall.add(reason, message.clone());
    }
    with_kstatus(ready(false, reason, message, generation), stall)
}

/// A SecurityIntent's status: `Ready` unless its ID is not in the catalog (`UnsupportedIntent`),
/// `Stalled` for that or for parameters not applied as written (`InvalidParameter`). Whether it
/// is enforced somewhere is for the bindings and policies of it to say.
pub fn intent_status(si: &SecurityIntent) -> SecurityIntentStatus {
    let generation = si.metadata.generation;
    let problems = crate::engines::check_intent(&crate::compile::rule(&si.spec.intent));
    SecurityIntentStatus {
        id: si.spec.intent.id.clone(),
        action: si.spec.intent.action.clone(),
        status: STATUS_CREATED.to_owned(),
        observed_generation: generation,
        conditions: policy_conditions(&problems, generation),
    }
}

/// Whether a new status would only say "not known yet" (`Ready=Unknown`) about a generation
/// an existing status does not describe. Such a write tells nothing: a status behind its
/// object's generation already says the change is not done (to kstatus too), and what decides
/// it (the generated policies' reports) triggers the next reconcile. Skipping it saves a write
/// per change. An object without a status yet gets it written: kstatus takes an object with no
/// conditions and no `observedGeneration` for Current.
pub fn only_pending(current: &[Condition], new: &[Condition]) -> bool {
    let ready = |conditions: &[Condition]| {
        conditions
            .iter()
            .find(|c| c.type_ == condition::READY)
            .cloned()
    };
    match ready(new) {
        Some(new) if new.status == "Unknown" => ready(current)
            .is_some_and(|current| current.observed_generation != new.observed_generation),
        _ => false,
    }
}

/// What executing the plan did to one policy a binding generates.
#[derive(Debug)]
pub enum Outcome<'a, P> {
    /// An object the binding does not own holds the policy's name: it was left alone.
    Conflict,
    /// The binding's policy as observed before this reconcile (`None`: there was none), and
    /// what writing it did: `Ok(true)` written, `Ok(false)` already as planned, `Err` why the
    /// write failed.
    Owned {
        observed: Option<&'a P>,
        write: Result<bool, String>,
    },
}

impl<'a, P> Outcome<'a, P> {
    /// Nothing was to be written, and nothing was: `observed` stays as it is.
    pub fn untouched(observed: Option<&'a P>) -> Self {
        Self::Owned {
            observed,
            write: Ok(false),
        }
    }
}

/// `Kind name exists and is not owned by this binding`.
fn conflict(what: String) -> String {
    format!("{what} exists and is not owned by this binding")
}

/// The `Ready` reason of a binding whose selectors do not compile.
fn invalid(err: &CompileError) -> &'static str {
    match err {
        CompileError::NamespaceSelector(_) => condition::REASON_INVALID_NAMESPACE_SELECTOR,
        CompileError::Cel(_) | CompileError::InvalidSelector(_) => {
            condition::REASON_INVALID_SELECTOR
        }
    }
}

/// The status of a SecurityIntentBinding planned as `plan`, whose NimbusPolicy fared as
/// `outcome` (with an invalid plan, nothing was written: what is in force stays, and so does
/// what the status says is bound).
pub fn binding_status(
    sib: &SecurityIntentBinding,
    plan: &Result<BindingPolicies, CompileError>,
    outcome: Outcome<'_, NimbusPolicy>,
) -> SecurityIntentBindingStatus {
    let mut status = binding_status_without_writers(sib, plan, outcome);
    status.intent_writers = match plan {
        Ok(plan) => plan.writers.clone(),
        Err(_) => sib
            .status
            .as_ref()
            .map(|s| s.intent_writers.clone())
            .unwrap_or_default(),
    };
    status
}

fn binding_status_without_writers(
    sib: &SecurityIntentBinding,
    plan: &Result<BindingPolicies, CompileError>,
    outcome: Outcome<'_, NimbusPolicy>,
) -> SecurityIntentBindingStatus {
    let generation = sib.metadata.generation;
    let name = sib.name_any();
    let (observed, write) = match outcome {
        Outcome::Conflict => {
            let namespace = sib.namespace().unwrap_or_default();
            let message = conflict(format!("NimbusPolicy {namespace}/{name}"));
            let conditions = not_ready(condition::REASON_POLICY_CONFLICT, message, generation);
            return binding_status_of(None, Vec::new(), None, conditions);
        }
        Outcome::Owned { observed, write } => (observed, write),
    };
    let plan = match plan {
        Ok(plan) => plan,
        Err(err) => {
            let conditions = not_ready(invalid(err), err.to_string(), generation);
            let before = sib.status.as_ref();
            let bound = before
                .and_then(|s| s.bound_intents.clone())
                .unwrap_or_default();
            let mode = before.and_then(|s| s.mode.clone());
            return binding_status_of(observed, bound, mode, conditions);
        }
    };
    let mut blockers = Vec::new();
    if !plan.missing_intents.is_empty() {
        blockers.push(missing(&plan.missing_intents));
    }
    let written = match write {
        Ok(written) => written,
        Err(message) => {
            blockers.push(Blocker {
                reason: condition::REASON_APPLY_FAILED,
                message,
            });
            false
        }
    };
    let results = match &plan.policy {
        Some(_) => vec![(
            format!("NimbusPolicy {name}"),
            policy_result(observed, observed.and_then(|p| p.status.as_ref()), written),
        )],
        None => Vec::new(),
    };
    let conditions = binding_conditions(generation, blockers, &results);
    let mode = Some(plan.mode.to_owned());
    binding_status_of(
        plan.policy.as_ref(),
        plan.bound_intents.clone(),
        mode,
        conditions,
    )
}

fn binding_status_of(
    policy: Option<&NimbusPolicy>,
    bound: Vec<String>,
    mode: Option<String>,
    conditions: Vec<Condition>,
) -> SecurityIntentBindingStatus {
    SecurityIntentBindingStatus {
        status: STATUS_CREATED.to_owned(),
        last_updated: None,
        number_of_bound_intents: policy.map_or(0, |p| p.spec.rules.len() as i32),
        bound_intents: (policy.is_some() && !bound.is_empty()).then_some(bound),
        nimbus_policy: policy.map(|p| p.name_any()).unwrap_or_default(),
        mode,
        // The posture computation's to write (see `preview`).
        preview: None,
        // Filled in by `binding_status`.
        intent_writers: Vec::new(),
        observed_generation: conditions.first().and_then(|c| c.observed_generation),
        conditions,
    }
}

fn missing(intents: &[String]) -> Blocker {
    Blocker {
        reason: condition::REASON_INTENT_NOT_FOUND,
        message: format!("SecurityIntents not found: {}", intents.join(", ")),
    }
}

/// The status of a ClusterSecurityIntentBinding planned as `plan`, whose ClusterNimbusPolicy
/// fared as `cluster` and whose per-namespace NimbusPolicies as `namespaces` (in the order of
/// `plan.namespaces`). With an invalid plan nothing was written, and the status keeps what it
/// said was in force.
pub fn cluster_binding_status(
    csib: &ClusterSecurityIntentBinding,
    plan: &Result<ClusterBindingPolicies, CompileError>,
    cluster: Outcome<'_, ClusterNimbusPolicy>,
    namespaces: &[Outcome<'_, NimbusPolicy>],
    protected: &ProtectedNamespaces,
) -> ClusterSecurityIntentBindingStatus {
    let generation = csib.metadata.generation;
    let name = csib.name_any();
    let plan = match plan {
        Ok(plan) => plan,
        Err(err) => {
            // Re-evaluated on every change, so fixing the binding in place recovers it.
            let mut status = csib.status.clone().unwrap_or_default();
            status.status = STATUS_VALIDATION_FAIL.to_owned();
            status.observed_generation = generation;
            status.conditions = not_ready(invalid(err), err.to_string(), generation);
            return status;
        }
    };
    let (mut conflicts, mut failures, mut results) = (Vec::new(), Vec::new(), Vec::new());
    let cluster_policy = match cluster {
        Outcome::Conflict => {
            conflicts.push(conflict(format!("ClusterNimbusPolicy {name}")));
            None
        }
        Outcome::Owned { observed, write } => {
            match write {
                Ok(written) if plan.cluster_policy.is_some() => {
                    let status = observed.and_then(|p| p.status.as_ref());
                    let result = policy_result(observed, status, written);
                    results.push((format!("ClusterNimbusPolicy {name}"), result));
                }
                Ok(_) => {}
                Err(message) => failures.push(message),
            }
            plan.cluster_policy.as_ref()
        }
    };
    let policy_name = names::cluster_binding_policy_name(&name);
    let mut in_force = Vec::new();
    for ((namespace, desired), outcome) in plan.namespaces.iter().zip(namespaces) {
        match outcome {
            Outcome::Conflict => {
                conflicts.push(conflict(format!("NimbusPolicy {namespace}/{policy_name}")))
            }
            Outcome::Owned {
                write: Err(message),
                ..
            } => failures.push(message.clone()),
            Outcome::Owned {
                observed,
                write: Ok(written),
            } => {
                if desired.is_some() {
                    let status = observed.and_then(|p| p.status.as_ref());
                    let result = policy_result(*observed, status, *written);
                    results.push((namespace.clone(), result));
                    in_force.push(namespace.clone());
                }
            }
        }
    }
    in_force.sort();

    let mut blockers = Vec::new();
    if !plan.missing_intents.is_empty() {
        blockers.push(missing(&plan.missing_intents));
    }
    if !conflicts.is_empty() {
        blockers.push(Blocker {
            reason: condition::REASON_POLICY_CONFLICT,
            message: conflicts.join("; "),
        });
    }
    if !failures.is_empty() {
        blockers.push(Blocker {
            reason: condition::REASON_APPLY_FAILED,
            message: failures.join("; "),
        });
    }
    if plan.has_namespace_policies && in_force.is_empty() && blockers.is_empty() {
        blockers.push(Blocker {
            reason: condition::REASON_NO_NAMESPACE_SELECTED,
            message: format!(
                "no namespace is selected, so per-namespace intents are enforced nowhere \
                 (protected namespaces never are: {protected})"
            ),
        });
    }
    let conditions = binding_conditions(generation, blockers, &results);
    let bound = plan.bound_intents.clone();
    ClusterSecurityIntentBindingStatus {
        status: STATUS_CREATED.to_owned(),
        last_updated: None,
        number_of_bound_intents: cluster_policy.map_or(0, |p| p.spec.rules.len() as i32),
        bound_intents: (cluster_policy.is_some() && !bound.is_empty()).then_some(bound),
        cluster_nimbus_policy: cluster_policy.map(|p| p.name_any()).unwrap_or_default(),
        number_of_nimbus_policies: in_force.len() as i32,
        nimbus_policy_namespaces: (!in_force.is_empty()).then_some(in_force),
        mode: Some(plan.mode.to_owned()),
        // The posture computation's to write (see `preview`).
        preview: None,
        intent_writers: plan.writers.clone(),
        observed_generation: generation,
        conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::{EngineSet, Problem, Translation};
    use crate::plan;
    use crate::policy::{Claim, PolicyPlan};
    use serde_json::json;

    const GENERATION: i64 = 4;

    /// The book's (docs/src/concepts.md) "Messages are bounded (4 KiB)": every condition's message, cut at a
    /// character boundary, says how much it left out; a message within the bound is kept whole.
    #[test]
    fn condition_messages_are_bounded_to_4_kib() {
        // Multi-byte characters, so that a cut at 4096 - 40 bytes falls inside one.
        let long: String = "ns-é/policy, ".repeat(2_000);
        for condition in [
            ready(false, "Conflict", long.clone(), Some(GENERATION)),
            reconciling(long.clone(), None),
        ] {
            let message = &condition.message;
            assert!(message.len() <= 4096, "{} bytes", message.len());
            assert!(
                message.len() > 4000,
                "cut too short: {} bytes",
                message.len()
            );
            let (kept, note) = message.rsplit_once('…').expect("an ellipsis");
            assert!(
                long.starts_with(kept),
                "the kept part is the message's start"
            );
            assert_eq!(note, format!(" ({} more bytes)", long.len() - kept.len()));
        }
        let fits = "x".repeat(4096);
        assert_eq!(ready(true, "Ready", fits.clone(), None).message, fits);
    }

    /// `Ready`'s status, reason and message.
    type Expected = (&'static str, &'static str, &'static str);
    /// What, the outcomes of the cluster policy and of the namespaces' policies, and `Ready`.
    type ClusterCase<'a> = (
        &'static str,
        Outcome<'a, ClusterNimbusPolicy>,
        Vec<Outcome<'a, NimbusPolicy>>,
        Expected,
    );

    fn intent(name: &str) -> SecurityIntent {
        serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
            "metadata": {"name": name},
            "spec": {"intent": {"id": "dnsManipulation", "action": "Block"}}
        }))
        .expect("an intent")
    }

    /// A lookup of the intents that exist.
    fn existing(names: &'static [&'static str]) -> impl Fn(&str) -> Option<SecurityIntent> {
        move |n| names.contains(&n).then(|| intent(n))
    }

    fn sib(intents: &[&str], bound_before: &[&str]) -> SecurityIntentBinding {
        serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
            "metadata": {"name": "b", "namespace": "shop", "uid": "u-b", "generation": GENERATION},
            "spec": {"intents": intents.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
                     "selector": {"workloadSelector": {"matchLabels": {"app": "web"}}}},
            "status": {"status": "Created", "numberOfBoundIntents": 0, "nimbusPolicy": "",
                       "boundIntents": bound_before}
        }))
        .expect("a binding")
    }

    fn csib(intents: &[&str], names: &[&str]) -> ClusterSecurityIntentBinding {
        serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "kind": "ClusterSecurityIntentBinding",
            "metadata": {"name": "c", "uid": "u-c", "generation": GENERATION},
            "spec": {"intents": intents.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
                     "selector": {"nsSelector": {"matchNames": names}}}
        }))
        .expect("a cluster binding")
    }

    fn namespace(name: &str) -> k8s_openapi::api::core::v1::Namespace {
        serde_json::from_value(json!({"metadata": {"name": name}})).expect("a namespace")
    }

    /// A generated policy as observed, reporting `Ready` with `reason` (`None`: no report yet).
    fn reported<P: Resource + serde::de::DeserializeOwned>(kind: &str, reason: Option<&str>) -> P {
        let mut value = json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": kind,
            "metadata": {"name": "p", "namespace": "shop", "generation": 1},
            "spec": {"rules": [{"id": "dnsManipulation", "rule": {"action": "Block"}}],
                     "selector": {"matchLabels": {"app": "web"}}}
        });
        if let Some(reason) = reason {
            let message = format!("policy says {reason}");
            let conditions = if reason == condition::REASON_READY {
                vec![ready(true, reason, message, Some(1))]
            } else {
                not_ready(reason, message, Some(1))
            };
            value["status"] = json!({
                "status": "Created", "numberOfAdapterPolicies": 1, "observedGeneration": 1,
                "conditions": conditions
            });
        }
        serde_json::from_value(value).expect("a policy")
    }

    fn owned<P>(observed: Option<&P>, write: Result<bool, String>) -> Outcome<'_, P> {
        Outcome::Owned { observed, write }
    }

    /// The one kstatus "abnormal-true" condition beside `Ready`: type, reason and message.
    fn abnormal(conditions: &[Condition]) -> Option<(&str, &str, &str)> {
        assert!(conditions.len() <= 2, "{conditions:#?}");
        let c = conditions.get(1)?;
        assert_eq!(c.status, "True");
        assert_eq!(c.observed_generation, conditions[0].observed_generation);
        Some((c.type_.as_str(), c.reason.as_str(), c.message.as_str()))
    }

    fn ready_of(conditions: &[Condition]) -> (&str, &str, &str) {
        let c = &conditions[0];
        assert_eq!(c.type_, condition::READY);
        assert_eq!(c.observed_generation, Some(GENERATION));
        (c.status.as_str(), c.reason.as_str(), c.message.as_str())
    }

    #[test]
    fn a_policys_status_lists_what_is_in_force_and_says_what_is_not() {
        let native = |entry: &str, listed, outcome| NativeResult {
            entry: entry.to_owned(),
            listed,
            outcome,
        };
        let partial = problem(
            condition::REASON_ENGINE_NOT_INSTALLED,
            "no KubeArmor",
            false,
        );
        let natives = [
            native("NetworkPolicy/a", true, NativeOutcome::Written),
            native("ConfigMap/b", false, NativeOutcome::Unchanged),
            native("KubeArmorPolicy/c", true, NativeOutcome::Unchanged),
        ];
        let planned = |problems: Vec<Problem>, external_entries: Vec<String>| PolicyPlan {
            claim: Claim::Bound,
            engines: EngineSet::default(),
            translation: Translation {
                objects: Vec::new(),
                problems,
            },
            external_entries,
        };
        let status = policy_status(
            &planned(vec![partial], vec!["KubeArmorPolicy/external".into()]),
            Some(2),
            &natives,
        );
        assert_eq!(
            status.adapter_policies,
            Some(vec![
                "KubeArmorPolicy/external".to_owned(),
                "NetworkPolicy/a".to_owned(),
                "KubeArmorPolicy/c".to_owned()
            ])
        );
        assert_eq!(status.number_of_adapter_policies, 3);
        let c = &status.conditions[0];
        assert_eq!(
            (c.status.as_str(), c.message.as_str()),
            ("True", "no KubeArmor")
        );

        let cases = [
            (
                NativeOutcome::Conflict,
                "PolicyConflict",
                "NetworkPolicy/a exists and is not owned by this policy",
            ),
            (NativeOutcome::Failed("boom".into()), "ApplyFailed", "boom"),
        ];
        for (outcome, reason, message) in cases {
            let status = policy_status(
                &planned(Vec::new(), Vec::new()),
                Some(2),
                &[native("NetworkPolicy/a", true, outcome)],
            );
            let c = &status.conditions[0];
            assert_eq!(
                (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
                ("False", reason, message)
            );
            assert_eq!(status.adapter_policies, None);
        }
    }

    #[test]
    fn a_bindings_status_for_every_blocker_and_policy_result() {
        let ok: NimbusPolicy = reported("NimbusPolicy", Some(condition::REASON_READY));
        let silent: NimbusPolicy = reported("NimbusPolicy", None);
        let both = sib(&["a", "x"], &[]);
        let planned = |b: &SecurityIntentBinding| plan::binding(b, existing(&["a"]), None);
        let cases: Vec<(
            &str,
            SecurityIntentBinding,
            Outcome<'_, NimbusPolicy>,
            Expected,
        )> = vec![
            (
                "in force",
                sib(&["a"], &[]),
                owned(Some(&ok), Ok(false)),
                ("True", "Ready", "NimbusPolicy b: policy says Ready"),
            ),
            (
                "just written: its policy has not reported on it",
                sib(&["a"], &[]),
                owned(Some(&ok), Ok(true)),
                (
                    "Unknown",
                    "Reconciling",
                    "waiting for NimbusPolicy b to be translated",
                ),
            ),
            (
                "created, not reported yet",
                sib(&["a"], &[]),
                owned(None, Ok(true)),
                (
                    "Unknown",
                    "Reconciling",
                    "waiting for NimbusPolicy b to be translated",
                ),
            ),
            (
                "no report yet",
                sib(&["a"], &[]),
                owned(Some(&silent), Ok(false)),
                (
                    "Unknown",
                    "Reconciling",
                    "waiting for NimbusPolicy b to be translated",
                ),
            ),
            (
                "an intent is missing",
                both.clone(),
                owned(Some(&ok), Ok(false)),
                (
                    "False",
                    "IntentNotFound",
                    "SecurityIntents not found: x; NimbusPolicy b: policy says Ready",
                ),
            ),
            (
                "no intent exists",
                sib(&["x"], &[]),
                owned(None, Ok(false)),
                ("False", "IntentNotFound", "SecurityIntents not found: x"),
            ),
            (
                "another object holds the name",
                sib(&["a"], &[]),
                Outcome::Conflict,
                (
                    "False",
                    "PolicyConflict",
                    "NimbusPolicy shop/b exists and is not owned by this binding",
                ),
            ),
            (
                "the write failed",
                sib(&["a"], &[]),
                owned(Some(&ok), Err("boom".into())),
                (
                    "False",
                    "ApplyFailed",
                    "boom; NimbusPolicy b: policy says Ready",
                ),
            ),
        ];
        for (what, binding, outcome, expected) in cases {
            let status = binding_status(&binding, &planned(&binding), outcome);
            assert_eq!(ready_of(&status.conditions), expected, "{what}");
            assert_eq!(status.observed_generation, Some(GENERATION), "{what}");
            // Not ready: stalled by a conflict, else waited for (a missing intent may come).
            let (ready, reason, message) = expected;
            let kstatus = match reason {
                "Ready" => None,
                "PolicyConflict" => Some((condition::STALLED, reason, message)),
                _ => Some((condition::RECONCILING, reason, message)),
            };
            assert_eq!(abnormal(&status.conditions), kstatus, "{what} ({ready})");
        }

        // What the policy reports is what the binding reports.
        for reason in [
            condition::REASON_UNSUPPORTED_INTENT,
            condition::REASON_ENGINE_NOT_INSTALLED,
            condition::REASON_ENGINE_DISABLED,
            condition::REASON_INVALID_PARAMETER,
            condition::REASON_UNSUPPORTED_SELECTOR,
            condition::REASON_ENGINE_NOT_READY,
            condition::REASON_SENSITIVE_INTENT_NOT_ALLOWED,
            condition::REASON_APPLY_FAILED,
            condition::REASON_POLICY_CONFLICT,
            condition::REASON_NOT_BOUND,
            condition::REASON_ENFORCEMENT_NOT_LIVE,
        ] {
            let policy: NimbusPolicy = reported("NimbusPolicy", Some(reason));
            let binding = sib(&["a"], &[]);
            let status = binding_status(
                &binding,
                &planned(&binding),
                owned(Some(&policy), Ok(false)),
            );
            let message = format!("NimbusPolicy b: policy says {reason}");
            assert_eq!(
                ready_of(&status.conditions),
                ("False", reason, message.as_str())
            );
            // And whether it stalls.
            let kstatus = if stalls(reason) {
                condition::STALLED
            } else {
                condition::RECONCILING
            };
            assert_eq!(
                abnormal(&status.conditions),
                Some((kstatus, reason, message.as_str())),
                "{reason}"
            );
        }

        // The Nimbus fields.
        let status = binding_status(&both, &planned(&both), owned(Some(&ok), Ok(false)));
        assert_eq!(
            (
                status.nimbus_policy.as_str(),
                status.number_of_bound_intents,
                status.bound_intents
            ),
            ("b", 1, Some(vec!["a".to_owned()]))
        );
        let status = binding_status(&both, &planned(&both), Outcome::Conflict);
        assert_eq!(
            (status.nimbus_policy.as_str(), status.bound_intents),
            ("", None)
        );

        // A selector that does not compile leaves what is in force, and says what was bound.
        let invalid = sib(&["a"], &["a"]);
        let plan = Err(CompileError::InvalidSelector(vec!["bad key".into()]));
        let status = binding_status(&invalid, &plan, Outcome::untouched(Some(&ok)));
        assert_eq!(
            ready_of(&status.conditions),
            (
                "False",
                "InvalidSelector",
                "invalid label selector: bad key"
            )
        );
        assert_eq!(status.bound_intents, Some(vec!["a".to_owned()]));
        assert_eq!(status.nimbus_policy, "p");
    }

    #[test]
    fn a_cluster_bindings_status_for_every_blocker() {
        let ok: NimbusPolicy = reported("NimbusPolicy", Some(condition::REASON_READY));
        let cluster_ok: ClusterNimbusPolicy =
            reported("ClusterNimbusPolicy", Some(condition::REASON_READY));
        let namespaces = [namespace("a"), namespace("b"), namespace("kube-system")];
        let protected = ProtectedNamespaces::defaults(None, "k8tls");
        let planned = |c: &ClusterSecurityIntentBinding| {
            plan::cluster_binding(c, existing(&["i"]), namespaces.iter(), &protected)
        };
        let everywhere = csib(&["i"], &["*"]);
        let plan = planned(&everywhere);
        let selected = plan.as_ref().expect("a plan").namespaces.clone();
        assert_eq!(
            selected
                .iter()
                .map(|(n, p)| (n.as_str(), p.is_some()))
                .collect::<Vec<_>>(),
            [("a", true), ("b", true), ("kube-system", false)]
        );

        let in_force = [
            owned(Some(&ok), Ok(false)),
            owned(Some(&ok), Ok(false)),
            owned(None, Ok(false)),
        ];
        let status = cluster_binding_status(
            &everywhere,
            &plan,
            owned(None, Ok(true)),
            &in_force,
            &protected,
        );
        assert_eq!(
            ready_of(&status.conditions),
            (
                "Unknown",
                "Reconciling",
                "waiting for ClusterNimbusPolicy c to be translated"
            )
        );
        let status = cluster_binding_status(
            &everywhere,
            &plan,
            owned(Some(&cluster_ok), Ok(false)),
            &in_force,
            &protected,
        );
        assert_eq!(
            ready_of(&status.conditions),
            (
                "True",
                "Ready",
                "ClusterNimbusPolicy c, a, b: policy says Ready"
            )
        );
        assert_eq!(
            status.nimbus_policy_namespaces,
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(
            (
                status.number_of_nimbus_policies,
                status.cluster_nimbus_policy.as_str()
            ),
            (2, "c")
        );

        let cases: Vec<ClusterCase> = vec![
            (
                "a namespace's name is taken",
                owned(Some(&cluster_ok), Ok(false)),
                vec![
                    Outcome::Conflict,
                    owned(Some(&ok), Ok(false)),
                    owned(None, Ok(false)),
                ],
                (
                    "False",
                    "PolicyConflict",
                    "NimbusPolicy a/nimbus-ctlr-gen-c exists and is not owned by this binding; ClusterNimbusPolicy c, b: policy says Ready",
                ),
            ),
            (
                "the cluster policy's name is taken",
                Outcome::Conflict,
                vec![
                    owned(Some(&ok), Ok(false)),
                    owned(Some(&ok), Ok(false)),
                    owned(None, Ok(false)),
                ],
                (
                    "False",
                    "PolicyConflict",
                    "ClusterNimbusPolicy c exists and is not owned by this binding; a, b: policy says Ready",
                ),
            ),
            (
                "a write failed",
                owned(Some(&cluster_ok), Err("cluster boom".into())),
                vec![
                    owned(Some(&ok), Ok(false)),
                    owned(Some(&ok), Err("boom".into())),
                    owned(None, Ok(false)),
                ],
                (
                    "False",
                    "ApplyFailed",
                    "cluster boom; boom; a: policy says Ready",
                ),
            ),
        ];
        for (what, cluster, namespaces, expected) in cases {
            let status =
                cluster_binding_status(&everywhere, &plan, cluster, &namespaces, &protected);
            assert_eq!(ready_of(&status.conditions), expected, "{what}");
        }

        let nowhere = csib(&["i"], &["kube-system"]);
        let untouched = [
            owned(None, Ok(false)),
            owned(None, Ok(false)),
            owned(None, Ok(false)),
        ];
        let status = cluster_binding_status(
            &nowhere,
            &planned(&nowhere),
            owned(Some(&cluster_ok), Ok(false)),
            &untouched,
            &protected,
        );
        let (s, reason, message) = ready_of(&status.conditions);
        assert_eq!((s, reason), ("False", "NoNamespaceSelected"));
        assert!(message.starts_with("no namespace is selected"), "{message}");

        let missing = csib(&["i", "gone"], &["a"]);
        let status = cluster_binding_status(
            &missing,
            &planned(&missing),
            owned(Some(&cluster_ok), Ok(false)),
            &[
                owned(Some(&ok), Ok(false)),
                owned(None, Ok(false)),
                owned(None, Ok(false)),
            ],
            &protected,
        );
        assert_eq!(ready_of(&status.conditions).1, "IntentNotFound");

        let invalid = Err(CompileError::NamespaceSelector(
            "matchNames and excludeNames".into(),
        ));
        let status = cluster_binding_status(
            &everywhere,
            &invalid,
            Outcome::untouched(None),
            &[],
            &protected,
        );
        assert_eq!(
            ready_of(&status.conditions),
            (
                "False",
                "InvalidNamespaceSelector",
                "invalid namespace selector: matchNames and excludeNames"
            )
        );
        assert_eq!(status.status, STATUS_VALIDATION_FAIL);
    }

    fn problem(reason: &'static str, message: &str, blocking: bool) -> Problem {
        Problem {
            intent: "i".into(),
            reason,
            message: message.into(),
            blocking,
        }
    }

    #[test]
    fn not_known_yet_is_written_only_over_a_status_of_the_same_generation() {
        let pending = |generation| reconciling("waiting".into(), Some(generation));
        let done = |generation| ready(true, condition::REASON_READY, "", Some(generation));
        // A report on an older generation: the stale status says it.
        assert!(only_pending(&[done(1)], &[pending(2)]));
        // Nothing reported yet: kstatus would take the object for Current, so say it.
        assert!(!only_pending(&[], &[pending(1)]));
        // The same generation turning not known (an intent changed under it): say so.
        assert!(!only_pending(&[done(2)], &[pending(2)]));
        // Anything known is written.
        assert!(!only_pending(&[], &[done(1)]));
        assert!(!only_pending(&[done(1)], &[ready(false, "X", "", Some(2))]));
    }

    #[test]
    fn a_change_ends_when_it_is_in_force_or_stalled_not_while_it_waits() {
        let waiting = |generation| {
            let ready = ready(
                false,
                condition::REASON_INTENT_NOT_FOUND,
                "",
                Some(generation),
            );
            conditions::with_kstatus(ready, conditions::Stall::default())
        };
        let stalled = |generation| {
            let mut stall = conditions::Stall::default();
            stall.add(condition::REASON_UNSUPPORTED_INTENT, "no such intent");
            let ready = ready(
                false,
                condition::REASON_UNSUPPORTED_INTENT,
                "",
                Some(generation),
            );
            conditions::with_kstatus(ready, stall)
        };
        let done = |generation| vec![ready(true, condition::REASON_READY, "", Some(generation))];
        let cases = [
            ("in force at this generation", done(2), true),
            ("stalled at this generation", stalled(2), true),
            (
                "waiting for an intent at this generation",
                waiting(2),
                false,
            ),
            ("in force at an older generation", done(1), false),
            ("stalled at an older generation", stalled(1), false),
            ("no status yet", vec![], false),
        ];
        for (what, conditions, ended) in cases {
            assert_eq!(change_ended(&conditions, Some(2)), ended, "{what}");
        }
    }

    #[test]
    fn a_policy_is_ready_unless_an_intent_is_left_unenforced() {
        let partial = problem(condition::REASON_ENGINE_NOT_INSTALLED, "in part", false);
        let c = policy_ready(std::slice::from_ref(&partial), Some(3));
        assert_eq!((c.status.as_str(), c.message.as_str()), ("True", "in part"));
        assert_eq!(c.observed_generation, Some(3));
        let none = problem(condition::REASON_UNSUPPORTED_INTENT, "not at all", true);
        let c = policy_ready(&[partial, none], Some(3));
        assert_eq!(c.status, "False");
        assert_eq!(c.reason, condition::REASON_UNSUPPORTED_INTENT);
        assert_eq!(c.message, "in part; not at all");
    }

    #[test]
    fn a_binding_is_never_readier_than_its_policies() {
        let report = |conditions: Vec<Condition>| {
            Some(PolicyReport {
                ready: conditions[0].clone(),
                stalled: conditions
                    .get(1)
                    .filter(|c| c.type_ == condition::STALLED)
                    .cloned(),
            })
        };
        let ok =
            |message: &str| report(vec![ready(true, condition::REASON_READY, message, Some(1))]);
        let down = report(not_ready(
            condition::REASON_APPLY_FAILED,
            "boom".into(),
            Some(1),
        ));
        let stuck = report(not_ready(
            condition::REASON_UNSUPPORTED_INTENT,
            "no".into(),
            Some(1),
        ));
        // Enforced with a parameter's default: ready, and stalled all the same.
        let defaulted = report(policy_conditions(
            &[problem(condition::REASON_INVALID_PARAMETER, "bad", false)],
            Some(1),
        ));
        let blocker = || Blocker {
            reason: condition::REASON_INTENT_NOT_FOUND,
            message: "SecurityIntents not found: x".into(),
        };
        let conflict = || Blocker {
            reason: condition::REASON_POLICY_CONFLICT,
            message: "taken".into(),
        };
        /// What, the blockers, the policies' reports, `Ready` and the abnormal condition.
        type Case<'a> = (
            &'a str,
            Vec<Blocker>,
            Vec<(&'a str, Option<PolicyReport>)>,
            Expected,
            Option<Expected>,
        );
        let cases: Vec<Case> = vec![
            (
                "all ready",
                vec![],
                vec![("a", ok("")), ("b", ok(""))],
                ("True", "Ready", ""),
                None,
            ),
            (
                "one message over many namespaces is grouped",
                vec![],
                vec![("a", ok("m")), ("b", ok("m"))],
                ("True", "Ready", "a, b: m"),
                None,
            ),
            (
                "one not translated yet",
                vec![],
                vec![("a", ok("")), ("b", None)],
                ("Unknown", "Reconciling", "waiting for b to be translated"),
                Some((
                    "Reconciling",
                    "Reconciling",
                    "waiting for b to be translated",
                )),
            ),
            (
                "one failed a write: retried",
                vec![],
                vec![("a", ok("")), ("b", down)],
                ("False", "ApplyFailed", "b: boom"),
                Some(("Reconciling", "ApplyFailed", "b: boom")),
            ),
            (
                "one stalled",
                vec![],
                vec![("a", stuck), ("b", None)],
                ("False", "UnsupportedIntent", "a: no"),
                Some(("Stalled", "UnsupportedIntent", "a: no")),
            ),
            (
                "one enforced with a default",
                vec![],
                vec![("a", defaulted)],
                ("True", "Ready", "a: bad"),
                Some(("Stalled", "InvalidParameter", "a: bad")),
            ),
            (
                "an intent is missing: waited for",
                vec![blocker()],
                vec![("a", ok(""))],
                ("False", "IntentNotFound", "SecurityIntents not found: x"),
                Some((
                    "Reconciling",
                    "IntentNotFound",
                    "SecurityIntents not found: x",
                )),
            ),
            (
                "a conflict stalls, whatever else waits",
                vec![blocker(), conflict()],
                vec![("a", ok(""))],
                (
                    "False",
                    "IntentNotFound",
                    "SecurityIntents not found: x; taken",
                ),
                Some(("Stalled", "PolicyConflict", "taken")),
            ),
        ];
        for (what, blockers, policies, expected, kstatus) in cases {
            let policies: Vec<(String, Option<PolicyReport>)> = policies
                .into_iter()
                .map(|(n, r)| (n.to_owned(), r))
                .collect();
            let c = binding_conditions(Some(2), blockers, &policies);
            let ready = &c[0];
            assert_eq!(
                (
                    ready.status.as_str(),
                    ready.reason.as_str(),
                    ready.message.as_str()
                ),
                expected,
                "{what}"
            );
            assert!(c.iter().all(|c| c.observed_generation == Some(2)), "{what}");
            assert_eq!(abnormal(&c), kstatus, "{what}");
        }
    }

    #[test]
    fn kstatus_conditions_for_every_reason() {
        let reasons = [
            (condition::REASON_UNSUPPORTED_INTENT, true),
            (condition::REASON_INVALID_SELECTOR, true),
            (condition::REASON_INVALID_NAMESPACE_SELECTOR, true),
            (condition::REASON_UNSUPPORTED_SELECTOR, true),
            (condition::REASON_POLICY_CONFLICT, true),
            (condition::REASON_SENSITIVE_INTENT_NOT_ALLOWED, true),
            (condition::REASON_INVALID_PARAMETER, true),
            (condition::REASON_ENGINE_DISABLED, true),
            (condition::REASON_NOT_BOUND, true),
            (condition::REASON_ENFORCEMENT_NOT_LIVE, true),
            (condition::REASON_INTENT_NOT_FOUND, false),
            (condition::REASON_ENGINE_NOT_INSTALLED, false),
            (condition::REASON_ENGINE_NOT_READY, false),
            (condition::REASON_NO_NAMESPACE_SELECTED, false),
            (condition::REASON_APPLY_FAILED, false),
            (condition::REASON_RECONCILING, false),
            (condition::REASON_NO_AUDIT_FORM, false),
        ];
        for (reason, stalled) in reasons {
            assert_eq!(stalls(reason), stalled, "{reason}");
            // Blocking: not ready, and either stalled or waited for.
            let c = policy_conditions(&[problem(reason, "why", true)], Some(3));
            let kstatus = if stalled { "Stalled" } else { "Reconciling" };
            assert_eq!(c[0].status, "False", "{reason}");
            assert_eq!(abnormal(&c), Some((kstatus, reason, "why")), "{reason}");
            // Partial: ready, and stalled only by a parameter not applied as written.
            let c = policy_conditions(&[problem(reason, "why", false)], Some(3));
            assert_eq!(c[0].status, "True", "{reason}");
            let expected = (reason == condition::REASON_INVALID_PARAMETER)
                .then_some(("Stalled", reason, "why"));
            assert_eq!(abnormal(&c), expected, "{reason}");
        }
        // In force: `Ready` alone, as kstatus wants a healthy object.
        let c = policy_conditions(&[], Some(3));
        assert_eq!((c.len(), c[0].status.as_str()), (1, "True"));
    }

    #[test]
    fn an_intents_status_says_whether_the_catalog_knows_it_and_its_parameters() {
        let si = |id: &str, params: serde_json::Value| -> SecurityIntent {
            serde_json::from_value(json!({
                "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
                "metadata": {"name": "i", "generation": 2},
                "spec": {"intent": {"id": id, "action": "Block", "params": params}}
            }))
            .expect("an intent")
        };
        let status = intent_status(&si("dnsManipulation", json!({})));
        assert_eq!(
            (status.id.as_str(), status.action.as_str()),
            ("dnsManipulation", "Block")
        );
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!(status.conditions.len(), 1);
        assert_eq!(status.conditions[0].status, "True");

        let status = intent_status(&si("noSuchIntent", json!({})));
        assert_eq!(
            abnormal(&status.conditions),
            Some((
                "Stalled",
                "UnsupportedIntent",
                "intent `noSuchIntent` is not in the catalog"
            ))
        );
        assert_eq!(status.conditions[0].status, "False");

        let status = intent_status(&si("dnsManipulation", json!({"nope": ["x"]})));
        let (kind, reason, _) = abnormal(&status.conditions).expect("stalled");
        assert_eq!((kind, reason), ("Stalled", "InvalidParameter"));
    }
}
