//! Property tests of the engine translators: on arbitrary policies (valid and garbage), the
//! translation never panics, is deterministic, and every generated object is one the API
//! server accepts and the operator can own: a valid name, the policy as its only controller,
//! the managed-by annotation and label, and no two objects with the same identity.

// Helpers outside `#[test]` functions panic on broken fixtures too (clippy.toml only covers
// the test functions themselves).
#![allow(clippy::unwrap_used)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, OwnerReference,
};
use kube::ResourceExt;
use nimbus_api::{
    ALLOW_SENSITIVE_ANNOTATION, ClusterNimbusPolicy, ClusterNimbusPolicySpec, NamespaceSelector,
    NimbusPolicy, NimbusPolicySpec, NimbusRule, NodeSelector, Rule,
};
use nimbus_core::catalog::{self, Engine};
use nimbus_core::engines::{
    CRON_JOB, EngineSet, Environment, PolicyInput, Translation, VirtualPatches, translate,
    virtual_patch,
};
use proptest::collection::{btree_map, btree_set, vec};
use proptest::prelude::*;
use proptest::test_runner::Config;
use std::collections::{BTreeMap, BTreeSet};

const POLICY_UID: &str = "0b5f8e0c-policy-uid";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

/// How the policy came to be.
#[derive(Debug, Clone, Copy)]
enum Origin {
    /// NimbusPolicy of a SecurityIntentBinding.
    Binding,
    /// Per-namespace NimbusPolicy of a ClusterSecurityIntentBinding.
    ClusterBindingNamespace,
    /// ClusterNimbusPolicy.
    Cluster,
}

#[derive(Debug, Clone)]
struct Input {
    origin: Origin,
    name: String,
    namespace: String,
    labels: BTreeMap<String, String>,
    selector: LabelSelector,
    /// ClusterNimbusPolicy only; `None` leaves `workloadSelector` out.
    workload_selector: Option<LabelSelector>,
    ns_selector: Option<NamespaceSelector>,
    rules: Vec<NimbusRule>,
    env: Environment,
    engines: EngineSet,
    /// The policy's allow-sensitive annotation.
    allow_sensitive: Option<String>,
}

enum Policy {
    Namespaced(NimbusPolicy),
    Cluster(ClusterNimbusPolicy),
}

impl Input {
    fn policy(&self) -> Policy {
        let owner = |kind: &str| OwnerReference {
            api_version: "intent.security.nimbus.com/v1alpha1".into(),
            kind: kind.into(),
            name: self.name.clone(),
            uid: "binding-uid".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        match self.origin {
            Origin::Binding | Origin::ClusterBindingNamespace => {
                let mut np = NimbusPolicy::new(
                    &self.name,
                    NimbusPolicySpec {
                        selector: self.selector.clone(),
                        rules: self.rules.clone(),
                    },
                );
                np.metadata.namespace = Some(self.namespace.clone());
                np.metadata.labels = Some(self.labels.clone());
                np.metadata.annotations = self.annotations();
                np.metadata.owner_references = Some(vec![match self.origin {
                    Origin::Binding => owner("SecurityIntentBinding"),
                    _ => owner("ClusterSecurityIntentBinding"),
                }]);
                Policy::Namespaced(np)
            }
            Origin::Cluster => {
                let mut cwnp = ClusterNimbusPolicy::new(
                    &self.name,
                    ClusterNimbusPolicySpec {
                        node_selector: NodeSelector::default(),
                        ns_selector: self.ns_selector.clone(),
                        workload_selector: self.workload_selector.clone(),
                        rules: self.rules.clone(),
                    },
                );
                cwnp.metadata.labels = Some(self.labels.clone());
                cwnp.metadata.annotations = self.annotations();
                cwnp.metadata.owner_references = Some(vec![owner("ClusterSecurityIntentBinding")]);
                Policy::Cluster(cwnp)
            }
        }
    }
}

impl Input {
    fn annotations(&self) -> Option<BTreeMap<String, String>> {
        self.allow_sensitive
            .clone()
            .map(|v| BTreeMap::from([(ALLOW_SENSITIVE_ANNOTATION.to_owned(), v)]))
    }
}

fn input_of(policy: &Policy) -> PolicyInput<'_> {
    match policy {
        Policy::Namespaced(np) => PolicyInput::namespaced(np, POLICY_UID),
        Policy::Cluster(cwnp) => PolicyInput::cluster(cwnp, POLICY_UID),
    }
}

