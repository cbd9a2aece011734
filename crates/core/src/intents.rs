//! The intents: every intent ID the operator understands, what it means, and its parameters
//! (names, shapes, defaults), and the kinds of policy an intent can come from. Which engines
//! enforce an intent each engine declares itself ([`crate::engines::EngineSpec`], which
//! depends on this); [`crate::catalog`] combines both.

use crate::params::{self, ParamKind};
use nimbus_api::{ALLOW_SENSITIVE_ANNOTATION, NimbusRule};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Intent IDs, exactly as users write them in `SecurityIntent.spec.intent.id`.
pub mod id {
    pub const DNS_MANIPULATION: &str = "dnsManipulation";
    pub const DENY_EXTERNAL_NETWORK_ACCESS: &str = "denyExternalNetworkAccess";
    pub const SW_DEPLOYMENT_TOOLS: &str = "swDeploymentTools";
    pub const UNAUTHORIZED_SA_TOKEN_ACCESS: &str = "unAuthorizedSaTokenAccess";
    pub const PREVENT_EXECUTION_FROM_TEMP_OR_LOGS_FOLDERS: &str =
        "preventExecutionFromTempOrLogsFolders";
    pub const ESCAPE_TO_HOST: &str = "escapeToHost";
    pub const COCO_WORKLOAD: &str = "cocoWorkload";
    pub const ASSESS_TLS: &str = "assessTLS";
    pub const VIRTUAL_PATCH: &str = "virtualPatch";
    pub const NAMESPACE_SANDBOX: &str = "namespaceSandbox";
}

/// Parameter names, exactly as users write them in `spec.intent.params`.
pub mod param {
    pub const PSA_LEVEL: &str = "psaLevel";
    pub const RUNTIME_CLASS: &str = "runtimeClass";
    pub const SCHEDULE: &str = "schedule";
    pub const EXTERNAL_ADDRESSES: &str = "external_addresses";
    pub const CVE_LIST: &str = "cveList";
    pub const GROUP: &str = "group";
    pub const CLUSTER_ROLE: &str = "clusterRole";
}

/// Where an engine acts on an intent: on the NimbusPolicy of a namespaced binding, on the
/// per-namespace NimbusPolicies of a cluster binding, or on the ClusterNimbusPolicy itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    Binding,
    ClusterBindingNamespace,
    Cluster,
}

/// Which origins a binding kind produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingKind {
    Namespaced,
    Cluster,
}

impl BindingKind {
    pub fn origins(self) -> &'static [Origin] {
        match self {
            BindingKind::Namespaced => &[Origin::Binding],
            BindingKind::Cluster => &[Origin::ClusterBindingNamespace, Origin::Cluster],
        }
    }
}

impl Origin {
    pub fn binding_kind(self) -> BindingKind {
        match self {
            Origin::Binding => BindingKind::Namespaced,
            Origin::ClusterBindingNamespace | Origin::Cluster => BindingKind::Cluster,
        }
    }
}

#[derive(Debug)]
pub struct Param {
    pub name: &'static str,
    pub kind: ParamKind,
    /// The value used when the parameter is absent (`None`: no default).
    pub default: Option<&'static str>,
    /// Whether every value of the list is used (otherwise only the first).
    pub multiple: bool,
    pub required: bool,
    pub description: &'static str,
}

#[derive(Debug)]
pub struct IntentSpec {
    pub id: &'static str,
    pub summary: &'static str,
    pub params: &'static [Param],
    /// Grants access or runs workloads: enforced only when the binding's author opts in with
    /// the `intent.security.nimbus.com/allow-sensitive` annotation.
    pub sensitive: bool,
}

impl IntentSpec {
    pub fn param(&self, name: &str) -> Option<&'static Param> {
        self.params.iter().find(|p| p.name == name)
    }
}

