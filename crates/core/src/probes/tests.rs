use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

fn selector(labels: &[(&str, &str)], exprs: &[(&str, &str, &[&str])]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        match_expressions: Some(
            exprs
                .iter()
                .map(|(key, op, values)| LabelSelectorRequirement {
                    key: (*key).to_owned(),
                    operator: (*op).to_owned(),
                    values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
                })
                .collect(),
        ),
    }
}

fn key(engine: Engine) -> Key {
    Key {
        policy_uid: "uid".into(),
        intent: id::ESCAPE_TO_HOST.into(),
        engine,
    }
}

#[test]
fn probe_labels_satisfy_the_selector_or_there_is_no_probe() {
    type Labels<'a> = Option<&'a [(&'a str, &'a str)]>;
    let cases: &[(LabelSelector, Labels)] = &[
        (selector(&[("app", "web")], &[]), Some(&[("app", "web")])),
        (
            selector(&[], &[("tier", "In", &["db", "cache"])]),
            Some(&[("tier", "db")]),
        ),
        (
            selector(&[("tier", "cache")], &[("tier", "In", &["db", "cache"])]),
            Some(&[("tier", "cache")]),
        ),
        (
            selector(&[], &[("team", "Exists", &[])]),
            Some(&[("team", "nimbus-probe")]),
        ),
        (selector(&[], &[("env", "NotIn", &["prod"])]), Some(&[])),
        (selector(&[], &[("env", "DoesNotExist", &[])]), Some(&[])),
        // Unsatisfiable: a label both required and forbidden.
        (
            selector(&[("env", "prod")], &[("env", "NotIn", &["prod"])]),
            None,
        ),
        (
            selector(&[("env", "prod")], &[("env", "DoesNotExist", &[])]),
            None,
        ),
        (
            selector(&[("env", "prod")], &[("env", "In", &["dev"])]),
            None,
        ),
    ];
    for (sel, want) in cases {
        let want = want.map(|w| {
            w.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>()
        });
        assert_eq!(labels_for(sel), want, "{sel:?}");
        let pod = probe_pod(sel, &key(Engine::Kyverno));
        assert_eq!(pod.is_some(), want.is_some(), "{sel:?}");
    }
}

#[test]
fn the_probe_is_a_privileged_pod_the_selector_selects() {
    let sel = selector(&[("app", "web")], &[]);
    let pod = probe_pod(&sel, &key(Engine::Admission)).expect("a probe");
    assert_eq!(pod["metadata"]["labels"]["app"], "web");
    assert_eq!(pod["metadata"]["labels"][PROBE_LABEL], "admission");
    assert_eq!(pod["metadata"]["generateName"], "nimbus-probe-");
    assert_eq!(
        pod["spec"]["containers"][0]["securityContext"]["privileged"],
        true
    );
    // A selector that excludes the probe label keeps the probe selected, without it.
    let sel = selector(&[("app", "web")], &[(PROBE_LABEL, "DoesNotExist", &[])]);
    let pod = probe_pod(&sel, &key(Engine::Admission)).expect("a probe");
    assert!(pod["metadata"]["labels"].get(PROBE_LABEL).is_none());
}

fn refused(code: u16, reason: &str, message: &str) -> Response {
    Response::Refused {
        code,
        reason: reason.into(),
        message: message.into(),
    }
}