fn run(input: &Input) -> (Translation, OwnerReference) {
    let policy = input.policy();
    let policy_input = input_of(&policy);
    let translation = translate(&policy_input, &input.env, &input.engines);
    (translation, policy_input.owner.clone())
}

/// RFC 1123 subdomain names, short ones mostly, up to the 253-character limit.
fn object_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?",
        1 => "[a-z0-9]([a-z0-9-]{40,100}[a-z0-9])?",
        1 => "[a-z0-9]([a-z0-9-]{200,251}[a-z0-9])?",
    ]
}

/// RFC 1123 labels (namespaces).
fn dns_label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
}

/// Arbitrary text, valid or not.
fn garbage() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 ._/:@*{}-]{0,24}",
        any::<String>().prop_map(|s| s.chars().take(40).collect()),
    ]
}

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop_oneof![
        3 => btree_map("[a-z]([a-z0-9./-]{0,15}[a-z0-9])?", "[A-Za-z0-9._-]{0,12}", 0..4),
        1 => btree_map(garbage(), garbage(), 0..3),
    ]
}

fn selector() -> impl Strategy<Value = LabelSelector> {
    let expression = (
        "[a-z]{1,8}",
        prop_oneof![
            Just("In".to_owned()),
            Just("NotIn".to_owned()),
            Just("Exists".to_owned()),
            Just("DoesNotExist".to_owned()),
            garbage(),
        ],
        proptest::option::of(vec("[a-z0-9]{0,6}", 0..3)),
    )
        .prop_map(|(key, operator, values)| LabelSelectorRequirement {
            key,
            operator,
            values,
        });
    (
        proptest::option::of(labels()),
        prop_oneof![
            4 => Just(None),
            1 => proptest::option::of(vec(expression, 0..3)),
        ],
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector {
            match_labels,
            match_expressions,
        })
}

fn namespace_selector() -> impl Strategy<Value = Option<NamespaceSelector>> {
    let names = || vec(prop_oneof![dns_label(), Just("*".to_owned())], 0..4);
    prop_oneof![
        // The valid shapes.
        Just(Some(NamespaceSelector {
            match_names: Some(vec!["*".into()]),
            exclude_names: None,
        })),
        vec(dns_label(), 1..4).prop_map(|names| Some(NamespaceSelector {
            match_names: Some(names),
            exclude_names: None,
        })),
        vec(dns_label(), 1..4).prop_map(|names| Some(NamespaceSelector {
            match_names: Some(vec!["*".into()]),
            exclude_names: Some(names),
        })),
        vec(dns_label(), 1..4).prop_map(|names| Some(NamespaceSelector {
            match_names: None,
            exclude_names: Some(names),
        })),
        // Anything (objects may predate the schema).
        Just(None),
        (proptest::option::of(names()), proptest::option::of(names())).prop_map(
            |(match_names, exclude_names)| Some(NamespaceSelector {
                match_names,
                exclude_names,
            })
        ),
    ]
}

fn intent_id() -> impl Strategy<Value = String> {
    let ids: Vec<String> = catalog::INTENTS.iter().map(|i| i.id.to_owned()).collect();
    prop_oneof![
        6 => proptest::sample::select(ids),
        1 => garbage(),
        1 => Just("dnsmanipulation".to_owned()),
    ]
}

/// Values for a parameter: good ones for the catalog's parameters, and garbage.
fn param_value() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(vec![
            "baseline",
            "restricted",
            "kata-clh",
            "kata-qemu",
            "edit",
            "view",
            "2-edit",
            "system.custom-role",
            "@weekly",
            "@daily",
            "0 3 * * MON",
            "*/5 * * * *",
            "google.com:443",
            "10.0.0.1:8443",
            "[::1]:443",
            "a.io:0",
            "CVE-2024-4439",
            "CVE-2099-0001",
            "team-{namespace}",
            "{namespace}",
            "",
            " ",
        ])
        .prop_map(str::to_owned),
        garbage(),
    ]
}

