//! What the SecurityIntentExceptions in force make of a workload's intents.

use super::workloads::Workload;
use crate::exceptions::{Excepted, workloads};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::{Selector, SelectorExt};
use nimbus_api::condition;
use nimbus_api::posture::{ExceptionCoverage, IntentCoverage, Reason, Verdict};
use std::collections::BTreeMap;

/// The reason an intent carries on a workload a SecurityIntentException in force lets out.
pub const EXCEPTED: &str = "Excepted";

/// The exceptions in force that let the pods labelled `pods` of `workload` out of `intent`
/// or some of its Pod Security controls, how many of the pods they let out, and how many of
/// those out of the whole intent. An exception naming workloads lets out only theirs.
pub(super) fn excepting<'a>(
    exceptions: &'a [(Excepted, Option<Selector>)],
    intent: &str,
    workload: &Workload,
    pods: &[&BTreeMap<String, String>],
) -> (Vec<&'a Excepted>, usize, usize) {
    let applying: Vec<&(Excepted, Option<Selector>)> = exceptions
        .iter()
        .filter(|(e, _)| {
            e.namespace == workload.namespace
                && e.intents.contains(intent)
                && workloads::names(e, &workload.kind, &workload.name)
        })
        .collect();
    let lets_out = |labels: &BTreeMap<String, String>, selector: &Option<Selector>| {
        selector.as_ref().is_some_and(|s| s.matches(labels))
    };
    let excepted = pods
        .iter()
        .filter(|p| applying.iter().any(|(_, s)| lets_out(p, s)))
        .count();
    let wholly = pods
        .iter()
        .filter(|p| (applying.iter()).any(|(e, s)| e.controls.is_none() && lets_out(p, s)))
        .count();
    let used = applying
        .into_iter()
        .filter(|(_, s)| pods.iter().any(|p| lets_out(p, s)))
        .map(|(e, _)| e)
        .collect();
    (used, excepted, wholly)
}

