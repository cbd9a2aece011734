//! Bindings + intents → engine-neutral policy specs.

use crate::cel::{self, CelError};
use crate::{namespaces, validation};
use nimbus_api::{
    ClusterNimbusPolicySpec, ClusterSecurityIntentBindingSpec, MatchIntent, NimbusPolicySpec,
    NimbusRule, Rule, SecurityIntent, SecurityIntentBindingSpec,
};
use std::borrow::Borrow;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CompileError {
    #[error(transparent)]
    Cel(#[from] CelError),
    #[error("invalid namespace selector: {0}")]
    NamespaceSelector(String),
    /// Label keys, values or operators the API server rejects (each field error, with its
    /// path); the native policies could not be applied.
    #[error("invalid label selector: {}", .0.join("; "))]
    InvalidSelector(Vec<String>),
}

/// What a SecurityIntentBinding compiles to.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingPlan {
    /// The NimbusPolicy spec; `None` when none of the referenced intents exists, in which case
    /// the policy must not exist either.
    pub policy: Option<NimbusPolicySpec>,
    /// Referenced intents that exist, in `spec.intents` order.
    pub bound_intents: Vec<String>,
    /// Referenced intents that do not exist.
    pub missing_intents: Vec<String>,
}

/// What a ClusterSecurityIntentBinding compiles to.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterBindingPlan {
    /// The ClusterNimbusPolicy spec; `None` when no referenced intent exists.
    pub cluster_policy: Option<ClusterNimbusPolicySpec>,
    /// The spec of the NimbusPolicy in every selected namespace; `None` with `cluster_policy`.
    pub namespace_policy: Option<NimbusPolicySpec>,
    pub bound_intents: Vec<String>,
    pub missing_intents: Vec<String>,
}

/// Compiles a namespaced binding. `intent` looks a SecurityIntent up by name (from a cache).
///
/// Rules follow `spec.intents` order, one per existing intent; a name listed twice yields one
/// rule. The selector is `workloadSelector` ANDed with the compiled `spec.cel`.
pub fn compile_binding<I: Borrow<SecurityIntent>>(
    spec: &SecurityIntentBindingSpec,
    intent: impl Fn(&str) -> Option<I>,
) -> Result<BindingPlan, CompileError> {
    let base = spec.selector.workload_selector.clone().unwrap_or_default();
    check(validation::label_selector(
        &base,
        "spec.selector.workloadSelector",
    ))?;
    let selector = cel::compile_into(spec.cel.as_deref().unwrap_or_default(), base)?;
    let bound = bind(&spec.intents, intent);
    Ok(BindingPlan {
        policy: (!bound.rules.is_empty()).then_some(NimbusPolicySpec {
            selector,
            rules: bound.rules,
        }),
        bound_intents: bound.found,
        missing_intents: bound.missing,
    })
}

/// Compiles a cluster binding. `spec.cel` is ignored on cluster bindings (as in Nimbus).
pub fn compile_cluster_binding<I: Borrow<SecurityIntent>>(
    spec: &ClusterSecurityIntentBindingSpec,
    intent: impl Fn(&str) -> Option<I>,
) -> Result<ClusterBindingPlan, CompileError> {
    let selector = spec.selector.clone().unwrap_or_default();
    namespaces::validate(selector.ns_selector.as_ref()).map_err(CompileError::NamespaceSelector)?;
    let mut errors = selector
        .workload_selector
        .as_ref()
        .map(|s| validation::label_selector(s, "spec.selector.workloadSelector"))
        .unwrap_or_default();
    if let Some(labels) = selector
        .node_selector
        .as_ref()
        .and_then(|n| n.match_labels.as_ref())
    {
        errors.extend(validation::labels(
            labels,
            "spec.selector.nodeSelector.matchLabels",
        ));
    }
    check(errors)?;
    let bound = bind(&spec.intents, intent);
    let (cluster_policy, namespace_policy) = if bound.rules.is_empty() {
        (None, None)
    } else {
        let namespace_policy = NimbusPolicySpec {
            selector: selector.workload_selector.clone().unwrap_or_default(),
            rules: bound.rules.clone(),
        };
        let cluster_policy = ClusterNimbusPolicySpec {
            node_selector: selector.node_selector.unwrap_or_default(),
            ns_selector: selector.ns_selector,
            workload_selector: selector.workload_selector,
            rules: bound.rules,
        };
        (Some(cluster_policy), Some(namespace_policy))
    };
    Ok(ClusterBindingPlan {
        cluster_policy,
        namespace_policy,
        bound_intents: bound.found,
        missing_intents: bound.missing,
    })
}

fn check(errors: Vec<String>) -> Result<(), CompileError> {
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CompileError::InvalidSelector(errors))
    }
}

struct Bound {
    rules: Vec<NimbusRule>,
    found: Vec<String>,
    missing: Vec<String>,
}