/// Every intent, in the order `nimbus intents` lists them.
pub static INTENTS: &[IntentSpec] = &[
    IntentSpec {
        id: id::DNS_MANIPULATION,
        summary: "Keep DNS honest: /etc/resolv.conf is read-only and pods may resolve names only \
                  through the cluster DNS.",
        params: &[],
        sensitive: false,
    },
    IntentSpec {
        id: id::DENY_EXTERNAL_NETWORK_ACCESS,
        summary: "Pods talk only to private (RFC 1918) and pod networks, and only over DNS \
                  ports outward.",
        params: &[],
        sensitive: false,
    },
    IntentSpec {
        id: id::SW_DEPLOYMENT_TOOLS,
        summary: "Block package managers, build tools and downloaders (apt, yum, make, curl, \
                  wget, ...) inside containers.",
        params: &[],
        sensitive: false,
    },
    IntentSpec {
        id: id::UNAUTHORIZED_SA_TOKEN_ACCESS,
        summary: "Deny processes access to the mounted service-account token.",
        params: &[],
        sensitive: false,
    },
    IntentSpec {
        id: id::PREVENT_EXECUTION_FROM_TEMP_OR_LOGS_FOLDERS,
        summary: "Block executing binaries from /tmp, /var/tmp, log folders and /etc.",
        params: &[],
        sensitive: false,
    },
    IntentSpec {
        id: id::ESCAPE_TO_HOST,
        summary: "Stop container breakouts: Pod Security admission level, no chroot, no \
                  dangerous capabilities, no package managers.",
        params: &[Param {
            name: param::PSA_LEVEL,
            kind: ParamKind::OneOf(&["baseline", "restricted"]),
            default: Some("baseline"),
            multiple: false,
            required: false,
            description: "Pod Security Standard enforced by Kyverno.",
        }],
        sensitive: false,
    },
    IntentSpec {
        id: id::COCO_WORKLOAD,
        summary: "Run Deployments as confidential containers by setting their runtime class.",
        params: &[Param {
            name: param::RUNTIME_CLASS,
            kind: ParamKind::DnsSubdomain,
            default: Some("kata-clh"),
            multiple: false,
            required: false,
            description: "RuntimeClass given to the selected Deployments' pods.",
        }],
        sensitive: false,
    },
    IntentSpec {
        id: id::ASSESS_TLS,
        summary: "Scan the TLS configuration of the cluster's services (and given external \
                  addresses) on a schedule with k8tls.",
        params: &[
            Param {
                name: param::SCHEDULE,
                kind: ParamKind::HourlyCron,
                default: Some("@weekly"),
                multiple: false,
                required: false,
                description: "When the scan runs (CronJob schedule, at most hourly).",
            },
            Param {
                name: param::EXTERNAL_ADDRESSES,
                kind: ParamKind::HostPort,
                default: None,
                multiple: true,
                required: false,
                description: "Extra `host:port` endpoints to scan instead of the cluster's \
                              services.",
            },
        ],
        sensitive: true,
    },
    IntentSpec {
        id: id::VIRTUAL_PATCH,
        summary: "Apply the virtual patches the configured CVE database lists for the given CVEs.",
        params: &[
            Param {
                name: param::CVE_LIST,
                kind: ParamKind::Cve,
                default: None,
                multiple: true,
                required: true,
                description: "CVE IDs to patch.",
            },
            Param {
                name: param::SCHEDULE,
                kind: ParamKind::Cron,
                default: Some("0 0 * * *"),
                multiple: false,
                required: false,
                description: "Accepted for compatibility; patches follow database changes at \
                              once.",
            },
        ],
        sensitive: false,
    },
    IntentSpec {
        id: id::NAMESPACE_SANDBOX,
        summary: "Give a group a ClusterRole inside each selected namespace only (a RoleBinding \
                  per namespace), so every team plays in its own namespace.",
        params: &[
            Param {
                name: param::GROUP,
                kind: ParamKind::SubjectName,
                default: None,
                multiple: true,
                required: true,
                description: "Groups bound in each namespace; `{namespace}` is replaced by \
                              the namespace name.",
            },
            Param {
                name: param::CLUSTER_ROLE,
                kind: ParamKind::DnsSubdomain,
                default: Some("edit"),
                multiple: false,
                required: false,
                description: "ClusterRole granted within the namespace.",
            },
        ],
        sensitive: true,
    },
];

/// The catalog entry for `id` (exact, case-sensitive match, as Nimbus does).
pub fn intent(id: &str) -> Option<&'static IntentSpec> {
    INTENTS.iter().find(|i| i.id == id)
}

/// The sensitive intent IDs an object's author accepts: the comma-separated entries of its
/// `intent.security.nimbus.com/allow-sensitive` annotation (blanks ignored; IDs match exactly,
/// as intent IDs do).
pub fn allowed_sensitive(annotations: &BTreeMap<String, String>) -> BTreeSet<String> {
    annotations
        .get(ALLOW_SENSITIVE_ANNOTATION)
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Something wrong with a rule's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamProblem {
    pub param: String,
    pub message: String,
    /// A required parameter is missing, so the intent cannot be enforced at all (a bad value
    /// only falls back to the default).
    pub blocking: bool,
}

impl fmt::Display for ParamProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "param {}: {}", self.param, self.message)
    }
}

/// Checks a rule's parameters against its catalog entry: unknown keys, missing required ones,
/// and values of the wrong shape. An unknown intent has no parameter rules.
pub fn check_params(rule: &NimbusRule) -> Vec<ParamProblem> {
    let Some(spec) = intent(&rule.id) else {
        return Vec::new();
    };
    let given = rule.rule.params.clone().unwrap_or_default();
    let mut problems = Vec::new();
    for (key, values) in &given {
        let Some(param) = spec.param(key) else {
            let known: Vec<_> = spec.params.iter().map(|p| p.name).collect();
            problems.push(ParamProblem {
                param: key.clone(),
                message: if known.is_empty() {
                    format!("{} takes no parameters", spec.id)
                } else {
                    format!("unknown parameter (known: {})", known.join(", "))
                },
                blocking: false,
            });
            continue;
        };
        let checked = if param.multiple {
            values.as_slice()
        } else {
            &values[..values.len().min(1)]
        };
        for value in checked {
            if let Err(message) = params::check(param.kind, value) {
                problems.push(ParamProblem {
                    param: key.clone(),
                    message: format!("`{value}`: {message}"),
                    blocking: false,
                });
            }
        }
        if !param.multiple && values.len() > 1 {
            problems.push(ParamProblem {
                param: key.clone(),
                message: "takes one value; only the first is used".into(),
                blocking: false,
            });
        }
    }
    for param in spec.params.iter().filter(|p| p.required) {
        if given.get(param.name).is_none_or(|v| v.is_empty()) {
            problems.push(ParamProblem {
                param: param.name.into(),
                message: "is required".into(),
                blocking: true,
            });
        }
    }
    problems
}

