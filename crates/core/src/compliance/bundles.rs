//! Bundles: named sets of intents with parameters, one per framework profile and one for the
//! O-RAN/5G vertical (from the FiGHT mapping), printed as plain SecurityIntents and a binding
//! so that GitOps holds ordinary Nimbus manifests. Each object carries [`BUNDLE_LABEL`].

use super::Framework;
use crate::catalog::{self, BindingKind};
use crate::intents::{id, param};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Label on every object a bundle prints, valued with the bundle's name.
pub const BUNDLE_LABEL: &str = "intent.security.nimbus.com/bundle";

#[derive(Debug)]
pub struct BundleIntent {
    pub id: &'static str,
    pub params: &'static [(&'static str, &'static [&'static str])],
}

#[derive(Debug)]
pub struct Bundle {
    pub name: &'static str,
    pub summary: &'static str,
    /// The framework whose controls it is meant to cover.
    pub framework: Framework,
    pub intents: &'static [BundleIntent],
}

const RESTRICTED: &[(&str, &[&str])] = &[(param::PSA_LEVEL, &["restricted"])];

const fn i(id: &'static str) -> BundleIntent {
    BundleIntent { id, params: &[] }
}

pub static BUNDLES: &[Bundle] = &[
    Bundle {
        name: "mitre-attack",
        summary: "Every intent that addresses an ATT&CK for Containers technique.",
        framework: Framework::Attack,
        intents: &[
            BundleIntent {
                id: id::ESCAPE_TO_HOST,
                params: RESTRICTED,
            },
            i(id::UNAUTHORIZED_SA_TOKEN_ACCESS),
            i(id::SW_DEPLOYMENT_TOOLS),
            i(id::PREVENT_EXECUTION_FROM_TEMP_OR_LOGS_FOLDERS),
            i(id::DENY_EXTERNAL_NETWORK_ACCESS),
        ],
    },
    Bundle {
        name: "cis-kubernetes",
        summary: "The CIS Kubernetes Benchmark v1.12 sections 5.1-5.3 the intents address.",
        framework: Framework::Cis,
        intents: &[
            BundleIntent {
                id: id::ESCAPE_TO_HOST,
                params: RESTRICTED,
            },
            i(id::UNAUTHORIZED_SA_TOKEN_ACCESS),
            i(id::DENY_EXTERNAL_NETWORK_ACCESS),
        ],
    },
    Bundle {
        name: "nsa-cisa",
        summary: "The NSA/CISA Kubernetes Hardening Guide's pod and network controls.",
        framework: Framework::Nsa,
        intents: &[
            BundleIntent {
                id: id::ESCAPE_TO_HOST,
                params: RESTRICTED,
            },
            i(id::UNAUTHORIZED_SA_TOKEN_ACCESS),
            i(id::DENY_EXTERNAL_NETWORK_ACCESS),
        ],
    },
    Bundle {
        name: "oran-5g",
        summary: "O-RAN/5G network functions: the FiGHT techniques the intents address, and \
                  DNS manipulation (FGT5006, cited by Nimbus, withdrawn from FiGHT since).",
        framework: Framework::Fight,
        intents: &[
            i(id::ESCAPE_TO_HOST),
            i(id::SW_DEPLOYMENT_TOOLS),
            i(id::PREVENT_EXECUTION_FROM_TEMP_OR_LOGS_FOLDERS),
            i(id::DNS_MANIPULATION),
            i(id::ASSESS_TLS),
        ],
    },
];

/// Intents no bundle holds, and why: a bundle cannot guess their parameters.
pub static NOT_BUNDLED: &[(&str, &str)] = &[(
    id::NAMESPACE_SANDBOX,
    "grants a role to a group: which group and which role only its author can say",
)];

pub fn bundle(name: &str) -> Option<&'static Bundle> {
    BUNDLES.iter().find(|b| b.name == name)
}

/// Where a bundle is bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A SecurityIntentBinding in this namespace.
    Namespace(String),
    /// A ClusterSecurityIntentBinding over these namespaces (`*`: all).
    Cluster(Vec<String>),
}

