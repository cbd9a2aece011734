//! Kubernetes NetworkPolicy engine: dnsManipulation and denyExternalNetworkAccess.

use super::Engine;
use super::{
    AuditForm, Enforces, EngineSpec, Environment, Fact, NAMESPACED, NETWORK_POLICY, Output,
    PolicyInput, Rule, by_labels, metadata, nth_name, object, selector_json,
};
use crate::exceptions::{MAX_SELECTORS, excluding};
use crate::intents::id;
use nimbus_api::condition;
use serde_json::{Value, json};

/// The private address ranges (RFC 1918) denyExternalNetworkAccess keeps reachable.
const PRIVATE_RANGES: [&str; 3] = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"];

pub(super) const SPEC: EngineSpec = EngineSpec {
    engine: Engine::NetworkPolicy,
    name: "netpol",
    manager: "nimbus-netpol",
    enforces: &[
        Enforces {
            intent: id::DNS_MANIPULATION,
            origins: NAMESPACED,
            reads: &[Fact::NodePodCidrs],
            // A NetworkPolicy cuts traffic whatever it is called.
            audit: AuditForm::None,
            effect: "a NetworkPolicy cuts EVERY egress of the selected pods except DNS (port 53) to the cluster DNS and the nodes",
        },
        Enforces {
            intent: id::DENY_EXTERNAL_NETWORK_ACCESS,
            origins: NAMESPACED,
            reads: &[Fact::NodePodCidrs],
            // A NetworkPolicy cuts traffic whatever it is called.
            audit: AuditForm::None,
            effect: "a NetworkPolicy cuts every egress of the selected pods except DNS (port 53), and admits ingress only from private and pod networks",
        },
    ],
    kinds: &[&NETWORK_POLICY],
    confined_to_k8tls_namespace: false,
    translate,
    optional_kinds: &[],
    // NetworkPolicy allows add up: a tenant's allow-all reopens it (tests/clusternetworkpolicy.rs).
    tenant_proof: Some(false),
    // The excepted pods are left out of the podSelector (see `translate`).
    honours_exceptions: &[id::DNS_MANIPULATION, id::DENY_EXTERNAL_NETWORK_ACCESS],
};

/// One NetworkPolicy per selector of [`excluding`]: the binding's selector, minus the pods the
/// exceptions in force let out (several when an exception names several labels; the first
/// keeps the policy's usual name ([`nth_name`]), so that an exception's coming and going updates it in
/// place). NetworkPolicies add up, so identical rules over those selectors restrict exactly
/// the pods selected and not excepted.
fn translate(policy: &PolicyInput, rule: &Rule, env: &Environment) -> Output {
    // Not those naming workloads: see `by_labels`.
    let excepted = by_labels(policy, rule);
    let Some(selectors) = excluding(&policy.selector, &excepted) else {
        return Err(rule.problem(
            condition::REASON_EXCEPTION_NOT_HONOURED,
            format!(
                "netpol: leaving out the pods the exceptions in force let out would take more \
                 than {MAX_SELECTORS} NetworkPolicies; narrow or merge the exceptions"
            ),
        ));
    };
    let mut objects = Vec::new();
    for (i, selector) in selectors.iter().enumerate() {
        let Some(spec) = spec(rule, env, selector_json(selector)) else {
            return rule.untranslated(Engine::NetworkPolicy);
        };
        let meta = metadata(
            policy,
            Engine::NetworkPolicy,
            nth_name(policy, rule.key, i),
            policy.namespace.clone(),
            &[],
        );
        objects.push(object(&NETWORK_POLICY, meta, json!({ "spec": spec })));
    }
    Ok(objects.into())
}

/// The NetworkPolicy spec of `rule` for the pods `pod_selector` selects; `None` for an intent
/// this engine does not translate.
fn spec(rule: &Rule, env: &Environment, pod_selector: Value) -> Option<Value> {
    let node_cidrs = env
        .node_pod_cidrs
        .iter()
        .map(|cidr| json!({"ipBlock": {"cidr": cidr}}));
    let dns_ports = json!([{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]);
    Some(match rule.spec.id.as_str() {
        id::DNS_MANIPULATION => {
            let to: Vec<Value> = node_cidrs.chain([kube_dns()]).collect();
            json!({
                "podSelector": pod_selector,
                "policyTypes": ["Egress"],
                "egress": [{"to": to, "ports": dns_ports}],
            })
        }
        id::DENY_EXTERNAL_NETWORK_ACCESS => {
            let private = PRIVATE_RANGES.map(|cidr| json!({"ipBlock": {"cidr": cidr}}));
            let from: Vec<Value> = node_cidrs.clone().chain(private.clone()).collect();
            let to: Vec<Value> = [kube_dns()]
                .into_iter()
                .chain(node_cidrs)
                .chain(private)
                .collect();
            json!({
                "podSelector": pod_selector,
                "policyTypes": ["Egress", "Ingress"],
                "ingress": [{"from": from}],
                "egress": [{"to": to, "ports": dns_ports}],
            })
        }
        _ => return None,
    })
}

/// The cluster DNS pods.
fn kube_dns() -> Value {
    json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    })
}
