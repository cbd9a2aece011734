//! Which engines act: the engines in force ([`EngineSet`]: enabled, installed, or left to an
//! external adapter) and, of the engines of one mechanism, the one preferred ([`Preference`]).
//!
//! Engine preference: Kyverno and the built-in `admission` engine both enforce intents by
//! admission control, and both enforcing one intent would only double the same check (or, for
//! mutations, race). For each kind of policy, the first engine of the preference order that acts
//! on that kind of policy and is in force (enabled and installed, or left to an external
//! adapter) writes; the others stand by. Engines of other mechanisms (KubeArmor, NetworkPolicy)
//! are not concerned and keep enforcing beside it.
//!
//! The choice is per kind of policy, not per intent: with Kyverno preferred and installed, the
//! admission engine writes nothing at all, not even for intents Kyverno does not enforce
//! (unAuthorizedSaTokenAccess), so a cluster running Kyverno gets exactly Nimbus's output.

use super::{Engine, NativeKind};
use crate::intents::Origin;
use std::collections::BTreeSet;
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

/// The engines of the admission-control mechanism, in the default order: Kyverno first, so
/// that the output stays Nimbus's wherever Kyverno is installed.
pub const ADMISSION_CONTROL: [Engine; 2] = [Engine::Kyverno, Engine::Admission];

/// The order in which engines of the same mechanism are preferred (`--engine-preference`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preference(Vec<Engine>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreferenceError {
    #[error("engine `{0}` is listed twice")]
    Repeated(Engine),
    #[error(
        "engine `{0}` has no alternative to be preferred to (only kyverno and admission, both \
         admission control, are chosen by preference)"
    )]
    NoAlternative(Engine),
}

impl Default for Preference {
    fn default() -> Self {
        Self(ADMISSION_CONTROL.to_vec())
    }
}

impl Preference {
    /// `order` first; the engines of the mechanism it leaves out follow in the default order.
    pub fn new(order: &[Engine]) -> Result<Self, PreferenceError> {
        let mut out = Vec::new();
        for engine in order {
            if !ADMISSION_CONTROL.contains(engine) {
                return Err(PreferenceError::NoAlternative(*engine));
            }
            if out.contains(engine) {
                return Err(PreferenceError::Repeated(*engine));
            }
            out.push(*engine);
        }
        out.extend(ADMISSION_CONTROL.iter().filter(|e| !order.contains(e)));
        Ok(Self(out))
    }

    pub fn order(&self) -> &[Engine] {
        &self.0
    }

    /// The engine of the mechanism that writes for policies of `origin`: the first in the
    /// order that acts on such policies and is in force. `None` when none is.
    pub fn in_force(&self, origin: Origin, engines: &EngineSet) -> Option<Engine> {
        self.0
            .iter()
            .copied()
            .find(|e| acts_on(*e, origin) && (engines.active(*e) || engines.external.contains(e)))
    }

    /// Whether `engine` stands by for policies of `origin`: another engine of its mechanism is
    /// in force there.
    pub fn stands_by(&self, engine: Engine, origin: Origin, engines: &EngineSet) -> bool {
        self.0.contains(&engine)
            && self
                .in_force(origin, engines)
                .is_some_and(|chosen| chosen != engine)
    }

    /// The engines preferred to `engine` that act on policies of `origin` (and so are not in
    /// force when `engine` is).
    pub fn preferred_to(&self, engine: Engine, origin: Origin) -> Vec<Engine> {
        self.0
            .iter()
            .copied()
            .take_while(|e| *e != engine)
            .filter(|e| acts_on(*e, origin))
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

    /// (preference, installed, enabled, external, origin, engine in force)
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
        assert_eq!(admission_first.order(), [A, K]);
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
            assert_eq!(preference.in_force(*origin, &engines), *want, "row {i}");
            for engine in ADMISSION_CONTROL {
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
            "admission,kyverno"
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
