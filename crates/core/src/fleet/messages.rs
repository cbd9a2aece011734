//! The verdicts of the templates OCM delivers, and their messages: the causes (reason codes,
//! workloads not protected, intents audited), then, of a binding, the [`Tally`] of its workloads
//! and engines, which the roll-up reads back.

use super::tally::Tally;
use super::{Compliance, Observed, Selected, Verdict};
use crate::posture::reason::NATIVE_POLICY_MISSING;
use nimbus_api::posture::{Reference, Verdict as Posture};
use nimbus_api::{BindingPreview, condition};
use std::collections::BTreeSet;

/// Workloads named in a message, at most; the rest are counted.
const NAMED: usize = 5;

/// A binding's verdict: `NonCompliant` when it is not `Ready` (stalled, an intent missing, an
/// engine missing...) or a workload it selects is not protected by it (`Partial`,
/// `Unprotected`); `Compliant` otherwise, saying which intents are only audited (shadow mode, an
/// `Audit` action) or excepted: both are what the binding and its exceptions ask for.
///
/// `None`, not known yet, while its status does not describe its current generation, and while
/// its status and the posture are caught mid-change: the posture sees an engine come and go
/// first, the binding's status follows once its policies are translated again. So a workload
/// whose engine's objects are still being written (`NativePolicyMissing`, unless the binding
/// says the writes fail) has no verdict yet, nor a binding waiting for an engine
/// ([`AWAITED`]) whose every selected workload the posture already finds protected; while it
/// waits and workloads are not protected, the posture's reasons speak for both.
pub fn binding_verdict(
    binding: &Reference,
    observed: Observed,
    selected: &[Selected],
) -> Option<Verdict> {
    let ready = observed.ready()?;
    let mut found = Found::of(selected);
    let not_ready = (ready.status != "True").then_some(ready.reason.as_str());
    if found.reasons.contains(NATIVE_POLICY_MISSING)
        && not_ready != Some(condition::REASON_APPLY_FAILED)
    {
        return None;
    }
    let awaited = not_ready.is_some_and(|r| AWAITED.contains(&r)) && !selected.is_empty();
    if awaited && found.not_protected.is_empty() {
        return None;
    }
    let subject = describe(binding);
    let mut reasons = std::mem::take(&mut found.reasons);
    if let Some(reason) = not_ready.filter(|_| !awaited) {
        reasons.insert(stall_marked(reason, observed.stalled()));
    }
    if !reasons.is_empty() || !found.not_protected.is_empty() {
        let mut not_protected = std::mem::take(&mut found.not_protected);
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
        message.push_str(&found.tally.suffix());
        return Some(Verdict {
            compliance: Compliance::NonCompliant,
            message,
        });
    }
    let mut message = compliant(&subject, &found, &observed);
    message.push_str(&found.tally.suffix());
    Some(Verdict {
        compliance: Compliance::Compliant,
        message,
    })
}

/// The reasons a binding waits for an engine with (`Reconciling`), which the posture sees
/// change before the binding's status does.
const AWAITED: [&str; 2] = [
    condition::REASON_ENGINE_NOT_INSTALLED,
    condition::REASON_ENGINE_NOT_READY,
];

/// What the posture found of a binding's workloads.
#[derive(Default)]
struct Found<'p> {
    /// `Kind namespace/name (verdict)` of each workload not protected.
    not_protected: Vec<String>,
    /// The reason codes of the intents not in force on them.
    reasons: BTreeSet<String>,
    /// The verdicts of the others: protected, audited, excepted.
    kept: BTreeSet<Posture>,
    /// The IDs of the intents audited, and excepted, somewhere.
    audited: BTreeSet<&'p str>,
    excepted: BTreeSet<&'p str>,
    tally: Tally,
}

impl<'p> Found<'p> {
    fn of(selected: &[Selected<'p>]) -> Self {
        let mut found = Found::default();
        for s in selected {
            let verdict = s.verdict();
            found.tally.workloads.count(verdict);
            if matches!(
                verdict,
                Posture::Protected | Posture::Audited | Posture::Excepted
            ) {
                found.kept.insert(verdict);
            } else {
                let w = &s.workload;
                let ns = w.metadata.namespace.as_deref().unwrap_or_default();
                let (kind, name) = (&w.workload.kind, &w.workload.name);
                (found.not_protected).push(format!("{kind} {ns}/{name} ({})", verdict.as_str()));
            }
            for intent in &s.intents {
                for engine in &intent.engines {
                    found.tally.engine(&engine.engine, engine.state);
                }
                match intent.verdict {
                    Posture::Audited => {
                        found.audited.insert(intent.id.as_str());
                    }
                    Posture::Excepted => {
                        found.excepted.insert(intent.id.as_str());
                    }
                    Posture::Protected => {}
                    _ => (found.reasons).extend(intent.reasons.iter().map(|r| r.reason.clone())),
                }
            }
        }
        found
    }
}

/// A compliant binding's message: what its workloads are, and what is deliberately not
/// enforced.
fn compliant(subject: &str, found: &Found, observed: &Observed) -> String {
    let mut message = format!("{subject} is Ready; ");
    if found.kept.is_empty() {
        message.push_str("it selects no workload");
    } else {
        let kept: Vec<&str> = (found.kept.iter())
            .map(|v| match v {
                Posture::Protected => "protected",
                Posture::Audited => "audited",
                _ => "excepted",
            })
            .collect();
        message.push_str("every workload it selects is ");
        message.push_str(&kept.join(" or "));
    }
    if !found.audited.is_empty() {
        message.push_str("; audited, not enforced: ");
        message.push_str(&join(&found.audited));
    }
    if observed.shadowed() {
        message.push_str(" (shadow mode)");
    }
    if let Some(preview) = observed.preview.filter(|_| !found.audited.is_empty()) {
        message.push_str("; ");
        message.push_str(&previewed(preview));
    }
    if !found.excepted.is_empty() {
        message.push_str("; excepted by SecurityIntentExceptions in force: ");
        message.push_str(&join(&found.excepted));
    }
    message
}

/// What enforcing the audited intents would block, so that the hub sees it of a canary
/// cluster: `preview: enforcing would deny 1 connection of 1 workload (Pod shop/web: Egress to
/// Service shop/db 5432/TCP); not previewed: DecidedAtRunTime`.
fn previewed(preview: &BindingPreview) -> String {
    let mut blocked = Vec::new();
    if preview.connections > 0 {
        blocked.push(format!(
            "deny {} of {}",
            counted(preview.connections, "connection"),
            counted(preview.workloads, "workload")
        ));
    }
    if preview.refused > 0 {
        blocked.push(format!(
            "refuse {} at admission",
            counted(preview.refused, "workload")
        ));
    }
    let mut message = if blocked.is_empty() {
        "preview: enforcing would block nothing previewed".to_owned()
    } else {
        format!("preview: enforcing would {}", blocked.join(" and "))
    };
    if !preview.examples.is_empty() {
        message.push_str(&format!(" ({})", join(&preview.examples)));
    }
    if !preview.not_previewed.is_empty() {
        message.push_str("; not previewed: ");
        message.push_str(&join(&preview.not_previewed));
    }
    message
}

fn counted(n: u32, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
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
