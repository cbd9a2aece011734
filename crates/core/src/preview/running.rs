//! What Kyverno's reports say of the intents it enforces. Admission judges only what is created
//! next: a pod admitted before the policy was in force, while an exception let it out, or while
//! Kyverno was not live, keeps running as it is, and Kyverno's background scan reports it
//! breaking the policy. Such an intent does not protect the workload until its pods are
//! recreated, and the posture must not say it does.

use super::kyverno_reports::{Reported, refusals};
use super::listing::WorkloadKey;
use crate::catalog::Engine;
use crate::engines::AUDIT;
use crate::posture::{judge, reason};
use nimbus_api::posture::{EngineState, Reason, Verdict, WorkloadPosture};

/// Marks the enforced intents of `posture` whose running pods Kyverno reports breaking them
/// `Unprotected`, with reason [`reason::RUNNING_IN_VIOLATION`] naming the rule and what Kyverno
/// says, and judges the workload again. An intent an exception lets out is left alone (Kyverno
/// reports it `skip`); what is not scanned yet, or cannot be read, says nothing.
pub fn running_violations(posture: &mut WorkloadPosture, reported: &Reported) {
    // Most clusters' workloads have no report: no key is built for them.
    let Ok(by_workload) = reported else {
        return;
    };
    if by_workload.is_empty() {
        return;
    }
    let workload: WorkloadKey = (
        posture.metadata.namespace.clone().unwrap_or_default(),
        posture.workload.kind.clone(),
        posture.workload.name.clone(),
    );
    let Some(reports) = by_workload.get(&workload) else {
        return;
    };
    let mut changed = false;
    for intent in posture
        .intents
        .iter_mut()
        .filter(|i| i.action != AUDIT && matches!(i.verdict, Verdict::Protected | Verdict::Partial))
    {
        let enforcing = intent.engines.iter().filter(|e| {
            e.state == EngineState::Enforcing && e.engine.parse() == Ok(Engine::Kyverno)
        });
        let broken: Vec<_> = enforcing
            .flat_map(|e| refusals(&intent.id, e, reports).unwrap_or_default())
            .collect();
        if broken.is_empty() {
            continue;
        }
        for refusal in broken {
            let resources: Vec<String> = refusal
                .resources
                .iter()
                .map(|r| format!("{} {}", r.kind, r.name))
                .collect();
            intent.reasons.push(Reason {
                reason: reason::RUNNING_IN_VIOLATION.to_owned(),
                message: format!(
                    "kyverno: {} runs in violation of rule {} of {} ({}), admitted before it \
                     was enforced or while an exception let it out; recreate it to enforce",
                    resources.join(", "),
                    refusal.rule,
                    refusal.policy.name,
                    refusal.message
                ),
            });
        }
        intent.verdict = Verdict::Unprotected;
        changed = true;
    }
    if changed {
        judge(posture);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preview::{Report, ReportResult};
    use nimbus_api::posture::{IntentCoverage, Reference};
    use std::collections::BTreeMap;

    fn policy() -> Reference {
        Reference {
            kind: "Policy".into(),
            namespace: Some("ns".into()),
            name: "b-escapetohost".into(),
        }
    }

    fn intent(action: &str, verdict: Verdict, state: EngineState) -> IntentCoverage {
        serde_json::from_value(serde_json::json!({
            "id": "escapeToHost", "action": action, "verdict": verdict,
            "policy": {"kind": "NimbusPolicy", "namespace": "ns", "name": "b"},
            "engines": [{"engine": "kyverno", "state": state, "objects": [policy()]}],
        }))
        .expect("an intent's coverage")
    }

    fn posture(intent: IntentCoverage) -> WorkloadPosture {
        let mut p: WorkloadPosture = serde_json::from_value(serde_json::json!({
            "apiVersion": "posture.security.nimbus.com/v1alpha1", "kind": "WorkloadPosture",
            "metadata": {"namespace": "ns", "name": "pod-agent"},
            "workload": {"apiVersion": "v1", "kind": "Pod", "name": "agent", "pods": 1},
            "verdict": "Unprotected",
            "intents": [intent],
        }))
        .expect("a workload's posture");
        judge(&mut p);
        p
    }

    fn report(result: &str) -> Report {
        Report {
            scope: Reference {
                kind: "Pod".into(),
                namespace: Some("ns".into()),
                name: "agent".into(),
            },
            results: vec![ReportResult {
                policy: "ns/b-escapetohost".into(),
                rule: "baseline".into(),
                result: result.into(),
                message: "privileged containers are not allowed".into(),
            }],
        }
    }

    fn key() -> WorkloadKey {
        ("ns".into(), "Pod".into(), "agent".into())
    }

    #[test]
    fn an_enforced_intent_a_running_pod_breaks_does_not_protect_it() {
        let enforced = || intent("Block", Verdict::Protected, EngineState::Enforcing);
        // (what, the intent, Kyverno's result for the pod, the verdict, RunningInViolation)
        let cases = [
            (
                "a failing pod",
                enforced(),
                Some("fail"),
                Verdict::Unprotected,
                true,
            ),
            (
                "a passing pod",
                enforced(),
                Some("pass"),
                Verdict::Protected,
                false,
            ),
            (
                "an excepted pod",
                enforced(),
                Some("skip"),
                Verdict::Protected,
                false,
            ),
            (
                "not scanned yet",
                enforced(),
                None,
                Verdict::Protected,
                false,
            ),
            (
                "audited (the preview's to say)",
                intent(AUDIT, Verdict::Audited, EngineState::Auditing),
                Some("fail"),
                Verdict::Audited,
                false,
            ),
            (
                "Kyverno not enforcing",
                intent("Block", Verdict::Unprotected, EngineState::NotInstalled),
                Some("fail"),
                Verdict::Unprotected,
                false,
            ),
        ];
        for (what, intent, result, verdict, running) in cases {
            let reports: Vec<Report> = result.map(report).into_iter().collect();
            let reported: Reported = Ok(BTreeMap::from([(key(), reports.iter().collect())]));
            let mut p = posture(intent);
            running_violations(&mut p, &reported);
            assert_eq!(p.verdict, verdict, "{what}");
            assert_eq!(p.intents[0].verdict, verdict, "{what}");
            let said = p
                .reasons
                .iter()
                .any(|r| r.reason == reason::RUNNING_IN_VIOLATION);
            assert_eq!(said, running, "{what}: {:?}", p.reasons);
        }
        let mut p = posture(enforced());
        let reports = [report("fail")];
        running_violations(
            &mut p,
            &Ok(BTreeMap::from([(key(), reports.iter().collect())])),
        );
        let message = &p.intents[0].reasons[0].message;
        assert!(
            message.contains("Pod agent")
                && message.contains("baseline")
                && message.contains("privileged containers are not allowed"),
            "{message}"
        );
        assert_eq!(
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(nimbus_api::posture::VERDICT_LABEL)),
            Some(&"Unprotected".to_owned())
        );
    }
}
