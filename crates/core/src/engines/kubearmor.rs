//! KubeArmor engine: one KubeArmorPolicy per intent (three for escapeToHost), with the bodies
//! Nimbus's adapter writes, empty sections included; each written once per selector when
//! exceptions in force leave pods out.

use super::Engine;
use super::{
    AUDIT, AuditForm, Emitted, Enforces, EngineSpec, Environment, KUBEARMOR_POLICY, NAMESPACED,
    Output, PolicyInput, Problem, Rule, by_labels, labels_only, metadata, nth_name, object,
};
use crate::exceptions::{Excepted, MAX_SELECTORS, excluding};
use crate::intents::id;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nimbus_api::condition;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

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
    // The excepted pods are left out of the selector, when KubeArmor's selector can say so
    // (see `leaving_out`); the others are reported.
    honours_exceptions: &[
        id::DNS_MANIPULATION,
        id::SW_DEPLOYMENT_TOOLS,
        id::UNAUTHORIZED_SA_TOKEN_ACCESS,
        id::PREVENT_EXECUTION_FROM_TEMP_OR_LOGS_FOLDERS,
        id::ESCAPE_TO_HOST,
    ],
};

/// Each of the intent's bodies as one KubeArmorPolicy per selector of [`leaving_out`] (the
/// first keeps the body's usual name, [`nth_name`]). KubeArmor applies every policy that
/// selects a pod, so identical bodies over those selectors act on exactly the pods selected
/// and not excepted.
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
    // Not the exceptions naming workloads: see `by_labels`.
    let leaving = leaving_out(&labels, &by_labels(policy, rule));
    let warnings = leaving.warnings(rule);
    let objects = bodies
        .iter()
        .flat_map(|(suffix, body)| {
            leaving
                .selectors
                .iter()
                .enumerate()
                .map(move |(i, selector)| (nth_name(policy, suffix, i), body, selector))
        })
        .map(|(name, body, selector)| {
            let meta = metadata(
                policy,
                Engine::KubeArmor,
                name,
                policy.namespace.clone(),
                &[],
            );
            let mut spec = Map::new();
            spec.insert("selector".into(), selector.clone());
            let section = |s: &Option<Value>| s.clone().unwrap_or_else(|| json!({}));
            spec.insert("process".into(), section(&body.process));
            spec.insert("file".into(), section(&body.file));
            spec.insert("network".into(), json!({}));
            spec.insert("capabilities".into(), section(&body.capabilities));
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
        .collect();
    Ok(Emitted { objects, warnings })
}

/// What KubeArmor's selectors make of the exceptions in force for one rule.
struct Leaving<'e> {
    /// KubeArmor selectors whose union selects the pods the binding's `matchLabels` select but
    /// those the honoured exceptions let out: that selector alone when there is none, none
    /// when one lets out every pod.
    selectors: Vec<Value>,
    /// Exceptions selecting by `Exists`, `DoesNotExist` or `NotIn`, which a KubeArmor selector
    /// cannot leave out (it leaves out only pods carrying a `key=value` label).
    unnegatable: Vec<&'e Excepted>,
    /// Exceptions it could leave out, but only with more than [`MAX_SELECTORS`] policies per
    /// body.
    too_many: Vec<&'e Excepted>,
    /// Exceptions of some Pod Security controls only: KubeArmor checks none of them by name,
    /// and the workloads stay held to the rest of the intent, so it leaves nothing out.
    of_controls: Vec<&'e Excepted>,
}

/// KubeArmor's selectors for the pods labelled `labels` but those `excepted` let out, as far
/// as its selector can say it. A KubeArmorPolicy's `matchExpressions` take the key `label`
/// and values `key=value`; a pod matches `NotIn` values when it carries none of them
/// (KubeArmor v1.7: they become the policy's `NonIdentities`, `MatchExpIdentities` in
/// `KubeArmor/common/common.go`). That negates an exception's `matchLabels` and `In`
/// requirements, which [`excluding`] turns into `NotIn` ones, one label at a time. `In` is
/// never written: KubeArmor ignores the `NotIn` values that follow an `In`.
fn leaving_out<'e>(labels: &BTreeMap<String, String>, excepted: &[&'e Excepted]) -> Leaving<'e> {
    let (of_controls, whole): (Vec<&Excepted>, Vec<&Excepted>) =
        excepted.iter().partition(|e| e.controls.is_some());
    let (negatable, unnegatable): (Vec<&Excepted>, Vec<&Excepted>) = whole
        .into_iter()
        .partition(|e| (e.selector.match_expressions.iter().flatten()).all(|r| r.operator == "In"));
    let binding = LabelSelector {
        match_labels: Some(labels.clone()),
        ..LabelSelector::default()
    };
    // Beyond the bound nothing is left out: the engine keeps enforcing on every selected pod,
    // and says so, rather than enforce on none.
    let (selectors, too_many) = match excluding(&binding, &negatable) {
        Some(selectors) => (selectors, Vec::new()),
        None => (vec![binding], negatable),
    };
    Leaving {
        selectors: selectors.iter().map(kubearmor_selector).collect(),
        unnegatable,
        too_many,
        of_controls,
    }
}

