//! Engine translators: a NimbusPolicy or ClusterNimbusPolicy, plus what the cluster looks like,
//! becomes the exact set of native objects every enabled engine wants, and the problems that
//! keep an intent from being enforced. Pure: no I/O, no clock, no panics on any input.
//!
//! An engine is one module declaring its [`EngineSpec`] as `SPEC`, registered by one line in
//! the [`engines!`] list below: [`Engine`], [`Engine::ALL`] and the registry derive from it.

mod build;
mod checks;
mod kinds;
mod preference;
pub mod pss;
mod spec;
mod translate;
mod translation;

use crate::intents::{BindingKind, Origin};
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

pub use checks::{check_intent, check_rule, sensitive_problem};
pub use k8tls::{
    DEFAULT_IMAGE as DEFAULT_K8TLS_IMAGE, DEFAULT_NAMESPACE as DEFAULT_K8TLS_NAMESPACE,
};
pub use kinds::*;
pub use kyverno::virtual_patch::{self, VirtualPatches};
pub use kyverno::{KyvernoApi, KyvernoKinds};
pub use preference::{ADMISSION_CONTROL, HANDOVER, Preference, PreferenceError, handover_wait};
pub use rbac::{DEFAULT_SANDBOX_CLUSTER_ROLES, sandbox_violations};
pub use spec::{AUDIT, AuditForm, Enforces, EngineSpec, Fact, Permissions, rules_read};
pub use translate::translate;
pub use translation::{EngineSet, Environment, Generated, PolicyInput, Problem, Translation};
// What engine modules build their translations with.
use build::{Emitted, Output, Rule, labels_only, metadata, native_name, object, selector_json};
use spec::{BINDING_OR_CLUSTER, CLUSTER, CLUSTER_BINDING_NAMESPACES, NAMESPACED};

/// Registers the built-in engines: `Variant => module` declares the module (whose `SPEC` is the
/// engine's [`EngineSpec`]), the [`Engine`] variant, its place in [`Engine::ALL`] and in the
/// registry. The order is translation order within a rule.
macro_rules! engines {
    ($($(#[$doc:meta])* $variant:ident => $module:ident,)*) => {
        $(mod $module;)*

        /// A built-in engine. Everything about it is in its [`EngineSpec`] ([`Engine::spec`]),
        /// declared by its module and registered in the `engines!` list.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Engine {
            $($(#[$doc])* $variant,)*
        }

        /// Every engine's registration, in [`Engine`] order.
        static ENGINES: &[&EngineSpec] = &[$(&$module::SPEC,)*];

        impl Engine {
            /// Every engine, in registration order.
            pub const ALL: [Engine; [$(Engine::$variant,)*].len()] = [$(Engine::$variant,)*];
        }
    };
}

engines! {
    NetworkPolicy => netpol,
    KubeArmor => kubearmor,
    Kyverno => kyverno,
    K8tls => k8tls,
    Rbac => rbac,
    Admission => admission,
}

impl Engine {
    pub fn spec(self) -> &'static EngineSpec {
        ENGINES[self as usize]
    }

    /// Short name used on the command line (`--disable-engines kubearmor`) and in the Helm
    /// values (`engines.kubearmor`).
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// `nimbus-<engine>`: the `app.kubernetes.io/managed-by` value on everything the engine
    /// generates (as Nimbus's adapters set it) and its server-side-apply field manager.
    pub fn manager(self) -> &'static str {
        self.spec().manager
    }

    /// Whether it acts on `intent` in a policy of `origin`.
    pub fn handles(self, intent: &str, origin: Origin) -> bool {
        self.spec()
            .origins(intent)
            .is_some_and(|o| o.contains(&origin))
    }
}

/// Whether `engine` can write: every kind it writes is served but its optional ones, or for
/// Kyverno, those of the API `kyverno` puts in force.
pub fn installed(
    engine: Engine,
    kyverno: KyvernoKinds,
    served: impl Fn(&NativeKind) -> bool,
) -> bool {
    match engine {
        Engine::Kyverno => kyverno.in_force(served).is_some(),
        _ => kinds(engine)
            .iter()
            .all(|k| served(k) || engine.spec().optional_kinds.contains(k)),
    }
}

/// The engines that enforce `intent` when bound by a binding of `kind` (of any kind: `None`).
pub fn enforcing(intent: &str, kind: Option<BindingKind>) -> BTreeSet<Engine> {
    Engine::ALL
        .into_iter()
        .filter(|e| {
            e.spec().origins(intent).is_some_and(|o| {
                kind.is_none_or(|kind| o.iter().any(|o| kind.origins().contains(o)))
            })
        })
        .collect()
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Engine::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Engine::ALL.iter().map(|e| e.name()).collect();
                format!("unknown engine `{s}` (known: {})", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_is_registered_once_in_its_place() {
        for engine in Engine::ALL {
            assert_eq!(engine.spec().engine, engine);
            assert_eq!(engine.manager(), format!("nimbus-{}", engine.name()));
        }
    }
}
