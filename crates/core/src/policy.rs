//! A NimbusPolicy's pipeline, decided once. Whether it may be translated at all ([`Claim`]),
//! then what translating it writes, prunes, spares and keeps listed ([`PolicyPlan`]); its status
//! follows from the plan and what executing it did ([`crate::status::policy_status`]). The
//! policy controller executes this plan, the posture judges by it and `nimbus validate`
//! reports from it, so the three cannot disagree.

use crate::engines::{
    self, Engine, EngineSet, Environment, Generated, MECHANISMS, PolicyInput, Problem, Translation,
};
use crate::intents::Origin;
use crate::namespaces::ProtectedNamespaces;
use crate::plan;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use nimbus_api::{
    ClusterNimbusPolicy, ClusterSecurityIntentBinding, NimbusPolicy, NimbusPolicyStatus,
    SecurityIntentBinding, condition,
};
use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::time::Duration;

/// Whether a policy may be translated. Only a binding's policy is: whoever may write
/// NimbusPolicies must not get what a binding's author would have to be trusted with (a
/// sandbox RoleBinding, say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The policy a binding generates, as the operator wrote it.
    Bound,
    /// The policy a binding generates, holding fields someone else wrote: tampered with, or
    /// left by a predecessor (the original Nimbus) being taken over. The binding controller
    /// takes it back; until then what is in force stays, and the controller reports nothing:
    /// a status would be about content the operator did not write.
    Restoring,
    /// Not the policy any existing binding generates: nothing is translated.
    NotBound,
}

impl Claim {
    /// The claim of a NimbusPolicy: `binding` looks a SecurityIntentBinding up by namespace
    /// and name, `cluster_binding` a ClusterSecurityIntentBinding by name; `manager` is the
    /// operator's field manager.
    pub fn namespaced<B, C>(
        np: &NimbusPolicy,
        binding: impl Fn(&str, &str) -> Option<B>,
        cluster_binding: impl Fn(&str) -> Option<C>,
        protected: &ProtectedNamespaces,
        manager: &str,
    ) -> Self
    where
        B: Borrow<SecurityIntentBinding>,
        C: Borrow<ClusterSecurityIntentBinding>,
    {
        let generated = plan::generates(np, binding, cluster_binding, protected);
        Self::of(generated, written_by(np.meta(), manager))
    }

    /// The claim of a ClusterNimbusPolicy (see [`Claim::namespaced`]).
    pub fn cluster<C: Borrow<ClusterSecurityIntentBinding>>(
        cwnp: &ClusterNimbusPolicy,
        cluster_binding: impl Fn(&str) -> Option<C>,
        manager: &str,
    ) -> Self {
        let generated = plan::generates_cluster_policy(cwnp, cluster_binding);
        Self::of(generated, written_by(cwnp.meta(), manager))
    }

    fn of(generated: bool, written_by_operator: bool) -> Self {
        match (generated, written_by_operator) {
            (true, true) => Self::Bound,
            (true, false) => Self::Restoring,
            (false, _) => Self::NotBound,
        }
    }
}

/// Whether every field of an object's body was written by `manager` (someone able to create
/// NimbusPolicies could otherwise pose as a binding's). Status writes do not count. With no
/// writer on record (someone stripped managedFields) it was not: the API server records every
/// write, the operator's too.
fn written_by(meta: &ObjectMeta, manager: &str) -> bool {
    let writers: Vec<Option<&str>> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.subresource.as_deref().is_none_or(str::is_empty))
        .filter(|e| {
            e.fields_v1.as_ref().is_some_and(|f| {
                f.0.as_object()
                    .is_some_and(|fields| fields.keys().any(|k| k != "f:metadata"))
            })
        })
        .map(|e| e.manager.as_deref())
        .collect();
    !writers.is_empty() && writers.iter().all(|w| *w == Some(manager))
}

/// What one policy should have in force, decided from its claim, the engines and the cluster.
#[derive(Debug, Clone)]
pub struct PolicyPlan {
    pub claim: Claim,
    /// The engines it is translated with; `external` holds those switched off here for which
    /// an external adapter reported objects in the policy's status (they count as enforcing).
    pub engines: EngineSet,
    /// The native objects to write and the problems that keep an intent from being
    /// enforced. A policy no binding generates writes nothing and has one problem: that.
    pub translation: Translation,
    /// The entries external adapters reported that stay listed in the status (they own them).
    pub external_entries: Vec<String>,
}

/// Whether a policy no binding generates is garbage the collector is about to delete: its
/// controller reference names a binding that `binding_exists` no longer finds with that uid
/// (deleted, or deleted and created again). Nothing is written for it, not even the status a
/// [`Claim::NotBound`] policy reports: no one reads it, and the write races the deletion (a 404
/// when it loses). A policy no binding controls, or whose binding stays, still reports.
pub fn orphaned<K: Resource>(policy: &K, binding_exists: impl Fn(&OwnerReference) -> bool) -> bool {
    let bindings = [
        SecurityIntentBinding::kind(&()),
        ClusterSecurityIntentBinding::kind(&()),
    ];
    let api_version = SecurityIntentBinding::api_version(&());
    (policy.meta().owner_references.iter().flatten())
        .find(|o| o.controller == Some(true))
        .is_some_and(|o| {
            o.api_version == api_version
                && bindings.iter().any(|kind| o.kind == *kind)
                && !binding_exists(o)
        })
}

