//! What keeps an intent from being enforced before any engine runs: an ID missing from the
//! catalog, bad parameters, a sensitive intent not allowed, or no engine in force for it.

use super::engine::{Engine, enforcing};
use super::engine_set::{EngineSet, MECHANISMS};
use super::translation::Problem;
use crate::intents::{self, BindingKind};
use nimbus_api::{NimbusRule, condition};
use std::collections::BTreeSet;

/// What keeps `rule`, bound by a binding of `kind`, from being enforced before any engine runs:
/// what [`check_intent`] finds, or no active engine for it.
pub fn check_rule(rule: &NimbusRule, kind: BindingKind, engines: &EngineSet) -> Vec<Problem> {
    let mut problems = check_intent(rule);
    if let Some(spec) = intents::intent(&rule.id) {
        problems.extend(coverage(spec, rule, kind, engines));
    }
    problems
}

/// What is wrong with an intent whatever binds it: an ID missing from the catalog, or bad
/// parameters.
pub fn check_intent(rule: &NimbusRule) -> Vec<Problem> {
    if intents::intent(&rule.id).is_none() {
        return vec![Problem::new(
            rule,
            condition::REASON_UNSUPPORTED_INTENT,
            format!("intent `{}` is not in the catalog", rule.id),
        )];
    }
    intents::check_params(rule)
        .into_iter()
        .map(|p| Problem {
            blocking: p.blocking,
            ..Problem::new(
                rule,
                condition::REASON_INVALID_PARAMETER,
                format!("intent `{}`: {p}", rule.id),
            )
        })
        .collect()
}

/// Why `rule` is not enforced when its intent is sensitive and `allowed` (the binding's
/// allow-sensitive annotation) does not list it. Binding controllers call this with the
/// binding's own annotations to report it on the binding.
pub fn sensitive_problem(rule: &NimbusRule, allowed: &BTreeSet<String>) -> Option<Problem> {
    let spec = intents::intent(&rule.id)?;
    (spec.sensitive && !allowed.contains(&rule.id)).then(|| {
        Problem::new(
            rule,
            condition::REASON_SENSITIVE_INTENT_NOT_ALLOWED,
            format!(
                "intent `{}` is sensitive and not enforced: the binding must list it in its \
                 {} annotation",
                rule.id,
                nimbus_api::ALLOW_SENSITIVE_ANNOTATION
            ),
        )
    })
}

/// Problems with who enforces `spec` for a binding of `kind`: nobody can (wrong binding kind),
/// every engine that could is switched off or not installed, or only some are.
fn coverage(
    spec: &intents::IntentSpec,
    rule: &NimbusRule,
    kind: BindingKind,
    engines: &EngineSet,
) -> Vec<Problem> {
    let candidates = enforcing(spec.id, Some(kind));
    if candidates.is_empty() {
        let other = match kind {
            BindingKind::Namespaced => "a ClusterSecurityIntentBinding",
            BindingKind::Cluster => "a SecurityIntentBinding",
        };
        return vec![Problem::new(
            rule,
            condition::REASON_UNSUPPORTED_INTENT,
            format!("intent `{}` is enforced only through {other}", rule.id),
        )];
    }
    let replaced = stand_ins(spec, kind, engines);
    let candidates: BTreeSet<Engine> = candidates
        .into_iter()
        .filter(|e| {
            !kind
                .origins()
                .iter()
                .filter(|o| e.handles(spec.id, **o))
                .all(|o| engines.preference.stands_by(*e, *o, engines))
        })
        .collect();
    if candidates.is_empty() {
        return vec![Problem::new(
            rule,
            condition::REASON_UNSUPPORTED_INTENT,
            format!(
                "intent `{}` is not enforced: the engines that can enforce it stand by for the \
                 one in force (engine preference {})",
                rule.id, engines.preference
            ),
        )];
    }
    let external: Vec<String> = candidates
        .iter()
        .filter(|e| !engines.active(**e) && engines.external.contains(*e))
        .map(|e| e.to_string())
        .collect();
    let missing: Vec<String> = candidates
        .iter()
        .filter(|e| !engines.active(**e) && !engines.external.contains(*e))
        .map(|e| match engines.not_installed.get(e) {
            Some(why) if engines.enabled.contains(e) => format!("{e} (not installed: {why})"),
            _ if engines.enabled.contains(e) => format!("{e} (not installed)"),
            _ => format!("{e} (disabled)"),
        })
        .collect();
    let mut problems = Vec::new();
    if !external.is_empty() {
        problems.push(Problem {
            blocking: false,
            ..Problem::new(
                rule,
                condition::REASON_ENGINE_DISABLED,
                format!(
                    "intent `{}` is enforced by an external adapter: {}",
                    rule.id,
                    external.join(", ")
                ),
            )
        });
    }
    for (engine, chosen) in replaced {
        let (reason, why) = if engines.enabled.contains(&engine) {
            (condition::REASON_ENGINE_NOT_INSTALLED, "not installed")
        } else {
            (condition::REASON_ENGINE_DISABLED, "disabled")
        };
        problems.push(Problem {
            blocking: false,
            ..Problem::new(
                rule,
                reason,
                format!(
                    "intent `{}` is enforced by {chosen} in place of {engine} ({why}; engine \
                     preference {})",
                    rule.id,
                    engines.preference.among(&chosen)
                ),
            )
        });
    }
    if missing.is_empty() {
        return problems;
    }
    problems.push(unenforced(rule, &candidates, &missing, engines));
    problems
}

/// The engines of `spec` standing in for others: of one mechanism, only the engine preferred
/// at an origin is a candidate there; it stands in for those preferred to it that are not in
/// force, which the status says. As (not in force, standing in) pairs.
fn stand_ins(
    spec: &intents::IntentSpec,
    kind: BindingKind,
    engines: &EngineSet,
) -> Vec<(Engine, Engine)> {
    let mut replaced: Vec<(Engine, Engine)> = Vec::new();
    for origin in kind.origins() {
        for mechanism in MECHANISMS {
            // A choice per binding compares what the engines do for the binding as a whole.
            let handles = |engine: Engine| match mechanism.per_binding {
                true => kind.origins().iter().any(|o| engine.handles(spec.id, *o)),
                false => engine.handles(spec.id, *origin),
            };
            let Some(chosen) = engines.preference.in_force(mechanism, *origin, engines) else {
                continue;
            };
            if !handles(chosen) {
                continue;
            }
            for engine in engines.preference.preferred_to(chosen, *origin) {
                if handles(engine) && !replaced.contains(&(engine, chosen)) {
                    replaced.push((engine, chosen));
                }
            }
        }
    }
    replaced
}

/// The problem of the candidate engines `missing` (neither in force nor external): the intent
/// is not enforced (none left), or only in part.
fn unenforced(
    rule: &NimbusRule,
    candidates: &BTreeSet<Engine>,
    missing: &[String],
    engines: &EngineSet,
) -> Problem {
    let none_left = missing.len() == candidates.len();
    let reason = if candidates.iter().any(|e| !engines.enabled.contains(e)) {
        condition::REASON_ENGINE_DISABLED
    } else {
        condition::REASON_ENGINE_NOT_INSTALLED
    };
    let message = if none_left {
        format!(
            "intent `{}` is not enforced: {}",
            rule.id,
            missing.join(", ")
        )
    } else {
        format!(
            "intent `{}` is enforced only in part: {}",
            rule.id,
            missing.join(", ")
        )
    };
    Problem {
        blocking: none_left,
        ..Problem::new(rule, reason, message)
    }
}