/// What `nimbus bundle` prints.
#[derive(Debug)]
pub struct Rendered {
    /// The SecurityIntents, then the binding.
    pub objects: Vec<Value>,
    /// Intents of the bundle left out, because the binding kind cannot enforce them, and why.
    pub skipped: Vec<(&'static str, String)>,
}

/// The bundle's SecurityIntents and one binding of them for `scope`, selecting the workloads
/// whose labels match `selector` (all when empty). Intents the scope's binding kind cannot
/// enforce are left out and listed; sensitive intents are accepted by the binding's
/// allow-sensitive annotation, since printing the bundle is its author's choice.
pub fn render(bundle: &Bundle, scope: &Scope, selector: &BTreeMap<String, String>) -> Rendered {
    let kind = match scope {
        Scope::Namespace(_) => BindingKind::Namespaced,
        Scope::Cluster(_) => BindingKind::Cluster,
    };
    let labels = json!({ BUNDLE_LABEL: bundle.name });
    let mut objects = Vec::new();
    let mut skipped = Vec::new();
    let mut names = Vec::new();
    let mut sensitive = Vec::new();
    for bi in bundle.intents {
        let Some(spec) = catalog::intent(bi.id) else {
            skipped.push((bi.id, "not in the catalog".to_owned()));
            continue;
        };
        if spec.engines_for(kind).is_empty() {
            let only = match kind {
                BindingKind::Namespaced => "only a ClusterSecurityIntentBinding (--cluster)",
                BindingKind::Cluster => "only a SecurityIntentBinding (--namespace)",
            };
            skipped.push((bi.id, format!("{only} enforces it")));
            continue;
        }
        if spec.sensitive {
            sensitive.push(bi.id);
        }
        let name = format!("{}-{}", bundle.name, kebab(bi.id));
        let mut intent = json!({"id": bi.id, "action": "Block"});
        if !bi.params.is_empty() {
            let params: BTreeMap<_, _> = bi.params.iter().copied().collect();
            intent["params"] = json!(params);
        }
        objects.push(json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "kind": "SecurityIntent",
            "metadata": {"name": name, "labels": labels},
            "spec": {"intent": intent},
        }));
        names.push(json!({ "name": name }));
    }
    let workload_selector = json!({ "matchLabels": selector });
    let mut metadata = json!({"name": bundle.name, "labels": labels});
    if !sensitive.is_empty() {
        metadata["annotations"] =
            json!({ nimbus_api::ALLOW_SENSITIVE_ANNOTATION: sensitive.join(",") });
    }
    objects.push(match scope {
        Scope::Namespace(namespace) => {
            metadata["namespace"] = json!(namespace);
            json!({
                "apiVersion": "intent.security.nimbus.com/v1alpha1",
                "kind": "SecurityIntentBinding",
                "metadata": metadata,
                "spec": {"intents": names, "selector": {"workloadSelector": workload_selector}},
            })
        }
        Scope::Cluster(namespaces) => json!({
            "apiVersion": "intent.security.nimbus.com/v1alpha1",
            "kind": "ClusterSecurityIntentBinding",
            "metadata": metadata,
            "spec": {"intents": names, "selector": {
                "nsSelector": {"matchNames": namespaces},
                "workloadSelector": workload_selector,
            }},
        }),
    });
    Rendered { objects, skipped }
}

/// `escapeToHost` -> `escape-to-host`, a valid object name.
fn kebab(id: &str) -> String {
    let mut out = String::new();
    for c in id.chars() {
        if c.is_ascii_uppercase() {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compliance::{MAPPINGS, controls};
    use std::collections::BTreeSet;

    #[test]
    fn each_framework_has_a_bundle_of_exactly_the_intents_that_address_it() {
        for framework in Framework::ALL {
            let bundle = BUNDLES
                .iter()
                .find(|b| b.framework == framework)
                .unwrap_or_else(|| panic!("no bundle for {framework}"));
            let held: BTreeSet<_> = bundle.intents.iter().map(|i| i.id).collect();
            let addressing: BTreeSet<_> = MAPPINGS
                .iter()
                .filter(|m| m.framework == framework)
                .map(|m| m.intent)
                .filter(|i| NOT_BUNDLED.iter().all(|(n, _)| n != i))
                .collect();
            assert_eq!(held, addressing, "{}", bundle.name);
            // Every current control of the framework the catalog names is claimed by an
            // intent of the bundle, or by one no bundle can hold.
            for c in controls(framework) {
                assert!(
                    MAPPINGS.iter().any(|m| m.framework == framework
                        && m.control == c.id
                        && (held.contains(m.intent)
                            || NOT_BUNDLED.iter().any(|(n, _)| *n == m.intent))),
                    "{}: {} uncovered",
                    bundle.name,
                    c.id
                );
            }
        }
    }

    #[test]
    fn bundle_params_are_valid_catalog_params() {
        for b in BUNDLES {
            for bi in b.intents {
                let spec = catalog::intent(bi.id).unwrap();
                for (name, values) in bi.params {
                    let p = spec
                        .param(name)
                        .unwrap_or_else(|| panic!("{}: {name}", bi.id));
                    for v in *values {
                        assert!(
                            crate::params::check(p.kind, v).is_ok(),
                            "{}: {name}={v}",
                            bi.id
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn renders_labelled_intents_and_one_binding() {
        let oran = bundle("oran-5g").unwrap();
        let selector = BTreeMap::from([("app".to_owned(), "amf".to_owned())]);
        let ns = render(oran, &Scope::Namespace("core".into()), &selector);
        assert_eq!(
            ns.skipped.iter().map(|s| s.0).collect::<Vec<_>>(),
            ["assessTLS"]
        );
        assert_eq!(ns.objects.len(), 5);
        let binding = ns.objects.last().unwrap();
        assert_eq!(binding["kind"], "SecurityIntentBinding");
        assert_eq!(binding["metadata"]["namespace"], "core");
        assert_eq!(binding["metadata"]["labels"][BUNDLE_LABEL], "oran-5g");
        assert_eq!(
            binding["spec"]["selector"]["workloadSelector"]["matchLabels"]["app"],
            "amf"
        );
        assert_eq!(
            binding["spec"]["intents"][0]["name"],
            "oran-5g-escape-to-host"
        );
        assert!(binding["metadata"]["annotations"].is_null());
        let cluster = render(oran, &Scope::Cluster(vec!["*".into()]), &BTreeMap::new());
        assert!(cluster.skipped.is_empty());
        let binding = cluster.objects.last().unwrap();
        assert_eq!(binding["kind"], "ClusterSecurityIntentBinding");
        assert_eq!(
            binding["metadata"]["annotations"][nimbus_api::ALLOW_SENSITIVE_ANNOTATION],
            "assessTLS"
        );
        let cis = render(
            bundle("cis-kubernetes").unwrap(),
            &Scope::Namespace("a".into()),
            &selector,
        );
        assert_eq!(
            cis.objects[0]["spec"]["intent"]["params"]["psaLevel"][0],
            "restricted"
        );
    }
}
