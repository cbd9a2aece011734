//! Golden tests of the engine translators: the exact objects generated for every intent, engine
//! and binding kind, and the problems reported.
//!
//! The expectations are written from what Nimbus (5GSEC/nimbus @67712a9f) generates, plus the
//! deliberate differences of this implementation:
//!
//! 1. every object also carries the LABEL `app.kubernetes.io/managed-by: nimbus-<engine>`;
//! 2. Kyverno matches ONE entry with the whole workload selector (AND);
//! 3. parameters come from the matching rule, not `rules[0]`;
//! 4. the cluster cocoWorkload policy honours `runtimeClass`;
//! 5. `<np>-mutateexisting` is always generated and targets Deployments by namespace + selector;
//! 6. k8tls: one CronJob per assessTLS rule, address ConfigMap `<cronjob>-addresses`, no
//!    Elasticsearch;
//! 7. excludeNames-only cluster bindings work (no `namespaces` in the match, excluded names in
//!    `exclude.any`);
//! 8. node pod CIDRs come from `Environment.node_pod_cidrs` (sorted), first as in Nimbus;
//! 9. a second rule with the same ID gets `-2` suffixed names;
//! 10. no `status: {}`, no `creationTimestamp: null`;
//! 11. the rbac engine / namespaceSandbox intent (cluster bindings only; bounded roles and
//!     groups);
//! 12. sensitive intents (assessTLS, namespaceSandbox) are enforced only with the binding's
//!     `intent.security.nimbus.com/allow-sensitive` opt-in, which the fixtures' policies carry;
//! 13. k8tls CronJobs run pinned images, restricted, with resource bounds, at most hourly;
//! 14. Kyverno ClusterPolicies exclude every protected namespace, not only kube-system.

// Helpers outside `#[test]` functions panic on broken fixtures too (clippy.toml only covers
// the test functions themselves).
#![allow(clippy::unwrap_used)]

use nimbus_api::{ALLOW_SENSITIVE_ANNOTATION, ClusterNimbusPolicy, NimbusPolicy, condition};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{
    EngineSet, Environment, Problem, Translation, VirtualPatches, translate, virtual_patch,
};
use nimbus_core::engines::{Generated, PolicyInput};
use nimbus_core::namespaces::ProtectedNamespaces;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

const NS: &str = "shop";
/// The NimbusPolicy of a SecurityIntentBinding is named after it.
const SIB_NP: &str = "web-binding";
/// A ClusterSecurityIntentBinding `web-csib`: its per-namespace NimbusPolicy, and its
/// ClusterNimbusPolicy (named after it).
const CSIB: &str = "web-csib";
const CSIB_NP: &str = "nimbus-ctlr-gen-web-csib";
const CWNP: &str = "web-csib";
const UID: &str = "policy-uid-1";
const API_VERSION: &str = "intent.security.nimbus.com/v1alpha1";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const KYVERNO_DESCRIPTION: &str = "policies.kyverno.io/description";
const K8TLS_NS: &str = "nimbus-k8tls-env";
/// The fixtures' policies carry their binding's opt-in to both sensitive intents.
const OPTED_IN: &str = "namespaceSandbox,assessTLS";

/// A rule as the operator compiles it from a SecurityIntent.
fn rule(id: &str, action: &str, description: Option<&str>, params: Value) -> Value {
    let mut rule = json!({"id": id, "rule": {"action": action}});
    if let Some(d) = description {
        rule["description"] = d.into();
    }
    if !params.is_null() {
        rule["rule"]["params"] = params;
    }
    rule
}

fn block(id: &str, description: &str) -> Value {
    rule(id, "Block", Some(description), Value::Null)
}

fn labels() -> Value {
    json!({"app": "web", "tier": "front"})
}

fn selector() -> Value {
    json!({"matchLabels": labels()})
}