fn params() -> impl Strategy<Value = Option<BTreeMap<String, Vec<String>>>> {
    let key = prop_oneof![
        6 => proptest::sample::select(vec![
            "psaLevel",
            "runtimeClass",
            "schedule",
            "external_addresses",
            "cveList",
            "group",
            "clusterRole",
        ])
        .prop_map(str::to_owned),
        1 => garbage(),
    ];
    proptest::option::of(btree_map(key, vec(param_value(), 0..4), 0..4))
}

fn rule() -> impl Strategy<Value = NimbusRule> {
    (
        intent_id(),
        prop_oneof![
            Just("Block".to_owned()),
            Just("Audit".to_owned()),
            Just(String::new()),
            garbage()
        ],
        proptest::option::of(garbage()),
        params(),
        proptest::option::of(garbage()),
    )
        .prop_map(|(id, action, description, params, type_)| NimbusRule {
            id,
            type_,
            description,
            rule: Rule { action, params },
        })
}

/// A small virtual-patch database (the format of Nimbus's vp.json).
fn database() -> VirtualPatches {
    let json = serde_json::json!([
        {"image": "nginx:latest", "cves": [{"cve": "CVE-2024-4439", "virtual_patch": [
            {"karmor": {"apiVersion": "security.kubearmor.com/v1", "kind": "KubeArmorPolicy",
                        "metadata": {"name": "block-apt"},
                        "spec": {"process": {"matchPaths": [{"path": "/usr/bin/apt"}]}, "action": "Block"}}},
            {"kyverno": {"metadata": {"name": "no-latest"},
                         "spec": {"rules": [{"name": "r", "validate": {}}]}},
             "netpol": {"metadata": {"name": "no-egress"}, "spec": {"policyTypes": ["Egress"]}}},
        ]}]},
        {"image": "redis:7", "cves": [{"cve": "CVE-2024-4439", "virtual_patch": [
            {"netpol": {"metadata": {"name": "redis-no-egress"}, "spec": {}}},
            {"kyverno": {"metadata": {"name": "broken"}, "spec": {}}},
        ]}]},
    ]);
    let data = BTreeMap::from([(virtual_patch::DATABASE_KEY.to_owned(), json.to_string())]);
    virtual_patch::from_config_map("nimbus/vp-db", Some(&data))
}

fn environment() -> impl Strategy<Value = Environment> {
    (
        btree_set(
            prop_oneof![
                (0u8..=255, 0u8..=255).prop_map(|(a, b)| format!("10.{a}.{b}.0/24")),
                Just("fd00:10:244::/64".to_owned()),
            ],
            0..4,
        ),
        prop_oneof![3 => Just("nimbus-k8tls-env".to_owned()), 1 => dns_label()],
        (
            prop_oneof![4 => Just(true), 1 => Just(false)],
            prop_oneof![
                3 => Just(BTreeSet::from(["edit".to_owned(), "view".to_owned()])),
                1 => btree_set(prop_oneof![Just("edit".to_owned()), garbage()], 0..3),
            ],
        ),
        prop_oneof![
            2 => Just(database()),
            1 => Just(VirtualPatches::NotConfigured),
            1 => Just(VirtualPatches::Invalid("ConfigMap nimbus/vp-db not found".into())),
        ],
    )
        .prop_map(
            |(
                node_pod_cidrs,
                k8tls_namespace,
                (k8tls_namespace_exists, sandbox_cluster_roles),
                virtual_patches,
            )| {
                Environment {
                    node_pod_cidrs,
                    k8tls_namespace,
                    k8tls_namespace_exists,
                    virtual_patches,
                    sandbox_cluster_roles,
                    ..Environment::default()
                }
            },
        )
}