fn bind<I: Borrow<SecurityIntent>>(
    refs: &[MatchIntent],
    lookup: impl Fn(&str) -> Option<I>,
) -> Bound {
    let mut bound = Bound {
        rules: Vec::new(),
        found: Vec::new(),
        missing: Vec::new(),
    };
    for MatchIntent { name } in refs {
        if bound.found.contains(name) || bound.missing.contains(name) {
            continue;
        }
        match lookup(name) {
            Some(si) => {
                bound.rules.push(rule(&si.borrow().spec.intent));
                bound.found.push(name.clone());
            }
            None => bound.missing.push(name.clone()),
        }
    }
    bound
}

/// The NimbusPolicy rule an intent compiles to (severity and tags are not carried, as in
/// Nimbus).
pub fn rule(intent: &nimbus_api::Intent) -> NimbusRule {
    NimbusRule {
        id: intent.id.clone(),
        type_: None,
        description: intent.description.clone(),
        rule: Rule {
            action: intent.action.clone(),
            params: intent.params.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    use nimbus_api::{ClusterSelector, NamespaceSelector, SecurityIntentSpec, WorkloadScope};
    use serde_json::json;
    use std::collections::BTreeMap;

    fn intent(name: &str, id: &str, action: &str) -> SecurityIntent {
        serde_json::from_value(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
            "metadata": {"name": name},
            "spec": {"intent": {"id": id, "action": action, "description": format!("{id} d"),
                                "params": {"k": [name]}}}
        }))
        .expect("valid intent")
    }

    fn catalog() -> impl Fn(&str) -> Option<SecurityIntent> {
        |name: &str| match name {
            "a" => Some(intent("a", "dnsManipulation", "Block")),
            "b" => Some(intent("b", "escapeToHost", "Audit")),
            _ => None,
        }
    }

    fn refs(names: &[&str]) -> Vec<MatchIntent> {
        names
            .iter()
            .map(|n| MatchIntent {
                name: n.to_string(),
            })
            .collect()
    }

    fn labels(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            match_expressions: None,
        }
    }

    fn sib(
        names: &[&str],
        selector: Option<LabelSelector>,
        cel: Option<Vec<&str>>,
    ) -> SecurityIntentBindingSpec {
        SecurityIntentBindingSpec {
            intents: refs(names),
            selector: WorkloadScope {
                workload_selector: selector,
            },
            cel: cel.map(|c| c.into_iter().map(String::from).collect()),
        }
    }

    #[test]
    fn rules_follow_binding_order_and_carry_intent_fields() {
        let plan = compile_binding(
            &sib(&["b", "a"], Some(labels(&[("app", "x")])), None),
            catalog(),
        )
        .unwrap();
        let policy = plan.policy.expect("policy");
        let ids: Vec<_> = policy.rules.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["escapeToHost", "dnsManipulation"]);
        assert_eq!(policy.rules[0].rule.action, "Audit");
        assert_eq!(
            policy.rules[0].description.as_deref(),
            Some("escapeToHost d")
        );
        assert_eq!(
            policy.rules[0].rule.params,
            Some(BTreeMap::from([("k".into(), vec!["b".into()])]))
        );
        assert_eq!(policy.selector, labels(&[("app", "x")]));
        assert_eq!(plan.bound_intents, ["b", "a"]);
        assert!(plan.missing_intents.is_empty());
    }

    #[test]
    fn missing_intents_are_skipped_and_reported() {
        let plan = compile_binding(&sib(&["x", "a", "y"], None, None), catalog()).unwrap();
        assert_eq!(plan.policy.expect("policy").rules.len(), 1);
        assert_eq!(plan.bound_intents, ["a"]);
        assert_eq!(plan.missing_intents, ["x", "y"]);
    }

    #[test]
    fn no_existing_intent_means_no_policy() {
        let plan = compile_binding(&sib(&["x"], None, None), catalog()).unwrap();
        assert_eq!(plan.policy, None);
        assert!(plan.bound_intents.is_empty());
    }

    #[test]
    fn duplicate_references_bind_once() {
        let plan = compile_binding(&sib(&["a", "a"], None, None), catalog()).unwrap();
        assert_eq!(plan.policy.expect("policy").rules.len(), 1);
        assert_eq!(plan.bound_intents, ["a"]);
    }

    #[test]
    fn empty_selector_selects_everything() {
        let plan = compile_binding(&sib(&["a"], None, None), catalog()).unwrap();
        assert_eq!(
            plan.policy.expect("policy").selector,
            LabelSelector::default()
        );
    }

    #[test]
    fn cel_is_anded_into_the_selector() {
        let spec = sib(
            &["a"],
            Some(labels(&[("env", "dev")])),
            Some(vec![r#"labels["app"] == "nginx""#]),
        );
        let plan = compile_binding(&spec, catalog()).unwrap();
        assert_eq!(
            plan.policy.expect("policy").selector,
            labels(&[("app", "nginx"), ("env", "dev")])
        );
    }

    #[test]
    fn unsupported_cel_is_an_error_even_without_intents() {
        let spec = sib(&["x"], None, Some(vec![r#"labels["app"].startsWith("n")"#]));
        assert!(matches!(
            compile_binding(&spec, catalog()),
            Err(CompileError::Cel(_))
        ));
    }

    #[test]
    fn selectors_the_api_server_rejects_are_errors_even_without_intents() {
        let bad_key = sib(&["x"], Some(labels(&[("bad key", "v")])), None);
        let err = compile_binding(&bad_key, catalog()).unwrap_err();
        let CompileError::InvalidSelector(errors) = &err else {
            panic!("{err}");
        };
        assert!(
            errors[0].starts_with(
                "spec.selector.workloadSelector.matchLabels: Invalid value: \"bad key\": name part"
            ),
            "{errors:?}"
        );
        assert!(err.to_string().starts_with("invalid label selector: "));

        let no_values = LabelSelector {
            match_labels: None,
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: "In".into(),
                values: None,
            }]),
        };
        let err = compile_binding(&sib(&["a"], Some(no_values), None), catalog()).unwrap_err();
        assert!(
            err.to_string().contains(
                "spec.selector.workloadSelector.matchExpressions[0].values: Required value"
            ),
            "{err}"
        );

        // What `spec.cel` compiles to is checked as well.
        let cel = sib(&["a"], None, Some(vec![r#"labels["app"] == "-x""#]));
        assert!(matches!(
            compile_binding(&cel, catalog()),
            Err(CompileError::Cel(CelError::InvalidLabel { index: 0, .. }))
        ));

        let mut cluster = csib(&["a"], all());
        if let Some(s) = cluster.selector.as_mut() {
            s.workload_selector = Some(labels(&[("app", "ngin x")]));
            s.node_selector = Some(nimbus_api::NodeSelector {
                match_labels: Some(BTreeMap::from([(
                    "Kubernetes.io/os".into(),
                    "linux".into(),
                )])),
            });
        }
        let err = compile_cluster_binding(&cluster, catalog()).unwrap_err();
        let CompileError::InvalidSelector(errors) = &err else {
            panic!("{err}");
        };
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[1].starts_with(
            "spec.selector.nodeSelector.matchLabels: Invalid value: \"Kubernetes.io/os\": prefix part"
        ));
    }

    fn csib(names: &[&str], ns: Option<NamespaceSelector>) -> ClusterSecurityIntentBindingSpec {
        ClusterSecurityIntentBindingSpec {
            intents: refs(names),
            selector: Some(ClusterSelector {
                node_selector: None,
                ns_selector: ns,
                workload_selector: Some(labels(&[("app", "nginx")])),
            }),
            cel: None,
        }
    }

    fn all() -> Option<NamespaceSelector> {
        Some(NamespaceSelector {
            match_names: Some(vec!["*".into()]),
            exclude_names: None,
        })
    }

    #[test]
    fn cluster_binding_compiles_both_policy_shapes() {
        let plan = compile_cluster_binding(&csib(&["a", "b"], all()), catalog()).unwrap();
        let cwnp = plan.cluster_policy.expect("cluster policy");
        assert_eq!(cwnp.rules.len(), 2);
        assert_eq!(cwnp.ns_selector, all());
        assert_eq!(cwnp.workload_selector, Some(labels(&[("app", "nginx")])));
        let json = serde_json::to_value(&cwnp).unwrap();
        assert_eq!(
            json["nodeSelector"],
            json!({}),
            "nodeSelector is always serialized, as in Nimbus"
        );
        let np = plan.namespace_policy.expect("namespace policy");
        assert_eq!(np.selector, labels(&[("app", "nginx")]));
        assert_eq!(np.rules, cwnp.rules);
    }

    #[test]
    fn cluster_binding_without_intents_has_no_policies() {
        let plan = compile_cluster_binding(&csib(&["x"], all()), catalog()).unwrap();
        assert_eq!((plan.cluster_policy, plan.namespace_policy), (None, None));
        assert_eq!(plan.missing_intents, ["x"]);
    }

    #[test]
    fn invalid_namespace_selector_is_an_error() {
        let bad = Some(NamespaceSelector {
            match_names: Some(vec!["a".into(), "*".into()]),
            exclude_names: None,
        });
        let err = compile_cluster_binding(&csib(&["a"], bad), catalog()).unwrap_err();
        assert!(matches!(err, CompileError::NamespaceSelector(m) if m.contains("only entry")));
        assert!(compile_cluster_binding(&csib(&["a"], None), catalog()).is_err());
    }

    #[test]
    fn intent_spec_is_what_is_compiled() {
        let si = intent("a", "dnsManipulation", "Block");
        let SecurityIntentSpec { intent } = &si.spec;
        assert_eq!(rule(intent).id, "dnsManipulation");
    }
}
