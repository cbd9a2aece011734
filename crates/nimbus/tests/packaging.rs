//! The Helm chart (`charts/nimbus`), the kustomize configuration (`config/`) and the image
//! contract, checked with the real helm and kustomize against the real control plane: lint, every
//! rendered object accepted by the apiserver, exactly the RBAC the operator needs, and the two
//! packagings equal. `packaging_rbac.rs` runs the operator under that RBAC.
//!
//! helm and kustomize come from `NIMBUS_TOOLS_DIR`, or are built by `hack/build-tools.sh`
//! (cached under ~/.cache/nimbus-rs/tools); a missing tool fails the tests with the reason.

mod common;

use common::{
    RELEASE, RELEASE_NAMESPACE, apply_rendered, container_flag as flag, create_release_namespace,
    helm_template, kustomize_build, object_kind as kind, object_name as name, rendered as only,
    run_tool, workspace_root,
};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// Values sets checked beyond the defaults: HA, and engines switched off (which changes the
/// ClusterRole and the flags).
const HA: &[&str] = &["replicaCount=3", "metrics.serviceMonitor.enabled=false"];
const ENGINES_OFF: &[&str] = &[
    "engines.kyverno.enabled=false",
    "engines.k8tls.enabled=false",
    "engines.rbac.enabled=false",
    "engines.kyverno.virtualPatchDb=kube-public/nimbus-virtual-patches",
];

// ---------------------------------------------------------------------------------------------
// Looking at rendered objects

fn find<'a>(objects: &'a [Value], kind_: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| kind(o) == kind_).collect()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

fn args(deployment: &Value) -> Vec<&str> {
    strings(&container(deployment)["args"])
}

/// One permission: (apiGroup, resource, verb, resourceName).
type Grant = (String, String, String, Option<String>);

/// What an RBAC rule list grants, one entry per combination, so that equal permissions compare
/// equal however they are grouped into rules.
fn grants(rules: &Value) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for rule in rules.as_array().expect("rules") {
        let names = strings(&rule["resourceNames"]);
        let names: Vec<Option<&str>> = if names.is_empty() {
            vec![None]
        } else {
            names.into_iter().map(Some).collect()
        };
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    for n in &names {
                        out.insert((
                            group.to_owned(),
                            resource.to_owned(),
                            verb.to_owned(),
                            n.map(str::to_owned),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// A rule as written in the tables below: (apiGroup, resources, verbs, resourceNames).
type Rule<'a> = (&'a str, &'a [&'a str], &'a [&'a str], &'a [&'a str]);

fn grant_set(rules: &[Rule]) -> BTreeSet<Grant> {
    let rules: Vec<Value> = rules
        .iter()
        .map(|(group, resources, verbs, names)| {
            json!({
                "apiGroups": [group], "resources": resources, "verbs": verbs,
                "resourceNames": names,
            })
        })
        .collect();
    grants(&Value::Array(rules))
}