/// The NimbusPolicy of SecurityIntentBinding `web-binding` in `shop`. Its own labels must not
/// reach the generated objects.
fn sib_np(selector: Value, rules: Vec<Value>) -> NimbusPolicy {
    serde_json::from_value(json!({
        "apiVersion": API_VERSION,
        "kind": "NimbusPolicy",
        "metadata": {
            "name": SIB_NP,
            "namespace": NS,
            "labels": {"team": "a"},
            "annotations": {ALLOW_SENSITIVE_ANNOTATION: OPTED_IN},
            "ownerReferences": [{
                "apiVersion": API_VERSION, "kind": "SecurityIntentBinding", "name": SIB_NP,
                "uid": "sib-uid", "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {"selector": selector, "rules": rules},
    }))
    .unwrap()
}

/// The NimbusPolicy ClusterSecurityIntentBinding `web-csib` keeps in `shop`.
fn csib_np(selector: Value, rules: Vec<Value>) -> NimbusPolicy {
    serde_json::from_value(json!({
        "apiVersion": API_VERSION,
        "kind": "NimbusPolicy",
        "metadata": {
            "name": CSIB_NP,
            "namespace": NS,
            "labels": {"team": "a"},
            "annotations": {ALLOW_SENSITIVE_ANNOTATION: OPTED_IN},
            "ownerReferences": [{
                "apiVersion": API_VERSION, "kind": "ClusterSecurityIntentBinding", "name": CSIB,
                "uid": "csib-uid", "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {"selector": selector, "rules": rules},
    }))
    .unwrap()
}

/// ClusterNimbusPolicy `web-csib` with the given namespace and workload selectors.
fn cwnp(ns_selector: Value, workload_selector: Value, rules: Vec<Value>) -> ClusterNimbusPolicy {
    let mut spec = json!({"nodeSelector": {}, "nsSelector": ns_selector, "rules": rules});
    if !workload_selector.is_null() {
        spec["workloadSelector"] = workload_selector;
    }
    serde_json::from_value(json!({
        "apiVersion": API_VERSION,
        "kind": "ClusterNimbusPolicy",
        "metadata": {
            "name": CWNP,
            "labels": {"team": "a"},
            "annotations": {ALLOW_SENSITIVE_ANNOTATION: OPTED_IN},
            "ownerReferences": [{
                "apiVersion": API_VERSION, "kind": "ClusterSecurityIntentBinding", "name": CSIB,
                "uid": "csib-uid", "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
    }))
    .unwrap()
}

fn run_np_with(np: &NimbusPolicy, env: &Environment, engines: &EngineSet) -> Translation {
    translate(&PolicyInput::namespaced(np, UID), env, engines)
}

fn run_np(np: &NimbusPolicy) -> Translation {
    run_np_with(np, &Environment::default(), &EngineSet::all())
}

fn run_cwnp_with(cwnp: &ClusterNimbusPolicy, env: &Environment) -> Translation {
    translate(&PolicyInput::cluster(cwnp, UID), env, &EngineSet::all())
}

fn run_cwnp(cwnp: &ClusterNimbusPolicy) -> Translation {
    run_cwnp_with(cwnp, &Environment::default())
}

fn json_of(g: &Generated) -> Value {
    serde_json::to_value(&g.object).unwrap()
}

/// The objects one engine generated, as JSON, in order.
fn of(t: &Translation, engine: Engine) -> Vec<Value> {
    t.objects
        .iter()
        .filter(|g| g.engine == engine)
        .map(json_of)
        .collect()
}

fn all(t: &Translation) -> Vec<Value> {
    t.objects.iter().map(json_of).collect()
}

fn entries(t: &Translation) -> Vec<String> {
    t.objects.iter().map(Generated::entry).collect()
}

fn no_problems(t: &Translation) {
    assert_eq!(t.problems, vec![], "unexpected problems");
}

/// Where two JSON values differ, as `path: got != want` lines.
fn diff(path: &str, got: &Value, want: &Value, out: &mut Vec<String>) {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            let keys: BTreeSet<&String> = g.keys().chain(w.keys()).collect();
            for k in keys {
                let (gv, wv) = (g.get(k), w.get(k));
                let p = format!("{path}/{k}");
                match (gv, wv) {
                    (Some(gv), Some(wv)) => diff(&p, gv, wv, out),
                    (Some(gv), None) => out.push(format!("{p}: unexpected {gv}")),
                    (None, Some(wv)) => out.push(format!("{p}: missing, want {wv}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(g), Value::Array(w)) if g.len() == w.len() => {
            for (i, (gv, wv)) in g.iter().zip(w).enumerate() {
                diff(&format!("{path}/{i}"), gv, wv, out);
            }
        }
        _ if got != want => out.push(format!("{path}: got {got}, want {want}")),
        _ => {}
    }
}

/// Compares element by element first, so a failure points at the object and the fields that
/// differ.
#[track_caller]
fn assert_objects(got: &[Value], want: &[Value]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let mut differences = Vec::new();
        diff("", g, w, &mut differences);
        assert!(
            differences.is_empty(),
            "object #{i} ({}) differs:\n  {}\nwhole object: {}",
            g["metadata"]["name"],
            differences.join("\n  "),
            serde_json::to_string_pretty(g).unwrap(),
        );
    }
    let names = |v: &[Value]| -> Vec<String> {
        v.iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap_or("?").to_owned())
            .collect()
    };
    assert_eq!(
        got.len(),
        want.len(),
        "object count differs: got {:?}, want {:?}",
        names(got),
        names(want)
    );
}

// ---------------------------------------------------------------------------------------------
// Expected objects, as Nimbus writes them (plus the deliberate differences above)
// ---------------------------------------------------------------------------------------------

fn owner(kind: &str, name: &str) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": kind, "name": name, "uid": UID,
        "controller": true, "blockOwnerDeletion": true,
    })
}

fn np_owner(name: &str) -> Value {
    owner("NimbusPolicy", name)
}

fn cwnp_owner() -> Value {
    owner("ClusterNimbusPolicy", CWNP)
}

/// Metadata of a generated object: name, namespace, the managed-by annotation (and Kyverno's
/// description), the managed-by label (difference 1) and the controller reference.
fn meta(
    name: &str,
    namespace: Option<&str>,
    engine: &str,
    description: Option<&str>,
    owner: Value,
) -> Value {
    let manager = format!("nimbus-{engine}");
    let mut annotations = json!({ MANAGED_BY: manager });
    if let Some(d) = description {
        annotations[KYVERNO_DESCRIPTION] = d.into();
    }
    let mut meta = json!({
        "name": name,
        "labels": { MANAGED_BY: manager },
        "annotations": annotations,
        "ownerReferences": [owner],
    });
    if let Some(ns) = namespace {
        meta["namespace"] = ns.into();
    }
    meta
}

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
    assert_eq!(paths.len(), 37);
    let paths: Vec<Value> = paths.iter().map(|p| json!({"path": p})).collect();
    json!({ "matchPaths": paths })
}

/// A KubeArmorPolicy as Nimbus writes it: every section present, `{}` when empty; `message` and `action`
/// omitted when empty; `selector: {}` without labels.
struct Ksp<'a> {
    np: &'a str,
    labels: Value,
    description: Option<&'a str>,
    action: &'a str,
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

    fn sw_deployment_tools(&self, suffix: &str) -> Value {
        self.build(suffix, json!({"process": deployment_tool_paths()}))
    }

    fn sa_token(&self) -> Value {
        self.build(
            "unauthorizedsatokenaccess",
            json!({"file": {"matchDirectories": [
                {"dir": "/run/secrets/kubernetes.io/serviceaccount/", "recursive": true}
            ]}}),
        )
    }

    fn dns(&self) -> Value {
        self.build(
            "dnsmanipulation",
            json!({"file": {"matchPaths": [{"path": "/etc/resolv.conf", "readOnly": true}]}}),
        )
    }

    /// The three escapeToHost KSPs, in order; `key` is `escapetohost` (or `escapetohost-2`).
    fn escape_to_host(&self, key: &str) -> Vec<Value> {
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

    fn pfa(&self) -> Value {
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

fn kube_dns_peer() -> Value {
    json!({
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    })
}

fn dns_ports() -> Value {
    json!([{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}])
}

fn ip_block(cidr: &str) -> Value {
    json!({"ipBlock": {"cidr": cidr}})
}

fn netpol(np: &str, suffix: &str, pod_selector: Value, spec: Value) -> Value {
    let mut full = json!({ "podSelector": pod_selector });
    for (k, v) in spec.as_object().unwrap() {
        full[k] = v.clone();
    }
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta(&format!("{np}-{suffix}"), Some(NS), "netpol", None, np_owner(np)),
        "spec": full,
    })
}

/// dnsManipulation's NetworkPolicy: node pod CIDRs first, then the kube-dns peer.
fn dns_netpol(np: &str, pod_selector: Value, cidrs: &[&str]) -> Value {
    let mut to: Vec<Value> = cidrs.iter().map(|c| ip_block(c)).collect();
    to.push(kube_dns_peer());
    netpol(
        np,
        "dnsmanipulation",
        pod_selector,
        json!({
            "egress": [{"ports": dns_ports(), "to": to}],
            "policyTypes": ["Egress"],
        }),
    )
}

/// denyExternalNetworkAccess's NetworkPolicy: ingress from node CIDRs + RFC 1918; egress to kube-dns, node CIDRs, RFC 1918.
fn deny_external_netpol(np: &str, pod_selector: Value, cidrs: &[&str]) -> Value {
    let private = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"];
    let from: Vec<Value> = cidrs.iter().chain(&private).map(|c| ip_block(c)).collect();
    let mut to = vec![kube_dns_peer()];
    to.extend(from.iter().cloned());
    netpol(
        np,
        "denyexternalnetworkaccess",
        pod_selector,
        json!({
            "ingress": [{"from": from}],
            "egress": [{"ports": dns_ports(), "to": to}],
            "policyTypes": ["Egress", "Ingress"],
        }),
    )
}

fn no_generate() -> Value {
    json!({"clone": {}, "cloneList": {}})
}

/// A Kyverno `Policy` in `shop` owned by NimbusPolicy `np`.
fn kyverno_policy(np: &str, name: &str, description: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "kyverno.io/v1",
        "kind": "Policy",
        "metadata": meta(name, Some(NS), "kyverno", Some(description), np_owner(np)),
        "spec": spec,
    })
}

/// A Kyverno `ClusterPolicy` owned by the ClusterNimbusPolicy.
fn kyverno_cluster_policy(name: &str, description: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": meta(name, None, "kyverno", Some(description), cwnp_owner()),
        "spec": spec,
    })
}

/// `match` with one filter on `kind` (difference 2: the whole selector, ANDed).
fn kyverno_match(kind: &str, namespaces: Option<Value>, selector: Option<Value>) -> Value {
    let mut resources = json!({"kinds": [kind]});
    if let Some(ns) = namespaces {
        resources["namespaces"] = ns;
    }
    if let Some(s) = selector {
        resources["selector"] = s;
    }
    json!({"any": [{"resources": resources}], "resources": {}})
}

/// Exclude of a cluster policy: the protected namespaces (by default kube-system and k8tls's;
/// Nimbus excluded only kube-system), then the excluded names.
fn cluster_exclude(exclude_names: Option<Value>) -> Value {
    let mut any = vec![json!({"resources": {"namespaces": ["kube-system", "nimbus-k8tls-env"]}})];
    if let Some(names) = exclude_names {
        any.push(json!({"resources": {"namespaces": names}}));
    }
    json!({"any": any, "resources": {}})
}

fn pod_security_rule(r#match: Value, exclude: Value, level: &str) -> Value {
    json!({
        "name": "pod-security-standard",
        "match": r#match,
        "exclude": exclude,
        "mutate": {},
        "validate": {"podSecurity": {"level": level, "version": "latest"}},
        "generate": no_generate(),
    })
}

fn runtime_patch(class: &str) -> Value {
    json!({"spec": {"template": {"spec": {"runtimeClassName": class}}}})
}

/// cocoWorkload's namespaced Kyverno policies, with difference 5: `<np>-mutateexisting` (always) then `<np>-mutateoncreate`.
fn coco_policies(
    np: &str,
    description: &str,
    vfa: &str,
    selector: Option<Value>,
    class: &str,
    suffix: &str,
) -> Vec<Value> {
    let mut target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": NS});
    if let Some(s) = &selector {
        target["selector"] = s.clone();
    }
    vec![
        kyverno_policy(
            np,
            &format!("{np}-mutateexisting{suffix}"),
            description,
            json!({
                "rules": [{
                    "name": "add runtime",
                    "match": {
                        "any": [{"resources": {
                            "kinds": ["intent.security.nimbus.com/v1alpha1/NimbusPolicy"],
                            "name": np,
                        }}],
                        "resources": {},
                    },
                    "exclude": {"resources": {}},
                    "mutate": {"targets": [target], "patchStrategicMerge": runtime_patch(class)},
                    "validate": {},
                    "generate": no_generate(),
                }],
                "validationFailureAction": vfa,
                "background": true,
                "mutateExistingOnPolicyUpdate": true,
            }),
        ),
        kyverno_policy(
            np,
            &format!("{np}-mutateoncreate{suffix}"),
            description,
            json!({
                "rules": [{
                    "name": "add runtime",
                    "match": kyverno_match("apps/v1/Deployment", None, selector),
                    "exclude": {"resources": {}},
                    "mutate": {"patchStrategicMerge": runtime_patch(class)},
                    "validate": {},
                    "generate": no_generate(),
                }],
                "validationFailureAction": vfa,
                "background": true,
            }),
        ),
    ]
}

/// cocoWorkload's cluster Kyverno policy, with difference 4 (runtimeClass honoured).
fn cluster_coco_policy(
    description: &str,
    r#match: Value,
    exclude: Value,
    class: &str,
    vfa: &str,
) -> Value {
    kyverno_cluster_policy(
        &format!("{CWNP}-cocoworkload"),
        description,
        json!({
            "rules": [{
                "name": "add-runtime-class-to-pods",
                "match": r#match,
                "exclude": exclude,
                "mutate": {
                    "targets": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                    "patchStrategicMerge": runtime_patch(class),
                },
                "validate": {},
                "generate": no_generate(),
            }],
            "validationFailureAction": vfa,
            "mutateExistingOnPolicyUpdate": true,
        }),
    )
}

// ---------------------------------------------------------------------------------------------
// KubeArmor
// ---------------------------------------------------------------------------------------------

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

#[test]
fn kubearmor_namespaced_binding() {
    let t = run_np(&sib_np(selector(), kubearmor_rules()));
    no_problems(&t);
    assert_objects(&of(&t, Engine::KubeArmor), &expected_kubearmor(SIB_NP));
}

#[test]
fn kubearmor_cluster_binding_namespace_policy() {
    let t = run_np(&csib_np(selector(), kubearmor_rules()));
    no_problems(&t);
    assert_objects(&of(&t, Engine::KubeArmor), &expected_kubearmor(CSIB_NP));
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

#[test]
fn kubearmor_without_labels_or_description_and_with_audit_action() {
    let np = sib_np(
        json!({}),
        vec![rule(
            "unAuthorizedSaTokenAccess",
            "Audit",
            None,
            Value::Null,
        )],
    );
    let t = run_np(&np);
    no_problems(&t);
    let ksp = Ksp {
        np: SIB_NP,
        labels: json!({}),
        description: None,
        action: "Audit",
    };
    assert_objects(&of(&t, Engine::KubeArmor), &[ksp.sa_token()]);
    // An empty description is omitted as well.
    let np = sib_np(
        json!({"matchLabels": {}}),
        vec![rule("dnsManipulation", "Block", Some(""), Value::Null)],
    );
    let ksp = Ksp {
        np: SIB_NP,
        labels: json!({}),
        description: None,
        action: "Block",
    };
    assert_objects(&of(&run_np(&np), Engine::KubeArmor), &[ksp.dns()]);
}

/// `action` is `omitempty` in KubeArmor's Go types.
#[test]
fn kubearmor_omits_an_empty_action() {
    let np = sib_np(
        selector(),
        vec![rule("swDeploymentTools", "", Some("d"), Value::Null)],
    );
    let ksp = Ksp {
        np: SIB_NP,
        labels: labels(),
        description: Some("d"),
        action: "",
    };
    assert_objects(
        &of(&run_np(&np), Engine::KubeArmor),
        &[ksp.sw_deployment_tools("swdeploymenttools")],
    );
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

// ---------------------------------------------------------------------------------------------
// NetworkPolicy
// ---------------------------------------------------------------------------------------------

fn netpol_rules() -> Vec<Value> {
    vec![
        block("dnsManipulation", "Keep DNS honest"),
        block("denyExternalNetworkAccess", "Private only"),
    ]
}

#[test]
fn netpol_namespaced_binding_without_node_cidrs() {
    let t = run_np(&sib_np(selector(), netpol_rules()));
    no_problems(&t);
    assert_objects(
        &of(&t, Engine::NetworkPolicy),
        &[
            dns_netpol(SIB_NP, selector(), &[]),
            deny_external_netpol(SIB_NP, selector(), &[]),
        ],
    );
}

#[test]
fn netpol_node_pod_cidrs_come_first_sorted() {
    let env = Environment {
        node_pod_cidrs: BTreeSet::from(["10.244.1.0/24".to_owned(), "10.244.0.0/24".to_owned()]),
        ..Environment::default()
    };
    let t = run_np_with(&sib_np(selector(), netpol_rules()), &env, &EngineSet::all());
    no_problems(&t);
    let cidrs = ["10.244.0.0/24", "10.244.1.0/24"];
    assert_objects(
        &of(&t, Engine::NetworkPolicy),
        &[
            dns_netpol(SIB_NP, selector(), &cidrs),
            deny_external_netpol(SIB_NP, selector(), &cidrs),
        ],
    );
}

#[test]
fn netpol_cluster_binding_namespace_policy() {
    let env = Environment {
        node_pod_cidrs: BTreeSet::from(["10.244.0.0/24".to_owned()]),
        ..Environment::default()
    };
    let t = run_np_with(
        &csib_np(selector(), netpol_rules()),
        &env,
        &EngineSet::all(),
    );
    no_problems(&t);
    assert_objects(
        &of(&t, Engine::NetworkPolicy),
        &[
            dns_netpol(CSIB_NP, selector(), &["10.244.0.0/24"]),
            deny_external_netpol(CSIB_NP, selector(), &["10.244.0.0/24"]),
        ],
    );
}

#[test]
fn netpol_cluster_nimbus_policy_generates_nothing() {
    let t = run_cwnp(&cwnp(
        json!({"matchNames": ["*"]}),
        selector(),
        netpol_rules(),
    ));
    assert_objects(&of(&t, Engine::NetworkPolicy), &[]);
    no_problems(&t);
}

/// No labels: `podSelector: {}` (Go omits the empty `matchLabels` map).
#[test]
fn netpol_empty_selector_selects_every_pod() {
    for empty in [json!({}), json!({"matchLabels": {}})] {
        let t = run_np(&sib_np(empty.clone(), netpol_rules()));
        assert_objects(
            &of(&t, Engine::NetworkPolicy),
            &[
                dns_netpol(SIB_NP, json!({}), &[]),
                deny_external_netpol(SIB_NP, json!({}), &[]),
            ],
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Kyverno: escapeToHost
// ---------------------------------------------------------------------------------------------

#[test]
fn kyverno_escape_to_host_namespaced_binding() {
    let t = run_np(&sib_np(
        selector(),
        vec![block("escapeToHost", "No breakouts")],
    ));
    no_problems(&t);
    assert_objects(
        &of(&t, Engine::Kyverno),
        &[kyverno_policy(
            SIB_NP,
            "web-binding-escapetohost",
            "No breakouts",
            json!({
                "rules": [pod_security_rule(
                    kyverno_match("v1/Pod", None, Some(selector())),
                    json!({"resources": {}}),
                    "baseline",
                )],
                "validationFailureAction": "Enforce",
                "background": true,
            }),
        )],
    );
    // 3 KSPs + 1 Kyverno Policy, as the e2e status assert expects.
    assert_eq!(t.objects.len(), 4);
}

#[test]
fn kyverno_escape_to_host_restricted_audit_without_labels() {
    let np = sib_np(
        json!({}),
        vec![rule(
            "escapeToHost",
            "Audit",
            Some("No breakouts"),
            json!({"psaLevel": ["restricted"]}),
        )],
    );
    let t = run_np(&np);
    no_problems(&t);
    assert_objects(
        &of(&t, Engine::Kyverno),
        &[kyverno_policy(
            SIB_NP,
            "web-binding-escapetohost",
            "No breakouts",
            json!({
                "rules": [pod_security_rule(
                    kyverno_match("v1/Pod", None, None),
                    json!({"resources": {}}),
                    "restricted",
                )],
                "validationFailureAction": "Audit",
                "background": true,
            }),
        )],
    );
}

/// Kyverno does not act on the NimbusPolicies of cluster bindings: their escapeToHost is one
/// ClusterPolicy on the ClusterNimbusPolicy.
#[test]
fn kyverno_escape_to_host_cluster_binding_namespace_policy_has_only_ksps() {
    let t = run_np(&csib_np(selector(), vec![block("escapeToHost", "d")]));
    no_problems(&t);
    assert_objects(&of(&t, Engine::Kyverno), &[]);
    assert_eq!(of(&t, Engine::KubeArmor).len(), 3);
}

fn cluster_escape(r#match: Value, exclude: Value) -> Value {
    kyverno_cluster_policy(
        "web-csib-escapetohost",
        "No breakouts",
        json!({
            "rules": [pod_security_rule(r#match, exclude, "baseline")],
            "validationFailureAction": "Enforce",
            "background": true,
        }),
    )
}

#[test]
fn kyverno_escape_to_host_cluster_match_names() {
    let t = run_cwnp(&cwnp(
        json!({"matchNames": ["shop", "blog"]}),
        selector(),
        vec![block("escapeToHost", "No breakouts")],
    ));
    no_problems(&t);
    assert_objects(
        &all(&t),
        &[cluster_escape(
            kyverno_match("v1/Pod", Some(json!(["shop", "blog"])), Some(selector())),
            cluster_exclude(None),
        )],
    );
    assert_eq!(entries(&t), ["KyvernoClusterPolicy/web-csib-escapetohost"]);
}

/// The operator's own namespace, when protected, is exempt from cluster-wide admission rules
/// like kube-system: a cluster binding must not be able to stop the operator's pods.
#[test]
fn kyverno_cluster_policies_exclude_every_protected_namespace() {
    let env = Environment {
        protected_namespaces: ProtectedNamespaces::defaults(Some("nimbus-system"), "scans"),
        ..Environment::default()
    };
    let t = run_cwnp_with(
        &cwnp(
            json!({"matchNames": ["*"]}),
            Value::Null,
            vec![block("escapeToHost", "No breakouts")],
        ),
        &env,
    );
    let policy = &all(&t)[0];
    assert_eq!(
        policy["spec"]["rules"][0]["exclude"]["any"][0],
        json!({"resources": {"namespaces": ["kube-system", "nimbus-system", "scans"]}})
    );
}

#[test]
fn kyverno_escape_to_host_cluster_match_names_without_labels() {
    let t = run_cwnp(&cwnp(
        json!({"matchNames": ["shop"]}),
        Value::Null,
        vec![block("escapeToHost", "No breakouts")],
    ));
    assert_objects(
        &all(&t),
        &[cluster_escape(
            kyverno_match("v1/Pod", Some(json!(["shop"])), None),
            cluster_exclude(None),
        )],
    );
}

#[test]
fn kyverno_escape_to_host_cluster_all_namespaces() {
    let t = run_cwnp(&cwnp(
        json!({"matchNames": ["*"]}),
        selector(),
        vec![block("escapeToHost", "No breakouts")],
    ));
    assert_objects(
        &all(&t),
        &[cluster_escape(
            kyverno_match("v1/Pod", None, Some(selector())),
            cluster_exclude(None),
        )],
    );
    // No labels at all: every Pod.
    let t = run_cwnp(&cwnp(
        json!({"matchNames": ["*"]}),
        json!({}),
        vec![block("escapeToHost", "No breakouts")],
    ));
    assert_objects(
        &all(&t),
        &[cluster_escape(
            kyverno_match("v1/Pod", None, None),
            cluster_exclude(None),
        )],
    );
}

#[test]
fn kyverno_escape_to_host_cluster_all_but_excluded() {
    let t = run_cwnp(&cwnp(
        json!({"matchNames": ["*"], "excludeNames": ["dev", "test"]}),
        Value::Null,
        vec![block("escapeToHost", "No breakouts")],
    ));
    no_problems(&t);
    assert_objects(
        &all(&t),
        &[cluster_escape(
            kyverno_match("v1/Pod", None, None),
            cluster_exclude(Some(json!(["dev", "test"]))),
        )],
    );
}

/// Difference 7: Nimbus panicked (`matchNames[0]`).
#[test]
fn kyverno_escape_to_host_cluster_exclude_names_only() {
    let t = run_cwnp(&cwnp(
        json!({"excludeNames": ["dev"]}),
        selector(),
        vec![block("escapeToHost", "No breakouts")],
    ));
    no_problems(&t);
    assert_objects(
        &all(&t),
        &[cluster_escape(
            kyverno_match("v1/Pod", None, Some(selector())),
            cluster_exclude(Some(json!(["dev"]))),
        )],
    );
}

// ---------------------------------------------------------------------------------------------
// Kyverno: cocoWorkload
// ---------------------------------------------------------------------------------------------

#[test]
fn kyverno_coco_namespaced_binding_default_runtime_class() {
    let t = run_np(&sib_np(
        selector(),
        vec![block("cocoWorkload", "Confidential")],
    ));
    no_problems(&t);
    assert_objects(
        &all(&t),
        &coco_policies(
            SIB_NP,
            "Confidential",
            "Enforce",
            Some(selector()),
            "kata-clh",
            "",
        ),
    );
    assert_eq!(
        entries(&t),
        [
            "KyvernoPolicy/web-binding-mutateexisting",
            "KyvernoPolicy/web-binding-mutateoncreate",
        ]
    );
}

#[test]
fn kyverno_coco_namespaced_binding_runtime_class_without_labels() {
    let np = sib_np(
        json!({}),
        vec![rule(
            "cocoWorkload",
            "Audit",
            Some("Confidential"),
            json!({"runtimeClass": ["kata-qemu"]}),
        )],
    );
    let t = run_np(&np);
    no_problems(&t);
    assert_objects(
        &all(&t),
        &coco_policies(SIB_NP, "Confidential", "Audit", None, "kata-qemu", ""),
    );
}

#[test]
fn kyverno_coco_cluster_binding_namespace_policy_generates_nothing() {
    let t = run_np(&csib_np(selector(), vec![block("cocoWorkload", "d")]));
    no_problems(&t);
    assert_objects(&all(&t), &[]);
}

#[test]
fn kyverno_coco_cluster_match_names_with_runtime_class() {
    let t = run_cwnp(&cwnp(
        json!({"matchNames": ["shop", "blog"]}),
        selector(),
        vec![rule(
            "cocoWorkload",
            "Block",
            Some("Confidential"),
            json!({"runtimeClass": ["kata-qemu"]}),
        )],
    ));
    no_problems(&t);
    assert_objects(
        &all(&t),
        &[cluster_coco_policy(
            "Confidential",
            kyverno_match(
                "apps/v1/Deployment",
                Some(json!(["shop", "blog"])),
                Some(selector()),
            ),
            cluster_exclude(None),
            "kata-qemu",
            "Enforce",
        )],
    );
    assert_eq!(entries(&t), ["KyvernoClusterPolicy/web-csib-cocoworkload"]);
}

#[test]
fn kyverno_coco_cluster_all_namespaces_variants() {
    let cases = [
        (
            json!({"matchNames": ["*"]}),
            Value::Null,
            kyverno_match("apps/v1/Deployment", None, None),
            cluster_exclude(None),
        ),
        (
            json!({"matchNames": ["*"], "excludeNames": ["dev"]}),
            selector(),
            kyverno_match("apps/v1/Deployment", None, Some(selector())),
            cluster_exclude(Some(json!(["dev"]))),
        ),
        (
            json!({"excludeNames": ["dev", "test"]}),
            Value::Null,
            kyverno_match("apps/v1/Deployment", None, None),
            cluster_exclude(Some(json!(["dev", "test"]))),
        ),
    ];
    for (ns_selector, workloads, r#match, exclude) in cases {
        let t = run_cwnp(&cwnp(
            ns_selector,
            workloads,
            vec![rule(
                "cocoWorkload",
                "Audit",
                Some("Confidential"),
                Value::Null,
            )],
        ));
        no_problems(&t);
        assert_objects(
            &all(&t),
            &[cluster_coco_policy(
                "Confidential",
                r#match,
                exclude,
                "kata-clh",
                "Audit",
            )],
        );
    }
}

/// Nimbus always sets the description annotation, empty without a description.
#[test]
fn kyverno_description_annotation_is_always_set() {
    let np = sib_np(
        selector(),
        vec![rule("escapeToHost", "Block", None, Value::Null)],
    );
    let t = run_np(&np);
    let kyverno = of(&t, Engine::Kyverno);
    assert_eq!(kyverno.len(), 1);
    assert_eq!(
        kyverno[0]["metadata"],
        meta(
            "web-binding-escapetohost",
            Some(NS),
            "kyverno",
            Some(""),
            np_owner(SIB_NP)
        )
    );
}

/// Difference 3: each Kyverno policy takes the parameters of its own rule.
#[test]
fn kyverno_params_come_from_the_matching_rule() {
    let np = sib_np(
        selector(),
        vec![
            rule(
                "cocoWorkload",
                "Block",
                Some("c"),
                json!({"runtimeClass": ["kata-qemu"]}),
            ),
            rule(
                "escapeToHost",
                "Block",
                Some("e"),
                json!({"psaLevel": ["restricted"]}),
            ),
        ],
    );
    let t = run_np(&np);
    no_problems(&t);
    let kyverno = of(&t, Engine::Kyverno);
    assert_eq!(kyverno.len(), 3);
    assert_eq!(
        kyverno[2]["spec"]["rules"][0]["validate"]["podSecurity"]["level"],
        "restricted"
    );
    assert_eq!(
        kyverno[1]["spec"]["rules"][0]["mutate"]["patchStrategicMerge"],
        runtime_patch("kata-qemu")
    );
}

// ---------------------------------------------------------------------------------------------
// Kyverno: virtualPatch
// ---------------------------------------------------------------------------------------------

/// Nimbus's virtual-patch database (vp.json) format, with a simple netpol patch.
fn vp_database() -> Value {
    json!([{
        "image": "nginx:latest",
        "cves": [{
            "cve": "CVE-2024-4439",
            "virtual_patch": [
                {"karmor": {
                    "apiVersion": "security.kubearmor.com/v1", "kind": "KubeArmorPolicy",
                    "metadata": {"name": "block-pkg-mgmt-tools-exec"},
                    "spec": {
                        "selector": {"matchLabels": {"app": "nginx"}},
                        "process": {"matchPaths": [{"path": "/usr/bin/apt"}, {"path": "/usr/bin/apt-get"}]},
                        "action": "Block",
                    },
                }},
                {"kyverno": {
                    "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                    "name": "CVE_NUMBER-Virtual-Patch-Kyverno",
                    "metadata": {"name": "disallow-latest-tag"},
                    "spec": {
                        "validationFailureAction": "Enforce",
                        "background": true,
                        "rules": [{
                            "name": "validate-image-tag",
                            "match": {"any": [{"resources": {"kinds": ["Pod"], "selector": {"matchLabels": {"app": "test"}}}}]},
                            "preconditions": {"all": [{"key": "busybox", "operator": "AnyIn", "value": "{{ images.containers.*.name }}"}]},
                            "validate": {
                                "message": "Using a mutable image tag e.g. 'latest' is not allowed.",
                                "pattern": {"spec": {"containers": [{"image": "!*:latest"}]}},
                            },
                        }],
                    },
                }},
                {"netpol": {
                    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                    "metadata": {"name": "test-network-policy"},
                    "spec": {
                        "podSelector": {"matchLabels": {"role": "db"}},
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"protocol": "TCP", "port": 5978}]}],
                    },
                }},
            ],
        }],
    }])
}

fn vp_env() -> Environment {
    let data = BTreeMap::from([(
        virtual_patch::DATABASE_KEY.to_owned(),
        vp_database().to_string(),
    )]);
    Environment {
        virtual_patches: virtual_patch::from_config_map("nimbus/vp-db", Some(&data)),
        ..Environment::default()
    }
}

fn vp_rule() -> Value {
    rule(
        "virtualPatch",
        "Block",
        Some("Patch CVEs"),
        json!({"cveList": ["CVE-2024-4439"]}),
    )
}

fn runs_nginx() -> Value {
    json!({"key": "nginx:latest", "operator": "AnyIn", "value": "{{ request.object.spec.containers[].image }}"})
}

fn pod_name_context() -> Value {
    json!({"name": "podName", "variable": {"jmesPath": "request.object.metadata.name"}})
}

/// A virtual patch's generator Policy `<np>-cve-2024-4439-<engine>-1`.
fn vp_generator(np: &str, engine: &str, rule: Value) -> Value {
    kyverno_policy(
        np,
        &format!("{np}-cve-2024-4439-{engine}-1"),
        "Patch CVEs",
        json!({
            "rules": [rule],
            "validationFailureAction": "Enforce",
            "background": true,
            "generateExisting": true,
        }),
    )
}

fn vp_owner_in_data(np: &str) -> Value {
    json!([np_owner(np)])
}

fn vp_karmor(np: &str) -> Value {
    let mut generated_labels = labels();
    generated_labels["kubearmor.io/container.name"] = "{{ containerName }}".into();
    vp_generator(
        np,
        "karmor",
        json!({
            "name": "cve-2024-4439-virtual-patch-karmor", // Nimbus lacked the hyphen
            "context": [
                {"name": "containerName", "variable": {"jmesPath": "request.object.spec.containers[?(@.image=='nginx:latest')].name | [0]"}},
                pod_name_context(),
            ],
            "match": kyverno_match("v1/Pod", None, Some(selector())),
            "exclude": {"resources": {}},
            "preconditions": {"all": [runs_nginx()]},
            "mutate": {},
            "validate": {},
            "generate": {
                "apiVersion": "security.kubearmor.com/v1",
                "kind": "KubeArmorPolicy",
                "namespace": NS,
                "name": "block-pkg-mgmt-tools-exec-{{ podName }}",
                "data": {
                    "metadata": {"name": "block-pkg-mgmt-tools-exec", "ownerReferences": vp_owner_in_data(np)},
                    "spec": {
                        "action": "Block",
                        "process": {"matchPaths": [{"path": "/usr/bin/apt"}, {"path": "/usr/bin/apt-get"}]},
                        "selector": {"matchLabels": generated_labels},
                    },
                },
                "clone": {},
                "cloneList": {},
            },
        }),
    )
}

fn vp_kyverno(np: &str) -> Value {
    vp_generator(
        np,
        "kyverno",
        json!({
            "name": "cve-2024-4439-virtual-patch-kyverno",
            "match": kyverno_match("v1/Pod", None, Some(selector())),
            "exclude": {"resources": {}},
            "mutate": {},
            "validate": {},
            "generate": {
                "apiVersion": "kyverno.io/v1",
                "kind": "Policy",
                "namespace": NS,
                "name": "disallow-latest-tag",
                "data": {
                    "name": "CVE_NUMBER-Virtual-Patch-Kyverno",
                    "metadata": {"name": "disallow-latest-tag", "ownerReferences": vp_owner_in_data(np)},
                    "spec": {
                        "validationFailureAction": "Enforce",
                        "background": true,
                        "rules": [{
                            "name": "validate-image-tag",
                            "match": {"any": [{"resources": {"kinds": ["Pod"], "selector": selector()}}]},
                            // Fixed: the image condition comes first and the patch's own
                            // `all` conditions are kept (Nimbus dropped them).
                            "preconditions": {"all": [
                                runs_nginx(),
                                {"key": "busybox", "operator": "AnyIn", "value": "{{ images.containers.*.name }}"},
                            ]},
                            "validate": {
                                "message": "Using a mutable image tag e.g. 'latest' is not allowed.",
                                "pattern": {"spec": {"containers": [{"image": "!*:latest"}]}},
                            },
                        }],
                    },
                },
                "clone": {},
                "cloneList": {},
            },
        }),
    )
}

fn vp_netpol(np: &str) -> Value {
    vp_generator(
        np,
        "netpol",
        json!({
            "name": "cve-2024-4439-virtual-patch-netpol", // Nimbus lacked the hyphen
            "context": [pod_name_context()],
            "match": kyverno_match("v1/Pod", None, Some(selector())),
            "exclude": {"resources": {}},
            "preconditions": {"all": [runs_nginx()]},
            "mutate": {},
            "validate": {},
            "generate": {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "namespace": NS,
                "name": "test-network-policy",
                "data": {
                    "metadata": {"name": "test-network-policy", "ownerReferences": vp_owner_in_data(np)},
                    "spec": {
                        "podSelector": selector(),
                        "policyTypes": ["Egress"],
                        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"protocol": "TCP", "port": 5978}]}],
                    },
                },
                "clone": {},
                "cloneList": {},
            },
        }),
    )
}

