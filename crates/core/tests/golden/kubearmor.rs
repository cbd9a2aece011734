//! KubeArmor: the KubeArmorPolicies of swDeploymentTools, unAuthorizedSaTokenAccess,
//! dnsManipulation, escapeToHost and preventExecutionFromTempOrLogsFolders.

use crate::builders::*;
use nimbus_api::condition;
use nimbus_core::catalog::Engine;
use nimbus_core::engines::Problem;
use serde_json::{Value, json};

/// The 37 process paths of swDeploymentTools, in Nimbus's order (`/usr/local/bin/curl` twice).
fn deployment_tool_paths() -> Value {
    let paths = [
        "/usr/bin/apt",
        "/usr/bin/apt-get",
        "/sbin/apk",
        "/bin/apt-get",
        "/bin/apt",
        "/usr/bin/dpkg",
        "/bin/dpkg",
        "/usr/bin/gdebi",
        "/bin/gdebi",
        "/usr/bin/make",
        "/bin/make",
        "/usr/bin/yum",
        "/bin/yum",
        "/usr/bin/rpm",
        "/bin/rpm",
        "/usr/bin/dnf",
        "/bin/dnf",
        "/usr/bin/pacman",
        "/usr/sbin/pacman",
        "/bin/pacman",
        "/sbin/pacman",
        "/usr/bin/makepkg",
        "/usr/sbin/makepkg",
        "/bin/makepkg",
        "/sbin/makepkg",
        "/usr/bin/yaourt",
        "/usr/sbin/yaourt",
        "/bin/yaourt",
        "/sbin/yaourt",
        "/usr/bin/zypper",
        "/bin/zypper",
        "/usr/bin/curl",
        "/bin/curl",
        "/usr/local/bin/curl",
        "/usr/bin/wget",
        "/bin/wget",
        "/usr/local/bin/curl",
    ];
    let paths: Vec<Value> = paths.iter().map(|p| json!({"path": p})).collect();
    json!({ "matchPaths": paths })
}

/// A KubeArmorPolicy as Nimbus writes it: every section present, `{}` when empty; `message` and `action`
/// omitted when empty; `selector: {}` without labels.
pub struct Ksp<'a> {
    pub np: &'a str,
    pub labels: Value,
    pub description: Option<&'a str>,
    pub action: &'a str,
}

impl Ksp<'_> {
    fn build(&self, suffix: &str, sections: Value) -> Value {
        let selector = if self.labels.as_object().is_none_or(|l| l.is_empty()) {
            json!({})
        } else {
            json!({"matchLabels": self.labels})
        };
        let mut spec = json!({
            "selector": selector,
            "process": {},
            "file": {},
            "network": {},
            "capabilities": {},
            "syscalls": {},
        });
        for (k, v) in sections.as_object().unwrap() {
            spec[k] = v.clone();
        }
        if let Some(d) = self.description.filter(|d| !d.is_empty()) {
            spec["message"] = d.into();
        }
        if !self.action.is_empty() {
            spec["action"] = self.action.into();
        }
        json!({
            "apiVersion": "security.kubearmor.com/v1",
            "kind": "KubeArmorPolicy",
            "metadata": meta(
                &format!("{}-{suffix}", self.np),
                Some(NS),
                "kubearmor",
                None,
                np_owner(self.np),
            ),
            "spec": spec,
        })
    }

    pub fn sw_deployment_tools(&self, suffix: &str) -> Value {
        self.build(suffix, json!({"process": deployment_tool_paths()}))
    }

    pub fn sa_token(&self) -> Value {
        self.build(
            "unauthorizedsatokenaccess",
            json!({"file": {"matchDirectories": [
                {"dir": "/run/secrets/kubernetes.io/serviceaccount/", "recursive": true}
            ]}}),
        )
    }

    pub fn dns(&self) -> Value {
        self.build(
            "dnsmanipulation",
            json!({"file": {"matchPaths": [{"path": "/etc/resolv.conf", "readOnly": true}]}}),
        )
    }

    /// The three escapeToHost KSPs, in order; `key` is `escapetohost` (or `escapetohost-2`).
    pub fn escape_to_host(&self, key: &str) -> Vec<Value> {
        vec![
            self.build(
                &format!("{key}-disallowchroot"),
                json!({"process": {"matchPaths": [{"path": "/usr/sbin/chroot"}, {"path": "/sbin/chroot"}]}}),
            ),
            self.build(
                &format!("{key}-disallowcapabilities"),
                json!({"capabilities": {"matchCapabilities": [
                    {"capability": "sys_admin"},
                    {"capability": "sys_ptrace"},
                    {"capability": "sys_module"},
                    {"capability": "dac_read_search"},
                    {"capability": "dac_override"},
                ]}}),
            ),
            self.sw_deployment_tools(&format!("{key}-swdeploymenttools")),
        ]
    }

    pub fn pfa(&self) -> Value {
        self.build(
            "preventexecutionfromtemporlogsfolders",
            json!({"process": {
                "matchDirectories": [
                    {"dir": "/var/tmp/", "recursive": true},
                    {"dir": "/tmp/", "recursive": true},
                    {"dir": "/var/log/", "recursive": true},
                    {"dir": "/app/logs/", "recursive": true},
                    {"dir": "/logs/", "recursive": true},
                    {"dir": "/etc/", "recursive": true},
                ],
                "action": "Block",
            }}),
        )
    }
}

