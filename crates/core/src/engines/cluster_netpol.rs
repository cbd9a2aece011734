//! ClusterNetworkPolicy engine (`policy.networking.k8s.io/v1alpha2`, network-policy-api
//! v0.3.0): a cluster binding's dnsManipulation and denyExternalNetworkAccess as Admin-tier
//! ClusterNetworkPolicies, one per binding and intent. The Admin tier is judged before any
//! NetworkPolicy, so no tenant's NetworkPolicy reopens what it denies, and it can hand traffic
//! on (`Pass`), so each intent cuts exactly what it names and leaves the rest to the
//! NetworkPolicies of the namespace.
//!
//! Each policy gets an Admin-tier priority of its own ([`super::priorities`]).
//!
//! SecurityIntentExceptions in force leave their pods out of the subject: the policy is then
//! written as several ClusterNetworkPolicies with the same rules, at the same priority (see
//! [`subjects`]).

use super::admin_priorities::BANDS;
use super::{
    AuditForm, CLUSTER, CLUSTER_NETWORK_POLICY, Emitted, Enforces, Engine, EngineSpec, Environment,
    Fact, NAMESPACE_NAME_LABEL, Output, PolicyInput, Problem, Rule, by_labels, metadata,
    namespace_selector, nth_name, object, selector_json,
};
use crate::exceptions::{Excepted, MAX_SELECTORS, excluding};
use crate::intents::id;
use crate::netpol::cluster::{ADMIN, Action};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nimbus_api::condition;
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub(super) const SPEC: EngineSpec = EngineSpec {
    engine: Engine::ClusterNetworkPolicy,
    name: "clusternetworkpolicy",
    manager: "nimbus-clusternetworkpolicy",
    enforces: &[
        Enforces {
            intent: id::DNS_MANIPULATION,
            origins: CLUSTER,
            reads: &[Fact::AdminPriorities],
            // A ClusterNetworkPolicy has no action that only reports.
            audit: AuditForm::None,
            effect: "an Admin-tier ClusterNetworkPolicy accepts DNS (53/UDP, 53/TCP, 853/TCP) to the cluster DNS and denies it to every other destination; everything else goes on to the namespace's NetworkPolicies, and no NetworkPolicy reopens what it denies",
        },
        Enforces {
            intent: id::DENY_EXTERNAL_NETWORK_ACCESS,
            origins: CLUSTER,
            reads: &[Fact::NodePodCidrs, Fact::AdminPriorities],
            // A ClusterNetworkPolicy has no action that only reports.
            audit: AuditForm::None,
            effect: "an Admin-tier ClusterNetworkPolicy accepts DNS to the cluster DNS, passes traffic to pods and to the node and configured cluster networks on to the namespace's NetworkPolicies, and denies egress to every other address, which no NetworkPolicy reopens; ingress from outside the cluster is not cut (ClusterNetworkPolicy ingress rules name only pods)",
        },
    ],
    kinds: &[&CLUSTER_NETWORK_POLICY],
    confined_to_k8tls_namespace: false,
    translate,
    optional_kinds: &[],
    // Cluster-scoped and judged before any NetworkPolicy (tests/clusternetworkpolicy.rs).
    tenant_proof: Some(true),
    // The excepted pods are left out of the subject (see `subjects`).
    honours_exceptions: &[id::DNS_MANIPULATION, id::DENY_EXTERNAL_NETWORK_ACCESS],
};