/// Fails with what is missing and what is extra, rather than two long sets.
fn assert_grants(actual: &BTreeSet<Grant>, expected: &BTreeSet<Grant>, what: &str) {
    let missing: Vec<_> = expected.difference(actual).collect();
    let extra: Vec<_> = actual.difference(expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: missing {missing:#?}\nnot expected {extra:#?}"
    );
}

const OWN: &[&str] = &[
    "get", "list", "watch", "create", "patch", "update", "delete",
];
const READ: &[&str] = &["get", "list", "watch"];
const STATUS: &[&str] = &["get", "patch", "update"];
const EMIT: &[&str] = &["create", "patch"];
const INTENTS: &str = "intent.security.nimbus.com";

/// Exactly the calls the operator makes with every engine on (see config/rbac/role.yaml).
fn expected_cluster_role() -> BTreeSet<Grant> {
    grant_set(&[
        (
            INTENTS,
            &[
                "securityintents",
                "securityintentbindings",
                "clustersecurityintentbindings",
            ],
            READ,
            &[],
        ),
        (
            INTENTS,
            &["nimbuspolicies", "clusternimbuspolicies"],
            OWN,
            &[],
        ),
        (
            INTENTS,
            &[
                "securityintents/status",
                "securityintentbindings/status",
                "clustersecurityintentbindings/status",
                "nimbuspolicies/status",
                "clusternimbuspolicies/status",
            ],
            STATUS,
            &[],
        ),
        (
            "exceptions.security.nimbus.com",
            &[
                "securityintentexceptions",
                "clustersecurityintentexceptions",
            ],
            READ,
            &[],
        ),
        (
            "exceptions.security.nimbus.com",
            &[
                "securityintentexceptions/status",
                "clustersecurityintentexceptions/status",
            ],
            STATUS,
            &[],
        ),
        ("", &["namespaces"], READ, &[]),
        ("", &["nodes"], &["list", "watch"], &[]),
        (
            "apiextensions.k8s.io",
            &["customresourcedefinitions"],
            READ,
            &[],
        ),
        ("", &["events"], EMIT, &[]),
        ("events.k8s.io", &["events"], EMIT, &[]),
        // Open Cluster Management's Policies that delivered intents or bindings, watched
        // (tests/fleet.rs).
        (
            "policy.open-cluster-management.io",
            &["policies"],
            &["list", "watch"],
            &[],
        ),
        ("networking.k8s.io", &["networkpolicies"], OWN, &[]),
        (
            "policy.networking.k8s.io",
            &["clusternetworkpolicies"],
            OWN,
            &[],
        ),
        ("security.kubearmor.com", &["kubearmorpolicies"], OWN, &[]),
        (
            "kyverno.io",
            &["policies", "clusterpolicies", "policyexceptions"],
            OWN,
            &[],
        ),
        (
            "policies.kyverno.io",
            &[
                "namespacedvalidatingpolicies",
                "validatingpolicies",
                "namespacedmutatingpolicies",
                "mutatingpolicies",
                "namespacedgeneratingpolicies",
                "policyexceptions",
            ],
            OWN,
            &[],
        ),
        ("rbac.authorization.k8s.io", &["rolebindings"], OWN, &[]),
        (
            "admissionregistration.k8s.io",
            &[
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
                "mutatingadmissionpolicies",
                "mutatingadmissionpolicybindings",
            ],
            OWN,
            &[],
        ),
        (
            "rbac.authorization.k8s.io",
            &["clusterroles"],
            &["bind"],
            &["edit", "view"],
        ),
    ])
}

/// What the k8tls engine reads and writes, granted only in its namespace.
fn expected_k8tls_role() -> BTreeSet<Grant> {
    grant_set(&[
        ("batch", &["cronjobs"], OWN, &[]),
        ("", &["configmaps"], OWN, &[]),
    ])
}

fn expected_leader_election_role(lease: &str) -> BTreeSet<Grant> {
    grant_set(&[
        ("coordination.k8s.io", &["leases"], &["create"], &[]),
        (
            "coordination.k8s.io",
            &["leases"],
            &["get", "update", "patch"],
            &[lease],
        ),
        ("", &["events"], EMIT, &[]),
        ("events.k8s.io", &["events"], EMIT, &[]),
    ])
}

/// What every render must satisfy, whatever the values.
fn assert_render_invariants(objects: &[Value], what: &str) {
    for role in objects
        .iter()
        .filter(|o| matches!(kind(o), "Role" | "ClusterRole"))
    {
        for rule in role["rules"].as_array().expect("rules") {
            for field in [
                "apiGroups",
                "resources",
                "verbs",
                "resourceNames",
                "nonResourceURLs",
            ] {
                assert!(
                    !strings(&rule[field]).iter().any(|s| s.contains('*')),
                    "{what}: {} {} has a wildcard in {field}: {rule}",
                    kind(role),
                    name(role)
                );
            }
        }
    }

    let deployment = only(objects, "Deployment", RELEASE);
    let replicas = deployment["spec"]["replicas"].as_i64().expect("replicas");
    let pdbs = find(objects, "PodDisruptionBudget");
    assert_eq!(
        pdbs.len(),
        usize::from(replicas > 1),
        "{what}: a PodDisruptionBudget exactly when replicas > 1 (replicas: {replicas})"
    );

    // Pod Security Standards "restricted", and the image's nonroot user.
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{what}");
    assert_eq!(pod["securityContext"]["runAsUser"], 65532, "{what}");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "{what}"
    );
    let c = container(deployment);
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{what}");
    assert!(c["resources"]["requests"].is_object(), "{what}: resources");

    // The operator's interface: subcommand, ports, probes, identity from the downward API.
    assert_eq!(args(deployment)[0], "run", "{what}");
    assert_eq!(flag(deployment, "--health-addr"), Some("0.0.0.0:8081"));
    assert_eq!(flag(deployment, "--metrics-addr"), Some("0.0.0.0:8080"));
    let ports: BTreeMap<&str, i64> = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("port name"),
                p["containerPort"].as_i64().expect("port"),
            )
        })
        .collect();
    let mut expected_ports = BTreeMap::from([("health", 8081), ("metrics", 8080)]);
    if let Some(posture) = flag(deployment, "--posture-addr") {
        assert_eq!(posture, "0.0.0.0:8443", "{what}");
        expected_ports.insert("posture", 8443);
    }
    assert_eq!(ports, expected_ports, "{what}");
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "health"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "health"})
    );
    for (var, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let env = c["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == var)
            .unwrap_or_else(|| panic!("{what}: no {var}"));
        assert_eq!(env["valueFrom"]["fieldRef"]["fieldPath"], field, "{what}");
    }
    let service = only(objects, "Service", "nimbus-metrics");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "metrics");
}

