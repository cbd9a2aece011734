//! KubeArmor engine: one KubeArmorPolicy per intent (three for escapeToHost), with the bodies
//! Nimbus's adapter writes, empty sections included.

use super::Engine;
use super::{
    AUDIT, AuditForm, Enforces, EngineSpec, Environment, KUBEARMOR_POLICY, NAMESPACED, Output,
    PolicyInput, Rule, labels_only, metadata, native_name, object,
};
use crate::intents::id;
use crate::names::MAX_NAME_LEN;
use serde_json::{Map, Value, json};

/// Package managers, build tools and downloaders, in Nimbus's order (duplicate included).
const DEPLOYMENT_TOOLS: [&str; 37] = [
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

const TEMP_AND_LOG_DIRS: [&str; 6] = [
    "/var/tmp/",
    "/tmp/",
    "/var/log/",
    "/app/logs/",
    "/logs/",
    "/etc/",
];

const HOST_ESCAPE_CAPABILITIES: [&str; 5] = [
    "sys_admin",
    "sys_ptrace",
    "sys_module",
    "dac_read_search",
    "dac_override",
];

/// The sections of a policy body; those left `None` are written as `{}` as Nimbus does.
#[derive(Default)]
struct Body {
    process: Option<Value>,
    file: Option<Value>,
    capabilities: Option<Value>,
}

pub(super) const SPEC: EngineSpec = EngineSpec {
    engine: Engine::KubeArmor,
    name: "kubearmor",
    manager: "nimbus-kubearmor",
    enforces: &[
        Enforces {
            intent: id::DNS_MANIPULATION,
            origins: NAMESPACED,
            reads: &[],
            audit: AuditForm::Reports,
            effect: "KubeArmor blocks writes to /etc/resolv.conf in the selected pods",
        },
        Enforces {
            intent: id::SW_DEPLOYMENT_TOOLS,
            origins: NAMESPACED,
            reads: &[],
            audit: AuditForm::Reports,
            effect: "KubeArmor blocks running package managers and build tools in the selected pods",
        },
        Enforces {
            intent: id::UNAUTHORIZED_SA_TOKEN_ACCESS,
            origins: NAMESPACED,
            reads: &[],
            audit: AuditForm::Reports,
            effect: "KubeArmor blocks reading the mounted service account token in the selected pods",
        },
        Enforces {
            intent: id::PREVENT_EXECUTION_FROM_TEMP_OR_LOGS_FOLDERS,
            origins: NAMESPACED,
            reads: &[],
            audit: AuditForm::Reports,
            effect: "KubeArmor blocks running anything from /tmp, /var/tmp and /var/log in the selected pods",
        },
        Enforces {
            intent: id::ESCAPE_TO_HOST,
            origins: NAMESPACED,
            reads: &[],
            audit: AuditForm::Reports,
            effect: "KubeArmor blocks chroot, host-escape capabilities and deployment tools in the selected pods",
        },
    ],
    kinds: &[&KUBEARMOR_POLICY],
    confined_to_k8tls_namespace: false,
    translate,
    optional_kinds: &[],
    tenant_proof: None,
    honours_exceptions: &[],
};

fn translate(policy: &PolicyInput, rule: &Rule, _: &Environment) -> Output {
    let labels = labels_only(&policy.selector, rule, Engine::KubeArmor)?;
    let bodies: Vec<(String, Body)> = match rule.spec.id.as_str() {
        id::SW_DEPLOYMENT_TOOLS => vec![(rule.key.to_owned(), deployment_tools())],
        id::UNAUTHORIZED_SA_TOKEN_ACCESS => vec![(
            rule.key.to_owned(),
            Body {
                file: Some(json!({"matchDirectories": [
                    {"dir": "/run/secrets/kubernetes.io/serviceaccount/", "recursive": true}
                ]})),
                ..Body::default()
            },
        )],
        id::DNS_MANIPULATION => vec![(
            rule.key.to_owned(),
            Body {
                file: Some(json!({"matchPaths": [{"path": "/etc/resolv.conf", "readOnly": true}]})),
                ..Body::default()
            },
        )],
        id::ESCAPE_TO_HOST => vec![
            (
                format!("{}-disallowchroot", rule.key),
                Body {
                    process: Some(json!({"matchPaths": [
                        {"path": "/usr/sbin/chroot"}, {"path": "/sbin/chroot"}
                    ]})),
                    ..Body::default()
                },
            ),
            (
                format!("{}-disallowcapabilities", rule.key),
                Body {
                    capabilities: Some(json!({"matchCapabilities": HOST_ESCAPE_CAPABILITIES
                        .map(|c| json!({"capability": c}))})),
                    ..Body::default()
                },
            ),
            (
                format!("{}-swdeploymenttools", rule.key),
                deployment_tools(),
            ),
        ],
        id::PREVENT_EXECUTION_FROM_TEMP_OR_LOGS_FOLDERS => vec![(
            rule.key.to_owned(),
            Body {
                process: Some(json!({
                    "matchDirectories": TEMP_AND_LOG_DIRS.map(|d| json!({"dir": d, "recursive": true})),
                    "action": "Block",
                })),
                ..Body::default()
            },
        )],
        _ => return rule.untranslated(Engine::KubeArmor),
    };
    let selector = if labels.is_empty() {
        json!({})
    } else {
        json!({ "matchLabels": labels })
    };
    Ok(bodies
        .into_iter()
        .map(|(suffix, body)| {
            let name = native_name(policy, &suffix, MAX_NAME_LEN);
            let meta = metadata(
                policy,
                Engine::KubeArmor,
                name,
                policy.namespace.clone(),
                &[],
            );
            let mut spec = Map::new();
            spec.insert("selector".into(), selector.clone());
            spec.insert("process".into(), body.process.unwrap_or_else(|| json!({})));
            spec.insert("file".into(), body.file.unwrap_or_else(|| json!({})));
            spec.insert("network".into(), json!({}));
            spec.insert(
                "capabilities".into(),
                body.capabilities.unwrap_or_else(|| json!({})),
            );
            spec.insert("syscalls".into(), json!({}));
            if let Some(message) = rule.spec.description.as_deref().filter(|m| !m.is_empty()) {
                spec.insert("message".into(), message.into());
            }
            if !rule.spec.rule.action.is_empty() {
                spec.insert("action".into(), rule.spec.rule.action.clone().into());
            }
            let mut spec = Value::Object(spec);
            if rule.spec.rule.action == AUDIT {
                // A rule's own action wins over the policy's: every one of them audits.
                audit_every_action(&mut spec);
            }
            object(&KUBEARMOR_POLICY, meta, json!({ "spec": spec }))
        })
        .collect::<Vec<_>>()
        .into())
}

/// Sets every `action` in `value` to `Audit`. Fixed from Nimbus, which kept a rule's `Block`
/// under an audited policy, so KubeArmor blocked what it was asked to audit.
fn audit_every_action(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                if key == "action" {
                    *field = AUDIT.into();
                } else {
                    audit_every_action(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(audit_every_action),
        _ => {}
    }
}

fn deployment_tools() -> Body {
    Body {
        process: Some(
            json!({"matchPaths": DEPLOYMENT_TOOLS.iter().map(|p| json!({"path": p})).collect::<Vec<_>>()}),
        ),
        ..Body::default()
    }
}