fn engine_set() -> impl Strategy<Value = EngineSet> {
    let subset = || {
        proptest::sample::subsequence(Engine::ALL.to_vec(), 0..=Engine::ALL.len())
            .prop_map(|e| e.into_iter().collect::<BTreeSet<_>>())
    };
    prop_oneof![
        3 => Just(EngineSet::all()),
        1 => (subset(), subset()).prop_map(|(enabled, installed)| EngineSet { enabled, installed, ..EngineSet::default() }),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    (
        prop_oneof![
            Just(Origin::Binding),
            Just(Origin::ClusterBindingNamespace),
            Just(Origin::Cluster),
        ],
        object_name(),
        dns_label(),
        labels(),
        selector(),
        proptest::option::of(selector()),
        namespace_selector(),
        vec(rule(), 0..7),
        environment(),
        (
            engine_set(),
            proptest::option::of(prop_oneof![
                Just("namespaceSandbox,assessTLS".to_owned()),
                Just("assessTLS".to_owned()),
                garbage(),
            ]),
        ),
    )
        .prop_map(
            |(
                origin,
                name,
                namespace,
                labels,
                selector,
                workload_selector,
                ns_selector,
                rules,
                env,
                (engines, allow_sensitive),
            )| Input {
                origin,
                name,
                namespace,
                labels,
                selector,
                workload_selector,
                ns_selector,
                rules,
                env,
                engines,
                allow_sensitive,
            },
        )
}

/// Policies that exercise the translators: catalog intents with valid parameters, every
/// engine on, a usable database. Many rules repeat an ID.
fn translatable_input() -> impl Strategy<Value = Input> {
    let valid_rule = proptest::sample::select(vec![
        ("swDeploymentTools", vec![]),
        ("unAuthorizedSaTokenAccess", vec![]),
        ("dnsManipulation", vec![]),
        ("denyExternalNetworkAccess", vec![]),
        ("escapeToHost", vec![("psaLevel", "restricted")]),
        ("preventExecutionFromTempOrLogsFolders", vec![]),
        ("cocoWorkload", vec![("runtimeClass", "kata-qemu")]),
        ("cocoWorkload", vec![]),
        ("assessTLS", vec![("external_addresses", "google.com:443")]),
        ("assessTLS", vec![]),
        ("virtualPatch", vec![("cveList", "CVE-2024-4439")]),
        ("namespaceSandbox", vec![("group", "team-{namespace}")]),
        (
            "namespaceSandbox",
            vec![("group", "ops"), ("clusterRole", "view")],
        ),
        (
            "namespaceSandbox",
            vec![("group", "ops"), ("clusterRole", "2-view")],
        ),
    ])
    .prop_map(|(id, params)| NimbusRule {
        id: id.into(),
        type_: None,
        description: Some(format!("{id} description")),
        rule: Rule {
            action: "Block".into(),
            params: Some(
                params
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), vec![v.to_owned()]))
                    .collect(),
            ),
        },
    });
    (input(), vec(valid_rule, 1..8)).prop_map(|(mut input, rules)| {
        input.rules = rules;
        input.engines = EngineSet::all();
        input.env.k8tls_namespace_exists = true;
        input.env.virtual_patches = database();
        input.allow_sensitive = Some("namespaceSandbox,assessTLS".into());
        input.selector.match_expressions = None;
        input
    })
}

