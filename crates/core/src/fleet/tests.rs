use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use nimbus_api::posture::{EngineCoverage, EngineState, Reason, WorkloadRef};
use serde_json::json;

mod reporting;

fn reference(kind: &str, namespace: Option<&str>, name: &str) -> Reference {
    Reference {
        kind: kind.to_owned(),
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
    }
}

fn web() -> Reference {
    reference("ClusterSecurityIntentBinding", None, "web")
}

fn cond(type_: &str, status: &str, reason: &str, message: &str, generation: i64) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: Some(generation),
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

fn ready(status: &str, reason: &str) -> Vec<Condition> {
    vec![cond("Ready", status, reason, "why", 2)]
}

fn observed<'a>(conditions: &'a [Condition], mode: Option<&'a str>) -> Observed<'a> {
    Observed {
        generation: Some(2),
        conditions,
        mode,
        preview: None,
    }
}

/// An intent of `binding` on a workload, with its verdict and reason codes.
fn intent(id: &str, binding: &Reference, verdict: Posture, reasons: &[&str]) -> IntentCoverage {
    IntentCoverage {
        intent: Some(id.to_lowercase()),
        id: id.to_owned(),
        bundle: None,
        action: "Block".to_owned(),
        written_by: None,
        written_at: None,
        binding: Some(binding.clone()),
        policy: reference("ClusterNimbusPolicy", None, &binding.name),
        verdict,
        engines: Vec::new(),
        reasons: reasons
            .iter()
            .map(|r| Reason {
                reason: (*r).to_owned(),
                message: format!("{r} happened"),
            })
            .collect(),
        tenant_proof: None,
        liveness: None,
        exceptions: Vec::new(),
    }
}

fn workload(name: &str, intents: Vec<IntentCoverage>) -> WorkloadPosture {
    WorkloadPosture {
        api_version: "posture.security.nimbus.com/v1alpha1".to_owned(),
        kind: "WorkloadPosture".to_owned(),
        metadata: ObjectMeta {
            name: Some(format!("deployment-{name}")),
            namespace: Some("shop".to_owned()),
            ..Default::default()
        },
        workload: WorkloadRef {
            api_version: "apps/v1".to_owned(),
            kind: "Deployment".to_owned(),
            name: name.to_owned(),
            pods: 2,
        },
        // Not read: the verdict under the binding is its intents'.
        verdict: Posture::Unprotected,
        intents,
        reasons: Vec::new(),
        preview: None,
    }
}

fn verdict_of(
    conditions: &[Condition],
    mode: Option<&str>,
    workloads: &[WorkloadPosture],
) -> String {
    let binding = web();
    let bindings = BTreeSet::from([&binding]);
    let grouped = by_binding(workloads, &bindings);
    let selected = grouped.get(&binding).map(Vec::as_slice).unwrap_or_default();
    binding_verdict(&binding, observed(conditions, mode), selected)
        .map_or_else(|| "none".to_owned(), |v| causes(&v))
}

/// A verdict's Event message without its tally (tested apart).
fn causes(verdict: &Verdict) -> String {
    let message = verdict.event_message();
    let (causes, tally) = Tally::split(&message);
    assert!(
        tally.is_some(),
        "a binding's message ends with its tally: {message}"
    );
    causes.to_owned()
}

/// (what, the binding's conditions, its mode, the workloads' postures, the event message or
/// `none`).
type Case<'a> = (
    &'a str,
    Vec<Condition>,
    Option<&'a str>,
    Vec<WorkloadPosture>,
    &'a str,
);