// ---------------------------------------------------------------------------------------------
// The tests

#[test]
fn helm_lint_passes() {
    for set in [
        &[][..],
        HA,
        ENGINES_OFF,
        &["metrics.serviceMonitor.enabled=true"],
    ] {
        let mut args = vec!["lint", "--strict", "charts/nimbus"];
        for value in set {
            args.extend(["--set", value]);
        }
        run_tool("helm", &args);
    }
}

#[test]
fn replicas_without_leader_election_are_refused() {
    let output = std::process::Command::new(common::tools_dir().join("helm"))
        .args(["template", RELEASE, "charts/nimbus"])
        .args([
            "--set",
            "replicaCount=2",
            "--set",
            "ha.leaderElection.enabled=false",
        ])
        .current_dir(workspace_root())
        .output()
        .expect("running helm");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("needs ha.leaderElection.enabled"),
        "{stderr}"
    );
}

/// The book's (docs/src/security-model.md) "the chart refuses to install on < 1.30 unless `sensitiveIntentsAdmission=false`"
/// and "on an older cluster [than 1.36] unless `intentAuthorAdmission=false`" (and
/// `exceptionAdmission=false`, docs/src/exceptions.md): `helm template --kube-version` as
/// `helm install` sees the cluster's version.
#[test]
fn the_chart_refuses_kubernetes_too_old_for_its_admission_policies_unless_switched_off() {
    let render = |version: &str, set: &[&str]| {
        let mut command = std::process::Command::new(common::tools_dir().join("helm"));
        command
            .args([
                "template",
                RELEASE,
                "charts/nimbus",
                "--kube-version",
                version,
            ])
            .current_dir(workspace_root());
        for value in set {
            command.args(["--set", value]);
        }
        command.output().expect("running helm")
    };
    // The intent-author and exception policies need 1.36 and are switched off here: they are
    // tested below.
    const NO_AUTHOR: &str = "intentAuthorAdmission=false";
    const NO_EXCEPTION: &str = "exceptionAdmission=false";
    let refused = render("1.29.9", &[NO_AUTHOR, NO_EXCEPTION]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && stderr.contains("sensitiveIntentsAdmission needs ValidatingAdmissionPolicy v1"),
        "on 1.29: {stderr}"
    );
    let off = render(
        "1.29.9",
        &["sensitiveIntentsAdmission=false", NO_AUTHOR, NO_EXCEPTION],
    );
    let stdout = String::from_utf8_lossy(&off.stdout);
    assert!(
        off.status.success(),
        "on 1.29 with the switch off: {}",
        String::from_utf8_lossy(&off.stderr)
    );
    assert!(!stdout.contains("nimbus-sensitive-intents"), "{stdout}");
    let on = render("1.30.0", &[NO_AUTHOR, NO_EXCEPTION]);
    assert!(
        on.status.success()
            && String::from_utf8_lossy(&on.stdout).contains("nimbus-sensitive-intents"),
        "on 1.30: {}",
        String::from_utf8_lossy(&on.stderr)
    );

    // The intent-author and exception policies: refused before 1.36 unless switched off,
    // rendered from 1.36.
    for (value, off) in [
        ("intentAuthorAdmission", NO_EXCEPTION),
        ("exceptionAdmission", NO_AUTHOR),
    ] {
        let refused = render("1.35.0", &[off]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success()
                && stderr.contains(&format!("{value} needs MutatingAdmissionPolicy v1")),
            "on 1.35: {stderr}"
        );
    }
    let off = render("1.35.0", &[NO_AUTHOR, NO_EXCEPTION]);
    let stdout = String::from_utf8_lossy(&off.stdout);
    assert!(
        off.status.success()
            && !stdout.contains("kind: MutatingAdmissionPolicy")
            && !stdout.contains("-exception-approver"),
        "on 1.35 with the switch off (and without the approver role, whose patch only the \
         approval policy keeps off the spec): {}",
        String::from_utf8_lossy(&off.stderr)
    );
    // Required approvals without the policies guarding them would take anyone's word.
    let unguarded = render(
        "1.35.0",
        &[NO_AUTHOR, NO_EXCEPTION, "exceptionApproval=required"],
    );
    let stderr = String::from_utf8_lossy(&unguarded.stderr);
    assert!(
        !unguarded.status.success()
            && stderr.contains("exceptionApproval=required needs exceptionAdmission"),
        "required approvals without exceptionAdmission: {stderr}"
    );
    let on = render("1.36.0", &[]);
    let stdout = String::from_utf8_lossy(&on.stdout);
    assert!(
        on.status.success()
            && stdout.contains("name: nimbus-intent-author")
            && stdout.contains("name: nimbus-exception-requester")
            && stdout.contains("name: nimbus-exception-approval")
            && stdout.contains("name: nimbus-exception-approver"),
        "on 1.36: {}",
        String::from_utf8_lossy(&on.stderr)
    );
}