fn vp_objects() -> Translation {
    run_np_with(
        &sib_np(selector(), vec![vp_rule()]),
        &vp_env(),
        &EngineSet::all(),
    )
}

#[test]
fn virtual_patch_names_and_entries() {
    let t = vp_objects();
    no_problems(&t);
    assert_eq!(
        entries(&t),
        [
            "KyvernoPolicy/web-binding-cve-2024-4439-karmor-1",
            "KyvernoPolicy/web-binding-cve-2024-4439-kyverno-1",
            "KyvernoPolicy/web-binding-cve-2024-4439-netpol-1",
        ]
    );
}

#[test]
fn virtual_patch_karmor_generator() {
    let t = vp_objects();
    assert_objects(&all(&t)[..1], &[vp_karmor(SIB_NP)]);
}

#[test]
fn virtual_patch_kyverno_generator() {
    let t = vp_objects();
    assert_objects(&all(&t)[1..2], &[vp_kyverno(SIB_NP)]);
}

#[test]
fn virtual_patch_netpol_generator() {
    let t = vp_objects();
    assert_objects(&all(&t)[2..], &[vp_netpol(SIB_NP)]);
}

/// Nimbus's cluster path produced an empty ClusterPolicy (a bug); here every selected
/// namespace gets the generators, through its per-namespace NimbusPolicy.
#[test]
fn virtual_patch_cluster_binding_patches_each_namespace() {
    let t = run_np_with(
        &csib_np(selector(), vec![vp_rule()]),
        &vp_env(),
        &EngineSet::all(),
    );
    let names: Vec<String> = all(&t)
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "nimbus-ctlr-gen-web-csib-cve-2024-4439-karmor-1",
            "nimbus-ctlr-gen-web-csib-cve-2024-4439-kyverno-1",
            "nimbus-ctlr-gen-web-csib-cve-2024-4439-netpol-1",
        ]
    );
}