/// Lets `rule` (on a workload) out by `exceptions`, which let `excepted` of its `selected` pods
/// out, `wholly` of them out of the whole intent: `Excepted` when they let out every one wholly
/// and every engine honours them, at most `Partial` otherwise (an engine that does not honour
/// them still enforces the intent; an exception of some Pod Security controls leaves the pods
/// held to the others, so the intent is enforced on them, but not all of it).
pub(super) fn except(
    rule: &mut IntentCoverage,
    exceptions: &[&Excepted],
    excepted: usize,
    wholly: usize,
    selected: usize,
) {
    if excepted == 0 {
        return;
    }
    let still_enforced = rule
        .reasons
        .iter()
        .any(|r| r.reason == condition::REASON_EXCEPTION_NOT_HONOURED);
    rule.verdict = if wholly == selected && !still_enforced {
        Verdict::Excepted
    } else if rule.verdict == Verdict::Protected {
        Verdict::Partial
    } else {
        rule.verdict
    };
    for e in exceptions {
        let controls = e.control_names();
        let of = if controls.is_empty() {
            String::new()
        } else {
            format!(
                " of the Pod Security controls {} (held to the others)",
                controls.join(", ")
            )
        };
        rule.reasons.push(Reason {
            reason: EXCEPTED.to_owned(),
            message: format!(
                "{} lets {excepted} of {selected} pods out{of} until {}: {}",
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
            controls: controls.into_iter().map(str::to_owned).collect(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimbus_api::PodSecurityControl;
    use nimbus_api::posture::Reference;
    use std::collections::BTreeSet;

    /// A workload of `kind` and `name` in `namespace`, without pods (the tests pass their labels).
    fn workload(kind: &str, name: &str, namespace: &str) -> Workload {
        Workload {
            namespace: namespace.into(),
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: None,
            created: None,
            pods: Vec::new(),
        }
    }

    #[test]
    fn an_exception_naming_workloads_lets_out_only_their_pods() {
        let mut named = Excepted {
            kind: Default::default(),
            name: "vendor-agent".into(),
            namespace: "shop".into(),
            selector: Default::default(),
            workloads: vec![nimbus_api::ExceptedWorkload {
                kind: nimbus_api::WorkloadKind::Deployment,
                name: "agent".into(),
            }],
            intents: std::collections::BTreeSet::from(["escapeToHost".to_owned()]),
            reason: "until 2.4".into(),
            expires_at: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            signatures: Default::default(),
            controls: None,
        };
        let selector = |e: &Excepted| Selector::try_from(e.selector.clone()).ok();
        let labels = BTreeMap::from([("app".to_owned(), "agent".to_owned())]);
        // (case, workload, pods let out)
        let cases = [
            (
                "the named deployment",
                workload("Deployment", "agent", "shop"),
                1,
            ),
            (
                "its sibling, same labels",
                workload("Deployment", "agent-canary", "shop"),
                0,
            ),
            (
                "same name, other kind",
                workload("StatefulSet", "agent", "shop"),
                0,
            ),
            (
                "same name, other namespace",
                workload("Deployment", "agent", "web"),
                0,
            ),
        ];
        let exceptions = [(named.clone(), selector(&named))];
        for (case, w, want) in &cases {
            let (used, excepted, _) = excepting(&exceptions, "escapeToHost", w, &[&labels]);
            assert_eq!((used.len(), excepted), (*want, *want), "{case}");
        }
        // Named, but the selector does not select it: not let out.
        named.selector.match_labels = Some(BTreeMap::from([("app".into(), "other".into())]));
        let exceptions = [(named.clone(), selector(&named))];
        let (_, excepted, _) = excepting(&exceptions, "escapeToHost", &cases[0].1, &[&labels]);
        assert_eq!(excepted, 0, "selected and named, both");
    }

    #[test]
    fn an_exception_lets_a_workload_out_only_as_far_as_it_reaches() {
        let exception = Excepted {
            kind: Default::default(),
            name: "vendor-agent".into(),
            namespace: "shop".into(),
            selector: Default::default(),
            workloads: Vec::new(),
            intents: BTreeSet::from(["escapeToHost".to_owned()]),
            reason: "until 2.4".into(),
            expires_at: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            signatures: crate::exceptions::Signatures {
                requested_by: Some("alice".into()),
                approved_by: Some("bob".into()),
            },
            controls: None,
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
        let scoped = Excepted {
            controls: Some(BTreeSet::from([PodSecurityControl::PrivilegedContainers])),
            ..exception.clone()
        };
        // (case, intent before, exception, pods excepted, pods selected, verdict after)
        let cases = [
            (
                "every pod, every engine",
                &honoured,
                &exception,
                2,
                2,
                Verdict::Excepted,
            ),
            ("some pods", &honoured, &exception, 1, 2, Verdict::Partial),
            (
                "an engine still enforces",
                &not_honoured,
                &exception,
                2,
                2,
                Verdict::Partial,
            ),
            ("no pod", &honoured, &exception, 0, 2, Verdict::Protected),
            (
                "every pod, out of one control: held to the others",
                &honoured,
                &scoped,
                2,
                2,
                Verdict::Partial,
            ),
            (
                "out of one control, an engine still enforces",
                &not_honoured,
                &scoped,
                2,
                2,
                Verdict::Partial,
            ),
            (
                "out of one control, no pod",
                &honoured,
                &scoped,
                0,
                2,
                Verdict::Protected,
            ),
        ];
        for (case, before, exception, excepted, selected, want) in cases {
            let mut rule = before.clone();
            let wholly = if exception.controls.is_none() {
                excepted
            } else {
                0
            };
            except(&mut rule, &[exception], excepted, wholly, selected);
            assert_eq!(rule.verdict, want, "{case}");
            let controls: Vec<&str> = exception.control_names();
            for coverage in &rule.exceptions {
                assert_eq!(coverage.controls, controls, "{case}");
            }
            if excepted > 0 && !controls.is_empty() {
                assert!(
                    (rule.reasons.iter()).any(|r| r
                        .message
                        .contains("out of the Pod Security controls Privileged Containers")),
                    "{case}: {:?}",
                    rule.reasons
                );
            }
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

    #[test]
    fn pods_let_out_of_some_controls_are_not_let_out_wholly() {
        let exception = |name: &str, tier: &str, controls: Option<PodSecurityControl>| {
            let selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
                serde_json::from_value(serde_json::json!({"matchLabels": {"tier": tier}}))
                    .expect("selector");
            let e = Excepted {
                kind: Default::default(),
                name: name.into(),
                namespace: "shop".into(),
                selector: selector.clone(),
                workloads: Vec::new(),
                intents: BTreeSet::from(["escapeToHost".to_owned()]),
                reason: "until 2.4".into(),
                expires_at: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                signatures: Default::default(),
                controls: controls.map(|c| BTreeSet::from([c])),
            };
            (e, Selector::try_from(selector).ok())
        };
        let exceptions = [
            exception("whole", "legacy", None),
            exception(
                "privileged",
                "agent",
                Some(PodSecurityControl::PrivilegedContainers),
            ),
        ];
        let pod = |tier: &str| BTreeMap::from([("tier".to_owned(), tier.to_owned())]);
        let (legacy, agent, web) = (pod("legacy"), pod("agent"), pod("web"));
        type Labels = BTreeMap<String, String>;
        type Case<'a> = (&'a str, Vec<&'a Labels>, &'a [&'a str], usize, usize);
        // (case, pods, exceptions used, let out, let out wholly)
        let cases: [Case; 4] = [
            ("wholly", vec![&legacy], &["whole"], 1, 1),
            ("out of one control", vec![&agent], &["privileged"], 1, 0),
            (
                "both",
                vec![&legacy, &agent, &web],
                &["whole", "privileged"],
                2,
                1,
            ),
            ("neither", vec![&web], &[], 0, 0),
        ];
        let workload = workload("Deployment", "web", "shop");
        for (case, pods, used, excepted, wholly) in cases {
            let got = excepting(&exceptions, "escapeToHost", &workload, &pods);
            let names: Vec<&str> = got.0.iter().map(|e| e.name.as_str()).collect();
            assert_eq!(
                (names.as_slice(), got.1, got.2),
                (used, excepted, wholly),
                "{case}"
            );
        }
    }
}
