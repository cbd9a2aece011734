//! What a binding should have in force: the engine-neutral policies it generates, and where.
//! The operator's binding controllers apply exactly this plan and `nimbus translate` prints it,
//! so the two cannot disagree; the engines then turn each policy into native objects
//! ([`crate::engines::translate`]).

use crate::namespaces::{self, ProtectedNamespaces};
use crate::{CompileError, compile_binding, compile_cluster_binding, objects};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, SecurityIntent,
    SecurityIntentBinding,
};
use std::borrow::Borrow;

/// The policy of a SecurityIntentBinding.
#[derive(Debug, Clone)]
pub struct BindingPolicies {
    /// Its NimbusPolicy; `None` when no referenced intent exists, and then none may exist.
    pub policy: Option<NimbusPolicy>,
    /// Referenced intents that exist, in `spec.intents` order.
    pub bound_intents: Vec<String>,
    /// Referenced intents that do not exist.
    pub missing_intents: Vec<String>,
}

/// The policies of a ClusterSecurityIntentBinding.
#[derive(Debug, Clone)]
pub struct ClusterBindingPolicies {
    /// Its ClusterNimbusPolicy; `None` when no referenced intent exists.
    pub cluster_policy: Option<ClusterNimbusPolicy>,
    /// Every live namespace, in the order given, with the NimbusPolicy it should hold from this
    /// binding (`None`: none, and one left from earlier is deleted). Terminating namespaces are
    /// left out: they take their policies with them.
    pub namespaces: Vec<(String, Option<NimbusPolicy>)>,
    /// Whether the binding has per-namespace policies at all (it has intents, whether or not a
    /// namespace is selected).
    pub has_namespace_policies: bool,
    /// Protected namespaces its `matchNames` names: they get nothing.
    pub protected: Vec<String>,
    pub bound_intents: Vec<String>,
    pub missing_intents: Vec<String>,
}

/// Plans a namespaced binding. `intent` looks a SecurityIntent up by name.
pub fn binding<I: Borrow<SecurityIntent>>(
    sib: &SecurityIntentBinding,
    intent: impl Fn(&str) -> Option<I>,
) -> Result<BindingPolicies, CompileError> {
    let compiled = compile_binding(&sib.spec, intent)?;
    Ok(BindingPolicies {
        policy: compiled
            .policy
            .map(|spec| objects::binding_policy(sib, spec)),
        bound_intents: compiled.bound_intents,
        missing_intents: compiled.missing_intents,
    })
}

/// Plans a cluster binding over `namespaces` (every namespace of the cluster; offline, the
/// ones given). A protected namespace is never selected.
pub fn cluster_binding<'n, I: Borrow<SecurityIntent>>(
    csib: &ClusterSecurityIntentBinding,
    intent: impl Fn(&str) -> Option<I>,
    namespaces: impl IntoIterator<Item = &'n Namespace>,
    protected: &ProtectedNamespaces,
) -> Result<ClusterBindingPolicies, CompileError> {
    let compiled = compile_cluster_binding(&csib.spec, intent)?;
    let selector = csib
        .spec
        .selector
        .as_ref()
        .and_then(|s| s.ns_selector.as_ref());
    let namespace_policies = namespaces
        .into_iter()
        .filter(|ns| !namespaces::is_terminating(ns))
        .map(|ns| {
            let name = ns.name_any();
            let selected = selector.is_some_and(|s| namespaces::selects(s, &name, protected));
            let policy = compiled
                .namespace_policy
                .clone()
                .filter(|_| selected)
                .map(|spec| objects::namespace_policy(csib, &name, spec));
            (name, policy)
        })
        .collect();
    Ok(ClusterBindingPolicies {
        cluster_policy: compiled
            .cluster_policy
            .map(|spec| objects::cluster_policy(csib, spec)),
        namespaces: namespace_policies,
        has_namespace_policies: compiled.namespace_policy.is_some(),
        protected: selector
            .map(|s| namespaces::protected_names(s, protected))
            .unwrap_or_default(),
        bound_intents: compiled.bound_intents,
        missing_intents: compiled.missing_intents,
    })
}

impl ClusterBindingPolicies {
    /// The per-namespace policies that should exist.
    pub fn namespace_policies(&self) -> impl Iterator<Item = &NimbusPolicy> {
        self.namespaces.iter().filter_map(|(_, p)| p.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use serde_json::json;

    fn namespace(name: &str, terminating: bool) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                deletion_timestamp: terminating.then(|| Time(Default::default())),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn intent(name: &str) -> Option<SecurityIntent> {
        serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
            "metadata": {"name": name},
            "spec": {"intent": {"id": "dnsManipulation", "action": "Block"}}
        }))
        .ok()
        .filter(|_| name == "dns")
    }

    fn csib(match_names: &[&str], intents: &[&str]) -> ClusterSecurityIntentBinding {
        let intents: Vec<_> = intents.iter().map(|n| json!({"name": n})).collect();
        serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "kind": "ClusterSecurityIntentBinding",
            "metadata": {"name": "team", "uid": "u"},
            "spec": {"intents": intents, "selector": {"nsSelector": {"matchNames": match_names}}}
        }))
        .expect("valid binding")
    }

    #[test]
    fn cluster_bindings_reach_live_selected_unprotected_namespaces() {
        let all = [
            namespace("a", false),
            namespace("b", false),
            namespace("gone", true),
            namespace("kube-system", false),
        ];
        let protected = ProtectedNamespaces::default();
        let plan = cluster_binding(
            &csib(&["a", "gone", "kube-system"], &["dns", "missing"]),
            intent,
            &all,
            &protected,
        )
        .expect("valid");
        let wanted: Vec<(&str, Option<String>)> = plan
            .namespaces
            .iter()
            .map(|(ns, p)| (ns.as_str(), p.as_ref().and_then(|p| p.namespace())))
            .collect();
        assert_eq!(
            wanted,
            [
                ("a", Some("a".to_owned())),
                ("b", None),
                ("kube-system", None)
            ]
        );
        assert_eq!(plan.protected, ["kube-system"]);
        assert!(plan.has_namespace_policies && plan.cluster_policy.is_some());
        assert_eq!(plan.bound_intents, ["dns"]);
        assert_eq!(plan.missing_intents, ["missing"]);
    }

    #[test]
    fn a_cluster_binding_without_intents_wants_nothing_anywhere() {
        let all = [namespace("a", false)];
        let plan = cluster_binding(
            &csib(&["a"], &["missing"]),
            intent,
            &all,
            &ProtectedNamespaces::default(),
        )
        .expect("valid");
        assert!(matches!(&plan.namespaces[..], [(a, None)] if a == "a"));
        assert!(!plan.has_namespace_policies && plan.cluster_policy.is_none());
    }
}