/// Nimbus wrote an empty, rule-less ClusterPolicy `<cwnp>-virtualpatch` (a bug).
#[test]
fn virtual_patch_cluster_nimbus_policy_generates_nothing() {
    let t = run_cwnp_with(
        &cwnp(json!({"matchNames": ["*"]}), selector(), vec![vp_rule()]),
        &vp_env(),
    );
    assert_objects(&all(&t), &[]);
}

#[test]
fn virtual_patch_without_database_is_not_ready() {
    let t = run_np(&sib_np(selector(), vec![vp_rule()]));
    assert!(t.objects.is_empty());
    assert_eq!(
        t.problems,
        vec![Problem {
            intent: "virtualPatch".into(),
            reason: condition::REASON_ENGINE_NOT_READY,
            message: "no virtual-patch database is configured (--virtual-patch-db)".into(),
            blocking: true,
        }]
    );
    let env = Environment {
        virtual_patches: VirtualPatches::Invalid("ConfigMap nimbus/vp-db not found".into()),
        ..Environment::default()
    };
    let t = run_np_with(
        &sib_np(selector(), vec![vp_rule()]),
        &env,
        &EngineSet::all(),
    );
    assert_eq!(t.problems.len(), 1);
    assert_eq!(t.problems[0].message, "ConfigMap nimbus/vp-db not found");
    assert!(t.problems[0].blocking);
}

