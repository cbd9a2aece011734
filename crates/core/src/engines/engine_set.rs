//! Which engines act: the engines in force ([`EngineSet`]: enabled, installed, or left to an
//! external adapter) and, of the engines of one mechanism, the one preferred ([`Preference`]).
//!
//! Engine preference: two engines of one [`Mechanism`] enforce the same intents, and both
//! enforcing one would only double the same check (or, for mutations, race). The first engine
//! of the preference order that acts and is in force (enabled and installed, or left to an
//! external adapter) writes; the others of its mechanism stand by. Engines of other mechanisms
//! are not concerned and keep enforcing beside it.
//!
//! - Admission control ([`ADMISSION_CONTROL`]: Kyverno, then the built-in `admission` engine)
//!   chooses per kind of policy, not per intent: with Kyverno preferred and installed, the
//!   admission engine writes nothing at all, not even for intents Kyverno does not enforce
//!   (unAuthorizedSaTokenAccess), so a cluster running Kyverno gets exactly Nimbus's output.
//! - The network ([`CLUSTER_NETWORK`]: NetworkPolicy, then ClusterNetworkPolicy) chooses per
//!   kind of binding: the NetworkPolicy engine writes from each namespace's policy of a cluster
//!   binding, the ClusterNetworkPolicy engine from its cluster policy, so with the latter
//!   preferred and installed the former writes nothing for cluster bindings (and keeps writing
//!   for namespaced ones, which the latter does not act on). NetworkPolicy comes first, so that
//!   the output stays Nimbus's unless the ClusterNetworkPolicy engine is chosen.

use super::{Engine, NativeKind};
use crate::intents::Origin;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Which engines may act: switched on by configuration, and with their CRDs installed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineSet {
    pub enabled: BTreeSet<Engine>,
    pub installed: BTreeSet<Engine>,
    /// Engines switched off here whose objects an external adapter reports in the policy's
    /// status (Nimbus's adapter contract): they count as enforcing.
    pub external: BTreeSet<Engine>,
    /// Which of the engines of one mechanism writes ([`Preference`]).
    pub preference: Preference,
    /// Optional kinds ([`super::EngineSpec::optional_kinds`]) the cluster does not serve.
    pub unserved: BTreeSet<&'static NativeKind>,
    /// Why an enabled engine is not installed, where there is more to say than that its kinds
    /// are not served (Kyverno's: which of its APIs is asked for, see
    /// [`super::KyvernoKinds::missing`]).
    pub not_installed: BTreeMap<Engine, String>,
}

impl EngineSet {
    /// Every engine enabled and installed (offline translation).
    pub fn all() -> Self {
        Self {
            enabled: Engine::ALL.into(),
            installed: Engine::ALL.into(),
            ..Self::default()
        }
    }

    pub fn active(&self, engine: Engine) -> bool {
        self.enabled.contains(&engine) && self.installed.contains(&engine)
    }

    /// Whether `engine` acts on policies of `origin`: it is active and no engine preferred to
    /// it writes in its place.
    pub fn acts(&self, engine: Engine, origin: Origin) -> bool {
        self.active(engine) && !self.preference.stands_by(engine, origin, self)
    }
}

/// Engines that enforce the same intents by one mechanism, of which one writes.
#[derive(Debug, PartialEq, Eq)]
pub struct Mechanism {
    /// In plain words (`nimbus explain`).
    pub name: &'static str,
    /// In the default order.
    pub engines: [Engine; 2],
    /// Whether the choice is per kind of binding rather than per kind of policy: the engines
    /// write from different policies of the same binding.
    pub per_binding: bool,
}

/// Kyverno first, so that the output stays Nimbus's wherever Kyverno is installed.
pub const ADMISSION_CONTROL: Mechanism = Mechanism {
    name: "admission control",
    engines: [Engine::Kyverno, Engine::Admission],
    per_binding: false,
};

/// NetworkPolicy first, so that the output stays Nimbus's unless ClusterNetworkPolicy is chosen.
pub const CLUSTER_NETWORK: Mechanism = Mechanism {
    name: "network policy",
    engines: [Engine::NetworkPolicy, Engine::ClusterNetworkPolicy],
    per_binding: true,
};