#[test]
fn chart_and_image_match_the_workspace() {
    let root = workspace_root();
    let chart = std::fs::read_to_string(root.join("charts/nimbus/Chart.yaml")).expect("Chart.yaml");
    let chart: Value = serde_yaml_ng::from_str(&chart).expect("Chart.yaml parses");
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(
        chart["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "appVersion is the release's version"
    );
    assert_eq!(chart["kubeVersion"], ">=1.28.0-0");
    let deployment = helm_template(&[]);
    let deployment = only(&deployment, "Deployment", RELEASE);
    assert_eq!(
        container(deployment)["image"],
        format!("nimbus:{}", env!("CARGO_PKG_VERSION"))
    );

    // The Dockerfile's contract with the Deployment: the binary as entrypoint, `run` as the
    // first argument (which the Deployment repeats), and the numeric user runAsUser names.
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).expect("Dockerfile");
    let last_stage = dockerfile.rsplit("\nFROM ").next().expect("stages");
    for line in [
        "gcr.io/distroless/static-debian12:nonroot",
        "USER 65532:65532",
        r#"ENTRYPOINT ["/nimbus"]"#,
        r#"CMD ["run"]"#,
    ] {
        assert!(
            last_stage.contains(line),
            "the Dockerfile's final stage lacks `{line}`"
        );
    }
    assert!(
        dockerfile.contains("unknown-linux-musl"),
        "a static (musl) binary"
    );
}