#[test]
fn virtual_patch_unknown_cves_are_reported_without_blocking() {
    let np = sib_np(
        selector(),
        vec![rule(
            "virtualPatch",
            "Block",
            Some("Patch CVEs"),
            json!({"cveList": ["CVE-2024-4439", "CVE-2099-0001"]}),
        )],
    );
    let t = run_np_with(&np, &vp_env(), &EngineSet::all());
    assert_eq!(t.objects.len(), 3);
    assert_eq!(
        t.problems,
        vec![Problem {
            intent: "virtualPatch".into(),
            reason: condition::REASON_ENGINE_NOT_READY,
            message: "no virtual patch known for CVE-2099-0001".into(),
            blocking: false,
        }]
    );
}

// ---------------------------------------------------------------------------------------------
// k8tls
// ---------------------------------------------------------------------------------------------

fn k8tls_volumes(addresses: Option<&str>) -> Value {
    let mut volumes = vec![
        json!({"name": "fips-config", "configMap": {"name": "fips-config"}}),
        json!({"name": "fluent-bit-config", "configMap": {"name": "fluent-bit-config"}}),
        json!({"name": "k8tls-report", "emptyDir": {}}),
    ];
    if let Some(cm) = addresses {
        volumes.push(json!({"name": "external-addresses", "configMap": {"name": cm}}));
    }
    json!(volumes)
}

/// Pod Security "restricted" for both containers (difference 13).
fn restricted() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

/// assessTLS's CronJob (no Elasticsearch, difference 6; pinned, restricted and bounded, difference 13), in
/// `namespace`. `addresses`: the address ConfigMap.
fn cron_job(name: &str, namespace: &str, schedule: &str, addresses: Option<&str>) -> Value {
    let mut mounts = vec![
        json!({"name": "fips-config", "readOnly": true, "mountPath": "/home/k8tls/config/"}),
        json!({"name": "k8tls-report", "mountPath": "/tmp/"}),
    ];
    let command = if addresses.is_some() {
        mounts.push(
            json!({"name": "external-addresses", "readOnly": true, "mountPath": "/var/k8tls/"}),
        );
        json!([
            "./tlsscan",
            "--infile",
            "/var/k8tls/addresses",
            "--compact-json"
        ])
    } else {
        json!(["./k8s_tlsscan"])
    };
    let mut metadata = meta(name, Some(namespace), "k8tls", None, cwnp_owner());
    // The CronJob carries the ClusterNimbusPolicy's labels.
    metadata["labels"]["team"] = "a".into();
    json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata,
        "spec": {
            "schedule": schedule,
            "jobTemplate": {"spec": {
                "backoffLimit": 5,
                "template": {"spec": {
                    "volumes": k8tls_volumes(addresses),
                    "initContainers": [{
                        "name": "k8tls",
                        "image": "kubearmor/k8tls:v0.1.0",
                        "command": command,
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "128Mi"},
                            "limits": {"cpu": "500m", "memory": "512Mi"},
                        },
                        "volumeMounts": mounts,
                        "imagePullPolicy": "IfNotPresent",
                        "securityContext": restricted(),
                    }],
                    "containers": [{
                        "name": "fluent-bit",
                        "image": "fluent/fluent-bit:3.2.2",
                        "resources": {
                            "requests": {"cpu": "10m", "memory": "32Mi"},
                            "limits": {"cpu": "100m", "memory": "128Mi"},
                        },
                        "volumeMounts": [
                            {"name": "fluent-bit-config", "readOnly": true,
                             "mountPath": "/fluent-bit/etc/fluent-bit.conf", "subPath": "fluent-bit.conf"},
                            {"name": "k8tls-report", "mountPath": "/tmp/"},
                        ],
                        "imagePullPolicy": "IfNotPresent",
                        "securityContext": restricted(),
                    }],
                    "restartPolicy": "Never",
                    "serviceAccountName": "k8tls",
                }},
            }},
        },
    })
}

/// assessTLS's address ConfigMap under its own name (difference 6), with the managed-by annotation and label.
fn addresses_config_map(name: &str, namespace: &str, addresses: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(name, Some(namespace), "k8tls", None, cwnp_owner()),
        "data": {"addresses": addresses},
    })
}

fn all_namespaces() -> Value {
    json!({"matchNames": ["*"]})
}

#[test]
fn k8tls_cluster_default_schedule() {
    let t = run_cwnp(&cwnp(
        all_namespaces(),
        Value::Null,
        vec![block("assessTLS", "Scan TLS")],
    ));
    no_problems(&t);
    assert_objects(
        &all(&t),
        &[cron_job("web-csib-assesstls", K8TLS_NS, "@weekly", None)],
    );
    assert_eq!(entries(&t), ["nimbus-k8tls-env/CronJob/web-csib-assesstls"]);
}

#[test]
fn k8tls_cluster_external_addresses_and_schedule() {
    let t = run_cwnp(&cwnp(
        all_namespaces(),
        Value::Null,
        vec![rule(
            "assessTLS",
            "Audit",
            None,
            json!({"schedule": ["0 3 * * MON"], "external_addresses": ["google.com:443", "10.0.0.1:8443"]}),
        )],
    ));
    no_problems(&t);
    assert_objects(
        &all(&t),
        &[
            addresses_config_map(
                "web-csib-assesstls-addresses",
                K8TLS_NS,
                "google.com:443 Google\n10.0.0.1:8443 10",
            ),
            cron_job(
                "web-csib-assesstls",
                K8TLS_NS,
                "0 3 * * MON",
                Some("web-csib-assesstls-addresses"),
            ),
        ],
    );
    assert_eq!(
        entries(&t),
        [
            "ConfigMap/web-csib-assesstls-addresses",
            "nimbus-k8tls-env/CronJob/web-csib-assesstls",
        ]
    );
}

/// Difference 6: one CronJob per assessTLS rule (difference 9 for the names).
#[test]
fn k8tls_one_cron_job_per_rule() {
    let t = run_cwnp(&cwnp(
        all_namespaces(),
        Value::Null,
        vec![
            block("assessTLS", "a"),
            rule(
                "assessTLS",
                "Block",
                None,
                json!({"external_addresses": ["example.org:8443"]}),
            ),
        ],
    ));
    no_problems(&t);
    assert_objects(
        &all(&t),
        &[
            cron_job("web-csib-assesstls", K8TLS_NS, "@weekly", None),
            addresses_config_map(
                "web-csib-assesstls-2-addresses",
                K8TLS_NS,
                "example.org:8443 Example",
            ),
            cron_job(
                "web-csib-assesstls-2",
                K8TLS_NS,
                "@weekly",
                Some("web-csib-assesstls-2-addresses"),
            ),
        ],
    );
}

#[test]
fn k8tls_configured_namespace() {
    let env = Environment {
        k8tls_namespace: "scanners".into(),
        ..Environment::default()
    };
    let t = run_cwnp_with(
        &cwnp(
            all_namespaces(),
            Value::Null,
            vec![rule(
                "assessTLS",
                "Block",
                None,
                json!({"external_addresses": ["a.io:443"]}),
            )],
        ),
        &env,
    );
    no_problems(&t);
    assert_objects(
        &all(&t),
        &[
            addresses_config_map("web-csib-assesstls-addresses", "scanners", "a.io:443 A"),
            cron_job(
                "web-csib-assesstls",
                "scanners",
                "@weekly",
                Some("web-csib-assesstls-addresses"),
            ),
        ],
    );
    assert_eq!(
        entries(&t)[1],
        "scanners/CronJob/web-csib-assesstls",
        "the entry names the CronJob's namespace"
    );
}