#[test]
fn an_answer_is_the_engines_only_when_it_names_the_engines_object() {
    let natives = vec!["escapetohost-binding".to_owned()];
    let kyverno = "admission webhook \"validate.kyverno.svc-fail\" denied the request: \n\n\
                   resource Pod/ns/ was blocked due to the following policies \n\n\
                   escapetohost-binding:\n  pod-security-standard: 'Validation rule failed'";
    let vap = "pods \"nimbus-probe-x\" is forbidden: ValidatingAdmissionPolicy \
               'escapetohost-binding' with binding 'escapetohost-binding' denied request: \
               escapeToHost (baseline Pod Security Standard): privileged";
    let psa = "pods \"nimbus-probe-x\" is forbidden: violates PodSecurity \"baseline:latest\": \
               privileged (container \"probe\" must not set securityContext.privileged=true)";
    let other = "admission webhook \"validate.kyverno.svc-fail\" denied the request: \n\n\
                 resource Pod/ns/ was blocked due to the following policies \n\n\
                 someone-elses:\n  rule: 'no'";
    let unreachable = "Internal error occurred: failed calling webhook \
                       \"validate.kyverno.svc-fail\": connection refused";
    let rbac = "pods is forbidden: User \"system:serviceaccount:nimbus:nimbus\" cannot create \
                resource \"pods\" in API group \"\" in the namespace \"ns\"";
    use Outcome::*;
    let cases = [
        (Engine::Kyverno, Response::Admitted, Admitted),
        (Engine::Admission, Response::Admitted, Admitted),
        (
            Engine::Kyverno,
            refused(409, "AlreadyExists", "exists"),
            Admitted,
        ),
        (
            Engine::Kyverno,
            refused(400, "BadRequest", kyverno),
            DeniedByEngine,
        ),
        (
            Engine::Admission,
            refused(403, "Forbidden", vap),
            DeniedByEngine,
        ),
        // Another engine's message does not prove this one live.
        (
            Engine::Admission,
            refused(400, "BadRequest", kyverno),
            DeniedElsewhere(kyverno.into()),
        ),
        (
            Engine::Kyverno,
            refused(403, "Forbidden", vap),
            DeniedElsewhere(vap.into()),
        ),
        (
            Engine::Kyverno,
            refused(403, "Forbidden", psa),
            DeniedElsewhere(psa.into()),
        ),
        (
            Engine::Kyverno,
            refused(400, "BadRequest", other),
            DeniedElsewhere(other.into()),
        ),
        (
            Engine::Kyverno,
            refused(500, "InternalError", unreachable),
            WebhookCallFailed(unreachable.into()),
        ),
        (
            Engine::Kyverno,
            refused(403, "Forbidden", rbac),
            Failed(rbac.into()),
        ),
        (
            Engine::Kyverno,
            Response::Unsent("connection reset".into()),
            Failed("connection reset".into()),
        ),
    ];
    for (engine, response, want) in cases {
        assert_eq!(classify(engine, &natives, &response), want, "{response:?}");
    }
}

#[test]
fn only_an_admitted_probe_proves_enforcement_not_live() {
    let seen = |outcome| Observed { outcome, at: None };
    use LiveState::*;
    let cases = [
        (
            Outcome::DeniedByEngine,
            Live,
            reason::DENIED_BY_ENGINE,
            false,
        ),
        (Outcome::Admitted, NotLive, reason::NOT_LIVE, true),
        (
            Outcome::WebhookCallFailed("x".into()),
            Unverified,
            reason::WEBHOOK_CALL_FAILED,
            false,
        ),
        (
            Outcome::DeniedElsewhere("x".into()),
            Unverified,
            reason::DENIED_ELSEWHERE,
            false,
        ),
        (
            Outcome::Failed("x".into()),
            Unverified,
            reason::PROBE_FAILED,
            false,
        ),
    ];
    for (outcome, state, why, dead) in cases {
        let observed = seen(outcome.clone());
        let live = liveness(&[(Engine::Kyverno, Probed::Answered(observed.clone()))]);
        assert_eq!(
            (live.state, live.reason.as_str()),
            (state, why),
            "{outcome:?}"
        );
        assert_eq!(not_live(Some(&observed)), dead, "{outcome:?}");
    }
    assert!(!not_live(None));
    let never = liveness(&[(Engine::KubeArmor, Probed::NotProbeable)]);
    assert_eq!(
        (never.state, never.reason.as_str()),
        (NotProbed, reason::NOT_PROBEABLE)
    );
    let due = liveness(&[(Engine::Kyverno, Probed::Due)]);
    assert_eq!(
        (due.state, due.reason.as_str()),
        (NotProbed, reason::NOT_PROBED_YET)
    );
    // The worst engine decides.
    let live = seen(Outcome::DeniedByEngine);
    let dead = seen(Outcome::Admitted);
    let mixed = liveness(&[
        (Engine::Kyverno, Probed::Answered(live)),
        (Engine::Admission, Probed::Answered(dead)),
        (Engine::KubeArmor, Probed::NotProbeable),
    ]);
    assert_eq!(mixed.state, NotLive);
}