fn translate(policy: &PolicyInput, rule: &Rule, env: &Environment) -> Output {
    let priority = match &env.admin_priorities {
        Some(priorities) => priorities.get(&policy.name, rule.key),
        // Translated on its own (offline): it is the only one.
        None => BANDS
            .iter()
            .find(|(intent, _)| *intent == rule.spec.id)
            .map(|(_, band)| *band.start()),
    };
    let Some(priority) = priority else {
        let band = BANDS.iter().find(|(intent, _)| *intent == rule.spec.id);
        let size = band.map_or(0, |(_, b)| b.clone().count());
        return Err(rule.problem(
            condition::REASON_UNSUPPORTED_INTENT,
            format!(
                "clusternetworkpolicy gives each cluster binding of intent `{}` a priority of \
                 its own, and all {size} are taken by older bindings",
                rule.spec.id
            ),
        ));
    };
    let mut warnings = Vec::new();
    let egress = match rule.spec.id.as_str() {
        id::DNS_MANIPULATION => vec![
            egress(
                "cluster-dns",
                Action::Accept,
                json!([kube_dns()]),
                dns_ports(),
            ),
            egress(
                "other-dns",
                Action::Deny,
                json!([{"namespaces": {}}, {"networks": ["0.0.0.0/0", "::/0"]}]),
                dns_ports(),
            ),
        ],
        id::DENY_EXTERNAL_NETWORK_ACCESS => {
            let mut in_cluster = vec![json!({"namespaces": {}})];
            let networks: Vec<&String> = env
                .node_pod_cidrs
                .iter()
                .chain(&env.cluster_networks)
                .collect();
            if !networks.is_empty() {
                in_cluster.push(json!({ "networks": networks }));
            }
            warnings.push(Problem {
                blocking: false,
                ..rule.problem(
                    condition::REASON_UNSUPPORTED_INTENT,
                    "clusternetworkpolicy cuts egress to addresses outside the cluster, not \
                     ingress from them: ClusterNetworkPolicy ingress rules name only pods and \
                     namespaces",
                )
            });
            vec![
                egress(
                    "cluster-dns",
                    Action::Accept,
                    json!([kube_dns()]),
                    dns_ports(),
                ),
                egress("in-cluster", Action::Pass, Value::from(in_cluster), None),
                egress(
                    "external",
                    Action::Deny,
                    json!([{"networks": ["0.0.0.0/0", "::/0"]}]),
                    None,
                ),
            ]
        }
        _ => return rule.untranslated(Engine::ClusterNetworkPolicy),
    };
    let (subjects, not_honoured) = subjects_of(policy, rule, env);
    warnings.extend(not_honoured);
    let mut objects: Vec<_> = subjects
        .into_iter()
        .enumerate()
        .map(|(i, subject)| {
            let spec = json!({
                "tier": ADMIN,
                "priority": priority,
                "subject": subject,
                "egress": egress,
            });
            let meta = metadata(
                policy,
                Engine::ClusterNetworkPolicy,
                nth_name(policy, rule.key, i),
                None,
                &[],
            );
            object(&CLUSTER_NETWORK_POLICY, meta, json!({ "spec": spec }))
        })
        .collect();
    // The first (which no longer selects the excepted namespaces) last: when an exception
    // comes into force the others, which select the pods of those namespaces it does not let
    // out, are sent first.
    objects.rotate_left(1);
    Ok(Emitted { objects, warnings })
}

/// The subjects of `rule`'s policies ([`subjects`]). Beyond the bound nothing is left out: the
/// binding's subject alone, so that the intent stays enforced on every selected pod rather than
/// on none, and a warning saying so.
fn subjects_of(
    policy: &PolicyInput,
    rule: &Rule,
    env: &Environment,
) -> (Vec<Value>, Option<Problem>) {
    let namespaces = namespace_selector(policy, env);
    // Not the exceptions naming workloads: see `by_labels`.
    let excepted = by_labels(policy, rule);
    if let Some(subjects) = subjects(&namespaces, &policy.selector, &excepted) {
        return (subjects, None);
    }
    let names: Vec<String> = excepted.iter().map(|e| e.describe()).collect();
    let warning = Problem {
        blocking: false,
        ..rule.problem(
            condition::REASON_EXCEPTION_NOT_HONOURED,
            format!(
                "clusternetworkpolicy does not honour exceptions to intent `{}` ({}): leaving \
                 out the pods they let out would take more than {MAX_SELECTORS} \
                 ClusterNetworkPolicies, so it still enforces the intent on their workloads; \
                 narrow or merge the exceptions",
                rule.spec.id,
                names.join(", ")
            ),
        )
    };
    (vec![subject(namespaces, &policy.selector)], Some(warning))
}