/// What a policy's status lists in `adapterPolicies`, where Nimbus's external adapters report
/// what they created ([`plan`]'s `reported`).
pub fn reported(status: Option<&NimbusPolicyStatus>) -> &[String] {
    status
        .and_then(|s| s.adapter_policies.as_deref())
        .unwrap_or_default()
}

/// Plans `input`, claimed `claim`, with `engines` in `env`. `reported`: the entries of the
/// policy's `status.adapterPolicies` (see [`reported`]).
pub fn plan(
    input: &PolicyInput<'_>,
    env: &Environment,
    mut engines: EngineSet,
    claim: Claim,
    reported: &[String],
) -> PolicyPlan {
    engines.external = external_engines(&engines, reported);
    let external_entries = reported
        .iter()
        .filter(|entry| engines.external.iter().any(|e| is_entry_of(*e, entry)))
        .cloned()
        .collect();
    let mut translation = engines::translate(input, env, &engines);
    if claim == Claim::NotBound {
        translation.objects.clear();
        translation.problems = vec![not_bound()];
    }
    PolicyPlan {
        claim,
        engines,
        translation,
        external_entries,
    }
}

/// The problem of a policy that is not the one any binding generates: it is not translated.
fn not_bound() -> Problem {
    Problem {
        intent: String::new(),
        reason: condition::REASON_NOT_BOUND,
        message: "not the policy an existing SecurityIntentBinding or \
                  ClusterSecurityIntentBinding generates (or written by someone else than the \
                  operator); not translated"
            .to_owned(),
        blocking: true,
    }
}

impl PolicyPlan {
    /// Whether the controller writes and prunes: only for a policy it wrote, and generated by
    /// a binding. A tampered one is restored by the binding controller first; one no binding
    /// generates prunes nothing either, so that what is in force meanwhile stays.
    pub fn executes(&self) -> bool {
        self.claim == Claim::Bound
    }

    /// The engines of a mechanism with a preference that stand by at `origin` for the one in
    /// force; their objects go once the one in force has loaded its own ([`Self::handover`]).
    pub fn standing_by(&self, origin: Origin) -> BTreeSet<Engine> {
        MECHANISMS
            .iter()
            .flat_map(|m| m.engines)
            .filter(|e| self.engines.preference.stands_by(*e, origin, &self.engines))
            .collect()
    }

    /// While the engine in force at `origin` takes over from others of its mechanism (the
    /// engine preference, or which engines are installed, changed), the objects of those
    /// standing by are kept until the new ones have been loaded. `holds`: whether the policy
    /// still controls objects of an engine; `loaded_for`: how long the object in force for a
    /// generated one has acted (`None`: not seen yet, or not acting, as a Kyverno policy not
    /// Ready); `elsewhere`: for an engine in force that writes from the binding's other
    /// policies (a choice per binding), how long each of its objects there has acted, `None`
    /// for a policy it has written nothing for yet. `None` when nothing is handed over.
    pub fn handover(
        &self,
        origin: Origin,
        holds: impl Fn(Engine) -> bool,
        loaded_for: impl Fn(&Generated) -> Option<Duration>,
        elsewhere: impl Fn(Engine) -> Vec<Option<Duration>>,
    ) -> Option<Handover> {
        let mut out: Option<Handover> = None;
        for mechanism in MECHANISMS {
            let standing_by: BTreeSet<Engine> = (mechanism.engines.into_iter())
                .filter(|e| self.engines.preference.stands_by(*e, origin, &self.engines))
                .collect();
            if !standing_by.iter().any(|e| holds(*e)) {
                continue;
            }
            let Some(chosen) = self
                .engines
                .preference
                .in_force(mechanism, origin, &self.engines)
            else {
                continue;
            };
            let acts_here = (chosen.spec().enforces.iter()).any(|e| e.origins.contains(&origin));
            let ages = match acts_here {
                true => (self.translation.objects.iter())
                    .filter(|g| g.engine == chosen)
                    .map(&loaded_for)
                    .collect(),
                false => elsewhere(chosen),
            };
            let Some(wait) = engines::handover_wait(ages) else {
                continue;
            };
            let handover = out.get_or_insert(Handover {
                wait,
                spared: BTreeSet::new(),
            });
            handover.wait = handover.wait.max(wait);
            handover.spared.extend(standing_by);
        }
        out
    }

    /// Whether the objects of `engine` this policy no longer generates are deleted: the engine
    /// translated it (so knows what it wants), and is not being handed over from.
    pub fn prunes(&self, engine: Engine, handover: Option<&Handover>) -> bool {
        self.executes()
            && self.engines.active(engine)
            && handover.is_none_or(|h| !h.spared.contains(&engine))
    }
}

/// An engine handover under way (see [`PolicyPlan::handover`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handover {
    /// How much longer the engines standing by keep their objects.
    pub wait: Duration,
    /// Those engines.
    pub spared: BTreeSet<Engine>,
}

/// Engines switched off here for which an external adapter listed objects in `entries`.
fn external_engines(engines: &EngineSet, entries: &[String]) -> BTreeSet<Engine> {
    Engine::ALL
        .into_iter()
        .filter(|e| !engines.enabled.contains(e))
        .filter(|e| entries.iter().any(|entry| is_entry_of(*e, entry)))
        .collect()
}

/// Whether a status entry (`Kind/name`, or `namespace/CronJob/name`) names a kind of `engine`.
fn is_entry_of(engine: Engine, entry: &str) -> bool {
    let kind = entry.rsplit('/').nth(1);
    engines::kinds(engine)
        .iter()
        .any(|k| k.listed && Some(k.entry) == kind)
}

#[cfg(test)]
mod tests;