/// Every mechanism with a choice.
pub const MECHANISMS: [&Mechanism; 2] = [&ADMISSION_CONTROL, &CLUSTER_NETWORK];

impl Mechanism {
    /// The mechanism `engine` is one of, if it has an alternative.
    pub fn of(engine: Engine) -> Option<&'static Mechanism> {
        MECHANISMS.into_iter().find(|m| m.engines.contains(&engine))
    }

    /// Whether `engine` of this mechanism acts on policies of `origin`, or for a choice per
    /// binding, on any policy of the binding `origin` is of.
    fn competes(&self, engine: Engine, origin: Origin) -> bool {
        if self.per_binding {
            origin
                .binding_kind()
                .origins()
                .iter()
                .any(|o| acts_on(engine, *o))
        } else {
            acts_on(engine, origin)
        }
    }
}

/// The order in which engines of the same mechanism are preferred (`--engine-preference`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preference(Vec<Engine>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreferenceError {
    #[error("engine `{0}` is listed twice")]
    Repeated(Engine),
    #[error(
        "engine `{0}` has no alternative to be preferred to (only {alternatives} are chosen by \
         preference)",
        alternatives = alternatives()
    )]
    NoAlternative(Engine),
}

/// `kyverno and admission, netpol and clusternetworkpolicy`.
fn alternatives() -> String {
    let pairs: Vec<String> = MECHANISMS
        .iter()
        .map(|m| format!("{} and {}", m.engines[0], m.engines[1]))
        .collect();
    pairs.join(", ")
}

impl Default for Preference {
    fn default() -> Self {
        Self(MECHANISMS.iter().flat_map(|m| m.engines).collect())
    }
}

impl Preference {
    /// `order` first; the engines it leaves out follow in their mechanism's default order.
    pub fn new(order: &[Engine]) -> Result<Self, PreferenceError> {
        let mut out = Vec::new();
        for engine in order {
            if Mechanism::of(*engine).is_none() {
                return Err(PreferenceError::NoAlternative(*engine));
            }
            if out.contains(engine) {
                return Err(PreferenceError::Repeated(*engine));
            }
            out.push(*engine);
        }
        out.extend(Self::default().0.into_iter().filter(|e| !order.contains(e)));
        Ok(Self(out))
    }

    pub fn order(&self) -> &[Engine] {
        &self.0
    }

    /// The order of `engine`'s mechanism alone (`kyverno,admission`).
    pub fn among(&self, engine: &Engine) -> String {
        let mechanism = Mechanism::of(*engine);
        let names: Vec<&str> = (self.0.iter())
            .filter(|e| mechanism.is_some_and(|m| m.engines.contains(e)))
            .map(|e| e.name())
            .collect();
        names.join(",")
    }

    /// The engine of `mechanism` that writes for policies of `origin`: the first in the order
    /// that acts on them (for a choice per binding: on the binding's) and is in force. `None`
    /// when none is.
    pub fn in_force(
        &self,
        mechanism: &Mechanism,
        origin: Origin,
        engines: &EngineSet,
    ) -> Option<Engine> {
        self.0.iter().copied().find(|e| {
            mechanism.engines.contains(e)
                && mechanism.competes(*e, origin)
                && (engines.active(*e) || engines.external.contains(e))
        })
    }

    /// Whether `engine` stands by for policies of `origin`: another engine of its mechanism is
    /// in force there.
    pub fn stands_by(&self, engine: Engine, origin: Origin, engines: &EngineSet) -> bool {
        Mechanism::of(engine).is_some_and(|m| {
            self.in_force(m, origin, engines)
                .is_some_and(|chosen| chosen != engine)
        })
    }

    /// The engines of its mechanism preferred to `engine` that act on policies of `origin`
    /// (and so are not in force when `engine` is).
    pub fn preferred_to(&self, engine: Engine, origin: Origin) -> Vec<Engine> {
        let Some(mechanism) = Mechanism::of(engine) else {
            return Vec::new();
        };
        self.0
            .iter()
            .copied()
            .take_while(|e| *e != engine)
            .filter(|e| mechanism.engines.contains(e) && mechanism.competes(*e, origin))
            .collect()
    }
}