#[test]
fn k8tls_missing_namespace_is_not_ready() {
    let env = Environment {
        k8tls_namespace_exists: false,
        ..Environment::default()
    };
    let t = run_cwnp_with(
        &cwnp(all_namespaces(), Value::Null, vec![block("assessTLS", "a")]),
        &env,
    );
    assert!(t.objects.is_empty());
    assert_eq!(t.problems.len(), 1);
    assert_eq!(t.problems[0].intent, "assessTLS");
    assert_eq!(t.problems[0].reason, condition::REASON_ENGINE_NOT_READY);
    assert!(t.problems[0].blocking);
    assert!(t.problems[0].message.contains("nimbus-k8tls-env"));
}

/// CronJob names stay ≤ 52 characters; the address ConfigMap is `<cronjob>-addresses`.
#[test]
fn k8tls_long_policy_names_are_shortened() {
    let long = "x".repeat(60);
    let mut policy = cwnp(
        all_namespaces(),
        Value::Null,
        vec![rule(
            "assessTLS",
            "Block",
            None,
            json!({"external_addresses": ["a.io:443"]}),
        )],
    );
    policy.metadata.name = Some(long.clone());
    let t = run_cwnp(&policy);
    let objects = all(&t);
    assert_eq!(objects.len(), 2);
    let cron_name = objects[1]["metadata"]["name"].as_str().unwrap();
    assert!(cron_name.len() <= 52, "{cron_name}");
    assert!(cron_name.starts_with("xxxxxxxx"), "{cron_name}");
    assert_eq!(
        objects[0]["metadata"]["name"],
        format!("{cron_name}-addresses"),
        "the address ConfigMap is named after its CronJob"
    );
    assert_eq!(
        objects[1]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"][3]["configMap"]["name"],
        objects[0]["metadata"]["name"]
    );
}

#[test]
fn k8tls_namespaced_policies_generate_nothing() {
    // Through a namespaced binding: not enforceable at all.
    let t = run_np(&sib_np(selector(), vec![block("assessTLS", "a")]));
    assert!(t.objects.is_empty());
    assert_eq!(
        t.problems,
        vec![Problem {
            intent: "assessTLS".into(),
            reason: condition::REASON_UNSUPPORTED_INTENT,
            message: "intent `assessTLS` is enforced only through a ClusterSecurityIntentBinding"
                .into(),
            blocking: true,
        }]
    );
    // Through a cluster binding: the ClusterNimbusPolicy carries it, the namespaces do not.
    let t = run_np(&csib_np(selector(), vec![block("assessTLS", "a")]));
    assert!(t.objects.is_empty());
    no_problems(&t);
}