/// The chart's CRDs are exactly the generated ones (files/crds.yaml cannot drift), keep the
/// generated labels beside the chart's (Open Cluster Management's policy-type label), and are
/// kept on uninstall.
#[test]
fn chart_crds_are_the_generated_ones() {
    let rendered = helm_template(&[]);
    let mut labels = BTreeMap::new();
    let mut crds: Vec<CustomResourceDefinition> = find(&rendered, "CustomResourceDefinition")
        .into_iter()
        .map(|crd| {
            assert_eq!(
                crd["metadata"]["annotations"]["helm.sh/resource-policy"],
                "keep",
                "{}",
                name(crd)
            );
            let mut crd: CustomResourceDefinition =
                serde_json::from_value(crd.clone()).expect("a CRD");
            labels.insert(crd.metadata.name.clone(), crd.metadata.labels.take());
            crd.metadata.annotations = None;
            crd
        })
        .collect();
    let mut generated = nimbus_api::crds();
    for crd in &mut generated {
        let chart = labels
            .get(&crd.metadata.name)
            .cloned()
            .flatten()
            .unwrap_or_default();
        for (key, value) in crd.metadata.labels.take().unwrap_or_default() {
            assert_eq!(
                chart.get(&key),
                Some(&value),
                "{:?}'s label {key}",
                crd.metadata.name
            );
        }
    }
    let by_name = |c: &CustomResourceDefinition| c.metadata.name.clone();
    crds.sort_by_key(by_name);
    generated.sort_by_key(by_name);
    assert!(
        serde_json::to_value(&crds).ok() == serde_json::to_value(&generated).ok(),
        "charts/nimbus/files/crds.yaml is stale: run `make crds`"
    );
}

/// Each values set renders objects the real apiserver accepts, in dependency order.
#[tokio::test]
async fn chart_renders_are_accepted_by_the_apiserver() {
    let client = nimbus_testenv::shared().client().expect("client");
    create_release_namespace(&client).await;
    for (what, set) in [
        ("defaults", &[][..]),
        ("HA", HA),
        ("engines off", ENGINES_OFF),
    ] {
        let objects = helm_template(set);
        assert_render_invariants(&objects, what);
        apply_rendered(&client, &objects, false, what).await;
    }
}

