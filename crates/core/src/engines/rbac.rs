//! RBAC engine: namespaceSandbox keeps a RoleBinding in the policy's namespace that grants
//! groups a ClusterRole there and nowhere else. Bound through a cluster binding, every selected
//! namespace (including ones created later) gets its own.
//!
//! What may be granted is bounded by configuration, not by whoever writes the intent: the
//! ClusterRole must be in [`Environment::sandbox_cluster_roles`], and no group may be one of
//! Kubernetes's `system:` groups (`system:authenticated` would hand the namespace to everyone).
//! A rule breaking either gets no RoleBinding at all.

use super::Engine;
use super::{
    AuditForm, CLUSTER_BINDING_NAMESPACES, Emitted, Enforces, EngineSpec, Environment, Output,
    PolicyInput, ROLE_BINDING, Rule, metadata, native_name, object,
};
use crate::intents::{id, param, param_value};
use crate::names::MAX_NAME_LEN;
use nimbus_api::{NimbusRule, condition};
use serde_json::json;
use std::collections::BTreeSet;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Prefix of the groups Kubernetes itself assigns (`system:masters`, `system:authenticated`,
/// `system:serviceaccounts`, ...).
const SYSTEM_PREFIX: &str = "system:";

/// Why a namespaceSandbox `rule` must not be granted in `namespace` (`None`: checked without
/// one, as `nimbus validate` does, so `{namespace}` stays unsubstituted): a ClusterRole outside
/// `roles`, an empty group, or a `system:` group. Empty when it may be granted.
pub fn sandbox_violations(
    rule: &NimbusRule,
    roles: &BTreeSet<String>,
    namespace: Option<&str>,
) -> Vec<String> {
    let params = rule.rule.params.as_ref();
    let mut violations = Vec::new();
    // The role as written, not the default an invalid value would fall back to: a sandbox
    // grants what its author asked for, or nothing.
    let role = params
        .and_then(|p| p.get(param::CLUSTER_ROLE))
        .and_then(|v| v.first().cloned())
        .or_else(|| param_value(rule, param::CLUSTER_ROLE));
    match role {
        Some(role) if roles.contains(&role) => {}
        Some(role) => {
            let allowed: Vec<&str> = roles.iter().map(String::as_str).collect();
            violations.push(format!(
                "ClusterRole `{role}` may not be granted (allowed: {}; --sandbox-cluster-roles)",
                if allowed.is_empty() {
                    "none".to_owned()
                } else {
                    allowed.join(", ")
                }
            ));
        }
        None => violations.push("no ClusterRole to grant".to_owned()),
    }
    for group in params
        .and_then(|p| p.get(param::GROUP))
        .into_iter()
        .flatten()
    {
        let name = match namespace {
            Some(ns) => group.replace("{namespace}", ns),
            None => group.clone(),
        };
        if name.trim().is_empty() {
            violations.push("a group is empty".to_owned());
        } else if name
            .trim_start()
            .to_ascii_lowercase()
            .starts_with(SYSTEM_PREFIX)
        {
            violations.push(format!(
                "group `{name}` is a Kubernetes system group and may not be granted"
            ));
        }
    }
    violations
}

pub(super) const SPEC: EngineSpec = EngineSpec {
    engine: Engine::Rbac,
    name: "rbac",
    manager: "nimbus-rbac",
    // Only from cluster bindings, an administrator's object: a namespaced binding would let
    // anyone who may create one grant roles in their namespace.
    enforces: &[Enforces {
        intent: id::NAMESPACE_SANDBOX,
        origins: CLUSTER_BINDING_NAMESPACES,
        reads: &[],
        // A RoleBinding grants, audited or not.
        audit: AuditForm::None,
        effect: "a RoleBinding grants the group the ClusterRole in each selected namespace",
    }],
    kinds: &[&ROLE_BINDING],
    confined_to_k8tls_namespace: false,
    translate,
    optional_kinds: &[],
    tenant_proof: None,
    honours_exceptions: &[],
};

fn translate(policy: &PolicyInput, rule: &Rule, env: &Environment) -> Output {
    let (id::NAMESPACE_SANDBOX, Some(namespace)) = (rule.spec.id.as_str(), &policy.namespace)
    else {
        return rule.untranslated(Engine::Rbac);
    };
    let violations = sandbox_violations(rule.spec, &env.sandbox_cluster_roles, Some(namespace));
    if !violations.is_empty() {
        return Err(rule.problem(
            condition::REASON_INVALID_PARAMETER,
            format!(
                "intent `{}` grants nothing in {namespace}: {}",
                rule.spec.id,
                violations.join("; ")
            ),
        ));
    }
    let Some(role) = param_value(rule.spec, param::CLUSTER_ROLE) else {
        return Ok(Emitted::default());
    };
    let subjects: Vec<_> = rule
        .spec
        .rule
        .params
        .as_ref()
        .and_then(|p| p.get(param::GROUP))
        .into_iter()
        .flatten()
        .map(|group| {
            json!({
                "apiGroup": RBAC_GROUP,
                "kind": "Group",
                "name": group.replace("{namespace}", namespace),
            })
        })
        .collect();
    if subjects.is_empty() {
        // Reported by the parameter check: `group` is required.
        return Ok(Emitted::default());
    }
    // The role is part of the name because a RoleBinding's roleRef cannot change: a new role
    // means a new binding, and the old one is pruned. `-role-` keeps `<key>-role-<role>`
    // unambiguous against the `-2` suffixes of further rules.
    let name = native_name(policy, &format!("{}-role-{role}", rule.key), MAX_NAME_LEN);
    let meta = metadata(policy, Engine::Rbac, name, Some(namespace.clone()), &[]);
    let body = json!({
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    });
    Ok(vec![object(&ROLE_BINDING, meta, body)].into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::DEFAULT_SANDBOX_CLUSTER_ROLES;
    use nimbus_api::Rule as ApiRule;

    fn sandbox(params: &[(&str, &[&str])]) -> NimbusRule {
        NimbusRule {
            id: "namespaceSandbox".into(),
            type_: None,
            description: None,
            rule: ApiRule {
                action: "Block".into(),
                params: Some(
                    params
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
                        .collect(),
                ),
            },
        }
    }

    fn roles() -> BTreeSet<String> {
        DEFAULT_SANDBOX_CLUSTER_ROLES
            .iter()
            .map(|r| r.to_string())
            .collect()
    }

    #[test]
    fn allowed_roles_and_ordinary_groups_pass() {
        let ok = sandbox(&[("group", &["team-{namespace}"]), ("clusterRole", &["view"])]);
        assert!(sandbox_violations(&ok, &roles(), Some("a")).is_empty());
        // The default role (edit) is allowed by default.
        let default = sandbox(&[("group", &["team-{namespace}"])]);
        assert!(sandbox_violations(&default, &roles(), Some("a")).is_empty());
        assert!(!sandbox_violations(&default, &BTreeSet::new(), Some("a")).is_empty());
    }

    #[test]
    fn roles_outside_the_allowlist_are_refused_even_when_malformed() {
        for role in ["cluster-admin", "admin", "Cluster-Admin"] {
            let r = sandbox(&[("group", &["team"]), ("clusterRole", &[role])]);
            let v = sandbox_violations(&r, &roles(), Some("a"));
            assert_eq!(v.len(), 1, "{role}: {v:?}");
            assert!(v[0].contains(role) && v[0].contains("edit, view"), "{v:?}");
        }
    }

    #[test]
    fn system_and_empty_groups_are_refused_after_substitution() {
        for (group, ns) in [
            ("system:masters", "a"),
            ("system:authenticated", "a"),
            ("  System:serviceaccounts", "a"),
            ("{namespace}:admins", "system"),
            ("", "a"),
            ("   ", "a"),
        ] {
            let r = sandbox(&[("group", &["team", group])]);
            assert_eq!(
                sandbox_violations(&r, &roles(), Some(ns)).len(),
                1,
                "{group:?} in {ns}"
            );
        }
        // Offline, without a namespace, the literal group is checked.
        let literal = sandbox(&[("group", &["system:{namespace}"])]);
        assert_eq!(sandbox_violations(&literal, &roles(), None).len(), 1);
        let later = sandbox(&[("group", &["{namespace}:admins"])]);
        assert!(sandbox_violations(&later, &roles(), None).is_empty());
    }
}
