//! Every `Ready` condition the operator writes, and how it is derived: a policy's from the
//! problems of its translation and what applying it did, a binding's from its policies' own
//! results plus what blocks the binding itself. Pure: no I/O.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use nimbus_api::{Condition, NimbusPolicyStatus, condition};
use nimbus_core::engines::Problem;
use std::collections::BTreeMap;

/// A `Ready` condition (the transition time is filled in by
/// [`crate::apply::status`]).
pub fn ready(
    ok: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> Condition {
    condition(
        if ok { "True" } else { "False" },
        reason,
        message.into(),
        generation,
    )
}

/// `Ready=Unknown`: the outcome is not known yet.
pub fn reconciling(message: String, generation: Option<i64>) -> Condition {
    condition(
        "Unknown",
        condition::REASON_RECONCILING,
        message,
        generation,
    )
}

/// `text` cut at a character boundary so that, with the `… (N more bytes)` it then ends in, it
/// is at most `max` bytes long.
pub(crate) fn bounded(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    // Room for the suffix: the ellipsis (3 bytes), up to 20 digits and the words.
    let mut cut = max.saturating_sub(40);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let dropped = text.len() - cut;
    text.truncate(cut);
    text.push_str(&format!("… ({dropped} more bytes)"));
    text
}

/// Longest condition message written; longer ones are cut (an object's whole size is bounded
/// by etcd, and a list of thousands of names helps nobody).
const MAX_MESSAGE: usize = 4096;

fn condition(status: &str, reason: &str, message: String, generation: Option<i64>) -> Condition {
    let message = bounded(message, MAX_MESSAGE);
    Condition {
        type_: condition::READY.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

/// The `Ready` condition a generated policy reports for what it holds now; `None` while it is
/// being (re)written or its status is older than its spec.
pub fn policy_result(
    policy: Option<&(impl Resource + ?Sized)>,
    status: Option<&NimbusPolicyStatus>,
    just_written: bool,
) -> Option<Condition> {
    let generation = policy?.meta().generation;
    let status = status.filter(|s| !just_written && s.observed_generation == generation)?;
    status
        .conditions
        .iter()
        .find(|c| c.type_ == condition::READY)
        .cloned()
}

/// What keeps a binding from being in force besides its policies' own results.
pub struct Blocker {
    pub reason: &'static str,
    pub message: String,
}

/// A binding's `Ready`, from what its generated policies report (so it never claims more than
/// is in force): false when something blocks it or a policy is not ready, unknown while a
/// policy has not been translated at its current generation, true otherwise with the policies'
/// notes (partial enforcement). `policies` pairs each policy's name with its result.
pub fn binding_ready(
    generation: Option<i64>,
    blockers: Vec<Blocker>,
    policies: &[(String, Option<Condition>)],
) -> Condition {
    let mut failed = blockers.first().map(|b| b.reason.to_owned());
    let mut notes: Vec<String> = blockers.into_iter().map(|b| b.message).collect();
    // Cluster bindings repeat one message over many namespaces: group them.
    let mut by_message: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut pending = Vec::new();
    for (name, result) in policies {
        match result {
            None => pending.push(name.as_str()),
            Some(c) => {
                if c.status != "True" {
                    failed.get_or_insert_with(|| c.reason.clone());
                }
                if !c.message.is_empty() {
                    by_message.entry(&c.message).or_default().push(name);
                }
            }
        }
    }
    notes.extend(
        by_message
            .into_iter()
            .map(|(message, names)| format!("{}: {message}", names.join(", "))),
    );
    let message = notes.join("; ");
    match failed {
        Some(reason) => ready(false, &reason, message, generation),
        None if !pending.is_empty() => reconciling(
            format!("waiting for {} to be translated", pending.join(", ")),
            generation,
        ),
        None => ready(true, condition::REASON_READY, message, generation),
    }
}

/// Whether a new status would only say "not known yet" (`Ready=Unknown`) about a generation
/// the current one does not describe. Such a write tells nothing: a status behind its object's
/// generation already says the change is not done, and what decides it (the generated
/// policies' reports) triggers the next reconcile. Skipping it saves a write per change.
pub fn only_pending(current: &[Condition], new: &[Condition]) -> bool {
    let ready = |conditions: &[Condition]| {
        conditions
            .iter()
            .find(|c| c.type_ == condition::READY)
            .cloned()
    };
    match ready(new) {
        Some(new) if new.status == "Unknown" => ready(current)
            .is_none_or(|current| current.observed_generation != new.observed_generation),
        _ => false,
    }
}

/// `Ready` from the problems of a translation: false with the first blocking problem's reason
/// when an intent is not enforced at all; true otherwise, with partial problems in the message.
pub fn policy_ready(problems: &[Problem], generation: Option<i64>) -> Condition {
    let message = problems
        .iter()
        .map(|p| p.message.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    match problems.iter().find(|p| p.blocking) {
        Some(p) => ready(false, p.reason, message, generation),
        None => ready(true, condition::REASON_READY, message, generation),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(reason: &'static str, message: &str, blocking: bool) -> Problem {
        Problem {
            intent: "i".into(),
            reason,
            message: message.into(),
            blocking,
        }
    }

    #[test]
    fn not_known_yet_is_written_only_over_a_status_of_the_same_generation() {
        let pending = |generation| reconciling("waiting".into(), Some(generation));
        let done = |generation| ready(true, condition::REASON_READY, "", Some(generation));
        // Nothing reported yet, or a report on an older generation: the stale status says it.
        assert!(only_pending(&[], &[pending(1)]));
        assert!(only_pending(&[done(1)], &[pending(2)]));
        // The same generation turning not known (an intent changed under it): say so.
        assert!(!only_pending(&[done(2)], &[pending(2)]));
        // Anything known is written.
        assert!(!only_pending(&[], &[done(1)]));
        assert!(!only_pending(&[done(1)], &[ready(false, "X", "", Some(2))]));
    }

    #[test]
    fn a_policy_is_ready_unless_an_intent_is_left_unenforced() {
        let partial = problem(condition::REASON_ENGINE_NOT_INSTALLED, "in part", false);
        let c = policy_ready(std::slice::from_ref(&partial), Some(3));
        assert_eq!((c.status.as_str(), c.message.as_str()), ("True", "in part"));
        assert_eq!(c.observed_generation, Some(3));
        let none = problem(condition::REASON_UNSUPPORTED_INTENT, "not at all", true);
        let c = policy_ready(&[partial, none], Some(3));
        assert_eq!(c.status, "False");
        assert_eq!(c.reason, condition::REASON_UNSUPPORTED_INTENT);
        assert_eq!(c.message, "in part; not at all");
    }

    #[test]
    fn a_binding_is_never_readier_than_its_policies() {
        let ok = |message: &str| Some(ready(true, condition::REASON_READY, message, Some(1)));
        let down = Some(ready(
            false,
            condition::REASON_APPLY_FAILED,
            "boom",
            Some(1),
        ));
        let named = |rows: Vec<(&str, Option<Condition>)>| -> Vec<(String, Option<Condition>)> {
            rows.into_iter().map(|(n, c)| (n.to_owned(), c)).collect()
        };

        let c = binding_ready(
            Some(2),
            Vec::new(),
            &named(vec![("a", ok("")), ("b", ok(""))]),
        );
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "Ready"));

        // One message over many namespaces is grouped.
        let c = binding_ready(
            Some(2),
            Vec::new(),
            &named(vec![("a", ok("m")), ("b", ok("m"))]),
        );
        assert_eq!(c.message, "a, b: m");

        let c = binding_ready(
            Some(2),
            Vec::new(),
            &named(vec![("a", ok("")), ("b", None)]),
        );
        assert_eq!(c.status, "Unknown");
        assert_eq!(c.message, "waiting for b to be translated");

        let c = binding_ready(
            Some(2),
            Vec::new(),
            &named(vec![("a", ok("")), ("b", down)]),
        );
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "ApplyFailed")
        );
        assert_eq!(c.message, "b: boom");

        let blocker = Blocker {
            reason: condition::REASON_INTENT_NOT_FOUND,
            message: "SecurityIntents not found: x".into(),
        };
        let c = binding_ready(Some(2), vec![blocker], &named(vec![("a", ok(""))]));
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "IntentNotFound")
        );
        assert_eq!(c.observed_generation, Some(2));
    }
}