#[test]
fn default_render_grants_exactly_what_the_operator_calls() {
    let objects = helm_template(&[]);
    let role = only(&objects, "ClusterRole", RELEASE);
    assert_grants(
        &grants(&role["rules"]),
        &expected_cluster_role(),
        "ClusterRole",
    );
    let deployment = only(&objects, "Deployment", RELEASE);
    // The k8tls engine's objects are written only in its namespace, by a Role bound to the
    // operator's ServiceAccount there.
    let k8tls_namespace = flag(deployment, "--k8tls-namespace").expect("k8tls namespace");
    let k8tls_role = only(&objects, "Role", "nimbus-k8tls");
    assert_eq!(k8tls_role["metadata"]["namespace"], k8tls_namespace);
    assert_grants(
        &grants(&k8tls_role["rules"]),
        &expected_k8tls_role(),
        "k8tls Role",
    );
    let k8tls_binding = only(&objects, "RoleBinding", "nimbus-k8tls");
    assert_eq!(k8tls_binding["metadata"]["namespace"], k8tls_namespace);
    assert_eq!(
        k8tls_binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "nimbus-k8tls"})
    );
    let service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"].clone();
    assert_eq!(
        k8tls_binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": service_account, "namespace": RELEASE_NAMESPACE}])
    );
    // Every native kind any engine writes is covered, with every verb the apply/prune path
    // uses: by the ClusterRole, or for the k8tls engine's kinds by the ClusterRole (reading,
    // cluster-wide) and the k8tls Role (writing, in its namespace).
    let granted = grants(&role["rules"]);
    let k8tls_kinds = nimbus_core::engines::kinds(nimbus_core::catalog::Engine::K8tls);
    let in_k8tls_namespace = grants(&k8tls_role["rules"]);
    for kind_ in nimbus_core::engines::all_kinds() {
        for verb in OWN {
            let grant = (
                kind_.group.to_owned(),
                kind_.plural.to_owned(),
                (*verb).to_owned(),
                None,
            );
            let covered = granted.contains(&grant)
                || (k8tls_kinds.contains(&kind_) && in_k8tls_namespace.contains(&grant));
            assert!(covered, "no `{verb}` on {}", kind_.plural);
        }
    }
    let lease = flag(deployment, "--leader-elect-lease-name").expect("a lease name");
    let election = only(&objects, "Role", "nimbus-leader-election");
    assert_grants(
        &grants(&election["rules"]),
        &expected_leader_election_role(lease),
        "leader-election Role",
    );

    assert!(
        args(deployment).contains(&"--leader-elect"),
        "leader election is on by default"
    );
    assert_eq!(flag(deployment, "--disable-engines"), None);
    // Kyverno preferred: Nimbus's output wherever Kyverno is installed.
    assert_eq!(
        flag(deployment, "--engine-preference"),
        Some(
            nimbus_core::engines::Preference::default()
                .to_string()
                .as_str()
        )
    );
    assert_eq!(
        flag(deployment, "--k8tls-namespace"),
        Some("nimbus-k8tls-env")
    );
    assert_eq!(
        flag(deployment, "--k8tls-image"),
        Some(nimbus_core::engines::DEFAULT_K8TLS_IMAGE)
    );
    // The operator refuses the ClusterRoles it is not granted `bind` on, from one list.
    let bindable: Vec<&str> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| strings(&r["verbs"]) == ["bind"])
        .flat_map(|r| strings(&r["resourceNames"]))
        .collect();
    assert_eq!(
        flag(deployment, "--sandbox-cluster-roles"),
        Some(bindable.join(",").as_str())
    );
    for (kind_, name_) in [
        ("Namespace", "nimbus-k8tls-env"),
        ("ServiceAccount", "k8tls"),
        ("ConfigMap", "fips-config"),
        ("ConfigMap", "fluent-bit-config"),
    ] {
        only(&objects, kind_, name_);
    }
    assert!(
        find(&objects, "ServiceMonitor").is_empty(),
        "no ServiceMonitor unless asked for"
    );
}

/// Every engine the operator registers can be switched off from the chart (its values and the
/// helper that spells `--disable-engines` list engines by hand: a new one must be added there).
#[test]
fn every_registered_engine_can_be_switched_off_from_the_chart() {
    for engine in nimbus_core::catalog::Engine::ALL {
        let off = format!("engines.{}.enabled=false", engine.name());
        let objects = helm_template(&[&off]);
        let deployment = only(&objects, "Deployment", RELEASE);
        assert_eq!(
            flag(deployment, "--disable-engines"),
            Some(engine.name()),
            "{off}"
        );
    }
}

/// The engine preference is a chart value, passed on as the operator's flag.
#[test]
fn the_engine_preference_is_a_chart_value() {
    let objects = helm_template(&["engines.preference={admission,kyverno}"]);
    let deployment = only(&objects, "Deployment", RELEASE);
    let preference = flag(deployment, "--engine-preference");
    assert_eq!(preference, Some("admission,kyverno"));
    let parsed: nimbus_core::engines::Preference = preference.unwrap().parse().unwrap();
    assert_eq!(
        parsed.order()[..2],
        [
            nimbus_core::catalog::Engine::Admission,
            nimbus_core::catalog::Engine::Kyverno
        ]
    );
}

