//! The problems reported: sensitive intents without the binding's opt-in (difference 12),
//! engines switched off or not installed, intents not in the catalog, and bad parameters.

use crate::builders::*;
use crate::k8tls::{addresses_config_map, cron_job};
use crate::kyverno::runtime_patch;
use nimbus_api::{ALLOW_SENSITIVE_ANNOTATION, ClusterNimbusPolicy, NimbusPolicy, condition};
use nimbus_core::catalog::Engine;
use nimbus_core::engines::{Environment, Problem};
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn problem(intent: &str, reason: &'static str, message: &str, blocking: bool) -> Problem {
    Problem {
        intent: intent.into(),
        reason,
        message: message.into(),
        blocking,
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
// Engines switched off or not installed
// ---------------------------------------------------------------------------------------------

enum Input {
    Namespaced(NimbusPolicy),
    Cluster(ClusterNimbusPolicy),
}

/// What an intent gets when some of its engines are switched off or not installed: the objects
/// of the others, and a problem that is blocking only when nothing enforces the intent. Where
/// an engine is both switched off and not installed, the reason says disabled, as the message
/// does (enabling the engine is what the user has to do first).
#[test]
fn engine_availability() {
    struct Case {
        case: &'static str,
        enabled: Vec<Engine>,
        installed: Vec<Engine>,
        input: Input,
        objects: &'static [(Engine, &'static str)],
        problems: Vec<Problem>,
    }
    let cases = [
        Case {
            case: "not installed: partly and wholly",
            enabled: Engine::ALL.to_vec(),
            installed: all_but(Engine::KubeArmor),
            input: Input::Namespaced(sib_np(
                selector(),
                vec![
                    block("dnsManipulation", "d"),
                    block("swDeploymentTools", "d"),
                ],
            )),
            objects: &[(
                Engine::NetworkPolicy,
                "NetworkPolicy/web-binding-dnsmanipulation",
            )],
            problems: vec![
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
            ],
        },
        Case {
            case: "disabled",
            enabled: all_but(Engine::Kyverno),
            installed: Engine::ALL.to_vec(),
            input: Input::Namespaced(sib_np(selector(), vec![block("cocoWorkload", "d")])),
            objects: &[],
            problems: vec![problem(
                "cocoWorkload",
                condition::REASON_ENGINE_DISABLED,
                "intent `cocoWorkload` is not enforced: kyverno (disabled)",
                true,
            )],
        },
        Case {
            // The only missing engine is switched off, not uninstalled: the reason must say so,
            // as the message does.
            case: "disabled, partly",
            enabled: all_but(Engine::Kyverno),
            installed: Engine::ALL.to_vec(),
            input: Input::Namespaced(sib_np(selector(), vec![block("escapeToHost", "d")])),
            objects: &[
                (
                    Engine::KubeArmor,
                    "KubeArmorPolicy/web-binding-escapetohost-disallowchroot",
                ),
                (
                    Engine::KubeArmor,
                    "KubeArmorPolicy/web-binding-escapetohost-disallowcapabilities",
                ),
                (
                    Engine::KubeArmor,
                    "KubeArmorPolicy/web-binding-escapetohost-swdeploymenttools",
                ),
            ],
            problems: vec![problem(
                "escapeToHost",
                condition::REASON_ENGINE_DISABLED,
                "intent `escapeToHost` is enforced only in part: kyverno (disabled)",
                false,
            )],
        },
        Case {
            case: "disabled and not installed",
            enabled: vec![],
            installed: vec![],
            input: Input::Namespaced(sib_np(selector(), vec![block("swDeploymentTools", "d")])),
            objects: &[],
            problems: vec![problem(
                "swDeploymentTools",
                condition::REASON_ENGINE_DISABLED,
                "intent `swDeploymentTools` is not enforced: kubearmor (disabled)",
                true,
            )],
        },
        Case {
            case: "KubeArmor installed but disabled, Kyverno enabled but not installed",
            enabled: vec![Engine::NetworkPolicy, Engine::Kyverno],
            installed: vec![Engine::NetworkPolicy, Engine::KubeArmor],
            input: Input::Namespaced(sib_np(selector(), vec![block("escapeToHost", "d")])),
            objects: &[],
            problems: vec![problem(
                "escapeToHost",
                condition::REASON_ENGINE_DISABLED,
                "intent `escapeToHost` is not enforced: kubearmor (disabled), kyverno (not installed)",
                true,
            )],
        },
        Case {
            case: "no engine at all, for a cluster policy",
            enabled: vec![Engine::K8tls],
            installed: vec![],
            input: Input::Cluster(cwnp(
                all_namespaces(),
                Value::Null,
                vec![block("assessTLS", "d")],
            )),
            objects: &[],
            problems: vec![problem(
                "assessTLS",
                condition::REASON_ENGINE_NOT_INSTALLED,
                "intent `assessTLS` is not enforced: k8tls (not installed)",
                true,
            )],
        },
    ];
    for c in cases {
        let set = engines(&c.enabled, &c.installed);
        let env = Environment::default();
        let t = match &c.input {
            Input::Namespaced(np) => run_np_with(np, &env, &set),
            Input::Cluster(cwnp) => run_cwnp_with_engines(cwnp, &env, &set),
        };
        let objects: Vec<(Engine, String)> =
            t.objects.iter().map(|g| (g.engine, g.entry())).collect();
        let want: Vec<(Engine, String)> = c
            .objects
            .iter()
            .map(|(engine, entry)| (*engine, (*entry).to_owned()))
            .collect();
        assert_eq!(objects, want, "{}", c.case);
        assert_eq!(t.problems, c.problems, "{}", c.case);
    }
}

// ---------------------------------------------------------------------------------------------
// Intents not in the catalog, bad parameters
// ---------------------------------------------------------------------------------------------

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