/// The subjects of the ClusterNetworkPolicies of one intent of a cluster binding selecting
/// `namespaces` and, in them, `pods`, with the pods `excepted` let out left out; `None` when
/// that takes more than [`MAX_SELECTORS`]. Exceptions are per namespace, and a subject has a
/// namespace selector and a pod selector whose conjunction it selects, so "selected and not
/// excepted" is written as a union: the selected pods of the namespaces no exception is in
/// (`NotIn` their names), first, so that its name stays when exceptions come and go; then, for
/// each namespace an exception is in (`In` its name), one subject per selector of
/// [`excluding`] the exceptions there (none when one lets out every pod of it).
///
/// Their policies have the same rules and the same priority. network-policy-api leaves open
/// which of several policies of one priority that match a connection applies ("the
/// implementation can apply any of the matching policies to the connection",
/// `ClusterNetworkPolicySpec.priority`, v0.3.0); any of these gives the same verdict.
fn subjects(
    namespaces: &Value,
    pods: &LabelSelector,
    excepted: &[&Excepted],
) -> Option<Vec<Value>> {
    let mut by_namespace: BTreeMap<&str, Vec<&Excepted>> = BTreeMap::new();
    for e in excepted {
        by_namespace
            .entry(e.namespace.as_str())
            .or_default()
            .push(e);
    }
    if by_namespace.is_empty() {
        return Some(vec![subject(namespaces.clone(), pods)]);
    }
    let names: Vec<&str> = by_namespace.keys().copied().collect();
    let mut out = vec![subject(with_names(namespaces, "NotIn", &names), pods)];
    for (namespace, exceptions) in &by_namespace {
        for selector in excluding(pods, exceptions)? {
            out.push(subject(
                with_names(namespaces, "In", &[namespace]),
                &selector,
            ));
            if out.len() > MAX_SELECTORS {
                return None;
            }
        }
    }
    Some(out)
}

fn subject(namespaces: Value, pods: &LabelSelector) -> Value {
    json!({"pods": {"namespaceSelector": namespaces, "podSelector": selector_json(pods)}})
}

/// `namespaces` (a namespace selector of `matchExpressions`) with the namespaces named `names`
/// required `In` or `NotIn` too.
fn with_names(namespaces: &Value, operator: &str, names: &[&str]) -> Value {
    let mut out = namespaces.clone();
    let requirement = json!({"key": NAMESPACE_NAME_LABEL, "operator": operator, "values": names});
    match out["matchExpressions"].as_array_mut() {
        Some(expressions) => expressions.push(requirement),
        None => out["matchExpressions"] = json!([requirement]),
    }
    out
}

fn egress(name: &str, action: Action, to: Value, protocols: Option<Value>) -> Value {
    let mut rule = json!({"name": name, "action": action, "to": to});
    if let Some(protocols) = protocols {
        rule["protocols"] = protocols;
    }
    rule
}

/// DNS, and DNS over TLS.
fn dns_ports() -> Option<Value> {
    Some(json!([
        {"udp": {"destinationPort": {"number": 53}}},
        {"tcp": {"destinationPort": {"number": 53}}},
        {"tcp": {"destinationPort": {"number": 853}}},
    ]))
}

