//! What a binding should have in force: the engine-neutral policies it generates, and where.
//! The operator's binding controllers apply exactly this plan and `nimbus translate` prints it,
//! so the two cannot disagree; the engines then turn each policy into native objects
//! ([`crate::engines::translate`]).

use crate::namespaces::{self, ProtectedNamespaces};
use crate::{CompileError, compile_binding, compile_cluster_binding, objects};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, FOLLOW_NAMESPACE_MODE_ANNOTATION,
    FOLLOW_NAMESPACE_MODE_YES, IntentWriter, MODE_LABEL, MODE_SHADOW, NamespaceSelector,
    NimbusPolicy, NimbusRule, SecurityIntent, SecurityIntentBinding, mode,
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
    /// Who last wrote each bound intent ([`crate::authors`]), in `bound_intents` order.
    pub writers: Vec<IntentWriter>,
    /// What it enforces: [`mode::ENFORCE`], or [`mode::SHADOW`] (every rule audited).
    pub mode: &'static str,
}

/// The policies of a ClusterSecurityIntentBinding.
#[derive(Debug, Clone)]
pub struct ClusterBindingPolicies {
    /// Its ClusterNimbusPolicy; `None` when no referenced intent exists.
    pub cluster_policy: Option<ClusterNimbusPolicy>,
    /// Every live namespace, in name order, with the NimbusPolicy it should hold from this
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
    /// Who last wrote each bound intent ([`crate::authors`]), in `bound_intents` order.
    pub writers: Vec<IntentWriter>,
    /// What it enforces: [`mode::ENFORCE`], [`mode::SHADOW`] (every rule audited, the binding
    /// is labelled) or [`mode::MIXED`] (some selected namespaces are labelled: their policies'
    /// rules are audited).
    pub mode: &'static str,
}

/// Whether an object's labels put it in shadow mode ([`MODE_LABEL`]).
pub fn in_shadow<K: kube::Resource>(obj: &K) -> bool {
    obj.labels().get(MODE_LABEL).map(String::as_str) == Some(MODE_SHADOW)
}

/// Whether a cluster binding lets a namespace's shadow label shadow it there: only when the
/// binding itself opts in ([`FOLLOW_NAMESPACE_MODE_ANNOTATION`]). Whoever may create or label a
/// namespace may shadow what that namespace's own team binds, never an administrator's
/// cluster binding unless its author said so.
pub fn follows_namespace_mode(csib: &ClusterSecurityIntentBinding) -> bool {
    csib.annotations()
        .get(FOLLOW_NAMESPACE_MODE_ANNOTATION)
        .map(String::as_str)
        == Some(FOLLOW_NAMESPACE_MODE_YES)
}

/// Every rule of `rules` with `action`: shadow mode audits all, the preview enforces all.
pub fn set_action(rules: &mut [NimbusRule], action: &str) {
    for rule in rules {
        rule.rule.action = action.to_owned();
    }
}

/// Plans a namespaced binding in `namespace` (`None`: not known, offline). `intent` looks a
/// SecurityIntent up by name. A binding or namespace in shadow mode audits every rule.
pub fn binding<I: Borrow<SecurityIntent>>(
    sib: &SecurityIntentBinding,
    intent: impl Fn(&str) -> Option<I>,
    namespace: Option<&Namespace>,
) -> Result<BindingPolicies, CompileError> {
    let compiled = compile_binding(&sib.spec, &intent)?;
    let writers = writers(&compiled.bound_intents, &intent);
    let shadow = in_shadow(sib) || namespace.is_some_and(in_shadow);
    Ok(BindingPolicies {
        policy: compiled.policy.map(|mut spec| {
            if shadow {
                set_action(&mut spec.rules, crate::engines::AUDIT);
            }
            objects::binding_policy(sib, spec)
        }),
        bound_intents: compiled.bound_intents,
        missing_intents: compiled.missing_intents,
        writers,
        mode: if shadow { mode::SHADOW } else { mode::ENFORCE },
    })
}

