use super::*;
use crate::engines::Preference;
use crate::status::{self, NativeOutcome, NativeResult};
use serde_json::json;

const MANAGER: &str = "nimbus-operator";
const UID: &str = "policy-uid";

fn binding() -> SecurityIntentBinding {
    serde_json::from_value(json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
        "metadata": {"name": "web", "namespace": "team", "uid": "binding-uid"},
        "spec": {"intents": [{"name": "escape"}], "selector": {"workloadSelector": {"matchLabels": {"app": "web"}}}}
    }))
    .expect("valid binding")
}

/// The NimbusPolicy `binding()` generates, with `rules`, its body written by `managers` (status
/// writes by `status_managers`).
fn policy(rules: serde_json::Value, managers: &[&str], status_managers: &[&str]) -> NimbusPolicy {
    let body = |manager: &&str| {
        json!({
            "manager": manager, "operation": "Apply", "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}, "f:spec": {}}
        })
    };
    let status = |manager: &&str| {
        json!({
            "manager": manager, "operation": "Apply", "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}, "subresource": "status"
        })
    };
    let managed: Vec<_> = managers
        .iter()
        .map(body)
        .chain(status_managers.iter().map(status))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "NimbusPolicy",
        "metadata": {
            "name": "web", "namespace": "team", "uid": UID, "managedFields": managed,
            "ownerReferences": [{"apiVersion": "intent.security.nimbus.com/v1alpha1",
                "kind": "SecurityIntentBinding", "name": "web", "uid": "binding-uid", "controller": true}]
        },
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "rules": rules}
    }))
    .expect("valid policy")
}

fn escape_to_host() -> serde_json::Value {
    json!([{"id": "escapeToHost", "rule": {"action": "Block"}}])
}

fn claim(np: &NimbusPolicy, binding_exists: bool) -> Claim {
    let sib = binding();
    Claim::namespaced(
        np,
        |ns, name| (binding_exists && ns == "team" && name == "web").then_some(&sib),
        |_| None::<ClusterSecurityIntentBinding>,
        &ProtectedNamespaces::default(),
        MANAGER,
    )
}

/// A claim case: what it is, who wrote the policy's body and its status, whether its binding
/// exists, and the claim.
type ClaimCase = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    bool,
    Claim,
);

#[test]
fn only_a_binding_generated_policy_the_operator_wrote_is_bound() {
    let cases: [ClaimCase; 7] = [
        ("the operator's", &[MANAGER], &[], true, Claim::Bound),
        (
            "others wrote only its status",
            &[MANAGER],
            &["kubectl"],
            true,
            Claim::Bound,
        ),
        (
            "tampered with",
            &[MANAGER, "kubectl-edit"],
            &[],
            true,
            Claim::Restoring,
        ),
        (
            "left by the original Nimbus",
            &["nimbus"],
            &[MANAGER],
            true,
            Claim::Restoring,
        ),
        // Whoever strips managedFields (one empty entry) leaves no writer to check: not ours.
        (
            "its managedFields stripped",
            &[],
            &[],
            true,
            Claim::Restoring,
        ),
        ("its binding gone", &[MANAGER], &[], false, Claim::NotBound),
        (
            "someone's, its binding gone",
            &["kubectl"],
            &[],
            false,
            Claim::NotBound,
        ),
    ];
    for (what, managers, status_managers, binding_exists, expected) in cases {
        let np = policy(escape_to_host(), managers, status_managers);
        assert_eq!(claim(&np, binding_exists), expected, "{what}");
    }
}

fn engines(enabled: &[Engine], preference: &[Engine]) -> EngineSet {
    EngineSet {
        enabled: enabled.iter().copied().collect(),
        installed: enabled.iter().copied().collect(),
        preference: Preference::new(preference).expect("a valid preference"),
        ..EngineSet::default()
    }
}

fn planned(np: &NimbusPolicy, engines: EngineSet, claim: Claim) -> PolicyPlan {
    let input = PolicyInput::namespaced(np, UID);
    plan(&input, &Environment::default(), engines, claim, &[])
}

#[test]
fn a_policy_no_binding_generates_writes_nothing_and_says_why() {
    let np = policy(escape_to_host(), &[MANAGER], &[]);
    let all = engines(&Engine::ALL, &[]);
    for (claim, writes) in [
        (Claim::Bound, true),
        (Claim::Restoring, true),
        (Claim::NotBound, false),
    ] {
        let plan = planned(&np, all.clone(), claim);
        assert_eq!(!plan.translation.objects.is_empty(), writes, "{claim:?}");
        assert_eq!(plan.executes(), claim == Claim::Bound, "{claim:?}");
        let status = status::policy_status(&plan, Some(1), &[]);
        let ready = &status.conditions[0];
        let not_bound = ready.reason == condition::REASON_NOT_BOUND;
        assert_eq!(not_bound, !writes, "{claim:?}: {ready:?}");
    }
}

