//! k8tls: assessTLS's CronJobs and address ConfigMaps, generated for cluster bindings only.

use crate::builders::*;
use nimbus_api::condition;
use nimbus_core::engines::{Environment, Problem};
use serde_json::{Value, json};

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
pub fn cron_job(name: &str, namespace: &str, schedule: &str, addresses: Option<&str>) -> Value {
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
pub fn addresses_config_map(name: &str, namespace: &str, addresses: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(name, Some(namespace), "k8tls", None, cwnp_owner()),
        "data": {"addresses": addresses},
    })
}

/// The objects of a cluster binding's assessTLS rules, and their status entries (which name
/// the CronJob's namespace). Difference 6: one CronJob per assessTLS rule (difference 9 for the
/// names), its external addresses in a ConfigMap of its own.
#[test]
fn k8tls_cluster_cron_jobs() {
    let scanners = Environment {
        k8tls_namespace: "scanners".into(),
        ..Environment::default()
    };
    let cases = [
        (
            "default schedule",
            Environment::default(),
            vec![block("assessTLS", "Scan TLS")],
            vec![cron_job("web-csib-assesstls", K8TLS_NS, "@weekly", None)],
            vec!["nimbus-k8tls-env/CronJob/web-csib-assesstls"],
        ),
        (
            "external addresses and a schedule",
            Environment::default(),
            vec![rule(
                "assessTLS",
                "Audit",
                None,
                json!({"schedule": ["0 3 * * MON"], "external_addresses": ["google.com:443", "10.0.0.1:8443"]}),
            )],
            vec![
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
            vec![
                "ConfigMap/web-csib-assesstls-addresses",
                "nimbus-k8tls-env/CronJob/web-csib-assesstls",
            ],
        ),
        (
            "one CronJob per rule",
            Environment::default(),
            vec![
                block("assessTLS", "a"),
                rule(
                    "assessTLS",
                    "Block",
                    None,
                    json!({"external_addresses": ["example.org:8443"]}),
                ),
            ],
            vec![
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
            vec![
                "nimbus-k8tls-env/CronJob/web-csib-assesstls",
                "ConfigMap/web-csib-assesstls-2-addresses",
                "nimbus-k8tls-env/CronJob/web-csib-assesstls-2",
            ],
        ),
        (
            "configured namespace",
            scanners,
            vec![rule(
                "assessTLS",
                "Block",
                None,
                json!({"external_addresses": ["a.io:443"]}),
            )],
            vec![
                addresses_config_map("web-csib-assesstls-addresses", "scanners", "a.io:443 A"),
                cron_job(
                    "web-csib-assesstls",
                    "scanners",
                    "@weekly",
                    Some("web-csib-assesstls-addresses"),
                ),
            ],
            vec![
                "ConfigMap/web-csib-assesstls-addresses",
                "scanners/CronJob/web-csib-assesstls",
            ],
        ),
    ];
    for (case, env, rules, want, want_entries) in cases {
        let t = run_cwnp_with(&cwnp(all_namespaces(), Value::Null, rules), &env);
        no_problems_in(case, &t);
        assert_objects_in(case, &all(&t), &want);
        assert_eq!(entries(&t), want_entries, "{case}");
    }
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
        assert_eq!(t.problems.len(), 1, "{schedule}: {:?}", t.problems);
        assert_eq!(
            t.problems[0].reason,
            condition::REASON_INVALID_PARAMETER,
            "{schedule}"
        );
        assert!(!t.problems[0].blocking, "{schedule}");
        assert!(
            t.problems[0].message.contains("at most hourly"),
            "{schedule}: {}",
            t.problems[0].message
        );
        assert_eq!(all(&t)[0]["spec"]["schedule"], "@weekly", "{schedule}");
    }
}