fn any_input() -> impl Strategy<Value = Input> {
    prop_oneof![input(), translatable_input()]
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// RFC 1123 subdomain as Kubernetes validates object names: ≤ 253 characters, dot-separated
/// parts of [a-z0-9-] that start and end alphanumeric (parts may exceed 63 characters).
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// 256 cases (`PROPTEST_CASES` overrides), no regression files.
fn config() -> Config {
    let default = Config::default();
    Config {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            default.cases
        } else {
            256
        },
        failure_persistence: None,
        ..default
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn names_are_valid(input in any_input()) {
        let (t, _) = run(&input);
        for g in &t.objects {
            let name = g.object.name_any();
            prop_assert!(is_dns_subdomain(&name), "invalid {} name {name:?}", g.kind.kind);
            if *g.kind == CRON_JOB {
                prop_assert!(name.len() <= 52, "CronJob name too long: {name} ({})", name.len());
            }
            if let Some(ns) = g.object.namespace() {
                prop_assert!(is_dns_subdomain(&ns) && ns.len() <= 63, "invalid namespace {ns:?}");
            }
            prop_assert_eq!(
                g.object.namespace().is_some(),
                g.kind.namespaced,
                "{} {} namespace", g.kind.kind, name
            );
        }
    }

    #[test]
    fn objects_are_owned_by_the_policy_and_marked(input in any_input()) {
        let (t, owner) = run(&input);
        for g in &t.objects {
            let name = g.object.name_any();
            let refs = g.object.owner_references();
            prop_assert_eq!(refs, std::slice::from_ref(&owner), "{} owners", name);
            prop_assert_eq!(
                refs.iter().filter(|r| r.controller == Some(true)).count(), 1, "{}", name
            );
            let manager = g.engine.manager();
            prop_assert_eq!(
                g.object.annotations().get(MANAGED_BY).map(String::as_str),
                Some(manager),
                "{} annotation", name
            );
            prop_assert_eq!(
                g.object.labels().get(MANAGED_BY).map(String::as_str),
                Some(manager),
                "{} label", name
            );
            let types = g.object.types.as_ref();
            prop_assert_eq!(types.map(|t| t.kind.as_str()), Some(g.kind.kind));
            prop_assert_eq!(
                types.map(|t| t.api_version.clone()),
                Some(g.kind.api_version())
            );
        }
    }

    #[test]
    fn objects_are_unique(input in any_input()) {
        let (t, _) = run(&input);
        let mut seen = BTreeSet::new();
        for g in &t.objects {
            let key = (g.kind.api_version(), g.kind.kind, g.object.namespace(), g.object.name_any());
            prop_assert!(seen.insert(key.clone()), "generated twice: {key:?}");
        }
    }

    #[test]
    fn translation_is_deterministic(input in any_input()) {
        let (first, _) = run(&input);
        let (second, _) = run(&input.clone());
        prop_assert_eq!(&first, &second);
        let json = |t: &Translation| -> Vec<serde_json::Value> {
            t.objects.iter().map(|g| serde_json::to_value(&g.object).unwrap()).collect()
        };
        prop_assert_eq!(json(&first), json(&second));
    }

    #[test]
    fn only_active_engines_act_and_problems_name_rules(input in any_input()) {
        let (t, _) = run(&input);
        for g in &t.objects {
            prop_assert!(input.engines.active(g.engine), "{} is not active", g.engine);
        }
        let ids: BTreeSet<&str> = input.rules.iter().map(|r| r.id.as_str()).collect();
        for p in &t.problems {
            prop_assert!(ids.contains(p.intent.as_str()), "problem for unknown rule {p:?}");
            prop_assert!(!p.reason.is_empty() && !p.message.is_empty());
        }
        // An intent that is not in the catalog yields nothing but a problem.
        if input.rules.iter().all(|r| catalog::intent(&r.id).is_none()) {
            prop_assert!(t.objects.is_empty());
            prop_assert_eq!(t.problems.len(), input.rules.len());
        }
    }

    /// What a sandbox grants is bounded by configuration: never a ClusterRole outside the
    /// allowlist, never a `system:` or empty group; and nothing sensitive runs without the
    /// author's opt-in.
    #[test]
    fn sensitive_intents_stay_within_bounds(input in any_input()) {
        let (t, _) = run(&input);
        let allowed = input.annotations().map(|a| catalog::allowed_sensitive(&a)).unwrap_or_default();
        for g in &t.objects {
            if g.engine == Engine::Rbac {
                prop_assert!(allowed.contains("namespaceSandbox"), "{g:?}");
                let role = g.object.data["roleRef"]["name"].as_str().unwrap_or_default();
                prop_assert!(input.env.sandbox_cluster_roles.contains(role), "role {role}");
                for subject in g.object.data["subjects"].as_array().into_iter().flatten() {
                    let name = subject["name"].as_str().unwrap_or_default();
                    prop_assert!(
                        !name.trim().is_empty() && !name.trim_start().to_ascii_lowercase().starts_with("system:"),
                        "group {name:?}"
                    );
                }
            }
            if g.engine == Engine::K8tls {
                prop_assert!(allowed.contains("assessTLS"), "{g:?}");
            }
        }
    }
}
