//! The verdicts of the templates OCM delivers, and their messages. A message changes only when
//! the verdict does: it names causes (reason codes, workloads not protected, intents audited),
//! never counts of healthy workloads, so that scaling or adding a protected workload reports
//! nothing new.

use super::{Compliance, Observed, Selected, Verdict};
use nimbus_api::posture::{Reference, Verdict as Posture};
use std::collections::BTreeSet;

/// Workloads named in a message, at most; the rest are counted.
const NAMED: usize = 5;

/// A binding's verdict: `NonCompliant` when it is not `Ready` (stalled, an intent missing, an
/// engine missing...) or a workload it selects is not protected by it (`Partial`,
/// `Unprotected`); `Compliant` otherwise, saying which intents are only audited (shadow mode, an
/// `Audit` action) or excepted: both are what the binding and its exceptions ask for. `None`
/// while its status does not yet describe its current generation.
pub fn binding_verdict(
    binding: &Reference,
    observed: Observed,
    selected: &[Selected],
) -> Option<Verdict> {
    let ready = observed.ready()?;
    let subject = describe(binding);
    let mut reasons = BTreeSet::new();
    if ready.status != "True" {
        reasons.insert(stall_marked(&ready.reason, observed.stalled()));
    }
    let mut not_protected = Vec::new();
    let mut kept = BTreeSet::new();
    let mut audited = BTreeSet::new();
    let mut excepted = BTreeSet::new();
    for s in selected {
        let verdict = s.verdict();
        match verdict {
            Posture::Protected | Posture::Audited | Posture::Excepted => {
                kept.insert(verdict);
            }
            _ => {
                let w = &s.workload;
                let ns = w.metadata.namespace.as_deref().unwrap_or_default();
                let (kind, name) = (&w.workload.kind, &w.workload.name);
                not_protected.push(format!("{kind} {ns}/{name} ({})", verdict.as_str()));
            }
        }
        for intent in &s.intents {
            match intent.verdict {
                Posture::Audited => audited.insert(intent.id.as_str()),
                Posture::Excepted => excepted.insert(intent.id.as_str()),
                Posture::Protected => false,
                _ => {
                    reasons.extend(intent.reasons.iter().map(|r| r.reason.clone()));
                    false
                }
            };
        }
    }
    if !reasons.is_empty() || !not_protected.is_empty() {
        let mut message = subject;
        if !reasons.is_empty() {
            message.push_str(": ");
            message.push_str(&join(reasons));
        }
        if !not_protected.is_empty() {
            not_protected.sort();
            message.push_str("; not protected: ");
            message.push_str(&named(&not_protected));
        }
        return Some(Verdict {
            compliance: Compliance::NonCompliant,
            message,
        });
    }
    let mut message = format!("{subject} is Ready; ");
    if kept.is_empty() {
        message.push_str("it selects no workload");
    } else {
        let kept: Vec<&str> = kept
            .iter()
            .map(|v| match v {
                Posture::Protected => "protected",
                Posture::Audited => "audited",
                _ => "excepted",
            })
            .collect();
        message.push_str("every workload it selects is ");
        message.push_str(&kept.join(" or "));
    }
    if !audited.is_empty() {
        message.push_str("; audited, not enforced: ");
        message.push_str(&join(audited));
    }
    if observed.shadowed() {
        message.push_str(" (shadow mode)");
    }
    if !excepted.is_empty() {
        message.push_str("; excepted by SecurityIntentExceptions in force: ");
        message.push_str(&join(excepted));
    }
    Some(Verdict {
        compliance: Compliance::Compliant,
        message,
    })
}

/// A SecurityIntent's verdict: `Compliant` when it is `Ready` (its ID and parameters are the
/// catalog's), `NonCompliant` with its reason otherwise. Whether it is enforced is for the
/// bindings that bind it to report. `None` while its status is behind.
pub fn intent_verdict(intent: &Reference, id: &str, observed: Observed) -> Option<Verdict> {
    let ready = observed.ready()?;
    let subject = format!("{} ({id})", describe(intent));
    Some(if ready.status == "True" {
        Verdict {
            compliance: Compliance::Compliant,
            message: format!("{subject} is Ready"),
        }
    } else {
        let reason = stall_marked(&ready.reason, observed.stalled());
        Verdict {
            compliance: Compliance::NonCompliant,
            message: format!("{subject}: {reason}: {}", ready.message),
        }
    })
}

/// `Kind namespace/name`, or `Kind name`.
fn describe(object: &Reference) -> String {
    match &object.namespace {
        Some(ns) => format!("{} {ns}/{}", object.kind, object.name),
        None => format!("{} {}", object.kind, object.name),
    }
}

fn stall_marked(reason: &str, stalled: bool) -> String {
    if stalled {
        format!("{reason} (stalled)")
    } else {
        reason.to_owned()
    }
}

fn join<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    items
        .into_iter()
        .map(|s| s.as_ref().to_owned())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The first [`NAMED`] of `items`, and how many more.
fn named(items: &[String]) -> String {
    let shown = join(items.iter().take(NAMED));
    match items.len().saturating_sub(NAMED) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}