/// Enforcement probes are a chart value, off by default: only when on are the flags passed and
/// `create` on pods granted (the probes' dry runs need it; the operator creates nothing else
/// of the kind).
#[test]
fn enforcement_probes_are_a_chart_value_and_grant_pods_only_when_on() {
    let pods = ("".to_owned(), "pods".to_owned(), "create".to_owned(), None);
    for (values, on) in [
        (&[][..], false),
        (
            &[
                "enforcementProbes.enabled=true",
                "enforcementProbes.period=30s",
                "enforcementProbes.cap=7",
            ][..],
            true,
        ),
    ] {
        let objects = helm_template(values);
        let deployment = only(&objects, "Deployment", RELEASE);
        let on_flag = if on { "true" } else { "false" };
        assert_eq!(flag(deployment, "--enforcement-probes"), Some(on_flag));
        let period = flag(deployment, "--enforcement-probe-period");
        assert_eq!(period, on.then_some("30s"), "{values:?}");
        let cap = flag(deployment, "--enforcement-probe-cap");
        assert_eq!(cap, on.then_some("7"), "{values:?}");
        let granted = grants(&only(&objects, "ClusterRole", RELEASE)["rules"]);
        assert_eq!(granted.contains(&pods), on, "{values:?}");
    }
}

#[test]
fn disabled_engines_lose_their_permissions_and_objects() {
    let objects = helm_template(ENGINES_OFF);
    let deployment = only(&objects, "Deployment", RELEASE);
    assert_eq!(
        flag(deployment, "--disable-engines"),
        // In the order of files/engine-rbac.yaml's keys (alphabetical), which the chart
        // derives the engines from.
        Some("k8tls,kyverno,rbac")
    );
    assert_eq!(
        flag(deployment, "--virtual-patch-db"),
        Some("kube-public/nimbus-virtual-patches")
    );
    let granted = grants(&only(&objects, "ClusterRole", RELEASE)["rules"]);
    let groups: BTreeSet<&str> = granted.iter().map(|g| g.0.as_str()).collect();
    assert!(
        !groups.contains("kyverno.io") && !groups.contains("batch"),
        "{groups:?}"
    );
    assert!(!groups.contains("rbac.authorization.k8s.io"), "{groups:?}");
    // The virtual-patch database is still read: that ConfigMap only, in its namespace.
    assert!(!granted.iter().any(|g| g.1 == "configmaps"), "{granted:?}");
    let role = only(&objects, "Role", &format!("{RELEASE}-virtual-patch-db"));
    assert_eq!(role["metadata"]["namespace"], "kube-public");
    assert_eq!(
        grants(&role["rules"]),
        grant_set(&[("", &["configmaps"], READ, &["nimbus-virtual-patches"])])
    );
    assert!(
        !objects
            .iter()
            .any(|o| o["metadata"]["namespace"] == "nimbus-k8tls-env"
                || name(o) == "nimbus-k8tls-env"),
        "no k8tls environment without the k8tls engine"
    );
}

#[test]
fn service_monitor_scrapes_the_metrics_port() {
    let objects = helm_template(&[
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prom",
    ]);
    let monitor = only(&objects, "ServiceMonitor", RELEASE);
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prom");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    let service = only(&objects, "Service", "nimbus-metrics");
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("selector")
    {
        assert_eq!(
            &service["metadata"]["labels"][key], value,
            "the monitor selects the Service"
        );
    }
}

