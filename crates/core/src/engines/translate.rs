//! Translation: a NimbusPolicy or ClusterNimbusPolicy, plus what the cluster looks like,
//! becomes the native objects every active engine wants, and the problems that keep an intent
//! from being enforced.

use super::build::{Emitted, Output, Rule, excepted};
use super::checks::{check_rule, sensitive_problem};
use super::engine_set::EngineSet;
use super::kyverno::KyvernoApi;
use super::translation::{Environment, Generated, PolicyInput, Problem, Translation};
use super::{AUDIT, AuditForm, EXCEPTION_KINDS, Engine, NativeKind};
use crate::exceptions::workloads::{self, Reach};
use crate::intents::{self};
use crate::names::rule_keys;
use nimbus_api::condition;

/// Translates `policy` with every active engine, in rule order and, within a rule, engine
/// order. Each rule is checked against the catalog: unknown IDs, bad parameters and intents
/// no active engine can enforce become problems.
pub fn translate(policy: &PolicyInput, env: &Environment, engines: &EngineSet) -> Translation {
    let mut out = Translation::default();
    let keys = rule_keys(policy.rules);
    for (index, (rule, key)) in policy.rules.iter().zip(keys).enumerate() {
        out.problems
            .extend(check_rule(rule, policy.origin.binding_kind(), engines));
        let Some(spec) = intents::intent(&rule.id) else {
            continue;
        };
        // Reported only where an engine would act: a cluster binding's namespace policies
        // carry assessTLS too, but only its cluster policy runs the scanner.
        let acts = Engine::ALL
            .into_iter()
            .any(|e| engines.acts(e, policy.origin) && e.handles(spec.id, policy.origin));
        if acts && let Some(problem) = sensitive_problem(rule, &policy.allowed_sensitive) {
            out.problems.push(problem);
            continue;
        }
        let mut enforced = false;
        let mut failures = Vec::new();
        let mut no_audit_form = Vec::new();
        for engine in Engine::ALL {
            if !engines.acts(engine, policy.origin) || !engine.handles(spec.id, policy.origin) {
                continue;
            }
            if rule.rule.action == AUDIT
                && engine
                    .spec()
                    .enforcing(&rule.id)
                    .is_some_and(|e| e.audit == AuditForm::None)
            {
                no_audit_form.push(engine.name());
                continue;
            }
            let rule = Rule {
                spec: rule,
                key: &key,
            };
            match (engine.spec().translate)(policy, &rule, env)
                .and_then(|emitted| served(emitted, engine, &rule, engines))
            {
                Ok(emitted) => {
                    enforced |= !emitted.objects.is_empty();
                    out.problems.extend(not_honoured(
                        policy,
                        &rule,
                        engine,
                        reach(engine, env),
                        !emitted.objects.is_empty(),
                    ));
                    out.problems.extend(emitted.warnings);
                    out.objects
                        .extend(emitted.objects.into_iter().map(|(kind, object)| Generated {
                            rule: index,
                            engine,
                            kind,
                            object,
                        }))
                }
                Err(problem) => failures.push(problem),
            }
        }
        if !no_audit_form.is_empty() {
            failures.push(Problem::new(
                rule,
                condition::REASON_NO_AUDIT_FORM,
                format!(
                    "intent `{}` is audited: {} cannot report without enforcing, so {} nothing \
                     for it",
                    rule.id,
                    no_audit_form.join(", "),
                    if no_audit_form.len() == 1 {
                        "it writes"
                    } else {
                        "they write"
                    },
                ),
            ));
        }
        // An engine that cannot act leaves the intent unenforced only if no other engine
        // enforces it (KubeArmor cannot express a selector NetworkPolicy can, for example).
        out.problems.extend(failures.into_iter().map(|p| Problem {
            blocking: !enforced,
            ..p
        }));
    }
    out
}

/// How `engine` picks out the workloads it leaves out: the admission engine and Kyverno's CEL
/// kinds judge the admitted object, its name and owners ([`crate::exceptions::workloads::cel`]);
/// the others select pods by labels only (Kyverno's legacy `PolicyException` names resources,
/// but not a pod by the workload that made it).
fn reach(engine: Engine, env: &Environment) -> Reach {
    match engine {
        Engine::Admission => Reach::Names,
        Engine::Kyverno if env.kyverno == KyvernoApi::Cel => Reach::Names,
        _ => Reach::Labels,
    }
}