#[test]
fn only_validating_admission_engines_are_probed() {
    for engine in Engine::ALL {
        for intent in [
            id::ESCAPE_TO_HOST,
            id::COCO_WORKLOAD,
            "denyExternalNetworkAccess",
        ] {
            let want = intent == id::ESCAPE_TO_HOST
                && matches!(engine, Engine::Kyverno | Engine::Admission);
            assert_eq!(probeable(engine, intent), want, "{engine:?} {intent}");
        }
    }
}

#[test]
fn a_period_sends_at_most_the_cap_and_every_probe_comes_round() {
    let due: Vec<u32> = (0..5).collect();
    assert_eq!(schedule(&due, 10, 7), due);
    let mut seen = std::collections::BTreeSet::new();
    for round in 0..3 {
        let sent = schedule(&due, 2, round);
        assert_eq!(sent.len(), 2);
        seen.extend(sent);
    }
    assert_eq!(seen.len(), 5, "every probe within ⌈5/2⌉ periods");
}

#[test]
fn a_cluster_policy_is_probed_in_default_when_it_applies_there() {
    let protected = ProtectedNamespaces::defaults(None, "k8tls");
    let names: Vec<String> = ["kube-system", "alpha", "default"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert_eq!(
        probe_namespace(None, &names, &protected).as_deref(),
        Some("default")
    );
    let only_alpha = &names[..2];
    assert_eq!(
        probe_namespace(None, only_alpha, &protected).as_deref(),
        Some("alpha")
    );
    assert_eq!(probe_namespace(None, &names[..1], &protected), None);
}

/// The posture of an escapeToHost policy (Kyverno alone, or Kyverno beside KubeArmor) given
/// what the Kyverno probe found: only an admitted probe takes Kyverno out of force.
#[test]
fn given_a_probe_outcome_the_posture_verdict_follows() {
    use crate::engines::{EngineSet, Environment, PolicyInput, translate};
    use crate::posture::{PolicyCoverage, PolicyFacts};
    use nimbus_api::posture::{EngineState, Verdict};
    let np: nimbus_api::NimbusPolicy = serde_json::from_value(json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "NimbusPolicy",
        "metadata": {"name": "esc", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "rules": [{"id": "escapeToHost", "rule": {"action": "Block"}}]}
    }))
    .expect("valid policy");
    let input = PolicyInput::namespaced(&np, "p");
    let seen = |outcome| Probed::Answered(Observed { outcome, at: None });
    let cases = [
        (
            seen(Outcome::DeniedByEngine),
            Verdict::Protected,
            Verdict::Protected,
            LiveState::Live,
        ),
        (
            seen(Outcome::Admitted),
            Verdict::Unprotected,
            Verdict::Partial,
            LiveState::NotLive,
        ),
        (
            seen(Outcome::WebhookCallFailed("x".into())),
            Verdict::Protected,
            Verdict::Protected,
            LiveState::Unverified,
        ),
        (
            seen(Outcome::DeniedElsewhere("x".into())),
            Verdict::Protected,
            Verdict::Protected,
            LiveState::Unverified,
        ),
        (
            Probed::Due,
            Verdict::Protected,
            Verdict::Protected,
            LiveState::NotProbed,
        ),
    ];
    for (probed, alone, with_kubearmor, live) in cases {
        for (engines, want) in [
            (vec![Engine::Kyverno], alone),
            (vec![Engine::Kyverno, Engine::KubeArmor], with_kubearmor),
        ] {
            let set = EngineSet {
                enabled: engines.iter().copied().collect(),
                installed: engines.iter().copied().collect(),
                ..EngineSet::default()
            };
            let translation = translate(&input, &Environment::default(), &set);
            let answer = |intent: &str, engine| {
                assert_eq!((intent, engine), (id::ESCAPE_TO_HOST, Engine::Kyverno));
                probed.clone()
            };
            let coverage = PolicyCoverage::new(&PolicyFacts {
                input: &input,
                translation: &translation,
                engines: &set,
                present: &|_| true,
                intent_name: &|_| None,
                intent_bundle: &|_| None,
                intent_writer: &|_| None,
                binding: None,
                protected: &ProtectedNamespaces::default(),
                probes: Some(&answer),
            });
            let rule = &coverage.rules[0];
            let what = format!("{probed:?} with {engines:?}");
            assert_eq!(rule.verdict, want, "{what}");
            let liveness = rule.liveness.as_ref().expect("probes are on");
            assert_eq!(liveness.state, live, "{what}");
            let kyverno = rule.engines.iter().find(|e| e.engine == "kyverno");
            let not_live = live == LiveState::NotLive;
            assert_eq!(
                kyverno.map(|e| e.state == EngineState::NotLive),
                Some(not_live),
                "{what}"
            );
            assert_eq!(
                rule.reasons.iter().any(|r| r.reason == reason::NOT_LIVE),
                not_live,
                "{what}: {:?}",
                rule.reasons
            );
        }
    }
}

