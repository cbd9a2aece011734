//! The manifests' SecurityIntentExceptions, judged at `--now` by the core functions the
//! operator runs: which are in force for each policy `translate` prints, and where each stands
//! (what its `Active` condition would say) for `validate`.

use super::manifests::{Loaded, Manifest, Origin};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use nimbus_api::{ClusterSecurityIntentException, MatchIntent, SecurityIntentException};
use nimbus_core::engines::PolicyInput;
use nimbus_core::exceptions::{self, BindingRef, Excepted, Exception, Rules, Standing};
use std::collections::BTreeMap;

/// The clock and the limit exceptions are judged by.
#[derive(clap::Args, Default)]
pub struct ClockArgs {
    /// The time to judge SecurityIntentExceptions at (RFC 3339, e.g. 2026-12-01T00:00:00Z;
    /// default: the system clock): those in force then are honoured, as the operator honours
    /// them at that instant. A manifest without `creationTimestamp` counts as created then.
    #[arg(long, value_name = "RFC 3339")]
    pub(super) now: Option<Timestamp>,
    #[command(flatten)]
    pub(super) limit: crate::ExceptionArgs,
}

impl ClockArgs {
    fn now(&self) -> Timestamp {
        self.now.unwrap_or_else(Timestamp::now)
    }
}

/// The manifests' exceptions and what they name, as the operator's caches would hold them.
pub(super) struct Exceptions<'a> {
    exceptions: Vec<(&'a Origin, SecurityIntentException)>,
    cluster_exceptions: Vec<(&'a Origin, &'a ClusterSecurityIntentException)>,
    /// What each binding among the manifests binds (its `spec.intents`).
    bindings: BTreeMap<BindingRef, &'a [MatchIntent]>,
    /// The intent ID of each SecurityIntent among the manifests, by its name.
    intent_ids: BTreeMap<String, String>,
    now: Timestamp,
    rules: Rules,
}

impl<'a> Exceptions<'a> {
    /// Those of `loaded`; a binding or exception that names no namespace is in `namespace`, as
    /// `kubectl apply` would put it there.
    pub(super) fn new(loaded: &'a Loaded, namespace: &str, clock: &ClockArgs) -> Self {
        let in_namespace = |ns: Option<String>| ns.unwrap_or_else(|| namespace.to_owned());
        let mut out = Self {
            exceptions: Vec::new(),
            cluster_exceptions: Vec::new(),
            bindings: BTreeMap::new(),
            intent_ids: BTreeMap::new(),
            now: clock.now(),
            rules: clock.limit.rules(),
        };
        for (origin, manifest) in &loaded.manifests {
            match manifest {
                Manifest::Intent(si) => {
                    out.intent_ids
                        .insert(si.name_any(), si.spec.intent.id.clone());
                }
                Manifest::Binding(b) => {
                    let at = BindingRef::namespaced(&b.name_any(), &in_namespace(b.namespace()));
                    out.bindings.insert(at, &b.spec.intents);
                }
                Manifest::ClusterBinding(b) => {
                    out.bindings
                        .insert(BindingRef::cluster(&b.name_any()), &b.spec.intents);
                }
                Manifest::Exception(e) => {
                    let mut e = e.clone();
                    e.metadata.namespace = Some(in_namespace(e.namespace()));
                    out.exceptions.push((origin, e));
                }
                Manifest::ClusterException(e) => out.cluster_exceptions.push((origin, e)),
            }
        }
        out
    }

    /// The exceptions in force at `--now` for the policy `input` translates: what the operator
    /// passes to the engines then.
    pub(super) fn in_force(&self, input: &PolicyInput) -> Vec<Excepted> {
        let Some(binding) = &input.binding else {
            return Vec::new();
        };
        let (in_force, _changes_at) = exceptions::in_force(
            self.all().map(|(_, e)| e),
            binding,
            || self.bound_intents(binding),
            input.namespace.as_deref(),
            self.now,
            self.rules,
        );
        in_force
    }

    /// Each exception's `Active` condition at `--now`, one line each (`<what>: Active=<status>
    /// (<reason>: <message>)`), and the problems: every exception engines would not honour.
    pub(super) fn standings(&self) -> (Vec<String>, Vec<String>) {
        let (mut lines, mut problems) = (Vec::new(), Vec::new());
        for (origin, exception) in self.all() {
            let bound = self.bound_intents(&BindingRef::of(exception));
            let standing = exceptions::standing(exception, bound.as_ref(), self.now, self.rules);
            let status = exceptions::status(exception, &standing);
            let what = exception.describe();
            for c in &status.conditions {
                lines.push(format!(
                    "{what}: {}={} ({}: {})",
                    c.type_, c.status, c.reason, c.message
                ));
            }
            if let Standing::Inactive { reason, message } = &standing {
                problems.push(format!(
                    "{origin}: {what}: not honoured at {}: {reason}: {message}",
                    self.now
                ));
            }
        }
        (lines, problems)
    }

    /// Every exception of the manifests, of both kinds.
    fn all(&self) -> impl Iterator<Item = (&Origin, Exception<'_>)> {
        let namespaced = self.exceptions.iter().map(|(o, e)| (*o, e.into()));
        let cluster = self
            .cluster_exceptions
            .iter()
            .map(|(o, e)| (*o, (*e).into()));
        namespaced.chain(cluster)
    }

    /// The SecurityIntents `binding` binds, by name, with their intent IDs; `None` when the
    /// binding is not among the manifests.
    fn bound_intents(&self, binding: &BindingRef) -> Option<BTreeMap<String, String>> {
        let names = self.bindings.get(binding)?;
        Some(exceptions::bound_intents(names, |name| {
            self.intent_ids.get(name).cloned()
        }))
    }
}
