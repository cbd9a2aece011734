//! k8tls engine: assessTLS on a ClusterNimbusPolicy becomes a CronJob that scans TLS endpoints
//! (the cluster's services, or the given external addresses) and prints the report through
//! fluent-bit. The namespace must already hold the `k8tls` ServiceAccount and the
//! `fips-config` and `fluent-bit-config` ConfigMaps (the Helm chart creates them).
//!
//! Differences from Nimbus: every assessTLS rule gets its own CronJob (Nimbus stopped at the
//! first), and the external-address list lives in a ConfigMap named after its CronJob (Nimbus
//! shared one `external-addresses` ConfigMap between all policies, so the last writer won).
//! The images are pinned (configurable) instead of `:latest` pulled on every run, the
//! containers run restricted (non-root, no privilege escalation, no capabilities, the runtime's
//! seccomp profile) with resource bounds, and schedules run at most hourly.

use super::Engine;
use super::{
    AuditForm, CLUSTER, CONFIG_MAP, CRON_JOB, Enforces, EngineSpec, Environment, Fact, Output,
    PolicyInput, Rule, metadata, native_name, object,
};
use crate::intents::{id, param, param_value, param_values};
use nimbus_api::condition;
use serde_json::{Value, json};

/// The sidecar printing the report.
const FLUENT_BIT_IMAGE: &str = "fluent/fluent-bit:3.2.2";
/// A non-root user for both containers (the images do not all declare one, and
/// `runAsNonRoot` alone refuses an image whose user is root or not numeric).
const NON_ROOT_USER: u32 = 65532;

/// CronJob names are limited so the Jobs they spawn (name + 11 characters) stay valid.
const MAX_CRON_JOB_NAME_LEN: usize = 52;
const ADDRESSES_DIR: &str = "/var/k8tls/";

pub(super) const SPEC: EngineSpec = EngineSpec {
    engine: Engine::K8tls,
    name: "k8tls",
    manager: "nimbus-k8tls",
    enforces: &[Enforces {
        intent: id::ASSESS_TLS,
        origins: CLUSTER,
        reads: &[Fact::K8tlsNamespace],
        // The scanner reports what it finds and blocks nothing, whatever the action.
        audit: AuditForm::AssessesOnly,
        effect: "a k8tls CronJob scans the cluster's (or the given) TLS endpoints on a schedule and reports",
    }],
    kinds: &[&CRON_JOB, &CONFIG_MAP],
    confined_to_k8tls_namespace: true,
    translate,
    optional_kinds: &[],
    tenant_proof: None,
    honours_exceptions: &[],
};

fn translate(policy: &PolicyInput, rule: &Rule, env: &Environment) -> Output {
    if rule.spec.id != id::ASSESS_TLS {
        return rule.untranslated(Engine::K8tls);
    }
    let namespace = &env.k8tls_namespace;
    if !env.k8tls_namespace_exists {
        return Err(rule.problem(
            condition::REASON_ENGINE_NOT_READY,
            format!("k8tls namespace {namespace} does not exist (the Helm chart creates it with the k8tls ServiceAccount and ConfigMaps)"),
        ));
    }
    let name = native_name(policy, rule.key, MAX_CRON_JOB_NAME_LEN);
    let schedule = param_value(rule.spec, param::SCHEDULE).unwrap_or_default();
    let addresses = param_values(rule.spec, param::EXTERNAL_ADDRESSES);

    let mut volumes = vec![
        json!({"name": "fips-config", "configMap": {"name": "fips-config"}}),
        json!({"name": "fluent-bit-config", "configMap": {"name": "fluent-bit-config"}}),
        json!({"name": "k8tls-report", "emptyDir": {}}),
    ];
    let mut scanner_mounts = vec![
        json!({"name": "fips-config", "readOnly": true, "mountPath": "/home/k8tls/config/"}),
        json!({"name": "k8tls-report", "mountPath": "/tmp/"}),
    ];
    let mut command = json!(["./k8s_tlsscan"]);
    let mut objects = Vec::new();
    if !addresses.is_empty() {
        let list_name = crate::names::fit(&format!("{name}-addresses"), crate::names::MAX_NAME_LEN);
        volumes.push(json!({"name": "external-addresses", "configMap": {"name": list_name}}));
        scanner_mounts.push(
            json!({"name": "external-addresses", "readOnly": true, "mountPath": ADDRESSES_DIR}),
        );
        command = json!([
            "./tlsscan",
            "--infile",
            format!("{ADDRESSES_DIR}addresses"),
            "--compact-json"
        ]);
        let lines: Vec<String> = addresses.iter().map(|a| address_line(a)).collect();
        let meta = metadata(
            policy,
            Engine::K8tls,
            list_name,
            Some(namespace.clone()),
            &[],
        );
        objects.push(object(
            &CONFIG_MAP,
            meta,
            json!({"data": {"addresses": lines.join("\n")}}),
        ));
    }

    let mut meta = metadata(policy, Engine::K8tls, name, Some(namespace.clone()), &[]);
    // The CronJob carries the policy's labels, as in Nimbus.
    let labels = meta.labels.get_or_insert_default();
    for (k, v) in &policy.labels {
        labels.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let spec = cron_job_spec(
        &schedule,
        volumes,
        command,
        scanner_mounts,
        &env.k8tls_image,
    );
    objects.push(object(&CRON_JOB, meta, json!({ "spec": spec })));
    Ok(objects.into())
}

/// The CronJob's spec: the scanner (`command` in `image`, with `scanner_mounts`) as an init
/// container, then fluent-bit shipping its report, both restricted.
fn cron_job_spec(
    schedule: &str,
    volumes: Vec<Value>,
    command: Value,
    scanner_mounts: Vec<Value>,
    image: &str,
) -> Value {
    let restricted = json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "runAsUser": NON_ROOT_USER,
        "runAsGroup": NON_ROOT_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    json!({
        "schedule": schedule,
        "jobTemplate": {"spec": {
            "backoffLimit": 5,
            "template": {"spec": {
                "volumes": volumes,
                "initContainers": [{
                    "name": "k8tls",
                    "image": image,
                    "command": command,
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"cpu": "500m", "memory": "512Mi"},
                    },
                    "volumeMounts": scanner_mounts,
                    "imagePullPolicy": "IfNotPresent",
                    "securityContext": restricted,
                }],
                "containers": [{
                    "name": "fluent-bit",
                    "image": FLUENT_BIT_IMAGE,
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
                    "securityContext": restricted,
                }],
                "restartPolicy": "Never",
                "serviceAccountName": "k8tls",
            }},
        }},
    })
}

/// `<host:port> <Name>`: the address and its first DNS label capitalized, the line format
/// k8tls's `--infile` reads (`google.com:443 Google`).
fn address_line(address: &str) -> String {
    let host = address
        .rsplit_once(':')
        .map_or(address, |(host, _)| host)
        .trim_matches(['[', ']']);
    let label = host
        .split('.')
        .next()
        .filter(|l| !l.is_empty())
        .unwrap_or(host);
    let mut chars = label.chars();
    let title: String = chars
        .next()
        .map(|c| c.to_ascii_uppercase())
        .into_iter()
        .chain(chars)
        .collect();
    format!("{address} {title}")
}

#[cfg(test)]
mod tests {
    use super::address_line;

    #[test]
    fn address_lines_follow_k8tls_infile_format() {
        assert_eq!(address_line("google.com:443"), "google.com:443 Google");
        assert_eq!(address_line("10.0.0.1:8443"), "10.0.0.1:8443 10");
        assert_eq!(address_line("[::1]:443"), "[::1]:443 ::1");
    }
}