#[test]
fn a_binding_is_compliant_when_ready_and_every_workload_it_selects_is_protected() {
    use Posture::*;
    let b = web();
    let other = reference("SecurityIntentBinding", Some("shop"), "other");
    let protected = |name| workload(name, vec![intent("dnsManipulation", &b, Protected, &[])]);
    let ok = ready("True", "Ready");
    let not_ready = ready("False", "EngineNotInstalled");
    let stalled = [
        cond("Ready", "False", "UnsupportedIntent", "x", 2),
        cond("Stalled", "True", "UnsupportedIntent", "x", 2),
    ];
    let cases: Vec<Case> = vec![
        ("no status yet", vec![], None, vec![], "none"),
        (
            "a status of an older generation",
            vec![cond("Ready", "True", "Ready", "", 1)],
            None,
            vec![],
            "none",
        ),
        (
            "not known yet",
            ready("Unknown", "Reconciling"),
            None,
            vec![],
            "none",
        ),
        (
            "ready, nothing selected",
            ok.clone(),
            None,
            vec![],
            "Compliant; ClusterSecurityIntentBinding web is Ready; it selects no workload",
        ),
        (
            "ready, every workload protected",
            ok.clone(),
            None,
            vec![protected("web"), protected("api")],
            "Compliant; ClusterSecurityIntentBinding web is Ready; every workload it selects is protected",
        ),
        (
            "another binding's gap is not this one's",
            ok.clone(),
            None,
            vec![
                protected("web"),
                workload(
                    "db",
                    vec![intent(
                        "escapeToHost",
                        &other,
                        Unprotected,
                        &["EngineNotInstalled"],
                    )],
                ),
            ],
            "Compliant; ClusterSecurityIntentBinding web is Ready; every workload it selects is protected",
        ),
        (
            "an engine missing: not ready, workloads unprotected",
            not_ready.clone(),
            None,
            vec![
                protected("api"),
                workload(
                    "web",
                    vec![intent(
                        "dnsManipulation",
                        &b,
                        Unprotected,
                        &["EngineNotInstalled"],
                    )],
                ),
            ],
            "NonCompliant; ClusterSecurityIntentBinding web: EngineNotInstalled; not protected: Deployment shop/web (Unprotected)",
        ),
        (
            "the same break, seen by the posture before the binding's status",
            ok.clone(),
            None,
            vec![
                protected("api"),
                workload(
                    "web",
                    vec![intent(
                        "dnsManipulation",
                        &b,
                        Unprotected,
                        &["EngineNotInstalled"],
                    )],
                ),
            ],
            "NonCompliant; ClusterSecurityIntentBinding web: EngineNotInstalled; not protected: Deployment shop/web (Unprotected)",
        ),
        (
            "repaired: the engine's objects still being written",
            not_ready.clone(),
            None,
            vec![workload(
                "web",
                vec![intent(
                    "dnsManipulation",
                    &b,
                    Unprotected,
                    &["NativePolicyMissing"],
                )],
            )],
            "none",
        ),
        (
            "repaired: the objects written, the binding's status not yet",
            not_ready.clone(),
            None,
            vec![protected("web")],
            "none",
        ),
        (
            "a native object deleted, being written again",
            ok.clone(),
            None,
            vec![workload(
                "web",
                vec![intent(
                    "dnsManipulation",
                    &b,
                    Partial,
                    &["NativePolicyMissing"],
                )],
            )],
            "none",
        ),
        (
            "its writes refused",
            ready("False", "ApplyFailed"),
            None,
            vec![workload(
                "web",
                vec![intent(
                    "dnsManipulation",
                    &b,
                    Unprotected,
                    &["NativePolicyMissing"],
                )],
            )],
            "NonCompliant; ClusterSecurityIntentBinding web: ApplyFailed, NativePolicyMissing; not protected: Deployment shop/web (Unprotected)",
        ),
        (
            "an engine missing, nothing selected",
            not_ready.clone(),
            None,
            vec![],
            "NonCompliant; ClusterSecurityIntentBinding web: EngineNotInstalled",
        ),
        (
            "stalled",
            stalled.to_vec(),
            None,
            vec![],
            "NonCompliant; ClusterSecurityIntentBinding web: UnsupportedIntent (stalled)",
        ),
        (
            "one intent of two in force: partial",
            ok.clone(),
            None,
            vec![workload(
                "web",
                vec![
                    intent("dnsManipulation", &b, Protected, &[]),
                    intent("escapeToHost", &b, Unprotected, &["UnsupportedSelector"]),
                ],
            )],
            "NonCompliant; ClusterSecurityIntentBinding web: UnsupportedSelector; not protected: Deployment shop/web (Partial)",
        ),
        (
            "shadow mode: audited, compliant, and said",
            ok.clone(),
            Some("Shadow"),
            vec![workload(
                "web",
                vec![intent("dnsManipulation", &b, Audited, &["Audited"])],
            )],
            "Compliant; ClusterSecurityIntentBinding web is Ready; every workload it selects is audited; audited, not enforced: dnsManipulation (shadow mode)",
        ),
        (
            "an Audit action beside enforced intents",
            ok.clone(),
            None,
            vec![
                protected("api"),
                workload(
                    "web",
                    vec![
                        intent("dnsManipulation", &b, Protected, &[]),
                        intent("escapeToHost", &b, Audited, &["Audited"]),
                    ],
                ),
            ],
            "Compliant; ClusterSecurityIntentBinding web is Ready; every workload it selects is protected; audited, not enforced: escapeToHost",
        ),
        (
            "excepted by an exception in force",
            ok.clone(),
            None,
            vec![
                protected("api"),
                workload(
                    "web",
                    vec![intent("escapeToHost", &b, Excepted, &["Excepted"])],
                ),
            ],
            "Compliant; ClusterSecurityIntentBinding web is Ready; every workload it selects is protected or excepted; excepted by SecurityIntentExceptions in force: escapeToHost",
        ),
    ];
    for (what, conditions, mode, workloads, expected) in cases {
        assert_eq!(
            verdict_of(&conditions, mode, &workloads),
            expected,
            "{what}"
        );
    }
}