fn kubearmor_rules() -> Vec<Value> {
    vec![
        block("swDeploymentTools", "No package managers"),
        block("unAuthorizedSaTokenAccess", "No SA token"),
        block("dnsManipulation", "Keep DNS honest"),
        rule("escapeToHost", "Audit", Some("No breakouts"), Value::Null),
        block("preventExecutionFromTempOrLogsFolders", "No PFA"),
    ]
}

fn expected_kubearmor(np: &str) -> Vec<Value> {
    let ksp = |description, action| Ksp {
        np,
        labels: labels(),
        description: Some(description),
        action,
    };
    let mut want = vec![
        ksp("No package managers", "Block").sw_deployment_tools("swdeploymenttools"),
        ksp("No SA token", "Block").sa_token(),
        ksp("Keep DNS honest", "Block").dns(),
    ];
    want.extend(ksp("No breakouts", "Audit").escape_to_host("escapetohost"));
    want.push(ksp("No PFA", "Block").pfa());
    want
}

/// Both kinds of binding get the same KSPs in their namespace, named after their NimbusPolicy.
#[test]
fn kubearmor_namespace_policies() {
    let cases = [
        (
            "namespaced binding",
            sib_np(selector(), kubearmor_rules()),
            SIB_NP,
        ),
        (
            "cluster binding's namespace policy",
            csib_np(selector(), kubearmor_rules()),
            CSIB_NP,
        ),
    ];
    for (case, np, np_name) in cases {
        let t = run_np(&np);
        no_problems_in(case, &t);
        assert_objects_in(
            case,
            &of(&t, Engine::KubeArmor),
            &expected_kubearmor(np_name),
        );
    }
}

#[test]
fn kubearmor_cluster_nimbus_policy_generates_nothing() {
    let t = run_cwnp(&cwnp(
        json!({"matchNames": ["*"]}),
        selector(),
        kubearmor_rules(),
    ));
    assert_objects(&of(&t, Engine::KubeArmor), &[]);
}

/// Empty parts of a KSP are left out: no labels gives `selector: {}`, an absent or empty
/// description no `message`, and an empty action no `action` (`omitempty` in KubeArmor's Go
/// types).
#[test]
fn kubearmor_omits_what_is_empty() {
    let ksp = |labels, description, action| Ksp {
        np: SIB_NP,
        labels,
        description,
        action,
    };
    let cases = [
        (
            "without labels or description, with the Audit action",
            sib_np(
                json!({}),
                vec![rule(
                    "unAuthorizedSaTokenAccess",
                    "Audit",
                    None,
                    Value::Null,
                )],
            ),
            ksp(json!({}), None, "Audit").sa_token(),
        ),
        (
            "an empty description and empty labels",
            sib_np(
                json!({"matchLabels": {}}),
                vec![rule("dnsManipulation", "Block", Some(""), Value::Null)],
            ),
            ksp(json!({}), None, "Block").dns(),
        ),
        (
            "an empty action",
            sib_np(
                selector(),
                vec![rule("swDeploymentTools", "", Some("d"), Value::Null)],
            ),
            ksp(labels(), Some("d"), "").sw_deployment_tools("swdeploymenttools"),
        ),
    ];
    for (case, np, want) in cases {
        let t = run_np(&np);
        no_problems_in(case, &t);
        assert_objects_in(case, &of(&t, Engine::KubeArmor), &[want]);
    }
}

#[test]
fn kubearmor_cannot_express_match_expressions() {
    let expressions = json!({
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}],
    });
    let t = run_np(&sib_np(
        expressions.clone(),
        vec![block("swDeploymentTools", "d")],
    ));
    assert!(t.objects.is_empty());
    assert_eq!(
        t.problems,
        vec![Problem {
            intent: "swDeploymentTools".into(),
            reason: condition::REASON_UNSUPPORTED_SELECTOR,
            message: "kubearmor selects workloads by exact labels only; the selector has \
                      expressions"
                .into(),
            blocking: true,
        }]
    );
}

/// dnsManipulation is still enforced by the NetworkPolicy engine, so KubeArmor failing on the
/// selector leaves it enforced in part: per `Problem::blocking`'s contract that is not blocking.
#[test]
fn kubearmor_selector_problem_does_not_block_an_intent_another_engine_enforces() {
    let expressions = json!({
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}],
    });
    let t = run_np(&sib_np(
        expressions.clone(),
        vec![block("dnsManipulation", "d")],
    ));
    assert_eq!(of(&t, Engine::NetworkPolicy).len(), 1);
    assert_eq!(t.problems.len(), 1, "{:?}", t.problems);
    assert_eq!(t.problems[0].reason, condition::REASON_UNSUPPORTED_SELECTOR);
    assert!(
        !t.problems[0].blocking,
        "dnsManipulation is enforced by netpol, yet the problem is blocking"
    );
}