/// The ClusterNimbusPolicy of a cluster binding of escapeToHost, which both engines of the
/// admission-control mechanism enforce.
fn cluster_policy() -> ClusterNimbusPolicy {
    serde_json::from_value(json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterNimbusPolicy",
        "metadata": {"name": "no-escape", "uid": UID},
        "spec": {"nsSelector": {"matchNames": ["team"]}, "rules": escape_to_host()}
    }))
    .expect("valid policy")
}

fn planned_cluster(engines: EngineSet, reported: &[&str]) -> PolicyPlan {
    let reported: Vec<String> = reported.iter().map(|e| (*e).to_owned()).collect();
    let cnp = cluster_policy();
    let input = PolicyInput::cluster(&cnp, UID);
    plan(
        &input,
        &Environment::default(),
        engines,
        Claim::Bound,
        &reported,
    )
}

#[test]
fn entries_external_adapters_report_count_for_the_engines_switched_off_here() {
    // Kyverno switched off here, and an adapter reports its ClusterPolicy: it enforces
    // escapeToHost, so the admission engine, preferred after it, stands by. An entry of an
    // engine switched on here is not the adapter's.
    let adapters = "KyvernoClusterPolicy/no-escape-escapetohost";
    let reported = [adapters, "ValidatingAdmissionPolicy/not-the-adapters"];
    let plan = planned_cluster(engines(&[Engine::Admission], &[]), &reported);
    assert_eq!(plan.engines.external, BTreeSet::from([Engine::Kyverno]));
    assert_eq!(plan.external_entries, [adapters]);
    assert!(
        plan.translation.objects.is_empty(),
        "{:?}",
        plan.translation.objects
    );
    let status = status::policy_status(&plan, Some(1), &[]);
    assert_eq!(
        status.conditions[0].status, "True",
        "{:?}",
        status.conditions
    );
    assert_eq!(status.adapter_policies, Some(vec![adapters.to_owned()]));

    // Nothing reported: no engine is external, and the admission engine writes.
    let plan = planned_cluster(engines(&[Engine::Admission], &[]), &[]);
    assert!(plan.engines.external.is_empty() && plan.external_entries.is_empty());
    assert!(!plan.translation.objects.is_empty());
    assert!(
        plan.translation
            .objects
            .iter()
            .all(|g| g.engine == Engine::Admission)
    );
}

#[test]
fn an_engine_handed_over_from_keeps_its_objects_until_the_new_ones_act() {
    // The admission engine preferred: Kyverno stands by.
    let plan = planned_cluster(engines(&Engine::ALL, &[Engine::Admission]), &[]);
    let origin = Origin::Cluster;
    let standing_by = plan.standing_by(origin);
    assert!(standing_by.contains(&Engine::Kyverno) && !standing_by.contains(&Engine::Admission));
    let holds_kyverno = |e: Engine| e == Engine::Kyverno;
    let cases = [
        (
            "the new objects not acting yet",
            None,
            Some(engines::HANDOVER),
        ),
        (
            "acting for 10 s",
            Some(10),
            Some(engines::HANDOVER - Duration::from_secs(10)),
        ),
        ("acting long enough", Some(30), None),
    ];
    for (what, acting_for, wait) in cases {
        let handover = plan.handover(
            origin,
            holds_kyverno,
            |g| {
                assert_eq!(
                    g.engine,
                    Engine::Admission,
                    "only the engine in force is waited for"
                );
                acting_for.map(Duration::from_secs)
            },
            |_| panic!("Kyverno and admission write from the same policy"),
        );
        assert_eq!(handover.as_ref().map(|h| h.wait), wait, "{what}");
        assert_eq!(
            plan.prunes(Engine::Kyverno, handover.as_ref()),
            wait.is_none(),
            "{what}"
        );
        assert!(plan.prunes(Engine::Admission, handover.as_ref()), "{what}");
    }
    // Nothing of Kyverno's left: nothing to hand over.
    assert_eq!(
        plan.handover(origin, |_| false, |_| None, |_| Vec::new()),
        None
    );
    // A policy the controller does not execute prunes nothing.
    let restoring = PolicyPlan {
        claim: Claim::Restoring,
        ..plan
    };
    assert!(!restoring.prunes(Engine::Admission, None));
}

#[test]
fn a_conflict_or_failed_write_outranks_a_clean_translation_and_a_blocking_problem_comes_first() {
    let np = policy(escape_to_host(), &[MANAGER], &[]);
    let plan = planned(&np, engines(&Engine::ALL, &[]), Claim::Bound);
    let entry = plan.translation.objects[0].entry();
    let native = |outcome| NativeResult {
        entry: entry.clone(),
        listed: true,
        outcome,
    };
    let reason = |natives: &[NativeResult], plan: &PolicyPlan| {
        let status = status::policy_status(plan, Some(1), natives);
        (status.conditions[0].reason.clone(), status.adapter_policies)
    };
    assert_eq!(
        reason(&[native(NativeOutcome::Written)], &plan),
        (
            condition::REASON_READY.to_owned(),
            Some(vec![entry.clone()])
        )
    );
    assert_eq!(
        reason(&[native(NativeOutcome::Conflict)], &plan),
        (condition::REASON_POLICY_CONFLICT.to_owned(), None)
    );
    assert_eq!(
        reason(&[native(NativeOutcome::Failed("refused".into()))], &plan),
        (condition::REASON_APPLY_FAILED.to_owned(), None)
    );
    // Not bound: that is the reason, whatever the writes did.
    let unbound = PolicyPlan {
        translation: Translation {
            objects: Vec::new(),
            problems: vec![not_bound()],
        },
        ..plan.clone()
    };
    assert_eq!(
        reason(&[native(NativeOutcome::Conflict)], &unbound).0,
        condition::REASON_NOT_BOUND
    );
}

