//! What the SecurityIntentExceptions in force make of a workload's intents.

use crate::exceptions::Excepted;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::{Selector, SelectorExt};
use nimbus_api::condition;
use nimbus_api::posture::{ExceptionCoverage, IntentCoverage, Reason, Verdict};
use std::collections::BTreeMap;

/// The reason an intent carries on a workload a SecurityIntentException in force lets out.
pub const EXCEPTED: &str = "Excepted";

/// The exceptions in force that let the pods labelled `pods` (of `namespace`) out of `intent`,
/// and how many of the pods they let out.
pub(super) fn excepting<'a>(
    exceptions: &'a [(Excepted, Option<Selector>)],
    intent: &str,
    namespace: &str,
    pods: &[&BTreeMap<String, String>],
) -> (Vec<&'a Excepted>, usize) {
    let applying: Vec<&(Excepted, Option<Selector>)> = exceptions
        .iter()
        .filter(|(e, _)| e.namespace == namespace && e.intents.contains(intent))
        .collect();
    let lets_out = |labels: &BTreeMap<String, String>, selector: &Option<Selector>| {
        selector.as_ref().is_some_and(|s| s.matches(labels))
    };
    let excepted = pods
        .iter()
        .filter(|p| applying.iter().any(|(_, s)| lets_out(p, s)))
        .count();
    let used = applying
        .into_iter()
        .filter(|(_, s)| pods.iter().any(|p| lets_out(p, s)))
        .map(|(e, _)| e)
        .collect();
    (used, excepted)
}

/// Lets `rule` (on a workload) out by `exceptions`, which let `excepted` of its `selected` pods
/// out: `Excepted` when they let out every one and every engine honours them, at most
/// `Partial` otherwise (an engine that does not honour them still enforces the intent).
pub(super) fn except(
    rule: &mut IntentCoverage,
    exceptions: &[&Excepted],
    excepted: usize,
    selected: usize,
) {
    if excepted == 0 {
        return;
    }
    let still_enforced = rule
        .reasons
        .iter()
        .any(|r| r.reason == condition::REASON_EXCEPTION_NOT_HONOURED);
    rule.verdict = if excepted == selected && !still_enforced {
        Verdict::Excepted
    } else if rule.verdict == Verdict::Protected {
        Verdict::Partial
    } else {
        rule.verdict
    };
    for e in exceptions {
        rule.reasons.push(Reason {
            reason: EXCEPTED.to_owned(),
            message: format!(
                "{} lets {excepted} of {selected} pods out until {}: {}",
                e.describe(),
                e.expires_at,
                e.reason
            ),
        });
        rule.exceptions.push(ExceptionCoverage {
            kind: e.kind.to_string(),
            name: e.name.clone(),
            reason: e.reason.clone(),
            expires_at: Time(e.expires_at),
            requested_by: e.signatures.requested_by.clone(),
            approved_by: e.signatures.approved_by.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimbus_api::posture::Reference;
    use std::collections::BTreeSet;

    #[test]
    fn an_exception_lets_a_workload_out_only_as_far_as_it_reaches() {
        let exception = Excepted {
            kind: Default::default(),
            name: "vendor-agent".into(),
            namespace: "shop".into(),
            selector: Default::default(),
            intents: BTreeSet::from(["escapeToHost".to_owned()]),
            reason: "until 2.4".into(),
            expires_at: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            signatures: crate::exceptions::Signatures {
                requested_by: Some("alice".into()),
                approved_by: Some("bob".into()),
            },
        };
        let honoured = IntentCoverage {
            intent: None,
            id: "escapeToHost".into(),
            bundle: None,
            action: "Block".into(),
            written_by: None,
            written_at: None,
            binding: None,
            policy: Reference {
                kind: "NimbusPolicy".into(),
                namespace: Some("shop".into()),
                name: "web".into(),
            },
            verdict: Verdict::Protected,
            engines: Vec::new(),
            reasons: Vec::new(),
            tenant_proof: None,
            liveness: None,
            exceptions: Vec::new(),
        };
        let mut not_honoured = honoured.clone();
        not_honoured.reasons.push(Reason {
            reason: condition::REASON_EXCEPTION_NOT_HONOURED.into(),
            message: "kubearmor does not honour exceptions".into(),
        });
        // (case, intent before, pods excepted, pods selected, verdict after)
        let cases = [
            (
                "every pod, every engine",
                &honoured,
                2,
                2,
                Verdict::Excepted,
            ),
            ("some pods", &honoured, 1, 2, Verdict::Partial),
            (
                "an engine still enforces",
                &not_honoured,
                2,
                2,
                Verdict::Partial,
            ),
            ("no pod", &honoured, 0, 2, Verdict::Protected),
        ];
        for (case, before, excepted, selected, want) in cases {
            let mut rule = before.clone();
            except(&mut rule, &[&exception], excepted, selected);
            assert_eq!(rule.verdict, want, "{case}");
            let named = rule
                .exceptions
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>();
            let want_named: &[&str] = if excepted == 0 {
                &[]
            } else {
                &["vendor-agent"]
            };
            assert_eq!(named, want_named, "{case}");
            for coverage in &rule.exceptions {
                assert_eq!(
                    (
                        coverage.requested_by.as_deref(),
                        coverage.approved_by.as_deref()
                    ),
                    (Some("alice"), Some("bob")),
                    "{case}: who asked for and approved it"
                );
            }
            assert_eq!(
                rule.reasons.iter().any(|r| r.reason == EXCEPTED),
                excepted > 0,
                "{case}"
            );
        }
    }
}
