//! What a binding's compliance message says beyond its verdict: how many of the workloads it
//! selects are protected, audited, excepted and not protected, and which engines are in force.
//! The hub learns nothing of a managed cluster but the messages it reports, so the counts travel
//! at the end of the message, where `nimbus fleet status` reads them back:
//! `…; workloads: 3 protected, 1 audited, 0 excepted, 0 not protected; engines in force:
//! kubearmor (auditing), netpol`.
//!
//! Counts change without the verdict changing (a workload added or removed); such a change is
//! reported at most every [`super::RECOUNT`], so that the compliance history (OCM keeps ten
//! entries) holds the changes of verdict rather than each workload coming and going.

use nimbus_api::posture::{EngineState, Verdict as Posture};
use serde::Serialize;
use std::collections::BTreeSet;

const WORKLOADS: &str = "; workloads: ";
const ENGINES: &str = "; engines in force: ";
/// What each count is of, in order.
const COUNTED: [&str; 4] = ["protected", "audited", "excepted", "not protected"];
/// What [`ENGINES`] lists when no engine is in force.
const NO_ENGINE: &str = "none";

/// The workloads a binding selects, by their verdict under it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Workloads {
    pub protected: u32,
    pub audited: u32,
    pub excepted: u32,
    /// `Partial` or `Unprotected` under the binding.
    pub unprotected: u32,
}

impl Workloads {
    /// Counts one workload of verdict `verdict` under the binding.
    pub fn count(&mut self, verdict: Posture) {
        let counter = match verdict {
            Posture::Protected => &mut self.protected,
            Posture::Audited => &mut self.audited,
            Posture::Excepted => &mut self.excepted,
            _ => &mut self.unprotected,
        };
        *counter += 1;
    }
}

/// `3 protected, 1 audited, 0 excepted, 0 not protected`.
impl std::fmt::Display for Workloads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let counts = [
            self.protected,
            self.audited,
            self.excepted,
            self.unprotected,
        ];
        let counts: Vec<String> = (counts.iter().zip(COUNTED))
            .map(|(n, label)| format!("{n} {label}"))
            .collect();
        f.write_str(&counts.join(", "))
    }
}

/// What the end of a binding's message says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub workloads: Workloads,
    /// `engine`, or `engine (auditing)` / `engine (external)`, for each engine whose objects
    /// are in force on a workload the binding selects.
    pub engines: BTreeSet<String>,
}

impl Tally {
    /// An engine of an intent the binding binds, in `state` on a workload: listed if in force.
    pub fn engine(&mut self, engine: &str, state: EngineState) {
        let named = match state {
            EngineState::Enforcing => engine.to_owned(),
            EngineState::Auditing => format!("{engine} (auditing)"),
            EngineState::External => format!("{engine} (external)"),
            _ => return,
        };
        self.engines.insert(named);
    }

    /// The end of the message: `; workloads: …; engines in force: …`.
    pub fn suffix(&self) -> String {
        let engines: Vec<&str> = self.engines.iter().map(String::as_str).collect();
        let engines = if engines.is_empty() {
            NO_ENGINE.to_owned()
        } else {
            engines.join(", ")
        };
        format!("{WORKLOADS}{}{ENGINES}{engines}", self.workloads)
    }

    /// A message's causes (all before the tally) and its tally, if it ends with one that reads
    /// back; otherwise the whole message and `None` (an intent's message, OCM's errors, an
    /// operator older than the tally).
    pub fn split(message: &str) -> (&str, Option<Tally>) {
        let Some((causes, tally)) = message.rsplit_once(WORKLOADS) else {
            return (message, None);
        };
        match Self::parse(tally) {
            Some(tally) => (causes, Some(tally)),
            None => (message, None),
        }
    }

    fn parse(text: &str) -> Option<Tally> {
        let (counts, engines) = text.split_once(ENGINES)?;
        let parts: Vec<&str> = counts.split(", ").collect();
        let [protected, audited, excepted, unprotected] = parts[..] else {
            return None;
        };
        let count = |part: &str, label: &str| part.strip_suffix(label)?.trim_end().parse().ok();
        let [p, a, e, u] = COUNTED;
        let workloads = Workloads {
            protected: count(protected, p)?,
            audited: count(audited, a)?,
            excepted: count(excepted, e)?,
            unprotected: count(unprotected, u)?,
        };
        let engines = match engines.trim() {
            NO_ENGINE => BTreeSet::new(),
            listed => listed.split(", ").map(str::to_owned).collect(),
        };
        Some(Tally { workloads, engines })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_reads_back_from_the_message_it_ends() {
        let mut tally = Tally::default();
        for verdict in [
            Posture::Protected,
            Posture::Protected,
            Posture::Audited,
            Posture::Excepted,
            Posture::Partial,
            Posture::Unprotected,
        ] {
            tally.workloads.count(verdict);
        }
        for (engine, state) in [
            ("netpol", EngineState::Enforcing),
            ("kubearmor", EngineState::Auditing),
            ("kyverno", EngineState::External),
            ("k8tls", EngineState::NotInstalled),
            ("rbac", EngineState::Pending),
            ("netpol", EngineState::Enforcing),
        ] {
            tally.engine(engine, state);
        }
        let causes = "ClusterSecurityIntentBinding web: EngineNotInstalled; not protected: \
                      Pod shop/a (Partial), Pod shop/b (Unprotected)";
        let message = format!("{causes}{}", tally.suffix());
        assert_eq!(
            message,
            format!(
                "{causes}; workloads: 2 protected, 1 audited, 1 excepted, 2 not protected; \
                 engines in force: kubearmor (auditing), kyverno (external), netpol"
            )
        );
        assert_eq!(Tally::split(&message), (causes, Some(tally)));
        let none = format!("web is Ready{}", Tally::default().suffix());
        assert!(
            none.ends_with("0 not protected; engines in force: none"),
            "{none}"
        );
        assert_eq!(
            Tally::split(&none),
            ("web is Ready", Some(Tally::default()))
        );
    }

    #[test]
    fn a_message_without_a_tally_is_kept_whole() {
        for message in [
            "SecurityIntent fleet-dns (dnsManipulation) is Ready",
            "template-error; Failed to update policy template fleet-dns",
            "web; workloads: many; engines in force: netpol",
            "web; workloads: 1 protected, 0 audited, 0 excepted; engines in force: netpol",
            "web; workloads: 1 protected, 0 audited, 0 excepted, 0 not protected, 3 more; \
             engines in force: netpol",
            "web; workloads: 1 not protected, 0 audited, 0 excepted, 0 protected; engines in \
             force: netpol",
            "web; workloads: 1 protected, 0 audited, 0 excepted, 0 not protected",
        ] {
            assert_eq!(Tally::split(message), (message, None), "{message}");
        }
    }
}