#[test]
fn a_network_engine_handed_over_waits_for_the_other_policies_of_its_binding() {
    // dnsManipulation of a cluster binding: NetworkPolicies from each namespace's policy, or
    // one ClusterNetworkPolicy from the cluster policy. Whichever takes over, the objects of
    // the other are kept until the new ones, written from the binding's other policies, act.
    let dns = json!([{"id": "dnsManipulation", "rule": {"action": "Block"}}]);
    let mut namespace_policy = policy(dns.clone(), &[MANAGER], &[]);
    namespace_policy.metadata.owner_references =
        Some(vec![crate::objects::controller_reference::<
            ClusterSecurityIntentBinding,
        >("web", "csib-uid")]);
    let mut cluster = cluster_policy();
    cluster.spec.rules = serde_json::from_value(dns).expect("rules");
    let s = |secs| Some(Duration::from_secs(secs));
    // (what, preferred, whose objects the policy holds, ages elsewhere, wait)
    type Case<'a> = (
        &'a str,
        Engine,
        Engine,
        Vec<Option<Duration>>,
        Option<Duration>,
    );
    let cases: [Case; 5] = [
        (
            "not written yet",
            Engine::ClusterNetworkPolicy,
            Engine::NetworkPolicy,
            vec![None],
            Some(engines::HANDOVER),
        ),
        (
            "acting for 10 s",
            Engine::ClusterNetworkPolicy,
            Engine::NetworkPolicy,
            vec![s(10)],
            Some(engines::HANDOVER - Duration::from_secs(10)),
        ),
        (
            "acting long enough",
            Engine::ClusterNetworkPolicy,
            Engine::NetworkPolicy,
            vec![s(30)],
            None,
        ),
        (
            "back: one namespace not written yet",
            Engine::NetworkPolicy,
            Engine::ClusterNetworkPolicy,
            vec![s(40), None],
            Some(engines::HANDOVER),
        ),
        (
            "back: every namespace's acting",
            Engine::NetworkPolicy,
            Engine::ClusterNetworkPolicy,
            vec![s(40), s(31)],
            None,
        ),
    ];
    for (what, preferred, held, elsewhere, wait) in cases {
        let all = engines(&Engine::ALL, &[preferred]);
        let (plan, origin) = match held {
            Engine::NetworkPolicy => (
                planned(&namespace_policy, all, Claim::Bound),
                Origin::ClusterBindingNamespace,
            ),
            _ => (
                plan(
                    &PolicyInput::cluster(&cluster, UID),
                    &Environment::default(),
                    all,
                    Claim::Bound,
                    &[],
                ),
                Origin::Cluster,
            ),
        };
        assert!(plan.standing_by(origin).contains(&held), "{what}");
        let handover = plan.handover(
            origin,
            |e| e == held,
            |g| panic!("{what}: {} does not write from this policy", g.engine),
            |e| {
                assert_eq!(e, preferred, "{what}");
                elsewhere.clone()
            },
        );
        assert_eq!(handover.as_ref().map(|h| h.wait), wait, "{what}");
        assert_eq!(
            plan.prunes(held, handover.as_ref()),
            wait.is_none(),
            "{what}"
        );
    }
}

/// A policy whose controlling binding is gone is the garbage collector's: nothing is written
/// for it. One a binding still controls, or that no binding controls, reports.
#[test]
fn a_policy_whose_binding_is_gone_is_orphaned() {
    let np = policy(escape_to_host(), &[MANAGER], &[]);
    let by_uid = |uid: &'static str| move |o: &OwnerReference| o.uid == uid;
    assert!(!orphaned(&np, by_uid("binding-uid")), "its binding exists");
    assert!(orphaned(&np, |_| false), "its binding is gone");
    assert!(orphaned(&np, by_uid("a-new-binding-uid")), "re-created");
    let mut unowned = np.clone();
    unowned.metadata.owner_references = None;
    assert!(!orphaned(&unowned, |_| false), "no binding controls it");
    let mut other = np;
    if let Some(owner) = other
        .metadata
        .owner_references
        .as_mut()
        .and_then(|o| o.first_mut())
    {
        owner.kind = "Deployment".into();
        owner.api_version = "apps/v1".into();
    }
    assert!(!orphaned(&other, |_| false), "not a binding's");
}
