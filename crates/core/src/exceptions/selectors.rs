//! Leaving the pods exceptions let out of a label selector. An engine that selects pods with a
//! single label selector (a NetworkPolicy's `podSelector`) cannot say "selected, and not
//! excepted" in one selector when an exception names several labels: not (a and b) is (not a)
//! or (not b). Such engines write one object per selector of [`excluding`], with the same
//! rules; the pods they select are the union, exactly what the binding selects minus what the
//! exceptions let out.

use super::Excepted;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// At most this many selectors: each becomes an object of its own.
pub const MAX_SELECTORS: usize = 16;

/// Selectors whose union selects what `selector` selects except the pods `excepted` let out
/// (`excepted` are in force in the selector's namespace): `selector` alone when there is no
/// exception, none when an exception lets out every pod, `None` when it takes more than
/// [`MAX_SELECTORS`]. An exception naming workloads is not left out: labels cannot tell the
/// named workloads from their siblings with the same labels, so those stay selected (the
/// translation says the engine does not honour it).
pub fn excluding(selector: &LabelSelector, excepted: &[&Excepted]) -> Option<Vec<LabelSelector>> {
    let mut selectors = vec![selector.clone()];
    let by_labels = excepted
        .iter()
        .filter(|e| super::workloads::honoured(super::workloads::Reach::Labels, e));
    for exception in by_labels {
        // Not selected by the exception: one of its requirements fails.
        let negations = negated(&exception.selector);
        selectors = selectors
            .iter()
            .flat_map(|s| negations.iter().map(move |n| with(s, n.clone())))
            .collect();
        if selectors.len() > MAX_SELECTORS {
            return None;
        }
    }
    Some(selectors)
}

/// Each requirement of `selector`, negated; none when it selects every pod.
fn negated(selector: &LabelSelector) -> Vec<LabelSelectorRequirement> {
    let labels = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(key, value)| requirement(key, "NotIn", Some(vec![value.clone()])));
    let expressions = selector.match_expressions.iter().flatten().map(|e| {
        let opposite = match e.operator.as_str() {
            "In" => "NotIn",
            "NotIn" => "In",
            "Exists" => "DoesNotExist",
            // DoesNotExist (the API server admits no other operator).
            _ => "Exists",
        };
        requirement(&e.key, opposite, e.values.clone())
    });
    labels.chain(expressions).collect()
}

fn requirement(key: &str, operator: &str, values: Option<Vec<String>>) -> LabelSelectorRequirement {
    let values = match operator {
        "Exists" | "DoesNotExist" => None,
        _ => values,
    };
    LabelSelectorRequirement {
        key: key.to_owned(),
        operator: operator.to_owned(),
        values,
    }
}

/// `selector` with `requirement` too.
fn with(selector: &LabelSelector, requirement: LabelSelectorRequirement) -> LabelSelector {
    let mut out = selector.clone();
    out.match_expressions
        .get_or_insert_with(Vec::new)
        .push(requirement);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use kube::core::{Selector, SelectorExt};
    use std::collections::{BTreeMap, BTreeSet};

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn exception(selector: serde_json::Value) -> Excepted {
        Excepted {
            kind: Default::default(),
            name: "e".into(),
            namespace: "ns".into(),
            selector: serde_json::from_value(selector).expect("a selector"),
            workloads: Vec::new(),
            intents: BTreeSet::new(),
            reason: String::new(),
            expires_at: Timestamp::UNIX_EPOCH,
            signatures: Default::default(),
            controls: None,
        }
    }

    fn matches(selector: &LabelSelector, pod: &BTreeMap<String, String>) -> bool {
        let selector = Selector::try_from(selector.clone()).expect("a valid selector");
        selector.matches(pod)
    }

    /// Every pod of a small universe (each of three labels absent or one of two values) is
    /// selected by the union exactly when kube's own selector matching says the binding selects
    /// it and no exception does.
    #[test]
    fn the_union_selects_what_the_binding_selects_and_no_exception_does() {
        let values = [None, Some("a"), Some("b")];
        let mut pods = Vec::new();
        for app in values {
            for tier in values {
                for team in values {
                    let pairs: Vec<(&str, &str)> = [("app", app), ("tier", tier), ("team", team)]
                        .into_iter()
                        .filter_map(|(k, v)| Some((k, v?)))
                        .collect();
                    pods.push(labels(&pairs));
                }
            }
        }
        let binding: LabelSelector =
            serde_json::from_value(serde_json::json!({"matchLabels": {"app": "a"}})).expect("sel");
        let exceptions = [
            vec![],
            vec![exception(serde_json::json!({"matchLabels": {"tier": "a"}}))],
            vec![exception(
                serde_json::json!({"matchLabels": {"tier": "a", "team": "b"}}),
            )],
            vec![exception(serde_json::json!({"matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "team", "operator": "DoesNotExist"},
            ]}))],
            vec![exception(serde_json::json!({"matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["a"]},
                {"key": "team", "operator": "Exists"},
            ]}))],
            vec![
                exception(serde_json::json!({"matchLabels": {"tier": "a"}})),
                exception(serde_json::json!({"matchLabels": {"team": "b", "tier": "b"}})),
            ],
        ];
        for excepted in &exceptions {
            let refs: Vec<&Excepted> = excepted.iter().collect();
            let union = excluding(&binding, &refs).expect("within the bound");
            for pod in &pods {
                let expected =
                    matches(&binding, pod) && !excepted.iter().any(|e| matches(&e.selector, pod));
                let got = union.iter().any(|s| matches(s, pod));
                assert_eq!(got, expected, "{pod:?} with {:?}", excepted);
            }
        }
    }

    #[test]
    fn an_exception_naming_workloads_leaves_no_pod_out_by_labels() {
        let binding = LabelSelector::default();
        let mut named = exception(serde_json::json!({"matchLabels": {"app": "agent"}}));
        named.workloads = vec![nimbus_api::ExceptedWorkload {
            kind: nimbus_api::WorkloadKind::Deployment,
            name: "agent".into(),
        }];
        // Its sibling with the same labels stays selected, so the named one does too.
        assert_eq!(excluding(&binding, &[&named]), Some(vec![binding.clone()]));
        let by_labels = exception(serde_json::json!({"matchLabels": {"app": "agent"}}));
        assert_eq!(
            excluding(&binding, &[&named, &by_labels]),
            excluding(&binding, &[&by_labels])
        );
    }

    #[test]
    fn an_exception_of_every_pod_leaves_nothing_and_too_many_combinations_are_refused() {
        let binding = LabelSelector::default();
        let everything = exception(serde_json::json!({}));
        assert_eq!(excluding(&binding, &[&everything]), Some(vec![]));
        let wide = exception(serde_json::json!({"matchLabels": {"a": "1", "b": "1", "c": "1"}}));
        // 3 × 3 = 9 selectors fit; 27 do not.
        assert_eq!(
            excluding(&binding, &[&wide, &wide]).map(|s| s.len()),
            Some(9)
        );
        assert_eq!(excluding(&binding, &[&wide, &wide, &wide]), None);
    }
}