/// Difference 13: the scanner image is configuration.
#[test]
fn k8tls_configured_image() {
    let env = Environment {
        k8tls_image: "registry.local/k8tls:v9".into(),
        ..Environment::default()
    };
    let t = run_cwnp_with(
        &cwnp(all_namespaces(), Value::Null, vec![block("assessTLS", "a")]),
        &env,
    );
    let job = &all(&t)[0]["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(job["initContainers"][0]["image"], "registry.local/k8tls:v9");
}

/// Difference 13: a scan more often than hourly is a bad parameter; the default is used.
#[test]
fn k8tls_schedules_more_frequent_than_hourly_fall_back_to_weekly() {
    for schedule in ["* * * * *", "*/5 * * * *"] {
        let t = run_cwnp(&cwnp(
            all_namespaces(),
            Value::Null,
            vec![rule(
                "assessTLS",
                "Audit",
                None,
                json!({"schedule": [schedule]}),
            )],
        ));
        assert_eq!(t.problems.len(), 1, "{:?}", t.problems);
        assert_eq!(t.problems[0].reason, condition::REASON_INVALID_PARAMETER);
        assert!(!t.problems[0].blocking);
        assert!(t.problems[0].message.contains("at most hourly"));
        assert_eq!(all(&t)[0]["spec"]["schedule"], "@weekly");
    }
}

// ---------------------------------------------------------------------------------------------
// Sensitive intents (difference 12)
// ---------------------------------------------------------------------------------------------

fn without_opt_in<K: kube::Resource>(mut policy: K, value: Option<&str>) -> K {
    policy.meta_mut().annotations =
        value.map(|v| BTreeMap::from([(ALLOW_SENSITIVE_ANNOTATION.to_owned(), v.to_owned())]));
    policy
}

fn not_allowed(intent: &str) -> Problem {
    Problem {
        intent: intent.into(),
        reason: condition::REASON_SENSITIVE_INTENT_NOT_ALLOWED,
        message: format!(
            "intent `{intent}` is sensitive and not enforced: the binding must list it in its \
             intent.security.nimbus.com/allow-sensitive annotation"
        ),
        blocking: true,
    }
}

#[test]
fn sensitive_intents_need_the_binding_authors_opt_in() {
    for value in [None, Some(""), Some("assessTLS"), Some("namespacesandbox")] {
        let np = without_opt_in(
            csib_np(selector(), vec![sandbox_rule(json!({"group": ["g"]}))]),
            value,
        );
        let t = run_np(&np);
        assert!(t.objects.is_empty(), "{value:?}");
        assert_eq!(
            t.problems,
            vec![not_allowed("namespaceSandbox")],
            "{value:?}"
        );
    }
    for value in [None, Some("namespaceSandbox")] {
        let policy = without_opt_in(
            cwnp(all_namespaces(), Value::Null, vec![block("assessTLS", "a")]),
            value,
        );
        let t = run_cwnp(&policy);
        assert!(t.objects.is_empty(), "{value:?}");
        assert_eq!(t.problems, vec![not_allowed("assessTLS")], "{value:?}");
    }
    // Listed: enforced; the other rules never needed it.
    let np = without_opt_in(
        csib_np(
            selector(),
            vec![
                block("dnsManipulation", "d"),
                sandbox_rule(json!({"group": ["g"]})),
            ],
        ),
        Some(" namespaceSandbox "),
    );
    let t = run_np(&np);
    no_problems(&t);
    assert_eq!(of(&t, Engine::Rbac).len(), 1);
    assert_eq!(of(&t, Engine::NetworkPolicy).len(), 1);
}

/// Only where an engine would act: assessTLS on a cluster binding's namespace policies, or a
/// sandbox through a namespaced binding, report what they always did.
#[test]
fn sensitive_intents_are_reported_only_where_enforced() {
    let t = run_np(&without_opt_in(
        csib_np(selector(), vec![block("assessTLS", "a")]),
        None,
    ));
    no_problems(&t);
    let t = run_np(&without_opt_in(
        sib_np(selector(), vec![sandbox_rule(json!({"group": ["g"]}))]),
        None,
    ));
    assert_eq!(t.problems.len(), 1);
    assert_eq!(t.problems[0].reason, condition::REASON_UNSUPPORTED_INTENT);
}

// ---------------------------------------------------------------------------------------------
// rbac: namespaceSandbox
// ---------------------------------------------------------------------------------------------

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

fn sandbox_rule(params: Value) -> Value {
    rule("namespaceSandbox", "Block", Some("Sandbox"), params)
}

/// Difference 11: a namespaced binding is anybody's with access to a namespace; granting roles
/// is an administrator's (cluster binding's) call.
#[test]
fn rbac_namespaced_binding_is_unsupported() {
    let t = run_np(&sib_np(
        selector(),
        vec![sandbox_rule(json!({"group": ["team-{namespace}"]}))],
    ));
    assert!(t.objects.is_empty());
    assert_eq!(
        t.problems,
        vec![Problem {
            intent: "namespaceSandbox".into(),
            reason: condition::REASON_UNSUPPORTED_INTENT,
            message: "intent `namespaceSandbox` is enforced only through a \
                      ClusterSecurityIntentBinding"
                .into(),
            blocking: true,
        }]
    );
}

#[test]
fn rbac_cluster_binding_default_role() {
    let t = run_np(&csib_np(
        selector(),
        vec![sandbox_rule(json!({"group": ["team-{namespace}"]}))],
    ));
    no_problems(&t);
    assert_objects(&all(&t), &[role_binding(CSIB_NP, "edit", &["team-shop"])]);
    assert_eq!(
        entries(&t),
        ["RoleBinding/nimbus-ctlr-gen-web-csib-namespacesandbox-role-edit"]
    );
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
        assert_eq!(blocking[0].reason, condition::REASON_INVALID_PARAMETER);
        let needle = if needle == "MISSING" {
            "system:x"
        } else {
            needle
        };
        assert!(
            blocking[0].message.contains(needle),
            "{}",
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
fn rbac_cluster_binding_namespace_policy() {
    let t = run_np(&csib_np(
        json!({}),
        vec![sandbox_rule(json!({
            "group": ["{namespace}-devs", "oncall"],
            "clusterRole": ["view"],
        }))],
    ));
    no_problems(&t);
    assert_objects(
        &all(&t),
        &[role_binding(CSIB_NP, "view", &["shop-devs", "oncall"])],
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

#[test]
fn rbac_group_is_required() {
    let t = run_np(&csib_np(selector(), vec![sandbox_rule(Value::Null)]));
    assert!(t.objects.is_empty());
    assert_eq!(
        t.problems,
        vec![Problem {
            intent: "namespaceSandbox".into(),
            reason: condition::REASON_INVALID_PARAMETER,
            message: "intent `namespaceSandbox`: param group: is required".into(),
            blocking: true,
        }]
    );
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
    let names: BTreeSet<String> = all(&t)
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names.len(), 2, "RoleBindings collide: {names:?}");
}

// ---------------------------------------------------------------------------------------------
// Several rules with the same ID (difference 9)
// ---------------------------------------------------------------------------------------------

#[test]
fn a_second_rule_with_the_same_id_gets_suffixed_names() {
    let np = sib_np(
        selector(),
        vec![
            block("dnsManipulation", "one"),
            block("escapeToHost", "one"),
            block("dnsManipulation", "two"),
            block("escapeToHost", "two"),
        ],
    );
    let t = run_np(&np);
    no_problems(&t);
    assert_eq!(
        entries(&t),
        [
            "NetworkPolicy/web-binding-dnsmanipulation",
            "KubeArmorPolicy/web-binding-dnsmanipulation",
            "KubeArmorPolicy/web-binding-escapetohost-disallowchroot",
            "KubeArmorPolicy/web-binding-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/web-binding-escapetohost-swdeploymenttools",
            "KyvernoPolicy/web-binding-escapetohost",
            "NetworkPolicy/web-binding-dnsmanipulation-2",
            "KubeArmorPolicy/web-binding-dnsmanipulation-2",
            "KubeArmorPolicy/web-binding-escapetohost-2-disallowchroot",
            "KubeArmorPolicy/web-binding-escapetohost-2-disallowcapabilities",
            "KubeArmorPolicy/web-binding-escapetohost-2-swdeploymenttools",
            "KyvernoPolicy/web-binding-escapetohost-2",
        ]
    );
    let ksp = Ksp {
        np: SIB_NP,
        labels: labels(),
        description: Some("two"),
        action: "Block",
    };
    let objects = all(&t);
    assert_objects(&objects[8..11], &ksp.escape_to_host("escapetohost-2"));
}

#[test]
fn a_second_coco_rule_gets_suffixed_names() {
    let np = sib_np(
        selector(),
        vec![
            block("cocoWorkload", "one"),
            rule(
                "cocoWorkload",
                "Block",
                Some("two"),
                json!({"runtimeClass": ["kata-qemu"]}),
            ),
        ],
    );
    let t = run_np(&np);
    no_problems(&t);
    let mut want = coco_policies(SIB_NP, "one", "Enforce", Some(selector()), "kata-clh", "");
    want.extend(coco_policies(
        SIB_NP,
        "two",
        "Enforce",
        Some(selector()),
        "kata-qemu",
        "-2",
    ));
    assert_objects(&all(&t), &want);
}

#[test]
fn a_second_cluster_rule_gets_suffixed_names() {
    let t = run_cwnp(&cwnp(
        all_namespaces(),
        Value::Null,
        vec![
            block("escapeToHost", "a"),
            block("cocoWorkload", "a"),
            block("escapeToHost", "b"),
            block("cocoWorkload", "b"),
        ],
    ));
    no_problems(&t);
    assert_eq!(
        entries(&t),
        [
            "KyvernoClusterPolicy/web-csib-escapetohost",
            "KyvernoClusterPolicy/web-csib-cocoworkload",
            "KyvernoClusterPolicy/web-csib-escapetohost-2",
            "KyvernoClusterPolicy/web-csib-cocoworkload-2",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Entries, origin, and the whole picture
// ---------------------------------------------------------------------------------------------

#[test]
fn namespaced_origin_follows_the_controlling_owner() {
    use nimbus_core::catalog::Origin;
    let sib = sib_np(selector(), vec![]);
    assert_eq!(PolicyInput::namespaced(&sib, UID).origin, Origin::Binding);
    let csib = csib_np(selector(), vec![]);
    assert_eq!(
        PolicyInput::namespaced(&csib, UID).origin,
        Origin::ClusterBindingNamespace
    );
    // A non-controlling reference to a cluster binding does not count.
    let mut loose = csib_np(selector(), vec![]);
    loose.metadata.owner_references.as_mut().unwrap()[0].controller = Some(false);
    assert_eq!(PolicyInput::namespaced(&loose, UID).origin, Origin::Binding);
    let cluster = cwnp(all_namespaces(), Value::Null, vec![]);
    assert_eq!(PolicyInput::cluster(&cluster, UID).origin, Origin::Cluster);
}

/// Every intent through a namespaced binding, in rule order then engine order (netpol,
/// kubearmor, kyverno, k8tls, rbac).
#[test]
fn entries_of_every_namespaced_intent() {
    let np = sib_np(
        selector(),
        vec![
            block("swDeploymentTools", "d"),
            block("unAuthorizedSaTokenAccess", "d"),
            block("dnsManipulation", "d"),
            block("denyExternalNetworkAccess", "d"),
            block("escapeToHost", "d"),
            block("preventExecutionFromTempOrLogsFolders", "d"),
            block("cocoWorkload", "d"),
        ],
    );
    let t = run_np(&np);
    no_problems(&t);
    assert_eq!(
        entries(&t),
        [
            "KubeArmorPolicy/web-binding-swdeploymenttools",
            "KubeArmorPolicy/web-binding-unauthorizedsatokenaccess",
            "NetworkPolicy/web-binding-dnsmanipulation",
            "KubeArmorPolicy/web-binding-dnsmanipulation",
            "NetworkPolicy/web-binding-denyexternalnetworkaccess",
            "KubeArmorPolicy/web-binding-escapetohost-disallowchroot",
            "KubeArmorPolicy/web-binding-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/web-binding-escapetohost-swdeploymenttools",
            "KyvernoPolicy/web-binding-escapetohost",
            "KubeArmorPolicy/web-binding-preventexecutionfromtemporlogsfolders",
            "KyvernoPolicy/web-binding-mutateexisting",
            "KyvernoPolicy/web-binding-mutateoncreate",
        ]
    );
    let engines: Vec<Engine> = t.objects.iter().map(|g| g.engine).collect();
    assert_eq!(
        engines,
        [
            Engine::KubeArmor,
            Engine::KubeArmor,
            Engine::NetworkPolicy,
            Engine::KubeArmor,
            Engine::NetworkPolicy,
            Engine::KubeArmor,
            Engine::KubeArmor,
            Engine::KubeArmor,
            Engine::Kyverno,
            Engine::KubeArmor,
            Engine::Kyverno,
            Engine::Kyverno,
        ]
    );
}

/// Every intent through a cluster binding: what the per-namespace policy and the cluster
/// policy generate between them.
#[test]
fn entries_of_every_cluster_bound_intent() {
    let rules = vec![
        block("swDeploymentTools", "d"),
        block("unAuthorizedSaTokenAccess", "d"),
        block("dnsManipulation", "d"),
        block("denyExternalNetworkAccess", "d"),
        block("escapeToHost", "d"),
        block("preventExecutionFromTempOrLogsFolders", "d"),
        block("cocoWorkload", "d"),
        block("assessTLS", "d"),
        sandbox_rule(json!({"group": ["g"]})),
    ];
    let t = run_np(&csib_np(selector(), rules.clone()));
    no_problems(&t);
    assert_eq!(
        entries(&t),
        [
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-swdeploymenttools",
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-unauthorizedsatokenaccess",
            "NetworkPolicy/nimbus-ctlr-gen-web-csib-dnsmanipulation",
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-dnsmanipulation",
            "NetworkPolicy/nimbus-ctlr-gen-web-csib-denyexternalnetworkaccess",
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-escapetohost-disallowchroot",
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-escapetohost-disallowcapabilities",
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-escapetohost-swdeploymenttools",
            "KubeArmorPolicy/nimbus-ctlr-gen-web-csib-preventexecutionfromtemporlogsfolders",
            "RoleBinding/nimbus-ctlr-gen-web-csib-namespacesandbox-role-edit",
        ]
    );
    let t = run_cwnp(&cwnp(all_namespaces(), selector(), rules));
    no_problems(&t);
    assert_eq!(
        entries(&t),
        [
            "KyvernoClusterPolicy/web-csib-escapetohost",
            "KyvernoClusterPolicy/web-csib-cocoworkload",
            "nimbus-k8tls-env/CronJob/web-csib-assesstls",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Problems
// ---------------------------------------------------------------------------------------------

fn engines(enabled: &[Engine], installed: &[Engine]) -> EngineSet {
    EngineSet {
        enabled: enabled.iter().copied().collect(),
        installed: installed.iter().copied().collect(),
        ..EngineSet::default()
    }
}

fn problem(intent: &str, reason: &'static str, message: &str, blocking: bool) -> Problem {
    Problem {
        intent: intent.into(),
        reason,
        message: message.into(),
        blocking,
    }
}

#[test]
fn engine_not_installed_partly_and_wholly() {
    let set = engines(&Engine::ALL, &all_but(Engine::KubeArmor));
    let np = sib_np(
        selector(),
        vec![
            block("dnsManipulation", "d"),
            block("swDeploymentTools", "d"),
        ],
    );
    let t = run_np_with(&np, &Environment::default(), &set);
    assert_eq!(entries(&t), ["NetworkPolicy/web-binding-dnsmanipulation"]);
    assert_eq!(
        t.problems,
        vec![
            problem(
                "dnsManipulation",
                condition::REASON_ENGINE_NOT_INSTALLED,
                "intent `dnsManipulation` is enforced only in part: kubearmor (not installed)",
                false,
            ),
            problem(
                "swDeploymentTools",
                condition::REASON_ENGINE_NOT_INSTALLED,
                "intent `swDeploymentTools` is not enforced: kubearmor (not installed)",
                true,
            ),
        ]
    );
}

fn all_but(engine: Engine) -> Vec<Engine> {
    Engine::ALL.into_iter().filter(|e| *e != engine).collect()
}

#[test]
fn engine_disabled() {
    let set = engines(&all_but(Engine::Kyverno), &Engine::ALL);
    let np = sib_np(selector(), vec![block("cocoWorkload", "d")]);
    let t = run_np_with(&np, &Environment::default(), &set);
    assert!(t.objects.is_empty());
    assert_eq!(
        t.problems,
        vec![problem(
            "cocoWorkload",
            condition::REASON_ENGINE_DISABLED,
            "intent `cocoWorkload` is not enforced: kyverno (disabled)",
            true,
        )]
    );
}

/// The only missing engine is switched off, not uninstalled: the reason must say so, as the
/// message does.
#[test]
fn engine_disabled_partly() {
    let set = engines(&all_but(Engine::Kyverno), &Engine::ALL);
    let np = sib_np(selector(), vec![block("escapeToHost", "d")]);
    let t = run_np_with(&np, &Environment::default(), &set);
    assert!(t.objects.iter().all(|g| g.engine == Engine::KubeArmor));
    assert_eq!(t.objects.len(), 3);
    assert_eq!(
        t.problems,
        vec![problem(
            "escapeToHost",
            condition::REASON_ENGINE_DISABLED,
            "intent `escapeToHost` is enforced only in part: kyverno (disabled)",
            false,
        )]
    );
}

/// Switched off and not installed either: the message says disabled, so must the reason
/// (enabling the engine is what the user has to do first).
#[test]
fn engine_disabled_and_not_installed() {
    let t = run_np_with(
        &sib_np(selector(), vec![block("swDeploymentTools", "d")]),
        &Environment::default(),
        &engines(&[], &[]),
    );
    assert!(t.objects.is_empty());
    assert_eq!(
        t.problems,
        vec![problem(
            "swDeploymentTools",
            condition::REASON_ENGINE_DISABLED,
            "intent `swDeploymentTools` is not enforced: kubearmor (disabled)",
            true,
        )]
    );
}

#[test]
fn engine_disabled_and_not_installed_mixed() {
    // KubeArmor installed but switched off, Kyverno switched on but not installed.
    let set = engines(
        &[Engine::NetworkPolicy, Engine::Kyverno],
        &[Engine::NetworkPolicy, Engine::KubeArmor],
    );
    let t = run_np_with(
        &sib_np(selector(), vec![block("escapeToHost", "d")]),
        &Environment::default(),
        &set,
    );
    assert!(t.objects.is_empty());
    assert_eq!(
        t.problems,
        vec![problem(
            "escapeToHost",
            condition::REASON_ENGINE_DISABLED,
            "intent `escapeToHost` is not enforced: kubearmor (disabled), kyverno (not installed)",
            true,
        )]
    );
    // No engine at all: the cluster policy of the same intent.
    let t = translate(
        &PolicyInput::cluster(
            &cwnp(all_namespaces(), Value::Null, vec![block("assessTLS", "d")]),
            UID,
        ),
        &Environment::default(),
        &engines(&[Engine::K8tls], &[]),
    );
    assert!(t.objects.is_empty());
    assert_eq!(
        t.problems,
        vec![problem(
            "assessTLS",
            condition::REASON_ENGINE_NOT_INSTALLED,
            "intent `assessTLS` is not enforced: k8tls (not installed)",
            true,
        )]
    );
}

#[test]
fn unknown_intents_are_unsupported() {
    let np = sib_np(
        selector(),
        vec![
            block("pkgMgrExecution", "d"),
            block("dnsmanipulation", "d"),
            block("disallowChRoot", "d"),
            block("dnsManipulation", "d"),
        ],
    );
    let t = run_np(&np);
    assert_eq!(t.objects.len(), 2, "only the exact ID is translated");
    assert_eq!(
        t.problems,
        ["pkgMgrExecution", "dnsmanipulation", "disallowChRoot"]
            .map(|id| problem(
                id,
                condition::REASON_UNSUPPORTED_INTENT,
                &format!("intent `{id}` is not in the catalog"),
                true,
            ))
            .to_vec()
    );
    // The same through a cluster binding's policies.
    let t = run_cwnp(&cwnp(
        all_namespaces(),
        Value::Null,
        vec![block("ensureTLS", "d")],
    ));
    assert!(t.objects.is_empty());
    assert_eq!(
        t.problems,
        vec![problem(
            "ensureTLS",
            condition::REASON_UNSUPPORTED_INTENT,
            "intent `ensureTLS` is not in the catalog",
            true,
        )]
    );
}

#[test]
fn invalid_psa_level_falls_back_to_baseline() {
    let np = sib_np(
        selector(),
        vec![rule(
            "escapeToHost",
            "Block",
            Some("d"),
            json!({"psaLevel": ["strict"]}),
        )],
    );
    let t = run_np(&np);
    assert_eq!(
        t.problems,
        vec![problem(
            "escapeToHost",
            condition::REASON_INVALID_PARAMETER,
            "intent `escapeToHost`: param psaLevel: `strict`: must be one of baseline, restricted",
            false,
        )]
    );
    let kyverno = of(&t, Engine::Kyverno);
    assert_eq!(
        kyverno[0]["spec"]["rules"][0]["validate"]["podSecurity"]["level"],
        "baseline"
    );
}

#[test]
fn invalid_schedule_and_addresses() {
    let t = run_cwnp(&cwnp(
        all_namespaces(),
        Value::Null,
        vec![rule(
            "assessTLS",
            "Block",
            None,
            json!({"schedule": ["every day"], "external_addresses": ["nope", "a.io:443", "b.io:0"]}),
        )],
    ));
    assert_eq!(
        t.problems,
        vec![
            problem(
                "assessTLS",
                condition::REASON_INVALID_PARAMETER,
                "intent `assessTLS`: param external_addresses: `nope`: must be host:port",
                false,
            ),
            problem(
                "assessTLS",
                condition::REASON_INVALID_PARAMETER,
                "intent `assessTLS`: param external_addresses: `b.io:0`: port `0` is not 1-65535",
                false,
            ),
            problem(
                "assessTLS",
                condition::REASON_INVALID_PARAMETER,
                "intent `assessTLS`: param schedule: `every day`: needs 5 fields (minute hour \
                 day month weekday), found 2",
                false,
            ),
        ]
    );
    assert_objects(
        &all(&t),
        &[
            addresses_config_map("web-csib-assesstls-addresses", K8TLS_NS, "a.io:443 A"),
            cron_job(
                "web-csib-assesstls",
                K8TLS_NS,
                "@weekly",
                Some("web-csib-assesstls-addresses"),
            ),
        ],
    );
    // No valid address at all: the in-cluster scan, without a ConfigMap.
    let t = run_cwnp(&cwnp(
        all_namespaces(),
        Value::Null,
        vec![rule(
            "assessTLS",
            "Block",
            None,
            json!({"external_addresses": ["nope"]}),
        )],
    ));
    assert_eq!(t.problems.len(), 1);
    assert!(!t.problems[0].blocking);
    assert_objects(
        &all(&t),
        &[cron_job("web-csib-assesstls", K8TLS_NS, "@weekly", None)],
    );
}

#[test]
fn invalid_runtime_class_falls_back_to_kata_clh() {
    let t = run_cwnp(&cwnp(
        all_namespaces(),
        Value::Null,
        vec![rule(
            "cocoWorkload",
            "Block",
            Some("c"),
            json!({"runtimeClass": ["Kata QEMU"]}),
        )],
    ));
    assert_eq!(t.problems.len(), 1);
    assert_eq!(t.problems[0].reason, condition::REASON_INVALID_PARAMETER);
    assert!(!t.problems[0].blocking);
    assert_eq!(
        all(&t)[0]["spec"]["rules"][0]["mutate"]["patchStrategicMerge"],
        runtime_patch("kata-clh")
    );
}

#[test]
fn unknown_and_repeated_params_do_not_block() {
    let np = sib_np(
        selector(),
        vec![
            rule("dnsManipulation", "Block", None, json!({"foo": ["1"]})),
            rule(
                "escapeToHost",
                "Block",
                None,
                json!({"psaLevel": ["restricted", "baseline"], "level": ["x"]}),
            ),
        ],
    );
    let t = run_np(&np);
    assert_eq!(
        t.problems,
        vec![
            problem(
                "dnsManipulation",
                condition::REASON_INVALID_PARAMETER,
                "intent `dnsManipulation`: param foo: dnsManipulation takes no parameters",
                false,
            ),
            problem(
                "escapeToHost",
                condition::REASON_INVALID_PARAMETER,
                "intent `escapeToHost`: param level: unknown parameter (known: psaLevel)",
                false,
            ),
            problem(
                "escapeToHost",
                condition::REASON_INVALID_PARAMETER,
                "intent `escapeToHost`: param psaLevel: takes one value; only the first is used",
                false,
            ),
        ]
    );
    assert_eq!(
        of(&t, Engine::Kyverno)[0]["spec"]["rules"][0]["validate"]["podSecurity"]["level"],
        "restricted"
    );
}

#[test]
fn every_catalog_intent_is_clean_with_every_engine() {
    // Valid rules of every intent, through both kinds of binding: no problem at all.
    let rules = vec![
        block("swDeploymentTools", "d"),
        block("unAuthorizedSaTokenAccess", "d"),
        block("dnsManipulation", "d"),
        block("denyExternalNetworkAccess", "d"),
        block("escapeToHost", "d"),
        block("preventExecutionFromTempOrLogsFolders", "d"),
        block("cocoWorkload", "d"),
        vp_rule(),
    ];
    no_problems(&run_np_with(
        &sib_np(selector(), rules.clone()),
        &vp_env(),
        &EngineSet::all(),
    ));
    // Sandboxes and TLS scans only through cluster bindings.
    let mut cluster_rules = rules;
    cluster_rules.push(sandbox_rule(json!({"group": ["g"]})));
    cluster_rules.push(block("assessTLS", "d"));
    no_problems(&run_np_with(
        &csib_np(selector(), cluster_rules.clone()),
        &vp_env(),
        &EngineSet::all(),
    ));
    no_problems(&run_cwnp_with(
        &cwnp(all_namespaces(), selector(), cluster_rules),
        &vp_env(),
    ));
}

#[test]
fn no_objects_for_inactive_engines() {
    let rules = vec![
        block("dnsManipulation", "d"),
        block("escapeToHost", "d"),
        block("cocoWorkload", "d"),
        sandbox_rule(json!({"group": ["g"]})),
    ];
    for engine in Engine::ALL {
        let others: Vec<Engine> = Engine::ALL.into_iter().filter(|e| *e != engine).collect();
        for set in [
            engines(&others, &Engine::ALL),
            engines(&Engine::ALL, &others),
        ] {
            let t = run_np_with(
                &sib_np(selector(), rules.clone()),
                &Environment::default(),
                &set,
            );
            assert!(
                t.objects.iter().all(|g| g.engine != engine),
                "{engine} generated objects while inactive"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The catalog and the translators agree
// ---------------------------------------------------------------------------------------------

/// Every (intent, engine, binding origin) the catalog lists yields objects of that engine, so a
/// catalog entry whose engine has no translation for it cannot pass for enforced.
#[test]
fn every_catalog_entry_has_a_translation() {
    use nimbus_core::catalog::Origin;
    let env = vp_env();
    for (engine, enforced) in Engine::ALL
        .into_iter()
        .flat_map(|e| e.spec().enforces.iter().map(move |enforced| (e, enforced)))
    {
        let params = match enforced.intent {
            "virtualPatch" => json!({"cveList": ["CVE-2024-4439"]}),
            "namespaceSandbox" => json!({"group": ["g"], "clusterRole": ["view"]}),
            _ => json!({}),
        };
        let rules = vec![rule(enforced.intent, "Block", Some("d"), params)];
        {
            let only = BTreeSet::from([engine]);
            let engines = EngineSet {
                enabled: only.clone(),
                installed: only,
                external: BTreeSet::new(),
            };
            for origin in enforced.origins {
                let t = match origin {
                    Origin::Binding => {
                        run_np_with(&sib_np(selector(), rules.clone()), &env, &engines)
                    }
                    Origin::ClusterBindingNamespace => {
                        run_np_with(&csib_np(selector(), rules.clone()), &env, &engines)
                    }
                    Origin::Cluster => translate(
                        &PolicyInput::cluster(
                            &cwnp(json!({"matchNames": ["*"]}), selector(), rules.clone()),
                            UID,
                        ),
                        &env,
                        &engines,
                    ),
                };
                assert!(
                    !of(&t, engine).is_empty(),
                    "{} through {engine} from {origin:?} generated nothing: {:?}",
                    enforced.intent,
                    t.problems
                );
            }
        }
    }
}