/// Plans a cluster binding over `namespaces` (every namespace of the cluster; offline, the
/// ones given). A protected namespace is never selected. A namespace's shadow label counts only
/// when the binding [`follows_namespace_mode`].
pub fn cluster_binding<'n, I: Borrow<SecurityIntent>>(
    csib: &ClusterSecurityIntentBinding,
    intent: impl Fn(&str) -> Option<I>,
    namespaces: impl IntoIterator<Item = &'n Namespace>,
    protected: &ProtectedNamespaces,
) -> Result<ClusterBindingPolicies, CompileError> {
    let compiled = compile_cluster_binding(&csib.spec, &intent)?;
    let writers = writers(&compiled.bound_intents, &intent);
    let shadow = in_shadow(csib);
    let follows = follows_namespace_mode(csib);
    let mut shadowed_namespaces = false;
    let mut namespace_policies: Vec<(String, Option<NimbusPolicy>)> = namespaces
        .into_iter()
        .filter(|ns| !namespaces::is_terminating(ns))
        .map(|ns| {
            let name = ns.name_any();
            let selected = selects_namespace(csib, &name, protected);
            let policy = compiled
                .namespace_policy
                .clone()
                .filter(|_| selected)
                .map(|mut spec| {
                    if shadow || (follows && in_shadow(ns)) {
                        shadowed_namespaces |= !shadow;
                        set_action(&mut spec.rules, crate::engines::AUDIT);
                    }
                    objects::namespace_policy(csib, &name, spec)
                });
            (name, policy)
        })
        .collect();
    // In name order whatever order the cache gave: what the status says of them (and so
    // whether it is rewritten) must not change with it.
    namespace_policies.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(ClusterBindingPolicies {
        cluster_policy: compiled.cluster_policy.map(|mut spec| {
            // Cluster-wide objects cover every namespace: only the binding's own mark counts.
            if shadow {
                set_action(&mut spec.rules, crate::engines::AUDIT);
            }
            objects::cluster_policy(csib, spec)
        }),
        namespaces: namespace_policies,
        has_namespace_policies: compiled.namespace_policy.is_some(),
        protected: namespace_selector(csib)
            .map(|s| namespaces::protected_names(s, protected))
            .unwrap_or_default(),
        bound_intents: compiled.bound_intents,
        missing_intents: compiled.missing_intents,
        writers,
        mode: match (shadow, shadowed_namespaces) {
            (true, _) => mode::SHADOW,
            (false, true) => mode::MIXED,
            (false, false) => mode::ENFORCE,
        },
    })
}

/// Who last wrote each of the `bound` intents.
fn writers<I: Borrow<SecurityIntent>>(
    bound: &[String],
    intent: &impl Fn(&str) -> Option<I>,
) -> Vec<IntentWriter> {
    bound
        .iter()
        .filter_map(|name| intent(name).map(|si| crate::authors::intent_writer(si.borrow())))
        .collect()
}

fn namespace_selector(csib: &ClusterSecurityIntentBinding) -> Option<&NamespaceSelector> {
    csib.spec.selector.as_ref()?.ns_selector.as_ref()
}

/// Whether the cluster binding selects the namespace `namespace` (a protected one never is).
/// It says nothing of whether the selector is valid: planning the binding does.
pub fn selects_namespace(
    csib: &ClusterSecurityIntentBinding,
    namespace: &str,
    protected: &ProtectedNamespaces,
) -> bool {
    namespace_selector(csib).is_some_and(|s| namespaces::selects(s, namespace, protected))
}

/// Whether `np` is the NimbusPolicy an existing binding generates: its controller is a
/// binding (looked up by namespace and name, or by name for a cluster binding, and matched by
/// uid) whose policy has this name and this namespace, which a cluster binding must select.
/// Only such a policy is translated: whoever may write NimbusPolicies must not get what a
/// binding's author would have to be trusted with (a sandbox RoleBinding, say).
pub fn generates<B, C>(
    np: &NimbusPolicy,
    binding: impl Fn(&str, &str) -> Option<B>,
    cluster_binding: impl Fn(&str) -> Option<C>,
    protected: &ProtectedNamespaces,
) -> bool
where
    B: Borrow<SecurityIntentBinding>,
    C: Borrow<ClusterSecurityIntentBinding>,
{
    let (name, namespace) = (np.name_any(), np.namespace().unwrap_or_default());
    controller(np).is_some_and(|o| match o.kind.as_str() {
        "SecurityIntentBinding" => {
            o.name == name
                && binding(&namespace, &o.name).is_some_and(|b| has_uid(b.borrow(), &o.uid))
        }
        "ClusterSecurityIntentBinding" => {
            name == crate::names::cluster_binding_policy_name(&o.name)
                && cluster_binding(&o.name).is_some_and(|b| {
                    let b = b.borrow();
                    has_uid(b, &o.uid) && selects_namespace(b, &namespace, protected)
                })
        }
        _ => false,
    })
}

