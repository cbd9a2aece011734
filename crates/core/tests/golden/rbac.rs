//! rbac: namespaceSandbox's RoleBindings (difference 11: cluster bindings only; bounded roles
//! and groups).

use crate::builders::*;
use nimbus_api::condition;
use nimbus_core::engines::{EngineSet, Environment, Problem};
use serde_json::{Value, json};
use std::collections::BTreeSet;

fn role_binding(np: &str, role: &str, groups: &[&str]) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(
            &format!("{np}-namespacesandbox-role-{role}"),
            Some(NS),
            "rbac",
            None,
            np_owner(np),
        ),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": groups.iter().map(|g| json!({
            "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g,
        })).collect::<Vec<_>>(),
    })
}

/// Sandboxes that generate nothing and one blocking problem. Difference 11: a namespaced
/// binding is anybody's with access to a namespace; granting roles is an administrator's
/// (cluster binding's) call.
#[test]
fn rbac_refusals() {
    let cases = [
        (
            "through a namespaced binding",
            sib_np(
                selector(),
                vec![sandbox_rule(json!({"group": ["team-{namespace}"]}))],
            ),
            Problem {
                intent: "namespaceSandbox".into(),
                reason: condition::REASON_UNSUPPORTED_INTENT,
                message: "intent `namespaceSandbox` is enforced only through a \
                          ClusterSecurityIntentBinding"
                    .into(),
                blocking: true,
            },
        ),
        (
            "without a group",
            csib_np(selector(), vec![sandbox_rule(Value::Null)]),
            Problem {
                intent: "namespaceSandbox".into(),
                reason: condition::REASON_INVALID_PARAMETER,
                message: "intent `namespaceSandbox`: param group: is required".into(),
                blocking: true,
            },
        ),
    ];
    for (case, np, problem) in cases {
        let t = run_np(&np);
        assert!(t.objects.is_empty(), "{case}: {:?}", all(&t));
        assert_eq!(t.problems, vec![problem], "{case}");
    }
}

/// A cluster binding's namespace policy binds the role (`edit` by default) to the groups,
/// `{namespace}` substituted.
#[test]
fn rbac_cluster_binding_role_bindings() {
    let cases = [
        (
            "default role",
            selector(),
            json!({"group": ["team-{namespace}"]}),
            role_binding(CSIB_NP, "edit", &["team-shop"]),
            "RoleBinding/nimbus-ctlr-gen-web-csib-namespacesandbox-role-edit",
        ),
        (
            "the rule's role, several groups, no labels",
            json!({}),
            json!({
                "group": ["{namespace}-devs", "oncall"],
                "clusterRole": ["view"],
            }),
            role_binding(CSIB_NP, "view", &["shop-devs", "oncall"]),
            "RoleBinding/nimbus-ctlr-gen-web-csib-namespacesandbox-role-view",
        ),
    ];
    for (case, selector, params, want, entry) in cases {
        let t = run_np(&csib_np(selector, vec![sandbox_rule(params)]));
        no_problems_in(case, &t);
        assert_objects_in(case, &all(&t), &[want]);
        assert_eq!(entries(&t), [entry], "{case}");
    }
}

/// Difference 11: only allowlisted ClusterRoles, never a `system:` or empty group; a rule
/// asking for more gets no RoleBinding at all.
#[test]
fn rbac_grants_only_allowed_roles_to_ordinary_groups() {
    for (params, needle) in [
        (
            json!({"group": ["a"], "clusterRole": ["cluster-admin"]}),
            "ClusterRole `cluster-admin`",
        ),
        (
            json!({"group": ["a"], "clusterRole": ["Admin"]}),
            "ClusterRole `Admin`",
        ),
        (
            json!({"group": ["a", "system:masters"]}),
            "group `system:masters`",
        ),
        (
            json!({"group": ["system:authenticated"], "clusterRole": ["view"]}),
            "system:authenticated",
        ),
        (json!({"group": ["{namespace}:x"]}), "MISSING"),
        (json!({"group": ["a", " "]}), "a group is empty"),
    ] {
        let mut np = csib_np(selector(), vec![sandbox_rule(params.clone())]);
        if needle == "MISSING" {
            // `{namespace}` substituted first: a namespace named `system` makes a system group.
            np.metadata.namespace = Some("system".into());
        }
        let t = run_np(&np);
        assert!(t.objects.is_empty(), "{params}: {:?}", all(&t));
        let blocking: Vec<_> = t.problems.iter().filter(|p| p.blocking).collect();
        assert_eq!(blocking.len(), 1, "{params}: {:?}", t.problems);
        assert_eq!(
            blocking[0].reason,
            condition::REASON_INVALID_PARAMETER,
            "{params}"
        );
        let needle = if needle == "MISSING" {
            "system:x"
        } else {
            needle
        };
        assert!(
            blocking[0].message.contains(needle),
            "{params}: {}",
            blocking[0].message
        );
    }
    // The allowlist is configuration: without `view`, view is refused too.
    let env = Environment {
        sandbox_cluster_roles: BTreeSet::from(["edit".to_owned()]),
        ..Environment::default()
    };
    let np = csib_np(
        selector(),
        vec![sandbox_rule(
            json!({"group": ["a"], "clusterRole": ["view"]}),
        )],
    );
    let t = run_np_with(&np, &env, &EngineSet::all());
    assert!(t.objects.is_empty());
    assert!(
        t.problems[0].message.contains("allowed: edit;"),
        "{:?}",
        t.problems
    );
}

#[test]
fn rbac_cluster_nimbus_policy_generates_nothing() {
    let t = run_cwnp(&cwnp(
        all_namespaces(),
        Value::Null,
        vec![sandbox_rule(json!({"group": ["g"]}))],
    ));
    assert!(t.objects.is_empty());
    no_problems(&t);
}

/// Two sandboxes whose role names and `-2` suffix line up must not share a RoleBinding.
#[test]
fn rbac_role_names_cannot_collide_with_rule_suffixes() {
    let env = Environment {
        sandbox_cluster_roles: BTreeSet::from(["edit".to_owned(), "2-edit".to_owned()]),
        ..Environment::default()
    };
    let t = run_np_with(
        &csib_np(
            selector(),
            vec![
                sandbox_rule(json!({"group": ["a"], "clusterRole": ["2-edit"]})),
                sandbox_rule(json!({"group": ["b"], "clusterRole": ["edit"]})),
            ],
        ),
        &env,
        &EngineSet::all(),
    );
    let names: BTreeSet<String> = names(&all(&t)).into_iter().collect();
    assert_eq!(names.len(), 2, "RoleBindings collide: {names:?}");
}