/// The pod the Deployment creates passes the PodSecurity admission at level "restricted" (and
/// the check is real: the same pod without its security context is refused).
#[tokio::test]
async fn the_operator_pod_meets_the_restricted_pod_security_standard() {
    let cp = nimbus_testenv::shared();
    let client = cp.client().expect("client");
    let ns = cp.test_namespace("pkg-psa").await.expect("namespace");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            ns.name(),
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}
            })),
        )
        .await
        .expect("labelling the namespace");
    let objects = helm_template(&[]);
    let deployment = only(&objects, "Deployment", RELEASE);
    let template = &deployment["spec"]["template"];
    let service_account = template["spec"]["serviceAccountName"].as_str().expect("SA");
    Api::<ServiceAccount>::namespaced(client.clone(), ns.name())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": service_account}})).expect("SA"),
        )
        .await
        .expect("creating the ServiceAccount");

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let pod = |spec: &Value| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "operator", "labels": template["metadata"]["labels"]},
            "spec": spec,
        }))
        .expect("a pod")
    };
    pods.create(&dry_run, &pod(&template["spec"]))
        .await
        .unwrap_or_else(|e| panic!("the operator's pod is refused: {e}"));

    let mut loose = template["spec"].clone();
    loose["securityContext"] = json!({});
    loose["containers"][0]["securityContext"] = json!({});
    let refused = pods.create(&dry_run, &pod(&loose)).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s))
            if s.code == 403 && s.message.contains("PodSecurity")),
        "a pod without security context must be refused here: {refused:?}"
    );
}

/// `kustomize build config/default` is the chart's render without the posture API and with one
/// replica, and config/posture the render with it (two replicas), its certificate from
/// cert-manager (apart from Helm's own
/// labels and annotation, plus the namespace Helm creates itself); the apiserver accepts them.
#[tokio::test]
async fn kustomize_configs_are_the_charts_renders() {
    for (dir, set) in [
        ("config/default", "posture.enabled=false,replicaCount=1"),
        (
            "config/posture",
            "posture.certificate.certManager.enabled=true",
        ),
    ] {
        let kustomized = kustomize_build(dir);
        let chart = helm_template(&[set]);
        assert_same_objects(dir, &kustomized, &chart);
        // cert-manager's kinds are not served by the test apiserver.
        let served: Vec<Value> = kustomized
            .into_iter()
            .filter(|o| !matches!(kind(o), "Issuer" | "Certificate"))
            .collect();
        let client = nimbus_testenv::shared().client().expect("client");
        apply_rendered(&client, &served, false, dir).await;
    }
}

fn assert_same_objects(dir: &str, kustomized: &[Value], chart: &[Value]) {
    let key = |o: &Value| (kind(o).to_owned(), name(o).to_owned());
    let normalize = |objects: &[Value]| -> BTreeMap<(String, String), Value> {
        objects
            .iter()
            .filter(|o| !(kind(o) == "Namespace" && name(o) == RELEASE_NAMESPACE))
            .map(|o| {
                let mut o = o.clone();
                let meta = o["metadata"].as_object_mut().expect("metadata");
                for (field, helm_only) in [
                    (
                        "labels",
                        &["helm.sh/chart", "app.kubernetes.io/managed-by"][..],
                    ),
                    ("annotations", &["helm.sh/resource-policy"][..]),
                ] {
                    if let Some(map) = meta.get_mut(field).and_then(Value::as_object_mut) {
                        for k in helm_only {
                            map.remove(*k);
                        }
                        if map.is_empty() {
                            meta.remove(field);
                        }
                    }
                }
                (key(&o), o)
            })
            .collect()
    };
    let (from_kustomize, from_helm) = (normalize(kustomized), normalize(chart));
    assert_eq!(
        from_kustomize.keys().collect::<Vec<_>>(),
        from_helm.keys().collect::<Vec<_>>(),
        "{dir} and the chart render different objects"
    );
    let rules = |objects: &[Value]| grants(&only(objects, "ClusterRole", RELEASE)["rules"]);
    assert_grants(
        &rules(kustomized),
        &rules(chart),
        "config/rbac/role.yaml vs the chart",
    );
    for (key, object) in &from_kustomize {
        assert!(
            object == &from_helm[key],
            "{dir}: {key:?} differs:\nkustomize: {object:#}\nhelm: {:#}",
            from_helm[key]
        );
    }
    only(kustomized, "Namespace", RELEASE_NAMESPACE);
}