/// How long the objects of an engine standing by outlive the objects of the engine taking over
/// from it. Writing the new objects before deleting the old ones is not enough: the engine
/// taking over enforces only once it has loaded them (kube-apiserver refreshes its admission
/// policies about every second and says nothing when it has; Kyverno readies a new policy in
/// seconds, and the operator also waits for it to say so), so the old ones keep enforcing
/// meanwhile (both engines then enforce the same intent, which only doubles a check).
pub const HANDOVER: Duration = Duration::from_secs(30);

/// How much longer the objects of the engines standing by must be kept, given the ages of the
/// objects the engine in force writes for the policy (`None`: not seen yet, just written):
/// until the youngest is [`HANDOVER`] old. `None` once handed over.
pub fn handover_wait(ages: impl IntoIterator<Item = Option<Duration>>) -> Option<Duration> {
    ages.into_iter()
        .map(|age| HANDOVER.saturating_sub(age.unwrap_or_default()))
        .max()
        .filter(|wait| !wait.is_zero())
}

/// Whether `engine` enforces any intent from policies of `origin`.
fn acts_on(engine: Engine, origin: Origin) -> bool {
    engine
        .spec()
        .enforces
        .iter()
        .any(|e| e.origins.contains(&origin))
}

impl fmt::Display for Preference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.0.iter().map(|e| e.name()).collect();
        f.write_str(&names.join(","))
    }
}

impl FromStr for Preference {
    type Err = String;
    /// A comma-separated list of engine names (`kyverno,admission`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let engines = s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<Engine>, _>>()?;
        Preference::new(&engines).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(installed: &[Engine], enabled: &[Engine], external: &[Engine]) -> EngineSet {
        EngineSet {
            enabled: enabled.iter().copied().collect(),
            installed: installed.iter().copied().collect(),
            external: external.iter().copied().collect(),
            ..EngineSet::default()
        }
    }