/// A warning when exceptions in force name `rule`'s intent and `engine`, which enforces it
/// (`writes`), does not leave their workloads out: it honours no exception to the intent, or,
/// reaching workloads by labels only, not those naming workloads (it leaves them out of
/// nothing rather than let out every workload with the same labels).
fn not_honoured(
    policy: &PolicyInput,
    rule: &Rule,
    engine: Engine,
    reach: Reach,
    writes: bool,
) -> Option<Problem> {
    let honours_intent = engine
        .spec()
        .honours_exceptions
        .contains(&rule.spec.id.as_str());
    let names: Vec<String> = excepted(policy, rule)
        .into_iter()
        .filter(|e| !honours_intent || !workloads::honoured(reach, e))
        .map(|e| e.describe())
        .collect();
    if !writes || names.is_empty() {
        return None;
    }
    let message = if honours_intent {
        format!(
            "{engine} selects workloads by labels only and cannot leave out only the workloads \
             an exception names: it still enforces intent `{}` on the workloads {} let out",
            rule.spec.id,
            names.join(", ")
        )
    } else {
        format!(
            "{engine} does not honour exceptions to intent `{}`: it still enforces it on the \
             workloads {} let out",
            rule.spec.id,
            names.join(", ")
        )
    };
    Some(Problem {
        blocking: false,
        ..rule.problem(condition::REASON_EXCEPTION_NOT_HONOURED, message)
    })
}

/// An engine's objects for a rule, unless one is of an optional kind the API server does not
/// serve: then the engine does not enforce the rule, and says why. Exceptions of a kind not
/// served are left out instead: the engine still enforces, on the excepted workloads too.
fn served(mut emitted: Emitted, engine: Engine, rule: &Rule, engines: &EngineSet) -> Output {
    let unserved_exception =
        |kind: &&NativeKind| EXCEPTION_KINDS.contains(kind) && engines.unserved.contains(kind);
    if let Some((kind, _)) = emitted.objects.iter().find(|(k, _)| unserved_exception(k)) {
        emitted.warnings.push(Problem {
            blocking: false,
            ..rule.problem(
                condition::REASON_EXCEPTION_NOT_HONOURED,
                format!(
                    "{engine} honours exceptions to intent `{}` with a {}, which the API server \
                     does not serve ({}): it still enforces it on the excepted workloads",
                    rule.spec.id,
                    kind.kind,
                    kind.api_version()
                ),
            )
        });
        emitted.objects.retain(|(k, _)| !unserved_exception(k));
    }
    match emitted
        .objects
        .iter()
        .find(|(kind, _)| engines.unserved.contains(kind))
    {
        Some((kind, _)) => Err(rule.problem(
            condition::REASON_ENGINE_NOT_INSTALLED,
            format!(
                "{engine} enforces intent `{}` with a {}, which the API server does not serve \
                 ({})",
                rule.spec.id,
                kind.kind,
                kind.api_version()
            ),
        )),
        None => Ok(emitted),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_engines_judging_the_admitted_object_reach_workloads_by_name() {
        let env = |kyverno| Environment {
            kyverno,
            ..Environment::default()
        };
        // (engine, Kyverno API, reach)
        let cases = [
            (Engine::Admission, KyvernoApi::Legacy, Reach::Names),
            (Engine::Kyverno, KyvernoApi::Cel, Reach::Names),
            (Engine::Kyverno, KyvernoApi::Legacy, Reach::Labels),
            (Engine::NetworkPolicy, KyvernoApi::Cel, Reach::Labels),
            (Engine::ClusterNetworkPolicy, KyvernoApi::Cel, Reach::Labels),
            (Engine::KubeArmor, KyvernoApi::Cel, Reach::Labels),
        ];
        for (engine, api, want) in cases {
            assert_eq!(reach(engine, &env(api)), want, "{engine} with {api:?}");
        }
    }
}