/// The cluster DNS pods.
fn kube_dns() -> Value {
    json!({"pods": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::admin_priorities::tests::rules;
    use crate::engines::{EngineSet, Preference, Ranked, priorities, translate};
    use crate::intents::Origin;
    use crate::namespaces::ProtectedNamespaces;
    use nimbus_api::NamespaceSelector;
    use std::collections::BTreeSet;

    #[test]
    fn a_binding_beyond_its_band_is_unenforced_and_says_so() {
        let dns = rules(&[id::DNS_MANIPULATION]);
        let names: Vec<String> = (0..=400).map(|i| format!("p{i:03}")).collect();
        let got = priorities(names.iter().map(|name| Ranked {
            name,
            created: None,
            rules: &dns,
        }));
        let cnp = nimbus_api::ClusterNimbusPolicy::new(
            "p400",
            serde_json::from_value(json!({"rules": dns})).unwrap(),
        );
        let input = PolicyInput::cluster(&cnp, "uid");
        let env = Environment {
            admin_priorities: Some(got),
            ..Environment::default()
        };
        let t = translate(&input, &env, &cnp_first());
        assert!(
            t.objects
                .iter()
                .all(|g| g.engine != Engine::ClusterNetworkPolicy)
        );
        assert!(
            t.problems
                .iter()
                .any(|p| p.blocking && p.message.contains("all 400 are taken")),
            "{:?}",
            t.problems
        );
    }

    fn cnp_first() -> EngineSet {
        EngineSet {
            preference: Preference::new(&[Engine::ClusterNetworkPolicy]).unwrap(),
            ..EngineSet::all()
        }
    }

    #[test]
    fn one_admin_tier_policy_per_intent_selects_the_bindings_namespaces_and_pods() {
        let cnp = nimbus_api::ClusterNimbusPolicy::new(
            "shop",
            serde_json::from_value(json!({
                "rules": rules(&[id::DNS_MANIPULATION, id::DENY_EXTERNAL_NETWORK_ACCESS]),
                "workloadSelector": {"matchLabels": {"app": "web"}},
                "nsSelector": {"matchNames": ["*"], "excludeNames": ["legacy"]},
            }))
            .unwrap(),
        );
        let input = PolicyInput::cluster(&cnp, "uid");
        assert_eq!(input.origin, Origin::Cluster);
        assert_eq!(
            input.namespaces,
            Some(NamespaceSelector {
                match_names: Some(vec!["*".into()]),
                exclude_names: Some(vec!["legacy".into()]),
            })
        );
        let env = Environment {
            protected_namespaces: ProtectedNamespaces::new(["kube-system"]),
            node_pod_cidrs: BTreeSet::from(["10.244.0.0/16".to_owned()]),
            cluster_networks: BTreeSet::from(["10.96.0.0/12".to_owned()]),
            ..Environment::default()
        };
        let t = translate(&input, &env, &cnp_first());
        let written: Vec<_> = t
            .objects
            .iter()
            .filter(|g| g.engine == Engine::ClusterNetworkPolicy)
            .map(|g| {
                (
                    g.object.metadata.name.clone().unwrap(),
                    g.object.data["spec"].clone(),
                )
            })
            .collect();
        assert_eq!(written.len(), 2, "{:?}", t.objects);
        let subject = json!({"pods": {
            "namespaceSelector": {"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "legacy"]},
            ]},
            "podSelector": {"matchLabels": {"app": "web"}},
        }});
        let (dns, external) = (&written[0], &written[1]);
        assert_eq!(dns.0, "shop-dnsmanipulation");
        assert_eq!(dns.1["subject"], subject);
        assert_eq!(
            (dns.1["tier"].as_str(), dns.1["priority"].as_i64()),
            (Some("Admin"), Some(100))
        );
        assert_eq!(external.0, "shop-denyexternalnetworkaccess");
        assert_eq!(external.1["priority"].as_i64(), Some(500));
        assert_eq!(
            external.1["egress"][1]["to"][1],
            json!({"networks": ["10.244.0.0/16", "10.96.0.0/12"]})
        );
        // What it does not cut is said, without leaving the intent unenforced.
        let said: Vec<_> = t
            .problems
            .iter()
            .map(|p| (p.intent.as_str(), p.blocking))
            .collect();
        assert_eq!(
            said,
            [(id::DENY_EXTERNAL_NETWORK_ACCESS, false)],
            "{:?}",
            t.problems
        );
        assert!(t.problems[0].message.contains("not ingress"));
        // NetworkPolicies are not written from a cluster policy, whichever engine is preferred.
        assert!(t.objects.iter().all(|g| g.engine != Engine::NetworkPolicy));
        // With the default preference NetworkPolicy is in force for cluster bindings.
        let t = translate(&input, &env, &EngineSet::all());
        assert!(
            t.objects
                .iter()
                .all(|g| g.engine != Engine::ClusterNetworkPolicy)
        );
    }

    fn exception(name: &str, namespace: &str, selector: Value) -> Excepted {
        Excepted {
            kind: Default::default(),
            name: name.into(),
            namespace: namespace.into(),
            selector: serde_json::from_value(selector).expect("a selector"),
            workloads: Vec::new(),
            intents: BTreeSet::from([id::DNS_MANIPULATION.to_owned()]),
            reason: "until 2.4".into(),
            expires_at: k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            signatures: Default::default(),
            controls: None,
        }
    }

    fn matches(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
        use kube::core::{Selector, SelectorExt};
        let selector: LabelSelector = serde_json::from_value(selector.clone()).expect("selector");
        Selector::try_from(selector)
            .expect("a valid selector")
            .matches(labels)
    }

    /// Every pod of a small universe (three namespaces, one of them unbound; each of two labels
    /// absent or one of two values) is a subject of some policy exactly when kube's own
    /// selector matching says the binding selects it and no exception of its namespace does.
    #[test]
    fn the_subjects_select_what_the_binding_selects_and_no_exception_of_the_namespace_does() {
        let namespaces = json!({"matchExpressions": [
            {"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": ["kube-system"]},
            {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": ["shop", "web"]},
        ]});
        let pods: LabelSelector =
            serde_json::from_value(json!({"matchLabels": {"app": "a"}})).expect("selector");
        let values = [None, Some("a"), Some("b")];
        let mut universe = Vec::new();
        for ns in ["shop", "web", "kube-system"] {
            for app in values {
                for tier in values {
                    let labels: BTreeMap<String, String> = [("app", app), ("tier", tier)]
                        .into_iter()
                        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
                        .collect();
                    universe.push((ns, labels));
                }
            }
        }
        // (case, exceptions, how many subjects)
        let cases = [
            ("none", vec![], 1),
            (
                "one label in shop",
                vec![exception(
                    "e",
                    "shop",
                    json!({"matchLabels": {"tier": "a"}}),
                )],
                2,
            ),
            (
                "two labels in shop, one in web",
                vec![
                    exception(
                        "e",
                        "shop",
                        json!({"matchLabels": {"tier": "a", "app": "a"}}),
                    ),
                    exception(
                        "f",
                        "web",
                        json!({"matchExpressions": [
                        {"key": "tier", "operator": "Exists"}]}),
                    ),
                ],
                4,
            ),
            (
                "every pod of web, and in an unbound namespace",
                vec![
                    exception("e", "web", json!({})),
                    exception("f", "kube-system", json!({"matchLabels": {"tier": "a"}})),
                ],
                2,
            ),
        ];
        for (case, exceptions, count) in cases {
            let refs: Vec<&Excepted> = exceptions.iter().collect();
            let subjects = subjects(&namespaces, &pods, &refs).expect("within the bound");
            assert_eq!(subjects.len(), count, "{case}: {subjects:#?}");
            for (ns, labels) in &universe {
                let ns_labels = BTreeMap::from([(NAMESPACE_NAME_LABEL.to_owned(), ns.to_string())]);
                let bound = ["shop", "web"].contains(ns)
                    && labels.get("app").map(String::as_str) == Some("a");
                let excepted = exceptions.iter().any(|e| {
                    e.namespace == *ns
                        && matches(&serde_json::to_value(&e.selector).expect("json"), labels)
                });
                let got = subjects.iter().any(|s| {
                    matches(&s["pods"]["namespaceSelector"], &ns_labels)
                        && matches(&s["pods"]["podSelector"], labels)
                });
                assert_eq!(got, bound && !excepted, "{case}: {ns} {labels:?}");
            }
        }
        let wide = json!({"matchLabels": {"a": "1", "b": "1", "c": "1", "d": "1"}});
        let (e, f) = (
            exception("e", "shop", wide.clone()),
            exception("f", "web", wide),
        );
        // 1 + 4 + 4 = 9 fit; 1 + 16 + 4 = 21 do not.
        assert_eq!(
            subjects(&namespaces, &pods, &[&e, &f]).map(|s| s.len()),
            Some(9)
        );
        assert_eq!(subjects(&namespaces, &pods, &[&e, &e, &f]), None);
    }

    #[test]
    fn beyond_the_bound_the_binding_stays_enforced_everywhere_and_says_so() {
        let cnp = nimbus_api::ClusterNimbusPolicy::new(
            "shop",
            serde_json::from_value(json!({
                "rules": rules(&[id::DNS_MANIPULATION]),
                "workloadSelector": {"matchLabels": {"app": "web"}},
            }))
            .unwrap(),
        );
        let mut input = PolicyInput::cluster(&cnp, "uid");
        let plain = translate(&input, &Environment::default(), &cnp_first());
        let wide = json!({"matchLabels": {"a": "1", "b": "1", "c": "1", "d": "1", "e": "1"}});
        input.exceptions = vec![
            exception("e", "shop", wide.clone()),
            exception("f", "shop", wide),
        ];
        let t = translate(&input, &Environment::default(), &cnp_first());
        let objects = |t: &crate::engines::Translation| -> Vec<Value> {
            (t.objects.iter())
                .filter(|g| g.engine == Engine::ClusterNetworkPolicy)
                .map(|g| serde_json::to_value(&g.object).expect("json"))
                .collect()
        };
        assert_eq!(objects(&t), objects(&plain));
        let said: Vec<_> = (t.problems.iter())
            .filter(|p| p.message.starts_with("clusternetworkpolicy"))
            .map(|p| (p.reason, p.blocking))
            .collect();
        assert_eq!(said, [(condition::REASON_EXCEPTION_NOT_HONOURED, false)]);
    }
}