/// The values of `name` in `rule`: the given ones when valid, otherwise the default. Invalid
/// values never reach an engine; [`check_params`] reports them.
pub fn param_values(rule: &NimbusRule, name: &str) -> Vec<String> {
    let spec = intent(&rule.id).and_then(|i| i.param(name));
    let given = rule
        .rule
        .params
        .as_ref()
        .and_then(|p| p.get(name))
        .cloned()
        .unwrap_or_default();
    let Some(spec) = spec else {
        return given;
    };
    let take = if spec.multiple { given.len() } else { 1 };
    let valid: Vec<String> = given
        .into_iter()
        .take(take)
        .filter(|v| params::check(spec.kind, v).is_ok())
        .collect();
    if valid.is_empty() {
        spec.default.map(str::to_owned).into_iter().collect()
    } else {
        valid
    }
}

/// The single value of `name` in `rule` (see [`param_values`]).
pub fn param_value(rule: &NimbusRule, name: &str) -> Option<String> {
    param_values(rule, name).into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimbus_api::Rule;

    fn rule(id: &str, params: &[(&str, &[&str])]) -> NimbusRule {
        NimbusRule {
            id: id.into(),
            type_: None,
            description: None,
            rule: Rule {
                action: "Block".into(),
                params: Some(
                    params
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect()))
                        .collect(),
                ),
            },
        }
    }

    #[test]
    fn every_default_is_a_valid_value() {
        for spec in INTENTS {
            for p in spec.params {
                if let Some(d) = p.default {
                    assert_eq!(params::check(p.kind, d), Ok(()), "{}.{}", spec.id, p.name);
                }
            }
        }
    }

    #[test]
    fn sensitive_intents_and_their_opt_in() {
        let sensitive: BTreeSet<_> = INTENTS
            .iter()
            .filter(|i| i.sensitive)
            .map(|i| i.id)
            .collect();
        assert_eq!(sensitive, BTreeSet::from(["assessTLS", "namespaceSandbox"]));
        let annotations = BTreeMap::from([(
            ALLOW_SENSITIVE_ANNOTATION.to_owned(),
            " namespaceSandbox, ,assessTLS,nope".to_owned(),
        )]);
        assert_eq!(
            allowed_sensitive(&annotations),
            BTreeSet::from(["assessTLS".into(), "namespaceSandbox".into(), "nope".into()])
        );
        assert!(allowed_sensitive(&BTreeMap::new()).is_empty());
    }

    #[test]
    fn tls_scans_run_at_most_hourly() {
        let every_minute = rule("assessTLS", &[("schedule", &["* * * * *"])]);
        let problems = check_params(&every_minute);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].message.contains("at most hourly") && !problems[0].blocking);
        assert_eq!(
            param_value(&every_minute, "schedule").as_deref(),
            Some("@weekly")
        );
        let hourly = rule("assessTLS", &[("schedule", &["0 * * * *"])]);
        assert!(check_params(&hourly).is_empty());
        assert_eq!(
            param_value(&hourly, "schedule").as_deref(),
            Some("0 * * * *")
        );
    }

    #[test]
    fn params_are_checked_and_bad_values_fall_back_to_defaults() {
        let bad = rule("escapeToHost", &[("psaLevel", &["strict"]), ("x", &["1"])]);
        let problems = check_params(&bad);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].message.contains("baseline, restricted"));
        assert!(problems[1].message.contains("unknown parameter"));
        assert_eq!(param_value(&bad, "psaLevel").as_deref(), Some("baseline"));

        let good = rule("escapeToHost", &[("psaLevel", &["restricted"])]);
        assert!(check_params(&good).is_empty());
        assert_eq!(
            param_value(&good, "psaLevel").as_deref(),
            Some("restricted")
        );
    }

    #[test]
    fn required_params_and_lists() {
        let missing = rule("namespaceSandbox", &[]);
        assert_eq!(
            check_params(&missing),
            vec![ParamProblem {
                param: "group".into(),
                message: "is required".into(),
                blocking: true,
            }]
        );
        let tls = rule(
            "assessTLS",
            &[("external_addresses", &["a.com:443", "nope", "b.io:8443"])],
        );
        assert_eq!(check_params(&tls).len(), 1);
        assert_eq!(
            param_values(&tls, "external_addresses"),
            vec!["a.com:443", "b.io:8443"]
        );
        assert!(
            check_params(&rule("dnsManipulation", &[("a", &[])]))[0]
                .message
                .contains("takes no parameters")
        );
    }
}