/// An admitted probe stalls the policy with EnforcementNotLive; any other outcome does not.
#[test]
fn an_admitted_probe_stalls_the_policy() {
    use crate::engines::{EngineSet, Environment, PolicyInput, translate};
    let np: nimbus_api::NimbusPolicy = serde_json::from_value(json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "NimbusPolicy",
        "metadata": {"name": "esc", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "rules": [{"id": "escapeToHost", "rule": {"action": "Block"}}]}
    }))
    .expect("valid policy");
    let input = PolicyInput::namespaced(&np, "p");
    let set = EngineSet {
        enabled: [Engine::Kyverno].into(),
        installed: [Engine::Kyverno].into(),
        ..EngineSet::default()
    };
    let translation = translate(&input, &Environment::default(), &set);
    for dead in [false, true] {
        let problems = problems(input.rules, &translation, |_, _| dead);
        let reasons: Vec<_> = problems.iter().map(|p| (p.reason, p.blocking)).collect();
        let want = if dead {
            vec![(condition::REASON_ENFORCEMENT_NOT_LIVE, true)]
        } else {
            vec![]
        };
        assert_eq!(reasons, want);
        // status.rs's kstatus table: the reason stalls.
        assert!(crate::status::stalls(
            condition::REASON_ENFORCEMENT_NOT_LIVE
        ));
    }
    // The plan sends one probe, to the policy's namespace, naming Kyverno's policy.
    let planned = plan(
        &Target {
            uid: "p",
            namespace: Some("shop"),
            namespaces: None,
            selector: &np.spec.selector,
            rules: input.rules,
            translation: &translation,
            exceptions: &[],
        },
        &[],
        &ProtectedNamespaces::default(),
    );
    assert_eq!(planned.probes.len(), 1, "{planned:?}");
    assert_eq!(planned.probes[0].namespace, "shop");
    assert!(!planned.probes[0].natives.is_empty());
    // An exception in force that would let the probe out: a probe admitted then proves
    // nothing, so none is sent. One elsewhere, or for another intent, changes nothing.
    let exception = |namespace: &str, intent: &str| crate::exceptions::Excepted {
        kind: Default::default(),
        name: "vendor-agent".into(),
        namespace: namespace.into(),
        selector: LabelSelector::default(),
        workloads: Vec::new(),
        intents: [intent.to_owned()].into(),
        reason: "until 2.4".into(),
        expires_at: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        signatures: Default::default(),
        controls: None,
    };
    let of_controls = |controls: &[nimbus_api::PodSecurityControl]| crate::exceptions::Excepted {
        controls: Some(controls.iter().copied().collect()),
        ..exception("shop", "escapeToHost")
    };
    use nimbus_api::PodSecurityControl::{HostNamespaces, PrivilegedContainers};
    for (excepted, probed) in [
        (exception("shop", "escapeToHost"), false),
        (exception("web", "escapeToHost"), true),
        (exception("shop", "dnsManipulation"), true),
        // The probe is privileged: out of that control it would be admitted; out of another,
        // still denied.
        (of_controls(&[PrivilegedContainers]), false),
        (of_controls(&[HostNamespaces]), true),
        // Naming workloads: a probe (a bare pod the API server names) is none of them.
        (
            crate::exceptions::Excepted {
                workloads: vec![nimbus_api::ExceptedWorkload {
                    kind: nimbus_api::WorkloadKind::Pod,
                    name: "nimbus-probe-".into(),
                }],
                ..exception("shop", "escapeToHost")
            },
            true,
        ),
    ] {
        let planned = plan(
            &Target {
                uid: "p",
                namespace: Some("shop"),
                namespaces: None,
                selector: &np.spec.selector,
                rules: input.rules,
                translation: &translation,
                exceptions: std::slice::from_ref(&excepted),
            },
            &[],
            &ProtectedNamespaces::default(),
        );
        assert_eq!(planned.probes.len(), usize::from(probed), "{excepted:?}");
        assert_eq!(
            planned.not_probed.len(),
            usize::from(!probed),
            "{excepted:?}"
        );
    }
}

