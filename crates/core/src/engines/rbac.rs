//! RBAC engine: namespaceSandbox keeps a RoleBinding in the policy's namespace that grants
//! groups a ClusterRole there and nowhere else. Bound through a cluster binding, every selected
//! namespace (including ones created later) gets its own.

use super::{
    Emitted, Environment, Output, PolicyInput, ROLE_BINDING, Rule, metadata, native_name, object,
};
use crate::catalog::{Engine, param_value, param_values};
use crate::names::MAX_NAME_LEN;
use serde_json::json;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

pub(super) fn translate(policy: &PolicyInput, rule: &Rule, _: &Environment) -> Output {
    let (Some(namespace), Some(role)) = (&policy.namespace, param_value(rule.spec, "clusterRole"))
    else {
        return Ok(Emitted::default());
    };
    let subjects: Vec<_> = param_values(rule.spec, "group")
        .iter()
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
