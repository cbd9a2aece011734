//! ClusterNetworkPolicy engine (`policy.networking.k8s.io/v1alpha2`, network-policy-api
//! v0.3.0): a cluster binding's dnsManipulation and denyExternalNetworkAccess as Admin-tier
//! ClusterNetworkPolicies, one per binding and intent. The Admin tier is judged before any
//! NetworkPolicy, so no tenant's NetworkPolicy reopens what it denies, and it can hand traffic
//! on (`Pass`), so each intent cuts exactly what it names and leaves the rest to the
//! NetworkPolicies of the namespace.
//!
//! Each policy gets an Admin-tier priority of its own ([`super::priorities`]).

use super::admin_priorities::BANDS;
use super::{
    AuditForm, CLUSTER, CLUSTER_NETWORK_POLICY, Emitted, Enforces, Engine, EngineSpec, Environment,
    Fact, Output, PolicyInput, Problem, Rule, metadata, namespace_selector, native_name, object,
    selector_json,
};
use crate::intents::id;
use crate::names::MAX_NAME_LEN;
use crate::netpol::cluster::{ADMIN, Action};
use nimbus_api::condition;
use serde_json::{Value, json};

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
    honours_exceptions: &[],
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
    let spec = json!({
        "tier": ADMIN,
        "priority": priority,
        "subject": {"pods": {
            "namespaceSelector": namespace_selector(policy, env),
            "podSelector": selector_json(&policy.selector),
        }},
        "egress": egress,
    });
    let name = native_name(policy, rule.key, MAX_NAME_LEN);
    let meta = metadata(policy, Engine::ClusterNetworkPolicy, name, None, &[]);
    Ok(Emitted {
        objects: vec![object(
            &CLUSTER_NETWORK_POLICY,
            meta,
            json!({ "spec": spec }),
        )],
        warnings,
    })
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
}
