//! Bundles: named sets of intents with parameters, one per framework profile and one for the
//! O-RAN/5G vertical (from the FiGHT mapping), printed as plain SecurityIntents and a binding
//! so that GitOps holds ordinary Nimbus manifests. Each object carries [`BUNDLE_LABEL`].

use super::Framework;
use crate::catalog::{self, BindingKind, IntentSpec};
use crate::intents::{id, param};
use nimbus_api::SecurityIntent;
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
        let intent = json!({"id": bi.id, "action": "Block", "params": explicit_params(spec, bi)});
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

/// Every parameter the intent takes, with the bundle's value, else its default, else none
/// (`[]`, which the engines read as absent): a bundle applied over an intent that exists
/// already (a client-side `kubectl apply` merges into it) leaves none of its earlier values.
fn explicit_params(spec: &IntentSpec, bi: &BundleIntent) -> BTreeMap<&'static str, Vec<String>> {
    spec.params
        .iter()
        .map(|p| {
            let given = bi.params.iter().find(|(name, _)| *name == p.name);
            let values: Vec<String> = match (given, p.default) {
                (Some((_, values)), _) => values.iter().map(|v| (*v).to_owned()).collect(),
                (None, Some(default)) => vec![default.to_owned()],
                (None, None) => Vec::new(),
            };
            (p.name, values)
        })
        .collect()
}

/// How a live SecurityIntent differs from the one a bundle printed (`expected`), in what the
/// engines act on: its ID, its action, and the value each parameter takes (given, else its
/// default), plus any parameter the intent does not take. Empty when it acts as printed.
pub fn differences(expected: &SecurityIntent, live: &SecurityIntent) -> Vec<String> {
    let (want, have) = (&expected.spec.intent, &live.spec.intent);
    let mut out = Vec::new();
    if want.id != have.id {
        out.push(format!("id is {}, the bundle's is {}", have.id, want.id));
    }
    if want.action != have.action {
        out.push(format!(
            "action is {}, the bundle's is {}",
            have.action, want.action
        ));
    }
    let (want_params, have_params) = (
        want.params.clone().unwrap_or_default(),
        have.params.clone().unwrap_or_default(),
    );
    let spec = catalog::intent(&want.id);
    for p in spec.map_or(&[][..], |s| s.params) {
        let (w, h) = (
            effective(p, want_params.get(p.name)),
            effective(p, have_params.get(p.name)),
        );
        if w != h {
            out.push(format!(
                "params.{} is {:?}, the bundle's is {:?}",
                p.name, h, w
            ));
        }
    }
    for name in have_params.keys() {
        if spec.is_none_or(|s| s.param(name).is_none()) {
            out.push(format!(
                "params.{name} is set, and the bundle's {} takes no such parameter",
                want.id
            ));
        }
    }
    out
}

/// The values an engine uses for `param` given `values` (see [`crate::intents::param_values`]).
fn effective(param: &crate::intents::Param, values: Option<&Vec<String>>) -> Vec<String> {
    let take = if param.multiple { usize::MAX } else { 1 };
    let valid: Vec<String> = values
        .into_iter()
        .flatten()
        .take(take)
        .filter(|v| crate::params::check(param.kind, v).is_ok())
        .cloned()
        .collect();
    if valid.is_empty() {
        param.default.map(str::to_owned).into_iter().collect()
    } else {
        valid
    }
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

    /// A bundle writes every parameter its intents take, so a merge into an intent someone
    /// else created keeps none of theirs; `differences` names what a live intent changes.
    #[test]
    fn a_bundle_writes_every_parameter_and_names_what_a_live_intent_changes() {
        let oran = bundle("oran-5g").expect("oran-5g");
        let cluster = render(oran, &Scope::Cluster(vec!["*".into()]), &BTreeMap::new());
        let intents: Vec<SecurityIntent> = cluster.objects[..cluster.objects.len() - 1]
            .iter()
            .map(|o| serde_json::from_value(o.clone()).expect("a SecurityIntent"))
            .collect();
        for si in &intents {
            let spec = catalog::intent(&si.spec.intent.id).expect("in the catalog");
            let params = si.spec.intent.params.clone().expect("params written");
            let written: Vec<&str> = params.keys().map(String::as_str).collect();
            let taken: Vec<&str> = spec.params.iter().map(|p| p.name).collect();
            let mut taken_sorted = taken.clone();
            taken_sorted.sort_unstable();
            assert_eq!(written, taken_sorted, "{}", spec.id);
            assert!(differences(si, si).is_empty());
        }
        let tls = intents
            .iter()
            .find(|i| i.spec.intent.id == "assessTLS")
            .expect("assessTLS");
        assert_eq!(
            serde_json::to_value(&tls.spec.intent.params).expect("json"),
            json!({"external_addresses": [], "schedule": ["@weekly"]})
        );

        let live = |intent: Value| -> SecurityIntent {
            serde_json::from_value(json!({
                "apiVersion": "intent.security.nimbus.com/v1alpha1", "kind": "SecurityIntent",
                "metadata": {"name": "oran-5g-assess-t-l-s"}, "spec": {"intent": intent}
            }))
            .expect("a SecurityIntent")
        };
        for (intent, expected) in [
            // As an earlier bundle printed it (no params): the same defaults, no difference.
            (json!({"id": "assessTLS", "action": "Block"}), vec![]),
            (
                json!({"id": "assessTLS", "action": "Block", "params": {"schedule": ["@weekly"]}}),
                vec![],
            ),
            // A squatter's target survives a merge unless the bundle writes it.
            (
                json!({"id": "assessTLS", "action": "Block",
                       "params": {"external_addresses": ["db.internal:443"], "schedule": ["@weekly"]}}),
                vec![r#"params.external_addresses is ["db.internal:443"], the bundle's is []"#],
            ),
            (
                json!({"id": "dnsManipulation", "action": "Audit",
                       "params": {"mode": ["x"]}}),
                vec![
                    "id is dnsManipulation, the bundle's is assessTLS",
                    "action is Audit, the bundle's is Block",
                    "params.mode is set, and the bundle's assessTLS takes no such parameter",
                ],
            ),
        ] {
            assert_eq!(
                differences(tls, &live(intent.clone())),
                expected,
                "{intent}"
            );
        }
    }
}