#[test]
fn a_message_names_at_most_five_workloads_and_counts_them_all() {
    let b = web();
    let gap = |name: &str| {
        workload(
            name,
            vec![intent(
                "dnsManipulation",
                &b,
                Posture::Unprotected,
                &["UnsupportedSelector"],
            )],
        )
    };
    let workloads: Vec<_> = ["a", "b", "c", "d", "e", "f", "g"].map(gap).into();
    assert_eq!(
        verdict_of(&ready("True", "Ready"), None, &workloads),
        "NonCompliant; ClusterSecurityIntentBinding web: UnsupportedSelector; not protected: \
         Deployment shop/a (Unprotected), Deployment shop/b (Unprotected), Deployment shop/c \
         (Unprotected), Deployment shop/d (Unprotected), Deployment shop/e (Unprotected) and 2 more"
    );
    // Another protected workload changes the counts, not the causes.
    let mut protected = intent("dnsManipulation", &b, Posture::Protected, &[]);
    protected.engines = vec![EngineCoverage {
        engine: "netpol".to_owned(),
        state: EngineState::Enforcing,
        objects: Vec::new(),
    }];
    let mut auditing = intent("escapeToHost", &b, Posture::Audited, &[]);
    auditing.engines = vec![EngineCoverage {
        engine: "kubearmor".to_owned(),
        state: EngineState::Auditing,
        objects: Vec::new(),
    }];
    let protected = workload("h", vec![protected, auditing]);
    let mut both = workloads.clone();
    both.push(protected.clone());
    let tallied = |workloads: &[WorkloadPosture]| {
        let binding = web();
        let grouped = by_binding(workloads, &BTreeSet::from([&binding]));
        let verdict = binding_verdict(
            &binding,
            observed(&ready("True", "Ready"), None),
            &grouped[&binding],
        );
        let message = verdict.expect("known").event_message();
        let (causes, tally) = Tally::split(&message);
        (causes.to_owned(), tally.expect("a tally"))
    };
    let (broken, tally) = tallied(&both);
    assert!(broken.ends_with("and 2 more"), "{broken}");
    assert_eq!(
        (
            tally.workloads,
            tally.engines.into_iter().collect::<Vec<_>>()
        ),
        (
            Workloads {
                protected: 1,
                unprotected: 7,
                ..Workloads::default()
            },
            vec!["kubearmor (auditing)".to_owned(), "netpol".to_owned()]
        )
    );
    let (one, tally) = tallied(std::slice::from_ref(&protected));
    let (two, twice) = tallied(&[protected.clone(), protected]);
    assert_eq!(one, two);
    assert_eq!(
        (tally.workloads.protected, twice.workloads.protected),
        (1, 2)
    );
}