#[test]
fn an_object_is_probed_once_it_has_settled() {
    let now = k8s_openapi::jiff::Timestamp::from_second(1_000_000).expect("a time");
    let at = |secs_ago: i64| Time(now - k8s_openapi::jiff::SignedDuration::from_secs(secs_ago));
    assert!(settled(Some(&at(6)), true, now));
    assert!(settled(Some(&at(5)), true, now));
    assert!(!settled(Some(&at(4)), true, now), "just written");
    assert!(
        !settled(Some(&at(60)), false, now),
        "its engine says it does not act"
    );
    assert!(!settled(None, true, now));
    assert!(!settled(Some(&at(-60)), true, now), "from the future");
}

/// A standby reads what the leader wrote: the Stalled condition naming the intent and engine.
#[test]
fn a_standby_knows_what_is_not_live_from_the_status() {
    use crate::engines::{EngineSet, Environment, PolicyInput, translate};
    let np: nimbus_api::NimbusPolicy = serde_json::from_value(json!({
        "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "NimbusPolicy",
        "metadata": {"name": "esc", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "rules": [{"id": "escapeToHost", "rule": {"action": "Block"}}]}
    }))
    .expect("valid policy");
    let input = PolicyInput::namespaced(&np, "p");
    let set = EngineSet {
        enabled: [Engine::Kyverno].into(),
        installed: [Engine::Kyverno].into(),
        ..EngineSet::default()
    };
    let mut translation = translate(&input, &Environment::default(), &set);
    for dead in [false, true] {
        translation.problems = problems(input.rules, &translation, |_, _| dead);
        let plan_status = crate::status::policy_ready(&translation.problems, Some(1));
        // The conditions as the status mechanism writes them (Ready, and Stalled when stalled).
        let mut conditions = vec![plan_status];
        if dead {
            conditions.push(nimbus_api::Condition {
                type_: condition::STALLED.into(),
                status: "True".into(),
                reason: condition::REASON_ENFORCEMENT_NOT_LIVE.into(),
                message: translation.problems[0].message.clone(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: Some(1),
            });
        }
        let known = from_status(&conditions, id::ESCAPE_TO_HOST, Engine::Kyverno);
        assert_eq!(
            matches!(known, Probed::Answered(ref o) if not_live(Some(o))),
            dead,
            "{known:?}"
        );
        let other = from_status(&conditions, id::ESCAPE_TO_HOST, Engine::Admission);
        assert!(matches!(other, Probed::OnLeader), "{other:?}");
    }
}