/// Whether `cwnp` is the ClusterNimbusPolicy an existing cluster binding generates (see
/// [`generates`]).
pub fn generates_cluster_policy<C: Borrow<ClusterSecurityIntentBinding>>(
    cwnp: &ClusterNimbusPolicy,
    cluster_binding: impl Fn(&str) -> Option<C>,
) -> bool {
    controller(cwnp).is_some_and(|o| {
        o.kind == "ClusterSecurityIntentBinding"
            && o.name == cwnp.name_any()
            && cluster_binding(&o.name).is_some_and(|b| has_uid(b.borrow(), &o.uid))
    })
}

/// The controller ownerReference of `obj`, if any.
fn controller<K: kube::Resource>(obj: &K) -> Option<&OwnerReference> {
    obj.owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
}

fn has_uid<K: kube::Resource>(obj: &K, uid: &str) -> bool {
    obj.meta().uid.as_deref() == Some(uid)
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

    /// A policy is a binding's only with the name, namespace and owner uid its binding would
    /// give it (for a cluster binding, in a namespace it selects).
    #[test]
    fn a_policy_is_a_bindings_only_where_the_binding_would_put_it() {
        let sib: SecurityIntentBinding = serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
            "metadata": {"name": "web", "namespace": "a", "uid": "u-web"},
            "spec": {"intents": [{"name": "dns"}], "selector": {}}
        }))
        .expect("a binding");
        let team = csib(&["a"], &["dns"]);
        let policy = |namespace: &str, name: &str, kind: &str, owner: &str, uid: &str| {
            serde_json::from_value::<NimbusPolicy>(json!({
                "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "NimbusPolicy",
                "metadata": {"name": name, "namespace": namespace, "ownerReferences": [{
                    "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": kind,
                    "name": owner, "uid": uid, "controller": true}]},
                "spec": {"rules": [], "selector": {}}
            }))
            .expect("a policy")
        };
        let protected = ProtectedNamespaces::default();
        let generates = |np: &NimbusPolicy| {
            super::generates(
                np,
                |ns, name| (ns == "a" && name == "web").then_some(&sib),
                |name| (name == "team").then_some(&team),
                &protected,
            )
        };
        let cases = [
            (
                policy("a", "web", "SecurityIntentBinding", "web", "u-web"),
                true,
            ),
            (
                policy("a", "web", "SecurityIntentBinding", "web", "u-old"),
                false,
            ),
            (
                policy("a", "other", "SecurityIntentBinding", "web", "u-web"),
                false,
            ),
            (
                policy("b", "web", "SecurityIntentBinding", "web", "u-web"),
                false,
            ),
            (
                policy(
                    "a",
                    "nimbus-ctlr-gen-team",
                    "ClusterSecurityIntentBinding",
                    "team",
                    "u",
                ),
                true,
            ),
            (
                policy(
                    "b",
                    "nimbus-ctlr-gen-team",
                    "ClusterSecurityIntentBinding",
                    "team",
                    "u",
                ),
                false,
            ),
            (
                policy("a", "team", "ClusterSecurityIntentBinding", "team", "u"),
                false,
            ),
            (policy("a", "web", "Deployment", "web", "u-web"), false),
        ];
        for (np, expected) in &cases {
            assert_eq!(generates(np), *expected, "{:?}", np.metadata);
        }
        let cluster: ClusterNimbusPolicy = serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "ClusterNimbusPolicy",
            "metadata": {"name": "team", "ownerReferences": [{
                "apiVersion": "intent.security.nimbus.com/v1alpha1",
                "kind": "ClusterSecurityIntentBinding", "name": "team", "uid": "u", "controller": true}]},
            "spec": {"rules": []}
        }))
        .expect("a cluster policy");
        assert!(generates_cluster_policy(&cluster, |n| (n == "team").then_some(&team)));
        assert!(!generates_cluster_policy(&cluster, |_| None::<
            &ClusterSecurityIntentBinding,
        >));
    }

    /// Shadow mode: a labelled binding, or a binding in a labelled namespace, audits every
    /// rule; a cluster binding's labelled namespaces audit theirs only when it follows
    /// namespace labels (its cluster-wide policy only when the binding itself is labelled).
    #[test]
    fn shadow_mode_audits_every_rule_of_what_it_marks() {
        let shadow = |mut labels: serde_json::Value| {
            labels[MODE_LABEL] = MODE_SHADOW.into();
            labels
        };
        let actions = |rules: &[NimbusRule]| -> Vec<String> {
            rules.iter().map(|r| r.rule.action.clone()).collect()
        };
        let sib = |labels: serde_json::Value| -> SecurityIntentBinding {
            serde_json::from_value(json!({
                "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntentBinding",
                "metadata": {"name": "web", "namespace": "a", "labels": labels},
                "spec": {"intents": [{"name": "dns"}], "selector": {}}
            }))
            .expect("a binding")
        };
        let mut marked = namespace("a", false);
        marked.metadata.labels = Some([(MODE_LABEL.to_owned(), MODE_SHADOW.to_owned())].into());
        let plain = namespace("a", false);
        for (marked_or_not, ns, expected) in [
            (sib(json!({})), Some(&plain), (mode::ENFORCE, "Block")),
            (sib(json!({})), None, (mode::ENFORCE, "Block")),
            (
                sib(shadow(json!({"team": "x"}))),
                Some(&plain),
                (mode::SHADOW, "Audit"),
            ),
            (sib(json!({})), Some(&marked), (mode::SHADOW, "Audit")),
        ] {
            let plan = binding(&marked_or_not, intent, ns).expect("valid");
            let policy = plan.policy.expect("a policy");
            assert_eq!(
                (plan.mode, actions(&policy.spec.rules)),
                (expected.0, vec![expected.1.to_owned()])
            );
        }

        let all = [marked.clone(), namespace("b", false)];
        let protected = ProtectedNamespaces::default();
        // A cluster binding ignores namespace labels unless it opts in.
        let plan =
            cluster_binding(&csib(&["a", "b"], &["dns"]), intent, &all, &protected).expect("valid");
        assert_eq!(plan.mode, mode::ENFORCE);
        assert!(
            plan.namespace_policies()
                .all(|p| actions(&p.spec.rules) == ["Block"])
        );
        let mut following = csib(&["a", "b"], &["dns"]);
        following.metadata.annotations = Some(
            [(
                FOLLOW_NAMESPACE_MODE_ANNOTATION.to_owned(),
                FOLLOW_NAMESPACE_MODE_YES.to_owned(),
            )]
            .into(),
        );
        let plan = cluster_binding(&following, intent, &all, &protected).expect("valid");
        assert_eq!(plan.mode, mode::MIXED);
        let by_namespace: Vec<(&str, Vec<String>)> = plan
            .namespaces
            .iter()
            .map(|(n, p)| {
                (
                    n.as_str(),
                    actions(&p.as_ref().expect("selected").spec.rules),
                )
            })
            .collect();
        assert_eq!(
            by_namespace,
            [
                ("a", vec!["Audit".to_owned()]),
                ("b", vec!["Block".to_owned()])
            ]
        );
        let cluster = plan.cluster_policy.expect("a cluster policy");
        assert_eq!(actions(&cluster.spec.rules), ["Block"]);

        let mut labelled = csib(&["a", "b"], &["dns"]);
        labelled.metadata.labels = Some([(MODE_LABEL.to_owned(), MODE_SHADOW.to_owned())].into());
        let plan = cluster_binding(&labelled, intent, &all, &protected).expect("valid");
        assert_eq!(plan.mode, mode::SHADOW);
        assert_eq!(
            actions(&plan.cluster_policy.as_ref().expect("cluster").spec.rules),
            ["Audit"]
        );
        assert!(
            plan.namespace_policies()
                .all(|p| actions(&p.spec.rules) == ["Audit"])
        );
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