/// `selector` in KubeArmor's terms: its `matchLabels`, and its requirements as `NotIn`
/// `key=value` labels. Its requirements are those [`excluding`] adds to a selector of labels
/// only for exceptions of `matchLabels` and `In` requirements: all `NotIn`.
fn kubearmor_selector(selector: &LabelSelector) -> Value {
    let mut out = Map::new();
    if let Some(labels) = selector.match_labels.as_ref().filter(|l| !l.is_empty()) {
        out.insert("matchLabels".into(), json!(labels));
    }
    let not_in: Vec<String> = (selector.match_expressions.iter().flatten())
        .filter(|r| r.operator == "NotIn")
        .flat_map(|r| (r.values.iter().flatten()).map(move |v| format!("{}={v}", r.key)))
        .collect();
    if !not_in.is_empty() {
        out.insert(
            "matchExpressions".into(),
            json!([{"key": "label", "operator": "NotIn", "values": not_in}]),
        );
    }
    Value::Object(out)
}

impl Leaving<'_> {
    /// A non-blocking `ExceptionNotHonoured` for each kind of exception left enforced.
    fn warnings(&self, rule: &Rule) -> Vec<Problem> {
        let names = |e: &[&Excepted]| {
            let names: Vec<String> = e.iter().map(|e| e.describe()).collect();
            names.join(", ")
        };
        let id = &rule.spec.id;
        let mut out = Vec::new();
        if !self.unnegatable.is_empty() {
            out.push(format!(
                "kubearmor does not honour exceptions to intent `{id}` that select by \
                 `Exists`, `DoesNotExist` or `NotIn` ({}): a KubeArmor selector leaves out only \
                 pods carrying a `key=value` label, so it still enforces the intent on their \
                 workloads",
                names(&self.unnegatable)
            ));
        }
        if !self.too_many.is_empty() {
            out.push(format!(
                "kubearmor does not honour exceptions to intent `{id}` ({}): leaving out the \
                 pods they let out would take more than {MAX_SELECTORS} KubeArmorPolicies, so \
                 it still enforces the intent on their workloads; narrow or merge the exceptions",
                names(&self.too_many)
            ));
        }
        if !self.of_controls.is_empty() {
            out.push(format!(
                "kubearmor does not honour exceptions to intent `{id}` of some Pod Security \
                 controls ({}): it checks none of them by name, so it still enforces the intent \
                 on their workloads",
                names(&self.of_controls)
            ));
        }
        out.into_iter()
            .map(|message| Problem {
                blocking: false,
                ..rule.problem(condition::REASON_EXCEPTION_NOT_HONOURED, message)
            })
            .collect()
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use std::collections::BTreeSet;

    fn exception(name: &str, selector: Value) -> Excepted {
        Excepted {
            kind: Default::default(),
            name: name.into(),
            namespace: "shop".into(),
            selector: serde_json::from_value(selector).expect("a selector"),
            workloads: Vec::new(),
            intents: BTreeSet::from([id::ESCAPE_TO_HOST.to_owned()]),
            reason: "until 2.4".into(),
            expires_at: Timestamp::UNIX_EPOCH,
            signatures: Default::default(),
            controls: None,
        }
    }

    /// `{"matchLabels": {"app": "web"}}` with `NotIn` labels `values`.
    fn web_not(values: &[&str]) -> Value {
        json!({"matchLabels": {"app": "web"},
               "matchExpressions": [{"key": "label", "operator": "NotIn", "values": values}]})
    }

    #[test]
    fn kubearmor_leaves_out_the_labels_an_exception_names_and_reports_what_it_cannot() {
        let wide: Map<String, Value> = ["a", "b", "c", "d", "e"]
            .map(|k| (k.to_owned(), json!("1")))
            .into_iter()
            .collect();
        struct Case {
            case: &'static str,
            exceptions: Vec<Excepted>,
            selectors: Vec<Value>,
            unnegatable: &'static [&'static str],
            too_many: &'static [&'static str],
            of_controls: &'static [&'static str],
        }
        let web = json!({"matchLabels": {"app": "web"}});
        let cases = [
            Case {
                case: "no exception: the binding's labels",
                exceptions: vec![],
                selectors: vec![web.clone()],
                unnegatable: &[],
                too_many: &[],
                of_controls: &[],
            },
            Case {
                case: "one label",
                exceptions: vec![exception("e", json!({"matchLabels": {"tier": "legacy"}}))],
                selectors: vec![web_not(&["tier=legacy"])],
                unnegatable: &[],
                too_many: &[],
                of_controls: &[],
            },
            Case {
                case: "two labels: not (a and b) is not a, or not b",
                exceptions: vec![exception(
                    "e",
                    json!({"matchLabels": {"team": "vendor", "tier": "legacy"}}),
                )],
                selectors: vec![web_not(&["team=vendor"]), web_not(&["tier=legacy"])],
                unnegatable: &[],
                too_many: &[],
                of_controls: &[],
            },
            Case {
                case: "In: none of its values",
                exceptions: vec![exception(
                    "e",
                    json!({"matchExpressions": [
                        {"key": "tier", "operator": "In", "values": ["legacy", "old"]}]}),
                )],
                selectors: vec![web_not(&["tier=legacy", "tier=old"])],
                unnegatable: &[],
                too_many: &[],
                of_controls: &[],
            },
            Case {
                case: "two exceptions of one label each: neither label",
                exceptions: vec![
                    exception("e", json!({"matchLabels": {"tier": "legacy"}})),
                    exception("f", json!({"matchLabels": {"team": "vendor"}})),
                ],
                selectors: vec![web_not(&["tier=legacy", "team=vendor"])],
                unnegatable: &[],
                too_many: &[],
                of_controls: &[],
            },
            Case {
                case: "every pod of the namespace: no policy",
                exceptions: vec![exception("e", json!({}))],
                selectors: vec![],
                unnegatable: &[],
                too_many: &[],
                of_controls: &[],
            },
            Case {
                case: "Exists, DoesNotExist and NotIn cannot be negated; the others still are",
                exceptions: vec![
                    exception(
                        "exists",
                        json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
                    ),
                    exception(
                        "absent",
                        json!({"matchLabels": {"tier": "legacy"}, "matchExpressions": [
                            {"key": "team", "operator": "DoesNotExist"}]}),
                    ),
                    exception(
                        "not-in",
                        json!({"matchExpressions": [
                            {"key": "tier", "operator": "NotIn", "values": ["web"]}]}),
                    ),
                    exception("labels", json!({"matchLabels": {"team": "vendor"}})),
                ],
                selectors: vec![web_not(&["team=vendor"])],
                unnegatable: &["exists", "absent", "not-in"],
                too_many: &[],
                of_controls: &[],
            },
            Case {
                case: "5 × 5 selectors: beyond the bound, every selected pod stays enforced",
                exceptions: vec![
                    exception("e", json!({ "matchLabels": wide })),
                    exception("f", json!({ "matchLabels": wide })),
                    exception(
                        "exists",
                        json!({"matchExpressions": [
                        {"key": "tier", "operator": "Exists"}]}),
                    ),
                ],
                selectors: vec![web.clone()],
                unnegatable: &["exists"],
                too_many: &["e", "f"],
                of_controls: &[],
            },
            Case {
                case: "some Pod Security controls only: nothing left out",
                exceptions: vec![
                    Excepted {
                        controls: Some(BTreeSet::from([
                            nimbus_api::PodSecurityControl::PrivilegedContainers,
                        ])),
                        ..exception("privileged", json!({"matchLabels": {"tier": "legacy"}}))
                    },
                    exception("labels", json!({"matchLabels": {"team": "vendor"}})),
                ],
                selectors: vec![web_not(&["team=vendor"])],
                unnegatable: &[],
                too_many: &[],
                of_controls: &["privileged"],
            },
        ];
        let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
        let names = |e: &[&Excepted]| -> Vec<String> { e.iter().map(|e| e.name.clone()).collect() };
        for c in cases {
            let refs: Vec<&Excepted> = c.exceptions.iter().collect();
            let got = leaving_out(&labels, &refs);
            assert_eq!(got.selectors, c.selectors, "{}", c.case);
            assert_eq!(names(&got.unnegatable), c.unnegatable, "{}", c.case);
            assert_eq!(names(&got.too_many), c.too_many, "{}", c.case);
            assert_eq!(names(&got.of_controls), c.of_controls, "{}", c.case);
        }
    }

    #[test]
    fn a_binding_of_every_pod_and_an_exception_leave_only_the_not_in_labels() {
        let e = exception("e", json!({"matchLabels": {"tier": "legacy"}}));
        let got = leaving_out(&BTreeMap::new(), &[&e]);
        assert_eq!(
            got.selectors,
            vec![json!({"matchExpressions": [
                {"key": "label", "operator": "NotIn", "values": ["tier=legacy"]}]})]
        );
        assert_eq!(
            leaving_out(&BTreeMap::new(), &[]).selectors,
            vec![json!({})]
        );
    }
}