#[test]
fn an_intent_is_compliant_when_ready() {
    let si = reference("SecurityIntent", None, "dns");
    let cases = [
        (
            ready("True", "Ready"),
            "Compliant; SecurityIntent dns (dnsManipulation) is Ready",
        ),
        (
            vec![
                cond(
                    "Ready",
                    "False",
                    "UnsupportedIntent",
                    "not in the catalog",
                    2,
                ),
                cond(
                    "Stalled",
                    "True",
                    "UnsupportedIntent",
                    "not in the catalog",
                    2,
                ),
            ],
            "NonCompliant; SecurityIntent dns (dnsManipulation): UnsupportedIntent (stalled): not in the catalog",
        ),
        (ready("Unknown", "Reconciling"), "none"),
    ];
    for (conditions, expected) in cases {
        let verdict = intent_verdict(&si, "dnsManipulation", observed(&conditions, None));
        let got = verdict.map_or_else(|| "none".to_owned(), |v| v.event_message());
        assert_eq!(got, expected);
    }
}

/// A binding with audited intents says what enforcing them would block, as previewed: what the
/// hub sees of a canary cluster. An enforcing binding's message has no preview.
#[test]
fn an_audited_binding_says_what_enforcing_would_block() {
    use Posture::{Audited, Protected};
    let b = web();
    let ok = ready("True", "Ready");
    let bindings = BTreeSet::from([&b]);
    let message = |mode: Option<&str>, verdict: Posture, preview: &BindingPreview| {
        let workloads = [workload(
            "web",
            vec![intent("dnsManipulation", &b, verdict, &[])],
        )];
        let grouped = by_binding(&workloads, &bindings);
        let observed = Observed {
            preview: Some(preview),
            ..observed(&ok, mode)
        };
        binding_verdict(&b, observed, &grouped[&b]).map(|v| causes(&v))
    };
    let blocking = BindingPreview {
        workloads: 1,
        connections: 2,
        refused: 1,
        examples: vec![
            "Pod shop/web: Egress to Service shop/db 5432/TCP".into(),
            "Pod shop/web: refused by ClusterPolicy web rule pod-security".into(),
        ],
        not_previewed: vec!["DecidedAtRunTime".into()],
    };
    let cases = [
        (
            "shadow mode, blocking",
            Some("Shadow"),
            Audited,
            &blocking,
            "Compliant; ClusterSecurityIntentBinding web is Ready; every workload it selects is audited; audited, not enforced: dnsManipulation (shadow mode); preview: enforcing would deny 2 connections of 1 workload and refuse 1 workload at admission (Pod shop/web: Egress to Service shop/db 5432/TCP, Pod shop/web: refused by ClusterPolicy web rule pod-security); not previewed: DecidedAtRunTime",
        ),
        (
            "shadow mode, nothing blocked",
            Some("Shadow"),
            Audited,
            &BindingPreview::default(),
            "Compliant; ClusterSecurityIntentBinding web is Ready; every workload it selects is audited; audited, not enforced: dnsManipulation (shadow mode); preview: enforcing would block nothing previewed",
        ),
        (
            "enforcing: no preview",
            None,
            Protected,
            &blocking,
            "Compliant; ClusterSecurityIntentBinding web is Ready; every workload it selects is protected",
        ),
    ];
    for (what, mode, verdict, preview, expected) in cases {
        assert_eq!(
            message(mode, verdict, preview).as_deref(),
            Some(expected),
            "{what}"
        );
    }
}