    /// (preference, installed, enabled, external, origin, engine of the mechanism in force)
    type Row<'a> = (
        &'a Preference,
        &'a [Engine],
        &'a [Engine],
        &'a [Engine],
        Origin,
        Option<Engine>,
    );

    #[test]
    fn the_first_engine_in_force_in_the_order_writes() {
        use Engine::{Admission as A, Kyverno as K};
        let all = Engine::ALL;
        let default = Preference::default();
        let admission_first = Preference::new(&[A]).unwrap();
        assert_eq!(admission_first.order()[..2], [A, K]);
        let table: &[Row] = &[
            // Kyverno installed: it writes, as Nimbus did.
            (&default, &all, &all, &[], Origin::Cluster, Some(K)),
            (&default, &all, &all, &[], Origin::Binding, Some(K)),
            // Kyverno not installed, or disabled: the admission engine stands in.
            (&default, &[A], &all, &[], Origin::Cluster, Some(A)),
            (&default, &all, &[A], &[], Origin::Cluster, Some(A)),
            // ... but only for cluster policies, the only ones it acts on.
            (&default, &[A], &all, &[], Origin::Binding, None),
            (
                &default,
                &[A],
                &all,
                &[],
                Origin::ClusterBindingNamespace,
                None,
            ),
            // Kyverno left to an external adapter is in force: nothing is written twice.
            (&default, &[A], &[A], &[K], Origin::Cluster, Some(K)),
            // Admission preferred: it writes cluster policies; Kyverno keeps namespaced ones.
            (&admission_first, &all, &all, &[], Origin::Cluster, Some(A)),
            (&admission_first, &all, &all, &[], Origin::Binding, Some(K)),
            (&admission_first, &[K], &[K], &[], Origin::Cluster, Some(K)),
            // Neither in force.
            (&default, &[], &all, &[], Origin::Cluster, None),
        ];
        for (i, (preference, installed, enabled, external, origin, want)) in
            table.iter().enumerate()
        {
            let engines = set(installed, enabled, external);
            let got = preference.in_force(&ADMISSION_CONTROL, *origin, &engines);
            assert_eq!(got, *want, "row {i}");
            for engine in ADMISSION_CONTROL.engines {
                assert_eq!(
                    preference.stands_by(engine, *origin, &engines),
                    want.is_some_and(|w| w != engine),
                    "row {i}, {engine}"
                );
            }
            // Other mechanisms never stand by.
            assert!(!preference.stands_by(Engine::KubeArmor, *origin, &engines));
        }
    }

    #[test]
    fn the_network_engine_is_chosen_per_kind_of_binding() {
        use Engine::{ClusterNetworkPolicy as C, NetworkPolicy as N};
        let all = Engine::ALL;
        let cnp_first = Preference::new(&[C]).unwrap();
        let table: &[Row] = &[
            // By default NetworkPolicies, as Nimbus wrote them, for every binding.
            (
                &Preference::default(),
                &all,
                &all,
                &[],
                Origin::Binding,
                Some(N),
            ),
            (
                &Preference::default(),
                &all,
                &all,
                &[],
                Origin::ClusterBindingNamespace,
                Some(N),
            ),
            (
                &Preference::default(),
                &all,
                &all,
                &[],
                Origin::Cluster,
                Some(N),
            ),
            // ClusterNetworkPolicy chosen: for every policy of a cluster binding, the
            // namespaces' included; namespaced bindings keep their NetworkPolicies.
            (&cnp_first, &all, &all, &[], Origin::Cluster, Some(C)),
            (
                &cnp_first,
                &all,
                &all,
                &[],
                Origin::ClusterBindingNamespace,
                Some(C),
            ),
            (&cnp_first, &all, &all, &[], Origin::Binding, Some(N)),
            // ... where the API server serves it.
            (
                &cnp_first,
                &[N],
                &all,
                &[],
                Origin::ClusterBindingNamespace,
                Some(N),
            ),
        ];
        for (i, (preference, installed, enabled, external, origin, want)) in
            table.iter().enumerate()
        {
            let engines = set(installed, enabled, external);
            let got = preference.in_force(&CLUSTER_NETWORK, *origin, &engines);
            assert_eq!(got, *want, "row {i}");
            for engine in CLUSTER_NETWORK.engines {
                assert_eq!(
                    preference.stands_by(engine, *origin, &engines),
                    want.is_some_and(|w| w != engine),
                    "row {i}, {engine}"
                );
            }
            // Admission control is not concerned.
            assert!(!preference.stands_by(Engine::Kyverno, *origin, &engines));
        }
    }

    #[test]
    fn the_engine_standing_by_keeps_its_objects_until_the_new_ones_are_loaded() {
        let s = Duration::from_secs;
        // (ages of the objects of the engine in force, wait)
        let table: &[(&[Option<Duration>], Option<Duration>)] = &[
            // Nothing takes over: nothing to wait for.
            (&[], None),
            // Just written, not seen yet.
            (&[None], Some(HANDOVER)),
            (&[Some(s(3)), None], Some(HANDOVER)),
            (&[Some(s(3)), Some(s(4))], Some(HANDOVER - s(3))),
            (&[Some(HANDOVER)], None),
            (&[Some(s(3600))], None),
        ];
        for (ages, want) in table {
            assert_eq!(handover_wait(ages.iter().copied()), *want, "{ages:?}");
        }
    }

    #[test]
    fn preferences_parse_and_refuse_what_is_not_a_choice() {
        assert_eq!(
            "kyverno,admission".parse::<Preference>(),
            Ok(Preference::default())
        );
        assert_eq!(
            " admission ".parse::<Preference>().unwrap().to_string(),
            "admission,kyverno,netpol,clusternetworkpolicy"
        );
        assert_eq!(
            "clusternetworkpolicy"
                .parse::<Preference>()
                .unwrap()
                .to_string(),
            "clusternetworkpolicy,kyverno,admission,netpol"
        );
        assert_eq!("".parse::<Preference>(), Ok(Preference::default()));
        assert!(
            "kyverno,kyverno"
                .parse::<Preference>()
                .unwrap_err()
                .contains("twice")
        );
        assert!(
            "kubearmor,kyverno"
                .parse::<Preference>()
                .unwrap_err()
                .contains("no alternative")
        );
        assert!(
            "nope"
                .parse::<Preference>()
                .unwrap_err()
                .contains("unknown")
        );
    }
}
